//! A client's allocator: carves the chunks it takes from the heap into
//! 16-byte metas and data blocks, and reuses data blocks its commits freed.
//!
//! Reuse is what makes the pointer versions necessary: a freed block may come
//! back as the data of the same object, and only the bumped `ptr_version`
//! (and the lock version) tell the two apart.
//!
//! A transactional allocator ([`BlockAllocator::new`]) keeps the rules that
//! make leak repair sound (`crate::reclaim`): data chunks are slabs of one
//! block size; it reuses only blocks of its own owner id's chunks, and hands
//! a replaced block of another owner's chunk to that owner's bag under the
//! bag generation it read before the block was unlinked; it drains its own
//! bag, and takes the runs a reclaim left for its owner id, before it takes
//! a chunk. An index's own allocator ([`BlockAllocator::raw`]) manages
//! memory the reclaim does not touch.

use std::collections::HashMap;

use fabric::{Batch, Client, GlobalAddr, Replica};

use crate::error::TxError;
use crate::heap::{ChunkKind, ChunkTag, Heap, BLOCK_BYTES_MAX};
use crate::obj::META_BYTES;
use crate::reclaim::{word_at, BagWord, RunLink, BAG_SLOTS};
use crate::word::OwnerId;

/// Data blocks are 8-byte aligned and sized in words, so that every word of a
/// block can be read and CASed.
const BLOCK_ALIGN: u64 = 8;

/// Foreign blocks a committer keeps before it hands them to their owners'
/// bags in one batch: one round trip per this many replaced blocks of other
/// owners' chunks.
const PENDING_FLUSH_AT: usize = 32;

/// Foreign blocks waiting for room in their owners' bags, at most: past it
/// (an owner that stopped allocating, hence draining) the oldest is dropped,
/// left for the reclaim of that owner to find.
const PENDING_MAX: usize = 4096;

/// Bag slots a pending block tries before it is dropped the same way.
const PENDING_TRIES_MAX: u32 = BAG_SLOTS as u32;

/// Verbs one flush puts in a batch.
const FLUSH_BATCH_MAX: usize = 256;

#[derive(Debug, Default)]
struct Bump {
    next: u64,
    end: u64,
}

/// Who gets a block a commit unlinked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// This owner id: its free list.
    Own {
        /// The slab's block size.
        block_bytes: u64,
    },
    /// Another owner id's bag, under the generation read before the unlink.
    Foreign {
        /// The chunk's owner.
        owner: OwnerId,
        /// Its bag generation as this client last read it.
        gen: u16,
    },
    /// Nobody: not in a data chunk (an index's raw memory), or in a chunk
    /// whose tag this client did not read before the unlink. Dropped.
    Unmanaged,
}

/// A block a commit unlinked, and who gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Released {
    pub offset: u64,
    pub holder: Holder,
}

/// The READs of [`BlockAllocator::push_release_reads`].
#[derive(Debug)]
pub(crate) struct ReleaseReads {
    tags: Vec<(u64, fabric::VerbHandle)>,
    gens: fabric::VerbHandle,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    offset: u64,
    owner: OwnerId,
    gen: u16,
    tries: u32,
}

/// What the allocator did with blocks beyond its own bump (for stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocCounts {
    /// Blocks of other owners' chunks handed to their bags.
    pub blocks_handed: u64,
    /// Blocks taken back from this owner's bag.
    pub blocks_drained: u64,
    /// Blocks taken from the runs a reclaim left for this owner id.
    pub blocks_adopted: u64,
    /// Blocks given up (see `crate::reclaim`, rule 3, and [`Holder::Unmanaged`]).
    pub blocks_dropped: u64,
}

/// One owner's allocator.
#[derive(Debug)]
pub struct BlockAllocator {
    heap: Heap,
    owner: OwnerId,
    /// False for an index's own allocator: raw chunks, no bag, no runs.
    transactional: bool,
    metas: Bump,
    /// The open slab of each block size (a raw allocator has one, under 0).
    slabs: HashMap<u64, Bump>,
    free: HashMap<u64, Vec<u64>>,
    /// Chunk tags read or written by this client. A tag never changes once
    /// written (chunks are not given back), so the cache is never stale.
    tags: HashMap<u64, ChunkTag>,
    /// Every owner's bag generation as last read; `None` until first read.
    gens: Option<Vec<u16>>,
    pending: Vec<Pending>,
    cursor: u64,
    /// The next reclaimed run to pop, once the runs head was taken.
    runs_next: Option<u64>,
    runs_taken: bool,
    counts: AllocCounts,
}

