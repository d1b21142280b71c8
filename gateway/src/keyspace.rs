//! Redis keys and values on a kintsugi index: one [`Keyspace`] per index
//! handle (one owner id), every write one rTX over the buckets it touches.
//!
//! A key lives in the bucket the index maps its hash to
//! ([`crate::bucket`]). A key's first write creates its bucket outside any
//! transaction and inserts it into the index (an index rTX of its own);
//! the bucket is empty until the write's own rTX fills it, so a gateway
//! killed in between leaves an empty bucket and no half-written key. Every
//! operation after that is one rTX over buckets: MSET's keys change
//! together or not at all, INCR reads and writes in one transaction, and
//! a lock a dead gateway left is repaired by the next transaction to meet
//! it (its log says whether to roll it forward or back). Reads are rTXs
//! too, validated at commit: MGET is a snapshot.
//!
//! A bucket is never removed from the index (a DEL empties it): a writer
//! that looked the bucket up just before could otherwise write into a
//! bucket nobody finds.

use std::collections::BTreeMap;

use bytes::Bytes;

use cluster::{Table, Tree, Written};
use fabric::{Batch, GlobalAddr, RegionId};
use index::IndexError;
use txn::{DataPtr, LockWord, MetaHint, RawObj, Tx, TxClient, TxError, META_BYTES};

use crate::bucket::{
    class_bytes, class_for, index_key, Bucket, BucketError, BucketRef, CLASSES, ENTRY_HEADER_BYTES,
    FORWARDS_MAX, HEADER_BYTES, KEY_BYTES_MAX, VALUE_BYTES_MAX,
};

/// Keys one write may change: each key's bucket is one entry of the
/// transaction's log (`txn::log::LOG_ENTRIES_MAX` entries), and a bucket that
/// outgrows its class takes a second.
pub const WRITE_KEYS_MAX: usize = txn::log::LOG_ENTRIES_MAX / 2;

// redis-benchmark's MSET names 10 keys.
const _: () = assert!(WRITE_KEYS_MAX >= 10);

/// Keys one read may name (MGET, EXISTS): a bound on one request's work.
pub const READ_KEYS_MAX: usize = 1024;

/// Bytes of keys and values one write may carry: with buckets rounded up
/// to twice that and three replicas, the commit's batch stays under the
/// fabric's `BATCH_BYTES_MAX` (1 MiB).
pub const WRITE_BYTES_MAX: usize = 128 * 1024;

/// Index entries one SCAN call reads at most, whatever its COUNT.
pub const SCAN_COUNT_MAX: usize = 1024;

/// What a keyspace operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum KeyspaceError {
    /// The index or a transaction failed (after the handle's retries).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A key past [`KEY_BYTES_MAX`].
    #[error("key of {0} bytes is longer than the limit of {KEY_BYTES_MAX}")]
    KeyTooLong(usize),
    /// A value past [`VALUE_BYTES_MAX`].
    #[error("value of {0} bytes is larger than the limit of {VALUE_BYTES_MAX}")]
    ValueTooLarge(usize),
    /// More keys than one request may name.
    #[error("{keys} keys in one command; the limit is {max}")]
    TooManyKeys {
        /// Keys named.
        keys: usize,
        /// The limit.
        max: usize,
    },
    /// More bytes than one write may carry.
    #[error("{bytes} bytes of keys and values in one write; the limit is {WRITE_BYTES_MAX}")]
    TooManyBytes {
        /// Bytes carried.
        bytes: usize,
    },
    /// INCR on a value that is not a decimal i64.
    #[error("value is not an integer or out of range")]
    NotInteger,
    /// INCR past i64.
    #[error("increment or decrement would overflow")]
    Overflow,
    /// Keys whose hashes collide outgrew the largest bucket.
    #[error("the keys sharing this key's bucket outgrew its largest class ({} bytes)", class_bytes(CLASSES - 1))]
    BucketFull,
    /// DM holds a bucket or reference this code never writes.
    #[error(transparent)]
    Corrupt(#[from] BucketError),
    /// The index is not rtx: only rTX makes a gateway's writes repairable.
    #[error("index {0:?} is not rtx: the gateway serves rtx indexes only")]
    NotRtx(String),
}

/// What SET requires of the key before it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Write whatever is there.
    Always,
    /// NX: only if absent.
    IfAbsent,
    /// XX: only if present.
    IfPresent,
}

