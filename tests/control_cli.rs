//! `kintsugi ctl` against three real `kintsugi control` processes: forming
//! the cluster, memory nodes, placement and its refusal, clients, a wrong
//! token, and a write that outlives `kill -9` of the leader.

mod support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use control_plane::api::ControlClient;
use serde_json::Value;
use tempfile::TempDir;

const SECRET: &str = "ctl-test-cluster-secret-0123456789";
const TOKEN: &str = "ctl-test-ops-token-0123456789";

/// Longest wait for anything asynchronous: replication to a follower, an
/// election, a lease decision. Generous, because the test may share the
/// machine with many others.
const DEADLINE: Duration = Duration::from_secs(30);

/// Pause between two looks at something asynchronous.
const POLL: Duration = Duration::from_millis(50);

/// A `kintsugi control` member, killed (SIGKILL) when dropped, so that a
/// failing assertion leaves no process behind.
struct Member {
    id: u64,
    addr: String,
    process: harness::Process,
    _data: TempDir,
}

impl Member {
    fn start(id: u64) -> Member {
        let data = tempfile::tempdir().expect("temp data dir");
        let id_text = id.to_string();
        let dir = data.path().to_str().expect("temp dir path is UTF-8");
        let (process, addr) = support::spawn_listening(
            &[
                "control",
                "--id",
                &id_text,
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                dir,
            ],
            &[("KINTSUGI_CLUSTER_SECRET", SECRET), ("KINTSUGI_TOKEN", TOKEN)],
        );
        Member {
            id,
            addr,
            process,
            _data: data,
        }
    }

    /// SIGKILL, as a crash, and wait.
    fn crash(mut self) {
        self.process.kill().expect("kill -9");
    }
}

