//! `kintsugi bench smallbank` and `kintsugi bench tatp` end to end: the
//! real binary, tiny runs on both variants, the JSON they print. No timing
//! assertions: only that every figure is there and sensible, that the
//! end-of-run checks passed, and that bad flags are refused with a message
//! naming them.

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

/// Checks what every run of a report holds: both variants ran, every
/// type committed, the check passed.
fn check_runs(v: &Value, kinds: &[&str]) {
    assert_eq!(v["check_ok"], true, "{v}");
    let runs = v["runs"].as_array().expect("runs");
    let variants: Vec<&str> = runs.iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["rtx", "dtx"], "{v}");
    for r in runs {
        assert_eq!(r["check"]["ok"], true, "{r}");
        assert_eq!(r["check"]["locks_left"], 0, "{r}");
        assert_eq!(r["check"]["inconsistent"], 0, "{r}");
        assert_eq!(r["check"]["expected"], r["check"]["found"], "{r}");
        for key in [
            "commits_per_sec",
            "p50_us",
            "p99_us",
            "round_trips_per_commit",
            "verbs_per_commit",
        ] {
            let x = number(r, key);
            assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {r}");
        }
        assert!(number(r, "aborts") >= 0.0);
        for reason in ["locked", "changed", "repaired", "other", "at_commit"] {
            assert!(r["aborts_by_reason"][reason].is_u64(), "{reason} in {r}");
        }
        let per_kind = r["per_kind"].as_array().expect("per_kind");
        let names: Vec<&str> = per_kind.iter().map(|k| k["kind"].as_str().unwrap()).collect();
        assert_eq!(names, kinds);
        for k in per_kind {
            assert!(k["commits"].as_u64().unwrap() > 0, "every type ran: {k}");
            assert!(number(k, "round_trips_per_commit") >= 1.0, "{k}");
        }
    }
    let ratio = number(&v["rtx_over_dtx"], "median");
    assert!(ratio > 0.0 && ratio.is_finite(), "{v}");
}

#[test]
fn smallbank_runs_on_rtx_and_dtx_and_conserves_the_balances() {
    let v = bench_json(&[
        "smallbank",
        "--duration",
        "300ms",
        "--accounts",
        "200",
        "--threads",
        "2",
    ]);
    assert_eq!(v["bench"], "smallbank");
    assert_eq!(v["units"], 200);
    check_runs(
        &v,
        &[
            "Amalgamate",
            "Balance",
            "DepositChecking",
            "SendPayment",
            "TransactSavings",
            "WriteCheck",
        ],
    );
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["records"], 400, "{r}");
    }
}

#[test]
fn tatp_runs_on_rtx_and_dtx_with_every_row_valid() {
    let v = bench_json(&[
        "tatp",
        "--duration",
        "300ms",
        "--subscribers",
        "100",
        "--transport",
        "shm",
        "--replicas",
        "2",
    ]);
    assert_eq!(v["bench"], "tatp");
    check_runs(
        &v,
        &[
            "GetSubscriberData",
            "GetNewDestination",
            "GetAccessData",
            "UpdateSubscriberData",
            "UpdateLocation",
            "InsertCallForwarding",
            "DeleteCallForwarding",
        ],
    );
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["records"], 2200, "{r}");
    }
}

#[test]
fn rounds_alternate_the_order_and_the_table_shows_the_ratio() {
    let (code, stdout, stderr) = bench(&[
        "smallbank",
        "--duration",
        "100ms",
        "--accounts",
        "50",
        "--rounds",
        "2",
    ]);
    assert_eq!(code, 0, "{stderr}");
    for needle in [
        "rtx (round",
        "dtx (round",
        "rtx relative to dtx:",
        "median of 2 rounds",
        "check:",
    ] {
        assert!(stdout.contains(needle), "{needle:?} missing:\n{stdout}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
    // Round 2 runs dtx first.
    let first = |what: &str| stderr.find(what).unwrap_or(usize::MAX);
    assert!(first("round 2/2: dtx") < first("round 2/2: rtx"), "{stderr}");
    assert!(first("round 1/2: rtx") < first("round 1/2: dtx"), "{stderr}");
}

#[test]
fn one_variant_runs_alone_without_a_ratio() {
    let v = bench_json(&[
        "tatp",
        "--duration",
        "100ms",
        "--subscribers",
        "20",
        "--variant",
        "dtx",
    ]);
    assert_eq!(v["runs"].as_array().unwrap().len(), 1);
    assert!(v["rtx_over_dtx"].is_null(), "{v}");
    assert_eq!(v["check_ok"], true, "{v}");
}

#[test]
fn bad_arguments_get_clear_errors() {
    for (args, needle) in [
        (
            &["smallbank", "--variant", "optimal"][..],
            "optimal has no transactions",
        ),
        (
            &["tatp", "--variant", "rtx,optimal"][..],
            "optimal has no transactions",
        ),
        (
            &["smallbank", "--accounts", "0"][..],
            "--accounts must be between 2",
        ),
        (
            &["smallbank", "--accounts", "1"][..],
            "--accounts must be between 2",
        ),
        (
            &["tatp", "--subscribers", "0"][..],
            "--subscribers must be between 1",
        ),
        (&["tatp", "--threads", "0"][..], "--threads"),
        (&["smallbank", "--rounds", "0"][..], "--rounds"),
        (&["tatp", "--duration", "0s"][..], "--duration"),
        (&["smallbank", "--replicas", "0"][..], "--replicas"),
        (&["tatp", "--transport", "tcp"][..], "tcp"),
    ] {
        let (code, _, stderr) = bench(args);
        assert_ne!(code, 0, "{args:?} was accepted");
        assert!(stderr.contains(needle), "{args:?}: {needle:?} not in:\n{stderr}");
    }
}

#[test]
fn help_explains_what_is_measured() {
    for (cmd, needle) in [("smallbank", "hottest 4%"), ("tatp", "pre-allocated slots")] {
        let (code, stdout, _) = bench(&[cmd, "--help"]);
        assert_eq!(code, 0);
        for n in [needle, "What runs:", "round trips and verbs per commit"] {
            assert!(stdout.contains(n), "{cmd} --help lacks {n:?}:\n{stdout}");
        }
    }
}
