//! RACE hashing on disaggregated memory, after RACE (ATC '21) as FUSEE
//! implements it.
//!
//! A directory of subtables (extendible hashing) that clients cache and
//! refresh when a bucket header tells them their copy is stale; bucket
//! groups `[main, overflow, main]`; 8-byte slots naming out-of-place KV
//! blocks (`layout.rs`); both candidate combined buckets read in one round
//! trip; lock-free insert, update and delete by one CAS on a slot, with
//! RACE's re-read after it (`ops.rs`); a full subtable splits in two
//! (`split.rs`).
//!
//! The variants differ in how a split keeps the common path consistent:
//! - `optimal` (the original): the split locks every bucket header of the
//!   subtable, moves each entry with two CASes and unlocks. Writers see the
//!   lock in the headers they read anyway. A splitter that dies leaves the
//!   subtable locked for good.
//! - `rtx`: the subtable and the directory are TXObjs. A split builds both
//!   halves out of place and installs them with one rTX; the common path
//!   stays lock-free and adds one 16-byte READ of the subtable's meta (the
//!   lease check, the paper's Opt2), and a writer READs it again after its
//!   CAS. A split that dies is repaired by the next client that meets it.
//! - `dtx` (the FORD-style baseline): the subtable and the directory are
//!   DTX *pointer records* (`txn::dtx`): a lock word, a version word and
//!   one data word naming an out-of-place block, as FORD locks a pointer
//!   and then fetches a variable-size record. The common path is rtx's with
//!   the 24-byte record in place of the 16-byte meta; a split is one DTX
//!   transaction that writes fresh blocks and swings both pointers. A split
//!   that dies blocks writers of its subtable until recovery rolls its log
//!   back (nobody but recovery acts on a DTX lock).

mod check;
pub mod layout;
mod load;
mod ops;
mod replicate;
mod split;
mod wait;

use fabric::le_word;
use std::collections::HashMap;

use fabric::{Batch, Client, GlobalAddr, Replica};
use txn::dtx::record::{Record, Version, HEADER_BYTES, RECORD_ALIGN};
use txn::dtx::DtxClient;
use txn::{BlockAllocator, DataPtr, Heap, LockWord, RawObj, TxClient, TxConfig};

pub use check::HashCheckReport;
pub use load::{load_depth, HashLoadReport, LOAD_FILL};
pub use split::CRASH_SPLIT_MIDWAY;
pub use wait::attempts_waiting;

use crate::btree::Variant;
use crate::error::IndexError;
use layout::{dir_entries, Geometry, Header, DIR_DEPTH_MAX, GROUPS_MAX};

/// Heap root slots a table uses (a B+tree uses 0..3 of the same heap).
const VARIANT_SLOT: usize = 8;
const GEOMETRY_SLOT: usize = 9;
const DIR_SLOT: usize = 10;

/// Attempts of one operation before it gives up.
pub const ATTEMPTS_MAX: u32 = 100_000;

/// Entries an optimal split handles per round trip unless told otherwise
/// ([`HashTable::set_split_entries_per_round_trip`]): one, so that each
/// entry's key READ, CAS in and CAS out are each awaited before the next
/// verb, as the original RACE resize moves entries one at a time (the rTX
/// paper's baseline; so do the public RACE implementations). It holds for
/// every optimal split, the ones inserts make as well as `grow`'s.
pub const SPLIT_ENTRIES_PER_ROUND_TRIP_DEFAULT: usize = 1;

/// A table's shape, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashConfig {
    /// Bucket groups per subtable (1..=`GROUPS_MAX`). The default, 512
    /// groups, is 96 KiB and 10,752 slots per subtable.
    pub groups: u32,
    /// Directory depth (1..=`DIR_DEPTH_MAX`): at most 2^depth subtables.
    /// The default, 12, holds 44 M slots.
    pub dir_depth: u8,
}

impl Default for HashConfig {
    fn default() -> Self {
        HashConfig {
            groups: 512,
            dir_depth: 12,
        }
    }
}

