//! One DTX transaction: FORD's execution and commit.
//!
//! | step | batch (→ replica) | RTs |
//! |---|---|---|
//! | lock (hitchhiked) | WRITE log half `LOCKING(L)` naming every record to lock (→ all) · per record: CAS lock 0 → L, READ header + data (→ primary) | 1 |
//! | read | READ header + data, READ version again (→ primary) | 1 |
//! | validate (read records, if any, with locks or more than one read) | READ each version (→ primary) | 1 |
//! | commit | created records · per written record: undo image, version := L (invisible), the dirty bytes in place · header `COMMITTED(L)` (→ all) | 1 |
//! | release | per record: version := v + 1 (→ all), lock := 0 (→ primary) | 0: rides the next batch |
//!
//! On each node the verbs of a batch run in order, which gives the two
//! orderings the protocol needs: the log names a record before its lock is
//! taken (the log WRITE precedes the CAS on the primary), and a replica's
//! COMMITTED follows its undo images, invisible marks and data. Locking is
//! no-wait: a record found locked aborts the attempt (`Locked`), whoever
//! holds it and whatever its lease says; only recovery acts on another
//! owner's lock.

use fabric::{Batch, Epoch, Replica};

use crate::dtx::client::{created_image, DtxClient, Release, UNDO_HALF_BYTES};
use crate::dtx::log::{DtxEntry, DtxLog, ENTRIES_MAX};
use crate::dtx::record::{self, Record, Version, FREE};
use crate::error::{AbortReason, TxError};
use crate::word::{LockWord, LogHeader, LogState};
use fabric::le_word;

/// The named crash point (`fabric::FaultPlan::crash_points`) a DTX commit
/// passes once it holds every lock and its log says LOCKING, before it
/// writes anything in place: the crash that blocks others until recovery
/// rolls the log back (`bench rehash --kill-grower`).
pub const CRASH_BEFORE_COMMIT: &str = "dtx-before-commit";

/// The named crash point a DTX commit passes once every replica
/// acknowledged it, before its release is owed: records stay locked and
/// invisible until recovery rolls the log forward.
pub const CRASH_AFTER_COMMIT: &str = "dtx-after-commit";

/// A record this transaction locked.
#[derive(Debug)]
struct Locked {
    record: Record,
    /// The visible version it had when locked.
    version: u64,
    data: Vec<u8>,
    /// The data as locked, kept from the first write on: the undo image.
    before: Option<Vec<u8>>,
    /// The byte range written, if any: `[start, end)` of the data.
    dirty: Option<(usize, usize)>,
}

/// A record this transaction read without locking it.
#[derive(Debug)]
struct Read {
    record: Record,
    version: u64,
    data: Vec<u8>,
}

/// A DTX transaction in progress. Made by [`DtxClient::run`] (or
/// [`DtxClient::begin`]); ends with [`DtxTx::commit`] or
/// [`DtxTx::rollback`] (dropping it rolls back).
#[derive(Debug)]
pub struct DtxTx<'c> {
    c: &'c mut DtxClient,
    /// The lock word, once the first lock is taken.
    lock: Option<LockWord>,

    /// Every record the log names (locked, or whose lock CAS was sent).
    entries: Vec<DtxEntry>,
    locked: Vec<Locked>,
    reads: Vec<Read>,
    fresh: Vec<(Record, Vec<u8>)>,
    /// Lock CASes of the last lock batch that found this owner's own
    /// earlier lock word.
    own_conflicts: u32,
    /// Undo bytes assigned so far in this transaction's undo half.
    undo_used: u64,
    /// The map the first locks were taken under: every later batch of the
    /// transaction is pinned to it.
    epoch: Option<Epoch>,
    /// The region's primary in that map (`Release::primary`).
    primary: Option<fabric::NodeId>,
    batch: Batch,
    finished: bool,
}

impl Drop for DtxTx<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.release(false);
        }
        self.c.fabric.give_batch(std::mem::take(&mut self.batch));
    }
}

impl<'c> DtxTx<'c> {
    pub(crate) fn new(c: &'c mut DtxClient) -> Self {
        let batch = c.fabric.take_batch();
        DtxTx {
            c,
            lock: None,
            entries: Vec::new(),
            locked: Vec::new(),
            reads: Vec::new(),
            fresh: Vec::new(),
            undo_used: 0,
            own_conflicts: 0,
            epoch: None,
            primary: None,
            batch,
            finished: false,
        }
    }

