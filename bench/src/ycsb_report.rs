//! `kintsugi bench ycsb` results: one row per (index, variant, workload,
//! distribution, round), a table, and throughput relative to the same
//! index's `optimal` in the same round (over several rounds: the median and
//! the range).

use index::btree::Variant;
use serde::Serialize;
use workload::driver::ClientResult;
use workload::{Distribution, Workload};

use crate::common::median;
use crate::format::{micros, thousands};
use crate::ycsb_plan::{IndexArg, Plan};

/// One measured combination (also the JSON array element).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The index measured (btree or hash).
    pub index: &'static str,
    /// The variant (optimal or rtx).
    pub variant: String,
    /// The YCSB workload (a to e).
    pub workload: String,
    /// The request distribution (uniform or zipf).
    pub dist: String,
    /// Which pass over the cells (1-based; `--rounds`).
    pub round: usize,
    /// Keys bulk-loaded before the run (`--keys`).
    pub keys: u64,
    /// Client threads (`--threads`).
    pub threads: usize,
    /// Clients per thread (`--coroutines`).
    pub coroutines: usize,
    /// Where the memory was (`--transport`).
    pub transport: String,
    /// Ops all clients together completed in the timed `--duration` (warm-up
    /// excluded).
    pub ops: u64,
    /// Ops per second: `ops` over `--duration`.
    pub ops_per_sec: f64,
    /// Median op latency in microseconds, of the sampled ops (one in 16).
    pub p50_us: f64,
    /// 99th-percentile op latency in microseconds, of the sampled ops.
    pub p99_us: f64,
    /// Round trips per op, mean over the run.
    pub round_trips_per_op: f64,
    /// Verbs per op, mean over the run.
    pub verbs_per_op: f64,
    /// Bytes read per op, mean over the run.
    pub bytes_read_per_op: f64,
    /// Bytes written per op, mean over the run.
    pub bytes_written_per_op: f64,
    /// Aborted rTX attempts over the run (0 for optimal, which runs no rTX).
    pub aborts: u64,
    /// Repairs of other owners' rTX transactions over the run.
    pub repairs: u64,
    /// Reads and updates that found no key, and scans that found nothing.
    pub misses: u64,
}