impl HashConfig {
    /// The smallest default-shaped table that holds `keys` keys at the load
    /// a split leaves behind (about half full).
    pub fn for_keys(keys: u64) -> HashConfig {
        let mut c = HashConfig::default();
        let slots = Geometry { groups: c.groups }.slots();
        while c.dir_depth < DIR_DEPTH_MAX && (slots << c.dir_depth) / 2 < keys {
            c.dir_depth += 1;
        }
        c
    }

    fn check(self) -> Result<(), IndexError> {
        if self.groups == 0 || self.groups > GROUPS_MAX {
            return Err(IndexError::Layout(format!(
                "groups must be between 1 and {GROUPS_MAX}, not {}",
                self.groups
            )));
        }
        if self.dir_depth == 0 || self.dir_depth > DIR_DEPTH_MAX {
            return Err(IndexError::Layout(format!(
                "dir_depth must be between 1 and {DIR_DEPTH_MAX}, not {}",
                self.dir_depth
            )));
        }
        Ok(())
    }
}

/// Where a table is and how it is shaped: what a client needs to attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// The variant.
    pub variant: Variant,
    /// The shape.
    pub config: HashConfig,
    /// The directory: its block (optimal), its TXObj meta (rtx) or its
    /// pointer record (dtx).
    pub dir: GlobalAddr,
}

/// Counters of one table client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HashStats {
    /// Attempts that were retried (a CAS lost, a stale directory entry).
    pub retries: u64,
    /// Directory reloads after a header said the cached entry was stale.
    pub dir_reloads: u64,
    /// Splits this client performed.
    pub splits: u64,
    /// Writes whose CAS met a split and had to be checked after it.
    pub settled: u64,
    /// Duplicate inserts of one key resolved after the re-read.
    pub duplicates: u64,
    /// Slot CASes carried to the backups (rtx with replicas).
    pub slot_replications: u64,
    /// Slot replications sent again after a backup did not answer
    /// (`replicate.rs`, `UNANSWERED_WAIT_MAX`).
    pub slot_replications_resent: u64,
    /// Backup slots found holding another writer's value and converged to
    /// the primary's (`replicate.rs`).
    pub slot_convergences: u64,
    /// Bytes of KV chunk tails the owner id's earlier holders left
    /// unwritten that this client carves (`txn::BlockAllocator::sealed`).
    pub kv_tail_bytes_adopted: u64,
}

/// How a client reaches DM.
#[derive(Debug)]
enum Engine {
    Optimal(Client),
    Rtx(Box<TxClient>),
    Dtx(Box<DtxClient>),
}

impl Engine {
    fn fabric(&mut self) -> &mut Client {
        match self {
            Engine::Optimal(c) => c,
            Engine::Rtx(c) => c.fabric(),
            Engine::Dtx(c) => c.fabric(),
        }
    }
}

/// Data bytes of a dtx pointer record: one [`DataPtr`] word.
const POINTER_BYTES: u32 = 8;

/// What guards a subtable or the directory of an rtx or dtx table, read in
/// one verb (before the buckets on the common path): rtx's TXObj meta
/// `[lock, data pointer]`, dtx's pointer record `[lock, version, data
/// pointer]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Guard {
    /// Held by a split (rtx: until its lease ends, then repairable; dtx:
    /// until it releases or recovery rolls its log).
    pub lock: LockWord,
    /// dtx: the record's version word; 0 (visible) for rtx.
    pub version: u64,
    /// Where the block is. Every block a guard ever names was written whole
    /// before the guard named it, and is never changed in place by a split.
    pub dptr: DataPtr,
}

impl Guard {
    /// Bytes of `variant`'s guard, read in one verb.
    fn bytes(variant: Variant) -> u32 {
        match variant {
            Variant::Dtx => (HEADER_BYTES + u64::from(POINTER_BYTES)) as u32,
            Variant::Optimal | Variant::Rtx => txn::META_BYTES as u32,
        }
    }

