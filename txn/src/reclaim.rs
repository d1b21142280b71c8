//! Leak repair (the rTX paper's §4.4): the data blocks of a dead owner that
//! no object references come back, before its owner id is another's.
//!
//! Three rules make "unreferenced" mean "free" (`docs/recovery.md`, "Leak
//! repair"):
//!
//! 1. **Data chunks are slabs** of one block size (`ChunkKind::Data`), and
//!    only metas' data pointers name their blocks: a scan of every meta
//!    chunk finds every referenced block, and the rest of a dead owner's
//!    data chunks is unreferenced.
//! 2. **Nobody links a block of the dead owner's chunks any more.** Its logs
//!    are finished and it is fenced, so only other clients' reuse could: a
//!    committer keeps the blocks it replaced, wherever they lie. The
//!    reclaim waits until every live client has quiesced to the owner's
//!    announcement (`crate::quiesce`): from then on each drops, unused,
//!    what it held or frees of the owner's chunks. So the referenced set
//!    of those chunks only shrinks, and a scan that is not a snapshot is
//!    still exact for what it calls free.
//! 3. **The next holder of the id takes what the reclaim found**, only
//!    after it (the control plane frees the id once the reclaim returned).
//!
//! A reclaim leaves the free blocks as *runs* (consecutive free blocks of
//! one chunk) linked through their first words ([`RunLink`]), and the first
//! run's offset in the owner id's runs head. The next holder of the id takes
//! the list (reads the head and zeroes it in one batch) and pops runs as it
//! needs blocks (`alloc.rs`). A holder that dies with runs unpopped loses
//! nothing: its own reclaim finds them free again.

use std::collections::HashSet;

use fabric::{Batch, Client, GlobalAddr, Replica};

use crate::error::TxError;
use crate::heap::{ChunkKind, ChunkTag, Heap};
use crate::obj::META_BYTES;
use crate::word::OwnerId;
use fabric::le_word;

/// Verbs a reclaim puts in one batch when it writes run links: far below
/// `fabric::VERBS_PER_BATCH_MAX` even with every replica's copy.
const LINKS_PER_BATCH_MAX: usize = 256;

/// The first word of a reclaimed run, the one definition of its layout:
///
/// ```text
///  63                                  16 15               0
/// +--------------------------------------+------------------+
/// |  next run's offset (0: last run)     |  blocks in run   |
/// +--------------------------------------+------------------+
/// ```
///
/// The block size is the run's chunk's (its tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLink(u64);

impl RunLink {
    /// Most blocks one run names.
    pub const BLOCKS_MAX: u64 = u16::MAX as u64;

    /// A link to `next` (0: none) from a run of `blocks` blocks.
    ///
    /// # Panics
    /// If `blocks` is 0 or past [`RunLink::BLOCKS_MAX`], or `next` past 48 bits.
    pub fn new(next: u64, blocks: u64) -> Self {
        assert!(
            (1..=Self::BLOCKS_MAX).contains(&blocks),
            "a run of {blocks} blocks"
        );
        assert!(next < 1 << 48, "run offset {next} past 48 bits");
        RunLink((next << 16) | blocks)
    }

    /// A stored word.
    pub fn from_raw(raw: u64) -> Self {
        RunLink(raw)
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The next run's offset, if any.
    pub fn next(self) -> Option<u64> {
        let next = self.0 >> 16;
        (next != 0).then_some(next)
    }

    /// Blocks in this run.
    pub fn blocks(self) -> u64 {
        self.0 & 0xFFFF
    }
}

/// What a reclaim found and left for the next holder of the owner id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Data chunks (slabs) of the owner that were scanned.
    pub data_chunks: u64,
    /// Their blocks that a meta names: kept.
    pub blocks_referenced: u64,
    /// Their blocks that none names: left as runs for the next holder.
    pub blocks_free: u64,
    /// Bytes of those free blocks.
    pub bytes_free: u64,
    /// Runs they were linked into.
    pub runs: u64,
    /// Nothing was reclaimed: the heap holds retired blocks (a hash
    /// table's subtables, `Heap::mark_retiring`), which look free and are
    /// not.
    pub skipped: bool,
}

