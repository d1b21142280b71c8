//! The results of `bench lease`: Figure 18 as two tables (with and without
//! lease regulation; rows are locks per transaction, columns are drifts),
//! one line per cell, and one JSON object for tools.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};
use txn::lease::ms_from_ticks;

use crate::common::cores;
use crate::format::{duration, percent, thousands, tick_millis};
use crate::lease_run::Cell;
use crate::txn_plan::LeasePlan;
use crate::txn_report::lead_note;

/// What a `bench lease` run measured: every cell, with the plan and the
/// clients' clock skews.
pub struct LeaseReport {
    /// The plan that ran.
    pub plan: LeasePlan,
    /// Each client's clock skew in ms.
    pub skews: Vec<i64>,
    /// In the order run: locks, then drift, then with before without.
    pub cells: Vec<Cell>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl LeaseReport {
    /// Why the run failed a cell's end-of-cell check, if it did.
    pub fn failure(&self) -> Option<String> {
        let bad = self.cells.iter().find(|c| !c.check.ok())?;
        Some(format!(
            "the end-of-cell check failed ({} locks, drift {}, {} regulation): {}",
            bad.locks,
            duration(bad.drift),
            if bad.regulated { "with" } else { "without" },
            bad.check.describe(self.plan.objects)
        ))
    }

    fn cell(&self, locks: usize, drift: Duration, regulated: bool) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.locks == locks && c.drift == drift && c.regulated == regulated)
    }

    /// The most any client's leases ran ahead of its clock (see `probe`),
    /// in lease ticks.
    fn lead_ticks(&self) -> Option<i64> {
        self.cells.iter().filter_map(|c| c.run.lease_lead_ticks).max()
    }

    /// Times any client waited for its clock to take a lease, in all cells.
    fn lease_waits(&self) -> u64 {
        self.cells.iter().map(|c| c.run.tx.lease_waits).sum()
    }

    fn notes(&self) -> Vec<String> {
        self.lead_ticks()
            .filter(|&l| l > 0)
            .map(|l| lead_note(l, self.lease_waits()))
            .into_iter()
            .collect()
    }

    /// Rows of locks, columns of drifts: the false-expiry rates.
    fn matrix(&self, regulated: bool) -> Vec<Vec<f64>> {
        let p = &self.plan;
        p.locks
            .iter()
            .map(|&n| {
                p.drifts
                    .iter()
                    .map(|&d| self.cell(n, d, regulated).map_or(f64::NAN, Cell::rate))
                    .collect()
            })
            .collect()
    }

    /// One JSON object for tools: the plan, the clock skews and every cell.
    pub fn json(&self) -> Value {
        let p = &self.plan;
        let cells: Vec<Value> = self
            .cells
            .iter()
            .map(|c| {
                let r = &c.run;
                json!({
                    "locks": c.locks,
                    "drift_ms": ms(c.drift),
                    "regulated": c.regulated,
                    "lease_ms": ms_from_ticks(c.lease_ticks as i64),
                    "lease_ticks": c.lease_ticks,
                    "transactions": r.txns,
                    "expired_txns": r.expired_txns,
                    "false_expiry_rate": c.rate(),
                    "expired_seen": r.tx.expired_seen,
                    "repairs": r.tx.repairs,
                    "commits": r.commits,
                    "aborts": r.aborts(),
                    "gave_up": r.gave_up,
                    "commits_per_sec": r.per_sec(r.commits),
                    "lease_lead_ms": r.lease_lead_ticks.map(ms_from_ticks),
                    "lease_waits": r.tx.lease_waits,
                    "elapsed_s": r.elapsed.as_secs_f64(),
                    "check": {
                        "ok": c.check.ok(),
                        "expected": c.check.expected,
                        "found": c.check.found,
                        "locks_left": c.check.locks_left,
                    },
                })
            })
            .collect();
        json!({
            "transport": p.common.transport.name(),
            "replicas": p.common.replicas,
            "threads": p.threads,
            "cores": cores(),
            "objects": p.objects,
            "object_bytes": p.common.object_bytes,
            "seed": p.common.seed,
            "duration_s": p.duration.as_secs_f64(),
            "clock_skew_ms": p.clock_skew_ms,
            "clock_skews_ms": self.skews,
            "op_time_us": p.op_time.as_secs_f64() * 1e6,
            "drifts_ms": p.drifts.iter().map(|&d| ms(d)).collect::<Vec<_>>(),
            "locks": p.locks,
            "false_expiry_rate": {
                "rows": "locks",
                "columns": "drifts_ms",
                "with_regulation": self.matrix(true),
                "without_regulation": self.matrix(false),
            },
            "cells": cells,
            "check_ok": self.cells.iter().all(|c| c.check.ok()),
            "lease_lead_ms_max": self.lead_ticks().map(ms_from_ticks),
            "lease_waits": self.lease_waits(),
            "notes": self.notes(),
        })
    }

    fn write_matrix(&self, s: &mut String, regulated: bool) {
        let p = &self.plan;
        let _ = write!(s, "{:<8}", "locks");
        for &d in &p.drifts {
            let _ = write!(s, "{:>12}", format!("drift {}", duration(d)));
        }
        let _ = writeln!(s);
        for (&n, row) in p.locks.iter().zip(self.matrix(regulated)) {
            let _ = write!(s, "{n:<8}");
            for rate in row {
                let _ = write!(s, "{:>12}", percent(rate));
            }
            let _ = writeln!(s);
        }
    }

    /// For people: Figure 18's two tables (with and without regulation), then
    /// one line per cell.
    pub fn table(&self) -> String {
        let p = &self.plan;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "lease bench: {} client threads on {} core(s), {} objects of {} B, clock skew within ±{} ms \
             per client, {} per cell, {}",
            p.threads,
            cores(),
            thousands(p.objects as f64),
            p.common.object_bytes,
            p.clock_skew_ms,
            duration(p.duration),
            p.common.transport.name(),
        );
        let _ = writeln!(s, "clock skews (ms): {:?}", self.skews);
        let _ = writeln!(
            s,
            "false-expiry rate = transactions that met a lock whose lease had expired by their clock \
             although its holder was alive, divided by all transactions"
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "with regulation (lease = now + locks x {} + drift)",
            duration(p.op_time)
        );
        self.write_matrix(&mut s, true);
        let _ = writeln!(s);
        let _ = writeln!(s, "without regulation (lease = now + drift)");
        self.write_matrix(&mut s, false);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:>6}{:>8}{:>9}{:>9}{:>10}{:>11}{:>10}{:>9}{:>9}{:>9}{:>9}{:>8}{:>8}  check",
            "locks",
            "drift",
            "regul.",
            "lease",
            "txns",
            "commits/s",
            "met exp.",
            "expired",
            "repairs",
            "rate",
            "gave up",
            "lead",
            "waits"
        );
        for c in &self.cells {
            let r = &c.run;
            let _ = writeln!(
                s,
                "{:>6}{:>8}{:>9}{:>9}{:>10}{:>11}{:>10}{:>9}{:>9}{:>9}{:>9}{:>8}{:>8}  {}",
                c.locks,
                duration(c.drift),
                if c.regulated { "with" } else { "without" },
                tick_millis(c.lease_ticks as i64),
                thousands(r.txns as f64),
                thousands(r.per_sec(r.commits)),
                thousands(r.expired_txns as f64),
                thousands(r.tx.expired_seen as f64),
                thousands(r.tx.repairs as f64),
                percent(c.rate()),
                r.gave_up,
                r.lease_lead_ticks.map_or("?".to_owned(), tick_millis),
                thousands(r.tx.lease_waits as f64),
                if c.check.ok() { "ok" } else { "FAILED" },
            );
        }
        let _ = writeln!(
            s,
            "(met exp. = transactions that met an expired lock; expired = expired locks met; lease = the lease \
             length, rounded up to a lease tick of 1/256 ms; lead = the most a client's next lease ended past \
             its clock + lease after the cell; waits = times clients waited for their clocks to take a lease)"
        );
        for note in self.notes() {
            let _ = writeln!(s, "note: {note}");
        }
        s
    }
}
