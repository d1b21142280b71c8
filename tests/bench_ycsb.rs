//! `kintsugi bench ycsb` end to end on a tiny tree.

mod support;

use support::{kintsugi, path_str};

#[test]
fn ycsb_runs_every_combination_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ycsb.json");
    let (code, stdout, stderr) = kintsugi(&[
        "bench",
        "ycsb",
        "--keys",
        "3000",
        "--duration",
        "200ms",
        "--workload",
        "a,e",
        "--dist",
        "uniform,zipf",
        "--transport",
        "local",
        "--threads",
        "2",
        "--coroutines",
        "2",
        "--json",
        path_str(&json),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("throughput relative to optimal"), "{stdout}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2, "variants x workloads x distributions");
    for r in &rows {
        for key in ["index", "variant", "workload", "dist"] {
            assert!(r[key].is_string(), "{key} in {r}");
        }
        for key in [
            "ops_per_sec",
            "p50_us",
            "p99_us",
            "round_trips_per_op",
            "bytes_read_per_op",
        ] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{key} in {r}");
        }
        assert!(r["bytes_written_per_op"].as_f64().unwrap() >= 0.0);
        // No assertion on repairs: a client descheduled past its lease on a
        // loaded machine is (safely) repaired by a peer; that is timing.
        assert!(r["repairs"].is_u64() && r["aborts"].is_u64(), "{r}");
    }
}

#[test]
fn ycsb_refuses_bad_arguments() {
    for (args, needle) in [
        (vec!["bench", "ycsb", "--workload", "f"], "workload"),
        (vec!["bench", "ycsb", "--keys", "0"], "--keys"),
        (vec!["bench", "ycsb", "--fill", "2"], "--fill"),
        (vec!["bench", "ycsb", "--threads", "0"], "--threads"),
        (vec!["bench", "ycsb", "--variant", "dtx"], "variant"),
    ] {
        let (code, _, stderr) = kintsugi(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