impl BlockAllocator {
    /// A transactional allocator for `owner` in `heap`; it takes chunks on
    /// demand.
    pub fn new(heap: Heap, owner: OwnerId) -> Self {
        BlockAllocator {
            heap,
            owner,
            transactional: true,
            metas: Bump::default(),
            slabs: HashMap::new(),
            free: HashMap::new(),
            tags: HashMap::new(),
            gens: None,
            pending: Vec::new(),
            // Committers spread over a bag's slots from different places.
            cursor: u64::from(owner).wrapping_mul(7),
            runs_next: None,
            runs_taken: false,
            counts: AllocCounts::default(),
        }
    }

    /// An allocator of memory an index manages itself (`ChunkKind::Raw`):
    /// blocks of any size back to back, never reclaimed.
    pub fn raw(heap: Heap, owner: OwnerId) -> Self {
        BlockAllocator {
            transactional: false,
            ..BlockAllocator::new(heap, owner)
        }
    }

    fn block_bytes(len: u32) -> u64 {
        u64::from(len).max(1).next_multiple_of(BLOCK_ALIGN)
    }

    /// What it did beyond its own chunks.
    pub fn counts(&self) -> AllocCounts {
        self.counts
    }

    /// A fresh 16-byte meta.
    pub async fn meta(&mut self, client: &mut Client) -> Result<GlobalAddr, TxError> {
        if self.metas.next + META_BYTES > self.metas.end {
            let c = self.take(client, 1, ChunkKind::Metas).await?;
            self.metas.next = self.heap.chunk_offset(c);
            self.metas.end = self.metas.next + self.heap.chunk_bytes();
        }
        let at = self.metas.next;
        self.metas.next += META_BYTES;
        Ok(GlobalAddr::new(self.heap.region(), at))
    }

    async fn take(&mut self, client: &mut Client, count: u64, kind: ChunkKind) -> Result<u64, TxError> {
        let first = self.heap.take_chunks(client, self.owner, count, kind).await?;
        for c in first..first + count {
            let tag = match kind {
                ChunkKind::Data { block_bytes } if block_bytes > self.heap.chunk_bytes() && c != first => {
                    ChunkTag::taken(self.owner, ChunkKind::Continuation)
                }
                _ => ChunkTag::taken(self.owner, kind),
            };
            self.tags.insert(c, tag);
        }
        Ok(first)
    }

    /// A data block of at least `len` bytes; returns its offset.
    pub async fn data(&mut self, client: &mut Client, len: u32) -> Result<u64, TxError> {
        let bytes = Self::block_bytes(len);
        if bytes > BLOCK_BYTES_MAX {
            return Err(TxError::BadObject(format!(
                "a block of {bytes} bytes is past the largest a slab names ({BLOCK_BYTES_MAX})"
            )));
        }
        if !self.transactional {
            return self.raw_data(client, bytes).await;
        }
        if let Some(offset) = self.pop_free(bytes) {
            return Ok(offset);
        }
        if self.pending.len() >= PENDING_FLUSH_AT {
            self.flush(client).await?;
        }
        if let Some(offset) = self.carve(bytes) {
            return Ok(offset);
        }
        // The slab is used up: before a new chunk, what is this owner's
        // already (its bag, then the runs a reclaim left it).
        self.flush(client).await?;
        self.drain(client).await?;
        if let Some(offset) = self.pop_free(bytes) {
            return Ok(offset);
        }
        while self.pop_run(client).await? {
            if let Some(offset) = self.pop_free(bytes) {
                return Ok(offset);
            }
        }
        let chunk = self.heap.chunk_bytes();
        let count = bytes.div_ceil(chunk).max(1);
        let c = self
            .take(client, count, ChunkKind::Data { block_bytes: bytes })
            .await?;
        let start = self.heap.chunk_offset(c);
        if bytes > chunk {
            return Ok(start);
        }
        let slab = self.slabs.entry(bytes).or_default();
        slab.next = start + bytes;
        slab.end = start + chunk / bytes * bytes;
        Ok(start)
    }

