//! A replica is proven, never presumed (issue 46, design.md §1b): a memory
//! node `kill -9`ed and started again at once with the same flags but
//! without its image (no `--persist`: a new tmpfs, a replaced disk) comes
//! back with another image id. It is a new, empty node: declared dead at
//! once, its replicas evicted (a primary's backup promoted) and refilled,
//! never served. Before, it was taken back under its old id and served
//! zeroed regions: a backup failed every commit's CAS and diverged from
//! its primary, a primary answered reads with nothing.
//!
//! Real processes: 3 control members, 4 memory nodes over tcp without
//! images, 3 replicas, a YCSB-A load. The memory-node lease is long (3 s)
//! so that the restart always lands inside the detection window: nothing
//! but the image id tells the restarted node from the one that died.

mod support;

use std::sync::Arc;
use std::time::Duration;

use control_plane::api::ControlClient;
use control_plane::state::{Command, MemNodeState, Region};
use harness::local::{LocalCluster, LocalClusterSpec};
use kintsugi::cluster::load::{Handle, LoadSpec};
use kintsugi::cluster::{Cluster, ClusterOptions, IndexKind};
use kintsugi::index::ObjectSizes;
use support::cluster::{eventually, RunningLoad};
use support::local::exe;

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

/// Kills the node holding replica `replica` (0: the primary) of an index
/// of `kind` under load, starts it again at once without its image, and
/// checks that the cluster refills it rather than serving it: the node's
/// record names its new image, the region is whole again, nothing
/// acknowledged is lost, and the three replicas agree word for word.
async fn restarted_without_its_image(kind: IndexKind, replica: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "dir = {:?}\n[memory]\nnodes = 4\ncapacity = \"64MiB\"\ntransport = \"tcp\"\npersist = false\n\
         [indexes]\nreplicas = 3\n[timing]\nmemnode_lease = \"3s\"\nclient_lease = \"1s\"\n",
        dir.path()
    );
    let spec = LocalClusterSpec::parse(&text, "test").unwrap();
    let mut local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
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

    let before = region_of(&api, "orders").await;
    let victim = before.replicas[replica].node;
    let nodes = api.memnodes().await.unwrap();
    let old_image = nodes.iter().find(|n| n.id == victim).unwrap().image;
    assert!(old_image.is_some(), "a node registers with its image id");
    let process = local.process_of(victim, &nodes).unwrap();
    local.memnode(process).unwrap().kill().unwrap();
    // The same flags, no image: a new image id. It has registered once it
    // listens (a placed node announces its address after registering),
    // long before two 3 s leases could have it declared dead.
    local.restart_memnode(process).unwrap();
    // The load goes on meanwhile: it must never meet the empty image.
    running.more(1_000).await;
    let after = eventually(
        "the restarted node active and the region whole",
        Duration::from_secs(90),
        async || {
            let nodes = api.memnodes().await.unwrap();
            let n = nodes.iter().find(|n| n.id == victim)?;
            let r = region_of(&api, "orders").await;
            (n.state == MemNodeState::Active && r.whole() && !r.being_restored()).then_some(r)
        },
    )
    .await;
    running.more(1_000).await;
    let report = running.stop().await;
    assert!(
        report.errors.is_empty(),
        "no error reached the application: {:?}",
        report.errors
    );
    let lost = kintsugi::cluster::load::lost(&c, &load.index, load.kind, &report.acked)
        .await
        .unwrap();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    replicas_agree(&c, &load, after.id).await;

    // How: declared dead at once for its new image, its replicas evicted
    // (a primary's first backup promoted), taken in again as an empty node.
    let nodes = api.memnodes().await.unwrap();
    let n = nodes.iter().find(|n| n.id == victim).unwrap();
    assert!(
        n.image.is_some() && n.image != old_image,
        "its record names its new image"
    );
    if replica == 0 {
        assert_ne!(after.primary(), victim, "an empty node is never the primary");
        assert_eq!(
            after.primary(),
            before.replicas[1].node,
            "the first backup took over"
        );
    }
    let audit = api.audit(10_000).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.outcome == "ok"
                && matches!(e.command, Command::ReplaceImage { id, .. } if id == victim)),
        "the audit trail shows the image replaced"
    );
}

/// The region's 3 replicas agree word for word wherever they must.
async fn replicas_agree(c: &Cluster, load: &LoadSpec, region: u16) {
    let sizes = match Handle::open(c, &load.index, load.kind).await.unwrap() {
        Handle::Tree(mut t) => ObjectSizes::new(t.inner().objects().await.unwrap()),
        Handle::Table(mut t) => ObjectSizes::new(t.inner().objects().await.unwrap()),
    };
    let mut fabric = c.fabric();
    let heap = kintsugi::txn::Heap::open(&mut fabric, region).await.unwrap();
    let report = heap
        .compare_replicas(&mut fabric, &|meta| sizes.of(meta), &|_| true)
        .await
        .unwrap();
    assert_eq!(report.replicas, 3);
    assert_eq!(report.differences, 0, "{:?}", report.listed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_restarted_without_its_image_is_refilled_not_served() {
    restarted_without_its_image(IndexKind::Btree, 2, 46).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_restarted_without_its_image_hands_over_to_its_backup() {
    restarted_without_its_image(IndexKind::Hash, 0, 47).await;
}