/// The index handle a keyspace runs on.
#[derive(Debug)]
pub enum Handle {
    /// A B+tree: SCAN is its range scan.
    Tree(Tree),
    /// A RACE hash table: SCAN reads the whole table.
    Table(Table),
}

impl Handle {
    /// The index's rTX client (`None`: the index is not rtx).
    fn tx_client(&mut self) -> Option<&mut TxClient> {
        match self {
            Handle::Tree(t) => t.inner().tx_client(),
            Handle::Table(t) => t.inner().tx_client(),
        }
    }
}

/// Counters of one keyspace, for INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// rTX commits (the index's own and the buckets').
    pub commits: u64,
    /// rTX aborts.
    pub aborts: u64,
    /// Expired locks of others repaired.
    pub repairs: u64,
    /// Fabric round trips.
    pub round_trips: u64,
    /// Verbs of every kind.
    pub verbs: u64,
    /// Operations run again by the handle (map changes, lost connections).
    pub retries: u64,
    /// Buckets created for new keys.
    pub buckets_created: u64,
    /// Buckets moved to a larger class.
    pub buckets_grown: u64,
    /// Buckets read without a transaction (GET, SCAN, DBSIZE).
    pub lock_free_reads: u64,
}

impl std::ops::Add for Counters {
    type Output = Counters;

    fn add(self, o: Counters) -> Counters {
        Counters {
            commits: self.commits + o.commits,
            aborts: self.aborts + o.aborts,
            repairs: self.repairs + o.repairs,
            round_trips: self.round_trips + o.round_trips,
            verbs: self.verbs + o.verbs,
            retries: self.retries + o.retries,
            buckets_created: self.buckets_created + o.buckets_created,
            buckets_grown: self.buckets_grown + o.buckets_grown,
            lock_free_reads: self.lock_free_reads + o.lock_free_reads,
        }
    }
}

/// Redis keys on one index handle.
#[derive(Debug)]
pub struct Keyspace {
    handle: Handle,
    region: RegionId,
    /// Buckets created for a key whose bucket another gateway inserted
    /// first: the next new key of the class takes one instead of a fresh
    /// allocation.
    spares: Vec<RawObj>,
    buckets_created: u64,
    buckets_grown: u64,
    lock_free_reads: u64,
}

/// The buckets of one operation's keys, as its transaction reads them.
struct Slots {
    /// By index key: the bucket at the end of the chain, its content, and
    /// whether the operation changed it.
    buckets: BTreeMap<u64, (RawObj, Bucket, bool)>,
}

impl Slots {
    fn bucket(&self, key: &[u8]) -> Option<&Bucket> {
        self.buckets.get(&index_key(key)).map(|(_, b, _)| b)
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.bucket(key).and_then(|b| b.get(key))
    }

    /// The bucket to change for `key` (which the operation created or
    /// found: every key a write names has one).
    fn bucket_mut(&mut self, key: &[u8]) -> &mut Bucket {
        let Some((_, b, dirty)) = self.buckets.get_mut(&index_key(key)) else {
            unreachable!("a write's keys all have buckets");
        };
        *dirty = true;
        b
    }
}

impl Keyspace {
    /// A keyspace on `handle`, which must be rtx.
    pub fn new(mut handle: Handle, name: &str) -> Result<Keyspace, KeyspaceError> {
        let region = handle
            .tx_client()
            .ok_or_else(|| KeyspaceError::NotRtx(name.to_owned()))?
            .heap()
            .region();
        Ok(Keyspace {
            handle,
            region,
            spares: Vec::new(),
            buckets_created: 0,
            buckets_grown: 0,
            lock_free_reads: 0,
        })
    }

    /// `key`'s value.
    pub async fn get(&mut self, key: Bytes) -> Result<Option<Vec<u8>>, KeyspaceError> {
        check_key(&key)?;
        let ik = index_key(&key);
        let Some(head) = self.lookup(ik).await? else {
            return Ok(None);
        };
        if let Some(bucket) = self.read_lock_free(head).await {
            self.lock_free_reads += 1;
            return Ok(bucket.get(&key).map(<[u8]>::to_vec));
        }
        let heads = BTreeMap::from([(ik, head)]);
        self.with_heads(heads, false, move |s| Ok(s.get(&key).map(<[u8]>::to_vec)))
            .await
    }

