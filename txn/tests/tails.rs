//! Chunk tails (`txn::tails`): the next holder of an owner id carves the
//! unwritten ends of the meta and sealed chunks its earlier holders took,
//! lowest first, before it takes a chunk; never a byte an earlier holder
//! wrote on any replica, never a chunk of another id, never a block longer
//! than half a chunk (those get raw chunks of their own).

mod common;

use common::{next_chunk, Cluster};
use fabric::{Batch, Client, GlobalAddr, Replica};
use txn::{BlockAllocator, ChunkKind, META_BYTES};

const HOLDER: u16 = 4;
const OTHER: u16 = 5;

/// Writes `len` bytes at `at` on `on`, ending in a nonzero word (a sealed
/// block, or a meta naming its data).
async fn fill(f: &mut Client, at: u64, len: u64, on: Replica) {
    let mut bytes = vec![0u8; len as usize];
    bytes[len as usize - 8] = 0x5a;
    let mut b = Batch::new();
    let h = b.on(on).write(GlobalAddr::new(common::REGION, at), &bytes);
    f.execute(&mut b).await.unwrap();
    b.done(h).unwrap();
}

/// The chunk holding `offset`, and its kind.
async fn chunk_kind(cluster: &Cluster, offset: u64) -> (u64, Option<ChunkKind>) {
    let tags = cluster
        .heap
        .owner_table_of(&mut cluster.fabric.fork())
        .await
        .unwrap();
    let c = cluster.heap.chunk_of(offset).unwrap();
    (c, tags[c as usize].kind())
}

#[tokio::test]
async fn the_next_holder_carves_the_sealed_tails_its_predecessors_left() {
    for rf in [1, 2] {
        let cluster = Cluster::new(rf).await;
        let heap = cluster.heap;
        let chunk = heap.chunk_bytes();
        let mut f = cluster.fabric.fork();

        // The predecessor fills most of a chunk, moves to a second one for a
        // block that does not fit, writes the start of it, and dies with
        // blocks allocated after its last write.
        let mut dead = BlockAllocator::raw(heap, HOLDER);
        let big = chunk / 2 - 4096;
        let a = dead.sealed(&mut f, big as u32).await.unwrap();
        let b = dead.sealed(&mut f, big as u32).await.unwrap();
        let c = dead.sealed(&mut f, chunk as u32 / 2).await.unwrap();
        assert_eq!((b, heap.chunk_of(c)), (a + big, heap.chunk_of(a).map(|x| x + 1)));
        fill(&mut f, a, big, Replica::All).await;
        fill(&mut f, b, big, Replica::All).await;
        fill(&mut f, c, chunk / 2, Replica::All).await;
        let kvs: Vec<u64> = {
            let mut v = Vec::new();
            for _ in 0..6 {
                v.push(dead.sealed(&mut f, 24).await.unwrap());
            }
            v
        };
        // Written: the first three everywhere, the fifth on the last replica
        // only (its WRITE reached a backup before its holder died); the
        // fourth and sixth never.
        for &kv in &kvs[..3] {
            fill(&mut f, kv, 24, Replica::All).await;
        }
        let last = if rf == 1 {
            Replica::Primary
        } else {
            Replica::Backup(rf as u8 - 2)
        };
        fill(&mut f, kvs[4], 24, last).await;
        // A block past half a chunk is raw, whatever it holds.
        let large = dead.sealed(&mut f, (chunk / 2 + 8) as u32).await.unwrap();
        assert_eq!(chunk_kind(&cluster, large).await.1, Some(ChunkKind::Raw));
        assert_eq!(chunk_kind(&cluster, a).await.1, Some(ChunkKind::Sealed));
        drop(dead);

        // Another id finds nothing of the holder's.
        let taken = next_chunk(&cluster).await;
        let mut other = BlockAllocator::raw(heap, OTHER);
        let o = other.sealed(&mut f, 24).await.unwrap();
        assert_eq!(heap.chunk_of(o), Some(taken));
        assert_eq!(other.counts().tail_bytes_adopted, 0);

        // The heir carves the first chunk's end, then the second's past the
        // fifth block, then takes a chunk.
        let taken = next_chunk(&cluster).await;
        let mut heir = BlockAllocator::raw(heap, HOLDER);
        let first_end = heap.chunk_offset(heap.chunk_of(a).unwrap()) + chunk;
        let second_end = heap.chunk_offset(heap.chunk_of(c).unwrap()) + chunk;
        let mut expect: Vec<u64> = (0..(first_end - (b + big)) / 24)
            .map(|k| b + big + k * 24)
            .collect();
        expect.extend((0..(second_end - (kvs[4] + 24)) / 24).map(|k| kvs[4] + 24 + k * 24));
        for (i, &want) in expect.iter().enumerate() {
            let got = heir.sealed(&mut f, 24).await.unwrap();
            assert_eq!(got, want, "rf {rf}: block {i} of the heir");
        }
        assert_eq!(next_chunk(&cluster).await, taken, "rf {rf}: no chunk taken");
        assert_eq!(
            heir.counts().tail_bytes_adopted,
            (first_end - (b + big)) + (second_end - (kvs[4] + 24))
        );
        let fresh = heir.sealed(&mut f, 24).await.unwrap();
        assert_eq!(
            chunk_kind(&cluster, fresh).await,
            (taken, Some(ChunkKind::Sealed))
        );
    }
}

