//! `kintsugi chaos run` end to end with real processes: small kill-client
//! experiments (seconds, a tiny key count): with a control plane on shm
//! and on two tcp memory nodes, and without one. Asserts outcomes and
//! checks, never timings.

mod support;

use std::path::Path;
use support::{kintsugi, path_str};

const EXPERIMENT: &str = r#"
name = "kill-client-small"
duration = "1500ms"
[cluster]
clients = 3
[index]
kind = "btree"
variants = ["optimal", "rtx"]
expect_violations = ["optimal"]
[workload]
ycsb = "insert"
keys = 20000
[[faults]]
kind = "kill-client"
client = 2
at = "500ms"
"#;

#[test]
fn a_killed_client_is_repaired_around_by_rtx_and_blocks_optimal() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kill.toml");
    std::fs::write(&file, EXPERIMENT).unwrap();
    let out = dir.path().join("out");
    let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&file), "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("PASSED"), "{stdout}");

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["passed"], true);
    let variants = summary["variants"].as_array().unwrap();
    let (optimal, rtx) = (&variants[0], &variants[1]);

    // rtx: the survivors finish, every acknowledged write is there, no lock is left.
    assert_eq!(rtx["passed"], true, "{rtx}");
    let fates: Vec<&str> = rtx["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["fate"].as_str().unwrap())
        .collect();
    assert_eq!(fates, ["finished", "finished", "killed"], "{rtx}");
    let check = &rtx["check"];
    assert_eq!(check["structure_violations"], 0, "{check}");
    assert!(check["history"]["acked_writes"].as_u64().unwrap() > 0, "{check}");
    for k in ["missing", "wrong_value", "unexpected"] {
        assert_eq!(check["history"][k], 0, "{k}: {check}");
    }
    assert_eq!(rtx["faults"][0]["kind"], "kill-client");
    // The control plane leased each client its owner ids; it expired the
    // killed client's lease, and forgot it once the checker had rolled what
    // it left.
    let cp = &rtx["control_plane"];
    let nodes = cp["memory_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{cp}");
    assert_eq!(nodes[0]["state"], "active", "{cp}");
    let leases = cp["clients"].as_array().unwrap();
    let lease = |c: u64| leases.iter().find(|l| l["client"] == c).unwrap();
    assert_eq!(lease(2)["state"], "expired", "{cp}");
    assert_eq!(lease(2)["forgotten"], true, "{cp}");
    let mut owners: Vec<u64> = (0..3)
        .map(|c| lease(c)["owner_first"].as_u64().unwrap())
        .collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners.len(), 3, "distinct owner ids: {cp}");

    // optimal: the victim died holding a lock that nobody can release.
    assert_eq!(optimal["passed"], false, "{optimal}");
    assert_eq!(optimal["expect_violations"], true);
    assert!(optimal["check"]["locks_held"].as_u64().unwrap() >= 1, "{optimal}");
    // Its owner id stays taken: a new holder would seem to own the lock.
    for l in optimal["control_plane"]["clients"].as_array().unwrap() {
        assert_eq!(l["forgotten"], false, "{l}");
    }

    // The outputs.
    let csv = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    assert!(
        csv.starts_with("ms,optimal,rtx\n"),
        "{}",
        &csv[..40.min(csv.len())]
    );
    assert!(csv.lines().count() > 1000, "1 ms buckets over 1.5 s");
    let png = std::fs::read(out.join("timeline.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let history = std::fs::read_to_string(out.join("history.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(history.lines().next().unwrap()).unwrap();
    assert!(first["variant"].is_string() && first["key"].is_u64(), "{first}");
    // No memory image is left behind.
    let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("kill-client-small"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Nor the control plane's data.
    for v in ["optimal", "rtx"] {
        assert!(
            !out.join(v).join("control-plane-1").exists(),
            "{v}/control-plane-1"
        );
    }
}

/// Runs the small experiment changed by `edits` (rtx only, YCSB A over
/// 2,000 keys) and returns the rtx variant's summary.
fn run_small(name: &str, edits: &[(&str, &str)]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("small.toml");
    let mut experiment = EXPERIMENT
        .replace("kill-client-small", name)
        .replace("[\"optimal\", \"rtx\"]", "[\"rtx\"]")
        .replace("expect_violations = [\"optimal\"]", "")
        .replace("ycsb = \"insert\"", "ycsb = \"a\"")
        .replace("keys = 20000", "keys = 2000");
    for (from, to) in edits {
        assert!(experiment.contains(from), "{from}");
        experiment = experiment.replacen(from, to, 1);
    }
    std::fs::write(&file, experiment).unwrap();
    let out = dir.path().join("out");
    let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&file), "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rtx = summary["variants"][0].clone();
    assert_eq!(rtx["passed"], true, "{rtx}");
    assert!(
        rtx["check"]["history"]["acked_writes"].as_u64().unwrap() > 0,
        "{rtx}"
    );
    rtx
}

/// Figure 14's DTX line: the survivors wait on the dead client's locks
/// (no online repair) until the runner rolls its DTX logs, once the control
/// plane expired it and its quarantine is over; then they finish and every
/// check passes.
#[test]
fn a_killed_dtx_client_is_rolled_back_after_its_quarantine_and_the_survivors_finish() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dtx.toml");
    let experiment = EXPERIMENT
        .replace("kill-client-small", "kill-client-dtx-small")
        .replace("duration = \"1500ms\"", "duration = \"2500ms\"")
        .replace("clients = 3", "clients = 3\nclient_lease = \"300ms\"")
        .replace("[\"optimal\", \"rtx\"]", "[\"dtx\"]")
        .replace("expect_violations = [\"optimal\"]", "");
    std::fs::write(&file, experiment).unwrap();
    let out = dir.path().join("out");
    let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&file), "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let dtx = &summary["variants"][0];
    assert_eq!(dtx["variant"], "dtx");
    assert_eq!(dtx["passed"], true, "{dtx}");
    assert_eq!(fates(dtx), ["finished", "finished", "killed"], "{dtx}");
    let rolled = dtx["dtx_rolled"]
        .as_array()
        .unwrap_or_else(|| panic!("nothing rolled: {dtx}"));
    assert_eq!(rolled.len(), 1, "{dtx}");
    assert_eq!(rolled[0]["client"], 2);
    // Rolled after its expiry (the quarantine), never before.
    assert!(
        rolled[0]["rolled_at_ms"].as_f64().unwrap() > rolled[0]["expired_at_ms"].as_f64().unwrap(),
        "{dtx}"
    );
    assert!(stderr.contains("client 2's DTX logs rolled"), "{stderr}");
}