    /// The values of `keys`, read as one snapshot.
    pub async fn mget(&mut self, keys: Vec<Bytes>) -> Result<Vec<Option<Vec<u8>>>, KeyspaceError> {
        check_read(&keys)?;
        self.with_buckets(keys.clone(), false, move |s| {
            Ok(keys.iter().map(|k| s.get(k).map(<[u8]>::to_vec)).collect())
        })
        .await
    }

    /// How many of `keys` exist (a key named twice counts twice).
    pub async fn exists(&mut self, keys: Vec<Bytes>) -> Result<u64, KeyspaceError> {
        check_read(&keys)?;
        self.with_buckets(keys.clone(), false, move |s| {
            Ok(keys.iter().filter(|k| s.get(k).is_some()).count() as u64)
        })
        .await
    }

    /// Sets `key` to `value` if `condition` holds; whether it wrote.
    pub async fn set(
        &mut self,
        key: Bytes,
        value: Bytes,
        condition: Condition,
    ) -> Result<bool, KeyspaceError> {
        check_write(&[(&key, &value)])?;
        self.with_buckets(vec![key.clone()], true, move |s| {
            let present = s.get(&key).is_some();
            let go = match condition {
                Condition::Always => true,
                Condition::IfAbsent => !present,
                Condition::IfPresent => present,
            };
            if go {
                s.bucket_mut(&key).set(&key, &value);
            }
            Ok(go)
        })
        .await
    }

    /// Sets every pair, all in one rTX (a key named twice takes its last
    /// value).
    pub async fn mset(&mut self, pairs: Vec<(Bytes, Bytes)>) -> Result<(), KeyspaceError> {
        check_write(&pairs.iter().map(|(k, v)| (k, v)).collect::<Vec<_>>())?;
        let keys: Vec<Bytes> = pairs.iter().map(|(k, _)| k.clone()).collect();
        self.with_buckets(keys, true, move |s| {
            for (k, v) in &pairs {
                s.bucket_mut(k).set(k, v);
            }
            Ok(())
        })
        .await
    }

    /// Removes `keys`, all in one rTX; how many existed.
    pub async fn del(&mut self, keys: Vec<Bytes>) -> Result<u64, KeyspaceError> {
        let empty = Bytes::new();
        check_write(&keys.iter().map(|k| (k, &empty)).collect::<Vec<_>>())?;
        self.with_buckets(keys.clone(), false, move |s| {
            let mut removed = 0;
            for k in &keys {
                if s.get(k).is_some() {
                    s.bucket_mut(k).remove(k);
                    removed += 1;
                }
            }
            Ok(removed)
        })
        .await
    }

    /// Adds `by` to `key`'s integer (absent: 0) in one rTX; the new value.
    pub async fn incr_by(&mut self, key: Bytes, by: i64) -> Result<i64, KeyspaceError> {
        check_key(&key)?;
        self.with_buckets(vec![key.clone()], true, move |s| {
            let now = match s.get(&key) {
                None => 0,
                Some(v) => parse_i64(v).ok_or(KeyspaceError::NotInteger)?,
            };
            let next = now.checked_add(by).ok_or(KeyspaceError::Overflow)?;
            s.bucket_mut(&key).set(&key, next.to_string().as_bytes());
            Ok(next)
        })
        .await
    }

    /// One step of a scan from `cursor` (0: the start): the keys of up to
    /// `count` buckets that match `pattern`, and the cursor to go on from
    /// (0: done). Every key present for the whole scan is returned once;
    /// keys written meanwhile may or may not be.
    pub async fn scan(
        &mut self,
        cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
    ) -> Result<(u64, Vec<Vec<u8>>), KeyspaceError> {
        let (next, buckets) = self.page(cursor, count.clamp(1, SCAN_COUNT_MAX)).await?;
        let keys = buckets
            .iter()
            .flat_map(|b| b.entries().map(|(k, _)| k))
            .filter(|k| pattern.is_none_or(|p| crate::glob::matches(p, k)))
            .map(<[u8]>::to_vec)
            .collect();
        Ok((next, keys))
    }

