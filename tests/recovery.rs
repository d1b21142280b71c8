//! Recovery on a local cluster of real processes: a memory node killed
//! with `kill -9` under a YCSB-A load, its replicas evicted (a dead
//! primary's backup promoted), the region made whole again on a spare
//! while clients write, and the killed node, restarted from its image,
//! back as an empty spare that the next re-replication fills.

use std::path::Path;
mod support;

use std::sync::Arc;
use std::time::Duration;

use control_plane::api::ControlClient;
use control_plane::state::{MemNodeState, Region};
use harness::local::{LocalCluster, LocalClusterSpec};
use kintsugi::cluster::load::{Handle, LoadReport, LoadSpec};
use kintsugi::cluster::{Cluster, ClusterOptions, IndexKind};
use kintsugi::index::ObjectSizes;
use support::cluster::{eventually, RunningLoad};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kintsugi"))
}

async fn region_of(api: &ControlClient, name: &str) -> Region {
    let x = api
        .indexes()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.name == name)
        .unwrap();
    api.regions()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == x.region)
        .unwrap()
}

/// A local cluster of real processes (tcp, `--persist`, 4 memory nodes, 3
/// replicas, memory-node lease 250 ms) with a YCSB-A load running on an
/// index `orders` that has done 1,000 operations.
///
/// The lease was 100 ms: on a 2-core machine running two such clusters at
/// once (the CI's), a healthy node's renewal came more than two leases late
/// now and then, it was declared dead, and a backup's death turned into a
/// promotion the test did not ask for. What is tested does not depend on
/// the lease's length.
struct Setup {
    dir: tempfile::TempDir,
    local: LocalCluster,
    c: Arc<Cluster>,
    api: ControlClient,
    load: LoadSpec,
    running: RunningLoad,
}

impl Setup {
    async fn under_load(kind: IndexKind, seed: u64) -> Setup {
        Setup::under_load_with(kind, seed, Vec::new()).await
    }

    /// [`Setup::under_load`] with `env` in every control-plane member's
    /// environment.
    async fn under_load_with(kind: IndexKind, seed: u64, env: Vec<(String, String)>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "dir = {:?}\n[memory]\nnodes = 4\ncapacity = \"128MiB\"\ntransport = \"tcp\"\npersist = true\n\
             [indexes]\nreplicas = 3\n[timing]\nmemnode_lease = \"250ms\"\nclient_lease = \"1s\"\n",
            dir.path()
        );
        let mut spec = LocalClusterSpec::parse(&text, "test").unwrap();
        spec.control.env = env;
        let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
        let file = local.file.clone();
        let c = Arc::new(
            Cluster::connect_with(
                &file.control,
                &file.client_token,
                ClusterOptions {
                    name: "load".into(),
                    replicas: 3,
                    index_bytes: 16 << 20,
                    ..ClusterOptions::default()
                },
            )
            .await
            .unwrap(),
        );
        let load = LoadSpec {
            index: "orders".into(),
            kind,
            tasks: 4,
            keys_per_task: 200,
            duration: Duration::from_secs(300),
            seed,
        };
        let running = RunningLoad::start(&c, &load);
        running.beyond(1_000).await;
        let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
        Setup {
            dir,
            local,
            c,
            api,
            load,
            running,
        }
    }
}

/// Restarts memory-node process `process` (node `node`) from its image and
/// waits until the control plane takes it back (an empty spare).
async fn restart_node(local: &mut LocalCluster, api: &ControlClient, process: usize, node: u16) {
    local.restart_memnode(process).unwrap();
    eventually(
        "the restarted node to be active",
        Duration::from_secs(30),
        async || {
            let nodes = api.memnodes().await.unwrap();
            nodes
                .iter()
                .any(|n| n.id == node && n.state == MemNodeState::Active)
                .then_some(())
        },
    )
    .await;
}

