//! The results of `bench txn`: an aligned table for people, one JSON object
//! for tools.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

use crate::check::Check;
use crate::common::cores;
use crate::format::{duration, micros, thousands, tick_millis};
use crate::txn_plan::TxnPlan;
use crate::worker::{ClientRun, SAMPLE_EVERY};

/// Explains a lease that ran ahead of the clock (see `probe`); `waits` is
/// how often clients waited for their clocks to take one.
pub fn lead_note(lead_ticks: i64, waits: u64) -> String {
    format!(
        "after the run a client's next lease ended {} past its clock plus the configured lease: \
         TxClient takes each of an owner's leases at least 1/256 ms after its previous one and at most \
         {} ahead of its clock, so a client taking lock words faster than 256,000/s runs ahead by up to \
         that, and clients waited {} time(s) for their clocks (TxStats::lease_waits)",
        tick_millis(lead_ticks),
        tick_millis(txn::LEAD_TICKS_MAX as i64),
        thousands(waits as f64),
    )
}

/// What a `bench txn` run measured, with the plan it ran.
pub struct TxnReport {
    /// The plan that ran.
    pub plan: TxnPlan,
    /// The memory the run used.
    pub origin: String,
    /// How long creating the objects took (one round trip each).
    pub load_time: Duration,
    /// Every client's run added up.
    pub total: ClientRun,
    /// The end-of-run check of the counters and locks.
    pub check: Check,
}

impl TxnReport {
    /// Why the run failed its end-of-run check, if it did.
    pub fn failure(&self) -> Option<String> {
        (!self.check.ok()).then(|| {
            format!(
                "the end-of-run check failed: {}",
                self.check.describe(self.plan.objects)
            )
        })
    }

    fn notes(&self) -> Vec<String> {
        let t = &self.total;
        let mut notes = Vec::new();
        if t.gave_up > 0 {
            notes.push(format!(
                "{} transaction(s) gave up after TxConfig::attempts_max aborted attempts",
                t.gave_up
            ));
        }
        if t.tx.repairs + t.tx.expired_seen > 0 {
            notes.push(format!(
                "every client is alive, yet {} expired lock(s) were met and {} repair(s) made: a lease \
                 was shorter than a holder's commit (descheduling with {} threads on {} cores?)",
                t.tx.expired_seen,
                t.tx.repairs,
                self.plan.threads,
                cores()
            ));
        }
        if let Some(lead) = t.lease_lead_ticks.filter(|&l| l > 0) {
            notes.push(lead_note(lead, t.tx.lease_waits));
        }
        if t.tx.aborts != t.aborts() {
            notes.push(format!(
                "TxStats::aborts says {}, the attempts this bench counted say {}",
                t.tx.aborts,
                t.aborts()
            ));
        }
        notes
    }