    /// Decodes `variant`'s guard from the bytes of one READ of
    /// [`Guard::bytes`].
    pub(crate) fn decode(variant: Variant, b: &[u8]) -> Guard {
        match variant {
            Variant::Dtx => Guard {
                lock: LockWord::from_raw(le_word(b, 0)),
                version: le_word(b, 8),
                dptr: DataPtr::from_raw(le_word(b, 16)),
            },
            Variant::Optimal | Variant::Rtx => Guard {
                lock: LockWord::from_raw(le_word(b, 0)),
                version: 0,
                dptr: DataPtr::from_raw(le_word(b, 8)),
            },
        }
    }

    /// dtx: the pointer is being written (a split's commit, not yet
    /// released). Never for rtx.
    fn is_invisible(&self) -> bool {
        matches!(Version::from_raw(self.version), Version::Invisible(_))
    }

    /// Whether it stops an attempt at `now`: rtx stops writers at a held
    /// lock and everyone at an expired one (to repair it); dtx stops
    /// writers at a held lock and everyone at an invisible pointer (FORD's
    /// reader rule; there is nothing to repair).
    pub(crate) fn stops(&self, variant: Variant, write: bool, now: u64) -> bool {
        match variant {
            Variant::Dtx => self.is_invisible() || (write && self.lock.is_locked()),
            Variant::Optimal | Variant::Rtx => self.lock.is_locked() && (write || self.lock.is_expired(now)),
        }
    }

    /// No split holds it, and (dtx) its pointer is visible.
    pub(crate) fn is_free(&self) -> bool {
        !self.lock.is_locked() && !self.is_invisible()
    }
}

/// One client of a RACE hash table (one per thread or coroutine).
#[derive(Debug)]
pub struct HashTable {
    engine: Engine,
    heap: Heap,
    owner: u16,
    info: TableInfo,
    geometry: Geometry,
    /// KV blocks (both variants) and optimal's subtables.
    alloc: Box<BlockAllocator>,
    /// A KV block written by an attempt that did not publish it: the next
    /// write reuses it (nobody else can have seen it).
    spare_kv: Option<u64>,
    /// The cached directory.
    dir: Vec<u64>,
    /// rtx and dtx: each subtable's data block as last seen, by guard.
    data_of: HashMap<u64, DataPtr>,
    /// dtx: this client's two directory blocks, taken at its first split
    /// (`split.rs`).
    dir_ring: Option<[GlobalAddr; 2]>,
    stats: HashStats,
    attempts_max: u32,
    /// optimal: entries per round trip in a split (`split.rs`).
    split_entries_per_round_trip: usize,
}

/// A subtable as a client reaches it: its ref and where its buckets are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    /// The directory's word for it: block (optimal), meta (rtx) or pointer
    /// record (dtx).
    pub sub: u64,
    /// The start of its buckets.
    pub base: GlobalAddr,
    /// rtx and dtx: the data pointer `base` came from.
    pub dptr: Option<DataPtr>,
}