/// SIGKILLs the process of memory node `node`; returns its process index
/// (to restart it).
async fn kill_node(local: &mut LocalCluster, api: &ControlClient, node: u16) -> usize {
    let process = local.process_of(node, &api.memnodes().await.unwrap()).unwrap();
    local.memnode(process).unwrap().kill().unwrap();
    process
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_primary_is_replaced_and_re_replicated_under_load_and_a_restarted_node_refills_a_dead_backup(
) {
    let Setup {
        dir: _dir,
        mut local,
        c,
        api,
        load,
        running,
    } = Setup::under_load(IndexKind::Btree, 11).await;

    // The primary dies: its first live backup is promoted, and a new
    // replica is made on the spare while the load goes on.
    let before = region_of(&api, "orders").await;
    let dead = before.primary();
    let victim = kill_node(&mut local, &api, dead).await;
    let after = eventually(
        "a new primary and a third replica",
        Duration::from_secs(60),
        async || {
            let r = region_of(&api, "orders").await;
            (r.whole() && !r.on(dead)).then_some(r)
        },
    )
    .await;
    assert_eq!(
        after.primary(),
        before.replicas[1].node,
        "the first live backup took over"
    );
    running.more(1_000).await;

    let report = stop_with_nothing_lost(running, &c, &load).await;
    // The replicas agree word for word wherever they must.
    replicas_agree(&c, &load, after.id, 3).await;

    // The first victim comes back from its image (an empty spare, never a
    // primary); then a backup dies: it is dropped, and the node that came
    // back is filled in its place. (A backup's death under load is the
    // next test.)
    restart_node(&mut local, &api, victim, dead).await;
    assert!(
        !region_of(&api, "orders").await.on(dead),
        "no replica before a copy"
    );
    let backup = after.replicas[2].node;
    kill_node(&mut local, &api, backup).await;
    let last = eventually(
        "the restarted node to hold a replica",
        Duration::from_secs(60),
        async || {
            let r = region_of(&api, "orders").await;
            (r.whole() && r.on(dead) && !r.on(backup)).then_some(r)
        },
    )
    .await;
    assert_eq!(last.primary(), after.primary());
    assert_ne!(
        last.primary(),
        dead,
        "a node that came back is never made primary"
    );
    replicas_agree(&c, &load, after.id, 3).await;
    let lost = kintsugi::cluster::load::lost(&c, "orders", load.kind, &report.acked)
        .await
        .unwrap();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost after the refill: {lost:?}"
    );
}

/// A backup dies under a YCSB-A load on a B+tree: it is dropped at a new
/// epoch, the writers whose commits it cut off repair their own locks and
/// settle their logs (they used to wait on them for good), a spare is
/// filled, and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_backup_under_load_is_dropped_and_writers_go_on() {
    replica_killed_under_load(IndexKind::Btree, 1, 12).await;
}

/// A hash table's primary dies under load: its slots were carried to the
/// backups (`index/src/hash/replicate.rs`), so the promoted one has every
/// acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hash_tables_killed_primary_loses_nothing_acknowledged() {
    replica_killed_under_load(IndexKind::Hash, 0, 13).await;
}

/// A hash table's backup dies under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hash_tables_killed_backup_is_replaced_under_load() {
    replica_killed_under_load(IndexKind::Hash, 2, 14).await;
}

/// A planned restart does not stop writes (issue 46), as an operator runs
/// it by docs/operations.md §5: `ctl memnode maintenance ID on` on the
/// node holding the primary moves the primary to a backup (a planned
/// promotion) and takes the node's replicas out of the write set; the node
/// is then stopped (`kill -9`: its image kept, as a stop would) and kept
/// down while the load must go on; it is started again, taken out of
/// maintenance, and the region is whole again. Nothing acknowledged is
/// lost and the replicas agree. Before, writes failed for the whole
/// restart ("connection refused", "outcome unknown"): the node stayed in
/// the write set.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_restart_of_the_primarys_node_in_maintenance_stops_no_write() {
    let Setup {
        dir: _dir,
        mut local,
        c,
        api,
        load,
        running,
    } = Setup::under_load(IndexKind::Btree, 21).await;
    let before = region_of(&api, "orders").await;
    let node = before.primary();
    let file = local.file.clone();
    let id = node.to_string();
    let endpoints = file.control.join(",");
    let ctl = {
        let (endpoints, token, id) = (endpoints.clone(), file.token.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            support::kintsugi(&[
                "ctl",
                "--endpoints",
                &endpoints,
                "--token",
                &token,
                "memnode",
                "maintenance",
                &id,
                "on",
            ])
        })
        .await
        .unwrap()
    };
    assert_eq!(ctl.0, 0, "maintenance on: {ctl:?}");
    assert!(
        ctl.2.contains("moving region"),
        "the primary is moved first: {ctl:?}"
    );
    let moved = region_of(&api, "orders").await;
    assert!(!moved.on(node) && moved.usable(), "{}", moved.summary());
    // Stopped and kept down while the load goes on.
    let process = kill_node(&mut local, &api, node).await;
    running.more(2_000).await;
    let n = api
        .memnodes()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.id == node)
        .unwrap();
    assert!(
        n.maintenance && n.state != MemNodeState::Dead,
        "not judged while in maintenance: {n:?}"
    );
    // Back, and out of maintenance.
    local.restart_memnode(process).unwrap();
    let off = api
        .command(&control_plane::state::Command::SetMaintenance { id: node, on: false })
        .await;
    assert!(off.is_ok(), "{off:?}");
    let after = eventually("the region whole again", Duration::from_secs(60), async || {
        let r = region_of(&api, "orders").await;
        r.whole().then_some(r)
    })
    .await;
    running.more(500).await;
    stop_with_nothing_lost(running, &c, &load).await;
    replicas_agree(&c, &load, after.id, 3).await;
}

