//! `kintsugi bench ycsb` results: one row per (index, variant, workload,
//! distribution), a table, and throughput relative to the same index's
//! `optimal`.

use chaos::driver::ClientResult;
use chaos::workload::{Distribution, Workload};
use index::btree::Variant;
use serde::Serialize;

use super::format::{micros, thousands};
use super::ycsb_args::{IndexArg, Plan};

/// One measured combination (also the JSON array element).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub index: &'static str,
    pub variant: String,
    pub workload: String,
    pub dist: String,
    pub keys: u64,
    pub threads: usize,
    pub coroutines: usize,
    pub transport: String,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub round_trips_per_op: f64,
    pub verbs_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
    pub aborts: u64,
    pub repairs: u64,
    pub misses: u64,
}

impl Row {
    pub fn new(
        index: IndexArg,
        variant: Variant,
        workload: Workload,
        dist: Distribution,
        plan: &Plan,
        r: &ClientResult,
    ) -> Row {
        let ops = r.ops.max(1) as f64;
        let secs = plan.duration.as_secs_f64();
        Row {
            index: index.name(),
            variant: variant.to_string(),
            workload: workload.to_string(),
            dist: dist.to_string(),
            keys: plan.keys,
            threads: plan.threads,
            coroutines: plan.coroutines,
            transport: format!("{:?}", plan.transport).to_lowercase(),
            ops: r.ops,
            ops_per_sec: r.ops as f64 / secs,
            p50_us: r.latency_ns.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: r.latency_ns.value_at_quantile(0.99) as f64 / 1000.0,
            round_trips_per_op: r.fabric.round_trips as f64 / ops,
            verbs_per_op: r.fabric.verbs() as f64 / ops,
            bytes_read_per_op: r.fabric.bytes_read as f64 / ops,
            bytes_written_per_op: r.fabric.bytes_written as f64 / ops,
            aborts: r.tx.aborts,
            repairs: r.tx.repairs,
            misses: r.misses,
        }
    }
}

/// The results table.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<6} {:<8} {:<3} {:<8} {:>12} {:>8} {:>8} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8}\n",
        "index",
        "variant",
        "wl",
        "dist",
        "ops/s",
        "p50 us",
        "p99 us",
        "RT/op",
        "verbs",
        "B read",
        "B write",
        "aborts",
        "repairs"
    );
    for r in rows {
        s += &format!(
            "{:<6} {:<8} {:<3} {:<8} {:>12} {:>8} {:>8} {:>7.2} {:>7.2} {:>9.0} {:>9.0} {:>8} {:>8}\n",
            r.index,
            r.variant,
            r.workload,
            r.dist,
            thousands(r.ops_per_sec),
            micros(r.p50_us),
            micros(r.p99_us),
            r.round_trips_per_op,
            r.verbs_per_op,
            r.bytes_read_per_op,
            r.bytes_written_per_op,
            r.aborts,
            r.repairs
        );
    }
    s
}

/// Each variant's throughput relative to optimal's on the same index, per
/// workload and distribution (empty when optimal was not measured).
pub fn ratios(rows: &[Row]) -> String {
    let optimal: Vec<&Row> = rows.iter().filter(|r| r.variant == "optimal").collect();
    if optimal.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nthroughput relative to optimal\n");
    s += &format!(
        "{:<6} {:<8} {:<3} {:<8} {:>7}\n",
        "index", "variant", "wl", "dist", "ratio"
    );
    for r in rows.iter().filter(|r| r.variant != "optimal") {
        if let Some(o) = optimal
            .iter()
            .find(|o| o.index == r.index && o.workload == r.workload && o.dist == r.dist)
        {
            let ratio = if o.ops_per_sec > 0.0 {
                r.ops_per_sec / o.ops_per_sec
            } else {
                0.0
            };
            s += &format!(
                "{:<6} {:<8} {:<3} {:<8} {:>7.3}\n",
                r.index, r.variant, r.workload, r.dist, ratio
            );
        }
    }
    s
}
