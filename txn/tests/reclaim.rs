//! Leak repair (`txn::reclaim`, the rTX paper's §4.4): a dead owner's data
//! blocks that no meta names come back to the next holder of its id, and
//! nothing is handed out twice.
//!
//! - a reclaim after an owner's death finds exactly the blocks of its slabs
//!   that no meta names, among them the blocks of a commit cut off before
//!   it published them, its lost free list, and the blocks of its chunks
//!   another committer replaced and keeps for reuse;
//! - that committer waits for nothing: while it is idle it counts as
//!   quiesced, a transaction of it in flight holds the reclaim back, and
//!   its next section gives up, unused, every block of the dead owner's
//!   chunks it holds or frees until the id is forgotten (`txn::quiesce`);
//! - the next holder of the id hands out the reclaimed blocks before it
//!   takes a chunk, and no two objects ever share a block.

mod common;

use std::collections::HashSet;

use common::{bump_all, crash_after, is_crash, marks, next_chunk, spread, Cluster};
use fabric::{Batch, GlobalAddr};
use txn::{Announced, ChunkTag, OwnerRange, ReclaimView};

const DEAD: u16 = 1;
const OTHER: u16 = 2;
const REPAIRER: u16 = 3;

/// The data block each of `metas` names now, on the primary.
async fn blocks_of(cluster: &Cluster, metas: &[GlobalAddr]) -> Vec<u64> {
    let mut f = cluster.fabric.fork();
    let mut out = Vec::new();
    for &m in metas {
        let mut b = Batch::new();
        let h = b.read(m.add(txn::DPTR_OFFSET), 8);
        f.execute(&mut b).await.unwrap();
        out.push(txn::DataPtr::from_raw(common::word(b.read_result(h).unwrap(), 0)).offset());
    }
    out
}

async fn tags(cluster: &Cluster) -> Vec<ChunkTag> {
    cluster
        .heap
        .owner_table_of(&mut cluster.fabric.fork())
        .await
        .unwrap()
}

/// Every block in `owner`'s slabs.
fn slab_blocks(cluster: &Cluster, tags: &[ChunkTag], owner: u16) -> HashSet<u64> {
    let heap = cluster.heap;
    let mut all = HashSet::new();
    for (c, t) in tags.iter().enumerate() {
        if let (Some(o), Some(b)) = (t.owner(), t.block_bytes()) {
            if o == owner {
                let base = heap.chunk_offset(c as u64);
                all.extend((0..(heap.chunk_bytes() / b).max(1)).map(|k| base + k * b));
            }
        }
    }
    all
}

/// The blocks of the runs a reclaim left for `owner`, in list order.
async fn runs_of(cluster: &Cluster, owner: u16, tags: &[ChunkTag]) -> Vec<u64> {
    let heap = cluster.heap;
    let runs = heap.runs_of(&mut cluster.fabric.fork(), owner).await.unwrap();
    let mut out = Vec::new();
    for (at, blocks) in runs {
        let block = tags[heap.chunk_of(at).unwrap() as usize].block_bytes().unwrap();
        out.extend((0..blocks).map(|k| at + k * block));
    }
    out
}

