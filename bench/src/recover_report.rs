//! What `kintsugi bench recover` found.

use std::time::Duration;

use serde::Serialize;

use crate::common::median;
use crate::local_load::ClientsOutcome;
use crate::recover_plan::RecoverPlan;

/// A phase of one round, in the order they come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The control plane declared the killed node dead.
    Detected,
    /// Its replica left the region's replica set.
    Evicted,
    /// The region back in the clients' map.
    Serving,
    /// A new replica placed on the spare.
    Added,
    /// The spare allocated it: the copy may begin.
    Allocated,
    /// The copy joined the replicas clients write; the region is out of
    /// their map until the catch-up ends.
    Joined,
    /// Whole again: as many replicas as it was made with, in the map.
    Whole,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 7] = [
        Phase::Detected,
        Phase::Evicted,
        Phase::Serving,
        Phase::Added,
        Phase::Allocated,
        Phase::Joined,
        Phase::Whole,
    ];
}

/// One kill, its phases in ms from the kill (`None`: shorter than a poll,
/// not seen).
#[derive(Clone, Debug, Serialize)]
pub struct Round {
    /// The killed node.
    pub node: u16,
    /// Whether it held the primary.
    pub primary: bool,
    /// Whether it was wiped (killed and started again at once, empty)
    /// rather than only killed.
    pub wiped: bool,
    /// The control plane's dead decision.
    pub detected_ms: Option<f64>,
    /// The replica evicted (a primary's backup promoted).
    pub evicted_ms: Option<f64>,
    /// The region serving again.
    pub serving_ms: Option<f64>,
    /// From the dead decision to serving again.
    pub dead_to_serving_ms: Option<f64>,
    /// A new replica placed on the spare.
    pub added_ms: Option<f64>,
    /// The spare allocated it.
    pub allocated_ms: Option<f64>,
    /// The copy joined.
    pub joined_ms: Option<f64>,
    /// Whole again.
    pub whole_ms: Option<f64>,
    /// From allocated to joined: the copy, and the pass that began it.
    pub copy_ms: Option<f64>,
    /// Region bytes over `copy_ms` (a lower bound of the copy's rate).
    pub copy_gib_per_s: Option<f64>,
    /// From joined to whole: the catch-up, while writes wait.
    pub blocked_ms: Option<f64>,
}

/// A figure of a round, for a row of the table.
type Field = fn(&Round) -> Option<f64>;

/// Which end of a row's figures is its worst: the most of a time, the
/// least of a rate.
#[derive(Clone, Copy)]
enum Worst {
    Most,
    Least,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Round {
    /// The round of a kill of `node` with `phases` (indexed by [`Phase`]).
    pub fn new(node: u16, primary: bool, region_bytes: u64, phases: &[Option<Duration>]) -> Round {
        let at = |p: Phase| phases.get(p as usize).copied().flatten().map(ms);
        let between = |a: Phase, b: Phase| at(a).zip(at(b)).map(|(a, b)| b - a);
        let copy_ms = between(Phase::Allocated, Phase::Joined);
        Round {
            node,
            wiped: false,
            primary,
            detected_ms: at(Phase::Detected),
            evicted_ms: at(Phase::Evicted),
            serving_ms: at(Phase::Serving),
            dead_to_serving_ms: between(Phase::Detected, Phase::Serving),
            added_ms: at(Phase::Added),
            allocated_ms: at(Phase::Allocated),
            joined_ms: at(Phase::Joined),
            whole_ms: at(Phase::Whole),
            copy_ms,
            copy_gib_per_s: copy_ms
                .filter(|&c| c > 0.0)
                .map(|c| region_bytes as f64 / f64::from(1u32 << 30) / (c / 1e3)),
            blocked_ms: between(Phase::Joined, Phase::Whole),
        }
    }

    /// One line for progress output.
    pub fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        format!(
            "node {} ({}) {}: dead after {} ms, serving {} ms after that, whole after {} ms; copy {} ms ({} GiB/s), writes blocked {} ms",
            self.node,
            if self.primary { "primary" } else { "backup" },
            crate::recover_plan::fault_done(self.wiped),
            f(self.detected_ms),
            f(self.dead_to_serving_ms),
            f(self.whole_ms),
            f(self.copy_ms),
            self.copy_gib_per_s.map_or("-".into(), |v| format!("{v:.2}")),
            f(self.blocked_ms),
        )
    }
}

