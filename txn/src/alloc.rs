//! A client's allocator: carves the chunks it takes from the heap into
//! 16-byte metas and data blocks, and reuses data blocks its commits freed.
//!
//! Reuse is what makes the pointer versions necessary: a freed block may come
//! back as the data of the same object, and only the bumped `ptr_version`
//! (and the lock version) tell the two apart.
//!
//! A transactional allocator ([`BlockAllocator::new`]) keeps what leak
//! repair needs (`crate::reclaim`): data chunks are slabs of one block size;
//! the blocks of owner ids announced for reclaim are *doomed*, and it never
//! keeps one (`crate::quiesce`); before it takes a chunk, it takes the runs
//! a reclaim left for its owner id. An index's own allocator
//! ([`BlockAllocator::raw`]) manages memory the reclaim does not touch.
//!
//! Metas and sealed blocks are carved front to back; before its first chunk
//! of either kind, an allocator carves the unwritten tails of the chunks
//! its owner id's earlier holders took (`crate::tails`).

use std::collections::{HashMap, HashSet};

use fabric::{Batch, Client, GlobalAddr, Replica};

use crate::error::TxError;
use crate::heap::{ChunkKind, ChunkTag, Heap, BLOCK_BYTES_MAX};
use crate::obj::META_BYTES;
use crate::quiesce::Announced;
use crate::reclaim::RunLink;
use crate::tails::TailKind;
use crate::word::OwnerId;
use fabric::le_word;

/// Data blocks are 8-byte aligned and sized in words, so that every word of a
/// block can be read and CASed.
const BLOCK_ALIGN: u64 = 8;

/// Chunks of one kind carved front to back (metas, sealed blocks): the
/// open one, and the unwritten tails earlier holders of the owner id left
/// (`crate::tails`), last first (`None`: not looked up yet).
#[derive(Debug, Default)]
struct Front {
    open: Bump,
    tails: Option<Vec<Bump>>,
}

#[derive(Debug, Default)]
struct Bump {
    next: u64,
    end: u64,
}

/// What the allocator did with blocks beyond its own chunks (for stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocCounts {
    /// Blocks taken from the runs a reclaim left for this owner id.
    pub blocks_adopted: u64,
    /// Blocks given up because their chunk's owner id was announced for
    /// reclaim (`crate::quiesce`): the reclaim finds them free, or, if
    /// they were unlinked after its scan, the reclaim of the id's next
    /// holder does.
    pub blocks_doomed: u64,
    /// Bytes of the unwritten chunk tails of the owner id's earlier
    /// holders taken over (`crate::tails`).
    pub tail_bytes_adopted: u64,
}

