//! `kintsugi fabric bench` end to end: the real binary, short runs, the JSON
//! it prints. No timing assertions: only that every figure is there and
//! positive, and that bad flags are refused with a message naming them.

mod support;

use serde_json::Value;

const KEYS: &[&str] = &[
    "verbs_per_sec",
    "round_trips_per_sec",
    "p50_us",
    "p99_us",
    "baseline_per_sec",
    "ratio",
];

/// Runs `kintsugi fabric bench ARGS`; returns exit code, stdout, stderr.
fn bench(args: &[&str]) -> (i32, String, String) {
    support::kintsugi(&[&["fabric", "bench"], args].concat())
}

/// Runs a short bench with `--json` and checks the object it prints.
fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["--duration", "200ms", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = bench(&all);
    assert_eq!(code, 0, "{all:?} failed:\n{stderr}");
    assert_eq!(stdout.lines().count(), 1, "--json prints one line:\n{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"));
    for key in ["transport", "op", "size"] {
        assert!(v.get(key).is_some(), "{all:?}: no {key:?} in {v}");
    }
    for key in KEYS {
        let x = v[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{all:?}: {key:?} is not a number in {v}"));
        assert!(x > 0.0 && x.is_finite(), "{all:?}: {key} = {x}");
    }
    assert!(v["stats"]["round_trips"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["stats"]["verb_errors"], 0, "{v}");
    assert!(
        stderr.contains("phase 1/2") && stderr.contains("phase 2/2"),
        "{stderr}"
    );
    v
}

#[test]
fn local_defaults() {
    let v = bench_json(&["--transport", "local"]);
    assert_eq!(v["transport"], "local");
    assert_eq!(v["op"], "read");
    assert_eq!(v["size"], 8);
}

#[test]
fn shm_cas_on_two_threads() {
    let v = bench_json(&["--transport", "shm", "--op", "cas", "--threads", "2"]);
    assert_eq!(v["transport"], "shm");
    assert_eq!(v["op"], "cas");
    // Every thread has its own words: no CAS ever fails.
    assert_eq!(v["stats"]["cas"], v["stats"]["round_trips"]);
    assert!(v["notes"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn tcp_defaults_and_pipelined_batches() {
    let v = bench_json(&["--transport", "tcp"]);
    assert_eq!(v["transport"], "tcp");
    let v = bench_json(&[
        "--transport",
        "tcp",
        "--op",
        "write",
        "--size",
        "1KiB",
        "--batch",
        "4",
        "--outstanding",
        "4",
    ]);
    assert_eq!(v["outstanding_effective"], 4);
    assert_eq!(
        v["stats"]["bytes_written"].as_u64(),
        v["stats"]["round_trips"].as_u64().map(|n| n * 4096)
    );
    assert!(v["frame_bytes"]["request"].as_u64().unwrap() > 4096, "{v}");
}

#[test]
fn outstanding_on_an_inline_transport_is_reported_not_ignored() {
    let v = bench_json(&["--transport", "local", "--outstanding", "4", "--op", "faa"]);
    assert_eq!(v["outstanding_effective"], 1);
    let notes = v["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("--outstanding 4 has no effect")),
        "{v}"
    );
    let (code, table, _) = bench(&["--duration", "100ms", "--outstanding", "4"]);
    assert_eq!(code, 0);
    assert!(
        table.contains("has no effect") && table.contains("fabric/baseline"),
        "{table}"
    );
}

#[test]
fn an_existing_memory_node_over_tcp_and_shm() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let image = dir.path().join("mn.img");
    let image = image.to_str().unwrap();
    let node = support::MemnodeProcess::start(&["--region", "1:1MiB", "--shm", image]);
    let v = bench_json(&["--transport", "tcp", "--addr", &node.addr, "--op", "cas"]);
    assert!(v["target"].as_str().unwrap().contains(&node.addr), "{v}");
    let v = bench_json(&[
        "--transport",
        "shm",
        "--shm",
        image,
        "--op",
        "read",
        "--size",
        "1KiB",
    ]);
    assert!(v["target"].as_str().unwrap().contains(image), "{v}");
    // A region too small for the run is refused before anything runs.
    let (code, _, stderr) = bench(&[
        "--transport",
        "shm",
        "--shm",
        image,
        "--threads",
        "256",
        "--batch",
        "4096",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("larger region"), "{stderr}");
}

#[test]
fn bad_arguments_get_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--op", "cas", "--size", "16"], "--size must be 8"),
        (&["--transport", "local", "--addr", "127.0.0.1:7100"], "--addr"),
        (&["--transport", "tcp", "--shm", "/dev/shm/x"], "--shm"),
        (&["--batch", "5000"], "VERBS_PER_BATCH_MAX"),
        (
            &["--op", "read", "--size", "1KiB", "--batch", "2048"],
            "BATCH_BYTES_MAX",
        ),
        (&["--threads", "0"], "--threads"),
        (&["--duration", "soon"], "not a duration"),
        (&["--transport", "rdma"], "rdma"),
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
