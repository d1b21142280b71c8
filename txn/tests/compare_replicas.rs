//! `Heap::compare_replicas` finds a backup left behind, word by word, and
//! nothing where the replicas agree or may differ by design.

mod common;

use common::{spread, Cluster, REGION};
use fabric::{Batch, GlobalAddr, Replica};

async fn write_backup(cluster: &Cluster, at: GlobalAddr, value: u64) {
    let mut f = cluster.fabric.fork();
    let mut b = Batch::new();
    let h = b.on(Replica::Backup(0)).write(at, &value.to_le_bytes());
    f.execute(&mut b).await.unwrap();
    b.done(h).unwrap();
}

#[tokio::test]
async fn a_backup_left_behind_is_found_and_agreement_is_not_reported() {
    let cluster = Cluster::new(2).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let mut c = cluster.client(1);
    spread(&mut c, objs.clone()).await.unwrap();
    let mut f = cluster.fabric.fork();
    let eight = |_: GlobalAddr| Some(8);
    let nobody = |_: u16| false;

    let clean = cluster
        .heap
        .compare_replicas(&mut f, &eight, &nobody)
        .await
        .unwrap();
    assert_eq!(clean.replicas, 2);
    assert_eq!(clean.objects, 2);
    assert_eq!(clean.differences, 0, "{:?}", clean.listed);
    assert!(clean.words_compared > 0);

    // Lock words live on the primary only: a held lock is no difference.
    let mut t = cluster.client(2);
    let x = objs[0];
    let mut tx = t.begin();
    tx.lock_now(x.raw()).await.unwrap();
    let held = cluster
        .heap
        .compare_replicas(&mut f, &eight, &nobody)
        .await
        .unwrap();
    assert_eq!(held.differences, 0, "{:?}", held.listed);
    tx.rollback().await.unwrap();

    // A backup pointing at the old block: its pointer differs.
    let (_, now) = cluster.meta(x).await;
    write_backup(&cluster, x.meta().add(8), now.raw() ^ 1 << 48).await;
    let behind = cluster
        .heap
        .compare_replicas(&mut f, &eight, &nobody)
        .await
        .unwrap();
    assert_eq!(behind.differences, 1, "{:?}", behind.listed);
    assert_eq!(behind.listed[0].what, "data pointer");
    assert_eq!(behind.listed[0].at, x.meta().add(8));
    write_backup(&cluster, x.meta().add(8), now.raw()).await;

    // A backup's copy of the data, and of a log word.
    write_backup(&cluster, GlobalAddr::new(REGION, now.offset()), 7).await;
    let slot = cluster.heap.log_slot(1).unwrap();
    write_backup(&cluster, slot.add(8), 7).await;
    let both = cluster
        .heap
        .compare_replicas(&mut f, &eight, &nobody)
        .await
        .unwrap();
    assert_eq!(both.differences, 2, "{:?}", both.listed);
    assert!(both
        .listed
        .iter()
        .any(|d| d.what.starts_with("data of the object")));
    assert!(both.listed.iter().any(|d| d.what == "log slot of owner 1"));
}