/// A block slot in a slab: where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    start: u64,
    blocks: u64,
}

impl Heap {
    /// Reclaims the data blocks of dead owner `owner` that no meta names.
    ///
    /// Not in a heap whose blocks may be retired ([`Heap::mark_retiring`]):
    /// that one is left as it is, and the report says `skipped`.
    ///
    /// The caller guarantees that `owner` holds nothing any more (its logs
    /// are finished, anything it sent has landed: its quarantine is over),
    /// that every live client has quiesced to its announcement (rule 2),
    /// and that no process uses its id until this has returned. Idempotent: a
    /// reclaim cut off is run again whole (it rewrites every link and the
    /// head last; the runs of a cut-off one are never read).
    pub async fn reclaim(&self, client: &mut Client, owner: OwnerId) -> Result<Reclaimed, TxError> {
        self.reclaim_all(client, &[owner]).await
    }

    /// [`Heap::reclaim`] for every id of `owners` (a dead client's), with
    /// one scan of the metas for all of them; the report sums over them.
    pub async fn reclaim_all(&self, client: &mut Client, owners: &[OwnerId]) -> Result<Reclaimed, TxError> {
        if self.retires(client).await? {
            tracing::debug!(
                region = self.region(),
                ?owners,
                "a heap with retired blocks is not reclaimed"
            );
            return Ok(Reclaimed {
                skipped: true,
                ..Reclaimed::default()
            });
        }
        let tags = self.owner_table_of(client).await?;
        let theirs = |c: u64| {
            tags.get(c as usize)
                .and_then(|t| t.owner())
                .is_some_and(|o| owners.contains(&o))
        };
        let referenced = self.referenced_in(client, &tags, &theirs).await?;
        let mut report = Reclaimed::default();
        for &owner in owners {
            let runs = self.free_runs(&tags, owner, &referenced, &mut report);
            self.link_runs(client, owner, &runs).await?;
            report.runs += runs.len() as u64;
        }
        tracing::info!(
            region = self.region(),
            ?owners,
            chunks = report.data_chunks,
            referenced = report.blocks_referenced,
            free = report.blocks_free,
            bytes_free = report.bytes_free,
            runs = report.runs,
            "reclaimed a dead client's free blocks"
        );
        Ok(report)
    }

    /// The runs a reclaim left for `owner` that no holder of the id has
    /// taken yet, as (first block's offset, blocks), in list order; the
    /// block size is the chunk's (for checkers and operators).
    pub async fn runs_of(&self, client: &mut Client, owner: OwnerId) -> Result<Vec<(u64, u64)>, TxError> {
        let mut batch = Batch::new();
        let h = batch.read(self.runs_head(owner), 8);
        client.execute(&mut batch).await?;
        let mut at = le_word(batch.read_result(h).map_err(TxError::Verb)?, 0);
        let mut runs = Vec::new();
        while at != 0 {
            if self.chunk_of(at).is_none() || runs.len() as u64 > self.chunk_count() * self.chunk_bytes() / 8
            {
                return Err(TxError::Heap(format!(
                    "owner {owner}'s runs list is corrupt at {at}"
                )));
            }
            batch.clear();
            let h = batch.read(GlobalAddr::new(self.region(), at), 8);
            client.execute(&mut batch).await?;
            let link = RunLink::from_raw(le_word(batch.read_result(h).map_err(TxError::Verb)?, 0));
            runs.push((at, link.blocks()));
            at = link.next().unwrap_or(0);
        }
        Ok(runs)
    }

