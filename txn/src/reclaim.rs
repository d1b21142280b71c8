//! Leak repair (the rTX paper's §4.4): the data blocks of a dead owner that
//! no object references come back, before its owner id is another's.
//!
//! Three rules make "unreferenced" mean "free" (`docs/recovery.md`, "Leak
//! repair"):
//!
//! 1. **A block is reused only by the owner of its chunk.** A commit that
//!    replaces a block in another owner's chunk hands it to that owner's
//!    *bag* (a CAS into one of [`BAG_SLOTS`] words, batched), and the owner
//!    drains its bag before it takes a chunk. So no live client holds a
//!    block of a dead owner's chunk.
//! 2. **Data chunks are slabs** of one block size (`ChunkKind::Data`), and
//!    only metas' data pointers name their blocks: a scan of every meta
//!    chunk finds every referenced block, and the rest of a dead owner's
//!    data chunks is free.
//! 3. **A bag has a generation**, and a reclaim bumps it after its scan. A
//!    committer reads the generation of a block's owner before the CAS that
//!    unlinks the block, and its bag CAS expects that generation. A block
//!    unlinked before the scan read its meta is free in the scan (and
//!    reclaimed); its owner's generation was bumped since the committer
//!    read it, so the committer's bag CAS fails and it drops the block. A
//!    block in the bag under the new generation was unlinked after the bump,
//!    hence after the scan: the scan saw it referenced and did not reclaim
//!    it. No block is handed out twice. (A block unlinked between the scan's
//!    read of its meta and the bump is dropped by its committer and
//!    reclaimed by nobody: a leak of at most one block per commit racing a
//!    reclaim, counted in [`TxStats::blocks_dropped`](crate::TxStats).)
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

/// Words in each owner id's bag. The owner drains it before each chunk it
/// takes (every 64 blocks of 1 KiB in a 64 KiB chunk), so 64 slots hold what
/// other committers free into it meanwhile at about one foreign block per
/// own allocation; a committer that finds the bag full keeps the block
/// pending and tries again later (`alloc.rs`).
pub const BAG_SLOTS: u64 = 64;

/// Verbs a reclaim puts in one batch when it writes run links: far below
/// `fabric::VERBS_PER_BATCH_MAX` even with every replica's copy.
const LINKS_PER_BATCH_MAX: usize = 256;

/// Rounds a reclaim tries to move every bag slot to the new generation. A
/// slot's CAS fails only if a committer filled it meanwhile under the old
/// generation, which happens at most once per slot (a full slot takes no
/// CAS that expects it empty), so three rounds always suffice.
const BUMP_ROUNDS_MAX: usize = 3;

/// One bag word, the one definition of its layout:
///
/// ```text
///  63          48 47                                   0
/// +--------------+--------------------------------------+
/// |  generation  |  block offset / 8  (0 = empty slot)  |
/// +--------------+--------------------------------------+
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BagWord(u64);

impl BagWord {
    const OFFSET_MASK: u64 = (1 << 48) - 1;

    /// An empty slot of generation `gen`.
    pub fn empty(gen: u16) -> Self {
        BagWord(u64::from(gen) << 48)
    }

    /// A slot of generation `gen` holding the block at `offset`.
    ///
    /// # Panics
    /// If `offset` is 0, not 8-aligned or past 51 bits (blocks lie inside a
    /// heap's chunks, all past its header).
    pub fn holding(gen: u16, offset: u64) -> Self {
        assert!(
            offset != 0 && offset % 8 == 0 && offset / 8 <= Self::OFFSET_MASK,
            "block offset {offset} has no bag word"
        );
        BagWord((u64::from(gen) << 48) | (offset / 8))
    }

