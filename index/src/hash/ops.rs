//! The common path, once for both variants: get, insert, update, upsert,
//! delete.
//!
//! ```text
//! RT1  [WRITE the new KV block]  [rtx, dtx: READ the subtable's guard]
//!      READ both candidate combined buckets
//! RT2  READ the KV blocks whose slots carry the key's fingerprint
//! RT3  CAS the slot; then READ again what tells whether a split overlapped
//!      the CAS: optimal the 8-byte header of the slot's bucket, rtx and dtx
//!      the guard (and both combined buckets after an insert, for duplicates)
//! ```
//!
//! The guard is rtx's 16-byte TXObj meta or dtx's 24-byte pointer record
//! (`Guard`). The split protocol this relies on (`split.rs`): an optimal
//! split locks every bucket header before it reads the subtable, and rtx
//! and dtx splits lock the subtable's guard before they read its block. So
//! a writer whose re-read finds the header (or the guard) as it was before
//! its CAS knows that any split reads the subtable after the CAS, and
//! carries the entry along.
//! Otherwise the write is *unsettled*: the writer waits for the split, takes
//! its entry out of a place it no longer belongs (optimal), and checks where
//! the key is now, redoing the write if it was lost.
//!
//! Readers take no lock. rtx and dtx readers read the guard before the
//! buckets, so the buckets are of a block that was current when the guard
//! was read, and a split never changes a block in place. A dtx reader also
//! waits while the pointer is invisible (being written), as FORD's readers
//! do. Optimal readers can overlap a
//! split that moves their key away; a key found is real, and an absent
//! answer is confirmed by re-reading the headers (unchanged means no split
//! step happened in between).

use fabric::le_word;
use fabric::{Batch, GlobalAddr, Replica};
use txn::LockWord;

use super::layout::{
    decode_kv, dir_hash, encode_kv, fingerprint, Geometry, Header, Slot, BUCKET_BYTES, COMBINED_BYTES,
    KV_BYTES, SLOTS_PER_BUCKET,
};
use super::wait::backoff;
use super::{Guard, HashTable, Loc};
use crate::btree::Variant;
use crate::error::IndexError;

/// A slot's place in a subtable; ordered, so that racing inserts of one key
/// agree on which copy stays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub bucket: u64,
    pub slot: usize,
}

/// What one read of a key's two combined buckets saw.
#[derive(Clone, Debug)]
pub(crate) struct View {
    pub loc: Loc,
    /// rtx, dtx: the subtable's guard, read just before the buckets.
    pub meta: Option<Guard>,
    /// The first bucket of each combined bucket.
    pub starts: [u64; 2],
    /// The distinct buckets read: index and words (header, slots).
    buckets: [(u64, [u64; 8]); 4],
    n: usize,
}

impl View {
    fn new(loc: Loc, meta: Option<Guard>, starts: [u64; 2], combined: [&[u8]; 2]) -> View {
        let mut v = View {
            loc,
            meta,
            starts,
            buckets: [(0, [0; 8]); 4],
            n: 0,
        };
        for (i, bytes) in combined.iter().enumerate() {
            for b in 0..2 {
                let index = starts[i] + b as u64;
                if v.buckets[..v.n].iter().any(|(x, _)| *x == index) {
                    continue;
                }
                let mut words = [0u64; 8];
                for (w, slot) in words.iter_mut().enumerate() {
                    *slot = le_word(bytes, (b * 8 + w) * 8);
                }
                v.buckets[v.n] = (index, words);
                v.n += 1;
            }
        }
        v
    }

    fn buckets(&self) -> &[(u64, [u64; 8])] {
        &self.buckets[..self.n]
    }

