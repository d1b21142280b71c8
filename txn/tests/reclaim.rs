//! Leak repair (`txn::reclaim`, the rTX paper's §4.4): a dead owner's data
//! blocks that no meta names come back to the next holder of its id, and
//! nothing is handed out twice.
//!
//! - a live owner takes back, from its bag, the blocks of its chunks that
//!   other owners' commits replaced (rule 1);
//! - a reclaim after an owner's death finds exactly the blocks of its slabs
//!   that no meta names, among them the blocks of a commit cut off before
//!   it published them, and those in its bag and its lost free list;
//! - a committer's blocks of that owner still waiting for its bag are
//!   dropped, not handed to the next holder (rule 3);
//! - the next holder of the id hands out the reclaimed blocks before it
//!   takes a chunk, and no two objects ever share a block.

mod common;

use std::collections::HashSet;

use common::{bump_all, crash_after, is_crash, marks, spread, Cluster};
use fabric::{Batch, GlobalAddr};
use txn::{ChunkTag, TxClient, TxObj};

const DEAD: u16 = 1;
const OTHER: u16 = 2;
const REPAIRER: u16 = 3;

/// A 1 KiB object: 64 fill a 64 KiB chunk.
type Node = [u64; 128];

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

async fn next_chunk(cluster: &Cluster) -> u64 {
    let mut f = cluster.fabric.fork();
    let mut b = Batch::new();
    let h = b.read(cluster.heap.next_chunk_addr(), 8);
    f.execute(&mut b).await.unwrap();
    common::word(b.read_result(h).unwrap(), 0)
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

async fn create_nodes(c: &mut TxClient, n: usize, first: u64) -> Vec<TxObj<Node>> {
    let mut objs = Vec::new();
    for i in 0..n {
        objs.push(c.create(&[first + i as u64; 128]).await.unwrap());
    }
    objs
}

async fn bump_nodes(c: &mut TxClient, objs: &[TxObj<Node>]) {
    let objs = objs.to_vec();
    c.run(async move |tx| {
        for &o in &objs {
            let mut v = tx.read(o).await?;
            v[0] += 1;
            tx.write(o, &v).await?;
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_live_owner_takes_back_the_blocks_others_replaced_in_its_chunks() {
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let mut owner = cluster.client(DEAD);
        // 64 nodes fill the owner's first slab.
        let objs = create_nodes(&mut owner, 64, 0).await;
        let mut other = cluster.client(OTHER);
        for half in objs.chunks(32) {
            bump_nodes(&mut other, half).await;
        }
        other.hand_back_blocks().await.unwrap();
        assert_eq!(
            other.stats().blocks_handed,
            64,
            "rf {rf}: every replaced block went to its owner"
        );
        assert_eq!(other.stats().blocks_dropped, 0);
        let table = tags(&cluster).await;
        assert!(
            other
                .free_blocks()
                .iter()
                .all(|&b| table[cluster.heap.chunk_of(b).unwrap() as usize].owner() == Some(OTHER)),
            "rf {rf}: a committer keeps only its own chunks' blocks"
        );

        // The owner's slab is full: its next block comes from its bag, and
        // it takes no chunk.
        let chunks = next_chunk(&cluster).await;
        bump_nodes(&mut owner, &objs[..1]).await;
        assert_eq!(next_chunk(&cluster).await, chunks, "rf {rf}: no chunk taken");
        assert_eq!(owner.stats().blocks_drained, 64, "rf {rf}");
        let now = blocks_of(&cluster, &[objs[0].meta()]).await[0];
        let first_slab = cluster.heap.chunk_of(now).unwrap();
        assert_eq!(
            tags(&cluster).await[first_slab as usize].owner(),
            Some(DEAD),
            "rf {rf}: the reused block is the owner's own"
        );
    }
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
        // Another owner replaces 40 of its blocks, hands them to its bag...
        let mut other = cluster.client(OTHER);
        bump_all(&mut other, &objs[20..]).await.unwrap();
        other.hand_back_blocks().await.unwrap();
        assert_eq!(other.stats().blocks_handed, 40, "rf {rf}");
        // ...and 5 more, still pending when the owner is reclaimed.
        bump_all(&mut other, &objs[..5]).await.unwrap();

        // The owner dies in a commit, after its new blocks were written.
        let (mut crashing, _) = cluster.faulty(DEAD, crash_after(marks(2, u64::from(rf), true).rt1));
        let e = spread(&mut crashing, objs[5..7].to_vec()).await.unwrap_err();
        assert!(is_crash(&e), "{e:?}");
        drop((dead, crashing));
        let mut repairer = cluster.skewed(REPAIRER);
        repairer.finish_owner_log(DEAD).await.unwrap();

        let metas: Vec<GlobalAddr> = objs.iter().map(|o| o.meta()).collect();
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

        // The 5 blocks the other owner still held for the dead one were
        // unlinked before the scan: found free, so its bag CASes (under
        // the old generation) must fail and it drops them.
        other.hand_back_blocks().await.unwrap();
        assert_eq!(other.stats().blocks_dropped, 5, "rf {rf}");
        assert_eq!(other.stats().blocks_handed, 40, "rf {rf}");

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
        for v in &mut expected[..5] {
            *v += 1;
        }
        assert_eq!(cluster.read_all(REPAIRER, &objs).await, expected, "rf {rf}");
        for (i, &o) in fresh.iter().enumerate().step_by(97) {
            assert_eq!(cluster.replicated_value(o).await, 1000 + i as u64, "rf {rf}");
        }
    }
}