fn fates(v: &serde_json::Value) -> Vec<String> {
    v["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["fate"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_killed_client_of_a_replicated_tcp_cluster_is_repaired_around_by_rtx() {
    let rtx = run_small(
        "kill-client-replicated-small",
        &[
            (
                "clients = 3",
                "clients = 3\nmemory_nodes = 2\ntransport = \"tcp\"",
            ),
            ("client = 2", "client = 0"),
        ],
    );
    assert_eq!(fates(&rtx), ["killed", "finished", "finished"], "{rtx}");
    // Both memory nodes registered with the control plane and renewed.
    let cp = &rtx["control_plane"];
    let nodes = cp["memory_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{cp}");
    assert!(nodes.iter().all(|n| n["state"] == "active"), "{cp}");
    let killed = cp["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["client"] == 0)
        .unwrap();
    assert_eq!(killed["state"], "expired", "{cp}");
    assert_eq!(killed["forgotten"], true, "{cp}");
    // The backup was compared with the primary, node by node, and agrees.
    let replicas = &rtx["check"]["replicas"];
    assert_eq!(replicas["replicas"], 2, "{replicas}");
    assert!(replicas["objects"].as_u64().unwrap() > 0, "{replicas}");
    assert!(replicas["words_compared"].as_u64().unwrap() > 0, "{replicas}");
    assert_eq!(replicas["differences"], 0, "{replicas}");
}

#[test]
fn a_replicated_hash_table_keeps_its_backups_equal_through_a_killed_client() {
    // RACE hashing's slot CASes reach the backups after the primary
    // (index/src/hash/replicate.rs); a writer killed between the two leaves
    // them apart until the checker converges them, as recovery would.
    // (Before, the backups kept the slots of the load and this run failed.)
    // The data compared is the table's own objects' (`ObjectSizes`):
    // with one length for every meta, the directory's compare ran past its
    // block (1 run in 4 failed), and an aborted split's orphan meta named a
    // block reused since (1 in 30).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hash.toml");
    let experiment = EXPERIMENT
        .replace("kill-client-small", "hash-replicated")
        .replace("[\"optimal\", \"rtx\"]", "[\"rtx\"]")
        .replace("expect_violations = [\"optimal\"]", "")
        .replace("kind = \"btree\"", "kind = \"hash\"")
        .replacen("clients = 3", "clients = 3\nmemory_nodes = 2", 1);
    std::fs::write(&file, experiment).unwrap();
    let out = dir.path().join("out");
    let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&file), "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rtx = &summary["variants"][0];
    assert_eq!(rtx["passed"], true, "{rtx}");
    let replicas = &rtx["check"]["replicas"];
    assert_eq!(replicas["replicas"], 2, "{rtx}");
    assert!(replicas["words_compared"].as_u64().unwrap() > 0, "{rtx}");
    assert_eq!(replicas["differences"], 0, "{rtx}");
    assert_eq!(rtx["check"]["history"]["missing"], 0, "{rtx}");
    assert!(
        stdout.contains("replicas: 1 backup(s) against the primary"),
        "{stdout}"
    );
}

#[test]
fn without_a_control_plane_owner_ids_are_numbered_and_the_checker_has_its_own() {
    // The last client's last thread holds the highest client owner id: the
    // checker must not share it, or it would take the victim's expired
    // locks for its own.
    let rtx = run_small(
        "kill-client-numbered-small",
        &[(
            "clients = 3",
            "clients = 3\nthreads_per_client = 2\ncontrol_plane = false",
        )],
    );
    assert_eq!(fates(&rtx), ["finished", "finished", "killed"], "{rtx}");
    assert!(rtx["control_plane"].is_null(), "{rtx}");
}

#[test]
fn a_client_paused_mid_operation_resumes_and_every_check_passes() {
    let rtx = run_small(
        "pause-client-small",
        &[
            ("kind = \"kill-client\"", "kind = \"pause-client\""),
            ("at = \"500ms\"", "at = \"500ms\"\nfor = \"100ms\""),
        ],
    );
    assert_eq!(fates(&rtx), ["finished", "finished", "finished"], "{rtx}");
    assert_eq!(rtx["clients"][2]["paused"], true, "{rtx}");
    assert_eq!(rtx["faults"][0]["kind"], "pause-client");
}

#[test]
fn chaos_run_refuses_a_bad_experiment_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, EXPERIMENT.replace("client = 2", "client = 5")).unwrap();
    let (code, _, stderr) = kintsugi(&["chaos", "run", path_str(&file)]);
    assert_ne!(code, 0);
    assert!(stderr.contains("faults[0].client"), "{stderr}");
    let (code, _, stderr) = kintsugi(&["chaos", "run", "/nonexistent.toml"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("cannot read"), "{stderr}");
}

