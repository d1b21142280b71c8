//! `kintsugi bench txn`: load, run the clients, check, report.

use std::time::Instant;

use txn::TxConfig;

use crate::check;
use crate::cluster::{self, Cluster, FIRST_WORKER};
use crate::common::seed_for;
use crate::format::{duration, thousands};
use crate::threads::{on_threads, runtime};
use crate::txn_plan::TxnPlan;
use crate::txn_report::TxnReport;
use crate::worker::{ClientRun, Worker, SAMPLE_EVERY, WARMUP_TXNS};

/// Runs `plan`, progress on stderr; the report says whether the end-of-run
/// check passed ([`TxnReport::failure`]).
pub fn run(plan: &TxnPlan) -> crate::Result<TxnReport> {
    let common = plan.common;
    let rt = runtime()?;
    let region = cluster::region_bytes(plan.objects, common.object_bytes, plan.threads, plan.write_set)?;
    let cluster = rt.block_on(Cluster::new(&common, region, plan.threads))?;

    eprintln!(
        "txn bench: loading {} objects of {} B ({}, {} replica(s)) ...",
        thousands(plan.objects as f64),
        common.object_bytes,
        common.transport.name(),
        common.replicas
    );
    let loading = Instant::now();
    let (mut checker, objects) = rt.block_on(cluster.load(plan.objects, common.object_bytes))?;
    let load_time = loading.elapsed();

    eprintln!(
        "txn bench: {} client thread(s), {}-object read-modify-write transactions, {} ...",
        plan.threads,
        plan.write_set,
        duration(plan.duration)
    );
    let runs = on_threads("txn", plan.threads, |t, gate| {
        let setup = (|| {
            let rt = runtime()?;
            let client = cluster.client(FIRST_WORKER + t as u16, TxConfig::default(), None)?;
            let mut worker = Worker::new(client, &objects, plan.write_set, seed_for(common.seed, t as u64));
            rt.block_on(worker.warm_up(WARMUP_TXNS))?;
            Ok::<_, crate::BenchError>((rt, worker))
        })();
        gate.wait();
        let (rt, worker) = setup?;
        let start = Instant::now();
        rt.block_on(worker.run(start, start + plan.duration, SAMPLE_EVERY))
    })?;
    let total = ClientRun::merge(runs)?;

    eprintln!("txn bench: reading the counters back ...");
    let expected = total.committed_total * plan.write_set as u64;
    let check = rt.block_on(check::counters(&mut checker, &objects, expected))?;

    Ok(TxnReport {
        plan: *plan,
        origin: cluster.origin.clone(),
        load_time,
        total,
        check,
    })
}