    /// The client running this transaction.
    pub fn client(&mut self) -> &mut DtxClient {
        self.c
    }

    /// The lock word this transaction locks with, once it locked.
    pub fn lock_word(&self) -> Option<LockWord> {
        self.lock
    }

    /// An abort the body can return to retry the transaction.
    pub fn abort(&self) -> TxError {
        TxError::Abort(AbortReason::User)
    }

    /// Reads `rec`: this transaction's own copy if it locked, read or
    /// created it; otherwise one round trip (the record, then its version
    /// again), validated at commit.
    pub async fn read(&mut self, rec: Record) -> Result<&[u8], TxError> {
        if let Some(i) = self.locked.iter().position(|l| l.record == rec) {
            return Ok(&self.locked[i].data);
        }
        if let Some(i) = self.fresh.iter().position(|(r, _)| *r == rec) {
            return Ok(&self.fresh[i].1);
        }
        if let Some(i) = self.reads.iter().position(|r| r.record == rec) {
            return Ok(&self.reads[i].data);
        }
        if self.lock.is_none() && self.reads.is_empty() {
            self.c.settle().await?;
        }
        let (version, data) = self.c.read_consistent(&mut self.batch, rec).await?;
        self.reads.push(Read {
            record: rec,
            version,
            data,
        });
        Ok(&self.reads[self.reads.len() - 1].data)
    }

    /// Locks `rec` and reads it, in one round trip (the hitchhiked CAS +
    /// READ), unless this transaction already holds it. No wait: a record
    /// another transaction holds aborts this one (`Locked`).
    pub async fn read_for_update(&mut self, rec: Record) -> Result<&[u8], TxError> {
        if let Some(i) = self.fresh.iter().position(|(r, _)| *r == rec) {
            return Ok(&self.fresh[i].1);
        }
        self.lock_many(&[rec]).await?;
        let i = self.locked_index(rec)?;
        Ok(&self.locked[i].data)
    }

    /// Locks and reads every record of `recs` this transaction does not
    /// hold yet, in one round trip. On `Abort(Locked)` the records won are
    /// held and the others not: the caller may roll back, or (holding
    /// nothing else it cares about) back off and lock again.
    pub async fn lock_many(&mut self, recs: &[Record]) -> Result<(), TxError> {
        // A record found held by this owner's previous transaction, whose
        // release is still in flight, is locked again once it landed
        // (rather than aborting on itself); others' locks abort.
        for _ in 0..2 {
            self.own_conflicts = 0;
            match self.lock_round(recs).await {
                Err(TxError::Abort(AbortReason::Locked))
                    if self.own_conflicts > 0 && self.c.owes_releases() =>
                {
                    self.c.release_pending().await?;
                }
                other => return other,
            }
        }
        self.lock_round(recs).await
    }