impl HashTable {
    /// Creates an empty table of `variant` in `heap` (whose named roots
    /// 8..11 it takes) and returns a client of it running as `owner`.
    pub async fn create(
        fabric: Client,
        heap: Heap,
        variant: Variant,
        owner: u16,
        config: HashConfig,
    ) -> Result<HashTable, IndexError> {
        config.check()?;
        let geometry = Geometry {
            groups: config.groups,
        };
        let first = geometry.empty_subtable(Header::new(0, 0));
        let mut t = match variant {
            Variant::Optimal => {
                let mut alloc = BlockAllocator::raw(heap, owner);
                let mut fabric = fabric;
                let sub = alloc.data(&mut fabric, first.len() as u32).await?;
                let sub = GlobalAddr::new(heap.region(), sub);
                let dir_words = vec![sub.raw(); 1 << config.dir_depth];
                let dir = alloc.data(&mut fabric, dir_bytes(config.dir_depth)).await?;
                let dir = GlobalAddr::new(heap.region(), dir);
                let mut batch = Batch::new();
                let a = batch.on(Replica::All).write(sub, &first);
                let b = batch.on(Replica::All).write(dir, &words_bytes(&dir_words));
                fabric.execute(&mut batch).await?;
                batch.done(a).map_err(IndexError::Verb)?;
                batch.done(b).map_err(IndexError::Verb)?;
                let info = TableInfo { variant, config, dir };
                HashTable::with_engine(Engine::Optimal(fabric), heap, owner, info, alloc)
            }
            Variant::Rtx => {
                let mut c = TxClient::new(fabric, heap, owner, TxConfig::default())?;
                // A split retires the subtable it replaces (a writer's slot
                // CAS may still land in it): no reclaim may hand it out.
                heap.mark_retiring(c.fabric()).await?;
                let sub = c.create_raw(&first).await?.meta;
                let dir_words = vec![sub.raw(); 1 << config.dir_depth];
                let dir = c.create_raw(&words_bytes(&dir_words)).await?.meta;
                let info = TableInfo { variant, config, dir };
                let alloc = BlockAllocator::raw(heap, owner);
                HashTable::with_engine(Engine::Rtx(Box::new(c)), heap, owner, info, alloc)
            }
            Variant::Dtx => {
                let mut c = DtxClient::new(fabric, heap, owner, TxConfig::default())?;
                let mut alloc = BlockAllocator::raw(heap, owner);
                let sub = write_block(c.fabric(), &mut alloc, heap, &first).await?;
                let sub = c.create_raw(&pointer_bytes(sub)).await?.addr;
                let dir_words = vec![sub.raw(); 1 << config.dir_depth];
                let dir = write_block(c.fabric(), &mut alloc, heap, &words_bytes(&dir_words)).await?;
                let dir = c.create_raw(&pointer_bytes(dir)).await?.addr;
                let info = TableInfo { variant, config, dir };
                HashTable::with_engine(Engine::Dtx(Box::new(c)), heap, owner, info, alloc)
            }
        };
        let geometry_word = u64::from(config.groups) << 8 | u64::from(config.dir_depth);
        t.set_root(VARIANT_SLOT, variant_tag(variant)).await?;
        t.set_root(GEOMETRY_SLOT, geometry_word).await?;
        // The directory slot last: a table is there once it is.
        t.set_root(DIR_SLOT, t.info.dir.raw()).await?;
        t.reload_dir().await?;
        Ok(t)
    }

    /// Opens the table in `heap` as `owner`.
    pub async fn open(
        fabric: Client,
        heap: Heap,
        owner: u16,
        config: TxConfig,
    ) -> Result<HashTable, IndexError> {
        let mut fabric = fabric;
        let info = Self::read_info(&mut fabric, &heap).await?;
        Self::attach(fabric, heap, owner, config, info).await
    }

    /// What a client must know to use the table in `heap` (read from its roots).
    pub async fn read_info(fabric: &mut Client, heap: &Heap) -> Result<TableInfo, IndexError> {
        let mut batch = Batch::new();
        let hs: Vec<_> = [VARIANT_SLOT, GEOMETRY_SLOT, DIR_SLOT]
            .iter()
            .map(|&s| batch.read(heap.root(s), 8))
            .collect();
        fabric.execute(&mut batch).await?;
        let mut w = [0u64; 3];
        for (i, h) in hs.into_iter().enumerate() {
            w[i] = le_word(batch.read_result(h).map_err(IndexError::Verb)?, 0);
        }
        let none = || IndexError::Layout(format!("region {} holds no hash table", heap.region()));
        let variant = variant_from_tag(w[0]).ok_or_else(none)?;
        if w[2] == 0 {
            return Err(none());
        }
        let config = HashConfig {
            groups: u32::try_from(w[1] >> 8).map_err(|_| none())?,
            dir_depth: (w[1] & 0xff) as u8,
        };
        config.check()?;
        let dir = GlobalAddr::from_raw(w[2]);
        if variant == Variant::Dtx && dir.offset() % RECORD_ALIGN != 0 {
            return Err(IndexError::Corrupt(format!(
                "region {}: the directory record {dir:?} is not {RECORD_ALIGN}-byte aligned",
                heap.region()
            )));
        }
        Ok(TableInfo { variant, config, dir })
    }

