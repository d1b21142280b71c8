//! Recovery is per region (issue 46): a region lost with its only copy
//! does not hold back another region's eviction and re-replication, nor an
//! expired client's roll and forgetting; and a copy is fenced against the
//! late WRITEs of an earlier copier (a deposed leader's coordinator). A
//! real control-plane member in this process (which runs no coordinator of
//! its own), real `kintsugi memnode` processes placed by it, and a
//! [`Coordinator`] this test steps pass by pass.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::api::{ControlClient, MemberInfo};
use control_plane::config::{Role, Settings, Token};
use control_plane::member::{Member, MemberOptions};
use control_plane::network::{ClusterSecret, Partition};
use control_plane::state::{Command, ControlState, MemNodeId, MemNodeState, Outcome, Region};
use kintsugi::fabric::{Batch, GlobalAddr, Replica};
use kintsugi::recovery::{Coordinator, RecoveryOptions, Step, Work};
use kintsugi::{Cluster, ClusterOptions};
use support::proxy::HoldingProxy;
use support::MemnodeProcess;

const TOKEN: &str = "per-region-test-token-0123456789";
/// Bound on every wait; no wait decides an outcome.
const WAIT: Duration = Duration::from_secs(60);
/// Pause between two passes that found nothing to do (the coordinator's
/// own tick).
const TICK: Duration = kintsugi::recovery::coordinator::TICK;
/// Memory nodes: the lost region's, the other region's two, a spare.
const NODES: usize = 4;
/// Passes taken once recovery is done, to see the lost region left alone.
const EXTRA_PASSES: usize = 10;

/// One member, formed alone, with a 1 s memory-node and client lease.
async fn member(dir: &std::path::Path) -> (Member, ControlClient) {
    let settings = Settings::new(
        ClusterSecret::new("per-region-test-secret-0123456789").expect("secret"),
        vec![Token {
            name: "operator".into(),
            token: TOKEN.into(),
            role: Role::Admin,
        }],
    )
    .expect("settings");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let member = Member::start(
        listener,
        MemberOptions {
            id: 1,
            data_dir: dir.to_path_buf(),
            advertise: None,
            settings,
            partition: Partition::default(),
        },
    )
    .await
    .expect("member starts");
    let addr = member.local_addr().to_string();
    let api = ControlClient::new(&addr, Some(TOKEN.into())).expect("client");
    api.init(vec![MemberInfo {
        id: 1,
        addr,
        voter: true,
    }])
    .await
    .expect("init");
    (member, api)
}

/// Waits until `f` finds what it looks for in the member's applied state.
async fn state_of<R>(member: &Member, what: &str, f: impl FnMut(&ControlState) -> Option<R>) -> R {
    tokio::time::timeout(WAIT, member.state().wait_for(f))
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {WAIT:?}"))
}

/// `NODES` `kintsugi memnode` processes placed by the member at `control`,
/// once every one is active.
async fn memnodes_active(member: &Member, control: &str) -> Vec<Option<MemnodeProcess>> {
    let processes = (0..NODES)
        .map(|_| {
            Some(MemnodeProcess::start(&[
                "--control",
                control,
                "--control-token",
                TOKEN,
                "--capacity",
                "64MiB",
            ]))
        })
        .collect();
    state_of(member, "every memory node active", |s| {
        (s.memnodes.len() == NODES && s.memnodes.values().all(|n| n.state == MemNodeState::Active))
            .then_some(())
    })
    .await;
    processes
}

/// SIGKILLs the process of memory node `node`.
fn crash(member: &Member, processes: &mut [Option<MemnodeProcess>], node: MemNodeId) {
    let at = member.state().state().memnodes[&node].endpoint.clone();
    let i = processes
        .iter()
        .position(|p| p.as_ref().is_some_and(|p| p.addr == at))
        .expect("the node's process");
    processes[i].take().expect("running").crash();
}