impl Row {
    /// The row of one cell, from `r`: every client's results added up.
    pub fn new(
        index: IndexArg,
        variant: Variant,
        workload: Workload,
        dist: Distribution,
        round: usize,
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
            round,
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

/// Every row of a run, in the order they ran.
#[derive(Clone, Debug)]
pub struct YcsbReport {
    /// One per index, variant, workload, distribution and round.
    pub rows: Vec<Row>,
    /// Rounds the run had (the table shows medians when more than one).
    pub rounds: usize,
    /// What the memory was (the first run's; every run's is alike).
    pub memory: String,
}

impl YcsbReport {
    /// The rows as a JSON array.
    pub fn json(&self) -> crate::Result<String> {
        Ok(serde_json::to_string_pretty(&self.rows)?)
    }

    /// The table, then the ratios to optimal, then rtx's to dtx (the
    /// paper's "rTX is 1.2-2x faster than DTX").
    pub fn table(&self) -> String {
        format!(
            "{}{}{}memory: {}\n",
            table(&self.rows, self.rounds > 1),
            ratios(&self.rows),
            ratios_to(&self.rows, "dtx", Some("rtx")),
            self.memory
        )
    }
}

/// The results table, with a round column when there were several.
pub fn table(rows: &[Row], rounds: bool) -> String {
    let round = |r: &str| if rounds { format!("{r:>5} ") } else { String::new() };
    let mut s = format!(
        "{}{:<6} {:<8} {:<3} {:<8} {:>12} {:>8} {:>8} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8}\n",
        round("round"),
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
            "{}{:<6} {:<8} {:<3} {:<8} {:>12} {:>8} {:>8} {:>7.2} {:>7.2} {:>9.0} {:>9.0} {:>8} {:>8}\n",
            round(&r.round.to_string()),
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

/// One cell's throughput ratios against optimal, one per round.
#[derive(Debug)]
struct Cell<'a> {
    index: &'a str,
    variant: &'a str,
    workload: &'a str,
    dist: &'a str,
    ratios: Vec<f64>,
}

impl Cell<'_> {
    fn same(&self, r: &Row) -> bool {
        (self.index, self.variant, self.workload, self.dist)
            == (r.index, r.variant.as_str(), r.workload.as_str(), r.dist.as_str())
    }
}

/// Each variant's throughput relative to optimal's on the same index, per
/// workload and distribution, each round against the same round's optimal;
/// over several rounds the median ratio and the range (empty when optimal
/// was not measured).
pub fn ratios(rows: &[Row]) -> String {
    ratios_to(rows, "optimal", None)
}

/// [`ratios`] against `base` instead of optimal, for the variant `only`
/// (every other variant when `None`).
pub fn ratios_to(rows: &[Row], base: &str, only: Option<&str>) -> String {
    let mut cells: Vec<Cell> = Vec::new();
    let measured = |r: &&Row| r.variant != base && only.is_none_or(|v| r.variant == v);
    for r in rows.iter().filter(measured) {
        let Some(o) = rows.iter().find(|o| {
            o.variant == base
                && (o.index, &o.workload, &o.dist, o.round) == (r.index, &r.workload, &r.dist, r.round)
        }) else {
            continue;
        };
        let ratio = if o.ops_per_sec > 0.0 {
            r.ops_per_sec / o.ops_per_sec
        } else {
            0.0
        };
        match cells.iter_mut().find(|c| c.same(r)) {
            Some(c) => c.ratios.push(ratio),
            None => cells.push(Cell {
                index: r.index,
                variant: &r.variant,
                workload: &r.workload,
                dist: &r.dist,
                ratios: vec![ratio],
            }),
        }
    }
    if cells.is_empty() {
        return String::new();
    }
    let rounds = cells.iter().any(|c| c.ratios.len() > 1);
    let mut s = format!("\nthroughput relative to {base}\n");
    s += &format!(
        "{:<6} {:<8} {:<3} {:<8} {:>7}",
        "index", "variant", "wl", "dist", "ratio"
    );
    s += if rounds { "     min     max rounds\n" } else { "\n" };
    for c in &cells {
        s += &format!(
            "{:<6} {:<8} {:<3} {:<8} {:>7.3}",
            c.index,
            c.variant,
            c.workload,
            c.dist,
            median(&c.ratios)
        );
        if rounds {
            let min = c.ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let max = c.ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            s += &format!(" {min:>7.3} {max:>7.3} {:>6}", c.ratios.len());
        }
        s += "\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, workload: &str, round: usize, ops_per_sec: f64) -> Row {
        Row {
            index: "btree",
            variant: variant.into(),
            workload: workload.into(),
            dist: "uniform".into(),
            round,
            keys: 1,
            threads: 1,
            coroutines: 1,
            transport: "local".into(),
            ops: 1,
            ops_per_sec,
            p50_us: 1.0,
            p99_us: 1.0,
            round_trips_per_op: 1.0,
            verbs_per_op: 1.0,
            bytes_read_per_op: 1.0,
            bytes_written_per_op: 0.0,
            aborts: 0,
            repairs: 0,
            misses: 0,
        }
    }

    #[test]
    fn each_round_is_divided_by_its_own_optimal() {
        // Round 2's machine ran at half speed: its ratio is still 0.8.
        let rows = [
            row("optimal", "a", 1, 100.0),
            row("rtx", "a", 1, 80.0),
            row("rtx", "a", 2, 40.0),
            row("optimal", "a", 2, 50.0),
            row("optimal", "a", 3, 100.0),
            row("rtx", "a", 3, 95.0),
            row("optimal", "c", 1, 10.0),
            row("rtx", "c", 1, 9.0),
        ];
        let table = ratios(&rows);
        let line = |wl: &str| {
            table
                .lines()
                .find(|l| l.split_whitespace().nth(2) == Some(wl))
                .unwrap_or_else(|| panic!("no line for {wl} in\n{table}"))
                .split_whitespace()
                .skip(4)
                .collect::<Vec<_>>()
        };
        assert_eq!(line("a"), ["0.800", "0.800", "0.950", "3"], "{table}");
        assert_eq!(line("c"), ["0.900", "0.900", "0.900", "1"], "{table}");
    }

    #[test]
    fn one_round_keeps_the_plain_ratio_table() {
        let rows = [row("optimal", "a", 1, 100.0), row("rtx", "a", 1, 87.0)];
        let table = ratios(&rows);
        assert!(!table.contains("rounds"), "{table}");
        assert!(table.contains("0.870"), "{table}");
        assert_eq!(ratios(&[row("rtx", "a", 1, 87.0)]), "");
    }

    #[test]
    fn rtx_is_also_divided_by_dtx() {
        let rows = [
            row("optimal", "a", 1, 100.0),
            row("rtx", "a", 1, 90.0),
            row("dtx", "a", 1, 60.0),
        ];
        let table = YcsbReport {
            rows: rows.to_vec(),
            rounds: 1,
            memory: "test".into(),
        }
        .table();
        assert!(table.contains("throughput relative to optimal"), "{table}");
        let to_dtx = table
            .split("throughput relative to dtx")
            .nth(1)
            .unwrap_or_else(|| panic!("no dtx table in\n{table}"));
        assert!(to_dtx.contains("1.500"), "{table}");
        assert_eq!(
            to_dtx.lines().filter(|l| l.contains("btree")).count(),
            1,
            "rtx only: {table}"
        );
        assert_eq!(ratios_to(&rows[..2], "dtx", Some("rtx")), "", "no dtx measured");
    }
}