#[test]
fn demo_quick_runs_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let (code, stdout, stderr) = kintsugi(&["demo", "--quick", "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("demo: all checks passed"), "{stdout}");
    let mut kept: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        [
            "btree-summary.json",
            "btree-timeline.png",
            "hash-summary.json",
            "hash-timeline.png"
        ]
    );
}

/// Runs a shipped memory-node experiment (shortened) and returns its
/// summary.json; the run must pass.
fn run_memnode_experiment(file: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .unwrap()
        .replace("keys = 20000", "keys = 4000");
    let path = dir.path().join("e.toml");
    std::fs::write(&path, text).unwrap();
    let out = dir.path().join("out");
    let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&path), "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("re-replicated after"), "{stdout}");
    assert!(out.join("timeline.png").exists() && out.join("timeline.csv").exists());
    let csv = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    for phase in ["kill-memnode", "detected", "serving", "re-replicated"] {
        assert!(csv.contains(phase), "the timeline marks {phase}");
    }
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

fn assert_recovered(summary: &serde_json::Value) {
    assert_eq!(summary["passed"], true, "{summary}");
    let check = &summary["check"];
    assert_eq!(check["errors"].as_array().unwrap().len(), 0, "{check}");
    assert_eq!(check["lost"], 0, "{check}");
    assert_eq!(check["structure_violations"], 0, "{check}");
    assert_eq!(check["replicas"]["replicas"], 3, "{check}");
    assert_eq!(check["replicas"]["differences"], 0, "{check}");
    let kill = &summary["faults"][0];
    for phase in ["detected_ms", "evicted_ms", "serving_ms", "rereplicated_ms"] {
        assert!(kill["phases"][phase].as_f64().is_some(), "{phase}: {kill}");
    }
    let p = &kill["phases"];
    assert!(p["detected_ms"].as_f64() <= p["serving_ms"].as_f64(), "{kill}");
    assert!(
        p["serving_ms"].as_f64() <= p["rereplicated_ms"].as_f64(),
        "{kill}"
    );
}

#[test]
fn kill_primary_promotes_a_backup_and_re_replicates_losing_nothing() {
    let s = run_memnode_experiment("deploy/experiments/kill-primary.toml");
    assert_recovered(&s);
    assert_eq!(s["faults"][0]["role"], "primary");
}

#[test]
fn kill_primary_of_a_dtx_index_promotes_and_finishes_its_logs_losing_nothing() {
    let s = run_memnode_experiment("deploy/experiments/kill-primary-dtx.toml");
    assert_recovered(&s);
    assert_eq!(s["experiment"]["index"]["variants"][0], "dtx", "{s}");
}

