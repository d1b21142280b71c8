//! `kintsugi bench txn` and `kintsugi bench lease` end to end: the real
//! binary, tiny runs, the JSON they print. No timing assertions: only that
//! every figure is there and sensible, that the end-of-run check passed, and
//! that bad flags are refused with a message naming them.

mod support;

use serde_json::Value;

/// Runs `kintsugi bench ARGS`; returns exit code, stdout, stderr.
fn bench(args: &[&str]) -> (i32, String, String) {
    support::kintsugi(&[&["bench"], args].concat())
}

/// Runs a bench command with `--json` and parses the one object it prints.
fn bench_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, stdout, stderr) = bench(&all);
    assert_eq!(code, 0, "{all:?} failed:\n{stderr}");
    assert_eq!(stdout.lines().count(), 1, "--json prints one line:\n{stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key:?} is not a number in {v}"))
}

/// `bench txn` with tiny settings plus `args`; checks the figures every run has.
fn txn_json(args: &[&str]) -> Value {
    let mut all = vec!["txn", "--duration", "200ms", "--objects", "200"];
    all.extend_from_slice(args);
    let v = bench_json(&all);
    for key in [
        "commits_per_sec",
        "p50_us",
        "p99_us",
        "verbs_per_commit",
        "round_trips_per_commit",
        "bytes_read_per_commit",
        "bytes_written_per_commit",
    ] {
        let x = number(&v, key);
        assert!(x > 0.0 && x.is_finite(), "{all:?}: {key} = {x}");
    }
    for key in ["aborts_per_sec", "repairs_per_sec"] {
        let x = number(&v, key);
        assert!(x >= 0.0 && x.is_finite(), "{all:?}: {key} = {x}");
    }
    assert_eq!(v["objects"], 200);
    assert!(v["commits"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["check"]["ok"], true, "{v}");
    assert_eq!(v["stats"]["verb_errors"], 0, "{v}");
    v
}

#[test]
fn txn_single_object_commits_without_a_log() {
    let v = txn_json(&["--write-set", "1", "--threads", "2"]);
    assert_eq!(
        (v["write_set"].as_u64(), v["threads"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(v["logged_commits"], 0, "Opt1: {v}");
    // Reads: meta then data, 16 + 64 bytes, whatever the retries.
    assert!(number(&v, "round_trips_per_commit") >= 4.0, "{v}");
    assert!(number(&v, "bytes_read_per_commit") >= 80.0, "{v}");
}

#[test]
fn txn_multi_object_logs_on_shm_with_a_backup() {
    let v = txn_json(&[
        "--write-set",
        "3",
        "--transport",
        "shm",
        "--replicas",
        "2",
        "--object-bytes",
        "256",
    ]);
    assert_eq!(v["transport"], "shm");
    assert_eq!(v["replicas"], 2);
    assert_eq!(v["logged_commits"], v["commits"], "{v}");
    assert!(number(&v, "bytes_written_per_commit") >= 3.0 * 256.0, "{v}");
}

#[test]
fn txn_table_and_progress() {
    let (code, stdout, stderr) = bench(&["txn", "--duration", "100ms", "--objects", "50"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("commits/s") && stdout.contains("per commit:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("check:") && !stdout.contains("FAILED"),
        "{stdout}"
    );
    assert!(stderr.contains("txn bench: loading"), "{stderr}");
}

#[test]
fn lease_reports_every_cell() {
    let v = bench_json(&[
        "lease",
        "--duration",
        "200ms",
        "--drift",
        "1ms,8ms",
        "--locks",
        "1,3",
        "--threads",
        "3",
        "--objects",
        "20",
    ]);
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2 * 2 * 2, "{v}");
    for c in cells {
        assert!(c["transactions"].as_u64().unwrap() > 0, "{c}");
        let rate = c["false_expiry_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{c}");
        assert_eq!(c["check"]["ok"], true, "{c}");
    }
    assert_eq!(v["check_ok"], true);
    for table in ["with_regulation", "without_regulation"] {
        let rows = v["false_expiry_rate"][table].as_array().expect(table);
        assert_eq!(rows.len(), 2, "{v}");
        assert!(rows.iter().all(|r| r.as_array().map(Vec::len) == Some(2)), "{v}");
    }
    assert_eq!(v["drifts_ms"], serde_json::json!([1.0, 8.0]));
    // Regulation lengthens the lease by locks x 100us, rounded up to a lease
    // tick (1/256 ms): 1.3 ms is 332.8 ticks, so 333 = 1.30078125 ms.
    let lease = |locks: u64, regulated: bool| {
        cells
            .iter()
            .find(|c| c["locks"] == locks && c["drift_ms"] == 1.0 && c["regulated"] == regulated)
            .map(|c| {
                (
                    c["lease_ticks"].as_u64().unwrap(),
                    c["lease_ms"].as_f64().unwrap(),
                )
            })
    };
    assert_eq!(lease(3, true), Some((333, 1.30078125)));
    assert_eq!(lease(3, false), Some((256, 1.0)));
    // Leases run at most txn::LEAD_TICKS_MAX (1 ms) ahead of a client's clock.
    let lead = v["lease_lead_ms_max"].as_f64().expect("a lead was measured");
    assert!((0.0..=1.0).contains(&lead), "{v}");
}

#[test]
fn lease_table_has_both_regulations() {
    let (code, stdout, stderr) = bench(&[
        "lease",
        "--duration",
        "100ms",
        "--drift",
        "5ms",
        "--locks",
        "2",
        "--threads",
        "2",
        "--objects",
        "10",
        "--clock-skew",
        "0ms",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("with regulation") && stdout.contains("without regulation"),
        "{stdout}"
    );
    assert!(stderr.contains("cell 2/2"), "{stderr}");
}

#[test]
fn bad_arguments_get_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["txn", "--objects", "10", "--write-set", "11"], "--objects 10"),
        (&["txn", "--write-set", "64"], "LOG_ENTRIES_MAX"),
        (&["txn", "--write-set", "0"], "--write-set"),
        (&["txn", "--threads", "0"], "--threads"),
        (&["txn", "--objects", "0"], "--objects"),
        (&["txn", "--object-bytes", "40"], "--object-bytes"),
        (&["txn", "--replicas", "0"], "--replicas"),
        (&["txn", "--duration", "soon"], "not a duration"),
        (&["txn", "--transport", "tcp"], "tcp"),
        (&["lease", "--drift", "1ms,,5ms"], "comma-separated"),
        (&["lease", "--drift", "0ms"], "longer than zero"),
        (&["lease", "--locks", "1,x"], "not a number"),
        (&["lease", "--locks", "80"], "LOG_ENTRIES_MAX"),
        (&["lease", "--locks", "30", "--objects", "20"], "--objects 20"),
        (&["lease", "--threads", "0"], "--threads"),
        (&["lease", "--clock-skew", "500us"], "whole milliseconds"),
    ];
    for (args, needle) in cases {
        let (code, stdout, stderr) = bench(args);
        assert_ne!(code, 0, "{args:?} should fail");
        assert!(stdout.is_empty(), "{args:?} printed {stdout}");
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr lacks {needle:?}:\n{stderr}"
        );
    }
}

#[test]
fn help_explains_what_is_measured() {
    for (cmd, needle) in [("txn", "per commit"), ("lease", "false-expiry rate")] {
        let (code, stdout, _) = bench(&[cmd, "--help"]);
        assert_eq!(code, 0);
        assert!(
            stdout.contains(needle),
            "{cmd} --help lacks {needle:?}:\n{stdout}"
        );
    }
}