/// Crash points of recovery itself: the coordinator (the Raft leader's)
/// dies right after each of its steps in turn, once each, while a
/// B+tree's primary is replaced under load. Dead members are started
/// again only when the majority is gone, so each next leader is as often
/// another member as the restarted one; each resumes from the replicated
/// state, and the dead coordinators' own client registrations are rolled
/// and forgotten like any dead client's. Same checks as a kill without
/// crashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_finishes_though_its_coordinator_dies_after_each_of_its_steps() {
    coordinator_dies_after_each_step(IndexKind::Btree, 0, 15).await;
}

/// The same crash points while a hash table's primary is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hash_tables_recovery_finishes_though_its_coordinator_dies_after_each_step() {
    coordinator_dies_after_each_step(IndexKind::Hash, 0, 16).await;
}

/// The same crash points while a B+tree's dead backup is dropped and
/// replaced: every step but the promotion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_backups_recovery_finishes_though_its_coordinator_dies_after_each_step() {
    coordinator_dies_after_each_step(IndexKind::Btree, 1, 17).await;
}

/// The same crash points while a node restarted from its `--persist`
/// image, with contents as stale as its death left them, is the only spare
/// that can replace a dead backup: it is filled, caught up and joined as a
/// backup through a crash after each step, never made primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_nodes_refill_finishes_though_its_coordinator_dies_after_each_step() {
    coordinator_dies_after_each_step_with(IndexKind::Btree, 1, 18, true).await;
}

/// Kills the node of replica `replica` (0: the primary) under load while
/// the coordinator dies after each step recovery then takes (all of them
/// for a primary; all but `Restored` for a backup).
async fn coordinator_dies_after_each_step(kind: IndexKind, replica: usize, seed: u64) {
    coordinator_dies_after_each_step_with(kind, replica, seed, false).await;
}

