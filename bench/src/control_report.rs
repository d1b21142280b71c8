//! The results of `bench control`: a summary for people and one JSON
//! object for tools.

use std::fmt::Write as _;
use std::time::Duration;

use control_plane::config::Timing;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::common::cores;
use crate::control_plan::ControlPlan;
use crate::control_run::{ControlResults, Failover};
use crate::format::{duration, micros, thousands};

/// The target for a failover: a write commits again within this
/// long of the leader's death, with default timings.
pub const TARGET_FAILOVER_MS: u64 = 1000;

/// What a `bench control` run measured, with the plan it ran.
pub struct ControlReport {
    /// The plan that ran.
    pub plan: ControlPlan,
    /// What each phase measured.
    pub results: ControlResults,
}

/// A percentile of a microsecond histogram (0 when empty).
fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Failover times in ms, in the order run.
fn failover_ms(f: &[Failover]) -> Vec<f64> {
    f.iter().map(|f| ms(f.elapsed)).collect()
}

/// Min, median (the lower middle of an even count) and max.
fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some((*v.first()?, v[(v.len() - 1) / 2], *v.last()?))
}

impl ControlReport {
    fn commits_per_sec(&self) -> f64 {
        self.plan.ops as f64 / self.results.commit.elapsed.as_secs_f64().max(1e-9)
    }

    /// Terms begun while killed members rejoined, in all rounds.
    fn rejoin_elections(&self) -> u64 {
        self.results.failovers.iter().map(|f| f.rejoin_terms).sum()
    }

    /// The watch gap at p50 in status round trips (p50 of each).
    fn watch_round_trips(&self) -> f64 {
        let w = &self.results.watch;
        us(&w.gap, 0.5) / us(&w.status_rtt, 0.5).max(1.0)
    }

    /// One JSON object for tools: the commit, watch and failover figures and
    /// the failover target.
    pub fn json(&self) -> Value {
        let p = self.plan;
        let r = &self.results;
        let c = &r.commit;
        let w = &r.watch;
        let fo = failover_ms(&r.failovers);
        let (fmin, fmed, fmax) = match spread(&fo) {
            Some((a, b, c)) => (Some(a), Some(b), Some(c)),
            None => (None, None, None),
        };
        let rounds: Vec<Value> = r
            .failovers
            .iter()
            .map(|f| {
                json!({
                    "killed": f.killed,
                    "written_via": f.written_via,
                    "new_leader": f.new_leader,
                    "failover_ms": ms(f.elapsed),
                    "writes_sent": f.tries,
                    "terms": f.failover_terms,
                    "rejoin_ms": ms(f.rejoin),
                    "rejoin_terms": f.rejoin_terms,
                })
            })
            .collect();
        json!({
            "members": p.members,
            "ops": p.ops,
            "concurrency": p.concurrency,
            "cores": cores(),
            "elapsed_s": c.elapsed.as_secs_f64(),
            "commits_per_sec": self.commits_per_sec(),
            "commits_per_sec_first_tenth": c.first_tenth_per_sec,
            "commits_per_sec_last_tenth": c.last_tenth_per_sec,
            "commit_p50_us": us(&c.latency, 0.5),
            "commit_p90_us": us(&c.latency, 0.9),
            "commit_p99_us": us(&c.latency, 0.99),
            "commit_max_us": c.latency.max() as f64,
            "watch_ops": p.watch_ops(),
            "watch_member": w.member,
            "watch_member_role": w.member_role,
            "watch_p50_us": us(&w.gap, 0.5),
            "watch_p99_us": us(&w.gap, 0.99),
            "watch_max_us": w.gap.max() as f64,
            "watch_seen_before_ack": w.seen_before_ack,
            "status_rtt_p50_us": us(&w.status_rtt, 0.5),
            "status_rtt_p99_us": us(&w.status_rtt, 0.99),
            "watch_p50_in_round_trips": self.watch_round_trips(),
            "failovers": p.failovers,
            "failover_ms": fo,
            "failover_ms_min": fmin,
            "failover_ms_median": fmed,
            "failover_ms_max": fmax,
            "failover_rounds": rounds,
            "rejoin_elections": self.rejoin_elections(),
            "target_failover_ms": TARGET_FAILOVER_MS,
        })
    }

