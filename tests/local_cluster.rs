//! A local cluster of real processes (`kintsugi cluster up`): memory nodes
//! placed by the control plane, clients through the client library.

mod support;

#[path = "../examples/orders.rs"]
#[allow(dead_code)]
mod orders;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use control_plane::api::ControlClient;
use control_plane::state::{ClientState, OwnerBlock};
use harness::local::{ClusterFile, LocalCluster};
use kintsugi::cluster::{Cluster, ClusterOptions, IndexVariant};
use support::cluster::eventually;
use support::local::{exe, options, spec};

fn overlaps(a: OwnerBlock, b: OwnerBlock) -> bool {
    a.first < b.end() && b.first < a.end()
}

/// Waits until recovery has forgotten client `id` (after its quarantine
/// and leak repair).
async fn forgotten(api: &ControlClient, id: u64) {
    eventually(
        "recovery to forget the victim",
        Duration::from_secs(30),
        async || {
            let clients = api.clients().await.unwrap();
            clients.iter().all(|c| c.id != id).then_some(())
        },
    )
    .await;
}

/// The heap of index `orders`, and a fabric client to read it with.
async fn orders_heap(c: &Cluster) -> (fabric::Client, txn::Heap) {
    let region = c
        .indexes()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.name == "orders")
        .unwrap()
        .region;
    let mut fabric = c.fabric();
    let heap = txn::Heap::open(&mut fabric, region).await.unwrap();
    (fabric, heap)
}