    fn pop_free(&mut self, bytes: u64) -> Option<u64> {
        self.free.get_mut(&bytes).and_then(Vec::pop)
    }

    fn carve(&mut self, bytes: u64) -> Option<u64> {
        let slab = self.slabs.get_mut(&bytes)?;
        (slab.next + bytes <= slab.end).then(|| {
            slab.next += bytes;
            slab.next - bytes
        })
    }

    async fn raw_data(&mut self, client: &mut Client, bytes: u64) -> Result<u64, TxError> {
        if let Some(offset) = self.pop_free(bytes) {
            return Ok(offset);
        }
        let chunk = self.heap.chunk_bytes();
        if bytes > chunk / 2 {
            // Large blocks get chunks of their own.
            let c = self.take(client, bytes.div_ceil(chunk), ChunkKind::Raw).await?;
            return Ok(self.heap.chunk_offset(c));
        }
        let open = self.slabs.get(&0).is_some_and(|b| b.next + bytes <= b.end);
        if !open {
            // The tail of the old chunk stays unused.
            let c = self.take(client, 1, ChunkKind::Raw).await?;
            let start = self.heap.chunk_offset(c);
            self.slabs.insert(
                0,
                Bump {
                    next: start,
                    end: start + chunk,
                },
            );
        }
        let b = self.slabs.entry(0).or_default();
        b.next += bytes;
        Ok(b.next - bytes)
    }

