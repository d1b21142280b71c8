//! `kintsugi bench lease`: one fresh cluster and one run of live clients per
//! cell (locks x drift x regulation), then the Figure 18 tables.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use txn::TxConfig;

use crate::check::{self, Check};
use crate::cluster::{self, Cluster, FIRST_WORKER};
use crate::common::seed_for;
use crate::format::{duration, percent, tick_millis};
use crate::lease_report::LeaseReport;
use crate::threads::{on_threads, runtime};
use crate::txn_plan::LeasePlan;
use crate::worker::{ClientRun, Worker};

/// Untimed transactions per client before a cell's clock starts.
const WARMUP_TXNS: u64 = 4;
/// Random streams of the clients' object choices start here (see `seed_for`);
/// their clock skews use streams `0..threads`.
const CHOICE_STREAMS: u64 = 1 << 32;

/// One cell's configuration and results.
pub struct Cell {
    /// Objects written (locked) per transaction in this cell.
    pub locks: usize,
    /// The drift every lease of this cell adds.
    pub drift: Duration,
    /// Whether leases grow with the locks taken (`now + n x op_time + drift`)
    /// rather than being fixed (`now + drift`).
    pub regulated: bool,
    /// The lease length this cell's commits used, in lease ticks (1/256 ms).
    pub lease_ticks: u64,
    /// What the cell's clients did, merged.
    pub run: ClientRun,
    /// The end-of-cell check of the counters and locks.
    pub check: Check,
}

impl Cell {
    /// Transactions that met an expired lock of a live holder / transactions.
    pub fn rate(&self) -> f64 {
        self.run.expired_txns as f64 / self.run.txns.max(1) as f64
    }
}

/// The lease rule of a cell: the TxConfig default with `op_time`, or a fixed
/// lease (`op_time` zero).
fn config(plan: &LeasePlan, drift: Duration, regulated: bool) -> TxConfig {
    TxConfig {
        op_time: if regulated { plan.op_time } else { Duration::ZERO },
        drift,
        ..TxConfig::default()
    }
}

/// Each client's clock skew in ms, the same in every cell.
fn clock_skews(plan: &LeasePlan) -> Vec<i64> {
    let s = plan.clock_skew_ms;
    (0..plan.threads)
        .map(|t| StdRng::seed_from_u64(seed_for(plan.common.seed, t as u64)).gen_range(-s..=s))
        .collect()
}

/// Runs `plan`, progress on stderr; the report says whether every cell's
/// check passed ([`LeaseReport::failure`]).
pub fn run(plan: &LeasePlan) -> crate::Result<LeaseReport> {
    let skews = clock_skews(plan);
    let total = plan.locks.len() * plan.drifts.len() * 2;
    eprintln!(
        "lease bench: {total} cells of {} each, {} client threads, {} objects, clock skews (ms) {skews:?}",
        duration(plan.duration),
        plan.threads,
        plan.objects,
    );
    let mut cells = Vec::with_capacity(total);
    for &locks in &plan.locks {
        for &drift in &plan.drifts {
            for regulated in [true, false] {
                let lease_ticks = config(plan, drift, regulated).lease_ticks(locks);
                eprint!(
                    "lease bench: cell {}/{total}: {locks} lock(s), drift {}, {} regulation (lease {}) ... ",
                    cells.len() + 1,
                    duration(drift),
                    if regulated { "with" } else { "without" },
                    tick_millis(lease_ticks as i64),
                );
                let (run, check) = run_cell(plan, locks, config(plan, drift, regulated), &skews)?;
                let cell = Cell {
                    locks,
                    drift,
                    regulated,
                    lease_ticks,
                    run,
                    check,
                };
                eprintln!(
                    "{} of {} transactions met an expired lock ({})",
                    cell.run.expired_txns,
                    cell.run.txns,
                    percent(cell.rate())
                );
                cells.push(cell);
            }
        }
    }

    Ok(LeaseReport {
        plan: plan.clone(),
        skews,
        cells,
    })
}

/// A fresh cluster, `plan.threads` live clients writing `locks` objects per
/// transaction under `config` for `plan.duration`, and the check.
fn run_cell(
    plan: &LeasePlan,
    locks: usize,
    config: TxConfig,
    skews: &[i64],
) -> crate::Result<(ClientRun, Check)> {
    let common = plan.common;
    let rt = runtime()?;
    let region = cluster::region_bytes(plan.objects, common.object_bytes, plan.threads, locks)?;
    let cluster = rt.block_on(Cluster::new(&common, region, plan.threads))?;
    let (mut checker, objects) = rt.block_on(cluster.load(plan.objects, common.object_bytes))?;
    let runs = on_threads("lease", plan.threads, |t, gate| {
        let setup = (|| {
            let rt = runtime()?;
            // No skew at all: keep the transport's inline path.
            let skew = (plan.clock_skew_ms > 0).then_some(skews[t]);
            let client = cluster.client(FIRST_WORKER + t as u16, config.clone(), skew)?;
            let seed = seed_for(common.seed, CHOICE_STREAMS + t as u64);
            let mut worker = Worker::new(client, &objects, locks, seed);
            rt.block_on(worker.warm_up(WARMUP_TXNS))?;
            Ok::<_, crate::BenchError>((rt, worker))
        })();
        gate.wait();
        let (rt, worker) = setup?;
        let start = Instant::now();
        rt.block_on(worker.run(start, start + plan.duration, 1))
    })?;
    let run = ClientRun::merge(runs)?;
    let expected = run.committed_total * locks as u64;
    let check = rt.block_on(check::counters(&mut checker, &objects, expected))?;
    Ok((run, check))
}
