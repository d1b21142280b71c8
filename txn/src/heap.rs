//! The rTX heap: how a region is organised for transactions.
//!
//! ```text
//! [0, 4 KiB)          header: magic, layout version, owner slots, chunk size,
//!                     chunk count, next free chunk (FAA), named roots
//! log array           one LOG_SLOT_BYTES slot per owner id
//! reclaim area        per owner id: the head of the runs a reclaim left for
//!                     the id's next holder (`crate::reclaim`)
//! chunk owner table   one ChunkTag per chunk: who took it, and what it holds
//! chunks              the meta and data pools, handed to clients chunk by chunk
//! ```
//!
//! Every replica of the region has the same layout. Clients take chunks with
//! an FAA on every replica's next-chunk word (deciding on the primary's) and
//! record themselves in the owner table on every replica, so a dead client's
//! memory can be found, and a promoted backup can rebuild the words only a
//! primary keeps (`Heap::restore_after_promotion`; `docs/txn.md` §8).

use fabric::{le_word, Batch, Client, GlobalAddr, RegionId, Replica};

use crate::error::TxError;
use crate::log::LOG_SLOT_BYTES;
use crate::word::OwnerId;

const MAGIC: u64 = u64::from_le_bytes(*b"KTXHEAP1");
/// 2: the reclaim area, and data chunks as slabs of one block size.
const LAYOUT_VERSION: u64 = 2;
pub(crate) const HEADER_BYTES: u64 = 4096;
const W_MAGIC: u64 = 0;
const W_VERSION: u64 = 1;
const W_OWNER_SLOTS: u64 = 2;
const W_CHUNK_BYTES: u64 = 3;
const W_CHUNK_COUNT: u64 = 4;
const W_NEXT_CHUNK: u64 = 5;
const W_ROOTS: u64 = 6;
/// Named roots per heap: words an index uses to find its root objects.
pub const ROOTS_MAX: usize = 32;
/// Flags of the heap (`FLAG_*`), after the roots.
const W_FLAGS: u64 = W_ROOTS + ROOTS_MAX as u64;
/// The heap holds retired blocks (`Tx::retire_replaced`): blocks no meta
/// names that a late CAS may still land in, so a reclaim must not hand
/// them out (`crate::reclaim`).
const FLAG_RETIRES: u64 = 1;

/// Bytes per chunk of a heap laid out by default: what a client takes from
/// the shared chunk counter at a time; one FAA per 64 KiB keeps the
/// counter cold. Every heap the tools and named indexes make uses it.
pub const CHUNK_BYTES: u64 = 64 * 1024;

/// How to lay out a heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapConfig {
    /// Log slots, hence the largest owner id + 1 that can run transactions here.
    pub owner_slots: u16,
    /// Bytes per chunk (a multiple of 4 KiB).
    pub chunk_bytes: u64,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            owner_slots: 256,
            chunk_bytes: CHUNK_BYTES,
        }
    }
}

/// Largest data block a slab tag can name: its size in words fits the
/// tag's 24-bit field (128 MiB, far beyond any node or subtable).
pub const BLOCK_BYTES_MAX: u64 = ((1 << 24) - 1) * 8;

/// What a chunk holds. Recorded with its owner so that a promotion can find
/// every meta (their lock words are the primary's alone), and a reclaim
/// every data block (`crate::reclaim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    /// Data blocks of TXObjs, all `block_bytes` long, back to back from
    /// the chunk's start (a slab). A block longer than a chunk spans
    /// consecutive chunks; the ones after its first are `Continuation`s.
    /// Only metas' data pointers name these blocks, which is what lets a
    /// reclaim tell the free ones from the others.
    Data {
        /// Bytes of each block (a multiple of 8, at most [`BLOCK_BYTES_MAX`]).
        block_bytes: u64,
    },
    /// A chunk a `Data` block longer than one chunk continues into.
    Continuation,
    /// 16-byte TXObj metas only.
    Metas,
    /// Memory an index manages itself (directories and subtables of an
    /// `optimal` hash, `optimal` nodes and lock tables): never reclaimed.
    Raw,
    /// Raw blocks that each end in a word that is nonzero once the block
    /// is written (hash KV blocks, whose check word is odd), whole blocks
    /// only, carved front to back. What lies past a sealed chunk's last
    /// nonzero word was never written, so the next holder of the owner id
    /// continues there (`crate::tails`).
    Sealed,
}