    async fn lock_round(&mut self, recs: &[Record]) -> Result<(), TxError> {
        let mut new: Vec<Record> = Vec::new();
        for &rec in recs {
            let held = self.locked.iter().any(|l| l.record == rec)
                || self.fresh.iter().any(|(r, _)| *r == rec)
                || new.contains(&rec);
            if !held {
                new.push(rec);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        if self.lock.is_none() {
            // Nothing held yet: what a fabric error left of this owner's
            // earlier transactions is finished first.
            self.c.settle().await?;
        }
        // A record whose lock CAS failed earlier in this transaction (a
        // caller retrying a contended lock) is named by the log already.
        let named = |rec: &Record| self.entries.iter().any(|e| e.record == rec.addr);
        let unnamed = new.iter().filter(|r| !named(r)).count();
        if self.entries.len() + unnamed > ENTRIES_MAX {
            return Err(TxError::WriteSetTooLarge {
                objects: self.entries.len() + unnamed,
                max: ENTRIES_MAX,
            });
        }
        let (log_at, undo_at) = self.c.halves().await?;
        let lock = match self.lock {
            Some(lock) => lock,
            None => {
                let lock = self.c.next_lock(1).await;
                self.lock = Some(lock);
                lock
            }
        };
        for &rec in &new {
            if self.entries.iter().any(|e| e.record == rec.addr) {
                continue;
            }
            let image = (8 + u64::from(rec.len)).next_multiple_of(8);
            if self.undo_used + image > UNDO_HALF_BYTES {
                return Err(TxError::BadObject(format!(
                    "undo images of {} bytes exceed a transaction's {UNDO_HALF_BYTES}",
                    self.undo_used + image
                )));
            }
            self.entries.push(DtxEntry {
                record: rec.addr,
                len: rec.len,
                undo: Some(undo_at.add(self.undo_used)),
                adopted: None,
            });
            self.undo_used += image;
        }
        let mut log = Vec::new();
        DtxLog {
            header: LogHeader::of(LogState::Locking, lock),
            checksum: lock,
            entries: self.entries.clone(),
        }
        .encode(&mut log);

        let mut batch = std::mem::take(&mut self.batch);
        let opened = self.c.open_batch(&mut batch);
        let log_h = batch.on(Replica::All).write(log_at, &log);
        let mut verbs = Vec::with_capacity(new.len());
        for &rec in &new {
            let whole = u32::try_from(rec.bytes())
                .map_err(|_| TxError::BadObject(format!("record {rec:?} is too large")))?;
            let cas = batch.cas(rec.lock_addr(), FREE, lock.raw());
            let read = batch.read(rec.addr, whole);
            verbs.push((rec, cas, read));
        }
        // From here on the log (and perhaps locks) may be in DM whatever
        // happens to this batch: a fabric error leaves the owner unsettled.
        let first = self.epoch.is_none();
        let sent = self.c.send(&mut batch, opened, self.epoch).await;
        if sent.is_err() {
            self.c.unsettled = true;
        }
        if first {
            self.epoch = Some(self.c.fabric.epoch());
            self.primary = self.c.primary_node();
        }
        let result = match sent {
            Ok(()) => self.take_locks(&batch, log_h, &verbs, lock),
            Err(e) => Err(e),
        };
        self.batch = batch;
        result
    }

    /// Reads the lock batch's results: the records won, and the first
    /// record found held (an abort, once every won lock is noted so that
    /// rollback releases it).
    fn take_locks(
        &mut self,
        batch: &Batch,
        log_h: fabric::VerbHandle,
        verbs: &[(Record, fabric::VerbHandle, fabric::VerbHandle)],
        lock: LockWord,
    ) -> Result<(), TxError> {
        if let Err(e) = batch.done(log_h) {
            self.c.unsettled = true;
            return Err(TxError::Verb(e));
        }
        let mut outcome = Ok(());
        for &(rec, cas, read) in verbs {
            let old = match batch.old_value(cas) {
                Ok(old) => old,
                Err(e) => {
                    self.c.unsettled = true;
                    outcome = outcome.and(Err(TxError::Verb(e)));
                    continue;
                }
            };
            if old != FREE {
                let holder = LockWord::from_raw(old);
                if holder.is_locked() && holder.owner() == self.c.owner {
                    self.own_conflicts += 1;
                } else if holder.is_locked() && holder.is_expired(self.c.now_tick()) {
                    self.c.stats.expired_seen += 1;
                }
                outcome = outcome.and(Err(TxError::Abort(AbortReason::Locked)));
                continue;
            }
            let bytes = match batch.read_result(read) {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.c.unsettled = true;
                    outcome = outcome.and(Err(TxError::Verb(e)));
                    continue;
                }
            };
            let version = match Version::from_raw(le_word(bytes, record::VERSION_OFFSET as usize)) {
                Version::Visible(v) => v,
                Version::Invisible(by) => {
                    // A free lock over an invisible record: a release or a
                    // rollback wrote the lock before the version.
                    self.c.stats.invariant_violations += 1;
                    self.c.unsettled = true;
                    outcome = outcome.and(Err(TxError::Invariant(format!(
                        "DTX record {rec:?} was free but invisible (written by {by:?}) when {lock:?} locked it"
                    ))));
                    continue;
                }
            };
            let data = bytes[record::DATA_OFFSET as usize..].to_vec();
            if let Some(i) = self.reads.iter().position(|r| r.record == rec) {
                // Read before it was locked: it must not have changed since.
                let read = self.reads.swap_remove(i);
                if read.version != version {
                    outcome = outcome.and(Err(TxError::Abort(AbortReason::Changed)));
                }
            }
            self.locked.push(Locked {
                record: rec,
                version,
                data,
                before: None,
                dirty: None,
            });
        }
        outcome
    }

    /// Waits before trying a contended lock again, inside this transaction
    /// (counted as an abort: a no-wait lock that failed). For a caller
    /// that holds nothing else yet, so that the wait blocks nobody; the
    /// releases owed are sent before any sleep.
    pub async fn back_off(&mut self, attempt: u32) -> Result<(), TxError> {
        self.c.stats.aborts += 1;
        if self.c.owes_releases() {
            // The lock met may be this owner's own, its release still in
            // flight: wait for that instead of backing off.
            self.c.release_pending().await?;
            return Ok(());
        }
        self.c.backoff(attempt).await
    }

    /// Whether this transaction holds any lock.
    pub fn holds_locks(&self) -> bool {
        !self.locked.is_empty()
    }

    fn locked_index(&self, rec: Record) -> Result<usize, TxError> {
        self.locked
            .iter()
            .position(|l| l.record == rec)
            .ok_or_else(|| TxError::BadObject(format!("record {rec:?} is not locked by this transaction")))
    }

    /// Replaces `rec`'s data (at commit), locking it first if this
    /// transaction does not hold it.
    pub async fn write(&mut self, rec: Record, bytes: &[u8]) -> Result<(), TxError> {
        if bytes.len() != rec.len as usize {
            return Err(TxError::BadObject(format!(
                "{} bytes written to record {rec:?} of {} bytes",
                bytes.len(),
                rec.len
            )));
        }
        self.write_part(rec, 0, bytes).await
    }

    /// Replaces `bytes.len()` bytes of `rec`'s data from `at` (at commit;
    /// only the bytes written go in place), locking it first if this
    /// transaction does not hold it.
    pub async fn write_part(&mut self, rec: Record, at: usize, bytes: &[u8]) -> Result<(), TxError> {
        let end = at
            .checked_add(bytes.len())
            .filter(|&end| end <= rec.len as usize)
            .ok_or_else(|| {
                TxError::BadObject(format!(
                    "bytes {at}..+{} are past record {rec:?}'s data",
                    bytes.len()
                ))
            })?;
        if let Some(i) = self.fresh.iter().position(|(r, _)| *r == rec) {
            self.fresh[i].1[at..end].copy_from_slice(bytes);
            return Ok(());
        }
        self.lock_many(&[rec]).await?;
        let i = self.locked_index(rec)?;
        let l = &mut self.locked[i];
        if l.before.is_none() {
            l.before = Some(l.data.clone());
        }
        l.data[at..end].copy_from_slice(bytes);
        l.dirty = Some(match l.dirty {
            Some((s, e)) => (s.min(at), e.max(end)),
            None => (at, end),
        });
        Ok(())
    }

    /// A new record holding `bytes`, written at commit (with the commit's
    /// batch): reachable once something committed names it.
    pub async fn create_raw(&mut self, bytes: &[u8]) -> Result<Record, TxError> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| TxError::BadObject(format!("a record of {} bytes is too large", bytes.len())))?;
        let rec = self.c.alloc_record(len).await?;
        self.fresh.push((rec, bytes.to_vec()));
        Ok(rec)
    }

    /// Commits: validates what was read without a lock, writes undo
    /// images, invisible marks, data and COMMITTED to every replica in one
    /// round trip, and owes the release to the next batch.
    pub async fn commit(mut self) -> Result<(), TxError> {
        self.finished = true;
        let outcome = self.try_commit().await;
        if outcome.is_err() {
            self.release(false);
        }
        outcome
    }

    async fn try_commit(&mut self) -> Result<(), TxError> {
        let validate =
            !self.reads.is_empty() && (self.lock.is_some() || self.reads.len() + self.fresh.len() > 1);
        if validate {
            self.validate().await?;
        }
        let dirty = self.locked.iter().any(|l| l.dirty.is_some());
        if !dirty && self.fresh.is_empty() {
            self.released(true);
            return Ok(());
        }
        let lock = self.lock;
        // A crash here leaves every lock held, the log LOCKING and nothing
        // written in place: recovery rolls it back.
        self.c.fabric.crash_point(CRASH_BEFORE_COMMIT)?;
        let mut batch = std::mem::take(&mut self.batch);
        let opened = self.c.open_batch(&mut batch);
        let mut handles = Vec::new();
        for (rec, data) in &self.fresh {
            handles.push(batch.on(Replica::All).write(rec.addr, &created_image(data)));
        }
        let mut image = Vec::new();
        if let Some(lock) = lock {
            let invisible = Version::Invisible(lock).raw().to_le_bytes();
            for l in &self.locked {
                let (Some((start, end)), Some(before)) = (l.dirty, &l.before) else {
                    continue;
                };
                let entry = self.entries.iter().find(|e| e.record == l.record.addr);
                let Some(undo) = entry.and_then(|e| e.undo) else {
                    return Err(TxError::Invariant(format!("{:?} has no undo image", l.record)));
                };
                image.clear();
                image.extend_from_slice(&Version::Visible(l.version).raw().to_le_bytes());
                image.extend_from_slice(before);
                handles.push(batch.on(Replica::All).write(undo, &image));
                handles.push(batch.on(Replica::All).write(l.record.version_addr(), &invisible));
                handles.push(
                    batch
                        .on(Replica::All)
                        .write(l.record.data_addr().add(start as u64), &l.data[start..end]),
                );
            }
            let (log_at, _) = self.c.halves().await?;
            let committed = LogHeader::of(LogState::Committed, lock).raw().to_le_bytes();
            handles.push(batch.on(Replica::All).write(log_at, &committed));
        }
        let sent = self.c.send(&mut batch, opened, self.epoch).await;
        let checked = sent.and_then(|()| {
            handles
                .iter()
                .try_for_each(|&h| batch.done(h).map_err(TxError::Verb))
        });
        self.batch = batch;
        if let Err(e) = checked {
            if lock.is_some() {
                // Undo images, marks or COMMITTED may be on some replicas:
                // committed only if every replica got COMMITTED. The
                // owner's recovery of its own log decides before the next
                // transaction.
                self.c.unsettled = true;
                self.c.commit_in_doubt = true;
            }
            return Err(e);
        }
        // A crash here leaves the transaction committed on every replica,
        // its records locked and invisible: only the release is missing.
        if let Err(e) = self.c.fabric.crash_point(CRASH_AFTER_COMMIT) {
            self.c.unsettled = true;
            return Err(e.into());
        }
        self.released(true);
        Ok(())
    }

    /// One round trip: every record read without a lock must still be
    /// visible at the version read.
    async fn validate(&mut self) -> Result<(), TxError> {
        let mut batch = std::mem::take(&mut self.batch);
        let opened = self.c.open_batch(&mut batch);
        let handles: Vec<_> = self
            .reads
            .iter()
            .map(|r| batch.read(r.record.version_addr(), 8))
            .collect();
        let sent = self.c.send(&mut batch, opened, self.epoch).await;
        let mut outcome = sent;
        if outcome.is_ok() {
            for (r, &h) in self.reads.iter().zip(&handles) {
                match batch.read_result(h) {
                    Ok(bytes) if le_word(bytes, 0) == Version::Visible(r.version).raw() => {}
                    Ok(_) => {
                        outcome = Err(TxError::Abort(AbortReason::Changed));
                        break;
                    }
                    Err(e) => {
                        outcome = Err(TxError::Verb(e));
                        break;
                    }
                }
            }
        }
        self.batch = batch;
        outcome
    }

    /// Rolls back: nothing was written in place before commit, so only the
    /// locks are released (with the next batch).
    pub fn rollback(mut self) {
        self.finished = true;
        self.release(false);
    }

    /// The transaction is over (`committed`: its commit batch landed on
    /// every replica): owe the release of every lock it won, and let the
    /// next locking transaction use the other halves.
    fn released(&mut self, committed: bool) {
        self.c.stats.commits += 1;
        if self.lock.is_some() && committed && self.locked.iter().any(|l| l.dirty.is_some()) {
            self.c.stats.logged_commits += 1;
        }
        self.release(committed);
    }

    fn release(&mut self, committed: bool) {
        if self.lock.is_some() {
            if !self.c.unsettled {
                let releases = self
                    .locked
                    .drain(..)
                    .map(|l| Release {
                        record: l.record,
                        version: (committed && l.dirty.is_some()).then(|| l.version + 1),
                        primary: self.primary,
                    })
                    .collect();
                self.c.owe(releases);
            }
            self.c.flip_halves();
        }
        self.locked.clear();
        self.lock = None;
    }
}