    /// Every bucket's header.
    pub fn headers(&self) -> impl Iterator<Item = (u64, Header)> + '_ {
        self.buckets().iter().map(|(i, w)| (*i, Header(w[0])))
    }

    /// The header of bucket `bucket`, if it was read.
    pub fn header(&self, bucket: u64) -> Option<Header> {
        self.headers().find(|(i, _)| *i == bucket).map(|(_, h)| h)
    }

    /// Every full slot.
    pub fn slots(&self) -> impl Iterator<Item = (Pos, Slot)> + '_ {
        self.buckets().iter().flat_map(|(i, w)| {
            (0..SLOTS_PER_BUCKET)
                .map(move |s| (Pos { bucket: *i, slot: s }, Slot(w[1 + s])))
                .filter(|(_, s)| !s.is_empty())
        })
    }

    /// The full slots carrying fingerprint `fp`.
    pub fn matching(&self, fp: u8) -> Vec<(Pos, Slot)> {
        self.slots().filter(|(_, s)| s.fingerprint() == fp).collect()
    }

    /// An empty slot in the less loaded of the two combined buckets (RACE's
    /// choice), or `None` when both are full.
    pub fn free_slot(&self) -> Option<Pos> {
        let empties = |start: u64| -> Vec<Pos> {
            self.buckets()
                .iter()
                .filter(|(i, _)| *i == start || *i == start + 1)
                .flat_map(|(i, w)| {
                    (0..SLOTS_PER_BUCKET)
                        .filter(|s| w[1 + s] == 0)
                        .map(move |s| Pos { bucket: *i, slot: s })
                })
                .collect()
        };
        let (a, b) = (empties(self.starts[0]), empties(self.starts[1]));
        let pick = if b.len() > a.len() { b } else { a };
        pick.first().copied()
    }
}

/// Why an attempt must start over.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Obstacle {
    /// A header does not cover the key: the cached directory entry is stale.
    StaleDir,
    /// rtx, dtx: the subtable's data moved since this client last saw it.
    Moved,
    /// rtx: a split holds the subtable's lock (live, or expired: repair
    /// it). dtx: a split holds it, or its pointer is being written.
    Held { sub: u64, lock: LockWord },
    /// optimal: a split holds a bucket header.
    Busy { sub: u64 },
    /// optimal: the headers changed between a read and its confirmation.
    Raced,
}

/// What a lookup found.
pub(crate) enum Lookup {
    Found {
        view: View,
        pos: Pos,
        slot: Slot,
        value: u64,
    },
    Absent {
        view: View,
    },
}

/// What a slot CAS came to.
pub(crate) enum Published {
    /// Another write changed the slot first.
    Lost,
    /// No split overlapped it; the re-read buckets if they were asked for.
    Stable(Option<Box<View>>),
    /// A split may have missed it.
    Unsettled,
}

