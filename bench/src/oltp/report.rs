//! The results of `bench smallbank|tatp`: a table per variant and the
//! rtx/dtx throughput ratio for people, one JSON object for tools.

use std::fmt::Write as _;

use index::btree::Variant;
use serde_json::{json, Value};

use super::plan::OltpPlan;
use super::run::VariantRun;
use super::worker::KindRun;
use super::OltpWorkload;
use crate::common::{cores, median};
use crate::format::{duration, micros, thousands};

/// What a run measured, with the plan it ran.
pub struct OltpReport {
    /// The plan that ran.
    pub plan: OltpPlan,
    /// Accounts or subscribers.
    pub units: u64,
    /// The benchmark's name.
    pub name: &'static str,
    /// Transaction types' names, by kind.
    pub kinds: &'static [&'static str],
    /// Whether each kind is read-only.
    pub read_only: Vec<bool>,
    /// What the check adds up.
    pub measure: &'static str,
    /// Every variant's run of every round, in the order they ran.
    pub runs: Vec<VariantRun>,
}

/// The rtx/dtx throughput ratio over the rounds where both ran.
#[derive(Clone, Debug)]
pub struct Ratio {
    /// Each round's rtx commits/s over dtx's.
    pub per_round: Vec<f64>,
}

impl Ratio {
    /// The rounds' median.
    pub fn median(&self) -> f64 {
        median(&self.per_round)
    }
}

impl OltpReport {
    /// A report of `runs` of benchmark `W`.
    pub fn new<W: OltpWorkload>(plan: OltpPlan, units: u64, runs: Vec<VariantRun>) -> OltpReport {
        OltpReport {
            plan,
            units,
            name: W::NAME,
            kinds: W::KINDS,
            read_only: (0..W::KINDS.len()).map(W::read_only).collect(),
            measure: W::MEASURE,
            runs,
        }
    }

    /// Why the run failed, if a check failed.
    pub fn failure(&self) -> Option<String> {
        let failed: Vec<String> = self
            .runs
            .iter()
            .filter(|r| !r.check.ok())
            .map(|r| {
                format!(
                    "{} round {}: {}",
                    r.variant,
                    r.round,
                    r.check.describe(self.measure)
                )
            })
            .collect();
        (!failed.is_empty()).then(|| format!("the end-of-run check failed: {}", failed.join(" | ")))
    }

    /// rtx relative to dtx, when both ran.
    pub fn ratio(&self) -> Option<Ratio> {
        let commits = |v: Variant, round: usize| {
            self.runs
                .iter()
                .find(|r| r.variant == v && r.round == round)
                .map(|r| r.total.per_sec(r.total.all.commits))
        };
        let per_round: Vec<f64> = (1..=self.plan.rounds)
            .filter_map(
                |round| match (commits(Variant::Rtx, round), commits(Variant::Dtx, round)) {
                    (Some(r), Some(d)) if d > 0.0 => Some(r / d),
                    _ => None,
                },
            )
            .collect();
        (!per_round.is_empty()).then_some(Ratio { per_round })
    }

    fn size(&self) -> String {
        match self.plan.which {
            super::plan::Which::SmallBank { accounts } => format!(
                "{} accounts ({} hot, {} % of choices)",
                thousands(accounts as f64),
                thousands(workload::smallbank::hot_accounts(accounts) as f64),
                workload::smallbank::HOT_PERCENT
            ),
            super::plan::Which::Tatp { subscribers } => {
                format!("{} subscribers", thousands(subscribers as f64))
            }
        }
    }

    fn kind_json(&self, r: &VariantRun, name: &str, k: &KindRun) -> Value {
        let t = &r.total;
        json!({
            "kind": name,
            "transactions": k.txns,
            "commits": k.commits,
            "commits_per_sec": t.per_sec(k.commits),
            "declined": k.declined,
            "gave_up": k.gave_up,
            "aborts": k.aborts.total(),
            "aborts_by_reason": k.aborts,
            "p50_us": k.percentile_us(0.5),
            "p99_us": k.percentile_us(0.99),
            "round_trips_per_commit": k.per_commit(k.fabric.round_trips),
            "verbs_per_commit": k.per_commit(k.fabric.verbs()),
            "bytes_read_per_commit": k.per_commit(k.fabric.bytes_read),
            "bytes_written_per_commit": k.per_commit(k.fabric.bytes_written),
        })
    }

    fn run_json(&self, r: &VariantRun) -> Value {
        let t = &r.total;
        let mut v = self.kind_json(r, "all", &t.all);
        if let Value::Object(m) = &mut v {
            m.remove("kind");
            m.insert("variant".into(), json!(r.variant.to_string()));
            m.insert("round".into(), json!(r.round));
            m.insert("target".into(), json!(r.origin));
            m.insert("records".into(), json!(r.records));
            m.insert("load_s".into(), json!(r.load_time.as_secs_f64()));
            m.insert("elapsed_s".into(), json!(t.elapsed.as_secs_f64()));
            m.insert("aborts_per_sec".into(), json!(t.per_sec(t.all.aborts.total())));
            let kinds: Vec<Value> = self
                .kinds
                .iter()
                .zip(&t.kinds)
                .map(|(name, k)| self.kind_json(r, name, k))
                .collect();
            m.insert("per_kind".into(), Value::Array(kinds));
            m.insert(
                "tx_stats".into(),
                serde_json::to_value(t.tx).unwrap_or(Value::Null),
            );
            m.insert(
                "check".into(),
                json!({
                    "ok": r.check.ok(),
                    "what": self.measure,
                    "records": r.check.records,
                    "locks_left": r.check.locks_left,
                    "inconsistent": r.check.inconsistent,
                    "first_inconsistency": r.check.first_inconsistency,
                    "initial": r.check.initial,
                    "expected": r.check.expected,
                    "found": r.check.found,
                }),
            );
        }
        v
    }