/// One word of the chunk owner table, the one definition of its layout:
///
/// ```text
///  63      62    61     60       59   40 39            16 15             0
/// +-------+-----+------+--------+-------+----------------+----------------+
/// | metas | raw | cont | sealed |   0   | block words    | owner id + 1   |   taken
/// +-------+-----+------+--------+-------+----------------+----------------+
/// 0 = free; block words only in a data chunk's tag (its slab's block size / 8)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkTag(u64);

impl ChunkTag {
    const METAS: u64 = 1 << 63;
    const RAW: u64 = 1 << 62;
    const CONTINUATION: u64 = 1 << 61;
    const SEALED: u64 = 1 << 60;
    const OWNER_MASK: u64 = 0xFFFF;
    const WORDS_SHIFT: u32 = 16;
    const WORDS_MASK: u64 = (1 << 24) - 1;

    /// A chunk taken by `owner` for `kind`.
    ///
    /// # Panics
    /// If a data block size is not a positive multiple of 8 up to
    /// [`BLOCK_BYTES_MAX`] (the allocator checks object sizes first).
    pub fn taken(owner: OwnerId, kind: ChunkKind) -> Self {
        let bits = match kind {
            ChunkKind::Data { block_bytes } => {
                assert!(
                    block_bytes > 0 && block_bytes % 8 == 0 && block_bytes <= BLOCK_BYTES_MAX,
                    "block size {block_bytes} has no slab tag"
                );
                (block_bytes / 8) << Self::WORDS_SHIFT
            }
            ChunkKind::Continuation => Self::CONTINUATION,
            ChunkKind::Metas => Self::METAS,
            ChunkKind::Raw => Self::RAW,
            ChunkKind::Sealed => Self::SEALED,
        };
        ChunkTag(bits | (u64::from(owner) + 1))
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// A stored word.
    pub fn from_raw(raw: u64) -> Self {
        ChunkTag(raw)
    }

    /// Who took the chunk (`None`: free).
    pub fn owner(self) -> Option<OwnerId> {
        let plus_one = self.0 & Self::OWNER_MASK;
        (plus_one != 0).then(|| (plus_one - 1) as OwnerId)
    }

    /// What it holds, if taken.
    pub fn kind(self) -> Option<ChunkKind> {
        self.owner().map(|_| {
            if self.0 & Self::METAS != 0 {
                ChunkKind::Metas
            } else if self.0 & Self::RAW != 0 {
                ChunkKind::Raw
            } else if self.0 & Self::CONTINUATION != 0 {
                ChunkKind::Continuation
            } else if self.0 & Self::SEALED != 0 {
                ChunkKind::Sealed
            } else {
                ChunkKind::Data {
                    block_bytes: ((self.0 >> Self::WORDS_SHIFT) & Self::WORDS_MASK) * 8,
                }
            }
        })
    }

    /// The block size of a data chunk's slab.
    pub fn block_bytes(self) -> Option<u64> {
        match self.kind() {
            Some(ChunkKind::Data { block_bytes }) => Some(block_bytes),
            _ => None,
        }
    }
}

/// What [`Heap::restore_after_promotion`] rebuilt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// The next-chunk counter as it now stands.
    pub next_chunk: u64,
    /// Chunks the owner table records as taken.
    pub chunks_taken: u64,
    /// Lock words of metas in use raised to the promotion floor.
    pub lock_words: u64,
}

/// A formatted heap in one region. Cheap to clone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heap {
    region: RegionId,
    owner_slots: u64,
    chunk_bytes: u64,
    chunk_count: u64,
}

impl Heap {
    fn word(&self, w: u64) -> GlobalAddr {
        GlobalAddr::new(self.region, w * 8)
    }