/// [`coordinator_dies_after_each_step`]; with `restarted_spare`, a backup
/// other than `replica`'s is killed first and the region made whole
/// without crashes, and its node restarted from its image: the crashed
/// recovery then fills that node.
async fn coordinator_dies_after_each_step_with(
    kind: IndexKind,
    replica: usize,
    seed: u64,
    restarted_spare: bool,
) {
    use kintsugi::recovery::coordinator::{Step, RECOVERY_CRASH_ENV, RECOVERY_CRASH_ONCE_ENV};
    let marks = tempfile::tempdir().unwrap();
    let env = vec![
        (RECOVERY_CRASH_ENV.to_owned(), "each".to_owned()),
        (
            RECOVERY_CRASH_ONCE_ENV.to_owned(),
            marks.path().display().to_string(),
        ),
        // Each step in the members' logs, for a run that fails.
        (
            "RUST_LOG".to_owned(),
            "warn,recovery=info,kintsugi::cli::control=info,control_plane::member=info".to_owned(),
        ),
    ];
    let Setup {
        dir: _dir,
        mut local,
        c,
        api,
        load,
        running,
    } = Setup::under_load_with(kind, seed, env).await;
    let steps: Vec<Step> = Step::ALL
        .into_iter()
        .filter(|&s| replica == 0 || s != Step::Restored)
        .collect();
    let crashed = |step: Step| marks.path().join(step.name()).exists();
    let spare = if restarted_spare {
        // Every crash point disarmed (its mark made) while another backup
        // dies, the region is made whole, and that node comes back.
        for s in Step::ALL {
            std::fs::write(marks.path().join(s.name()), b"").unwrap();
        }
        let first = region_of(&api, "orders").await;
        let other = first.replicas[if replica == 2 { 1 } else { 2 }].node;
        let process = kill_node(&mut local, &api, other).await;
        eventually(
            "the region whole without the first victim",
            Duration::from_secs(60),
            async || {
                let r = region_of(&api, "orders").await;
                (r.whole() && !r.on(other)).then_some(())
            },
        )
        .await;
        restart_node(&mut local, &api, process, other).await;
        for &s in &steps {
            std::fs::remove_file(marks.path().join(s.name())).unwrap();
        }
        Some(other)
    } else {
        None
    };
    let before = region_of(&api, "orders").await;
    let dead = before.replicas[replica].node;
    kill_node(&mut local, &api, dead).await;

    let mut last_seen = String::new();
    let after = eventually(
        "recovery through a crash after each of its steps",
        Duration::from_secs(120),
        async || {
            // A dead member is started again only once the cluster has
            // lost its majority, so that the others lead in between, or
            // once every step has crashed one (an odd count leaves one down).
            let n = local.control().members.len();
            let down: Vec<usize> = (0..n)
                .filter(|&i| local.control().exited(i) || !local.control().members[i].alive())
                .collect();
            if n - down.len() <= n / 2 || steps.iter().copied().all(crashed) {
                for &i in &down {
                    local.control().restart(i).await.unwrap();
                }
            }
            // From any member that answers: member 1 may be down.
            let status = c.status().await.unwrap();
            let index = status.indexes.iter().find(|x| x.name == "orders").unwrap();
            let r = status
                .regions
                .iter()
                .find(|r| r.id == index.region)
                .unwrap()
                .clone();
            // Each step's mark is made just before its member aborts: it
            // is done once that member is seen gone and started again.
            // What changed, for a run that fails.
            let seen = format!(
                "crashed after {:?}; region {}; members down {down:?}",
                steps.iter().copied().filter(|&s| crashed(s)).collect::<Vec<_>>(),
                r.summary(),
            );
            if seen != last_seen {
                eprintln!("{seen}");
                last_seen = seen;
            }
            let all_crashed = steps.iter().copied().all(crashed)
                && (0..n).all(|i| !local.control().exited(i) && local.control().members[i].alive());
            (all_crashed && r.whole() && !r.on(dead)).then_some(r)
        },
    )
    .await;
    let heir = if replica == 0 {
        before.replicas[1].node
    } else {
        before.primary()
    };
    assert_eq!(after.primary(), heir);
    if replica != 0 && !restarted_spare {
        assert!(!crashed(Step::Restored), "no promotion when a backup dies");
    }
    if let Some(spare) = spare {
        assert!(after.on(spare), "the restarted node was filled");
        assert_ne!(
            after.primary(),
            spare,
            "a node that came back is never made primary"
        );
    }
    running.more(1_000).await;
    stop_with_nothing_lost(running, &c, &load).await;
    replicas_agree(&c, &load, after.id, 3).await;
}

/// Kills the node of replica `replica` (0: the primary) of an index of
/// `kind` under a YCSB-A load (tcp, 4 nodes, 3 replicas), waits until the
/// region is whole again without it, and checks: no error reached the
/// application, nothing acknowledged lost, the structure sound, the 3
/// replicas equal.
async fn replica_killed_under_load(kind: IndexKind, replica: usize, seed: u64) {
    let Setup {
        dir: _dir,
        mut local,
        c,
        api,
        load,
        running,
    } = Setup::under_load(kind, seed).await;
    let before = region_of(&api, "orders").await;
    let dead = before.replicas[replica].node;
    kill_node(&mut local, &api, dead).await;
    let after = eventually("the dead replica replaced", Duration::from_secs(60), async || {
        let r = region_of(&api, "orders").await;
        (r.whole() && !r.on(dead)).then_some(r)
    })
    .await;
    let heir = if replica == 0 {
        before.replicas[1].node
    } else {
        before.primary()
    };
    assert_eq!(after.primary(), heir);
    running.more(1_000).await;
    stop_with_nothing_lost(running, &c, &load).await;
    replicas_agree(&c, &load, after.id, 3).await;
}

/// Stops the load and checks what the application saw: no error reached
/// it, nothing it was told was written is lost, the index's structure is
/// sound. Returns the load's report.
async fn stop_with_nothing_lost(running: RunningLoad, c: &Cluster, load: &LoadSpec) -> LoadReport {
    let report = running.stop().await;
    assert!(
        report.errors.is_empty(),
        "no error reached the application: {:?}",
        report.errors
    );
    let lost = kintsugi::cluster::load::lost(c, &load.index, load.kind, &report.acked)
        .await
        .unwrap();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    structure_sound(c, load).await;
    report
}