    /// Keys in the index: reads every bucket (a scan of the whole index).
    pub async fn dbsize(&mut self) -> Result<u64, KeyspaceError> {
        let mut keys = 0u64;
        let mut cursor = 0;
        loop {
            let (next, buckets) = self.page(cursor, SCAN_COUNT_MAX).await?;
            keys += buckets.iter().map(|b| b.len() as u64).sum::<u64>();
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// The buckets of up to `count` index entries from `cursor` on (0: the
    /// start), and the cursor after them (0: there are no more).
    async fn page(&mut self, cursor: u64, count: usize) -> Result<(u64, Vec<Bucket>), KeyspaceError> {
        let page = self.index_page(cursor.max(1), count).await?;
        let next = match page.last() {
            Some(&(last, _)) if page.len() == count && last < u64::MAX - 1 => last + 1,
            _ => 0,
        };
        let heads = page
            .iter()
            .map(|&(_, raw)| Ok(BucketRef::from_raw(raw)?.obj(self.region)))
            .collect::<Result<Vec<_>, KeyspaceError>>()?;
        Ok((next, self.read_buckets(&heads).await?))
    }

    /// The handle's and this keyspace's counters so far.
    pub fn counters(&mut self) -> Counters {
        let (tx, fabric, retries) = match &mut self.handle {
            Handle::Tree(t) => (t.tx_stats(), t.inner().fabric().stats(), t.retries()),
            Handle::Table(t) => (t.tx_stats(), t.inner().fabric().stats(), t.retries()),
        };
        let tx = tx.unwrap_or_default();
        Counters {
            commits: tx.commits,
            aborts: tx.aborts,
            repairs: tx.repairs,
            round_trips: fabric.round_trips,
            verbs: fabric.reads + fabric.writes + fabric.cas + fabric.faa + fabric.flushes,
            retries,
            buckets_created: self.buckets_created,
            buckets_grown: self.buckets_grown,
            lock_free_reads: self.lock_free_reads,
        }
    }

    /// Runs `f` on the buckets of `keys` inside one rTX, creating the
    /// missing ones first if `create` (and then pre-locking them all), and
    /// writes back every bucket `f` changed (unless it fails: then nothing
    /// is written).
    async fn with_buckets<R: Send + 'static>(
        &mut self,
        keys: Vec<Bytes>,
        create: bool,
        f: impl FnMut(&mut Slots) -> Result<R, KeyspaceError> + Clone + Send + 'static,
    ) -> Result<R, KeyspaceError> {
        let heads = self.heads(&keys, create).await?;
        self.with_heads(heads, create, f).await
    }

    /// The buckets of `keys` by index key: found, or (`create`) created.
    async fn heads(&mut self, keys: &[Bytes], create: bool) -> Result<BTreeMap<u64, RawObj>, KeyspaceError> {
        let mut heads: BTreeMap<u64, RawObj> = BTreeMap::new();
        for k in keys {
            let ik = index_key(k);
            if heads.contains_key(&ik) {
                continue;
            }
            let found = match self.lookup(ik).await? {
                Some(obj) => Some(obj),
                None if create => Some(self.create_bucket(ik, k.len()).await?),
                None => None,
            };
            if let Some(obj) = found {
                heads.insert(ik, obj);
            }
        }
        Ok(heads)
    }

    /// [`Keyspace::with_buckets`] on buckets already looked up; `lock`:
    /// pre-lock them as they are read (a write).
    async fn with_heads<R: Send + 'static>(
        &mut self,
        heads: BTreeMap<u64, RawObj>,
        lock: bool,
        mut f: impl FnMut(&mut Slots) -> Result<R, KeyspaceError> + Clone + Send + 'static,
    ) -> Result<R, KeyspaceError> {
        // `async move`, owning what it uses, and cloned per attempt: a body
        // that borrows makes the connection's future not provably `Send`
        // (the higher-ranked lifetimes of async closures), and connections
        // are spawned tasks.
        let (outcome, grown) = transact(&mut self.handle, async move |tx: &mut Tx<'_>| {
            let mut slots = Slots {
                buckets: BTreeMap::new(),
            };
            // In index-key order: writers pre-lock buckets in one global
            // order, so two never wait on each other's.
            for (&ik, &head) in &heads {
                let (last, bucket) = read_chain(tx, head, lock).await?;
                slots.buckets.insert(ik, (last, bucket, false));
            }
            let r = match f(&mut slots) {
                Ok(r) => r,
                Err(e) => return Ok((Err(e), 0)),
            };
            // Every size is checked before anything is written: a failure
            // must leave the transaction without writes.
            if slots
                .buckets
                .values()
                .any(|(_, b, dirty)| *dirty && class_for(b.encoded_len()).is_none())
            {
                return Ok((Err(KeyspaceError::BucketFull), 0));
            }
            let mut grown = 0;
            for (obj, bucket, dirty) in slots.buckets.values() {
                if *dirty && write_bucket(tx, *obj, bucket).await? {
                    grown += 1;
                }
            }
            Ok((Ok(r), grown))
        })
        .await?;
        self.buckets_grown += grown;
        outcome
    }

    /// Reads `heads` (and their forwards): each without a transaction if
    /// it can ([`Keyspace::read_lock_free`]), the others in one read-only
    /// rTX. Not a snapshot across buckets: for SCAN and DBSIZE, which
    /// promise none.
    async fn read_buckets(&mut self, heads: &[RawObj]) -> Result<Vec<Bucket>, KeyspaceError> {
        let mut read = Vec::with_capacity(heads.len());
        let mut rest = Vec::new();
        for &h in heads {
            match self.read_lock_free(h).await {
                Some(b) => {
                    self.lock_free_reads += 1;
                    read.push(b);
                }
                None => rest.push(h),
            }
        }
        if !rest.is_empty() {
            read.extend(self.read_buckets_in_tx(&rest).await?);
        }
        Ok(read)
    }

    /// Reads `heads` (and their forwards) in one read-only rTX.
    async fn read_buckets_in_tx(&mut self, heads: &[RawObj]) -> Result<Vec<Bucket>, KeyspaceError> {
        if heads.is_empty() {
            return Ok(Vec::new());
        }
        let heads = heads.to_vec();
        let buckets = transact(&mut self.handle, async move |tx: &mut Tx<'_>| {
            let mut out = Vec::with_capacity(heads.len());
            for &h in &heads {
                out.push(read_chain(tx, h, false).await?.1);
            }
            Ok(out)
        })
        .await?;
        Ok(buckets)
    }

    /// `head`'s bucket (its forwards followed) read without a transaction,
    /// as the B+tree reads its nodes: each block with its meta read again
    /// behind it in the same batch, valid when the meta shows the version
    /// and pointer it was read under (the hint rule, `txn::hint`): one
    /// round trip with a current hint. `None` when it could not (a fabric
    /// error, a block that kept moving, bytes that do not decode): the
    /// caller then reads in a transaction, which retries, waits out or
    /// repairs locks, and reports corruption.
    async fn read_lock_free(&mut self, head: RawObj) -> Option<Bucket> {
        let client = self.client();
        let mut batch = client.fabric().take_batch();
        let mut obj = head;
        let mut found = None;
        for _ in 0..=FORWARDS_MAX {
            let Some(bucket) = read_one_lock_free(client, &mut batch, obj).await else {
                break;
            };
            match bucket.forward() {
                Some(next) => obj = next.obj(head.meta.region()),
                None => {
                    found = Some(bucket);
                    break;
                }
            }
        }
        client.fabric().give_batch(batch);
        found
    }

    /// The index's rTX client: [`Keyspace::new`] refused any other.
    fn client(&mut self) -> &mut TxClient {
        match self.handle.tx_client() {
            Some(c) => c,
            None => unreachable!("Keyspace::new checked that the index is rtx"),
        }
    }

    async fn lookup(&mut self, ik: u64) -> Result<Option<RawObj>, KeyspaceError> {
        let raw = match &mut self.handle {
            Handle::Tree(t) => t.get(ik).await?,
            Handle::Table(t) => t.get(ik).await?,
        };
        match raw {
            None => Ok(None),
            Some(raw) => Ok(Some(BucketRef::from_raw(raw)?.obj(self.region))),
        }
    }

    /// Index entries from `from` on: the B+tree's range scan, or the hash
    /// table read whole.
    async fn index_page(&mut self, from: u64, count: usize) -> Result<Vec<(u64, u64)>, KeyspaceError> {
        Ok(match &mut self.handle {
            Handle::Tree(t) => t.scan(from, count).await?,
            Handle::Table(t) => t
                .inner()
                .entries()
                .await?
                .range(from..)
                .take(count)
                .map(|(&k, &v)| (k, v))
                .collect(),
        })
    }

    /// The bucket of index key `ik`, which had none: an empty bucket
    /// created and inserted, or the one another gateway inserted first.
    async fn create_bucket(&mut self, ik: u64, key_len: usize) -> Result<RawObj, KeyspaceError> {
        // Sized for one short value; a longer one grows it in the write's
        // own transaction.
        let short_value = 8;
        let class =
            class_for(HEADER_BYTES + ENTRY_HEADER_BYTES + key_len + short_value).unwrap_or(CLASSES - 1);
        let obj = match self.spares.iter().position(|s| s.len == class_bytes(class)) {
            Some(i) => self.spares.swap_remove(i),
            None => {
                let bytes = Bucket::default().encode(class_bytes(class));
                let obj = self.client().create_raw(&bytes).await.map_err(IndexError::Tx)?;
                self.buckets_created += 1;
                obj
            }
        };
        let raw = BucketRef::of(obj).raw();
        let inserted = match &mut self.handle {
            Handle::Tree(t) => t.insert(ik, raw).await.map(|w| w == Written::Inserted),
            Handle::Table(t) => t.insert(ik, raw).await,
        };
        match inserted {
            Ok(true) => Ok(obj),
            Ok(false) => {
                self.spares.push(obj);
                self.lookup(ik).await?.ok_or_else(|| {
                    KeyspaceError::Index(IndexError::Corrupt(format!(
                        "index key {ik:#x} was there at insert and gone at the next lookup, yet buckets are never removed"
                    )))
                })
            }
            // Cut off at its commit point: whether our bucket went in, the
            // index says.
            Err(IndexError::InDoubt(_)) => {
                let found = self.lookup(ik).await?;
                match found {
                    Some(o) if o == obj => Ok(o),
                    Some(o) => {
                        self.spares.push(obj);
                        Ok(o)
                    }
                    None => Err(KeyspaceError::Index(IndexError::Corrupt(format!(
                        "index key {ik:#x}: an insert in doubt left no entry"
                    )))),
                }
            }
            Err(e) => {
                self.spares.push(obj);
                Err(e.into())
            }
        }
    }
}

