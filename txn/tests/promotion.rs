//! The words only a primary keeps, rebuilt on a promoted backup (issue 19,
//! item 6): the chunk counter must not hand out chunks already in use, and
//! lock versions must not go backwards.

mod common;

use common::{bump_all, spread, Cluster};
use fabric::{Batch, Client, ClusterMap, GlobalAddr, Replica};
use txn::{ChunkKind, LockWord, TxClient, TxConfig};

/// The heap header's next-chunk word (word 5 of the header page).
const NEXT_CHUNK: GlobalAddr = GlobalAddr::new(common::REGION, 5 * 8);

/// The next-chunk word on every replica.
async fn counters(fabric: &mut Client) -> Vec<u64> {
    let mut b = Batch::new();
    let h = b.on(Replica::All).read(NEXT_CHUNK, 8);
    fabric.execute(&mut b).await.unwrap();
    let n = fabric.map().region(common::REGION).unwrap().replicas.len();
    (0..n)
        .map(|i| common::word(b.read_result_of(h, i).unwrap(), 0))
        .collect()
}

/// The map after the primary of the one region died and its first backup
/// was promoted: a new epoch, the backups moved up.
fn promoted(map: &ClusterMap) -> ClusterMap {
    let mut regions = map.regions().to_vec();
    let dead = regions[0].replicas[0].node;
    for r in &mut regions {
        r.replicas.retain(|l| l.node != dead);
    }
    let nodes = map.nodes().iter().filter(|n| n.id != dead).cloned().collect();
    ClusterMap::new(map.epoch() + 1, nodes, regions).unwrap()
}

#[tokio::test]
async fn a_promoted_backup_hands_out_no_chunk_in_use_and_no_old_version() {
    let cluster = Cluster::new(2).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let mut a = cluster.client(1);
    spread(&mut a, objs.clone()).await.unwrap();
    bump_all(&mut a, &objs).await.unwrap();
    let mut fabric = cluster.fabric.fork();
    let before = counters(&mut fabric).await;
    assert!(before[0] >= 3, "the setup owner and A took chunks: {before:?}");
    assert_eq!(before[1], before[0], "every replica counts the chunks taken");
    let tags = cluster.heap.owner_table_of(&mut fabric).await.unwrap();
    assert!(tags.iter().any(|t| t.kind() == Some(ChunkKind::Metas)));
    let version_before = cluster.lock(objs[0]).await.version();

    // The primary dies; its backup becomes the primary of a new epoch.
    let map = promoted(fabric.map());
    let mut promoted_fabric = Client::new(map.clone(), fabric.transport().clone());
    let floor = LockWord::promotion_floor(txn::now_tick(&promoted_fabric));
    let restored = cluster
        .heap
        .restore_after_promotion(&mut promoted_fabric, floor)
        .await
        .unwrap();
    assert_eq!(restored.next_chunk, before[0]);
    assert_eq!(restored.chunks_taken, before[0]);
    assert_eq!(restored.lock_words, 2, "both objects' metas, nothing else");
    assert!(floor > version_before);

    // A client of the new epoch: its chunks are new ones, the objects keep
    // their values, and their versions went up, not back.
    let mut b = TxClient::new(promoted_fabric.fork(), cluster.heap, 2, TxConfig::default()).unwrap();
    spread(&mut b, objs.clone()).await.unwrap();
    let after = counters(&mut promoted_fabric).await;
    assert!(after[0] > before[0], "B took a fresh chunk: {after:?}");
    let mut c = TxClient::new(promoted_fabric.fork(), cluster.heap, 3, TxConfig::default()).unwrap();
    let values = c
        .run(async |tx| Ok((tx.read(objs[0]).await?, tx.read(objs[1]).await?)))
        .await
        .unwrap();
    assert_eq!(values, (101 - 20, 101 + 20));
    let mut batch = Batch::new();
    let h = batch.read(objs[0].meta(), 8);
    promoted_fabric.execute(&mut batch).await.unwrap();
    let lock = LockWord::from_raw(common::word(batch.read_result(h).unwrap(), 0));
    assert_eq!(lock, LockWord::unlocked(floor + 1), "one commit above the floor");
}