    /// A client of a table whose info is known: reads the directory.
    pub async fn attach(
        fabric: Client,
        heap: Heap,
        owner: u16,
        config: TxConfig,
        info: TableInfo,
    ) -> Result<HashTable, IndexError> {
        info.config.check()?;
        let engine = match info.variant {
            Variant::Optimal => Engine::Optimal(fabric),
            Variant::Rtx => Engine::Rtx(Box::new(TxClient::new(fabric, heap, owner, config)?)),
            Variant::Dtx => Engine::Dtx(Box::new(DtxClient::new(fabric, heap, owner, config)?)),
        };
        let alloc = BlockAllocator::raw(heap, owner);
        let mut t = HashTable::with_engine(engine, heap, owner, info, alloc);
        t.reload_dir().await?;
        Ok(t)
    }

    fn with_engine(
        engine: Engine,
        heap: Heap,
        owner: u16,
        info: TableInfo,
        alloc: BlockAllocator,
    ) -> HashTable {
        HashTable {
            engine,
            heap,
            owner,
            geometry: Geometry {
                groups: info.config.groups,
            },
            info,
            alloc: Box::new(alloc),
            spare_kv: None,
            dir: Vec::new(),
            data_of: HashMap::new(),
            dir_ring: None,
            stats: HashStats::default(),
            attempts_max: ATTEMPTS_MAX,
            split_entries_per_round_trip: SPLIT_ENTRIES_PER_ROUND_TRIP_DEFAULT,
        }
    }

    /// This table's info, for [`HashTable::attach`].
    pub fn info(&self) -> TableInfo {
        self.info
    }

    /// Bytes of one subtable (the data of an rtx subtable's meta, the block
    /// a dtx subtable's record points at).
    pub fn subtable_bytes(&self) -> u64 {
        self.geometry.subtable_bytes()
    }

    /// The variant.
    pub fn variant(&self) -> Variant {
        self.info.variant
    }

    /// The owner id this client runs as.
    pub fn owner(&self) -> u16 {
        self.owner
    }

    /// The heap the table lives in.
    pub fn heap(&self) -> Heap {
        self.heap
    }

    /// Counters.
    pub fn stats(&self) -> HashStats {
        HashStats {
            kv_tail_bytes_adopted: self.alloc.counts().tail_bytes_adopted,
            ..self.stats
        }
    }

    /// Transaction counters (rtx: rTX's, dtx: the DTX client's).
    pub fn tx_stats(&self) -> Option<txn::TxStats> {
        match &self.engine {
            Engine::Rtx(c) => Some(c.stats()),
            Engine::Dtx(c) => Some(c.stats()),
            Engine::Optimal(_) => None,
        }
    }

    /// The rTX client the table's writes run on (rtx only): transactions
    /// over other objects of the same heap run on it too, under the same
    /// owner id and log slot.
    pub fn tx_client(&mut self) -> Option<&mut TxClient> {
        match &mut self.engine {
            Engine::Rtx(c) => Some(c),
            Engine::Optimal(_) | Engine::Dtx(_) => None,
        }
    }

    /// The fabric client (for its counters).
    pub fn fabric(&mut self) -> &mut Client {
        self.engine.fabric()
    }

    /// Sends what this client owes before it goes idle: a dtx client's
    /// deferred releases (a split releases at once, so this is a safety
    /// net); nothing for the other variants.
    pub async fn flush(&mut self) -> Result<(), IndexError> {
        if let Engine::Dtx(c) = &mut self.engine {
            c.release_pending().await?;
        }
        Ok(())
    }