#[test]
fn restart_primary_on_a_hash_table_brings_the_node_back_as_a_spare() {
    let s = run_memnode_experiment("deploy/experiments/restart-primary-hash.toml");
    assert_recovered(&s);
    let restart = &s["faults"][1];
    assert_eq!(restart["kind"], "restart-memnode");
    assert_eq!(restart["node"], s["faults"][0]["node"]);
    assert!(restart["phases"]["active_ms"].as_f64().is_some(), "{restart}");
}

/// Degraded is a state (issue 46): two backups killed in turn with one
/// spare. The first is refilled; the second leaves nothing to refill on,
/// and the run is judged by the degraded state (as `ctl status` shows it),
/// not failed for a re-replication that cannot happen (it used to wait a
/// minute and fail, though nothing was lost).
#[test]
fn two_backups_killed_with_one_spare_settle_degraded_losing_nothing() {
    let s = run_memnode_experiment("deploy/experiments/kill-two-backups.toml");
    assert_eq!(s["passed"], true, "{s}");
    let check = &s["check"];
    assert_eq!(
        (check["lost"].as_u64(), check["structure_violations"].as_u64()),
        (Some(0), Some(0)),
        "{check}"
    );
    // The two replicas left agree.
    assert_eq!(check["replicas"]["replicas"], 2, "{check}");
    assert_eq!(check["replicas"]["differences"], 0, "{check}");
    let (first, second) = (&s["faults"][0]["phases"], &s["faults"][1]["phases"]);
    assert!(
        first["rereplicated_ms"].as_f64().is_some() && first.get("degraded").is_none(),
        "{first}"
    );
    assert!(second["rereplicated_ms"].as_f64().is_some(), "{second}");
    assert_eq!(second["degraded"], true, "{second}");
}

/// A mixed-rf cluster (issue 46, path 3): rf 1 and rf 2 indexes beside
/// the checked rf-3 one, and the node of the single copy killed. The
/// single copy is reported lost and removed by its operator action; the
/// rf-2 index reads back every key; the checked one loses nothing.
#[test]
fn a_single_copy_lost_with_its_node_is_reported_and_dropped_while_every_other_index_serves() {
    let dir = tempfile::tempdir().unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/experiments/mixed-rf-hash.toml");
    let out = dir.path().join("out");
    let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&path), "--out", path_str(&out)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["passed"], true, "{s}");
    assert_eq!(s["check"]["lost"], 0, "{s}");
    assert_eq!(s["check"]["replicas"]["differences"], 0, "{s}");
    let kill = &s["faults"][0];
    assert_eq!(kill["role"], "sole-copy", "{kill}");
    assert!(kill["phases"]["lost_ms"].as_f64().is_some(), "{kill}");
    let (solo, pair) = (&s["sides"][0], &s["sides"][1]);
    assert_eq!(solo["replicas"], 1, "{solo}");
    assert!(
        solo["lost"]
            .as_str()
            .is_some_and(|why| why.contains("no live, allocated backup")),
        "{solo}"
    );
    assert_eq!(solo["dropped"], true, "{solo}");
    assert_eq!(
        (pair["replicas"].as_u64(), pair["lost"].as_str()),
        (Some(2), None),
        "{pair}"
    );
    assert_eq!(pair["read_back"], 500, "{pair}");
    assert!(
        stdout.contains("reported lost after") && stdout.contains("--confirm` removed it"),
        "{stdout}"
    );
}

#[test]
fn memnode_faults_refuse_what_cannot_survive_them() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/experiments/kill-backup.toml"),
    )
    .unwrap();
    for (from, to, says) in [
        (
            "variants = [\"rtx\"]",
            "variants = [\"optimal\", \"rtx\"]",
            "index.variants",
        ),
        ("memory_nodes = 3", "memory_nodes = 1", "cluster.memory_nodes"),
        ("role = \"backup\"\n", "", "faults[0].role"),
        ("ycsb = \"a\"", "ycsb = \"b\"", "workload"),
        (
            "memnode_lease = \"100ms\"",
            "memnode_lease = \"10ms\"",
            "cluster.memnode_lease",
        ),
        (
            "kind = \"kill-memnode\"",
            "kind = \"restart-memnode\"",
            "faults[0]",
        ),
    ] {
        assert!(base.contains(from), "{from}");
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, base.replacen(from, to, 1)).unwrap();
        let (code, stdout, stderr) = kintsugi(&["chaos", "run", path_str(&path)]);
        assert_ne!(code, 0, "{from} -> {to}: {stdout}");
        assert!(stderr.contains(says), "{from} -> {to}: {stderr}");
    }
}