#[tokio::test]
async fn a_dead_owners_unreferenced_blocks_go_to_the_next_holder_of_its_id() {
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts_of(DEAD, &[100; 60]).await;
        let mut dead = cluster.client(DEAD);
        // The dead owner's own commits: blocks in its lost free list.
        for _ in 0..3 {
            bump_all(&mut dead, &objs[..10]).await.unwrap();
        }
        // Another owner replaces 40 of its blocks and keeps them for reuse.
        let view = ReclaimView::new();
        let mut other = cluster.client(OTHER);
        other.follow_reclaims(view.clone());
        bump_all(&mut other, &objs[20..]).await.unwrap();
        let table = tags(&cluster).await;
        let in_dead_chunks = |blocks: Vec<u64>| {
            blocks
                .into_iter()
                .filter(|&b| table[cluster.heap.chunk_of(b).unwrap() as usize].owner() == Some(DEAD))
                .collect::<HashSet<u64>>()
        };
        let held = in_dead_chunks(other.free_blocks());
        assert_eq!(held.len(), 40, "rf {rf}: a committer keeps what it replaced");

        // The owner dies in a commit, after its new blocks were written.
        let (mut crashing, _) = cluster.faulty(DEAD, crash_after(marks(2, u64::from(rf), true).rt1));
        let e = spread(&mut crashing, objs[5..7].to_vec()).await.unwrap_err();
        assert!(is_crash(&e), "{e:?}");
        drop((dead, crashing));
        let mut repairer = cluster.skewed(REPAIRER);
        repairer.finish_owner_log(DEAD).await.unwrap();

        // The control plane announces the dead owner's id at reclaim
        // sequence 1 while a transaction of the other owner is in flight,
        // pinned by its first allocation (a created object): that one
        // holds the reclaim back, and what it frees of the dead owner's
        // chunks is kept for now (it was pinned before it knew). It
        // allocates 6 of the 40 it holds, and frees 5 others.
        let dead = OwnerRange {
            first: DEAD,
            count: 1,
        };
        let mut tx = other.begin();
        let created = tx.create(&7u64).await.unwrap();
        view.update(1, &[Announced { owners: dead, seq: 1 }]);
        assert_eq!(
            view.quiesced(),
            0,
            "rf {rf}: a section began before the announcement"
        );
        for &o in &objs[..5] {
            let v = tx.read(o).await.unwrap();
            tx.write(o, &(v + 1)).await.unwrap();
        }
        tx.commit().await.unwrap();
        assert_eq!(view.quiesced(), 1, "rf {rf}: idle, it counts as quiesced");
        let held = in_dead_chunks(other.free_blocks());
        assert_eq!(held.len(), 39, "rf {rf}");

        let metas: Vec<GlobalAddr> = objs.iter().map(|o| o.meta()).chain([created.meta()]).collect();
        let before = blocks_of(&cluster, &metas).await;
        let table = tags(&cluster).await;
        let slabs = slab_blocks(&cluster, &table, DEAD);
        let referenced: HashSet<u64> = before.iter().copied().filter(|b| slabs.contains(b)).collect();

        let report = cluster
            .heap
            .reclaim(&mut cluster.fabric.fork(), DEAD)
            .await
            .unwrap();
        assert_eq!(
            report.blocks_referenced,
            referenced.len() as u64,
            "rf {rf}: {report:?}"
        );
        assert_eq!(
            report.blocks_free,
            (slabs.len() - referenced.len()) as u64,
            "rf {rf}: every other block of its slabs is free: {report:?}"
        );
        let runs = runs_of(&cluster, DEAD, &table).await;
        let free: HashSet<u64> = runs.iter().copied().collect();
        assert_eq!(free.len(), runs.len(), "rf {rf}: no block in two runs");
        assert_eq!(free.len() as u64, report.blocks_free);
        assert!(
            free.is_disjoint(&referenced),
            "rf {rf}: no referenced block reclaimed"
        );

        assert!(
            held.is_subset(&free),
            "rf {rf}: what the committer held was found free"
        );

        // Its next section catches up before it allocates: all 39 are given
        // up, and so is every block of the dead owner's chunks it unlinks
        // while the id stays announced (5 more, referenced at the scan).
        bump_all(&mut other, &objs[5..10]).await.unwrap();
        assert_eq!(other.stats().blocks_doomed, 44, "rf {rf}");
        assert!(
            in_dead_chunks(other.free_blocks()).is_empty(),
            "rf {rf}: no block of the dead owner's chunks is kept"
        );
        // The control plane forgets the client (sequence 2): the id's
        // chunks are its next holder's, and a commit that begins now may
        // keep what it replaces there again.
        view.update(2, &[]);
        bump_all(&mut other, &objs[10..12]).await.unwrap();
        assert_eq!(other.stats().blocks_doomed, 44, "rf {rf}");
        let kept = in_dead_chunks(other.free_blocks());
        assert_eq!(
            kept.len(),
            2,
            "rf {rf}: blocks referenced at the scan, replaced after"
        );
        assert!(kept.is_disjoint(&free), "rf {rf}");
        let before = blocks_of(&cluster, &metas).await;

        // The next holder of the id hands out the reclaimed blocks first,
        // each once, before it takes a chunk.
        let chunks = next_chunk(&cluster).await;
        let mut next = cluster.client(DEAD);
        let mut fresh = Vec::new();
        for i in 0..free.len() {
            fresh.push(next.create(&(1000 + i as u64)).await.unwrap());
        }
        let fresh_metas: Vec<GlobalAddr> = fresh.iter().map(|o| o.meta()).collect();
        let handed: Vec<u64> = blocks_of(&cluster, &fresh_metas).await;
        let handed_set: HashSet<u64> = handed.iter().copied().collect();
        assert_eq!(
            handed_set, free,
            "rf {rf}: exactly the reclaimed blocks, each once"
        );
        assert_eq!(next.stats().blocks_adopted, report.blocks_free, "rf {rf}");
        // Metas come from a chunk of their own; no data chunk was taken.
        let taken = next_chunk(&cluster).await - chunks;
        let new_tags = tags(&cluster).await;
        let data_taken = (chunks..chunks + taken)
            .filter(|&c| new_tags[c as usize].block_bytes().is_some())
            .count();
        assert_eq!(data_taken, 0, "rf {rf}");

        // Everything still reads what was committed, and no two objects
        // share a block.
        let after = blocks_of(&cluster, &metas).await;
        assert_eq!(after, before, "rf {rf}");
        let all: HashSet<u64> = after.iter().chain(&handed).copied().collect();
        assert_eq!(
            all.len(),
            after.len() + handed.len(),
            "rf {rf}: a block named twice"
        );
        let mut expected = vec![100u64; 60];
        for v in &mut expected[..10] {
            *v += 3;
        }
        for v in &mut expected[20..] {
            *v += 1;
        }
        for v in &mut expected[..12] {
            *v += 1;
        }
        assert!(
            free.iter().all(|b| !other.free_blocks().contains(b)),
            "rf {rf}: the committer holds none of the handed blocks"
        );
        assert_eq!(cluster.read_all(REPAIRER, &objs).await, expected, "rf {rf}");
        for (i, &o) in fresh.iter().enumerate().step_by(97) {
            assert_eq!(cluster.replicated_value(o).await, 1000 + i as u64, "rf {rf}");
        }
    }
}

/// A commit cut off after its DOING log was written leaves a log that may
/// name a block its section allocated: the pin outlives the section until
/// the log is settled, so a reclaim announced meanwhile waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_log_holds_quiescence_back_until_it_is_settled() {
    let rf = 2u16;
    let m = marks(2, u64::from(rf), true);
    let cluster = Cluster::new_tcp(rf).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let view = ReclaimView::new();
    let (mut c, _faults) = cluster.faulty(
        OTHER,
        fabric::FaultPlan {
            drop_after_verbs: Some(m.rt3),
            ..fabric::FaultPlan::default()
        },
    );
    c.follow_reclaims(view.clone());
    let cut = spread(&mut c, objs.clone()).await;
    assert!(cut.is_err(), "cut off after its DOING header: {cut:?}");
    assert!(c.log_open());
    let dead = Announced {
        owners: OwnerRange {
            first: DEAD,
            count: 1,
        },
        seq: 1,
    };
    view.update(1, &[dead]);
    assert_eq!(view.quiesced(), 0, "the open log keeps its section's pin");
    // The next commit settles the log first; its section then ends unpinned.
    spread(&mut c, objs.clone()).await.unwrap();
    assert!(!c.log_open());
    assert_eq!(view.quiesced(), 1);
}
