//! `kintsugi bench control` end to end: the real binary starts real member
//! processes, and the JSON it prints has every figure. No timing assertions:
//! only that the run completed, measured what it says, and that bad flags
//! are refused with a message naming them.

mod support;

use serde_json::Value;

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key:?} is not a number in {v}"))
}

#[test]
fn a_small_run_measures_commits_watch_and_one_failover() {
    let args = [
        "bench",
        "control",
        "--members",
        "3",
        "--ops",
        "50",
        "--failovers",
        "1",
        "--json",
    ];
    let (code, stdout, stderr) = support::kintsugi(&args);
    assert_eq!(code, 0, "{args:?} failed:\n{stderr}");
    assert_eq!(stdout.lines().count(), 1, "--json prints one line:\n{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"));

    assert_eq!(
        (v["members"].as_u64(), v["ops"].as_u64()),
        (Some(3), Some(50)),
        "{v}"
    );
    assert_eq!(v["concurrency"], 1, "{v}");
    for key in [
        "commits_per_sec",
        "commit_p50_us",
        "commit_p99_us",
        "status_rtt_p50_us",
    ] {
        let x = number(&v, key);
        assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {v}");
    }
    // A watcher may see a change before the writer's acknowledgement
    // arrives: those count as 0, so the gaps may be 0.
    for key in ["watch_p50_us", "watch_p99_us"] {
        let x = number(&v, key);
        assert!(x >= 0.0 && x.is_finite(), "{key} = {x} in {v}");
    }
    assert!(number(&v, "commit_p99_us") >= number(&v, "commit_p50_us"), "{v}");
    assert_eq!(v["watch_ops"], 50, "{v}");
    assert_eq!(v["watch_member_role"], "follower", "{v}");

    let failovers = v["failover_ms"]
        .as_array()
        .unwrap_or_else(|| panic!("failover_ms is not a list in {v}"));
    assert_eq!(failovers.len(), 1, "{v}");
    let f = failovers[0].as_f64().expect("a failover time in ms");
    assert!(f > 0.0 && f.is_finite(), "{v}");
    assert_eq!(number(&v, "failover_ms_max"), f, "{v}");
    assert_eq!(v["target_failover_ms"], 1000, "{v}");
    let round = &v["failover_rounds"][0];
    assert_ne!(
        round["killed"], round["new_leader"],
        "a killed leader cannot lead again at once: {v}"
    );
    assert!(round["writes_sent"].as_u64().is_some_and(|n| n >= 1), "{v}");
}

#[test]
fn bad_flags_are_refused_naming_them() {
    let cases: [(&[&str], &str); 5] = [
        (&["--members", "0"], "--members must be between 1 and 7"),
        (&["--members", "8"], "--members must be between 1 and 7"),
        (&["--failovers", "1", "--members", "1"], "needs --members 3"),
        (&["--ops", "0"], "--ops must be between"),
        (
            &["--concurrency", "300"],
            "--concurrency must be between 1 and 256",
        ),
    ];
    for (args, want) in cases {
        let all = [&["bench", "control"], args].concat();
        let (code, stdout, stderr) = support::kintsugi(&all);
        assert_ne!(code, 0, "{all:?} should fail; stdout:\n{stdout}");
        assert!(
            stderr.contains(want),
            "{all:?}: {stderr:?} should mention {want:?}"
        );
        assert!(stdout.is_empty(), "{all:?} printed to stdout: {stdout}");
    }
}