impl HashTable {
    /// The value stored under `key`.
    pub async fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        Ok(self.find(key, false).await?.map(|(_, value)| value))
    }

    /// Inserts `key` unless it is present; returns whether it inserted.
    pub async fn insert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        let h = dir_hash(key);
        let kv = self.kv_block().await?;
        let bytes = encode_kv(key, value);
        let new = Slot::new(fingerprint(key), kv);
        let mut written = false;
        let mut last = None;
        for attempt in 1..=self.attempts_max {
            let to_write = (!written).then_some((kv, &bytes[..]));
            let found = self.lookup(key, true, to_write, false).await?;
            written = true;
            let view = match found {
                Err(o) => {
                    last = Some(o);
                    self.overcome(o, attempt).await?;
                    continue;
                }
                Ok(Lookup::Found { .. }) => {
                    self.spare_kv = Some(kv);
                    return Ok(false);
                }
                Ok(Lookup::Absent { view }) => view,
            };
            let Some(pos) = view.free_slot() else {
                let header = view.header(view.starts[0]).unwrap_or_default();
                self.split(view.loc, header).await?;
                continue;
            };
            // The slot CAS is the commit point: cut off there, the insert
            // may have happened, and running it again would find it.
            let published = self
                .publish(&view, pos, Slot::EMPTY, new, true)
                .await
                .map_err(IndexError::in_doubt_if_cut_off)?;
            match published {
                Published::Lost => {
                    self.stats.retries += 1;
                    continue;
                }
                // Published: a fabric error from here on leaves it in doubt.
                Published::Stable(after) => {
                    let after = after.map_or(view, |a| *a);
                    return self
                        .keep_one_copy(key, pos, new, &after)
                        .await
                        .map_err(IndexError::in_doubt_after_commit);
                }
                Published::Unsettled => {
                    self.settle(view.loc, pos, Slot::EMPTY, new, h)
                        .await
                        .map_err(IndexError::in_doubt_after_commit)?;
                    match self
                        .where_is(key)
                        .await
                        .map_err(IndexError::in_doubt_after_commit)?
                    {
                        Some(s) if s == new => return Ok(true),
                        Some(_) => return Ok(false),
                        None => continue,
                    }
                }
            }
        }
        Err(self.gave_up(last))
    }

    /// Replaces `key`'s value if it is present; returns whether it was.
    pub async fn update(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        let kv = self.kv_block().await?;
        let new = Slot::new(fingerprint(key), kv);
        let written = self.replace(key, Some((kv, encode_kv(key, value)))).await?;
        if written.is_none() {
            self.spare_kv = Some(kv);
        }
        Ok(written == Some(new))
    }

    /// Sets `key` to `value`, present or not.
    pub async fn upsert(&mut self, key: u64, value: u64) -> Result<(), IndexError> {
        for _ in 0..self.attempts_max {
            if self.update(key, value).await? || self.insert(key, value).await? {
                return Ok(());
            }
        }
        Err(IndexError::TooManyAttempts(self.attempts_max))
    }

    /// Removes `key`; returns whether it was present.
    pub async fn delete(&mut self, key: u64) -> Result<bool, IndexError> {
        Ok(self.replace(key, None).await? == Some(Slot::EMPTY))
    }

    /// Replaces `key`'s slot with a new KV block (`Some`) or empties it
    /// (`None`). Returns the slot written, or `None` when the key is absent.
    async fn replace(
        &mut self,
        key: u64,
        new_kv: Option<(u64, [u8; KV_BYTES as usize])>,
    ) -> Result<Option<Slot>, IndexError> {
        let h = dir_hash(key);
        let new = new_kv.map_or(Slot::EMPTY, |(kv, _)| Slot::new(fingerprint(key), kv));
        let mut written = new_kv.is_none();
        let mut last = None;
        for attempt in 1..=self.attempts_max {
            let to_write = new_kv.filter(|_| !written);
            let found = self
                .lookup(key, true, to_write.as_ref().map(|(kv, b)| (*kv, &b[..])), true)
                .await?;
            written = true;
            let (view, pos, old) = match found {
                Err(o) => {
                    last = Some(o);
                    self.overcome(o, attempt).await?;
                    continue;
                }
                Ok(Lookup::Absent { .. }) => return Ok(None),
                Ok(Lookup::Found { view, pos, slot, .. }) => (view, pos, slot),
            };
            let published = self
                .publish(&view, pos, old, new, false)
                .await
                .map_err(IndexError::in_doubt_if_cut_off)?;
            match published {
                Published::Lost => self.stats.retries += 1,
                Published::Stable(_) => return Ok(Some(new)),
                Published::Unsettled => {
                    self.settle(view.loc, pos, old, new, h)
                        .await
                        .map_err(IndexError::in_doubt_after_commit)?;
                    let now = self
                        .where_is(key)
                        .await
                        .map_err(IndexError::in_doubt_after_commit)?;
                    let done = if new.is_empty() {
                        now.is_none()
                    } else {
                        now == Some(new)
                    };
                    if done {
                        return Ok(Some(new));
                    }
                }
            }
        }
        Err(self.gave_up(last))
    }

    /// Reads `key`'s candidate buckets (RT1, with `kv` written first if
    /// given) and the KV blocks its fingerprint points at (RT2). A writer
    /// (`write`) waits for splits; `confirm_absent` re-reads the headers
    /// before an optimal lookup answers "absent".
    pub(crate) async fn lookup(
        &mut self,
        key: u64,
        write: bool,
        kv: Option<(u64, &[u8])>,
        confirm_absent: bool,
    ) -> Result<Result<Lookup, Obstacle>, IndexError> {
        let h = dir_hash(key);
        let view = match self.read_view(key, h, write, kv).await? {
            Ok(v) => v,
            Err(o) => return Ok(Err(o)),
        };
        let candidates = view.matching(fingerprint(key));
        let kvs = self.read_kvs(candidates.iter().map(|(_, s)| *s)).await?;
        for (&(pos, slot), &(k, value)) in candidates.iter().zip(&kvs) {
            if k == key {
                return Ok(Ok(Lookup::Found {
                    view,
                    pos,
                    slot,
                    value,
                }));
            }
        }
        if confirm_absent && self.info.variant == Variant::Optimal {
            let again = match self.read_view(key, h, false, None).await? {
                Ok(v) => v,
                Err(o) => return Ok(Err(o)),
            };
            if !again.headers().eq(view.headers()) || again.loc != view.loc {
                return Ok(Err(Obstacle::Raced));
            }
        }
        Ok(Ok(Lookup::Absent { view }))
    }

    /// RT1: `key`'s two combined buckets in the subtable the cached
    /// directory names (and, rtx and dtx, that subtable's guard just before
    /// them).
    async fn read_view(
        &mut self,
        key: u64,
        h: u64,
        write: bool,
        kv: Option<(u64, &[u8])>,
    ) -> Result<Result<View, Obstacle>, IndexError> {
        let sub = self.dir_entry(h);
        let loc = self.locate(sub).await?;
        let starts = [0, 1].map(|w| self.geometry.combined_start(self.geometry.main_bucket(key, w)));
        let region = self.heap.region();
        let variant = self.info.variant;
        let guarded = self.guarded();
        let mut batch = self.fabric().take_batch();
        let w = kv.map(|(at, bytes)| batch.on(Replica::All).write(GlobalAddr::new(region, at), bytes));
        let m = guarded.then(|| batch.read(GlobalAddr::from_raw(sub), Guard::bytes(variant)));
        let c = starts.map(|s| batch.read(loc.base.add(s * BUCKET_BYTES), COMBINED_BYTES));
        let r = self.fabric().execute(&mut batch).await;
        let parsed = r.map_err(IndexError::from).and_then(|()| {
            if let Some(w) = w {
                batch.done(w).map_err(IndexError::Verb)?;
            }
            let meta = match m {
                Some(m) => Some(Guard::decode(
                    variant,
                    batch.read_result(m).map_err(IndexError::Verb)?,
                )),
                None => None,
            };
            let c0 = batch.read_result(c[0]).map_err(IndexError::Verb)?;
            let c1 = batch.read_result(c[1]).map_err(IndexError::Verb)?;
            Ok(View::new(loc, meta, starts, [c0, c1]))
        });
        self.fabric().give_batch(batch);
        let view = parsed?;
        if let Some(guard) = view.meta {
            if Some(guard.dptr) != loc.dptr {
                self.data_of.insert(sub, guard.dptr);
                return Ok(Err(Obstacle::Moved));
            }
            if guard.stops(variant, write, self.now_tick()) {
                return Ok(Err(Obstacle::Held {
                    sub,
                    lock: guard.lock,
                }));
            }
        }
        for (_, header) in view.headers() {
            if !header.covers(h) {
                return Ok(Err(Obstacle::StaleDir));
            }
            if write && header.is_locked() {
                return Ok(Err(Obstacle::Busy { sub }));
            }
        }
        Ok(Ok(view))
    }

    /// RT2: the KV blocks behind `slots`, as `(key, value)`.
    pub(crate) async fn read_kvs(
        &mut self,
        slots: impl Iterator<Item = Slot>,
    ) -> Result<Vec<(u64, u64)>, IndexError> {
        let region = self.heap.region();
        let mut batch = self.fabric().take_batch();
        let hs: Vec<_> = slots
            .map(|s| (s, batch.read(GlobalAddr::new(region, s.ptr()), KV_BYTES)))
            .collect();
        if hs.is_empty() {
            self.fabric().give_batch(batch);
            return Ok(Vec::new());
        }
        let r = self.fabric().execute(&mut batch).await;
        let out = r.map_err(IndexError::from).and_then(|()| {
            hs.iter()
                .map(|&(s, h)| {
                    let b = batch.read_result(h).map_err(IndexError::Verb)?;
                    decode_kv(b).ok_or_else(|| {
                        IndexError::Corrupt(format!("slot {:#x} points at a KV block whose check fails", s.0))
                    })
                })
                .collect()
        });
        self.fabric().give_batch(batch);
        out
    }

    /// RT3: CASes the slot at `pos` from `old` to `new`, and re-reads what
    /// tells whether a split overlapped it (and the buckets if `reread`).
    async fn publish(
        &mut self,
        view: &View,
        pos: Pos,
        old: Slot,
        new: Slot,
        reread: bool,
    ) -> Result<Published, IndexError> {
        let variant = self.info.variant;
        let guarded = self.guarded();
        let base = view.loc.base;
        let at = base.add(Geometry::slot_offset(pos.bucket, pos.slot));
        let mut batch = self.fabric().take_batch();
        let cas = batch.cas(at, old.0, new.0);
        // What tells whether a split overlapped the CAS: rtx and dtx the
        // guard, optimal the header of the bucket the CAS went to (from the
        // buckets when an insert re-reads them anyway for duplicates).
        let m = guarded.then(|| batch.read(GlobalAddr::from_raw(view.loc.sub), Guard::bytes(variant)));
        let hd = (!guarded && !reread).then(|| batch.read(base.add(pos.bucket * BUCKET_BYTES), 8));
        let c = reread.then(|| {
            view.starts
                .map(|s| batch.read(base.add(s * BUCKET_BYTES), COMBINED_BYTES))
        });
        let r = self.fabric().execute(&mut batch).await;
        let out = r.map_err(IndexError::from).and_then(|()| {
            if batch.old_value(cas).map_err(IndexError::Verb)? != old.0 {
                return Ok(Published::Lost);
            }
            let after = match c {
                Some(c) => {
                    let c0 = batch.read_result(c[0]).map_err(IndexError::Verb)?;
                    let c1 = batch.read_result(c[1]).map_err(IndexError::Verb)?;
                    Some(Box::new(View::new(view.loc, None, view.starts, [c0, c1])))
                }
                None => None,
            };
            let stable = match m {
                Some(m) => {
                    let guard = Guard::decode(variant, batch.read_result(m).map_err(IndexError::Verb)?);
                    Some(guard) == view.meta && guard.is_free()
                }
                None => {
                    let now = match hd {
                        Some(hd) => Some(Header(le_word(
                            batch.read_result(hd).map_err(IndexError::Verb)?,
                            0,
                        ))),
                        None => after.as_ref().and_then(|a| a.header(pos.bucket)),
                    };
                    view.header(pos.bucket) == now && now.is_some_and(|h| !h.is_locked())
                }
            };
            Ok(if stable {
                Published::Stable(after)
            } else {
                Published::Unsettled
            })
        });
        self.fabric().give_batch(batch);
        // A slot in the subtable's live block: the backups follow before
        // the write counts (an unsettled one is replicated once settled).
        if let Ok(Published::Stable(_)) = &out {
            // The primary's CAS landed: whatever stops its replication, the
            // write may be seen.
            self.replicate_published(at, old, new)
                .await
                .map_err(IndexError::in_doubt_after_commit)?;
        }
        out
    }

    /// After an insert's CAS: if another slot of the two combined buckets
    /// holds the same key (two inserts raced), the copy at the lowest
    /// position stays and the others are emptied, by whichever inserter sees
    /// them. Returns whether this insert's copy stayed.
    async fn keep_one_copy(
        &mut self,
        key: u64,
        ours: Pos,
        new: Slot,
        after: &View,
    ) -> Result<bool, IndexError> {
        let others: Vec<(Pos, Slot)> = after
            .matching(fingerprint(key))
            .into_iter()
            .filter(|(p, _)| *p != ours)
            .collect();
        if others.is_empty() {
            return Ok(true);
        }
        let kvs = self.read_kvs(others.iter().map(|(_, s)| *s)).await?;
        let copies: Vec<(Pos, Slot)> = others
            .iter()
            .zip(&kvs)
            .filter(|(_, (k, _))| *k == key)
            .map(|(o, _)| *o)
            .collect();
        if copies.is_empty() {
            return Ok(true);
        }
        self.stats.duplicates += 1;
        let winner = copies.iter().map(|(p, _)| *p).chain([ours]).min().unwrap_or(ours);
        let losers = copies
            .into_iter()
            .chain([(ours, new)])
            .filter(|(p, _)| *p != winner);
        let base = after.loc.base;
        let mut batch = Batch::new();
        let emptied: Vec<_> = losers
            .map(|(p, s)| {
                let at = base.add(Geometry::slot_offset(p.bucket, p.slot));
                (at, s, batch.cas(at, s.0, 0))
            })
            .collect();
        self.fabric().execute(&mut batch).await?;
        for (at, s, h) in emptied {
            if batch.cas_succeeded(h).map_err(IndexError::Verb)? {
                self.replicate_slot(at, s, Slot::EMPTY).await?;
            }
        }
        Ok(winner == ours)
    }

    /// Waits for the split that overlapped a CAS from `old` to `ours` at
    /// `pos` to end. rtx and dtx: if the subtable's block is still the one
    /// the CAS went to (the split was rolled back, or the lock was a
    /// repair's), the backups follow it there; a block a split replaced was
    /// copied to every replica by the split's transaction. Optimal: if the slot still holds
    /// `ours` in a bucket that no longer covers the key, takes it out (it
    /// would be a stray copy the split did not move).
    async fn settle(&mut self, loc: Loc, pos: Pos, old: Slot, ours: Slot, h: u64) -> Result<(), IndexError> {
        self.stats.settled += 1;
        for attempt in 1..=self.attempts_max {
            match self.info.variant {
                Variant::Rtx | Variant::Dtx => {
                    let guard = self.read_guard(GlobalAddr::from_raw(loc.sub)).await?;
                    if guard.is_free() {
                        if Some(guard.dptr) == loc.dptr {
                            let at = loc.base.add(Geometry::slot_offset(pos.bucket, pos.slot));
                            self.replicate_slot(at, old, ours).await?;
                        }
                        return Ok(());
                    }
                    let lock = guard.lock;
                    self.overcome(Obstacle::Held { sub: loc.sub, lock }, attempt)
                        .await?;
                }
                Variant::Optimal => {
                    let at = loc.base.add(pos.bucket * BUCKET_BYTES);
                    let mut batch = Batch::new();
                    let r = batch.read(at, BUCKET_BYTES as u32);
                    self.fabric().execute(&mut batch).await?;
                    let b = batch.read_result(r).map_err(IndexError::Verb)?;
                    let header = Header(le_word(b, 0));
                    if header.is_locked() {
                        self.overcome(Obstacle::Busy { sub: loc.sub }, attempt).await?;
                        continue;
                    }
                    if !header.covers(h) && Slot(le_word(b, (1 + pos.slot) * 8)) == ours && !ours.is_empty() {
                        let mut batch = Batch::new();
                        batch.cas(
                            loc.base.add(Geometry::slot_offset(pos.bucket, pos.slot)),
                            ours.0,
                            0,
                        );
                        self.fabric().execute(&mut batch).await?;
                    }
                    return Ok(());
                }
            }
        }
        Err(IndexError::Blocked(loc.sub))
    }

    /// The slot that holds `key` now, if any (for checking an unsettled write).
    async fn where_is(&mut self, key: u64) -> Result<Option<Slot>, IndexError> {
        Ok(self.find(key, true).await?.map(|(slot, _)| slot))
    }

    /// `key`'s slot and value, looked up until no obstacle stands in the way;
    /// a writer (`write`) also waits out splits in progress.
    async fn find(&mut self, key: u64, write: bool) -> Result<Option<(Slot, u64)>, IndexError> {
        let mut last = None;
        for attempt in 1..=self.attempts_max {
            match self.lookup(key, write, None, true).await? {
                Ok(Lookup::Found { slot, value, .. }) => return Ok(Some((slot, value))),
                Ok(Lookup::Absent { .. }) => return Ok(None),
                Err(o) => {
                    last = Some(o);
                    self.overcome(o, attempt).await?;
                }
            }
        }
        Err(self.gave_up(last))
    }

    /// Deals with what stopped an attempt, before the next one.
    pub(crate) async fn overcome(&mut self, o: Obstacle, attempt: u32) -> Result<(), IndexError> {
        self.stats.retries += 1;
        match o {
            Obstacle::StaleDir => {
                self.stats.dir_reloads += 1;
                self.reload_dir().await
            }
            Obstacle::Moved | Obstacle::Raced => Ok(()),
            Obstacle::Busy { .. } => {
                backoff(attempt).await;
                Ok(())
            }
            Obstacle::Held { sub, lock } => {
                let now = self.now_tick();
                let obj = self.sub_obj(sub);
                match &mut self.engine {
                    super::Engine::Rtx(c) if lock.is_expired(now) => {
                        c.repair(obj, lock).await?;
                        self.data_of.remove(&sub);
                        Ok(())
                    }
                    // This client's own split, cut off by a fabric error:
                    // only it (or recovery) can finish its log.
                    super::Engine::Dtx(c) if lock.is_locked() && lock.owner() == c.owner() => {
                        c.release_pending().await?;
                        c.settle().await?;
                        Ok(())
                    }
                    _ => {
                        backoff(attempt).await;
                        Ok(())
                    }
                }
            }
        }
    }

    /// The error for an operation that ran out of attempts.
    pub(crate) fn gave_up(&self, last: Option<Obstacle>) -> IndexError {
        match last {
            Some(Obstacle::Busy { sub } | Obstacle::Held { sub, .. }) => IndexError::Blocked(sub),
            _ => IndexError::TooManyAttempts(self.attempts_max),
        }
    }

    /// A KV block for a new value: the one a previous write left unused, or
    /// a fresh one.
    async fn kv_block(&mut self) -> Result<u64, IndexError> {
        if let Some(kv) = self.spare_kv.take() {
            return Ok(kv);
        }
        self.alloc_kv(KV_BYTES).await
    }

    /// The client's clock in lease ticks.
    pub(crate) fn now_tick(&self) -> u64 {
        match &self.engine {
            super::Engine::Rtx(c) => c.now_tick(),
            super::Engine::Dtx(c) => c.now_tick(),
            super::Engine::Optimal(_) => 0,
        }
    }
}