/// A client asking for as many owner ids as `dead` held, which recovery
/// freed: it gets the same block.
async fn heir_of(file: &ClusterFile, dead: OwnerBlock) -> Cluster {
    let heir = Cluster::connect_with(
        &file.control,
        &file.client_token,
        ClusterOptions {
            owner_ids: dead.count,
            ..options("heir", file)
        },
    )
    .await
    .unwrap();
    assert!(overlaps(heir.owner_ids(), dead), "freed ids are handed out again");
    assert_eq!(heir.owner_ids().first, dead.first);
    heir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_then_a_service_then_down_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cluster.toml");
    let data = dir.path().join("data");
    std::fs::write(&config, "[memory]\ncapacity = \"256MiB\"\n").unwrap();
    let up = Command::new(exe())
        .args(["cluster", "up", "--detach", "--config"])
        .arg(&config)
        .arg("--dir")
        .arg(&data)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let summary = String::from_utf8_lossy(&up.stdout);
    assert!(summary.contains("cluster up in"), "{summary}");
    let file = ClusterFile::read(&data).unwrap();
    assert_eq!(
        (file.control.len(), file.memnodes.len(), file.replicas),
        (3, 3, 3)
    );

    // A second `up` in the same directory is refused while the first runs.
    let again = Command::new(exe())
        .args(["cluster", "up", "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already"),
        "{again:?}"
    );

    // A service connected: the control plane shows its region, replicas and lease.
    let service = Cluster::connect_with(&file.control, &file.client_token, options("service", &file))
        .await
        .unwrap();
    let mut orders = service.btree("orders").await.unwrap();
    orders.put(7, 700).await.unwrap();
    let ops = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let status = ops.status().await.unwrap();
    let region = &status.regions[0];
    assert_eq!(region.replicas.len(), 3);
    assert!(region.ready());
    let me = status
        .clients
        .iter()
        .find(|c| c.id == service.id())
        .expect("the service is listed");
    assert_eq!((me.name.as_str(), me.state), ("service", ClientState::Live));
    let text = Command::new(exe())
        .args(["cluster", "status", "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for want in ["3 active", "orders", "everywhere", "service", "live"] {
        assert!(text.contains(want), "status lacks {want:?}:\n{text}");
    }

    // The example program, on the same index: it finds what the service wrote.
    orders::run(&file.control, &file.client_token, file.replicas)
        .await
        .unwrap();
    assert_eq!(orders.get(7).await.unwrap(), Some(700));
    drop(orders);
    service.close().await.unwrap();
    // (The leader's recovery coordinator is a client too, while it leads.)
    let after: Vec<_> = ops
        .clients()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.name != kintsugi::recovery::CLIENT_NAME)
        .collect();
    assert!(after.is_empty(), "closed clients give their ids back: {after:?}");

    // A client token may not place memory.
    let client_api = ControlClient::new(&file.control[0], Some(file.client_token.clone())).unwrap();
    let refused = client_api
        .command(&control_plane::state::Command::CreateRegion {
            size_bytes: 4096,
            replicas: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(403), "{refused}");

    let down = Command::new(exe())
        .args(["cluster", "down", "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    assert!(!file.supervisor_alive());
    for image in &file.memnodes {
        assert!(!Path::new(image).exists(), "{image} removed with its node");
    }
    let twice = Command::new(exe())
        .args(["cluster", "down", "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!twice.status.success(), "down of nothing is an error");
}

/// Starts `kintsugi cluster ycsb` on `dir` and waits until it runs.
fn ycsb(dir: &Path, extra: &[&str]) -> std::process::Child {
    ycsb_for(dir, "60s", extra)
}

/// [`ycsb`] for `duration`.
fn ycsb_for(dir: &Path, duration: &str, extra: &[&str]) -> std::process::Child {
    let mut child = Command::new(exe())
        .args(["cluster", "ycsb", "--dir"])
        .arg(dir)
        .args([
            "--index",
            "orders",
            "--tasks",
            "2",
            "--keys",
            "50",
            "--duration",
            duration,
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "running", "the load did not start");
    child
}

/// Runs a ycsb client named `victim` (with `extra` arguments) that SIGKILLs
/// itself right after a lock-taking CAS 100 ms in, and waits for its death.
fn run_victim(dir: &Path, extra: &[&str]) {
    let args = [&["--die-after", "100ms", "--name", "victim"][..], extra].concat();
    let status = ycsb(dir, &args).wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_is_expired_repaired_and_its_ids_reused_only_after_its_logs_are_done() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 2, 2, "300ms");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let survivor = Cluster::connect_with(&file.control, &file.client_token, options("survivor", &file))
        .await
        .unwrap();
    let mut tree = survivor.btree("orders").await.unwrap();

    // It SIGKILLs itself right after a lock-taking CAS: mid-operation.
    run_victim(dir.path(), &[]);

    let ops = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let dead = eventually("the victim's expiry", Duration::from_secs(30), async || {
        let clients = ops.clients().await.ok()?;
        clients
            .into_iter()
            .find(|c| c.name == "victim" && matches!(c.state, ClientState::Expired { .. }))
    })
    .await;
    // Expired, its ids are still its own: a newcomer gets others.
    let newcomer = Cluster::connect_with(&file.control, &file.client_token, options("newcomer", &file))
        .await
        .unwrap();
    assert!(!overlaps(newcomer.owner_ids(), dead.owners));
    drop(newcomer);

    // The survivor writes every key the victim owned.
    for k in 1..=100 {
        tree.put(k, 1).await.unwrap();
    }
    // Whoever got there first repaired the lock the victim died holding:
    // the survivor, meeting it, or recovery, rolling the victim's logs and
    // sweeping expired locks as soon as it expired.
    let report = tree.inner().check().await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    drop(tree);

    // Recovery rolls its logs at once, and after its quarantine reclaims
    // its unused blocks and forgets it.
    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    forgotten(&api, dead.id).await;
    // Leak repair ran before, once the survivor had quiesced to the
    // expiry: the blocks of the victim's slabs that no object names wait,
    // as runs, for the ids' next holders.
    let (mut fabric, heap) = orders_heap(&survivor).await;
    let mut runs = 0;
    for id in dead.owners.ids() {
        runs += heap.runs_of(&mut fabric, id).await.unwrap().len();
    }
    assert!(runs > 0, "the victim's unused blocks were reclaimed");
    let heir = heir_of(&file, dead.owners).await;
    // The heir's first handle holds the victim's first id: its writes take
    // the reclaimed blocks first, while the survivor keeps writing, and
    // no node is named twice (the check), and every write reads back.
    let mut heirs_tree = heir.btree("orders").await.unwrap();
    let mut tree = survivor.btree("orders").await.unwrap();
    for k in 1..=100 {
        heirs_tree.put(k, 2).await.unwrap();
        tree.put(k + 100, 3).await.unwrap();
    }
    let adopted = heirs_tree.inner().tx_stats().unwrap_or_default().blocks_adopted;
    assert!(adopted > 0, "the heir took no reclaimed block");
    let report = tree.inner().check().await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    for k in 1..=100 {
        assert_eq!(tree.get(k).await.unwrap(), Some(2), "key {k}");
        assert_eq!(heirs_tree.get(k + 100).await.unwrap(), Some(3), "key {}", k + 100);
    }
    drop((heirs_tree, tree));
    heir.close().await.unwrap_or_else(|e| panic!("{e}"));
    survivor.close().await.unwrap_or_else(|e| panic!("{e}"));
    drop(local);
}

/// The DTX baseline under a real kill: a client of a dtx B+tree SIGKILLs
/// itself right after a lock CAS. Nobody repairs its locks online; the
/// recovery coordinator rolls its DTX logs once its quarantine (expiry and
/// one more lease) is over, and then the survivor's writes to every key go
/// through, the tree checks clean (nothing locked or invisible), and the
/// dead client is forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dtx_client_is_rolled_back_by_recovery_after_its_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 2, 2, "300ms");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let survivor = Cluster::connect_with(
        &file.control,
        &file.client_token,
        ClusterOptions {
            variant: IndexVariant::Dtx,
            ..options("survivor", &file)
        },
    )
    .await
    .unwrap();
    // The survivor creates the index as dtx; the victim opens it by name.
    let mut tree = survivor.btree("orders").await.unwrap();
    assert_eq!(tree.inner().variant(), index::Variant::Dtx);
    run_victim(dir.path(), &[]);

    let ops = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let dead = eventually("the victim's expiry", Duration::from_secs(30), async || {
        let clients = ops.clients().await.ok()?;
        clients
            .into_iter()
            .find(|c| c.name == "victim" && matches!(c.state, ClientState::Expired { .. }))
    })
    .await;
    // Every key, the ones under the victim's locks too: those wait (no
    // online repair) until recovery rolled the victim's log, one client
    // lease after the expiry. A put may give up blocked before that on a
    // loaded machine (its own attempts run out): it is tried again until
    // recovery's deadline, which is what the test asserts.
    for k in 1..=100 {
        eventually(
            &format!("put {k} once recovery rolled the victim's log"),
            Duration::from_secs(30),
            async || match tree.put(k, 1).await {
                Ok(_) => Some(()),
                Err(index::IndexError::Blocked(_)) => None,
                Err(e) => panic!("put {k}: {e}"),
            },
        )
        .await;
    }
    let report = tree.inner().check().await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    for k in 1..=100 {
        assert_eq!(tree.get(k).await.unwrap(), Some(1), "key {k}");
    }
    drop(tree);
    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    forgotten(&api, dead.id).await;
    survivor.close().await.unwrap_or_else(|e| panic!("{e}"));
    drop(local);
}

/// A hash table's client killed mid-operation: once recovery forgot it,
/// the heir of its first owner id writes its KV blocks in the unwritten
/// end of the victim's KV chunk (`txn::tails`) while the survivor writes
/// too, and every write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hash_clients_unwritten_kv_chunk_end_goes_to_the_heir_of_its_ids() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 2, 2, "300ms");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let survivor = Cluster::connect_with(&file.control, &file.client_token, options("survivor", &file))
        .await
        .unwrap();
    let mut table = survivor.hash("orders").await.unwrap();
    run_victim(dir.path(), &["--kind", "hash"]);
    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let dead = eventually("the victim's registration", Duration::from_secs(30), async || {
        let clients = api.clients().await.ok()?;
        clients.into_iter().find(|c| c.name == "victim")
    })
    .await;
    forgotten(&api, dead.id).await;

    // The victim wrote KV blocks into sealed chunks of its ids.
    let (mut fabric, heap) = orders_heap(&survivor).await;
    let first = dead.owners.first;
    let sealed = heap
        .owner_table_of(&mut fabric)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.owner() == Some(first) && t.kind() == Some(txn::ChunkKind::Sealed))
        .count();
    assert!(sealed > 0, "the victim's first id wrote no KV chunk");

    let heir = heir_of(&file, dead.owners).await;
    let mut heirs_table = heir.hash("orders").await.unwrap();
    for k in 0..100 {
        heirs_table.put(1_000 + k, 2).await.unwrap();
        table.put(2_000 + k, 3).await.unwrap();
    }
    let adopted = heirs_table.inner().stats().kv_tail_bytes_adopted;
    assert!(adopted > 0, "the heir carved nothing of the victim's KV chunks");
    let report = table.inner().check().await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    for k in 0..100 {
        assert_eq!(table.get(1_000 + k).await.unwrap(), Some(2), "key {}", 1_000 + k);
        assert_eq!(
            heirs_table.get(2_000 + k).await.unwrap(),
            Some(3),
            "key {}",
            2_000 + k
        );
    }
    drop((heirs_table, table));
    heir.close().await.unwrap_or_else(|e| panic!("{e}"));
    survivor.close().await.unwrap_or_else(|e| panic!("{e}"));
    drop(local);
}

/// On shm every client maps every node's image, so a dead node's memory
/// stays readable: recovery fences the image of a node it declared dead
/// (raises its epoch past every map that routed to it), and a client still
/// holding such a map is refused there (`StaleEpoch`) instead of reading
/// what the node held when it died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_shm_image_refuses_clients_with_a_map_that_still_routes_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 3, 2, "1s");
    let mut local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let c = Cluster::connect_with(&file.control, &file.client_token, options("writer", &file))
        .await
        .unwrap();
    let mut tree = c.btree("orders").await.unwrap();
    tree.put(1, 1).await.unwrap();
    drop(tree);
    let old = c.fabric().map().clone();
    let (_, heap) = orders_heap(&c).await;
    let region = heap.region();
    let backup = old.region(region).unwrap().replicas[1].node;

    // A client of this host that keeps the map the node died in.
    let t = fabric::ShmTransport::attach_map(&old).unwrap();
    let mut stale = fabric::Client::new(old.clone(), t.into());
    let read_backup = async |stale: &mut fabric::Client| {
        let mut b = fabric::Batch::new();
        b.on(fabric::Replica::Backup(0))
            .read(fabric::GlobalAddr::new(region, 0), 8);
        stale.execute(&mut b).await
    };
    read_backup(&mut stale).await.unwrap();

    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let process = local.process_of(backup, &api.memnodes().await.unwrap()).unwrap();
    local.memnode(process).unwrap().kill().unwrap();
    let refused = eventually(
        "the dead node's image to refuse the old map",
        Duration::from_secs(30),
        async || match read_backup(&mut stale).await {
            Err(fabric::FabricError::StaleEpoch { node_epoch, .. }) => Some(node_epoch),
            _ => None,
        },
    )
    .await;
    // Only the fence can raise it: the node's own process is gone.
    assert!(refused > old.epoch());
    c.close().await.unwrap_or_else(|e| panic!("{e}"));
    drop(local);
}

