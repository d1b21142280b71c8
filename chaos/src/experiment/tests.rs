//! The experiment file's rules, each broken in turn.

use super::*;

const GOOD: &str = r#"
name = "kill-client"
duration = "3s"
[cluster]
clients = 3
[index]
kind = "btree"
variants = ["optimal", "rtx"]
expect_violations = ["optimal"]
[workload]
ycsb = "insert"
keys = 1000
[[faults]]
kind = "kill-client"
client = 2
at = "1s"
[[faults]]
kind = "pause-client"
client = 0
at = "1500ms"
for = "100ms"
"#;

/// `base` with `from` replaced by `to` is refused naming `field`, or
/// (`field` empty) accepted.
fn assert_rule(base: &str, from: &str, to: &str, field: &str) {
    assert!(base.contains(from), "{from}");
    let r = Experiment::from_toml(&base.replacen(from, to, 1));
    if field.is_empty() {
        assert!(r.is_ok(), "{to}: {r:?}");
    } else {
        let e = r.expect_err(to).to_string();
        assert!(e.contains(field), "{to}: {e}");
    }
}

#[test]
fn a_good_file_parses_with_defaults() {
    let e = Experiment::from_toml(GOOD).unwrap();
    assert_eq!(e.duration, Duration::from_secs(3));
    assert_eq!(e.cluster.transport, TransportKind::Shm);
    assert_eq!(e.cluster.threads_per_client, 1);
    assert_eq!(e.seed, 42);
    assert_eq!(e.faults[1].pause, Some(Duration::from_millis(100)));
    assert_eq!(e.workload().unwrap().workload, Workload::Insert);
    assert_eq!(e.owner_ids(), 5);
    assert_eq!(e.cluster.memory_nodes, 1);
    assert!(e.cluster.control_plane);
    assert_eq!(e.cluster.client_lease, Duration::from_secs(1));
}

#[test]
fn every_rule_names_its_field() {
    for (from, to, field) in [
        ("name = \"kill-client\"", "name = \"a b\"", "name"),
        ("duration = \"3s\"", "duration = \"0s\"", "duration"),
        ("clients = 3", "clients = 0", "cluster.clients"),
        (
            "clients = 3",
            "clients = 3\nmemory_nodes = 4",
            "cluster.memory_nodes",
        ),
        ("clients = 3", "clients = 3\nmemory_nodes = 3", ""),
        (
            "clients = 3",
            "clients = 3\nclient_lease = \"10ms\"",
            "cluster.client_lease",
        ),
        (
            "clients = 3",
            "clients = 64\nthreads_per_client = 4",
            "owner ids 1..256",
        ),
        (
            "clients = 3",
            "clients = 64\nthreads_per_client = 4\ncontrol_plane = false",
            "",
        ),
        (
            "clients = 3",
            "clients = 3\nclient_lease = \"150ms\"",
            "faults[1].for",
        ),
        ("\"optimal\", \"rtx\"]", "\"rtx\", \"rtx\"]", "index.variants"),
        (
            "expect_violations = [\"optimal\"]",
            "expect_violations = [\"ford\"]",
            "variant",
        ),
        ("ycsb = \"insert\"", "ycsb = \"z\"", "workload.ycsb"),
        ("keys = 1000", "keys = 0", "workload.keys"),
        ("client = 2", "client = 3", "faults[0].client"),
        ("at = \"1s\"", "at = \"9s\"", "faults[0].at"),
        ("at = \"1s\"", "at = \"2s\"", "faults[1].at"),
        ("for = \"100ms\"", "for = \"1ms\"", "faults[1].for"),
        ("for = \"100ms\"", "for = \"2s\"", "faults[1].for"),
        ("client = 0", "client = 2", "faults[1].client"),
        ("kind = \"btree\"", "kind = \"hash\"\n", ""),
        ("[workload]", "[workload]\nbogus = 1", "bogus"),
    ] {
        assert_rule(GOOD, from, to, field);
    }
    let hash_e = GOOD
        .replace("kind = \"btree\"", "kind = \"hash\"")
        .replace("\"insert\"", "\"e\"");
    let e = Experiment::from_toml(&hash_e).unwrap_err().to_string();
    assert!(e.contains("no scans"), "{e}");
}

const CLUSTER: &str = r#"
name = "cluster-faults"
duration = "4s"
[cluster]
memory_nodes = 3
spares = 2
transport = "tcp"
clients = 2
[index]
kind = "btree"
variants = ["rtx"]
[workload]
ycsb = "a"
keys = 1000
[[faults]]
kind = "pause-memnode"
role = "backup"
at = "1s"
for = "300ms"
[[faults]]
kind = "kill-control-leader"
at = "1500ms"
for = "500ms"
[[faults]]
kind = "clock-skew"
client = 1
skew_ms = -5
at = "2s"
[[faults]]
kind = "partition"
target = "memnode"
role = "primary"
members = [1, 3]
at = "2500ms"
for = "300ms"
"#;