    /// A stored word.
    pub fn from_raw(raw: u64) -> Self {
        BagWord(raw)
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Its generation.
    pub fn gen(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// The block it holds, if any.
    pub fn block(self) -> Option<u64> {
        let words = self.0 & Self::OFFSET_MASK;
        (words != 0).then_some(words * 8)
    }
}

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
    /// The generation the owner's bag now has.
    pub bag_gen: u16,
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
    /// The caller guarantees that `owner` holds nothing any more: its logs
    /// are finished, anything it sent has landed (its quarantine is over),
    /// and no process uses its id until this has returned. Idempotent: a
    /// reclaim cut off is run again whole (it rewrites every link and the
    /// head last; the runs of a cut-off one are never read).
    pub async fn reclaim(&self, client: &mut Client, owner: OwnerId) -> Result<Reclaimed, TxError> {
        if self.retires(client).await? {
            tracing::debug!(
                region = self.region(),
                owner,
                "a heap with retired blocks is not reclaimed"
            );
            return Ok(Reclaimed {
                skipped: true,
                ..Reclaimed::default()
            });
        }
        let tags = self.owner_table_of(client).await?;
        let mine = |c: u64| tags.get(c as usize).is_some_and(|t| t.owner() == Some(owner));
        // Scan before the bump (rule 3).
        let referenced = self.referenced_in(client, &tags, &mine).await?;
        let bag_gen = self.bump_bag(client, owner).await?;
        let mut report = Reclaimed {
            bag_gen,
            ..Reclaimed::default()
        };
        let runs = self.free_runs(&tags, owner, &referenced, &mut report);
        self.link_runs(client, owner, &runs).await?;
        report.runs = runs.len() as u64;
        tracing::info!(
            region = self.region(),
            owner,
            chunks = report.data_chunks,
            referenced = report.blocks_referenced,
            free = report.blocks_free,
            bytes_free = report.bytes_free,
            runs = report.runs,
            "reclaimed a dead owner's free blocks"
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
        let mut at = word_at(batch.read_result(h).map_err(TxError::Verb)?);
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
            let link = RunLink::from_raw(word_at(batch.read_result(h).map_err(TxError::Verb)?));
            runs.push((at, link.blocks()));
            at = link.next().unwrap_or(0);
        }
        Ok(runs)
    }

    /// `owner`'s bag generation: the number of reclaims of the id (modulo
    /// 2^16), on the primary.
    pub async fn bag_generation(&self, client: &mut Client, owner: OwnerId) -> Result<u16, TxError> {
        let mut batch = Batch::new();
        let h = batch.read(self.bag_gen(owner), 8);
        client.execute(&mut batch).await?;
        Ok(word_at(batch.read_result(h).map_err(TxError::Verb)?) as u16)
    }

    /// The offsets of blocks in `mine` chunks that a meta's data pointer
    /// names, from every meta chunk on the primary.
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
            let bytes = client
                .read_range(at, self.chunk_bytes(), Replica::Primary)
                .await?;
            for meta in bytes[0].chunks_exact(META_BYTES as usize) {
                let dptr = crate::word::DataPtr::from_raw(word_at(&meta[8..16]));
                if dptr.raw() != 0 && self.chunk_of(dptr.offset()).is_some_and(mine) {
                    referenced.insert(dptr.offset());
                }
            }
        }
        Ok(referenced)
    }

    /// Moves `owner`'s bag to the next generation: its generation word on
    /// every replica, then every slot on the primary (a CAS from what it
    /// holds: entries of the old generation are dropped, the scan found
    /// their blocks free), then the backups' slots. Returns the new
    /// generation.
    async fn bump_bag(&self, client: &mut Client, owner: OwnerId) -> Result<u16, TxError> {
        let mut batch = Batch::new();
        let h = batch.read(self.bag_gen(owner), 8);
        client.execute(&mut batch).await?;
        let gen = (word_at(batch.read_result(h).map_err(TxError::Verb)?) as u16).wrapping_add(1);
        batch.clear();
        let h = batch
            .on(Replica::All)
            .write(self.bag_gen(owner), &u64::from(gen).to_le_bytes());
        client.execute(&mut batch).await?;
        batch.done(h).map_err(TxError::Verb)?;
        let bag = self.bag(owner);
        let empty = BagWord::empty(gen).raw();
        for _ in 0..BUMP_ROUNDS_MAX {
            batch.clear();
            let h = batch.read(bag, (BAG_SLOTS * 8) as u32);
            client.execute(&mut batch).await?;
            let slots: Vec<u64> = batch
                .read_result(h)
                .map_err(TxError::Verb)?
                .chunks_exact(8)
                .map(word_at)
                .collect();
            batch.clear();
            let cases: Vec<_> = slots
                .iter()
                .enumerate()
                .filter(|&(_, &v)| BagWord::from_raw(v).gen() != gen)
                .map(|(i, &v)| batch.cas(bag.add(i as u64 * 8), v, empty))
                .collect();
            if cases.is_empty() {
                let replicas = client.map().region(self.region()).map_or(1, |r| r.replicas.len());
                let bytes: Vec<u8> = (0..BAG_SLOTS).flat_map(|_| empty.to_le_bytes()).collect();
                batch.clear();
                let writes: Vec<_> = (1..replicas)
                    .map(|b| batch.on(Replica::Backup(b as u8 - 1)).write(bag, &bytes))
                    .collect();
                if !writes.is_empty() {
                    client.execute(&mut batch).await?;
                    for h in writes {
                        batch.done(h).map_err(TxError::Verb)?;
                    }
                }
                return Ok(gen);
            }
            client.execute(&mut batch).await?;
        }
        Err(TxError::Heap(format!(
            "owner {owner}'s bag did not settle at generation {gen} in {BUMP_ROUNDS_MAX} rounds"
        )))
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

pub(crate) fn word_at(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.get(..8).and_then(|b| b.try_into().ok()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bag_word_encoding_is_bit_exact() {
        assert_eq!(BagWord::empty(0).raw(), 0);
        assert_eq!(BagWord::empty(3).raw(), 3 << 48);
        assert_eq!(BagWord::empty(3).block(), None);
        let w = BagWord::holding(0xFFFF, 0x1000);
        assert_eq!(w.raw(), 0xFFFF << 48 | 0x200);
        assert_eq!((w.gen(), w.block()), (0xFFFF, Some(0x1000)));
        let far = BagWord::holding(1, ((1 << 48) - 1) * 8);
        assert_eq!(far.block(), Some(((1 << 48) - 1) * 8));
        assert_eq!(far.gen(), 1);
    }

    #[test]
    #[should_panic(expected = "has no bag word")]
    fn a_bag_word_cannot_hold_offset_zero() {
        BagWord::holding(1, 0);
    }

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