/// The run's figures and checks.
#[derive(Clone, Debug, Serialize)]
pub struct RecoverReport {
    /// Every kill.
    pub rounds: Vec<Round>,
    /// What the load's clients saw.
    #[serde(flatten)]
    pub clients: ClientsOutcome,
    /// What ran.
    #[serde(skip)]
    pub plan: RecoverPlan,
}

impl RecoverReport {
    /// One JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The summary table: medians and worst cases per victim's role.
    pub fn table(&self) -> String {
        let p = &self.plan;
        let mut out = format!(
            "bench recover: {} {} of a memory node holding an rtx B+tree region of {} MiB ({} replicas + 1 spare, {}), \
             memory-node lease {} ms, YCSB A ({} tasks, {} keys)\n",
            self.rounds.len(),
            if p.wipe { "wipes" } else { "kills" },
            p.region_bytes >> 20,
            p.replicas,
            p.transport,
            p.memnode_lease.as_millis(),
            p.tasks,
            p.tasks as u64 * p.keys_per_task,
        );
        for primary in [true, false] {
            let rounds: Vec<&Round> = self.rounds.iter().filter(|r| r.primary == primary).collect();
            if rounds.is_empty() {
                continue;
            }
            out += &format!(
                "\n{} {} ({} rounds)                   median     worst   seen\n",
                if primary { "primary" } else { "backup" },
                p.fault_done(),
                rounds.len()
            );
            use Worst::{Least, Most};
            let rows: [(&str, Field, Worst); 9] = [
                ("dead after the kill, ms", |r| r.detected_ms, Most),
                ("evicted after the kill, ms", |r| r.evicted_ms, Most),
                ("dead decision -> serving, ms", |r| r.dead_to_serving_ms, Most),
                ("new replica placed, ms", |r| r.added_ms, Most),
                ("... allocated, ms", |r| r.allocated_ms, Most),
                ("copy (allocated -> joined), ms", |r| r.copy_ms, Most),
                ("copy rate, GiB/s (lower bound)", |r| r.copy_gib_per_s, Least),
                ("writes blocked (joined -> whole), ms", |r| r.blocked_ms, Most),
                ("whole again after the kill, ms", |r| r.whole_ms, Most),
            ];
            for (name, f, end) in rows {
                let v: Vec<f64> = rounds.iter().filter_map(|r| f(r)).collect();
                let worst = match end {
                    Most => v.iter().copied().reduce(f64::max),
                    Least => v.iter().copied().reduce(f64::min),
                };
                let (med, worst) = match worst {
                    None => ("-".to_owned(), "-".to_owned()),
                    Some(w) => (format!("{:.2}", median(&v)), format!("{w:.2}")),
                };
                out += &format!("{name:<38} {med:>9} {worst:>9} {:>3}/{}\n", v.len(), rounds.len());
            }
        }
        out += "\n";
        out += &self.clients.line();
        out
    }

    /// Why the run failed its checks, if it did.
    pub fn failure(&self) -> Option<String> {
        self.clients.failure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_derives_its_spans_and_leaves_unseen_phases_unknown() {
        let d = |ms: u64| Some(Duration::from_millis(ms));
        let phases = [d(200), d(210), d(230), d(240), d(250), d(1250), d(1750)];
        let r = Round::new(3, true, 1 << 30, &phases);
        assert_eq!(r.dead_to_serving_ms, Some(30.0));
        assert_eq!(r.copy_ms, Some(1000.0));
        assert_eq!(r.copy_gib_per_s, Some(1.0));
        assert_eq!(r.blocked_ms, Some(500.0));
        let missed = [d(200), d(210), d(230), d(240), d(250), None, d(1750)];
        let r = Round::new(3, false, 1 << 30, &missed);
        assert_eq!((r.copy_ms, r.copy_gib_per_s, r.blocked_ms), (None, None, None));
        assert_eq!(r.whole_ms, Some(1750.0));
    }
}
