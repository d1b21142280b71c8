//! The results: an aligned table for people, one JSON object for tools.

use crate::format::thousands;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::measure::Phase;
use super::plan::Plan;
use harness::TransportKind;

/// Throughput a transport must reach, as a fraction of its baseline.
const TARGET_RATIO: f64 = 0.5;

/// Both phases of a run and what they ran on.
pub struct Report {
    /// What ran.
    pub plan: Plan,
    /// The memory under test.
    pub target: String,
    /// What the baseline did.
    pub baseline_kind: String,
    /// Phase 1: round trips through the fabric.
    pub fabric: Phase,
    /// Phase 2: the same work on raw memory (local, shm) or a TCP echo (tcp).
    pub baseline: Phase,
    /// tcp: request and response frame bytes, length prefix included.
    pub frames: Option<(usize, usize)>,
}

impl Report {
    /// fabric verbs/s ÷ baseline verbs/s.
    pub fn ratio(&self) -> f64 {
        self.fabric.verbs_per_sec() / self.baseline.verbs_per_sec().max(f64::MIN_POSITIVE)
    }

    fn notes(&self) -> Vec<String> {
        let plan = &self.plan;
        let mut notes = Vec::new();
        if plan.depth != plan.outstanding {
            notes.push(format!(
                "--outstanding {} has no effect on {}: verbs complete inline on the calling thread, \
                 so each thread has exactly one batch in flight (depth 1 was measured)",
                plan.outstanding,
                plan.transport.name()
            ));
        }
        if let super::plan::Target::Tcp(Some(addr)) = &plan.target {
            notes.push(format!(
                "the echo baseline runs on loopback in this process, not at {addr}: \
                 the ratio is only meaningful for a memory node on this host"
            ));
        }
        if self.fabric.cas_failures + self.baseline.cas_failures > 0 {
            notes.push(format!(
                "{} fabric and {} baseline CAS verbs found a value this bench had not written: \
                 someone else uses the region",
                self.fabric.cas_failures, self.baseline.cas_failures
            ));
        }
        notes
    }

    /// One JSON object for tools: the plan, both phases, the ratio and the
    /// notes.
    pub fn json(&self) -> Value {
        let plan = &self.plan;
        let f = &self.fabric;
        let b = &self.baseline;
        let mut v = json!({
            "transport": plan.transport.name(),
            "op": plan.work.op.name(),
            "size": plan.work.size,
            "batch": plan.work.batch,
            "threads": plan.threads,
            "outstanding": plan.outstanding,
            "outstanding_effective": plan.depth,
            "duration_s": plan.duration.as_secs_f64(),
            "target": self.target,
            "round_trips": f.round_trips,
            "verbs": f.round_trips * f.verbs_per_round_trip,
            "elapsed_s": f.elapsed.as_secs_f64(),
            "verbs_per_sec": f.verbs_per_sec(),
            "round_trips_per_sec": f.round_trips_per_sec(),
            "mb_per_sec": f.mb_per_sec(),
            "p50_us": f.percentile_us(0.5),
            "p99_us": f.percentile_us(0.99),
            "latency_samples": f.samples(),
            "sample_every": plan.sample_every(),
            "baseline": {
                "kind": self.baseline_kind,
                "round_trips": b.round_trips,
                "elapsed_s": b.elapsed.as_secs_f64(),
                "verbs_per_sec": b.verbs_per_sec(),
                "round_trips_per_sec": b.round_trips_per_sec(),
                "mb_per_sec": b.mb_per_sec(),
                "p50_us": b.percentile_us(0.5),
                "p99_us": b.percentile_us(0.99),
                "latency_samples": b.samples(),
            },
            "baseline_per_sec": b.verbs_per_sec(),
            "ratio": self.ratio(),
            "target_ratio": TARGET_RATIO,
            "notes": self.notes(),
        });
        if let Some(stats) = f.stats {
            v["stats"] = serde_json::to_value(stats).unwrap_or(Value::Null);
        }
        if let Some((request, response)) = self.frames {
            v["frame_bytes"] = json!({ "request": request, "response": response });
        }
        v
    }