#[test]
fn local_cluster_fault_rules_name_their_field() {
    let e = Experiment::from_toml(CLUSTER).unwrap();
    assert!(e.on_memnodes());
    assert_eq!(e.faults[2].skew_ms, Some(-5));
    assert_eq!(e.faults[3].members, vec![1, 3]);
    for (from, to, field) in [
        ("for = \"300ms\"", "", "faults[0].for"),
        ("role = \"backup\"", "", "faults[0].role"),
        ("for = \"300ms\"", "for = \"10ms\"", "faults[0].for"),
        ("for = \"300ms\"", "for = \"9s\"", "faults[0].for"),
        // A second leader kill while the first is down.
        ("at = \"1500ms\"\nfor = \"500ms\"", "at = \"1500ms\"", ""),
        (
            "at = \"2s\"",
            "at = \"1600ms\"\n[[faults]]\nkind = \"kill-control-leader\"\nat = \"1700ms\"",
            "faults",
        ),
        ("skew_ms = -5", "", "faults[2].skew_ms"),
        ("skew_ms = -5", "skew_ms = 20000", "faults[2].skew_ms"),
        ("client = 1", "client = 2", "faults[2].client"),
        ("target = \"memnode\"", "", "faults[3].target"),
        ("target = \"memnode\"", "target = \"switch\"", "unknown variant"),
        ("members = [1, 3]", "members = [4]", "faults[3].members"),
        (
            "target = \"memnode\"\nrole = \"primary\"",
            "target = \"client\"\nclient = 1",
            "",
        ),
        (
            "target = \"memnode\"\nrole = \"primary\"",
            "target = \"client\"\nclient = 5",
            "faults[3].client",
        ),
        (
            "kind = \"clock-skew\"",
            "kind = \"kill-client\"",
            "faults[2].kind",
        ),
    ] {
        assert_rule(CLUSTER, from, to, field);
    }
}

#[test]
fn a_wipe_takes_a_role_no_duration_and_tcp() {
    let wipe = CLUSTER.replacen(
        "kind = \"pause-memnode\"\nrole = \"backup\"\nat = \"1s\"\nfor = \"300ms\"",
        "kind = \"wipe-memnode\"\nrole = \"backup\"\nat = \"1s\"",
        1,
    );
    let e = Experiment::from_toml(&wipe).unwrap();
    assert_eq!(e.faults[0].kind, FaultKind::WipeMemnode);
    assert!(e.on_memnodes());
    for (from, to, field) in [
        ("role = \"backup\"", "", "faults[0].role"),
        ("at = \"1s\"", "at = \"1s\"\nfor = \"300ms\"", "faults[0].for"),
        ("transport = \"tcp\"", "transport = \"shm\"", "cluster.transport"),
    ] {
        assert_rule(&wipe, from, to, field);
    }
}

#[test]
fn a_leader_fault_takes_an_optional_role_and_a_pause_past_an_election() {
    let pause = CLUSTER.replacen(
        "kind = \"pause-memnode\"\nrole = \"backup\"\nat = \"1s\"\nfor = \"300ms\"",
        "kind = \"pause-control-leader\"\nrole = \"backup\"\nat = \"500ms\"\nfor = \"1s\"",
        1,
    );
    let e = Experiment::from_toml(&pause).unwrap();
    assert_eq!(e.faults[0].kind, FaultKind::PauseControlLeader);
    assert!(e.on_memnodes());
    for (from, to, field) in [
        // Without a role: the leader paused on a quiet cluster.
        ("role = \"backup\"\n", "", ""),
        ("for = \"1s\"", "", "faults[0].for"),
        // Shorter than an election: no other member may lead meanwhile.
        ("for = \"1s\"", "for = \"400ms\"", "faults[0].for"),
        ("for = \"1s\"", "for = \"4s\"", "faults[0].for"),
        // The leader killed at 1.5 s while it is still paused.
        ("at = \"500ms\"", "at = \"1s\"", "faults[1].at"),
        (
            "kind = \"pause-control-leader\"",
            "kind = \"transfer-leader\"",
            "faults[0].for",
        ),
        (
            "kind = \"pause-control-leader\"\nrole = \"backup\"\nat = \"500ms\"\nfor = \"1s\"",
            "kind = \"transfer-leader\"\nrole = \"primary\"\nat = \"500ms\"",
            "",
        ),
        ("role = \"backup\"", "role = \"spare\"", "unknown variant"),
    ] {
        assert_rule(&pause, from, to, field);
    }
    // A role kills that node first: it counts against what the cluster can lose.
    let small =
        pause
            .replacen("spares = 2", "spares = 0", 1)
            .replacen("memory_nodes = 3", "memory_nodes = 2", 1);
    let e = Experiment::from_toml(&small).unwrap_err().to_string();
    assert!(e.contains("faults") && e.contains("more memory nodes"), "{e}");
}

