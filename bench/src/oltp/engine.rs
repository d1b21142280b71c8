//! One transaction abstraction over rTX ([`TxClient`], [`Tx`], records as
//! [`RawObj`]) and DTX ([`DtxClient`], [`DtxTx`], records as [`Record`]),
//! so that each SmallBank and TATP transaction is written once.
//!
//! `read_for_update` is where the two differ: DTX locks the record and
//! reads it in one round trip (FORD's hitchhiked CAS), rTX reads it as any
//! other (its locks are taken at commit).

// The bench runs every client on its own current-thread runtime and never
// spawns these futures, so the auto-trait bounds `async fn` in a public
// trait cannot state are not needed.
#![allow(async_fn_in_trait)]

use fabric::{GlobalAddr, Stats};
use txn::dtx::record::Record;
use txn::dtx::{DtxClient, DtxTx};
use txn::{RawObj, Tx, TxClient, TxError, TxStats};

/// A transaction of either protocol.
pub trait OltpTx {
    /// A record handle.
    type Rec: Copy;

    /// Reads `rec` (validated at commit).
    async fn read(&mut self, rec: Self::Rec) -> Result<&[u8], TxError>;

    /// Reads `rec`, which the transaction may then write (DTX locks it now).
    async fn read_for_update(&mut self, rec: Self::Rec) -> Result<&[u8], TxError>;

    /// Replaces `bytes.len()` bytes of `rec` from `at` (at commit).
    async fn write_part(&mut self, rec: Self::Rec, at: usize, bytes: &[u8]) -> Result<(), TxError>;
}

/// A transaction client of either protocol.
pub trait Engine {
    /// A record handle.
    type Rec: Copy + std::fmt::Debug + Send + Sync;
    /// Its transactions.
    type Tx<'a>: OltpTx<Rec = Self::Rec>
    where
        Self: 'a;

    /// Creates a record holding `bytes`, outside any transaction.
    async fn create(&mut self, bytes: &[u8]) -> Result<Self::Rec, TxError>;

    /// Runs `body` until it commits, retrying aborts with backoff.
    async fn run<R>(
        &mut self,
        body: impl AsyncFnMut(&mut Self::Tx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError>;

    /// Sends what the client still owes (a DTX client's last release)
    /// before it goes idle.
    async fn quiesce(&mut self) -> Result<(), TxError>;

    /// The client's transaction counters.
    fn tx_stats(&self) -> TxStats;

    /// The client's fabric counters.
    fn fabric_stats(&self) -> Stats;

    /// The owner id, for messages.
    fn owner(&self) -> txn::OwnerId;

    /// Where `rec`'s lock word is (held = `LockWord::is_locked`, for both
    /// protocols: a free DTX lock is 0, an unlocked rTX word carries its
    /// version).
    fn lock_addr(rec: Self::Rec) -> GlobalAddr;
}

impl OltpTx for Tx<'_> {
    type Rec = RawObj;

    async fn read(&mut self, rec: RawObj) -> Result<&[u8], TxError> {
        self.read_raw(rec).await
    }

    async fn read_for_update(&mut self, rec: RawObj) -> Result<&[u8], TxError> {
        self.read_raw(rec).await
    }

    async fn write_part(&mut self, rec: RawObj, at: usize, bytes: &[u8]) -> Result<(), TxError> {
        Tx::write_part(self, rec, at, bytes).await
    }
}

impl Engine for TxClient {
    type Rec = RawObj;
    type Tx<'a> = Tx<'a>;

    async fn create(&mut self, bytes: &[u8]) -> Result<RawObj, TxError> {
        self.create_raw(bytes).await
    }

    async fn run<R>(
        &mut self,
        body: impl AsyncFnMut(&mut Tx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        TxClient::run(self, body).await
    }

    async fn quiesce(&mut self) -> Result<(), TxError> {
        Ok(())
    }

    fn tx_stats(&self) -> TxStats {
        self.stats()
    }

    fn fabric_stats(&self) -> Stats {
        self.fabric_ref().stats()
    }

    fn owner(&self) -> txn::OwnerId {
        TxClient::owner(self)
    }

    fn lock_addr(rec: RawObj) -> GlobalAddr {
        rec.lock_addr()
    }
}

impl OltpTx for DtxTx<'_> {
    type Rec = Record;

    async fn read(&mut self, rec: Record) -> Result<&[u8], TxError> {
        DtxTx::read(self, rec).await
    }

    async fn read_for_update(&mut self, rec: Record) -> Result<&[u8], TxError> {
        DtxTx::read_for_update(self, rec).await
    }

    async fn write_part(&mut self, rec: Record, at: usize, bytes: &[u8]) -> Result<(), TxError> {
        DtxTx::write_part(self, rec, at, bytes).await
    }
}

impl Engine for DtxClient {
    type Rec = Record;
    type Tx<'a> = DtxTx<'a>;

    async fn create(&mut self, bytes: &[u8]) -> Result<Record, TxError> {
        self.create_raw(bytes).await
    }

    async fn run<R>(
        &mut self,
        body: impl AsyncFnMut(&mut DtxTx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        DtxClient::run(self, body).await
    }

    async fn quiesce(&mut self) -> Result<(), TxError> {
        self.release_pending().await
    }

    fn tx_stats(&self) -> TxStats {
        self.stats()
    }

    fn fabric_stats(&self) -> Stats {
        self.fabric_ref().stats()
    }

    fn owner(&self) -> txn::OwnerId {
        DtxClient::owner(self)
    }

    fn lock_addr(rec: Record) -> GlobalAddr {
        rec.lock_addr()
    }
}
