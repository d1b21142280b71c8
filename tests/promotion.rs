//! Promotions on a local cluster of real processes: a backup made the
//! primary (`kintsugi ctl region promote`) while YCSB-A clients write, over
//! shm and tcp, on rtx and dtx indexes; every client follows, nothing
//! acknowledged is lost, and a crashed DTX client's committed log is
//! finished by the promoter.

mod support;

use std::process::Command;
use std::time::Duration;

use control_plane::api::ControlClient;
use harness::local::{ClusterFile, LocalCluster};
use kintsugi::cluster::{Cluster, ClusterOptions, IndexVariant};
use support::cluster::RunningLoad;
use support::local::{exe, options, spec, spec_over};

/// `kintsugi ctl region promote REGION NODE` against the cluster in `file`.
fn ctl_promote(file: &ClusterFile, region: u16, node: u16) -> String {
    let out = Command::new(exe())
        .args(["ctl", "--endpoint", &file.control[0], "--token", &file.token])
        .args(["region", "promote", &region.to_string(), &node.to_string()])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// [`ctl_promote`] off the runtime's threads, and what it said checked.
async fn promote_to(file: &ClusterFile, region: u16, to: u16) {
    let said = tokio::task::spawn_blocking({
        let file = file.clone();
        move || ctl_promote(&file, region, to)
    })
    .await
    .unwrap();
    assert!(said.contains(&format!("has primary {to}")), "{said}");
}

/// The control plane's record of the index named "orders".
async fn orders_record(api: &ControlClient) -> control_plane::state::IndexRecord {
    api.indexes()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.name == "orders")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_promotion_under_ycsb_a_is_followed_by_every_client_and_loses_no_acknowledged_write() {
    promotion_under_load("shm", IndexVariant::Rtx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_promotion_over_tcp_is_followed_too() {
    promotion_under_load("tcp", IndexVariant::Rtx).await;
}

/// A dtx index: the promoter takes the DTX locks of unfinished logs again
/// on the new primary and finishes every log; the clients' releases owed
/// from before are void.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_promotion_of_a_dtx_index_under_ycsb_a_loses_no_acknowledged_write() {
    promotion_under_load("shm", IndexVariant::Dtx).await;
}

/// A dtx client whose transport dies right after a commit every replica
/// acknowledged (`txn::dtx::CRASH_AFTER_COMMIT`): its records stay locked
/// on the old primary and invisible on every replica. A promotion then
/// makes a backup the primary, whose lock words are all free: the promoter
/// takes the committed log's locks again and rolls it forward before it
/// publishes the region, so the tree checks clean at once and the write
/// is there. (The victim stays live, so recovery does not roll its log.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_finishes_the_dtx_log_a_crashed_client_left_unreleased() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 3, 3, "1s");
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let dtx = |name: &str, faults| ClusterOptions {
        variant: IndexVariant::Dtx,
        faults,
        ..options(name, &file)
    };
    let keeper = Cluster::connect_with(&file.control, &file.client_token, dtx("keeper", None))
        .await
        .unwrap();
    let mut tree = keeper.btree("orders").await.unwrap();
    for k in 1..=50 {
        tree.put(k, 1).await.unwrap();
    }
    tree.inner().flush().await.unwrap();
    let crash = fabric::FaultPlan {
        crash_points: vec![txn::dtx::CRASH_AFTER_COMMIT.to_owned()],
        ..fabric::FaultPlan::default()
    };
    let victim = Cluster::connect_with(&file.control, &file.client_token, dtx("victim", Some(crash)))
        .await
        .unwrap();
    let mut doomed = victim.btree("orders").await.unwrap();
    assert!(
        doomed.put(7, 99).await.is_err(),
        "the victim's transport died at its commit"
    );
    // Before the promotion the victim's leaf is invisible: readers wait on
    // it, and give up blocked.
    let before = tree.inner().check().await;
    assert!(matches!(before, Err(index::IndexError::Blocked(_))), "{before:?}");

    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let x = orders_record(&api).await;
    let region = api
        .regions()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == x.region)
        .unwrap();
    let to = region.replicas[1].node;
    promote_to(&file, x.region, to).await;

    // Read afresh through the new primary: nothing held, nothing invisible,
    // and the committed write is there.
    drop(tree);
    let mut tree = keeper.btree("orders").await.unwrap();
    let report = tree.inner().check().await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(tree.get(7).await.unwrap(), Some(99));
    for k in (1..=50).filter(|&k| k != 7) {
        assert_eq!(tree.get(k).await.unwrap(), Some(1), "key {k}");
    }
    drop((tree, doomed));
    drop(victim);
    keeper.close().await.unwrap_or_else(|e| panic!("{e}"));
    drop(local);
}

async fn promotion_under_load(transport: &str, variant: IndexVariant) {
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let spec = spec_over(dir.path(), 3, 3, "1s", transport);
    let local = LocalCluster::up(exe(), &spec, |_| {}).await.unwrap();
    let file = local.file.clone();
    let c = Arc::new(
        Cluster::connect_with(
            &file.control,
            &file.client_token,
            ClusterOptions {
                variant,
                ..options("load", &file)
            },
        )
        .await
        .unwrap(),
    );
    let load = kintsugi::cluster::load::LoadSpec {
        index: "orders".into(),
        kind: kintsugi::cluster::IndexKind::Btree,
        tasks: 4,
        keys_per_task: 200,
        duration: Duration::from_secs(120),
        seed: 7,
    };
    let running = RunningLoad::start(&c, &load);
    running.beyond(2_000).await;
    let api = ControlClient::new(&file.control[0], Some(file.token.clone())).unwrap();
    let x = orders_record(&api).await;
    assert_eq!(x.variant, variant);
    let replicas: Vec<u16> = api.regions().await.unwrap()[0]
        .replicas
        .iter()
        .map(|r| r.node)
        .collect();

    // Twice, to each backup in turn, while the load runs.
    for &to in &replicas[1..] {
        promote_to(&file, x.region, to).await;
        let region = api.regions().await.unwrap().remove(0);
        assert_eq!((region.primary(), region.restoring), (to, false));
        // Every client follows: the load goes on past the promotion.
        running.more(2_000).await;
    }
    let report = running.stop().await;
    assert!(
        report.errors.is_empty(),
        "no error reached the application: {:?}",
        report.errors
    );
    assert!(report.retries > 0, "the clients were fenced and retried");
    let lost = kintsugi::cluster::load::lost(&c, "orders", load.kind, &report.acked)
        .await
        .unwrap();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    let mut tree = c.btree("orders").await.unwrap();
    assert!(tree.inner().check().await.unwrap().is_ok());
    drop(tree);
    Arc::try_unwrap(c).unwrap().close().await.unwrap();
    drop(local);
}