    /// A fresh block of `len` bytes from this client's allocator
    /// (optimal's subtables); returns its region offset.
    pub(crate) async fn alloc_data(&mut self, len: u32) -> Result<u64, IndexError> {
        Ok(self.alloc.data(self.engine.fabric(), len).await?)
    }

    /// A fresh block for `len` bytes of KV blocks back to back; returns its
    /// region offset. Sealed (`BlockAllocator::sealed`): every KV block
    /// ends in its check word, which is odd, so the unwritten tail of this
    /// client's chunk goes to the next holder of its owner id.
    pub(crate) async fn alloc_kv(&mut self, len: u32) -> Result<u64, IndexError> {
        debug_assert_eq!(len % layout::KV_BYTES, 0, "KV blocks are whole");
        Ok(self.alloc.sealed(self.engine.fabric(), len).await?)
    }

    /// Bounds retries and lock waits (crash exploration makes blocked
    /// writers give up quickly).
    pub fn set_attempts_max(&mut self, attempts: u32) {
        self.attempts_max = attempts.max(1);
    }

    /// How many entries an optimal split of this client handles per round
    /// trip (their key READs, then their CASes in, then out), clamped to
    /// 1..=`VERBS_PER_BATCH_MAX`. The default,
    /// [`SPLIT_ENTRIES_PER_ROUND_TRIP_DEFAULT`], is the original resize's
    /// one; more batches them, which is safe because the split holds every
    /// bucket header of the subtable locked (`split.rs`). rtx ignores it:
    /// its split reads the keys in full batches and writes whole subtables.
    pub fn set_split_entries_per_round_trip(&mut self, entries: usize) {
        self.split_entries_per_round_trip = entries.clamp(1, fabric::VERBS_PER_BATCH_MAX);
    }

    /// The cached directory's entry for directory hash `h`.
    fn dir_entry(&self, h: u64) -> u64 {
        self.dir[(h & ((1 << self.info.config.dir_depth) - 1)) as usize]
    }

    /// The rtx directory object.
    fn dir_obj(&self) -> RawObj {
        RawObj {
            meta: self.info.dir,
            len: dir_bytes(self.info.config.dir_depth),
        }
    }

    /// The rtx object of subtable meta `sub`.
    fn sub_obj(&self, sub: u64) -> RawObj {
        RawObj {
            meta: GlobalAddr::from_raw(sub),
            len: self.geometry.subtable_bytes() as u32,
        }
    }

    /// The dtx directory's pointer record.
    fn dir_record(&self) -> Record {
        Record::new(self.info.dir, POINTER_BYTES)
    }

    /// The dtx pointer record of subtable `sub`.
    fn sub_record(sub: u64) -> Record {
        Record::new(GlobalAddr::from_raw(sub), POINTER_BYTES)
    }

    /// Whether subtables and the directory sit behind guards (rtx's metas,
    /// dtx's pointer records) rather than in place (optimal).
    fn guarded(&self) -> bool {
        self.info.variant != Variant::Optimal
    }

    /// The rtx objects the table is made of now, each with the bytes of its
    /// data: the directory and every subtable the directory names, read
    /// afresh. For checkers that compare replicas object by object: a meta
    /// that is no longer part of the table (one an aborted split created)
    /// may name a block since reused and retired, which need not agree.
    /// Empty for an optimal table (it has no objects), and for a dtx one:
    /// its pointer records are not TXObjs (replicas of their blocks are
    /// not compared object by object; the checker compares the KV blocks).
    pub async fn objects(&mut self) -> Result<HashMap<GlobalAddr, u32>, IndexError> {
        if self.info.variant != Variant::Rtx {
            return Ok(HashMap::new());
        }
        let dir = self.dir_obj();
        let mut objects: HashMap<GlobalAddr, u32> = self
            .subtables()
            .await?
            .into_iter()
            .map(|sub| {
                let o = self.sub_obj(sub);
                (o.meta, o.len)
            })
            .collect();
        objects.insert(dir.meta, dir.len);
        Ok(objects)
    }