async fn transact<R>(
    handle: &mut Handle,
    body: impl AsyncFnMut(&mut Tx<'_>) -> Result<R, TxError> + Clone,
) -> Result<R, IndexError> {
    match handle {
        Handle::Tree(t) => t.transact(body).await,
        Handle::Table(t) => t.transact(body).await,
    }
}

/// Tries of one lock-free read before it gives up (the block kept moving).
const LOCK_FREE_TRIES: usize = 4;

/// One bucket read without a transaction ([`Keyspace::read_lock_free`]).
async fn read_one_lock_free(c: &mut TxClient, batch: &mut Batch, obj: RawObj) -> Option<Bucket> {
    let cached = c.hints().get(obj.meta);
    // Where the block is, and what validates it: a hint (any age), or a
    // pointer this call read, unchanged a round trip later (its 16-bit
    // version cannot wrap that fast).
    let (mut dptr, mut hint, mut fresh) = match cached {
        Some(h) => (h.dptr, Some(h), false),
        None => {
            batch.clear();
            let h = batch.read(obj.meta, META_BYTES as u32);
            c.fabric().execute(batch).await.ok()?;
            let (lock, dptr) = meta_words(batch.read_result(h).ok()?)?;
            (dptr, MetaHint::from_meta(lock, dptr), true)
        }
    };
    for _ in 0..LOCK_FREE_TRIES {
        batch.clear();
        let block = batch.read(GlobalAddr::new(obj.meta.region(), dptr.offset()), obj.len);
        let again = batch.read(obj.meta, META_BYTES as u32);
        c.fabric().execute(batch).await.ok()?;
        let (lock, now) = meta_words(batch.read_result(again).ok()?)?;
        let valid = hint.is_some_and(|h| h.validates(lock, now)) || (fresh && now == dptr);
        if valid {
            let bucket = Bucket::decode(batch.read_result(block).ok()?).ok()?;
            if let Some(h) = MetaHint::from_meta(lock, now).filter(|&h| Some(h) != cached) {
                c.hints().put(obj.meta, h);
            }
            return Some(bucket);
        }
        (dptr, hint, fresh) = (now, MetaHint::from_meta(lock, now), true);
    }
    None
}

/// A meta's two words: lock word and data pointer.
fn meta_words(b: &[u8]) -> Option<(LockWord, DataPtr)> {
    let word = |at: usize| fabric::le_word_at(b, at);
    Some((LockWord::from_raw(word(0)?), DataPtr::from_raw(word(8)?)))
}

/// Follows `head`'s forwards: the bucket that holds the entries, and its
/// content. With `lock` (a write: SET, MSET, INCR, which almost always
/// write), each bucket is pre-locked as it is read (rTX's Opt2,
/// `Tx::read_locked`): one round trip with a current hint, and a commit
/// that needs no lock batch of its own; a forwarding bucket stays locked
/// too (rewritten as it is at commit), forwards being rare. Without, each
/// is read and validated at commit.
async fn read_chain(tx: &mut Tx<'_>, head: RawObj, lock: bool) -> Result<(RawObj, Bucket), TxError> {
    let region = head.meta.region();
    let mut obj = head;
    for _ in 0..=FORWARDS_MAX {
        let bytes = if lock {
            tx.read_locked(obj).await?
        } else {
            tx.read_raw(obj).await?
        };
        let bucket = Bucket::decode(bytes).map_err(|e| TxError::BadObject(format!("{obj:?}: {e}")))?;
        match bucket.forward() {
            Some(next) => obj = next.obj(region),
            None => return Ok((obj, bucket)),
        }
    }
    Err(TxError::BadObject(format!(
        "{head:?}: more than {FORWARDS_MAX} forwards"
    )))
}

/// Writes `bucket` into `obj`, or, if it outgrew `obj`'s class, into a new
/// bucket of a larger class that `obj` then forwards to; whether it grew.
async fn write_bucket(tx: &mut Tx<'_>, obj: RawObj, bucket: &Bucket) -> Result<bool, TxError> {
    let len = bucket.encoded_len();
    if len <= obj.len as usize {
        tx.write_raw(obj, &bucket.encode(obj.len)).await?;
        return Ok(false);
    }
    let Some(class) = class_for(len) else {
        unreachable!("sizes are checked before any write");
    };
    let grown = tx.create_raw(&bucket.encode(class_bytes(class))).await?;
    tx.write_raw(obj, &Bucket::forwarding(BucketRef::of(grown)).encode(obj.len))
        .await?;
    Ok(true)
}

fn check_key(key: &[u8]) -> Result<(), KeyspaceError> {
    if key.len() > KEY_BYTES_MAX {
        return Err(KeyspaceError::KeyTooLong(key.len()));
    }
    Ok(())
}

fn check_read(keys: &[Bytes]) -> Result<(), KeyspaceError> {
    if keys.len() > READ_KEYS_MAX {
        return Err(KeyspaceError::TooManyKeys {
            keys: keys.len(),
            max: READ_KEYS_MAX,
        });
    }
    keys.iter().try_for_each(|k| check_key(k))
}

fn check_write(pairs: &[(&Bytes, &Bytes)]) -> Result<(), KeyspaceError> {
    if pairs.len() > WRITE_KEYS_MAX {
        return Err(KeyspaceError::TooManyKeys {
            keys: pairs.len(),
            max: WRITE_KEYS_MAX,
        });
    }
    let mut bytes = 0;
    for (k, v) in pairs {
        check_key(k)?;
        if v.len() > VALUE_BYTES_MAX {
            return Err(KeyspaceError::ValueTooLarge(v.len()));
        }
        bytes += k.len() + v.len();
    }
    if bytes > WRITE_BYTES_MAX {
        return Err(KeyspaceError::TooManyBytes { bytes });
    }
    Ok(())
}

/// A value as Redis's INCR reads it: a decimal i64, no spaces, no `+`.
pub fn parse_i64(v: &[u8]) -> Option<i64> {
    if v.is_empty() || v.len() > 20 || v[0] == b'+' || (v.len() > 1 && v[0] == b'0') {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b"01",
            b" 1",
            b"1.0",
            b"9223372036854775808",
            b"abc",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn write_limits() {
        let k = Bytes::from_static(b"k");
        let big = Bytes::from(vec![0u8; VALUE_BYTES_MAX + 1]);
        assert!(matches!(
            check_write(&[(&k, &big)]),
            Err(KeyspaceError::ValueTooLarge(_))
        ));
        let key = vec![0u8; KEY_BYTES_MAX + 1];
        assert!(matches!(check_key(&key), Err(KeyspaceError::KeyTooLong(_))));
        let v = Bytes::from(vec![0u8; VALUE_BYTES_MAX]);
        let pairs: Vec<(&Bytes, &Bytes)> = (0..5).map(|_| (&k, &v)).collect();
        assert!(matches!(
            check_write(&pairs),
            Err(KeyspaceError::TooManyBytes { .. })
        ));
    }
}
