//! `kintsugi fabric bench`: verb throughput and round-trip latency of one
//! transport, against a raw baseline doing the same work in the same run.
//!
//! - [`plan`]: what runs, validated;
//! - [`workload`]: the addresses every client touches, the tcp frame sizes;
//! - [`target`]: the memory node under test (made for the run, or existing);
//! - [`measure`]: round-trip counting and sampled latency;
//! - [`fabric_run`]: phase 1, through the fabric;
//! - [`baseline_mem`] / [`baseline_echo`]: phase 2, raw memory / a bare TCP echo;
//! - [`report`]: the table and the JSON object.

pub mod baseline_echo;
pub mod baseline_mem;
pub mod fabric_run;
pub mod measure;
pub mod plan;
pub mod report;
pub mod target;
pub mod workload;

use harness::TransportKind;
use measure::Phase;
use plan::Plan;
use report::Report;
use target::Fabric;

/// Runs both phases of `plan`, progress on stderr.
pub fn run(plan: &Plan) -> crate::Result<Report> {
    let prepared = target::prepare(plan)?;
    let work = plan.work;
    let duration = humantime::format_duration(plan.duration);
    let baseline_kind = report::baseline_kind(plan.transport, prepared.memory.as_ref(), plan);

    eprintln!(
        "fabric bench: phase 1/2: fabric, {} {} B x {} over {} ({}), {duration} ...",
        work.op.name(),
        work.size,
        work.batch,
        plan.transport.name(),
        prepared.origin
    );
    let runs = match &prepared.fabric {
        Fabric::Inline(client) => fabric_run::run_inline(plan, client, prepared.region)?,
        Fabric::Remote => fabric_run::run_remote(plan, &prepared.nodes, prepared.region)?,
    };
    let fabric = Phase::merge(runs, work.batch as u64, work.bytes_per_round_trip())?;

    eprintln!("fabric bench: phase 2/2: baseline, {baseline_kind}, {duration} ...");
    let (runs, frames) = match (plan.transport, &prepared.memory) {
        (TransportKind::Local | TransportKind::Shm, Some(memory)) => (baseline_mem::run(plan, memory)?, None),
        _ => {
            let frames = work.frame_sizes();
            let server =
                baseline_echo::EchoServer::start(target::server_runtime(plan.threads, "echo")?, frames.1)?;
            (baseline_echo::run(plan, &server, frames)?, Some(frames))
        }
    };
    let baseline = Phase::merge(runs, work.batch as u64, work.bytes_per_round_trip())?;

    let report = Report {
        plan: plan.clone(),
        target: prepared.origin.clone(),
        baseline_kind,
        fabric,
        baseline,
        frames,
    };
    drop(prepared);
    Ok(report)
}