    /// Every distinct subtable the directory names, read afresh.
    pub(crate) async fn subtables(&mut self) -> Result<Vec<u64>, IndexError> {
        self.reload_dir().await?;
        let mut subs = self.dir.clone();
        subs.sort_unstable();
        subs.dedup();
        Ok(subs)
    }

    /// Reads the whole directory into the cache.
    pub(crate) async fn reload_dir(&mut self) -> Result<(), IndexError> {
        if self.info.variant == Variant::Dtx {
            return self.reload_dir_dtx().await;
        }
        let region = self.heap.region();
        let block = if self.guarded() {
            let guard = self.read_guard(self.info.dir).await?;
            GlobalAddr::new(region, guard.dptr.offset())
        } else {
            self.info.dir
        };
        let len = dir_bytes(self.info.config.dir_depth);
        let mut batch = self.fabric().take_batch();
        let h = batch.read(block, len);
        let r = self.fabric().execute(&mut batch).await;
        let cached = r.map_err(IndexError::from).and_then(|()| {
            let b = batch.read_result(h).map_err(IndexError::Verb)?;
            self.cache_dir(b)
        });
        self.fabric().give_batch(batch);
        cached
    }

    /// [`HashTable::reload_dir`] for dtx: the block the record names, with
    /// the record read again after it in the same batch, until the two
    /// reads agree. Directory blocks are reused (`split.rs`), but never
    /// while the record names them, and every commit moves the record's
    /// version on: equal reads mean the block was not rewritten in between.
    /// The pointer is followed even while a split's commit writes it: both
    /// the block it named and the one it names now are whole directories.
    async fn reload_dir_dtx(&mut self) -> Result<(), IndexError> {
        let region = self.heap.region();
        let len = dir_bytes(self.info.config.dir_depth);
        let at = self.info.dir;
        let mut guard = self.read_guard(at).await?;
        for _ in 0..self.attempts_max {
            let block = GlobalAddr::new(region, guard.dptr.offset());
            let mut batch = self.fabric().take_batch();
            let h = batch.read(block, len);
            let g = batch.read(at, Guard::bytes(Variant::Dtx));
            let r = self.fabric().execute(&mut batch).await;
            let read = r.map_err(IndexError::from).and_then(|()| {
                let again = Guard::decode(Variant::Dtx, batch.read_result(g).map_err(IndexError::Verb)?);
                if again != guard {
                    return Ok(Some(again));
                }
                let b = batch.read_result(h).map_err(IndexError::Verb)?;
                self.cache_dir(b).map(|()| None)
            });
            self.fabric().give_batch(batch);
            match read? {
                None => return Ok(()),
                Some(again) => guard = again,
            }
        }
        Err(IndexError::TooManyAttempts(self.attempts_max))
    }

    /// Caches the directory bytes `dir`, once every entry names a subtable
    /// in the table's region.
    pub(crate) fn cache_dir(&mut self, dir: &[u8]) -> Result<(), IndexError> {
        let region = self.heap.region();
        let words: Vec<u64> = (0..dir.len() / 8).map(|i| le_word(dir, i * 8)).collect();
        // A dtx subtable is a record: `Record::new` asserts its alignment,
        // so a misaligned word must stop here as corrupt, not panic there.
        let records = self.info.variant == Variant::Dtx;
        let misaligned = |w: u64| records && GlobalAddr::from_raw(w).offset() % RECORD_ALIGN != 0;
        if let Some(w) = words
            .iter()
            .find(|&&w| GlobalAddr::from_raw(w).region() != region || w == 0 || misaligned(w))
        {
            return Err(IndexError::Corrupt(format!(
                "the directory names subtable {w:#x}, outside region {region}"
            )));
        }
        self.dir = words;
        Ok(())
    }

