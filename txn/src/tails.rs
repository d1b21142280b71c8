//! Chunk tails: the unwritten ends of the meta and sealed chunks an owner
//! id's earlier holders took, which the id's next holder carves before it
//! takes a chunk of its own.
//!
//! A client carves metas and sealed blocks from its open chunk front to
//! back, so a client that dies or leaves strands the rest of that chunk,
//! and a sealed chunk it left for a fresh one strands its end. Nothing
//! names that memory, and only a holder of the same id may carve it. These
//! chunks need no scan of references, unlike data slabs
//! (`crate::reclaim`): the tail is what was never written, and what was
//! written is never reused.
//!
//! Three rules make "zero on every replica past the last nonzero word" mean
//! "never handed to anything that may name it":
//!
//! 1. **The content marks its use.** A meta is written whole and in use it
//!    names its data block (a nonzero pointer). A sealed block ends in a
//!    nonzero word once written (the caller's promise,
//!    [`BlockAllocator::sealed`](crate::BlockAllocator::sealed)), and a
//!    sealed chunk holds whole blocks only. So the last nonzero word of a
//!    chunk, on any replica, lies in its last written meta or block. A
//!    block allocated but not yet written when its holder died lies past it
//!    only if nothing after it was written; nothing names it (a hash slot is
//!    CASed to a block after its WRITE, a meta is linked after its WRITE).
//! 2. **The earlier holder is done.** The control plane gives an id to
//!    another client only after its holder left, or died and its quarantine
//!    is over and its logs are finished (`docs/recovery.md`): whatever it
//!    sent has landed, and no log names a meta it had not written.
//! 3. **One allocator per id and kind.** A holder looks its tails up before
//!    it takes its first chunk of that kind, so every chunk of its id the
//!    lookup finds is an earlier holder's (a transaction client carves metas,
//!    a hash table's own allocator sealed blocks).
//!
//! Lost for good: a block allocated and never written with a written one
//! after it (bounded by the operations its holder had in flight).

use fabric::{Batch, Client, GlobalAddr, Replica};

use crate::error::TxError;
use crate::heap::{ChunkKind, Heap};
use crate::obj::META_BYTES;
use crate::word::OwnerId;

/// Bytes read first at the end of each candidate chunk: a chunk whose end
/// holds a written word is full (or nearly), and that read places its last
/// use; only a chunk with a longer tail is read whole.
const PROBE_BYTES: u64 = 512;

/// Probes in one batch (times the replicas; far below
/// `fabric::VERBS_PER_BATCH_MAX`, and 256 KiB of reads at 4 replicas).
const PROBES_PER_BATCH_MAX: usize = 128;

/// The chunk kinds whose tails a next holder carves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TailKind {
    /// `ChunkKind::Metas`: 16-byte metas.
    Metas,
    /// `ChunkKind::Sealed`: raw blocks ending in a nonzero word.
    Sealed,
}

impl TailKind {
    pub(crate) fn chunk_kind(self) -> ChunkKind {
        match self {
            TailKind::Metas => ChunkKind::Metas,
            TailKind::Sealed => ChunkKind::Sealed,
        }
    }

    /// What a tail's start is rounded up to: the next meta, or the next
    /// aligned block.
    fn grain(self) -> u64 {
        match self {
            TailKind::Metas => META_BYTES,
            TailKind::Sealed => 8,
        }
    }
}

/// The end (exclusive, from the start of `bytes`) of the last nonzero
/// 8-byte word in `bytes`.
fn last_use(bytes: &[u8]) -> Option<u64> {
    bytes
        .chunks_exact(8)
        .rposition(|w| w.iter().any(|&b| b != 0))
        .map(|i| (i as u64 + 1) * 8)
}

impl Heap {
    /// The unwritten tails, as `[start, end)` offsets, of the `kind` chunks
    /// the owner table records for `owner`. The caller is the id's new
    /// holder and has not taken a chunk of `kind` yet (rule 3 above).
    ///
    /// A chunk a replica cannot answer for is left out: a tail not carved
    /// now is found by the id's next holder.
    pub(crate) async fn unwritten_tails(
        &self,
        client: &mut Client,
        owner: OwnerId,
        kind: TailKind,
    ) -> Result<Vec<(u64, u64)>, TxError> {
        let tags = self.owner_table_of(client).await?;
        let chunks: Vec<u64> = (0..tags.len() as u64)
            .filter(|&c| {
                let t = tags[c as usize];
                t.owner() == Some(owner) && t.kind() == Some(kind.chunk_kind())
            })
            .collect();
        let chunk_bytes = self.chunk_bytes();
        let probe = PROBE_BYTES.min(chunk_bytes);
        let mut tails = Vec::new();
        let mut batch = Batch::new();
        for piece in chunks.chunks(PROBES_PER_BATCH_MAX) {
            batch.clear();
            let reads: Vec<_> = piece
                .iter()
                .map(|&c| {
                    let at = GlobalAddr::new(self.region(), self.chunk_offset(c) + chunk_bytes - probe);
                    batch.on(Replica::All).read(at, probe as u32)
                })
                .collect();
            client.execute(&mut batch).await?;
            for (&c, h) in piece.iter().zip(reads) {
                let copies = batch.completions(h).len();
                let mut used = None;
                let mut answered = true;
                for r in 0..copies {
                    match batch.read_result_of(h, r) {
                        Ok(bytes) => used = used.max(last_use(bytes).map(|u| chunk_bytes - probe + u)),
                        Err(_) => answered = false,
                    }
                }
                if !answered {
                    continue;
                }
                if used.is_none() {
                    let at = GlobalAddr::new(self.region(), self.chunk_offset(c));
                    let Ok(whole) = client.read_range(at, chunk_bytes, Replica::All).await else {
                        continue;
                    };
                    used = whole.iter().filter_map(|copy| last_use(copy)).max();
                }
                let start = used.unwrap_or(0).next_multiple_of(kind.grain());
                if start < chunk_bytes {
                    let base = self.chunk_offset(c);
                    tails.push((base + start, base + chunk_bytes));
                }
            }
        }
        Ok(tails)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_use_is_the_end_of_the_last_nonzero_word() {
        assert_eq!(last_use(&[0; 64]), None);
        let mut b = [0u8; 64];
        b[0] = 1;
        assert_eq!(last_use(&b), Some(8));
        b[47] = 1;
        assert_eq!(last_use(&b), Some(48));
        b[63] = 1;
        assert_eq!(last_use(&b), Some(64));
    }
}
