//! `kintsugi bench smallbank` and `kintsugi bench tatp`: FORD's and
//! Motor's OLTP workloads on rTX and on the DTX baseline (docs/oltp.md).
//!
//! Every table row is one record (an rTX object or a DTX record), created
//! by the loader and kept in an array by row number ([`Tables`]): there is
//! no index under the tables, so a transaction finds its rows by key
//! arithmetic. Each transaction is written once, over the [`engine`]
//! abstraction, and runs on either protocol.
//!
//! - [`engine`]: [`Engine`](engine::Engine) and [`OltpTx`](engine::OltpTx)
//!   over `TxClient`/`Tx` and `DtxClient`/`DtxTx`;
//! - [`smallbank`], [`tatp`]: record layouts and transaction bodies
//!   ([`OltpWorkload`]); the transaction streams are `workload`'s;
//! - [`plan`], [`run`] ([`worker`]: one client's loop), [`report`].

// See engine.rs: nothing here is spawned or needs Send.
#![allow(async_fn_in_trait)]

pub mod engine;
pub mod plan;
pub mod report;
pub mod run;
pub mod smallbank;
pub mod tatp;
pub mod worker;

use engine::OltpTx;
use fabric::le_word;
use txn::TxError;

/// Every table's records, by table number and row.
pub type Tables<R> = Vec<Vec<R>>;

/// How a transaction that committed ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The workload's rules turned it down (SmallBank: a payment without
    /// funds; TATP: a row that is not there, a slot already taken): it
    /// committed without writing. FORD and Motor count these as aborts
    /// that are not retried.
    pub declined: bool,
    /// What it changed of the conserved quantity
    /// ([`OltpWorkload::MEASURE`]): cents added to the balances, or
    /// CallForwarding rows added.
    pub effect: i64,
}

/// A benchmark: its tables, its record images and its transactions.
pub trait OltpWorkload: Sync {
    /// One transaction and its parameters.
    type Txn: Copy;
    /// A client's stream of transactions.
    type Gen: Iterator<Item = Self::Txn>;

    /// The benchmark's name (`smallbank`, `tatp`).
    const NAME: &'static str;
    /// The transaction types' names, by [`OltpWorkload::kind`].
    const KINDS: &'static [&'static str];
    /// The tables' names, by table number.
    const TABLES: &'static [&'static str];
    /// What the check adds up over every record ([`OltpWorkload::measure`]).
    const MEASURE: &'static str;

    /// Units loaded (accounts, subscribers): each gives rows of every table.
    fn units(&self) -> u64;

    /// Records per unit, over every table.
    fn records_per_unit(&self) -> u64;

    /// The largest record's data bytes, for sizing the region.
    fn record_bytes_max(&self) -> u32;

    /// Appends unit `unit`'s rows to `out` as (table, image), in row order
    /// per table.
    fn images(&self, unit: u64, out: &mut Vec<(usize, Vec<u8>)>);

    /// Client `stream`'s transactions.
    fn generator(&self, stream: u64) -> Self::Gen;

    /// A transaction's type, an index into [`OltpWorkload::KINDS`].
    fn kind(txn: &Self::Txn) -> usize;

    /// Whether transactions of type `kind` never write.
    fn read_only(kind: usize) -> bool;

    /// Runs `txn`'s body in `tx` on `tables`.
    async fn execute<T: OltpTx>(
        &self,
        tx: &mut T,
        tables: &Tables<T::Rec>,
        txn: Self::Txn,
    ) -> Result<Outcome, TxError>;

    /// What a record of `table` holding `bytes` adds to the conserved
    /// quantity.
    fn measure(&self, table: usize, bytes: &[u8]) -> i64;

    /// Why row `row` of `table` holding `bytes` is not a valid row, if it
    /// is not.
    fn inconsistency(&self, table: usize, row: u64, bytes: &[u8]) -> Option<String>;
}

/// A little-endian i64 at `at` of `bytes`.
pub(crate) fn i64_at(bytes: &[u8], at: usize) -> i64 {
    le_word(bytes, at) as i64
}

/// The byte at `at` of `bytes` (0 past the end).
pub(crate) fn byte_at(bytes: &[u8], at: usize) -> u8 {
    bytes.get(at).copied().unwrap_or(0)
}

/// The record of `table` at `row`, or a `BadObject` error naming them (a
/// generator naming a row that was never loaded is a bug).
pub(crate) fn row<R: Copy>(tables: &Tables<R>, table: usize, row: u64) -> Result<R, TxError> {
    tables
        .get(table)
        .and_then(|t| t.get(usize::try_from(row).ok()?))
        .copied()
        .ok_or_else(|| TxError::BadObject(format!("row {row} of table {table} was never loaded")))
}