/// Issue 47: a `cluster ycsb` paused past its lease issues nothing under
/// its old ids (an heir holds them by then), joins again as a new client
/// when it resumes, finishes its load, and finds every write it was told
/// of; the heir's work is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_paused_past_its_lease_issues_no_verb_when_it_resumes_and_joins_again() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 1, 1, "300ms");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let survivor = Cluster::connect_with(&file.control, &file.client_token, options("survivor", &file))
        .await
        .unwrap();
    // Long enough to be running when it resumes, whatever the reaping took
    // (it joins again either way: at its next operation, or to leave).
    let sleeper = ycsb_for(dir.path(), "15s", &["--name", "sleeper"]);
    let pid = nix::unistd::Pid::from_raw(sleeper.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();

    let ops = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let slow = eventually("the sleeper's expiry", Duration::from_secs(30), async || {
        let clients = ops.clients().await.ok()?;
        clients
            .into_iter()
            .find(|c| c.name == "sleeper" && matches!(c.state, ClientState::Expired { .. }))
    })
    .await;
    // Recovery rolls its logs and forgets it after its quarantine.
    eventually("the sleeper's reaping", Duration::from_secs(30), async || {
        let clients = ops.clients().await.ok()?;
        clients.iter().all(|c| c.id != slow.id).then_some(())
    })
    .await;
    // Its ids are another's now; then it wakes up.
    let heir = Cluster::connect_with(
        &file.control,
        &file.client_token,
        ClusterOptions {
            owner_ids: slow.owners.count,
            ..options("heir", &file)
        },
    )
    .await
    .unwrap();
    assert!(overlaps(heir.owner_ids(), slow.owners));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let out = sleeper.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "it joins again and finishes: {stderr}");
    let again: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("joined the cluster again as client "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("it says it joined again: {stderr}"));
    assert_ne!(again, slow.id, "as a new client");
    assert!(
        stderr.contains("checked: all") && stderr.contains("hold their last acknowledged value"),
        "nothing it was told of is lost: {stderr}"
    );
    // The heir works on the index the sleeper used.
    let mut tree = heir.btree("orders").await.unwrap();
    for k in 1..=100 {
        tree.put(k, 2).await.unwrap();
    }
    assert!(tree.inner().check().await.unwrap().is_ok());
    drop(tree);
    heir.close().await.unwrap();
    drop(survivor);
    drop(local);
}

