//! What `kintsugi bench promote` found.

use serde::Serialize;

use crate::common::median;
use crate::local_load::ClientsOutcome;
use crate::promote_plan::PromotePlan;

/// One promotion, its steps in ms from its commit.
#[derive(Clone, Debug, Serialize)]
pub struct Round {
    /// The new primary.
    pub primary: u16,
    /// Every replica's node fenced at the new epoch.
    pub fenced_ms: f64,
    /// The new primary rebuilt, the backups aligned, every log finished.
    pub restored_ms: f64,
    /// The region back in the clients' map.
    pub published_ms: f64,
    /// A client operation completed at the published epoch.
    pub served_ms: f64,
    /// Lock words rebuilt.
    pub lock_words: u64,
}

/// The run's figures and checks.
#[derive(Clone, Debug, Serialize)]
pub struct PromoteReport {
    /// Every promotion.
    pub rounds: Vec<Round>,
    /// What the load's clients saw.
    #[serde(flatten)]
    pub clients: ClientsOutcome,
    /// What ran.
    #[serde(skip)]
    pub plan: PromotePlan,
}

/// The `q`-quantile (0..=1) of `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

impl PromoteReport {
    /// One JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let col = |f: fn(&Round) -> f64| self.rounds.iter().map(f).collect::<Vec<_>>();
        let mut out = format!(
            "bench promote: {} promotions of an rtx B+tree region ({} replicas over {}, {} keys) under YCSB A \
             ({} tasks)\n\n",
            self.rounds.len(),
            self.plan.replicas,
            self.plan.transport,
            self.plan.tasks as u64 * self.plan.keys_per_task,
            self.plan.tasks
        );
        out += "step, ms after the promotion's commit      median      p99      max\n";
        for (name, v) in [
            ("every replica fenced", col(|r| r.fenced_ms)),
            ("rebuilt, aligned, logs finished", col(|r| r.restored_ms)),
            ("published again", col(|r| r.published_ms)),
            ("first client op served at the new epoch", col(|r| r.served_ms)),
        ] {
            out += &format!(
                "{name:<42} {:>8.2} {:>8.2} {:>8.2}\n",
                median(&v),
                quantile(&v, 0.99),
                quantile(&v, 1.0)
            );
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