    /// The offsets of blocks in `mine` chunks that a meta's data pointer
    /// names, from every meta chunk on every replica: a repair moves the
    /// primary's pointer to a copy before the backups', and a backup that
    /// still names the old block may be promoted before it moves.
    async fn referenced_in(
        &self,
        client: &mut Client,
        tags: &[ChunkTag],
        mine: &impl Fn(u64) -> bool,
    ) -> Result<HashSet<u64>, TxError> {
        let mut referenced = HashSet::new();
        let metas: Vec<u64> = (0..tags.len() as u64)
            .filter(|&c| tags[c as usize].kind() == Some(ChunkKind::Metas))
            .collect();
        for c in metas {
            let at = GlobalAddr::new(self.region(), self.chunk_offset(c));
            for copy in client.read_range(at, self.chunk_bytes(), Replica::All).await? {
                for meta in copy.chunks_exact(META_BYTES as usize) {
                    let dptr = crate::word::DataPtr::from_raw(le_word(meta, 8));
                    if dptr.raw() != 0 && self.chunk_of(dptr.offset()).is_some_and(mine) {
                        referenced.insert(dptr.offset());
                    }
                }
            }
        }
        Ok(referenced)
    }

    /// The runs of free blocks in `owner`'s slabs, counting into `report`.
    fn free_runs(
        &self,
        tags: &[ChunkTag],
        owner: OwnerId,
        referenced: &HashSet<u64>,
        report: &mut Reclaimed,
    ) -> Vec<Run> {
        let mut runs = Vec::new();
        for (c, tag) in tags.iter().enumerate() {
            let Some(block_bytes) = tag.block_bytes().filter(|_| tag.owner() == Some(owner)) else {
                continue;
            };
            report.data_chunks += 1;
            let base = self.chunk_offset(c as u64);
            // A block longer than a chunk is the slab's only block.
            let blocks = (self.chunk_bytes() / block_bytes).max(1);
            let mut run: Option<Run> = None;
            for k in 0..blocks {
                let at = base + k * block_bytes;
                if referenced.contains(&at) {
                    report.blocks_referenced += 1;
                    runs.extend(run.take());
                    continue;
                }
                report.blocks_free += 1;
                report.bytes_free += block_bytes;
                match &mut run {
                    Some(r) if r.blocks < RunLink::BLOCKS_MAX => r.blocks += 1,
                    _ => {
                        runs.extend(run.take());
                        run = Some(Run { start: at, blocks: 1 });
                    }
                }
            }
            runs.extend(run);
        }
        runs
    }

    /// Links `runs` through their first words on every replica, then
    /// points `owner`'s runs head at the first (0 if none).
    async fn link_runs(&self, client: &mut Client, owner: OwnerId, runs: &[Run]) -> Result<(), TxError> {
        let mut batch = Batch::new();
        for (i, piece) in runs.chunks(LINKS_PER_BATCH_MAX).enumerate() {
            batch.clear();
            let base = i * LINKS_PER_BATCH_MAX;
            let writes: Vec<_> = piece
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    let next = runs.get(base + j + 1).map_or(0, |n| n.start);
                    let link = RunLink::new(next, r.blocks).raw();
                    batch
                        .on(Replica::All)
                        .write(GlobalAddr::new(self.region(), r.start), &link.to_le_bytes())
                })
                .collect();
            client.execute(&mut batch).await?;
            for h in writes {
                batch.done(h).map_err(TxError::Verb)?;
            }
        }
        let head = runs.first().map_or(0, |r| r.start);
        batch.clear();
        let h = batch
            .on(Replica::All)
            .write(self.runs_head(owner), &head.to_le_bytes());
        client.execute(&mut batch).await?;
        batch.done(h).map_err(TxError::Verb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_link_encoding_is_bit_exact() {
        let last = RunLink::new(0, 1);
        assert_eq!(last.raw(), 1);
        assert_eq!((last.next(), last.blocks()), (None, 1));
        let l = RunLink::new(0x12_3400, RunLink::BLOCKS_MAX);
        assert_eq!(l.raw(), 0x12_3400 << 16 | 0xFFFF);
        assert_eq!((l.next(), l.blocks()), (Some(0x12_3400), 0xFFFF));
    }
}