    /// The summary for people: the commit, watch and failover sections.
    pub fn table(&self) -> String {
        let p = &self.plan;
        let t = Timing::default();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "control bench: {} member process(es) on loopback, {} core(s), default timings (heartbeat {}, \
             election timeout {}-{})",
            p.members,
            cores(),
            duration(t.heartbeat),
            duration(t.election_timeout_min),
            duration(t.election_timeout_max),
        );
        let _ = writeln!(s);
        self.commit_section(&mut s);
        self.watch_section(&mut s);
        self.failover_section(&mut s);
        s
    }

    /// The commit phase: throughput and latency.
    fn commit_section(&self, s: &mut String) {
        let (p, c) = (&self.plan, &self.results.commit);
        let _ = writeln!(
            s,
            "commits: {} map changes (PromoteBackup, then RegionRestored, in turn) to the leader, {} writer(s)",
            thousands(p.ops as f64),
            p.concurrency
        );
        let _ = writeln!(
            s,
            "  {:>12} commits/s  (first tenth {}, last tenth {}; {:.2} s)",
            thousands(self.commits_per_sec()),
            thousands(c.first_tenth_per_sec),
            thousands(c.last_tenth_per_sec),
            c.elapsed.as_secs_f64(),
        );
        let _ = writeln!(
            s,
            "  latency µs   p50 {}  p90 {}  p99 {}  max {}",
            micros(us(&c.latency, 0.5)),
            micros(us(&c.latency, 0.9)),
            micros(us(&c.latency, 0.99)),
            micros(c.latency.max() as f64),
        );
        let _ = writeln!(s);
    }

    /// The watch phase: from a commit to a watcher seeing it.
    fn watch_section(&self, s: &mut String) {
        let (p, w) = (&self.plan, &self.results.watch);
        let _ = writeln!(
            s,
            "watch: {} map changes committed one at a time, watched by a long-poll on member {} ({})",
            p.watch_ops(),
            w.member,
            w.member_role
        );
        let _ = writeln!(
            s,
            "  ack -> seen µs       p50 {}  p99 {}  max {}  (seen before the ack: {})",
            micros(us(&w.gap, 0.5)),
            micros(us(&w.gap, 0.99)),
            micros(w.gap.max() as f64),
            w.seen_before_ack,
        );
        let _ = writeln!(
            s,
            "  status round trip µs p50 {}  p99 {}",
            micros(us(&w.status_rtt, 0.5)),
            micros(us(&w.status_rtt, 0.99)),
        );
        let rt = self.watch_round_trips();
        let _ = writeln!(
            s,
            "  target: a map change visible to a watching client within one round trip after commit: \
             p50 is {rt:.2} round trips ({})",
            if rt <= 1.0 { "met" } else { "NOT met" }
        );
        let _ = writeln!(s);
    }

    /// The failover rounds, or why there were none.
    fn failover_section(&self, s: &mut String) {
        let r = &self.results;
        if r.failovers.is_empty() {
            let _ = writeln!(
                s,
                "failover: not measured (--failovers 0, or fewer than 3 members)"
            );
            return;
        }
        let _ = writeln!(
            s,
            "failover: {} round(s): SIGKILL the leader, write to the survivors until one write commits",
            r.failovers.len()
        );
        let _ = writeln!(
            s,
            "  {:>5}  {:>6}  {:>12}  {:>10}  {:>11}  {:>11}  {:>5}  {:>9}  {:>12}",
            "round",
            "killed",
            "written via",
            "new leader",
            "failover ms",
            "writes sent",
            "terms",
            "rejoin ms",
            "rejoin terms"
        );
        for (i, f) in r.failovers.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {:>5}  {:>6}  {:>12}  {:>10}  {:>11.1}  {:>11}  {:>5}  {:>9.1}  {:>12}",
                i + 1,
                f.killed,
                f.written_via,
                f.new_leader,
                ms(f.elapsed),
                f.tries,
                f.failover_terms,
                ms(f.rejoin),
                f.rejoin_terms,
            );
        }
        if let Some((min, med, max)) = spread(&failover_ms(&r.failovers)) {
            let _ = writeln!(s, "  min {min:.1} ms, median {med:.1} ms, max {max:.1} ms");
            let _ = writeln!(
                s,
                "  target: under {TARGET_FAILOVER_MS} ms with default timings ({})",
                if max < TARGET_FAILOVER_MS as f64 {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
        let _ = writeln!(
            s,
            "  (written via = the survivor the first committed write was sent to, which forwards it to the leader; \
             terms = terms the failover took, 1 unless a vote split; rejoin = restart of the killed member \
             on its port and data until it has applied what the leader had; rejoin terms = terms begun \
             meanwhile)"
        );
        if self.rejoin_elections() > 0 {
            let _ = writeln!(
                s,
                "note: {} restart(s) began new terms: a restarted member that hears from no leader within its \
                 election timeout stands for election and its higher term deposes the working leader (a moment \
                 without one); openraft backs off 500 ms from a member it found unreachable",
                r.failovers.iter().filter(|f| f.rejoin_terms > 0).count()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_min_lower_median_max() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[3.0]), Some((3.0, 3.0, 3.0)));
        assert_eq!(spread(&[9.0, 1.0, 5.0, 7.0]), Some((1.0, 5.0, 9.0)));
    }
}