#[tokio::test]
async fn the_next_holder_carves_the_meta_tail_its_predecessor_left() {
    for rf in [1, 2] {
        let cluster = Cluster::new(rf).await;
        let heap = cluster.heap;
        let mut f = cluster.fabric.fork();

        let mut dead = BlockAllocator::new(heap, HOLDER);
        let mut metas = Vec::new();
        for _ in 0..5 {
            metas.push(dead.meta(&mut f).await.unwrap().offset());
        }
        // Metas 0 and 2 written, 1, 3 and 4 never: 1 is lost, 3 and 4 are
        // the heir's.
        fill(&mut f, metas[0], META_BYTES, Replica::All).await;
        fill(&mut f, metas[2], META_BYTES, Replica::All).await;
        drop(dead);

        let taken = next_chunk(&cluster).await;
        let mut heir = BlockAllocator::new(heap, HOLDER);
        assert_eq!(heir.meta(&mut f).await.unwrap().offset(), metas[3]);
        assert_eq!(heir.meta(&mut f).await.unwrap().offset(), metas[4]);
        assert_eq!(next_chunk(&cluster).await, taken, "rf {rf}");
        let end = heap.chunk_offset(heap.chunk_of(metas[0]).unwrap()) + heap.chunk_bytes();
        assert_eq!(heir.counts().tail_bytes_adopted, end - metas[3]);
    }
}

#[tokio::test]
async fn a_full_chunk_whose_last_block_reached_one_replica_has_no_tail() {
    for rf in [1, 2] {
        let cluster = Cluster::new(rf).await;
        let heap = cluster.heap;
        let mut f = cluster.fabric.fork();
        let mut dead = BlockAllocator::raw(heap, HOLDER);
        let blocks = heap.chunk_bytes() / 24;
        let first = dead.sealed(&mut f, 24).await.unwrap();
        for _ in 1..blocks {
            dead.sealed(&mut f, 24).await.unwrap();
        }
        let last = first + (blocks - 1) * 24;
        fill(&mut f, first, last - first, Replica::All).await;
        let on = if rf == 1 {
            Replica::Primary
        } else {
            Replica::Backup(0)
        };
        fill(&mut f, last, 24, on).await;
        drop(dead);

        // The chunk's end, found by the probe alone, is shorter than a block.
        let taken = next_chunk(&cluster).await;
        let mut heir = BlockAllocator::raw(heap, HOLDER);
        let kv = heir.sealed(&mut f, 24).await.unwrap();
        assert_eq!(heap.chunk_of(kv), Some(taken), "rf {rf}");
        assert_eq!(
            heir.counts().tail_bytes_adopted,
            heap.chunk_bytes() - (last + 24 - first)
        );
    }
}