/// The live recovery coordinator other than `not`, if there is one.
async fn coordinator_other_than(
    api: &ControlClient,
    not: Option<u64>,
) -> Option<control_plane::state::Client> {
    let clients = api.clients().await.ok()?;
    clients.into_iter().find(|c| {
        c.name == kintsugi::recovery::CLIENT_NAME && c.state == ClientState::Live && Some(c.id) != not
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_whose_lease_was_lost_is_replaced_and_recovery_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 1, 1, "300ms");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let ops = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let first = eventually("a recovery coordinator", Duration::from_secs(30), async || {
        coordinator_other_than(&ops, None).await
    })
    .await;
    // What a stall past its lease does: the control plane expires it, and
    // its next renewal learns that it is gone.
    ops.command(&control_plane::state::Command::ExpireClient { id: first.id })
        .await
        .unwrap();
    let second = eventually(
        "a coordinator in its place",
        Duration::from_secs(30),
        async || coordinator_other_than(&ops, Some(first.id)).await,
    )
    .await;
    // The new one rolls and forgets the old one, and recovers a client
    // killed mid-operation as before.
    forgotten(&ops, first.id).await;
    run_victim(dir.path(), &[]);
    // It registered before it started: once no client has its name,
    // recovery has rolled its logs and forgotten it.
    eventually(
        "recovery to forget the victim",
        Duration::from_secs(30),
        async || {
            let clients = ops.clients().await.ok()?;
            clients.iter().all(|c| c.name != "victim").then_some(())
        },
    )
    .await;
    let survivor = Cluster::connect_with(&file.control, &file.client_token, options("survivor", &file))
        .await
        .unwrap();
    let mut tree = survivor.btree("orders").await.unwrap();
    for k in 1..=100 {
        tree.put(k, 1).await.unwrap();
    }
    let report = tree.inner().check().await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    drop(tree);
    survivor.close().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(coordinator_other_than(&ops, Some(first.id))
        .await
        .is_some_and(|c| c.id == second.id));
    drop(local);
}

/// A client's last steps (finishing its own logs as it closes) wait while
/// its index's region is out of the map for a restore, rather than give up
/// after a few tries (a catch-up after a re-replication takes the region
/// out the same way, for as long as its copy takes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_while_the_region_is_restored_waits_for_the_restore() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 2, 2, "1s");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    // An operator's token: a restore moves replicas.
    let promoter = Cluster::connect_with(&file.control, &file.token, options("promoter", &file))
        .await
        .unwrap();
    let closer = Cluster::connect_with(&file.control, &file.client_token, options("closer", &file))
        .await
        .unwrap();
    let mut tree = closer.btree("orders").await.unwrap();
    tree.put(1, 1).await.unwrap();
    drop(tree);
    let (_, heap) = orders_heap(&closer).await;
    let region = heap.region();
    let backup = closer.fabric().map().region(region).unwrap().replicas[1].node;
    // The promotion, claimed for the promoter (a live client: recovery
    // leaves the restore to it), takes the region out of the map.
    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let promote = control_plane::state::Command::PromoteBackup {
        region,
        node: backup,
        restorer: Some(promoter.id()),
    };
    api.command(&promote).await.unwrap();
    eventually(
        "the closer's map to drop the region",
        Duration::from_secs(30),
        async || closer.fabric().map().region(region).is_none().then_some(()),
    )
    .await;
    let mut closing = tokio::spawn(async move { closer.close().await });
    // A bound, not a synchronisation: a close that gives up does so at once.
    let early = tokio::time::timeout(Duration::from_secs(2), &mut closing).await;
    assert!(
        early.is_err(),
        "close ended while its region was out of the map: {early:?}"
    );
    let restored = promoter.finish_promotion(region).await.unwrap();
    assert_eq!(restored.primary, backup);
    closing.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    promoter.close().await.unwrap_or_else(|e| panic!("{e}"));
    drop(local);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_errors_that_name_their_cause_and_leave_nothing_half_made() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 1, 1, "1s");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let ops = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();

    // A token the members do not know.
    let err = Cluster::connect(&file.control, "not-a-token-of-this-cluster")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("401") && err.contains("unknown bearer token"),
        "{err}"
    );

    // A member that is down is passed over; all of them down is an error naming them.
    let mut endpoints = vec!["127.0.0.1:1".to_owned()];
    endpoints.extend(file.control.iter().cloned());
    let c = Cluster::connect_with(&endpoints, &file.client_token, options("c", &file))
        .await
        .unwrap();
    let down = Cluster::connect(&["127.0.0.1:1"], &file.client_token)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        down.contains("no control-plane member answered") && down.contains("127.0.0.1:1"),
        "{down}"
    );

    // An unknown name, when creating is not asked for.
    let strict = Cluster::connect_with(
        &file.control,
        &file.client_token,
        ClusterOptions {
            create_missing: false,
            ..options("strict", &file)
        },
    )
    .await
    .unwrap();
    let unknown = strict.btree("nope").await.unwrap_err().to_string();
    assert!(unknown.contains("no index named \"nope\""), "{unknown}");
    drop(strict);

    // A region that cannot be placed: nothing is recorded.
    let greedy = Cluster::connect_with(
        &file.control,
        &file.client_token,
        ClusterOptions {
            replicas: 3,
            ..options("greedy", &file)
        },
    )
    .await
    .unwrap();
    let placed = greedy.btree("wide").await.unwrap_err().to_string();
    assert!(placed.contains("cannot place 3 replicas"), "{placed}");
    assert!(ops.indexes().await.unwrap().is_empty());
    assert!(ops.regions().await.unwrap().is_empty());
    drop(greedy);

    // A name taken by another kind.
    let t = c.btree("orders").await.unwrap();
    drop(t);
    let kind = c.hash("orders").await.unwrap_err().to_string();
    assert!(kind.contains("is a btree, not a hash"), "{kind}");
    c.close().await.unwrap();
    drop(local);
}

