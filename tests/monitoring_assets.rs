//! `deploy/monitoring/`: the Grafana dashboard, the Prometheus alert rules
//! (and their promtool tests) and the example scrape configuration name
//! only metrics the code defines, with their kinds' suffixes, and the
//! jobs the scrape configuration has. `promtool check rules` and `promtool
//! test rules` (in .ci/run) check the PromQL itself.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kintsugi::fabric::metrics::{check_table, MetricDef, MetricKind};

fn asset(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/monitoring")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(asset(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn yaml(name: &str) -> serde_norway::Value {
    serde_norway::from_str(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every metric the crates define: what a `kintsugi` process can export.
fn defined() -> Vec<MetricDef> {
    let m = &kintsugi::fabric::metrics::ALL;
    let all: Vec<MetricDef> = m
        .iter()
        .chain(kintsugi::control_plane::metrics::ALL)
        .chain(kintsugi::gateway::metrics::ALL)
        .chain(kintsugi::recovery::metrics::ALL)
        .copied()
        .collect();
    assert_eq!(check_table(&all), Ok(()));
    all
}

/// The `kintsugi_*` names in a PromQL expression or series selector.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kintsugi_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    out
}

/// Why `name`, as a query names it, is not an exported series of `defs`:
/// a histogram is queried through its `_bucket`, `_sum` and `_count`.
fn undefined(defs: &[MetricDef], name: &str) -> Option<String> {
    if defs
        .iter()
        .any(|d| d.name == name && d.kind != MetricKind::Histogram)
    {
        return None;
    }
    let histogram = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s));
    match histogram {
        Some(base)
            if defs
                .iter()
                .any(|d| d.name == base && d.kind == MetricKind::Histogram) =>
        {
            None
        }
        _ if defs.iter().any(|d| d.name == name) => {
            Some(format!("{name} is a histogram: query _bucket, _sum or _count"))
        }
        _ => Some(format!("{name} is not a metric the code defines")),
    }
}

/// Every string under a key named `key`, anywhere in a JSON document.
fn json_strings(v: &serde_json::Value, key: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match v {
                    serde_json::Value::String(s) if k == key => out.push(s.clone()),
                    _ => json_strings(v, key, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| json_strings(v, key, out)),
        _ => {}
    }
}

/// Every string under a key named `key`, anywhere in a YAML document.
fn yaml_strings(v: &serde_norway::Value, key: &str, out: &mut Vec<String>) {
    match v {
        serde_norway::Value::Mapping(m) => {
            for (k, v) in m {
                match v {
                    serde_norway::Value::String(s) if k.as_str() == Some(key) => out.push(s.clone()),
                    _ => yaml_strings(v, key, out),
                }
            }
        }
        serde_norway::Value::Sequence(s) => s.iter().for_each(|v| yaml_strings(v, key, out)),
        _ => {}
    }
}

/// The `job="..."` values an expression matches on.
fn jobs_in(expr: &str) -> Vec<String> {
    expr.split("job=\"")
        .skip(1)
        .filter_map(|t| t.split('"').next())
        .map(str::to_owned)
        .collect()
}

fn scrape_jobs() -> BTreeSet<String> {
    let config = yaml("prometheus.yml");
    let rule_files = config["rule_files"].as_sequence().expect("rule_files");
    assert!(
        rule_files.iter().any(|f| f.as_str() == Some("alert-rules.yml")),
        "prometheus.yml loads the alert rules"
    );
    config["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs")
        .iter()
        .map(|c| c["job_name"].as_str().expect("job_name").to_owned())
        .collect()
}

/// Checks every name and job the expressions use; returns the names.
fn check_exprs(what: &str, exprs: &[String], defs: &[MetricDef]) -> BTreeSet<String> {
    let jobs = scrape_jobs();
    let mut used = BTreeSet::new();
    let mut wrong = Vec::new();
    for e in exprs {
        for name in names_in(e) {
            if let Some(why) = undefined(defs, &name) {
                wrong.push(format!("{why}, in {e:?}"));
            }
            used.insert(name);
        }
        for job in jobs_in(e) {
            if !jobs.contains(&job) {
                wrong.push(format!("job {job:?} is not scraped by prometheus.yml, in {e:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{what}:\n{}", wrong.join("\n"));
    used
}

#[test]
fn the_dashboard_queries_only_defined_metrics() {
    let defs = defined();
    let dashboard: serde_json::Value = serde_json::from_str(&read("grafana-dashboard.json")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().expect("an id")),
            "panel ids are unique"
        );
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    let mut exprs = Vec::new();
    json_strings(&dashboard, "expr", &mut exprs);
    let used = check_exprs("grafana-dashboard.json", &exprs, &defs);
    // Every daemon and recovery have their panels.
    for prefix in [
        "kintsugi_raft_",
        "kintsugi_control_",
        "kintsugi_memnode_",
        "kintsugi_gateway_",
        "kintsugi_recovery_",
    ] {
        assert!(
            used.iter().any(|n| n.starts_with(prefix)),
            "no panel shows {prefix}*"
        );
    }
}

#[test]
fn the_alert_rules_query_only_defined_metrics() {
    let defs = defined();
    let rules = yaml("alert-rules.yml");
    let mut names = BTreeSet::new();
    let mut exprs = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("every rule is an alert");
            assert!(names.insert(name.to_owned()), "{name} is defined twice");
            let severity = rule["labels"]["severity"].as_str();
            assert!(
                matches!(severity, Some("critical" | "warning" | "info")),
                "{name}: severity {severity:?}"
            );
            assert!(rule["annotations"]["summary"].is_string(), "{name}: a summary");
            exprs.push(rule["expr"].as_str().expect("expr").to_owned());
        }
    }
    check_exprs("alert-rules.yml", &exprs, &defs);

    // The rules' promtool tests feed series the daemons really export,
    // and test alerts that exist.
    let tests = yaml("alert-rules-test.yml");
    let mut series = Vec::new();
    yaml_strings(&tests, "series", &mut series);
    check_exprs("alert-rules-test.yml", &series, &defs);
    let mut tested = Vec::new();
    yaml_strings(&tests, "alertname", &mut tested);
    for t in tested {
        assert!(
            names.contains(&t),
            "alert-rules-test.yml tests {t}, which no rule defines"
        );
    }
}

#[test]
fn names_in_finds_whole_names_only() {
    assert_eq!(
        names_in("sum by (le) (rate(kintsugi_control_commit_seconds_bucket[5m])) / x_kintsugi_y"),
        ["kintsugi_control_commit_seconds_bucket"]
    );
    let defs = defined();
    assert_eq!(undefined(&defs, "kintsugi_control_commit_seconds_count"), None);
    assert!(undefined(&defs, "kintsugi_control_commit_seconds").is_some());
    assert!(undefined(&defs, "kintsugi_memnode_epoch_count").is_some());
    assert!(undefined(&defs, "kintsugi_nothing_total").is_some());
}