    /// Offsets of the data blocks waiting for reuse (for checkers).
    pub fn free_offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.free.values().flatten().copied()
    }

    /// Returns a data block of `len` bytes for reuse (or to its chunk's
    /// owner). The caller guarantees no committed pointer refers to it any
    /// more, and, for a block of another owner's chunk, that
    /// [`BlockAllocator::push_release_reads`]'s READs ran before the block
    /// was unlinked.
    pub fn free(&mut self, offset: u64, len: u32) {
        let r = self.release(offset, len);
        self.free_released(r);
    }

    /// Who gets `offset` when it is unlinked, by what this client knows now.
    pub(crate) fn release(&self, offset: u64, len: u32) -> Released {
        if !self.transactional {
            return Released {
                offset,
                holder: Holder::Own {
                    block_bytes: Self::block_bytes(len),
                },
            };
        }
        let tag = self.heap.chunk_of(offset).and_then(|c| self.tags.get(&c));
        let holder = match (tag.and_then(|t| t.owner()), tag.and_then(|t| t.block_bytes())) {
            (Some(o), Some(block_bytes)) if o == self.owner => Holder::Own { block_bytes },
            (Some(owner), Some(_)) => match self.gens.as_ref().and_then(|g| g.get(owner as usize)) {
                Some(&gen) => Holder::Foreign { owner, gen },
                None => Holder::Unmanaged,
            },
            _ => Holder::Unmanaged,
        };
        Released { offset, holder }
    }

    /// Gives `r` to its holder.
    pub(crate) fn free_released(&mut self, r: Released) {
        match r.holder {
            Holder::Own { block_bytes } => self.free.entry(block_bytes).or_default().push(r.offset),
            Holder::Foreign { owner, gen } => {
                if self.pending.len() >= PENDING_MAX {
                    self.pending.remove(0);
                    self.counts.blocks_dropped += 1;
                }
                self.pending.push(Pending {
                    offset: r.offset,
                    owner,
                    gen,
                    tries: 0,
                });
            }
            Holder::Unmanaged => self.counts.blocks_dropped += 1,
        }
    }

    /// Puts in `batch` the READs [`BlockAllocator::release`] needs to place
    /// `offsets` (the tags of their chunks, every owner's bag generation)
    /// if this client does not know it yet; `None` when it does. The
    /// batch must run before the blocks are unlinked on the primary, or
    /// the READs must come before the unlinking CASes in it (verbs to one
    /// node run in order): the generation it reads is the one a reclaim's
    /// bump must not have passed (`crate::reclaim`, rule 3).
    pub(crate) fn push_release_reads(
        &self,
        batch: &mut Batch,
        offsets: impl Iterator<Item = u64>,
    ) -> Option<ReleaseReads> {
        let chunks: Vec<u64> = offsets.filter_map(|o| self.heap.chunk_of(o)).collect();
        if !self.transactional || chunks.is_empty() {
            return None;
        }
        let foreign = chunks
            .iter()
            .any(|c| self.tags.get(c).is_some_and(|t| t.owner() != Some(self.owner)));
        let mut missing: Vec<u64> = chunks
            .into_iter()
            .filter(|c| !self.tags.contains_key(c))
            .collect();
        // Generations only matter for other owners' blocks.
        if missing.is_empty() && (self.gens.is_some() || !foreign) {
            return None;
        }
        missing.sort_unstable();
        missing.dedup();
        let (table, _) = self.heap.owner_table_range();
        let (gens_at, gens_bytes) = self.heap.bag_gens();
        let tags = missing
            .into_iter()
            .map(|c| (c, batch.read(table.add(c * 8), 8)))
            .collect();
        let gens = batch.read(gens_at, gens_bytes as u32);
        Some(ReleaseReads { tags, gens })
    }

    /// Takes in what [`BlockAllocator::push_release_reads`] read.
    pub(crate) fn absorb_release_reads(&mut self, batch: &Batch, reads: ReleaseReads) -> Result<(), TxError> {
        for (c, h) in reads.tags {
            let tag = ChunkTag::from_raw(word_at(batch.read_result(h).map_err(TxError::Verb)?));
            if tag.owner().is_some() {
                self.tags.insert(c, tag);
            }
        }
        let gens = batch.read_result(reads.gens).map_err(TxError::Verb)?;
        self.gens = Some(gens.chunks_exact(8).map(|w| word_at(w) as u16).collect());
        Ok(())
    }

    /// [`BlockAllocator::push_release_reads`] in a round trip of its own.
    async fn prepare_release(
        &mut self,
        client: &mut Client,
        offsets: impl Iterator<Item = u64>,
    ) -> Result<(), TxError> {
        let mut batch = Batch::new();
        if let Some(reads) = self.push_release_reads(&mut batch, offsets) {
            client.execute(&mut batch).await?;
            self.absorb_release_reads(&batch, reads)?;
        }
        Ok(())
    }

    /// Hands pending foreign blocks to their owners' bags: a CAS each from
    /// an empty slot of the generation read before the unlink. A slot of
    /// another generation means the owner was reclaimed since: the block
    /// is dropped (the reclaim found it free, or it leaks: rule 3).
    pub async fn flush(&mut self, client: &mut Client) -> Result<(), TxError> {
        let mut batch = Batch::new();
        while !self.pending.is_empty() {
            let n = self.pending.len().min(FLUSH_BATCH_MAX);
            batch.clear();
            let mut cases = Vec::with_capacity(n);
            for p in &self.pending[..n] {
                let slot = self.cursor % BAG_SLOTS;
                self.cursor = self.cursor.wrapping_add(1);
                let at = self.heap.bag(p.owner).add(slot * 8);
                let h = batch.cas(
                    at,
                    BagWord::empty(p.gen).raw(),
                    BagWord::holding(p.gen, p.offset).raw(),
                );
                cases.push(h);
            }
            client.execute(&mut batch).await?;
            let mut kept = Vec::new();
            for (mut p, h) in self.pending.drain(..n).zip(cases) {
                if batch.cas_succeeded(h).map_err(TxError::Verb)? {
                    self.counts.blocks_handed += 1;
                    continue;
                }
                let found = BagWord::from_raw(batch.old_value(h).map_err(TxError::Verb)?);
                p.tries += 1;
                if found.gen() != p.gen {
                    self.counts.blocks_dropped += 1;
                    if let Some(g) = self.gens.as_mut().and_then(|g| g.get_mut(p.owner as usize)) {
                        *g = found.gen();
                    }
                } else if p.tries >= PENDING_TRIES_MAX {
                    self.counts.blocks_dropped += 1;
                } else {
                    kept.push(p);
                }
            }
            let full = !kept.is_empty();
            self.pending.extend(kept);
            if full {
                // Full bags: try again at the next flush, not now.
                break;
            }
        }
        Ok(())
    }

    /// Takes back the blocks other committers put in this owner's bag. The
    /// first call also takes the runs a reclaim left for this owner id: it
    /// reads the runs head and zeroes it in the same batch, so that a later
    /// holder of the id does not take them again (what this one leaves
    /// unpopped, its own reclaim finds free).
    async fn drain(&mut self, client: &mut Client) -> Result<(), TxError> {
        let bag = self.heap.bag(self.owner);
        let mut batch = Batch::new();
        let g = batch.read(self.heap.bag_gen(self.owner), 8);
        let h = batch.read(bag, (BAG_SLOTS * 8) as u32);
        let runs = (!self.runs_taken).then(|| {
            let head = self.heap.runs_head(self.owner);
            let r = batch.read(head, 8);
            let z = batch.on(Replica::All).write(head, &0u64.to_le_bytes());
            (r, z)
        });
        client.execute(&mut batch).await?;
        if let Some((r, z)) = runs {
            batch.done(z).map_err(TxError::Verb)?;
            let first = word_at(batch.read_result(r).map_err(TxError::Verb)?);
            self.runs_next = (first != 0).then_some(first);
            self.runs_taken = true;
        }
        let gen = word_at(batch.read_result(g).map_err(TxError::Verb)?) as u16;
        let slots: Vec<u64> = batch
            .read_result(h)
            .map_err(TxError::Verb)?
            .chunks_exact(8)
            .map(word_at)
            .collect();
        batch.clear();
        let mut cases = Vec::new();
        for (i, &v) in slots.iter().enumerate() {
            let w = BagWord::from_raw(v);
            if let (true, Some(offset)) = (w.gen() == gen, w.block()) {
                let h = batch.cas(bag.add(i as u64 * 8), v, BagWord::empty(gen).raw());
                cases.push((offset, h));
            }
        }
        if cases.is_empty() {
            return Ok(());
        }
        client.execute(&mut batch).await?;
        let mut won = Vec::new();
        for (offset, h) in cases {
            if batch.cas_succeeded(h).map_err(TxError::Verb)? {
                won.push(offset);
            }
        }
        self.prepare_release(client, won.iter().copied()).await?;
        for offset in won {
            match self.release(offset, 0).holder {
                Holder::Own { block_bytes } => {
                    self.counts.blocks_drained += 1;
                    self.free.entry(block_bytes).or_default().push(offset);
                }
                // Not ours after all: a bug elsewhere; never reuse it.
                _ => {
                    tracing::warn!(
                        owner = self.owner,
                        offset,
                        "a bag held a block of another owner's chunk"
                    );
                    self.counts.blocks_dropped += 1;
                }
            }
        }
        Ok(())
    }

    /// Pops the next run a reclaim left for this owner id (taken by
    /// [`BlockAllocator::drain`]) into the free lists; `false` when there is
    /// none.
    async fn pop_run(&mut self, client: &mut Client) -> Result<bool, TxError> {
        let mut batch = Batch::new();
        let Some(at) = self.runs_next else {
            return Ok(false);
        };
        let Some(chunk) = self.heap.chunk_of(at) else {
            return Err(TxError::Heap(format!(
                "a reclaimed run at {at} lies outside the chunks"
            )));
        };
        let (table, _) = self.heap.owner_table_range();
        let l = batch.read(GlobalAddr::new(self.heap.region(), at), 8);
        let t = batch.read(table.add(chunk * 8), 8);
        client.execute(&mut batch).await?;
        let link = RunLink::from_raw(word_at(batch.read_result(l).map_err(TxError::Verb)?));
        let tag = ChunkTag::from_raw(word_at(batch.read_result(t).map_err(TxError::Verb)?));
        let block_bytes = match (tag.owner(), tag.block_bytes()) {
            (Some(o), Some(b)) if o == self.owner => b,
            _ => {
                return Err(TxError::Heap(format!(
                    "a reclaimed run at {at} lies in chunk {chunk}, tagged {tag:?}, not a slab of owner {}",
                    self.owner
                )))
            }
        };
        self.tags.insert(chunk, tag);
        let list = self.free.entry(block_bytes).or_default();
        // Lowest offsets popped first.
        list.extend((0..link.blocks()).rev().map(|k| at + k * block_bytes));
        self.counts.blocks_adopted += link.blocks();
        self.runs_next = link.next();
        Ok(true)
    }
}
