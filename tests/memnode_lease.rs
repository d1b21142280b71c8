//! A real `kintsugi memnode --control` process registers with a real
//! control-plane member, keeps its lease while it lives, and is judged
//! suspect, then dead, after `kill -9`.

mod support;

use std::time::Duration;

use control_plane::api::MemberInfo;
use control_plane::config::{Role, Settings, Token};
use control_plane::member::{Member, MemberOptions};
use control_plane::network::{ClusterSecret, Partition};
use control_plane::state::{Command, MemNodeState};
use support::MemnodeProcess;

const TOKEN: &str = "memnode-test-token-0123456789";
/// Bound on every wait; no wait decides an outcome.
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memnode_keeps_its_lease_while_alive_and_is_declared_dead_after_kill_9() {
    let mut settings = Settings::new(
        ClusterSecret::new("memnode-test-secret-0123456789").expect("secret"),
        vec![Token {
            name: "memnode".into(),
            token: TOKEN.into(),
            role: Role::Admin,
        }],
    )
    .expect("settings");
    // Renewals every 333 ms keep it; 1 s of silence makes it suspect, 2 s dead.
    settings.timing.memnode_lease = Duration::from_secs(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let member = Member::start(
        listener,
        MemberOptions {
            id: 1,
            data_dir: dir.path().to_path_buf(),
            advertise: None,
            settings,
            partition: Partition::default(),
        },
    )
    .await
    .expect("member starts");
    let control = member.local_addr().to_string();
    let api = control_plane::api::ControlClient::new(&control, Some(TOKEN.into())).expect("client");
    api.init(vec![MemberInfo {
        id: 1,
        addr: control.clone(),
        voter: true,
    }])
    .await
    .expect("init");

    let memnode = MemnodeProcess::start(&[
        "--region",
        "1:1MiB",
        "--control",
        &control,
        "--control-token",
        TOKEN,
    ]);
    let endpoint = memnode.addr.clone();
    let active = |s: &control_plane::state::ControlState| {
        s.memnodes
            .values()
            .find(|n| n.endpoint == endpoint && n.state == MemNodeState::Active)
            .map(|n| (n.id, n.capacity_bytes))
    };
    let (id, capacity) = tokio::time::timeout(WAIT, member.state().wait_for(active))
        .await
        .expect("registered and active");
    assert_eq!(capacity, 1 << 20, "capacity is the sum of its regions");
    // Placement takes only active nodes.
    let region = api
        .command(&Command::CreateRegion {
            size_bytes: 4096,
            replicas: 1,
        })
        .await
        .expect("placed on the live node");
    assert!(
        format!("{region:?}").contains(&format!("node: {id}")),
        "{region:?}"
    );

    memnode.crash();
    let dead = |s: &control_plane::state::ControlState| {
        (s.memnodes.get(&id)?.state == MemNodeState::Dead).then_some(())
    };
    tokio::time::timeout(WAIT, member.state().wait_for(dead))
        .await
        .expect("declared dead");
    // Active first; suspect, then dead, last. (A runner that starves the
    // process for a whole lease could add suspect/active pairs between.)
    let decisions: Vec<_> = member
        .state()
        .state()
        .audit
        .iter()
        .filter(|e| e.actor.contains("lease judge"))
        .map(|e| e.command.clone())
        .collect();
    assert_eq!(
        decisions.first(),
        Some(&Command::ActivateMemNode { id }),
        "{decisions:?}"
    );
    assert!(
        decisions.ends_with(&[Command::SuspectMemNode { id }, Command::DeclareMemNodeDead { id }]),
        "{decisions:?}"
    );
    let dead_count = decisions
        .iter()
        .filter(|c| matches!(c, Command::DeclareMemNodeDead { .. }))
        .count();
    assert_eq!(dead_count, 1, "{decisions:?}");
    member.shutdown().await;
}