/// One owner's allocator.
#[derive(Debug)]
pub struct BlockAllocator {
    heap: Heap,
    owner: OwnerId,
    /// False for an index's own allocator: raw chunks, no runs, nothing
    /// doomed.
    transactional: bool,
    metas: Front,
    /// The open slab of each block size (a raw allocator has one, under 0).
    slabs: HashMap<u64, Bump>,
    free: HashMap<u64, Vec<u64>>,
    /// The data chunks of each announcement for reclaim, as this allocator
    /// last caught up (rarely more than one at a time).
    doomed: HashMap<Announced, HashSet<u64>>,
    /// The next reclaimed run to pop, once the runs head was taken.
    runs_next: Option<u64>,
    runs_taken: bool,
    /// Sealed blocks ([`BlockAllocator::sealed`]).
    sealed: Front,
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
            metas: Front::default(),
            slabs: HashMap::new(),
            free: HashMap::new(),
            doomed: HashMap::new(),
            runs_next: None,
            runs_taken: false,
            sealed: Front::default(),
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
        let at = self.carve_front(client, TailKind::Metas, META_BYTES).await?;
        Ok(GlobalAddr::new(self.heap.region(), at))
    }

    /// A raw block of at least `len` bytes whose last word the caller makes
    /// nonzero in the WRITE that fills it, before anything names the block
    /// (a hash KV block ends in its odd check word); returns its offset.
    /// Such blocks are carved from `ChunkKind::Sealed` chunks, whose
    /// unwritten tails the owner id's next holder continues
    /// (`crate::tails`). A block longer than half a chunk gets raw chunks
    /// of its own, as in [`BlockAllocator::data`] of a raw allocator.
    ///
    /// # Panics
    /// On a transactional allocator: a transaction client's owner id carves
    /// metas, an index's own allocator sealed blocks (one allocator per id
    /// and chunk kind, `crate::tails`).
    pub async fn sealed(&mut self, client: &mut Client, len: u32) -> Result<u64, TxError> {
        assert!(
            !self.transactional,
            "sealed blocks come from an index's own allocator"
        );
        let bytes = Self::block_bytes(len);
        if bytes > self.heap.chunk_bytes() / 2 {
            return self.raw_data(client, bytes).await;
        }
        self.carve_front(client, TailKind::Sealed, bytes).await
    }

    fn front(&mut self, kind: TailKind) -> &mut Front {
        match kind {
            TailKind::Metas => &mut self.metas,
            TailKind::Sealed => &mut self.sealed,
        }
    }

    /// `bytes` from the open chunk of `kind`; when it is used up, from the
    /// next tail an earlier holder of the owner id left, then from a new
    /// chunk (the end of the old one is for the id's next holder).
    async fn carve_front(&mut self, client: &mut Client, kind: TailKind, bytes: u64) -> Result<u64, TxError> {
        loop {
            let open = &mut self.front(kind).open;
            if open.next + bytes <= open.end {
                open.next += bytes;
                return Ok(open.next - bytes);
            }
            let next = match self.next_tail(client, kind).await {
                Some(tail) => tail,
                None => {
                    let c = self
                        .heap
                        .take_chunks(client, self.owner, 1, kind.chunk_kind())
                        .await?;
                    let start = self.heap.chunk_offset(c);
                    Bump {
                        next: start,
                        end: start + self.heap.chunk_bytes(),
                    }
                }
            };
            self.front(kind).open = next;
        }
    }

    /// The next unwritten tail of `kind` an earlier holder of the owner id
    /// left, looked up at the first call (`crate::tails`). A lookup that
    /// fails finds none: those tails are left for the id's next holder.
    async fn next_tail(&mut self, client: &mut Client, kind: TailKind) -> Option<Bump> {
        if self.front(kind).tails.is_none() {
            let found = match self.heap.unwritten_tails(client, self.owner, kind).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::debug!(owner = self.owner, ?kind, error = %e, "chunk tails not looked up");
                    Vec::new()
                }
            };
            if !found.is_empty() {
                tracing::debug!(
                    owner = self.owner,
                    ?kind,
                    tails = found.len(),
                    bytes = found.iter().map(|(s, e)| e - s).sum::<u64>(),
                    "carving the chunk tails of the owner id's earlier holders"
                );
            }
            // Popped from the back: lowest offsets first.
            self.front(kind).tails = Some(
                found
                    .into_iter()
                    .rev()
                    .map(|(next, end)| Bump { next, end })
                    .collect(),
            );
        }
        let tail = self.front(kind).tails.as_mut().and_then(Vec::pop)?;
        self.counts.tail_bytes_adopted += tail.end - tail.next;
        Some(tail)
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
        if let Some(offset) = self.carve(bytes) {
            return Ok(offset);
        }
        // The slab is used up: before a new chunk, the runs a reclaim left
        // this owner id.
        while self.pop_run(client).await? {
            if let Some(offset) = self.pop_free(bytes) {
                return Ok(offset);
            }
        }
        let chunk = self.heap.chunk_bytes();
        let count = bytes.div_ceil(chunk).max(1);
        let c = self
            .heap
            .take_chunks(client, self.owner, count, ChunkKind::Data { block_bytes: bytes })
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
            let c = self
                .heap
                .take_chunks(client, self.owner, bytes.div_ceil(chunk), ChunkKind::Raw)
                .await?;
            return Ok(self.heap.chunk_offset(c));
        }
        let open = self.slabs.get(&0).is_some_and(|b| b.next + bytes <= b.end);
        if !open {
            // The tail of the old chunk stays unused.
            let c = self
                .heap
                .take_chunks(client, self.owner, 1, ChunkKind::Raw)
                .await?;
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

    /// Returns a data block of `len` bytes for reuse. The caller guarantees
    /// no committed pointer refers to it any more. A block of a doomed chunk
    /// is given up instead (`crate::quiesce`).
    pub fn free(&mut self, offset: u64, len: u32) {
        if !self.give_up_if_doomed(offset) {
            self.free.entry(Self::block_bytes(len)).or_default().push(offset);
        }
    }

    /// Whether `offset` lies in a chunk of an owner id announced for
    /// reclaim, as this allocator last caught up.
    fn is_doomed(&self, offset: u64) -> bool {
        self.transactional
            && !self.doomed.is_empty()
            && self
                .heap
                .chunk_of(offset)
                .is_some_and(|c| self.doomed.values().any(|chunks| chunks.contains(&c)))
    }

    /// Dooms the data chunks of announcement `a`'s owner ids: reads the
    /// chunk owner table and gives up every free block in them (the
    /// caller's other holdings go through [`BlockAllocator::retain_undoomed`]).
    ///
    /// The table read now is complete for the dead owner: it used a chunk
    /// only after its tag WRITE completed, before it died, hence before
    /// its expiry and this announcement.
    pub(crate) async fn doom(&mut self, client: &mut Client, a: Announced) -> Result<(), TxError> {
        if !self.transactional {
            return Ok(());
        }
        let tags = self.heap.owner_table_of(client).await?;
        let fresh: HashSet<u64> = tags
            .iter()
            .enumerate()
            .filter(|(_, t)| t.block_bytes().is_some() && t.owner().is_some_and(|o| a.owners.contains(o)))
            .map(|(c, _)| c as u64)
            .collect();
        self.doomed.insert(a, fresh);
        let mut free = std::mem::take(&mut self.free);
        for list in free.values_mut() {
            list.retain(|&o| !self.give_up_if_doomed(o));
        }
        self.free = free;
        Ok(())
    }

    /// Keeps of `blocks` (offset, length) those not doomed, giving up the
    /// others: a commit's parked blocks, judged when they are parked and
    /// again when more owner ids are doomed.
    pub(crate) fn retain_undoomed(&mut self, blocks: &mut Vec<(u64, u32)>) {
        blocks.retain(|&(o, _)| !self.give_up_if_doomed(o));
    }

    /// Counts `offset` given up if it is doomed; whether it was.
    fn give_up_if_doomed(&mut self, offset: u64) -> bool {
        let doomed = self.is_doomed(offset);
        self.counts.blocks_doomed += u64::from(doomed);
        doomed
    }

    /// `owners` were forgotten: their reclaim is over, and blocks of their
    /// chunks that a commit begun after that unlinks are safe to keep.
    pub(crate) fn undoom(&mut self, a: Announced) {
        self.doomed.remove(&a);
    }

    /// Gives up every free block, and every `parked` one, and forgets every
    /// announcement (a holder that missed reclaim events, `crate::quiesce`):
    /// a leak, never a block handed out twice. The runs of its own id, and
    /// its open slabs, are its own and stay.
    pub(crate) fn give_up_everything(&mut self, parked: Option<&mut Vec<(u64, u32)>>) {
        self.counts.blocks_doomed += self.free.values().map(|l| l.len() as u64).sum::<u64>();
        if let Some(parked) = parked {
            self.counts.blocks_doomed += parked.len() as u64;
            parked.clear();
        }
        self.free.clear();
        self.doomed.clear();
    }

    /// Pops the next run a reclaim left for this owner id into the free
    /// lists; `false` when there is none. The first call takes the list:
    /// it reads the runs head and zeroes it in the same batch, so that a
    /// later holder of the id does not take it again (what this one leaves
    /// unpopped, its own reclaim finds free).
    async fn pop_run(&mut self, client: &mut Client) -> Result<bool, TxError> {
        let mut batch = Batch::new();
        if !self.runs_taken {
            let head = self.heap.runs_head(self.owner);
            let r = batch.read(head, 8);
            let z = batch.on(Replica::All).write(head, &0u64.to_le_bytes());
            client.execute(&mut batch).await?;
            batch.done(z).map_err(TxError::Verb)?;
            let first = le_word(batch.read_result(r).map_err(TxError::Verb)?, 0);
            self.runs_next = (first != 0).then_some(first);
            self.runs_taken = true;
            batch.clear();
        }
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
        let link = RunLink::from_raw(le_word(batch.read_result(l).map_err(TxError::Verb)?, 0));
        let tag = ChunkTag::from_raw(le_word(batch.read_result(t).map_err(TxError::Verb)?, 0));
        let block_bytes = match (tag.owner(), tag.block_bytes()) {
            (Some(o), Some(b)) if o == self.owner => b,
            _ => {
                return Err(TxError::Heap(format!(
                    "a reclaimed run at {at} lies in chunk {chunk}, tagged {tag:?}, not a slab of owner {}",
                    self.owner
                )))
            }
        };
        let list = self.free.entry(block_bytes).or_default();
        // Lowest offsets popped first.
        list.extend((0..link.blocks()).rev().map(|k| at + k * block_bytes));
        self.counts.blocks_adopted += link.blocks();
        self.runs_next = link.next();
        Ok(true)
    }
}
