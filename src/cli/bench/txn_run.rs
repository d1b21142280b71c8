//! `kintsugi bench txn`: load, run the clients, check, report.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::bail;
use txn::TxConfig;

use super::check;
use super::cluster::{self, Cluster, FIRST_WORKER};
use super::common::seed_for;
use super::format::{duration, thousands};
use super::threads::{on_threads, runtime};
use super::txn_args::TxnArgs;
use super::txn_report::TxnReport;
use super::worker::{ClientRun, Worker, SAMPLE_EVERY, WARMUP_TXNS};

pub fn run(args: TxnArgs) -> anyhow::Result<ExitCode> {
    let plan = args.validate()?;
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
            anyhow::Ok((rt, worker))
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

    let report = TxnReport {
        plan: &plan,
        origin: cluster.origin.clone(),
        load_time,
        total,
        check,
    };
    crate::cli::print_report(common.json, || report.json(), || report.table())?;
    if !check.ok() {
        bail!("the end-of-run check failed: {}", check.describe(plan.objects));
    }
    Ok(ExitCode::SUCCESS)
}