    /// One JSON object for tools: the plan, the rates, latency, costs per
    /// commit and the check.
    pub fn json(&self) -> Value {
        let (p, c, t) = (self.plan, &self.plan.common, &self.total);
        let f = &t.fabric;
        let mut v = json!({
            "transport": c.transport.name(),
            "replicas": c.replicas,
            "objects": p.objects,
            "object_bytes": c.object_bytes,
            "write_set": p.write_set,
            "logged": p.write_set > 1,
            "threads": p.threads,
            "cores": cores(),
            "seed": c.seed,
            "duration_s": p.duration.as_secs_f64(),
            "elapsed_s": t.elapsed.as_secs_f64(),
            "load_s": self.load_time.as_secs_f64(),
            "target": self.origin,
            "transactions": t.txns,
            "commits": t.commits,
            "aborts": t.aborts(),
            "repairs": t.tx.repairs,
            "expired_seen": t.tx.expired_seen,
            "gave_up": t.gave_up,
            "logged_commits": t.tx.logged_commits,
            "commits_per_sec": t.per_sec(t.commits),
            "aborts_per_sec": t.per_sec(t.aborts()),
            "repairs_per_sec": t.per_sec(t.tx.repairs),
            "p50_us": t.percentile_us(0.5),
            "p99_us": t.percentile_us(0.99),
            "latency_samples": t.latency.len(),
            "sample_every": SAMPLE_EVERY,
            "lease_lead_ms": t.lease_lead_ticks.map(txn::lease::ms_from_ticks),
            "lease_waits": t.tx.lease_waits,
        });
        let per_commit = json!({
            "round_trips_per_commit": t.per_commit(f.round_trips),
            "verbs_per_commit": t.per_commit(f.verbs()),
            "reads_per_commit": t.per_commit(f.reads),
            "writes_per_commit": t.per_commit(f.writes),
            "cas_per_commit": t.per_commit(f.cas),
            "faa_per_commit": t.per_commit(f.faa),
            "bytes_read_per_commit": t.per_commit(f.bytes_read),
            "bytes_written_per_commit": t.per_commit(f.bytes_written),
            "stats": serde_json::to_value(f).unwrap_or(Value::Null),
            "tx_stats": serde_json::to_value(t.tx).unwrap_or(Value::Null),
            "check": {
                "ok": self.check.ok(),
                "expected": self.check.expected,
                "found": self.check.found,
                "locks_left": self.check.locks_left,
            },
            "notes": self.notes(),
        });
        if let (Value::Object(all), Value::Object(more)) = (&mut v, per_commit) {
            all.extend(more);
        }
        v
    }

    /// The aligned table for people.
    pub fn table(&self) -> String {
        let (p, c, t) = (self.plan, &self.plan.common, &self.total);
        let f = &t.fabric;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "txn bench: {}, {} replica(s), {} objects of {} B, write set {} ({}), {} thread(s) on {} core(s), {}",
            c.transport.name(),
            c.replicas,
            thousands(p.objects as f64),
            c.object_bytes,
            p.write_set,
            if p.write_set > 1 { "logged" } else { "Opt1, no log" },
            p.threads,
            cores(),
            duration(p.duration),
        );
        let _ = writeln!(s, "target:   {}", self.origin);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:>14}{:>14}{:>12}{:>11}{:>11}",
            "commits/s", "aborts/s", "repairs/s", "p50 µs", "p99 µs"
        );
        let _ = writeln!(
            s,
            "{:>14}{:>14}{:>12}{:>11}{:>11}",
            thousands(t.per_sec(t.commits)),
            thousands(t.per_sec(t.aborts())),
            thousands(t.per_sec(t.tx.repairs)),
            micros(t.percentile_us(0.5)),
            micros(t.percentile_us(0.99)),
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "per commit:   {:.2} round trips, {:.2} verbs (read {:.2}, write {:.2}, cas {:.2}, faa {:.2}), \
             {:.0} B read, {:.0} B written",
            t.per_commit(f.round_trips),
            t.per_commit(f.verbs()),
            t.per_commit(f.reads),
            t.per_commit(f.writes),
            t.per_commit(f.cas),
            t.per_commit(f.faa),
            t.per_commit(f.bytes_read),
            t.per_commit(f.bytes_written),
        );
        let _ = writeln!(
            s,
            "transactions: {} committed ({} logged), {} aborted attempts, {} gave up; \
             {} expired locks met, {} repairs",
            thousands(t.commits as f64),
            thousands(t.tx.logged_commits as f64),
            thousands(t.aborts() as f64),
            t.gave_up,
            t.tx.expired_seen,
            t.tx.repairs,
        );
        let _ = writeln!(
            s,
            "latency:      every {SAMPLE_EVERY}th transaction timed ({} commits), first attempt to commit",
            thousands(t.latency.len() as f64)
        );
        let _ = writeln!(s, "check:        {}", self.check.describe(p.objects));
        let _ = writeln!(
            s,
            "loading:      {} objects in {:.2} s (one round trip each)",
            thousands(p.objects as f64),
            self.load_time.as_secs_f64()
        );
        for n in self.notes() {
            let _ = writeln!(s, "note:         {n}");
        }
        s
    }
}