    /// The aligned table for people.
    pub fn table(&self) -> String {
        let plan = &self.plan;
        let (f, b) = (&self.fabric, &self.baseline);
        let mut s = String::new();
        let threads = if plan.threads == 1 { "thread" } else { "threads" };
        let _ = writeln!(
            s,
            "fabric bench: {}, {} {} B x {} per round trip, {} {threads}, {} in flight per thread, {} per phase",
            plan.transport.name(),
            plan.work.op.name(),
            plan.work.size,
            plan.work.batch,
            plan.threads,
            plan.depth,
            humantime::format_duration(plan.duration),
        );
        let _ = writeln!(s, "target:   {}", self.target);
        let _ = writeln!(s, "baseline: {}", self.baseline_kind);
        if let Some((request, response)) = self.frames {
            let _ = writeln!(
                s,
                "frames:   {request} B request, {response} B response (length prefix included)"
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<16}{:>16}{:>16}{:>12}{:>11}{:>11}",
            "", "verbs/s", "round trips/s", "MB/s", "p50 µs", "p99 µs"
        );
        for (name, p) in [("fabric", f), ("baseline", b)] {
            let _ = writeln!(
                s,
                "{name:<16}{:>16}{:>16}{:>12}{:>11}{:>11}",
                thousands(p.verbs_per_sec()),
                thousands(p.round_trips_per_sec()),
                format!("{:.1}", p.mb_per_sec()),
                micros(p.percentile_us(0.5)),
                micros(p.percentile_us(0.99)),
            );
        }
        let ratio = |x: f64, y: f64| format!("{:.2}x", x / y.max(f64::MIN_POSITIVE));
        let _ = writeln!(
            s,
            "{:<16}{:>16}{:>16}{:>12}{:>11}{:>11}",
            "fabric/baseline",
            ratio(f.verbs_per_sec(), b.verbs_per_sec()),
            ratio(f.round_trips_per_sec(), b.round_trips_per_sec()),
            ratio(f.mb_per_sec(), b.mb_per_sec()),
            ratio(f.percentile_us(0.5), b.percentile_us(0.5)),
            ratio(f.percentile_us(0.99), b.percentile_us(0.99)),
        );
        let _ = writeln!(s);
        if let Some(st) = f.stats {
            let rt = st.round_trips.max(1) as f64;
            let _ = writeln!(
                s,
                "counters: {} round trips; per round trip {:.2} verbs (read {:.2}, write {:.2}, cas {:.2}, faa {:.2}), \
                 {:.0} B read, {:.0} B written; {} verb errors",
                thousands(st.round_trips as f64),
                st.verbs() as f64 / rt,
                st.reads as f64 / rt,
                st.writes as f64 / rt,
                st.cas as f64 / rt,
                st.faa as f64 / rt,
                st.bytes_read as f64 / rt,
                st.bytes_written as f64 / rt,
                st.verb_errors,
            );
        }
        let every = plan.sample_every();
        let which = if every == 1 {
            "every round trip".to_owned()
        } else {
            format!("every {every}th round trip")
        };
        let _ = writeln!(
            s,
            "latency:  {which} timed ({} fabric, {} baseline samples); each includes one clock read",
            thousands(f.samples() as f64),
            thousands(b.samples() as f64),
        );
        if self.plan.transport == TransportKind::Rdma {
            let _ = writeln!(
                s,
                "target:   not judged on rdma: the baseline is tcp, and the device may be emulated (soft-RoCE); compare with perftest (ib_read_lat, ib_write_bw) on the same device ({:.2})",
                self.ratio()
            );
        } else {
            let verdict = if self.ratio() >= TARGET_RATIO {
                "met"
            } else {
                "NOT met"
            };
            let _ = writeln!(
                s,
                "target:   fabric within 2x of baseline (ratio >= {TARGET_RATIO}): {verdict} ({:.2})",
                self.ratio()
            );
        }
        for n in self.notes() {
            let _ = writeln!(s, "note:     {n}");
        }
        s
    }
}

fn micros(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.3}")
    } else {
        format!("{us:.1}")
    }
}

/// Describes the baseline of a transport before it has run.
pub fn baseline_kind(
    transport: TransportKind,
    memory: Option<&super::baseline_mem::Memory>,
    plan: &Plan,
) -> String {
    match (transport, memory) {
        (TransportKind::Tcp, _) | (_, None) => format!(
            "bare tokio TCP echo on loopback, same frame sizes, {} connection(s), {} frame(s) in flight each",
            plan.threads, plan.depth
        ),
        (_, Some(m)) => m.describe(plan.work.op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(12_345_678.0), "12,345,678");
    }
}