    /// The region.
    pub fn region(&self) -> RegionId {
        self.region
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Log slots in the heap (owner ids 0 to this, exclusive, can log).
    pub fn owner_slots(&self) -> u16 {
        self.owner_slots as u16
    }

    /// Chunks in the heap.
    pub fn chunk_count(&self) -> u64 {
        self.chunk_count
    }

    fn log_base(&self) -> u64 {
        HEADER_BYTES
    }

    fn reclaim_base(&self) -> u64 {
        self.log_base() + self.owner_slots * LOG_SLOT_BYTES
    }

    fn owner_table(&self) -> u64 {
        self.reclaim_base() + reclaim_area_bytes(self.owner_slots)
    }

    /// `owner`'s reclaimed-runs head word: the first run a reclaim left
    /// for the next holder of the id (0: none).
    pub fn runs_head(&self, owner: OwnerId) -> GlobalAddr {
        GlobalAddr::new(self.region, self.reclaim_base() + u64::from(owner) * 8)
    }

    /// The chunk holding byte `offset`, if it lies among the chunks.
    pub fn chunk_of(&self, offset: u64) -> Option<u64> {
        let base = self.chunk_base();
        (offset >= base)
            .then(|| (offset - base) / self.chunk_bytes)
            .filter(|&c| c < self.chunk_count)
    }

    fn chunk_base(&self) -> u64 {
        (self.owner_table() + self.chunk_count * 8).next_multiple_of(HEADER_BYTES)
    }

    /// Where the chunk owner table lives, and its length in bytes (one
    /// [`ChunkTag`] per chunk): for checkers that compare replicas.
    pub fn owner_table_range(&self) -> (GlobalAddr, u64) {
        (
            GlobalAddr::new(self.region, self.owner_table()),
            self.chunk_count * 8,
        )
    }

    /// The next-chunk counter's address.
    pub fn next_chunk_addr(&self) -> GlobalAddr {
        self.word(W_NEXT_CHUNK)
    }

    /// Where `owner`'s log slot lives.
    pub fn log_slot(&self, owner: OwnerId) -> Result<GlobalAddr, TxError> {
        if u64::from(owner) >= self.owner_slots {
            return Err(TxError::OwnerOutOfRange {
                owner,
                slots: self.owner_slots,
            });
        }
        Ok(GlobalAddr::new(
            self.region,
            self.log_base() + u64::from(owner) * LOG_SLOT_BYTES,
        ))
    }

    /// Records, on every replica, that blocks of this heap may be retired
    /// (`Tx::retire_replaced`): it is then never reclaimed. The index that
    /// retires blocks calls it when it creates itself, before any commit.
    pub async fn mark_retiring(&self, client: &mut Client) -> Result<(), TxError> {
        let mut batch = Batch::new();
        let h = batch
            .on(Replica::All)
            .write(self.word(W_FLAGS), &FLAG_RETIRES.to_le_bytes());
        client.execute(&mut batch).await?;
        batch.done(h).map_err(TxError::Verb)
    }

    /// Whether [`Heap::mark_retiring`] ran (read on the primary).
    pub async fn retires(&self, client: &mut Client) -> Result<bool, TxError> {
        let mut batch = Batch::new();
        let h = batch.read(self.word(W_FLAGS), 8);
        client.execute(&mut batch).await?;
        Ok(le_word(batch.read_result(h).map_err(TxError::Verb)?, 0) & FLAG_RETIRES != 0)
    }

    /// The address of named root `i`.
    ///
    /// # Panics
    /// If `i >= ROOTS_MAX` (root numbers are constants of the index code).
    pub fn root(&self, i: usize) -> GlobalAddr {
        assert!(i < ROOTS_MAX, "root {i} out of range");
        self.word(W_ROOTS + i as u64)
    }

    /// Byte offset of chunk `i`.
    pub fn chunk_offset(&self, i: u64) -> u64 {
        self.chunk_base() + i * self.chunk_bytes
    }

    fn layout(region: RegionId, region_bytes: u64, config: HeapConfig) -> Result<Heap, TxError> {
        if config.chunk_bytes == 0 || config.chunk_bytes % HEADER_BYTES != 0 || config.owner_slots == 0 {
            return Err(TxError::Heap(format!(
                "chunk size {} must be a positive multiple of 4096 and owner slots positive",
                config.chunk_bytes
            )));
        }
        let slots = u64::from(config.owner_slots);
        let fixed = HEADER_BYTES + slots * LOG_SLOT_BYTES + reclaim_area_bytes(slots) + HEADER_BYTES;
        let chunk_count = region_bytes.saturating_sub(fixed) / (config.chunk_bytes + 8);
        let heap = Heap {
            region,
            owner_slots: u64::from(config.owner_slots),
            chunk_bytes: config.chunk_bytes,
            chunk_count,
        };
        if chunk_count == 0 || heap.chunk_offset(chunk_count) > region_bytes {
            return Err(TxError::Heap(format!(
                "region {region} ({region_bytes} bytes) is too small for {} log slots and one {}-byte chunk",
                config.owner_slots, config.chunk_bytes
            )));
        }
        Ok(heap)
    }

    /// Formats `region` as an empty heap on every replica. The region must
    /// not be in use: formatting clears the header, log array and owner table.
    pub async fn format(client: &mut Client, region: RegionId, config: HeapConfig) -> Result<Heap, TxError> {
        let size = client
            .map()
            .region(region)
            .ok_or(TxError::Fabric(fabric::FabricError::UnknownRegion { region }))?
            .size;
        let heap = Self::layout(region, size, config)?;
        let mut words = vec![0u64; (HEADER_BYTES / 8) as usize];
        words[W_MAGIC as usize] = MAGIC;
        words[W_VERSION as usize] = LAYOUT_VERSION;
        words[W_OWNER_SLOTS as usize] = heap.owner_slots;
        words[W_CHUNK_BYTES as usize] = heap.chunk_bytes;
        words[W_CHUNK_COUNT as usize] = heap.chunk_count;
        let header: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // Zero the log array and owner table in batch-sized pieces, then
        // write the header last so that a half-formatted heap has no magic.
        let zeros = vec![0u8; 256 * 1024];
        let mut at = heap.log_base();
        let end = heap.chunk_base();
        let mut batch = Batch::new();
        while at < end {
            let len = (end - at).min(zeros.len() as u64);
            batch.clear();
            let h = batch
                .on(Replica::All)
                .write(GlobalAddr::new(region, at), &zeros[..len as usize]);
            client.execute(&mut batch).await?;
            batch.done(h).map_err(TxError::Verb)?;
            at += len;
        }
        batch.clear();
        let h = batch.on(Replica::All).write(GlobalAddr::new(region, 0), &header);
        client.execute(&mut batch).await?;
        batch.done(h).map_err(TxError::Verb)?;
        Ok(heap)
    }

    /// Opens a formatted heap (reads its header from the primary).
    pub async fn open(client: &mut Client, region: RegionId) -> Result<Heap, TxError> {
        let mut batch = Batch::new();
        let h = batch.read(GlobalAddr::new(region, 0), (W_NEXT_CHUNK * 8) as u32);
        client.execute(&mut batch).await?;
        let bytes = batch.read_result(h).map_err(TxError::Verb)?;
        let w = |i: u64| le_word(bytes, i as usize * 8);
        if w(W_MAGIC) != MAGIC {
            return Err(TxError::Heap(format!(
                "region {region} is not a formatted rTX heap"
            )));
        }
        if w(W_VERSION) != LAYOUT_VERSION {
            return Err(TxError::Heap(format!(
                "region {region} has heap layout version {}, this build reads {LAYOUT_VERSION}",
                w(W_VERSION)
            )));
        }
        let owner_slots = u16::try_from(w(W_OWNER_SLOTS)).map_err(|_| TxError::Heap("owner slots".into()))?;
        let heap = Heap {
            region,
            owner_slots: u64::from(owner_slots),
            chunk_bytes: w(W_CHUNK_BYTES),
            chunk_count: w(W_CHUNK_COUNT),
        };
        let size = client.map().region(region).map_or(0, |r| r.size);
        if heap.chunk_bytes == 0 || heap.chunk_offset(heap.chunk_count) > size {
            return Err(TxError::Heap(format!(
                "region {region}: heap header does not fit the region"
            )));
        }
        Ok(heap)
    }

    /// Takes `count` consecutive chunks for `owner`, to hold `kind`, and
    /// records the ownership on every replica. Returns the first chunk's
    /// index. No chunk is used before its owner-table word is on every
    /// replica, which is what lets a promotion rebuild the counter.
    pub async fn take_chunks(
        &self,
        client: &mut Client,
        owner: OwnerId,
        count: u64,
        kind: ChunkKind,
    ) -> Result<u64, TxError> {
        let mut batch = Batch::new();
        // Every replica counts, so that a backup's counter is not as
        // formatted; the primary's old value decides.
        let h = batch.on(Replica::All).faa(self.word(W_NEXT_CHUNK), count);
        client.execute(&mut batch).await?;
        batch.done(h).map_err(TxError::Verb)?;
        let first = batch.old_value(h).map_err(TxError::Verb)?;
        // A taker stopped between the replicas' FAAs left a backup's
        // counter behind the primary's: raise it to the primary's count (a
        // CAS from what this FAA left there, so a later FAA wins over it).
        // Never lower one: a counter ahead skips chunks, which is harmless,
        // and this taker's view of the primary may be old by now (it may
        // itself have been stopped between its FAAs).
        let off: Vec<(usize, u64)> = (1..batch.completions(h).len())
            .filter_map(|i| batch.old_value_of(h, i).ok().map(|old| (i, old)))
            .filter(|&(_, old)| old < first)
            .collect();
        if !off.is_empty() {
            batch.clear();
            for &(i, old) in &off {
                batch.on(Replica::Backup(i as u8 - 1)).cas(
                    self.word(W_NEXT_CHUNK),
                    old.wrapping_add(count),
                    first.wrapping_add(count),
                );
            }
            client.execute(&mut batch).await?;
        }
        if first.saturating_add(count) > self.chunk_count {
            return Err(TxError::OutOfMemory {
                region: self.region,
                chunks: self.chunk_count,
            });
        }
        let table: Vec<u8> = (0..count)
            .flat_map(|i| self.tag_in_run(owner, kind, i).raw().to_le_bytes())
            .collect();
        batch.clear();
        let h = batch.on(Replica::All).write(
            GlobalAddr::new(self.region, self.owner_table() + first * 8),
            &table,
        );
        client.execute(&mut batch).await?;
        batch.done(h).map_err(TxError::Verb)?;
        Ok(first)
    }

    /// The tag of the `i`th chunk of a run taken for `kind`: a data block
    /// longer than a chunk continues into the chunks after its first.
    fn tag_in_run(&self, owner: OwnerId, kind: ChunkKind, i: u64) -> ChunkTag {
        match kind {
            ChunkKind::Data { block_bytes } if block_bytes > self.chunk_bytes => {
                if i % block_bytes.div_ceil(self.chunk_bytes) == 0 {
                    ChunkTag::taken(owner, kind)
                } else {
                    ChunkTag::taken(owner, ChunkKind::Continuation)
                }
            }
            _ => ChunkTag::taken(owner, kind),
        }
    }

    /// The chunks recorded as taken by `owner` (a scan of the owner table on
    /// the primary; for reclaiming a dead client's memory).
    pub async fn chunks_of(&self, client: &mut Client, owner: OwnerId) -> Result<Vec<u64>, TxError> {
        Ok(self
            .owner_table_of(client)
            .await?
            .into_iter()
            .enumerate()
            .filter(|(_, t)| t.owner() == Some(owner))
            .map(|(i, _)| i as u64)
            .collect())
    }

    /// Every owner-table word, read from the primary.
    pub async fn owner_table_of(&self, client: &mut Client) -> Result<Vec<ChunkTag>, TxError> {
        let (table, bytes) = self.owner_table_range();
        let table = client.read_range(table, bytes, Replica::Primary).await?;
        Ok(table[0]
            .chunks_exact(8)
            .map(|w| ChunkTag::from_raw(le_word(w, 0)))
            .collect())
    }

    /// Bytes of the heap in chunks taken, read from the primary: the
    /// high-water mark of what its clients have used (freed blocks are
    /// reused inside their chunks).
    pub async fn bytes_taken(&self, client: &mut Client) -> Result<u64, TxError> {
        let tags = self.owner_table_of(client).await?;
        Ok(taken(&tags) * self.chunk_bytes)
    }

    /// Rebuilds the words only a primary keeps, on a backup just promoted to
    /// primary (`client`'s map names it primary) and before any client uses
    /// the region:
    ///
    /// - the next-chunk counter, raised to one past the last chunk the
    ///   owner table records (every chunk in use is recorded on every
    ///   replica before it is used; a chunk counted but not recorded was
    ///   never used, so handing it out again is safe);
    /// - every lock word of a meta in use, set unlocked at `floor`
    ///   ([`LockWord::promotion_floor`](crate::LockWord::promotion_floor)):
    ///   locks of the lost primary vanish with it (its DOING logs are
    ///   rolled forward from the replicated logs, its INIT ones aborted),
    ///   and versions must not go backwards.
    ///
    /// Not for a region in use: it rewrites meta chunks whole.
    pub async fn restore_after_promotion(
        &self,
        client: &mut Client,
        floor: u64,
    ) -> Result<Restored, TxError> {
        if floor > crate::word::VERSION_MAX {
            return Err(TxError::Heap(format!(
                "promotion floor {floor} is not a 63-bit version"
            )));
        }
        let tags = self.owner_table_of(client).await?;
        let mut restored = Restored::default();
        let last_taken = tags.iter().rposition(|t| t.owner().is_some());
        restored.chunks_taken = taken(&tags);
        let mut batch = Batch::new();
        let h = batch.read(self.word(W_NEXT_CHUNK), 8);
        client.execute(&mut batch).await?;
        let counter = le_word(batch.read_result(h).map_err(TxError::Verb)?, 0);
        let wanted = last_taken.map_or(0, |i| i as u64 + 1).max(counter);
        if wanted != counter {
            batch.clear();
            let h = batch
                .on(Replica::All)
                .write(self.word(W_NEXT_CHUNK), &wanted.to_le_bytes());
            client.execute(&mut batch).await?;
            batch.done(h).map_err(TxError::Verb)?;
        }
        restored.next_chunk = wanted;
        let unlocked = crate::word::LockWord::unlocked(floor).raw();
        for i in meta_chunks(&tags) {
            let at = GlobalAddr::new(self.region, self.chunk_offset(i as u64));
            batch.clear();
            let h = batch.read(at, self.chunk_bytes as u32);
            client.execute(&mut batch).await?;
            let mut bytes = batch.read_result(h).map_err(TxError::Verb)?.to_vec();
            for meta in bytes.chunks_exact_mut(crate::obj::META_BYTES as usize) {
                // A meta in use has a data pointer (no block lives at
                // offset 0); an unused one stays zero.
                if le_word(meta, 8) != 0 {
                    meta[..8].copy_from_slice(&unlocked.to_le_bytes());
                    restored.lock_words += 1;
                }
            }
            batch.clear();
            let h = batch.write(at, &bytes);
            client.execute(&mut batch).await?;
            batch.done(h).map_err(TxError::Verb)?;
        }
        Ok(restored)
    }
}

impl Heap {
    /// Brings every backup's meta chunks to the (just restored) primary's
    /// where they differ: after a planned promotion the demoted primary,
    /// now a backup, may be behind the new one by writes that reached the
    /// backups and not the primary (an Opt1 commit cut off between its
    /// backup CASes and its primary CAS; the backups-first order makes the
    /// new primary the one ahead), and a backup behind its primary fails
    /// the next commit's check of every pointer CAS. Data blocks and logs
    /// need nothing: blocks are written to every replica before any
    /// pointer names them, and logs are finished by `finish_owner_log`.
    /// Lock words are not compared (a backup's are never read). Returns
    /// the metas that differed: a caller that fenced the region repeats
    /// until a pass finds none, so that a batch that passed its epoch check
    /// just before the fence and landed during a pass is caught.
    ///
    /// Not for a region in use: it rewrites meta chunks whole.
    pub async fn align_backups(&self, client: &mut Client) -> Result<u64, TxError> {
        let replicas = client.map().region(self.region).map_or(1, |r| r.replicas.len());
        let tags = self.owner_table_of(client).await?;
        let meta = crate::obj::META_BYTES as usize;
        let mut differed = 0;
        let mut batch = Batch::new();
        for i in meta_chunks(&tags) {
            let at = GlobalAddr::new(self.region, self.chunk_offset(i as u64));
            batch.clear();
            let h = batch.on(Replica::All).read(at, self.chunk_bytes as u32);
            client.execute(&mut batch).await?;
            let primary = batch.read_result_of(h, 0).map_err(TxError::Verb)?.to_vec();
            let mut stale = Vec::new();
            for b in 1..replicas {
                let copy = batch.read_result_of(h, b).map_err(TxError::Verb)?;
                // Pointers only: bytes 8..16 of each meta.
                let n = primary
                    .chunks_exact(meta)
                    .zip(copy.chunks_exact(meta))
                    .filter(|(p, c)| p[8..16] != c[8..16])
                    .count();
                if n > 0 {
                    differed += n as u64;
                    stale.push(b - 1);
                }
            }
            if stale.is_empty() {
                continue;
            }
            batch.clear();
            let writes: Vec<_> = stale
                .iter()
                .map(|&b| batch.on(Replica::Backup(b as u8)).write(at, &primary))
                .collect();
            client.execute(&mut batch).await?;
            for h in writes {
                batch.done(h).map_err(TxError::Verb)?;
            }
        }
        Ok(differed)
    }
}

/// The indexes of the chunks `tags` records as holding metas: where a
/// promotion finds every meta.
fn meta_chunks(tags: &[ChunkTag]) -> impl Iterator<Item = usize> + '_ {
    tags.iter()
        .enumerate()
        .filter(|(_, t)| t.kind() == Some(ChunkKind::Metas))
        .map(|(i, _)| i)
}

