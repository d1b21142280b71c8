//! `kintsugi bench ...`: benchmarks of the layers above the fabric.
//!
//! - `bench txn`: rTX throughput, latency and cost per commit (round trips,
//!   verbs, bytes) for read-modify-write transactions on random objects;
//! - `bench ycsb`: YCSB A–E on the B+tree and A–D on RACE hashing, per
//!   variant (`ycsb_args`, `ycsb_run`, `ycsb_measure`, `ycsb_report`);
//! - `bench rehash`: growing a full RACE hash table per variant, and the
//!   throughput of clients inserting meanwhile (`rehash_args`,
//!   `rehash_run`, `rehash_report`);
//! - `bench lease`: the paper's Figure 18, how often live clients meet each
//!   other's locks with an expired lease, with and without lease regulation.
//!
//! Modules, one idea each:
//!
//! - [`common`]: flags both commands share and their validation, and
//!   helpers every bench uses (cores, seeds, load bars, `median`);
//! - [`txn_args`] / [`lease_args`]: each command's flags, validated into a plan;
//! - [`cluster`]: the memory (fresh in-process nodes or shm images), the heap
//!   and the objects, and a transaction client per owner id;
//! - [`worker`]: one client's loop of transactions and what it counted;
//! - [`threads`]: client threads that start their clocks together;
//! - [`check`]: the end-of-run invariant (every committed increment is there);
//! - [`probe`]: how far ahead of the clock a client's leases have run;
//! - [`txn_run`] / [`txn_report`], [`lease_run`] / [`lease_report`]: the two
//!   commands and their tables and JSON objects;
//! - [`format`]: number formatting for the tables.

mod check;
pub(super) mod cluster;
mod common;
mod control_args;
mod control_report;
mod control_run;
pub(super) mod format;
mod lease_args;
mod lease_report;
mod lease_run;
mod poll;
mod probe;
mod rehash_args;
mod rehash_report;
mod rehash_run;
pub(super) mod threads;
mod txn_args;
mod txn_report;
mod txn_run;
mod worker;
mod ycsb_args;
mod ycsb_measure;
mod ycsb_report;
mod ycsb_run;

use std::process::ExitCode;

pub use control_args::ControlBenchArgs;
pub use lease_args::LeaseArgs;
pub use rehash_args::RehashArgs;
pub use txn_args::TxnArgs;
pub use ycsb_args::YcsbArgs;

/// `kintsugi bench ...`.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// rTX throughput and cost: read-modify-write transactions on random objects; commits/s,
    /// aborts/s, repairs/s, commit latency, round trips, verbs and bytes per commit.
    Txn(TxnArgs),
    /// Lease accuracy (rTX paper, Figure 18): how often live clients meet a lock whose lease expired,
    /// per drift and locks per transaction, with and without lease regulation.
    Lease(LeaseArgs),
    /// YCSB A-E on an index (B+tree; RACE hashing runs A-D), per variant, workload and distribution: throughput,
    /// latency, round trips, verbs and bytes per op, aborts and repairs, and throughput
    /// relative to optimal.
    Ycsb(YcsbArgs),
    /// The control plane (member processes on loopback): commit throughput and latency, how soon
    /// a watcher on a follower sees a map change, and how long writes stall when the leader dies.
    Control(ControlBenchArgs),
    /// Rehash of a full RACE hash table, per variant: how long growing it (every subtable split
    /// once) takes, what it costs in verbs and bytes, and the throughput of clients inserting meanwhile.
    Rehash(RehashArgs),
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Txn(args) => txn_run::run(args),
        BenchCommand::Lease(args) => lease_run::run(args),
        BenchCommand::Ycsb(args) => ycsb_run::run(args),
        BenchCommand::Control(args) => control_run::run(args),
        BenchCommand::Rehash(args) => rehash_run::run(args),
    }
}