    /// Reads the guard (rtx meta, dtx pointer record) at `at`.
    pub(crate) async fn read_guard(&mut self, at: GlobalAddr) -> Result<Guard, IndexError> {
        let variant = self.info.variant;
        let mut batch = self.fabric().take_batch();
        let h = batch.read(at, Guard::bytes(variant));
        let r = self.fabric().execute(&mut batch).await;
        let out = r.map_err(IndexError::from).and_then(|()| {
            let b = batch.read_result(h).map_err(IndexError::Verb)?;
            Ok(Guard::decode(variant, b))
        });
        self.fabric().give_batch(batch);
        out
    }

    /// Where subtable `sub`'s buckets are: its block (optimal), or the data
    /// block last seen behind its guard (rtx, dtx; one READ the first time).
    pub(crate) async fn locate(&mut self, sub: u64) -> Result<Loc, IndexError> {
        let region = self.heap.region();
        if !self.guarded() {
            return Ok(Loc {
                sub,
                base: GlobalAddr::from_raw(sub),
                dptr: None,
            });
        }
        let dptr = match self.data_of.get(&sub) {
            Some(&d) => d,
            None => {
                let d = self.read_guard(GlobalAddr::from_raw(sub)).await?.dptr;
                self.data_of.insert(sub, d);
                d
            }
        };
        Ok(Loc {
            sub,
            base: GlobalAddr::new(region, dptr.offset()),
            dptr: Some(dptr),
        })
    }

    async fn set_root(&mut self, slot: usize, value: u64) -> Result<(), IndexError> {
        let at = self.heap.root(slot);
        let mut batch = Batch::new();
        let h = batch.on(Replica::All).write(at, &value.to_le_bytes());
        self.fabric().execute(&mut batch).await?;
        batch.done(h).map_err(IndexError::Verb)
    }

    /// The directory's cached entries that name subtable `(depth, suffix)`:
    /// for tests and the checker.
    pub(crate) fn covered(&self, local_depth: u8, suffix: u64) -> impl Iterator<Item = u64> {
        dir_entries(self.info.config.dir_depth, local_depth, suffix)
    }
}

/// Bytes of a directory of `depth`.
fn dir_bytes(depth: u8) -> u32 {
    8 << depth
}

fn words_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The data of a dtx pointer record naming the block at `block`. Blocks
/// are never reused, so the offset alone tells one from another.
fn pointer_bytes(block: GlobalAddr) -> [u8; POINTER_BYTES as usize] {
    DataPtr::new(0, block.offset()).raw().to_le_bytes()
}

/// Writes `bytes` to every replica of a fresh block from `alloc` (never
/// reused: see `BlockAllocator::raw`) and returns its address.
async fn write_block(
    fabric: &mut Client,
    alloc: &mut BlockAllocator,
    heap: Heap,
    bytes: &[u8],
) -> Result<GlobalAddr, IndexError> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| IndexError::Layout(format!("a block of {} bytes is too large", bytes.len())))?;
    let at = GlobalAddr::new(heap.region(), alloc.data(fabric, len).await?);
    let mut batch = Batch::new();
    let h = batch.on(Replica::All).write(at, bytes);
    fabric.execute(&mut batch).await?;
    batch.done(h).map_err(IndexError::Verb)?;
    Ok(at)
}

fn variant_tag(v: Variant) -> u64 {
    // Distinct from the B+tree's tags, so that one heap's roots never pass
    // for the other index.
    match v {
        Variant::Optimal => 0x4841_5348_0001,
        Variant::Rtx => 0x4841_5348_0002,
        Variant::Dtx => 0x4841_5348_0003,
    }
}

fn variant_from_tag(tag: u64) -> Option<Variant> {
    match tag {
        0x4841_5348_0001 => Some(Variant::Optimal),
        0x4841_5348_0002 => Some(Variant::Rtx),
        0x4841_5348_0003 => Some(Variant::Dtx),
        _ => None,
    }
}