/// Bytes of the reclaim area for `owner_slots` ids: a runs head per id,
/// padded to a page.
fn reclaim_area_bytes(owner_slots: u64) -> u64 {
    (owner_slots * 8).next_multiple_of(HEADER_BYTES)
}

/// Chunks `tags` records as taken.
fn taken(tags: &[ChunkTag]) -> u64 {
    tags.iter().filter(|t| t.owner().is_some()).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_tag_encoding_is_bit_exact() {
        assert_eq!(ChunkTag::from_raw(0).owner(), None);
        assert_eq!(ChunkTag::from_raw(0).kind(), None);
        let kind = ChunkKind::Data { block_bytes: 1024 };
        let data = ChunkTag::taken(0, kind);
        assert_eq!(data.raw(), (128 << 16) | 1);
        assert_eq!((data.owner(), data.kind()), (Some(0), Some(kind)));
        assert_eq!(data.block_bytes(), Some(1024));
        let largest = ChunkKind::Data {
            block_bytes: BLOCK_BYTES_MAX,
        };
        assert_eq!(ChunkTag::taken(0, largest).raw(), (0xFF_FFFF << 16) | 1);
        assert_eq!(ChunkTag::taken(0, largest).kind(), Some(largest));
        let cont = ChunkTag::taken(5, ChunkKind::Continuation);
        assert_eq!(cont.raw(), (1 << 61) | 6);
        assert_eq!(cont.kind(), Some(ChunkKind::Continuation));
        assert_eq!(cont.block_bytes(), None);
        let raw = ChunkTag::taken(5, ChunkKind::Raw);
        assert_eq!(raw.raw(), (1 << 62) | 6);
        assert_eq!(raw.kind(), Some(ChunkKind::Raw));
        let sealed = ChunkTag::taken(5, ChunkKind::Sealed);
        assert_eq!(sealed.raw(), (1 << 60) | 6);
        assert_eq!(
            (sealed.kind(), sealed.block_bytes()),
            (Some(ChunkKind::Sealed), None)
        );
        let metas = ChunkTag::taken(crate::word::OWNER_MAX, ChunkKind::Metas);
        assert_eq!(metas.raw(), (1 << 63) | 0x8000);
        assert_eq!(
            (metas.owner(), metas.kind()),
            (Some(crate::word::OWNER_MAX), Some(ChunkKind::Metas))
        );
    }
}