    /// One JSON object for tools: the plan, every run, the ratio.
    pub fn json(&self) -> Value {
        let p = &self.plan;
        let ratio = self.ratio();
        json!({
            "bench": self.name,
            "transport": p.transport.name(),
            "replicas": p.replicas,
            "units": self.units,
            "threads": p.threads,
            "cores": cores(),
            "seed": p.seed,
            "duration_s": p.duration.as_secs_f64(),
            "rounds": p.rounds,
            "variants": p.variants.iter().map(Variant::to_string).collect::<Vec<_>>(),
            "runs": self.runs.iter().map(|r| self.run_json(r)).collect::<Vec<_>>(),
            "rtx_over_dtx": ratio.as_ref().map(|r| json!({
                "median": r.median(),
                "per_round": r.per_round,
            })),
            "check_ok": self.failure().is_none(),
        })
    }

    /// The run of `variant` shown in its table: the round with the median
    /// throughput.
    fn shown(&self, variant: Variant) -> Option<&VariantRun> {
        let mut runs: Vec<&VariantRun> = self.runs.iter().filter(|r| r.variant == variant).collect();
        runs.sort_by(|a, b| {
            a.total
                .per_sec(a.total.all.commits)
                .total_cmp(&b.total.per_sec(b.total.all.commits))
        });
        runs.get(runs.len() / 2).copied()
    }

    fn kind_row(s: &mut String, r: &VariantRun, name: &str, share: &str, k: &KindRun) {
        let t = &r.total;
        let _ = writeln!(
            s,
            "  {:<22}{:>7}{:>12}{:>10}{:>10}{:>9}{:>9}{:>7.2}{:>8.2}",
            name,
            share,
            thousands(t.per_sec(k.commits)),
            thousands(k.aborts.total() as f64),
            thousands(k.declined as f64),
            micros(k.percentile_us(0.5)),
            micros(k.percentile_us(0.99)),
            k.per_commit(k.fabric.round_trips),
            k.per_commit(k.fabric.verbs()),
        );
    }

    /// The tables for people.
    pub fn table(&self) -> String {
        let p = &self.plan;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} bench: {}, {} replica(s), {}, {} thread(s) on {} core(s), {} per run, {} round(s)",
            self.name,
            p.transport.name(),
            p.replicas,
            self.size(),
            p.threads,
            cores(),
            duration(p.duration),
            p.rounds,
        );
        for &variant in &p.variants {
            let Some(r) = self.shown(variant) else {
                continue;
            };
            let t = &r.total;
            let _ = writeln!(s);
            let which = if p.rounds > 1 {
                let all: Vec<String> = self
                    .runs
                    .iter()
                    .filter(|x| x.variant == variant)
                    .map(|x| thousands(x.total.per_sec(x.total.all.commits)))
                    .collect();
                format!(
                    " (round {}, the median; commits/s by round: {})",
                    r.round,
                    all.join(", ")
                )
            } else {
                String::new()
            };
            let _ = writeln!(s, "{variant}{which}");
            let _ = writeln!(
                s,
                "  {:<22}{:>7}{:>12}{:>10}{:>10}{:>9}{:>9}{:>7}{:>8}",
                "type", "share", "commits/s", "aborts", "declined", "p50 µs", "p99 µs", "RTs", "verbs"
            );
            let commits = t.all.commits.max(1) as f64;
            for ((name, k), ro) in self.kinds.iter().zip(&t.kinds).zip(&self.read_only) {
                let share = format!("{:.0}%", k.commits as f64 / commits * 100.0);
                let label = if *ro {
                    format!("{name} (ro)")
                } else {
                    (*name).to_owned()
                };
                Self::kind_row(&mut s, r, &label, &share, k);
            }
            Self::kind_row(&mut s, r, "all", "100%", &t.all);
            let a = &t.all.aborts;
            let _ = writeln!(
                s,
                "  aborted attempts: {} locked, {} changed, {} repaired, {} other, {} at commit; {} gave up; \
                 {} invisible re-reads",
                a.locked, a.changed, a.repaired, a.other, a.at_commit, t.all.gave_up, t.tx.invisible_waits
            );
            let _ = writeln!(s, "  check: {}", r.check.describe(self.measure));
            let _ = writeln!(
                s,
                "  loaded {} records in {:.2} s; RTs and verbs are per commit, aborted attempts included",
                thousands(r.records as f64),
                r.load_time.as_secs_f64()
            );
        }
        if let Some(ratio) = self.ratio() {
            let _ = writeln!(s);
            let rounds = if ratio.per_round.len() > 1 {
                let (lo, hi) = ratio
                    .per_round
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                format!(
                    " (median of {} rounds, range {lo:.2}-{hi:.2})",
                    ratio.per_round.len()
                )
            } else {
                String::new()
            };
            let _ = writeln!(s, "rtx relative to dtx: {:.2}x commits/s{rounds}", ratio.median());
        }
        s
    }
}
