//! `kintsugi bench ...`: the flags of each benchmark (`*_args.rs`, each
//! validated into the plan [`bench`] runs) and the printing of its report
//! as a table or JSON. The benchmarks themselves are the `bench` crate.
//!
//! - `bench txn`: rTX throughput, latency and cost per commit;
//! - `bench lease`: the paper's Figure 18, expired leases of live clients;
//! - `bench ycsb`: YCSB A–E on the B+tree and A–D on RACE hashing;
//! - `bench rehash`: growing a full RACE hash table, inserts meanwhile;
//! - `bench control`: the control plane's commits, watches and failovers;
//! - `bench promote`: planned promotions under YCSB A on a local cluster;
//! - `bench recover`: memory nodes killed under YCSB A, recovery's phases
//!   and the re-replication rate;
//! - `bench resp`: redis-benchmark against the Redis-protocol gateway and
//!   redis-server, as ratios;
//! - `bench smallbank`, `bench tatp`: FORD's and Motor's OLTP workloads on
//!   rtx and dtx, with a conservation and consistency check.
//!
//! [`common`] holds the flags `txn` and `lease` share.

mod common;
mod control_args;
mod lease_args;
mod oltp_args;
mod promote_args;
mod recover_args;
mod rehash_args;
mod resp_args;
mod txn_args;
mod ycsb_args;

use std::process::ExitCode;

use anyhow::Context;
use bench::rehash_plan::JsonTo;

pub use control_args::ControlBenchArgs;
pub use lease_args::LeaseArgs;
pub use oltp_args::{SmallBankArgs, TatpArgs};
pub use promote_args::PromoteArgs;
pub use recover_args::RecoverArgs;
pub use rehash_args::RehashArgs;
pub use resp_args::RespArgs;
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
    /// Planned promotions under YCSB A on a local cluster: how long from a promotion's commit until
    /// every replica fenced, the new primary was rebuilt, the region published, and a client served.
    Promote(PromoteArgs),
    /// Memory nodes killed under YCSB A on a local cluster: detection, promotion, serving again,
    /// the re-replication copy's rate and the write-blocking window, per role of the killed node.
    Recover(RecoverArgs),
    /// redis-benchmark against the Redis-protocol gateway (B+tree and hash, rtx) and redis-server on
    /// this machine, in alternating rounds: requests/s per test and pipeline depth, and the ratios.
    Resp(RespArgs),
    /// SmallBank (FORD's and Motor's six-type banking mix, 90% of accounts from the hottest 4%) on rtx
    /// and dtx: commits/s, aborts by reason, latency, round trips and verbs per transaction type, and a
    /// check that the balances add up.
    Smallbank(SmallBankArgs),
    /// TATP (seven types, 80% read-only; call forwardings as flags in pre-allocated slots) on rtx and
    /// dtx: commits/s, aborts by reason, latency, round trips and verbs per transaction type, and a
    /// check that every row is valid and unlocked.
    Tatp(TatpArgs),
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Txn(args) => {
            let plan = args.validate()?;
            let report = bench::txn_run::run(&plan)?;
            super::print_report(plan.common.json, || report.json(), || report.table())?;
            fail_on(report.failure())
        }
        BenchCommand::Lease(args) => {
            let plan = args.validate()?;
            let report = bench::lease_run::run(&plan)?;
            super::print_report(plan.common.json, || report.json(), || report.table())?;
            fail_on(report.failure())
        }
        BenchCommand::Ycsb(args) => {
            let plan = args.validate()?;
            let report = bench::ycsb_run::run(&plan)?;
            print!("{}", report.table());
            if let Some(path) = &plan.json {
                write_json(path, &report.json()?, "bench ycsb")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Control(args) => {
            let plan = args.validate()?;
            let report = bench::control_run::run(&plan)?;
            super::print_report(plan.json, || report.json(), || report.table())?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Promote(args) => {
            let plan = args.validate()?;
            let report = bench::promote_run::run(&plan)?;
            super::print_report(plan.json, || report.json(), || report.table())?;
            fail_on(report.failure())
        }
        BenchCommand::Recover(args) => {
            let plan = args.validate()?;
            let report = bench::recover_run::run(&plan)?;
            super::print_report(plan.json, || report.json(), || report.table())?;
            fail_on(report.failure())
        }
        BenchCommand::Resp(args) => {
            let (plan, json) = args.validate()?;
            let report = bench::resp::run::run(&plan)?;
            super::print_report(json, || report.json(), || report.table())?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Smallbank(args) => oltp(args.validate()?),
        BenchCommand::Tatp(args) => oltp(args.validate()?),
        BenchCommand::Rehash(args) => {
            let plan = args.validate()?;
            let report = bench::rehash_run::run(&plan)?;
            let to_stdout = plan.json == Some(JsonTo::Stdout);
            super::print_report(to_stdout, || report.json(), || report.table())?;
            if let Some(JsonTo::File(path)) = &plan.json {
                write_json(path, &report.json(), "bench rehash")?;
            }
            fail_on(report.failure())
        }
    }
}

/// Runs `bench smallbank` or `bench tatp` and prints its report.
fn oltp(plan: bench::oltp::plan::OltpPlan) -> anyhow::Result<ExitCode> {
    let report = bench::oltp::run::run(&plan)?;
    super::print_report(plan.json, || report.json(), || report.table())?;
    fail_on(report.failure())
}

/// Exits non-zero, after the report, when a run's end check failed.
fn fail_on(failure: Option<String>) -> anyhow::Result<ExitCode> {
    match failure {
        Some(why) => anyhow::bail!(why),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Writes a report's JSON to `path` and says so on stderr.
fn write_json(path: &std::path::Path, json: &str, what: &str) -> anyhow::Result<()> {
    std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("{what}: wrote {}", path.display());
    Ok(())
}