/// Keeps memory nodes' leases alive, as their processes would: a node is
/// active only while it renews within its lease (1 s by default), and
/// placement takes only active nodes. Renewals go to any member that
/// answers (a follower forwards them to the leader). Stopped when dropped.
struct Renewer {
    nodes: Arc<Mutex<Vec<u16>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Renewer {
    fn start(endpoints: Vec<String>) -> Renewer {
        let nodes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (nodes, stop) = (nodes.clone(), stop.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("renewer runtime");
                let clients: Vec<ControlClient> = endpoints
                    .iter()
                    .map(|e| ControlClient::new(e, Some(TOKEN.to_owned())).expect("endpoint"))
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    let ids = nodes.lock().expect("node list").clone();
                    runtime.block_on(async {
                        for id in ids {
                            for client in &clients {
                                let renewed =
                                    tokio::time::timeout(Duration::from_secs(1), client.renew_memnode(id));
                                if matches!(renewed.await, Ok(Ok(_))) {
                                    break;
                                }
                            }
                        }
                    });
                    // A tenth of the lease: several renewals fit in one.
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Renewer {
            nodes,
            stop,
            thread: Some(thread),
        }
    }

    fn renew(&self, id: u16) {
        self.nodes.lock().expect("node list").push(id);
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `kintsugi ctl --endpoint ENDPOINT ARGS...` with the token in the
/// environment; returns (exit code, stdout, stderr).
fn ctl(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kintsugi"))
        .args(["ctl", "--endpoint", endpoint])
        .args(args)
        .env("KINTSUGI_TOKEN", TOKEN)
        .env_remove("KINTSUGI_ENDPOINT")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kintsugi ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ctl`, which must succeed; its stdout.
fn ctl_ok(endpoint: &str, args: &[&str]) -> String {
    let (code, stdout, stderr) = ctl(endpoint, args);
    assert_eq!(code, 0, "ctl {args:?} failed:\n{stderr}");
    stdout
}

/// `ctl --json`, which must succeed and print one JSON document.
fn ctl_json(endpoint: &str, args: &[&str]) -> Value {
    let stdout = ctl_ok(endpoint, &[&["--json"], args].concat());
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("ctl {args:?}: {e}:\n{stdout}"))
}

/// Polls `look` until it gives an answer, for at most [`DEADLINE`].
fn eventually<T>(what: &str, mut look: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(answer) = look() {
            return answer;
        }
        assert!(start.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(POLL);
    }
}

/// The cells of the table rows in `table`, trimmed.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| l.starts_with('│'))
        .map(|l| {
            l.trim_matches('│')
                .split('┆')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

fn register_memnode(endpoint: &str, memnode: &str) -> u16 {
    let outcome = ctl_json(
        endpoint,
        &[
            "memnode",
            "register",
            "--endpoint",
            memnode,
            "--capacity",
            "64MiB",
        ],
    );
    assert_eq!(outcome["kind"], "mem_node", "{outcome}");
    let id = outcome["value"]["id"].as_u64().expect("memnode id");
    u16::try_from(id).expect("memnode ids are u16")
}

#[test]
fn ctl_operates_a_three_member_cluster_across_a_leader_crash() {
    let mut members: Vec<Member> = (1..=3).map(Member::start).collect();
    let first = members[0].addr.clone();

    // Forming the cluster: init returns once there is a leader, so the
    // additions find one.
    let formed = ctl_json(&first, &["init"]);
    assert_eq!(formed["leader"], 1, "{formed}");
    for m in &members[1..] {
        ctl_ok(&first, &["members", "add", &m.id.to_string(), &m.addr]);
    }
    let status = ctl_json(&first, &["status"]);
    let voters = status["members"].as_array().expect("members").iter();
    assert_eq!(voters.filter(|m| m["voter"] == true).count(), 3, "{status}");
    assert!(status["leader"].is_u64(), "{status}");
    assert!(ctl_ok(&first, &["status"]).contains("members: 3"));

    // Memory nodes take replicas once active, which takes a lease renewal
    // and the leader's decision about it (asynchronous).
    let renewer = Renewer::start(members.iter().map(|m| m.addr.clone()).collect());
    let nodes = [
        register_memnode(&first, "127.0.0.1:7101"),
        register_memnode(&first, "127.0.0.1:7102"),
    ];
    for id in nodes {
        renewer.renew(id);
    }
    eventually("both memory nodes to be active", || {
        let list = ctl_json(&first, &["memnode", "list"]);
        let active = list
            .as_array()
            .expect("memnode list")
            .iter()
            .filter(|n| n["state"] == "active");
        (active.count() == 2).then_some(())
    });
    let table = ctl_ok(&first, &["memnode", "list"]);
    assert!(table.contains("64 MiB") && table.contains("active"), "{table}");

    // Placement on both nodes succeeds; a third replica has nowhere to go.
    let created = ctl_json(&first, &["region", "create", "--size", "1MiB", "--replicas", "2"]);
    assert_eq!(created["kind"], "region", "{created}");
    let region = created["value"]["id"].as_u64().expect("region id").to_string();
    let backup = created["value"]["replicas"][1]["node"].clone();
    let (code, stdout, stderr) = ctl(&first, &["region", "create", "--size", "1MiB", "--replicas", "3"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("409") && stderr.contains("cannot place"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "errors leave stdout alone: {stdout}");

    let promoted = ctl_json(
        &first,
        &["region", "promote", "--no-restore", &region, &backup.to_string()],
    );
    assert_eq!(promoted["value"]["replicas"][0]["node"], backup, "{promoted}");

    // Clients: the list is read from this member's applied state, which
    // may trail the leader's by the newest commit.
    ctl_ok(&first, &["client", "register", "--name", "x"]);
    eventually("client x in the list", || {
        let table = ctl_ok(&first, &["client", "list"]);
        rows(&table)
            .iter()
            .any(|r| r.get(1).is_some_and(|name| name == "x"))
            .then_some(())
    });

    let (code, _, stderr) = ctl(&first, &["--token", "not-the-token-0123456789", "status"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("401"), "{stderr}");

    // Crash the leader; a write through a survivor succeeds once the others
    // have elected a new one.
    let leader = ctl_json(&first, &["status"])["leader"]
        .as_u64()
        .expect("a leader");
    let at = members
        .iter()
        .position(|m| m.id == leader)
        .expect("the leader is a member");
    members.remove(at).crash();
    let survivor = members[0].addr.clone();
    eventually("a write after the leader's crash", || {
        let (code, _, _) = ctl(
            &survivor,
            &[
                "memnode",
                "register",
                "--endpoint",
                "127.0.0.1:7103",
                "--capacity",
                "1MiB",
            ],
        );
        (code == 0).then_some(())
    });
    let new_leader = eventually("a survivor to name a new leader", || {
        let status = ctl_json(&survivor, &["status"]);
        status["leader"].as_u64().filter(|&l| l != leader)
    });
    assert!(members.iter().any(|m| m.id == new_leader));
    drop(renewer);
}

#[test]
fn ctl_without_a_token_names_both_ways_to_give_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_kintsugi"))
        .args(["ctl", "--endpoint", "127.0.0.1:9", "status"])
        .env_remove("KINTSUGI_TOKEN")
        .output()
        .expect("run kintsugi ctl");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--token") && stderr.contains("KINTSUGI_TOKEN"),
        "{stderr}"
    );
}