/// Issue 47, for a service on the client library: its lease lost (the
/// control plane expired it, as it does a process stalled past its lease),
/// a [`Membership`] joins again as a new client with other owner ids; a
/// load's tasks reopen their handles under it and go on, and every write
/// they were told of is there at the end. Recovery forgets the old client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_client_whose_lease_was_lost_joins_again_and_its_load_goes_on() {
    use std::sync::Arc;

    use kintsugi::cluster::load::{self, LoadSpec};
    use kintsugi::cluster::{IndexKind, Membership};
    use support::cluster::RunningLoad;

    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 1, 1, "300ms");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let ops_api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let m = Membership::join(
        &file.control,
        &file.client_token,
        ClusterOptions {
            owner_ids: 2,
            ..options("service", &file)
        },
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let m = Arc::new(m);
    let first = m.current();
    let keeper = {
        let m = m.clone();
        tokio::spawn(async move { m.keep(|_| {}).await })
    };
    let load_spec = LoadSpec {
        index: "service".into(),
        kind: IndexKind::Btree,
        tasks: 2,
        keys_per_task: 50,
        duration: Duration::from_secs(120),
        seed: 7,
    };
    let running = RunningLoad::start_on(m.clone(), &load_spec);
    running.beyond(200).await;

    ops_api
        .command(&control_plane::state::Command::ExpireClient { id: first.id() })
        .await
        .unwrap();
    let second = m.next_after(&first).await.unwrap();
    assert_ne!(second.id(), first.id(), "a new client");
    assert!(
        !overlaps(second.owner_ids(), first.owner_ids()),
        "with other owner ids"
    );
    running.more(200).await;

    let report = running.stop().await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        report.rejoins >= 1,
        "a task reopened its handle under the new client"
    );
    let lost = load::lost(&second, &load_spec.index, load_spec.kind, &report.acked)
        .await
        .unwrap();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    forgotten(&ops_api, first.id()).await;

    keeper.abort();
    let _ = keeper.await;
    drop((first, second));
    Arc::into_inner(m).unwrap().close().await.unwrap();
    drop(local);
}

/// A memory node killed on purpose leaves its shm image (in RAM) behind;
/// the local cluster removes it when it goes, as a clean stop would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shm_nodes_image_is_removed_with_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 1, 1, "300ms");
    let mut local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let api = ControlClient::new(&local.file.control[0], Some(local.file.token.clone())).unwrap();
    let image = eventually("the node's registration", Duration::from_secs(30), async || {
        api.memnodes().await.ok()?.first().map(|n| n.endpoint.clone())
    })
    .await;
    assert!(Path::new(&image).is_file(), "{image} is the node's shm image");
    local.memnode(0).unwrap().kill().unwrap();
    assert!(Path::new(&image).is_file(), "a killed node cannot remove it");
    drop(local);
    assert!(!Path::new(&image).exists(), "{image} outlived the cluster");
}
