//! `bench resp`'s report: medians per target, test and pipeline depth,
//! and each gateway's throughput as a ratio of redis-server's.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::plan::{RespPlan, Target};
use crate::format::thousands;

/// One redis-benchmark row.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Against what.
    pub target: Target,
    /// redis-benchmark's test name (`SET`, `MSET (10 keys)`...).
    pub test: String,
    /// `-P`.
    pub pipeline: u32,
    /// Which round.
    pub round: u32,
    /// What redis-benchmark measured.
    pub requests_per_s: f64,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct RespReport {
    /// The plan.
    pub plan: RespPlan,
    /// Every row of every run.
    pub samples: Vec<Sample>,
    /// Each gateway's INFO kintsugi at the end (round trips and verbs per
    /// op over the whole run, repairs, aborts).
    pub gateway_info: BTreeMap<Target, BTreeMap<String, String>>,
}

impl RespReport {
    /// A report of `samples`.
    pub fn new(
        plan: RespPlan,
        samples: Vec<Sample>,
        gateway_info: BTreeMap<Target, BTreeMap<String, String>>,
    ) -> RespReport {
        RespReport {
            plan,
            samples,
            gateway_info,
        }
    }

    /// The median requests per second of `target` on `test` at `pipeline`.
    pub fn median(&self, target: Target, test: &str, pipeline: u32) -> Option<f64> {
        let v: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.target == target && s.test == test && s.pipeline == pipeline)
            .map(|s| s.requests_per_s)
            .collect();
        (!v.is_empty()).then(|| crate::common::median(&v))
    }

    /// The tests in the order redis-benchmark ran them.
    fn tests(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for s in &self.samples {
            if !seen.contains(&s.test) {
                seen.push(s.test.clone());
            }
        }
        seen
    }

    /// The table.
    pub fn table(&self) -> String {
        let p = &self.plan;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "redis-benchmark -c {} -n {} -r {}, medians of {} alternating rounds (requests/s; ratio = gateway / redis-server)",
            p.clients,
            thousands(p.requests as f64),
            thousands(p.keyspace as f64),
            p.rounds
        );
        let gateways: Vec<Target> = p.targets.iter().copied().filter(|t| t.kind().is_some()).collect();
        let mut header = format!("{:<16} {:>3} {:>14}", "test", "-P", "redis-server");
        for g in &gateways {
            let _ = write!(header, " {:>14} {:>7}", g.name(), "ratio");
        }
        let _ = writeln!(out, "{header}");
        for &pipeline in &p.pipelines {
            for test in self.tests() {
                let redis = self.median(Target::Redis, &test, pipeline);
                let cell = |v: Option<f64>| v.map_or("-".to_owned(), thousands);
                let mut line = format!("{:<16} {:>3} {:>14}", test, pipeline, cell(redis));
                for &g in &gateways {
                    let mine = self.median(g, &test, pipeline);
                    let ratio = match (mine, redis) {
                        (Some(m), Some(r)) if r > 0.0 => format!("{:.3}", m / r),
                        _ => "-".into(),
                    };
                    let _ = write!(line, " {:>14} {:>7}", cell(mine), ratio);
                }
                let _ = writeln!(out, "{line}");
            }
        }
        for (g, info) in &self.gateway_info {
            let get = |k: &str| info.get(k).map_or("?", String::as_str);
            let _ = writeln!(
                out,
                "{}: {} round trips/op, {} verbs/op, {} commits, {} aborts, {} repairs over the run",
                g.name(),
                get("round_trips_per_op"),
                get("verbs_per_op"),
                get("rtx_commits"),
                get("rtx_aborts"),
                get("rtx_repairs")
            );
        }
        out
    }

    /// The report as one JSON line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ratios() {
        let plan = RespPlan {
            exe: "kintsugi".into(),
            targets: vec![Target::Redis, Target::GatewayBtree],
            tests: vec!["set".into()],
            pipelines: vec![1],
            clients: 50,
            requests: 1000,
            keyspace: 100,
            rounds: 3,
            handles: 8,
        };
        let sample = |target, rps, round| Sample {
            target,
            test: "SET".into(),
            pipeline: 1,
            round,
            requests_per_s: rps,
        };
        let r = RespReport::new(
            plan,
            vec![
                sample(Target::Redis, 100.0, 0),
                sample(Target::Redis, 300.0, 1),
                sample(Target::Redis, 200.0, 2),
                sample(Target::GatewayBtree, 50.0, 0),
                sample(Target::GatewayBtree, 10.0, 1),
                sample(Target::GatewayBtree, 40.0, 2),
            ],
            BTreeMap::new(),
        );
        assert_eq!(r.median(Target::Redis, "SET", 1), Some(200.0));
        assert_eq!(r.median(Target::GatewayBtree, "SET", 1), Some(40.0));
        assert!(r.table().contains("0.200"), "{}", r.table());
    }
}