/// The index's structure checks out. The check bypasses the handles'
/// retries, so a node whose renewal came late refuses it for a moment
/// (as in [`replicas_agree`]).
async fn structure_sound(c: &Cluster, load: &LoadSpec) {
    for attempt in 0u128.. {
        let checked = match Handle::open(c, &load.index, load.kind).await.unwrap() {
            Handle::Tree(mut tree) => tree.inner().check().await.map(|r| (r.is_ok(), format!("{r:?}"))),
            Handle::Table(mut table) => table.inner().check().await.map(|r| (r.is_ok(), format!("{r:?}"))),
        };
        match checked {
            Ok((sound, report)) => {
                assert!(sound, "{report}");
                return;
            }
            Err(e) if e.to_string().contains("lease may have lapsed") && attempt < LAPSED_RETRIES_MAX => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot check the structure: {e}"),
        }
    }
}

/// The `n` replicas of `region` agree word for word wherever they must,
/// every object's data included.
async fn replicas_agree(c: &Cluster, load: &LoadSpec, region: u16, n: usize) {
    // These reads bypass the handles' retries: a node whose renewal came
    // late (a short memory-node lease on a busy machine) refuses them for
    // a moment (`FabricError::NodeLeaseLapsed`), before any verb.
    for attempt in 0u128.. {
        match replicas_compared(c, load, region).await {
            Ok(replicas) => {
                assert_eq!(replicas.replicas, n);
                assert_eq!(replicas.differences, 0, "{:?}", replicas.listed);
                return;
            }
            Err(e) if e.contains("lease may have lapsed") && attempt < LAPSED_RETRIES_MAX => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot compare the replicas: {e}"),
        }
    }
}

/// Tries of a check that bypasses the handles, while a node whose renewal
/// came late refuses it: 50 ms apart, `fabric::NODE_LAPSE_WAIT_MAX` in all.
const LAPSED_RETRIES_MAX: u128 = kintsugi::fabric::NODE_LAPSE_WAIT_MAX.as_millis() / 50;

async fn replicas_compared(
    c: &Cluster,
    load: &LoadSpec,
    region: u16,
) -> Result<kintsugi::txn::replicas::ReplicaReport, String> {
    let sizes = match Handle::open(c, &load.index, load.kind)
        .await
        .map_err(|e| e.to_string())?
    {
        Handle::Tree(mut t) => ObjectSizes::new(t.inner().objects().await.map_err(|e| format!("{e:?} {e}"))?),
        Handle::Table(mut t) => {
            ObjectSizes::new(t.inner().objects().await.map_err(|e| format!("{e:?} {e}"))?)
        }
    };
    let mut fabric = c.fabric();
    let heap = kintsugi::txn::Heap::open(&mut fabric, region)
        .await
        .map_err(|e| format!("{e:?} {e}"))?;
    heap.compare_replicas(&mut fabric, &|meta| sizes.of(meta), &|_| true)
        .await
        .map_err(|e| format!("{e:?} {e}"))
}

/// `kintsugi bench recover`, small: a primary and then a backup killed
/// under load (tcp, a 16 MiB region), every phase seen in order, nothing
/// acknowledged lost, no error reaching the application.
#[test]
fn bench_recover_sees_every_phase_and_loses_nothing() {
    bench_recover(false);
}

/// The same with each node wiped (started again at once without its
/// image): told from the node it was by its image id, refilled, nothing
/// lost.
#[test]
fn bench_recover_of_wiped_nodes_sees_every_phase_and_loses_nothing() {
    bench_recover(true);
}

fn bench_recover(wipe: bool) {
    use bench::recover_plan::{RecoverPlan, Victim};
    let plan = RecoverPlan {
        exe: exe().to_owned(),
        rounds: 2,
        victim: Victim::Alternate,
        wipe,
        region_bytes: 16 << 20,
        replicas: 3,
        tasks: 2,
        keys_per_task: 500,
        memnode_lease: Duration::from_millis(100),
        between: Duration::from_millis(100),
        transport: harness::TransportKind::Tcp,
        json: true,
    };
    let report = bench::recover_run::run(&plan).unwrap();
    assert_eq!(report.failure(), None);
    assert_eq!(report.rounds.len(), 2);
    assert_eq!(
        report.rounds.iter().map(|r| r.primary).collect::<Vec<_>>(),
        [true, false]
    );
    for r in &report.rounds {
        assert_eq!(r.wiped, wipe);
        let (detected, evicted, serving, whole) = (
            r.detected_ms.unwrap(),
            r.evicted_ms.unwrap(),
            r.serving_ms.unwrap(),
            r.whole_ms.unwrap(),
        );
        assert!(
            detected <= evicted && evicted <= serving && serving <= whole,
            "{r:?}"
        );
    }
    assert!(report.clients.writes > 0);
}