async fn create_region(api: &ControlClient, replicas: u8) -> Region {
    match api
        .command(&Command::CreateRegion {
            size_bytes: 1 << 20,
            replicas,
        })
        .await
    {
        Ok(Outcome::Region(r)) => r,
        other => panic!("create a region of {replicas} replicas: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_region_holds_back_no_other_regions_recovery_nor_a_clients_roll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (member, api) = member(dir.path()).await;
    let control = member.local_addr().to_string();
    let mut processes = memnodes_active(&member, &control).await;
    // Placement takes the roomiest nodes: the single copy goes to one
    // node, the two replicas to two others, and one node stays spare.
    let solo = create_region(&api, 1).await;
    let pair = create_region(&api, 2).await;
    let (lost_node, dead_backup) = (solo.primary(), pair.replicas[1].node);
    assert!(!pair.on(lost_node), "{pair:?}");
    state_of(&member, "both regions allocated", |s| {
        [solo.id, pair.id]
            .iter()
            .all(|id| s.regions[id].usable())
            .then_some(())
    })
    .await;
    // A client that registers and is never heard from again.
    let Ok(Outcome::Client(ghost)) = api
        .command(&Command::RegisterClient {
            name: "ghost".into(),
            owner_ids: 2,
            lease_ms: 1_000,
        })
        .await
    else {
        panic!("register the ghost client")
    };

    let steps: Arc<Mutex<Vec<(Step, u64)>>> = Arc::default();
    let on_step: kintsugi::recovery::coordinator::StepHook = {
        let steps = steps.clone();
        Arc::new(move |step, about, _| steps.lock().expect("steps").push((step, about)))
    };
    let mut coordinator = Coordinator::connect(
        &[control.as_str()],
        TOKEN,
        RecoveryOptions {
            on_step: Some(on_step),
            ..RecoveryOptions::default()
        },
    )
    .await
    .expect("the coordinator joins");

    // The only copy of `solo` and the backup of `pair` die together.
    for node in [lost_node, dead_backup] {
        crash(&member, &mut processes, node);
    }
    state_of(&member, "both nodes declared dead", |s| {
        [lost_node, dead_backup]
            .iter()
            .all(|n| s.memnodes[n].state == MemNodeState::Dead)
            .then_some(())
    })
    .await;

    // Pass after pass, as `Coordinator::run` takes them, until `pair` is
    // whole again without its dead backup and the ghost is forgotten.
    let deadline = Instant::now() + WAIT;
    let mut failures = Vec::new();
    loop {
        let stepped = match coordinator.pass().await {
            Ok(step) => step.is_some(),
            Err(e) => {
                failures.push(e.to_string());
                false
            }
        };
        let s = member.state().state();
        let p = &s.regions[&pair.id];
        if p.whole() && !p.on(dead_backup) && !s.clients.contains_key(&ghost.id) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "recovery did not go on past the lost region within {WAIT:?}: region {} is {}; ghost client {:?}; \
             {} failed passes, the last: {:?}",
            pair.id,
            p.summary(),
            s.clients.get(&ghost.id).map(|c| c.state),
            failures.len(),
            failures.last()
        );
        if !stepped {
            tokio::time::sleep(TICK).await;
        }
    }
    let taken = steps.lock().expect("steps").clone();
    for want in [
        (Step::Evicted, u64::from(solo.id)),
        (Step::Evicted, u64::from(pair.id)),
        (Step::RolledClient, ghost.id),
        (Step::ForgotClient, ghost.id),
        (Step::AddedBackup, u64::from(pair.id)),
        (Step::Copied, u64::from(pair.id)),
        (Step::Joined, u64::from(pair.id)),
        (Step::CaughtUp, u64::from(pair.id)),
    ] {
        assert!(taken.contains(&want), "{want:?} not among {taken:?}");
    }
    // `solo` is lost, once, where it was; more passes ask nothing more of
    // it (nothing about it was refused into the log), and recovery holds
    // nothing stuck.
    for _ in 0..EXTRA_PASSES {
        coordinator.pass().await.expect("a pass");
    }
    let s = member.state().state();
    let x = &s.regions[&solo.id];
    assert!(x.lost.is_some() && !x.usable(), "{x:?}");
    assert_eq!(x.replicas.iter().map(|l| l.node).collect::<Vec<_>>(), [lost_node]);
    let about_solo: Vec<(String, String)> = s
        .audit
        .iter()
        .filter(|e| match e.command {
            Command::EvictReplica { region, .. }
            | Command::DeclareRegionLost { region }
            | Command::DropRegion { region } => region == solo.id,
            _ => false,
        })
        .map(|e| (format!("{:?}", e.command), e.outcome.clone()))
        .collect();
    assert_eq!(
        about_solo,
        [(
            format!("{:?}", Command::DeclareRegionLost { region: solo.id }),
            "ok".to_owned()
        )]
    );
    assert!(coordinator.stuck().is_empty(), "{:?}", coordinator.stuck());

    // The operator's view and action.
    let listed = ctl(&control, &["region", "lost"]).await;
    assert!(
        listed.0 == 0 && listed.1.contains(&format!("node {lost_node}")) && listed.1.contains("--confirm"),
        "{listed:?}"
    );
    let status = ctl(&control, &["status"]).await;
    assert!(status.1.contains("1 LOST"), "{status:?}");
    let id = solo.id.to_string();
    let unconfirmed = ctl(&control, &["region", "drop", &id]).await;
    assert!(
        unconfirmed.0 == 1 && unconfirmed.2.contains("destroys") && unconfirmed.2.contains("--confirm"),
        "{unconfirmed:?}"
    );
    assert!(member.state().state().regions.contains_key(&solo.id));
    let dropped = ctl(&control, &["region", "drop", &id, "--confirm"]).await;
    assert_eq!(dropped.0, 0, "{dropped:?}");
    state_of(&member, "the lost region dropped and its node freed", |s| {
        (!s.regions.contains_key(&solo.id) && s.memnodes[&lost_node].allocated_bytes == 0).then_some(())
    })
    .await;
    coordinator.close().await.expect("the coordinator leaves");
    member.shutdown().await;
}

/// Path 4 of issue 46, as a deposed leader would take it: an earlier
/// copier (its coordinator paused mid-copy while another leader took
/// over) read the primary before a write, and WRITEs that stale chunk into
/// the new replica after the current coordinator's copy passed it. Its
/// batch carries the map it copied with, older than the current copy's
/// fence (`FenceCopy`), so the node refuses it; the current copy's
/// checksums then match what the replica holds, and the joined replica
/// ends equal to the primary. Without the fence the stale chunk lands, the
/// catch-up skips it (the primary's checksum is the copy's), and the
/// replica diverges silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deposed_copiers_late_write_is_refused_and_the_new_replica_equals_the_primary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (member, api) = member(dir.path()).await;
    let control = member.local_addr().to_string();
    let mut processes = memnodes_active(&member, &control).await;
    let region = create_region(&api, 3).await;
    state_of(&member, "the region allocated", |s| {
        s.regions[&region.id].usable().then_some(())
    })
    .await;
    let mut coordinator = Coordinator::connect(&[control.as_str()], TOKEN, RecoveryOptions::default())
        .await
        .expect("the coordinator joins");
    let copier = Cluster::connect_with(
        &[control.as_str()],
        TOKEN,
        ClusterOptions {
            name: "deposed-copier".into(),
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("the other copier joins");

    // A backup dies; the coordinator evicts it and places a new replica.
    let dead = region.replicas[2].node;
    crash(&member, &mut processes, dead);
    let deadline = Instant::now() + WAIT;
    while coordinator.pass().await.ok().flatten() != Some(Step::AddedBackup) {
        assert!(Instant::now() < deadline, "no new replica placed within {WAIT:?}");
        tokio::time::sleep(TICK).await;
    }
    // No pass until the earlier copier has read: the next one copies.
    let new = state_of(&member, "the new replica allocated", |s| {
        let r = &s.regions[&region.id];
        r.syncing
            .first()
            .filter(|l| !r.pending.contains(&l.node))
            .map(|l| l.node)
    })
    .await;

    // The earlier copier reads the primary with the map of its time...
    let bytes = region.size_bytes;
    let mut stale = copier.full_fabric().await.expect("the earlier copier's map");
    let backup = stale.map().region(region.id).expect("routed").replicas[1..]
        .iter()
        .position(|l| l.node == new)
        .expect("the new replica in the full map") as u8;
    let mut batch = Batch::new();
    let h = batch
        .on(Replica::Primary)
        .read(GlobalAddr::new(region.id, 0), bytes as u32);
    stale.execute(&mut batch).await.expect("the earlier copier reads");
    let old = batch.read_result(h).expect("read").to_vec();
    // ... a client then writes the primary ...
    let mut writer = copier.full_fabric().await.expect("a writer's map");
    let mut batch = Batch::new();
    let h = batch
        .on(Replica::Primary)
        .write(GlobalAddr::new(region.id, 4096), &[0xA5; 512]);
    writer.execute(&mut batch).await.expect("the write");
    batch.done(h).expect("written");

    // ... the current coordinator copies the region ...
    let deadline = Instant::now() + WAIT;
    while coordinator.pass().await.ok().flatten() != Some(Step::Copied) {
        assert!(
            Instant::now() < deadline,
            "the copy was not made within {WAIT:?}: {:?}",
            coordinator.stuck()
        );
        tokio::time::sleep(TICK).await;
    }
    // ... and the earlier copier's late WRITE of its stale chunk comes in.
    let mut batch = Batch::new();
    let h = batch
        .on(Replica::Backup(backup))
        .write(GlobalAddr::new(region.id, 0), &old);
    let late = match stale.execute(&mut batch).await {
        Ok(()) => batch.done(h).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(
        late.as_ref().is_err_and(|e| e.contains("epoch")),
        "a copier with a map older than the current copy's fence must be refused as stale: {late:?}"
    );

    // The replica joins and is caught up; it equals the primary.
    let deadline = Instant::now() + WAIT;
    loop {
        let _ = coordinator.pass().await;
        let s = member.state().state();
        let r = &s.regions[&region.id];
        if r.whole() && r.on(new) && r.usable() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new replica did not join: {}",
            r.summary()
        );
        tokio::time::sleep(TICK).await;
    }
    let mut now = copier.full_fabric().await.expect("the map now");
    let routed = now.map().region(region.id).expect("routed").clone();
    let mut batch = Batch::new();
    let primary = batch
        .on(Replica::Primary)
        .read(GlobalAddr::new(region.id, 0), bytes as u32);
    let at = routed.replicas[1..]
        .iter()
        .position(|l| l.node == new)
        .expect("joined") as u8;
    let copy = batch
        .on(Replica::Backup(at))
        .read(GlobalAddr::new(region.id, 0), bytes as u32);
    now.execute(&mut batch).await.expect("read both");
    let (primary, copy) = (
        batch.read_result(primary).expect("primary"),
        batch.read_result(copy).expect("copy"),
    );
    let differ = primary.iter().zip(copy).filter(|(a, b)| a != b).count();
    assert_eq!(
        differ, 0,
        "the new replica differs from the primary in {differ} bytes"
    );
    assert_eq!(&primary[4096..4096 + 512], &[0xA5; 512][..]);
    copier.close().await.expect("the copier leaves");
    coordinator.close().await.expect("the coordinator leaves");
    member.shutdown().await;
}

/// A copy to a black-holed node (its proxy holds everything the
/// coordinator sends it, while the node itself renews its lease, so the
/// map keeps it): the pass that copies gives up with a lost connection at
/// the coordinator's request deadline instead of hanging, and the region
/// waits out its backoff; once the network heals a later pass copies,
/// joins and catches the replica up, equal to the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_to_a_black_holed_node_gives_up_and_is_tried_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (member, api) = member(dir.path()).await;
    let control = member.local_addr().to_string();
    let mut processes = memnodes_active(&member, &control).await;
    // Three replicas on four nodes: the new replica can only go to the spare.
    let region = create_region(&api, 3).await;
    state_of(&member, "the region allocated", |s| {
        s.regions[&region.id].usable().then_some(())
    })
    .await;
    let endpoints: Vec<(MemNodeId, String)> = member
        .state()
        .state()
        .memnodes
        .values()
        .map(|n| (n.id, n.endpoint.clone()))
        .collect();
    let spare = endpoints
        .iter()
        .map(|(id, _)| *id)
        .find(|id| !region.on(*id))
        .expect("a spare node");
    let mut proxies = Vec::new();
    for (id, endpoint) in &endpoints {
        proxies.push((*id, HoldingProxy::start(endpoint.clone()).await));
    }
    let mut coordinator = Coordinator::connect(
        &[control.as_str()],
        TOKEN,
        RecoveryOptions {
            client: ClusterOptions {
                request_deadline: Duration::from_millis(300),
                data_path_via: endpoints
                    .iter()
                    .zip(&proxies)
                    .map(|((_, e), (_, p))| (e.clone(), p.addr.clone()))
                    .collect(),
                ..ClusterOptions::default()
            },
            ..RecoveryOptions::default()
        },
    )
    .await
    .expect("the coordinator joins");
    let writer = Cluster::connect_with(
        &[control.as_str()],
        TOKEN,
        ClusterOptions {
            name: "writer".into(),
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("the writer joins");
    let mut fabric = writer.full_fabric().await.expect("the writer's map");
    let mut batch = Batch::new();
    let h = batch.write(GlobalAddr::new(region.id, 4096), &[0x5A; 512]);
    fabric.execute(&mut batch).await.expect("the write");
    batch.done(h).expect("written");

    // The network swallows what the coordinator sends the spare; a backup dies.
    let black_hole = &proxies.iter().find(|(id, _)| *id == spare).expect("its proxy").1;
    black_hole.hold.send_replace(true);
    crash(&member, &mut processes, region.replicas[2].node);
    let deadline = Instant::now() + WAIT;
    // A failed step leaves its region stuck, with a backoff, and the pass
    // goes on to other work.
    let gave_up = loop {
        let _ = coordinator.pass().await;
        if let Some(stuck) = coordinator.stuck().get(&Work::Region(region.id)) {
            break stuck.reason.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no copy to the black-holed node failed within {WAIT:?}: {}",
            member.state().state().regions[&region.id].summary(),
        );
        tokio::time::sleep(TICK).await;
    };
    assert!(
        gave_up.contains(&format!("connection to memory node {spare} lost")),
        "the copy gives up as a lost connection: {gave_up}"
    );
    assert!(
        black_hole.held.load(std::sync::atomic::Ordering::Acquire) > 0,
        "the copy's batches went into the black hole"
    );
    assert!(
        !member.state().state().regions[&region.id].whole(),
        "nothing joined a replica that was never copied"
    );

    // Healed: a later pass, after the region's backoff, makes the replica.
    black_hole.hold.send_replace(false);
    let deadline = Instant::now() + WAIT;
    loop {
        let _ = coordinator.pass().await;
        let s = member.state().state();
        let r = &s.regions[&region.id];
        if r.whole() && r.on(spare) && r.usable() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica on the healed node was not made within {WAIT:?}: {} (stuck: {:?})",
            r.summary(),
            coordinator.stuck()
        );
        tokio::time::sleep(TICK).await;
    }
    let mut now = writer.full_fabric().await.expect("the map now");
    let routed = now.map().region(region.id).expect("routed").clone();
    let at = routed.replicas[1..]
        .iter()
        .position(|l| l.node == spare)
        .expect("joined") as u8;
    let bytes = region.size_bytes as u32;
    let mut batch = Batch::new();
    let primary = batch
        .on(Replica::Primary)
        .read(GlobalAddr::new(region.id, 0), bytes);
    let copy = batch
        .on(Replica::Backup(at))
        .read(GlobalAddr::new(region.id, 0), bytes);
    now.execute(&mut batch).await.expect("read both");
    let (primary, copy) = (
        batch.read_result(primary).expect("primary"),
        batch.read_result(copy).expect("copy"),
    );
    assert!(primary == copy, "the new replica equals the primary");
    assert_eq!(&copy[4096..4096 + 512], &[0x5A; 512][..]);
    writer.close().await.expect("the writer leaves");
    coordinator.close().await.expect("the coordinator leaves");
    member.shutdown().await;
}

/// `kintsugi ctl --endpoint CONTROL ARGS...` off the runtime's threads:
/// (exit code, stdout, stderr).
async fn ctl(control: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["ctl", "--endpoint", control, "--token", TOKEN];
    all.extend_from_slice(args);
    let all: Vec<String> = all.into_iter().map(str::to_owned).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        support::kintsugi(&args)
    })
    .await
    .expect("ctl ran")
}