#[test]
fn a_snapshot_restore_takes_a_role_and_comes_once() {
    let restore = CLUSTER.replacen(
        "kind = \"pause-memnode\"\nrole = \"backup\"\nat = \"1s\"\nfor = \"300ms\"",
        "kind = \"snapshot-restore\"\nrole = \"primary\"\nat = \"1s\"",
        1,
    );
    let e = Experiment::from_toml(&restore).unwrap();
    assert_eq!(e.faults[0].kind, FaultKind::SnapshotRestore);
    for (from, to, field) in [
        ("role = \"primary\"\nat = \"1s\"", "at = \"1s\"", "faults[0].role"),
        // `for`: the killed node started again that long after the restore.
        ("at = \"1s\"", "at = \"1s\"\nfor = \"300ms\"", ""),
        ("at = \"1s\"", "at = \"1s\"\nfor = \"5s\"", "faults[0].for"),
        (
            "at = \"1s\"",
            "at = \"1s\"\n[[faults]]\nkind = \"snapshot-restore\"\nrole = \"backup\"\nat = \"1200ms\"",
            "faults[1].kind",
        ),
    ] {
        assert_rule(&restore, from, to, field);
    }
}

#[test]
fn side_indexes_and_the_sole_copy_role_name_their_field() {
    let mixed = CLUSTER
        .replacen("clients = 2\n", "clients = 2\nside_replicas = [1, 2]\n", 1)
        .replacen(
            "kind = \"pause-memnode\"\nrole = \"backup\"\nat = \"1s\"\nfor = \"300ms\"",
            "kind = \"kill-memnode\"\nrole = \"sole-copy\"\nat = \"1s\"",
            1,
        );
    let e = Experiment::from_toml(&mixed).unwrap();
    assert_eq!(e.cluster.side_replicas, [1, 2]);
    assert_eq!(e.faults[0].role, Some(ReplicaRole::SoleCopy));
    for (from, to, field) in [
        ("side_replicas = [1, 2]", "side_replicas = [2]", "faults[0].role"),
        ("side_replicas = [1, 2]", "side_replicas = [0]", "cluster.side_replicas"),
        ("side_replicas = [1, 2]", "side_replicas = [6]", "cluster.side_replicas"),
        ("side_replicas = [1, 2]", "side_replicas = [1, 1, 2, 2]", "cluster.side_replicas"),
        (
            "kind = \"kill-memnode\"\nrole = \"sole-copy\"",
            "kind = \"wipe-memnode\"\nrole = \"sole-copy\"",
            "faults[0].role",
        ),
        (
            "role = \"sole-copy\"\nat = \"1s\"",
            "role = \"sole-copy\"\nat = \"1s\"\n[[faults]]\nkind = \"kill-memnode\"\nrole = \"sole-copy\"\nat = \"1200ms\"",
            "faults[1].role",
        ),
    ] {
        assert_rule(&mixed, from, to, field);
    }
    // Side indexes belong to runs with memory-node faults.
    assert_rule(
        GOOD,
        "clients = 3",
        "clients = 3\nside_replicas = [1]",
        "cluster.side_replicas",
    );
}

#[test]
fn the_shipped_experiments_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            Experiment::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 2, "kill-client.toml and pause-client.toml at least");
}

#[test]
fn dtx_rules_name_their_fields() {
    let three = "variants = [\"optimal\", \"rtx\", \"dtx\"]";
    // GOOD pauses a client: dtx must be listed as expected to break.
    assert_rule(
        GOOD,
        "variants = [\"optimal\", \"rtx\"]",
        three,
        "index.expect_violations",
    );
    let with_dtx = GOOD
        .replacen("variants = [\"optimal\", \"rtx\"]", three, 1)
        .replacen(
            "expect_violations = [\"optimal\"]",
            "expect_violations = [\"optimal\", \"dtx\"]",
            1,
        );
    // Both indexes have a dtx arm.
    assert_rule(&with_dtx, "kind = \"btree\"", "kind = \"hash\"", "");
    assert_rule(
        &with_dtx,
        "clients = 3",
        "clients = 3\ncontrol_plane = false",
        "cluster.control_plane",
    );
    assert_rule(&with_dtx, "clients = 3", "clients = 3", "");
    // Without the pause, dtx need not be expected to break.
    let killed_only = GOOD
        .replacen("variants = [\"optimal\", \"rtx\"]", three, 1)
        .split("[[faults]]\nkind = \"pause-client\"")
        .next()
        .unwrap()
        .to_string();
    assert!(Experiment::from_toml(&killed_only).is_ok());
    // The shipped Figure 14 file runs all three.
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/experiments/kill-client.toml"
    ))
    .unwrap();
    let e = Experiment::from_toml(&shipped).unwrap();
    assert_eq!(e.index.variants, [Variant::Optimal, Variant::Dtx, Variant::Rtx]);
}
