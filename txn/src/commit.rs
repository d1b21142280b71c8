//! Commit: the paper's Figure 8 (`TXEnd`) and Figure 9 (`TryCommit`), as the
//! owner runs them.
//!
//! ```text
//! RT1  WRITE new data blocks (every replica), created objects (every replica),
//!      the log if the write set has more than one object (every replica),
//!      CAS every lock: seen version -> (owner, lease)           (primary)
//!      -- the log is in the same batch only if its primary is the locks'
//!         node (in-order); otherwise it gets a round trip of its own first,
//!         so that no lock is ever visible before its log.
//! RT2  READ the meta of every object read but not written: validate.
//! RT3  CAS log INIT -> DOING(commit lease)                  (logged only)
//! RT4  CAS every data pointer old -> new;
//!      release every lock: (owner, lease) -> version + 1;
//!      CAS log DOING -> DONE                                 (logged only)
//!      -- with one replica this is one batch (in-order on one node). With
//!         more, pointers are CASed in a round trip (RT4a) before the
//!         releases: a logged commit CASes every replica's, the primary's
//!         included (its lock, still held, hides it); Opt1 CASes only the
//!         backups' there, and the primary's (its commit point) goes with
//!         the release. Either way a backup is never behind an acknowledged
//!         write. (tests/round_trips.rs asserts these counts.)
//! ```
//!
//! Single-object write sets skip the log (Opt1): the primary's pointer CAS
//! is their commit point. When that one object was pre-locked (Opt2) and
//! nothing else was read, RT1 has no lock to take and RT2 nothing to check:
//! the new block's WRITE joins the first batch of RT4 (same node, in order),
//! so such a commit is one round trip (two with backups). Multi-object ones commit at RT3; from there a
//! repairer that finds the lease expired finishes RT4 from the log, and every
//! step is an idempotent CAS, so owner and repairer may both run it.

use fabric::{FabricError, GlobalAddr, Replica, VerbHandle};

/// Times a commit's backups' round trip goes again because the map moved
/// before its primary's batch (a replica joined or left): each move is a
/// recovery step, so more than a few under one commit means the commit is
/// cut off instead.
const MAP_MOVES_MAX: u32 = 8;

/// The named crash point (`fabric::FaultPlan::crash_points`) a logged
/// commit passes right after its commit point (log DOING), before it
/// installs anything: the crash that leaves a repairer the most to do.
pub const CRASH_AT_COMMIT_POINT: &str = "tx-commit-point";

use crate::client::meta_bytes;
use crate::error::{AbortReason, TxError};
use crate::hint::MetaHint;
use crate::log::{Log, LogEntry, HEADER_OFFSET, LOG_ENTRIES_MAX};
use crate::obj::META_BYTES;
use crate::tx::Tx;
use crate::word::{DataPtr, LockWord, LogHeader, LogState};
use fabric::le_word;

impl Tx<'_> {
    /// Commits, or aborts with the reason. On abort nothing of this
    /// transaction is visible and none of its locks is held.
    ///
    /// A fabric error (a lost connection, a stale epoch) may leave this
    /// transaction's locks held and its log open: the client then repairs
    /// its own lock when it meets it and settles the log before its next
    /// commit (`settle.rs`).
    pub async fn commit(mut self) -> Result<(), TxError> {
        self.c.commit_in_doubt = false;
        let result = self.try_commit().await;
        if matches!(result, Err(TxError::Fabric(_))) {
            self.c.cut_off();
        } else if matches!(result, Err(TxError::InDoubt(_))) {
            // Left in doubt for the caller (`take_commit_in_doubt`).
            debug_assert!(self.c.commit_in_doubt);
        } else {
            // Committed, or aborted with nothing of it visible.
            self.c.commit_in_doubt = false;
        }
        result
    }

    async fn try_commit(&mut self) -> Result<(), TxError> {
        if self.writes.is_empty() && self.fresh.is_empty() {
            self.validate_reads(None).await?;
            self.c.stats.commits += 1;
            return Ok(());
        }
        let n = self.writes.len();
        if n > LOG_ENTRIES_MAX {
            let objects = n;
            self.release().await?;
            return Err(TxError::WriteSetTooLarge {
                objects,
                max: LOG_ENTRIES_MAX,
            });
        }
        let logged = n > 1 || (n == 1 && !self.c.config.opt1);
        let lock = match (self.prelock, logged) {
            (Some(pre), false) => pre,
            _ => self.c.next_lock(n).await,
        };

        // The slot is written only once the last log in it is DONE, which
        // may also free blocks for this commit's allocations; a log a
        // fabric error cut off is finished before any commit, logged or
        // not (until then other owners wait out its locks' leases).
        if logged || self.c.log_interrupted() {
            if let Err(e) = self.c.settle_log().await {
                if let Some(pre) = self.prelock {
                    self.abort_holding(pre, false).await?;
                }
                return Err(e);
            }
        }

        // New data blocks, each under a pointer whose version follows the old one.
        for i in 0..n {
            let len = self.writes[i].obj.len;
            let offset = self.c.alloc_data(len).await?;
            self.writes[i].new = Some(self.writes[i].old.successor(offset));
        }

        // Opt1 with its one object pre-locked (Opt2) and nothing else read:
        // no lock to take and nothing to validate, so the new block's WRITE
        // needs no round trip of its own. Verbs to one node run in order, so
        // it shares the batch of the pointer CASes that publish it (the
        // backups' batch when there are backups, before the primary's).
        let nothing_to_validate = self
            .reads
            .iter()
            .all(|r| self.writes.iter().any(|w| w.obj.meta == r.obj.meta));
        if !logged
            && self.prelock == Some(lock)
            && self.writes.iter().all(|w| w.prelocked)
            && nothing_to_validate
        {
            let installed = self.install(lock, None, true).await?;
            self.committed(installed);
            return Ok(());
        }

        // RT1 (and RT1a when the log needs a round trip of its own).
        let log = logged.then(|| self.log(lock));
        let log_alone = log.is_some() && !self.log_shares_node_with_locks();
        self.batch.clear();
        self.push_new_data();
        if let Some(log) = &log {
            self.push_log(log)?;
        }
        if log_alone {
            self.execute_under_locks().await?;
            self.check_done()?;
            self.batch.clear();
        }
        let lock_handles = self.push_locks(lock);
        self.execute_under_locks().await?;
        self.note_locked();
        self.check_done()?;
        let mut failed = None;
        for &(i, h) in &lock_handles {
            let found = LockWord::from_raw(self.batch.old_value(h).map_err(TxError::Verb)?);
            let expected = if self.writes[i].prelocked {
                self.prelock.unwrap_or(self.writes[i].seen)
            } else {
                self.writes[i].seen
            };
            if found == expected {
                self.writes[i].prelocked = true;
            } else if failed.is_none() {
                failed = Some((i, found));
            }
        }
        // Every lock the transaction holds is now `lock` (pre-locks included,
        // once re-locked); `prelocked` marks which ones it holds.
        self.prelock = Some(lock);
        if let Some((i, found)) = failed {
            let obj = self.writes[i].obj;
            self.abort_holding(lock, log.is_some()).await?;
            return Err(self.conflict(obj, found).await);
        }

        // RT2: validate what was read and not written.
        if let Err(e) = self.validate_reads(Some(lock)).await {
            self.abort_holding(lock, log.is_some()).await?;
            return Err(e);
        }

        // RT3: the commit point of a logged transaction.
        if log.is_some() {
            let slot = self.c.heap.log_slot(self.c.owner)?;
            let doing = LogHeader::new(LogState::Doing, self.c.commit_lease(n, false).await);
            // Known as this owner's own before it can land: a commit cut
            // off inside this round trip settles its log at once.
            if let Some(open) = &mut self.c.open_log {
                open.doing = Some(doing);
            }
            self.batch.clear();
            let h = self.batch.on(Replica::All).cas(
                slot.add(HEADER_OFFSET),
                LogHeader::of(LogState::Init, lock).raw(),
                doing.raw(),
            );
            // From here a cut-off commit may have happened (a repairer, or
            // this owner's settle, rolls a DOING log forward).
            self.c.commit_in_doubt = true;
            self.execute_commit_point().await?;
            // Before anything of the log is installed on a backup, every
            // backup's header says what the primary's decided.
            self.c
                .converge_if_split(&self.batch, h, slot.add(HEADER_OFFSET), lock)
                .await?;
            let found = LogHeader::from_raw(self.batch.old_value(h).map_err(TxError::Verb)?);
            if found.map(LogHeader::state) != Some(LogState::Init) {
                // Only the owner moves INIT forward to DOING, so a repairer
                // aborted this log: release what is still held and give up.
                tracing::debug!(owner = self.c.owner, ?found, "log aborted by a repairer");
                self.abort_holding(lock, true).await?;
                return Err(TxError::Abort(AbortReason::LogAborted));
            }
            // A crash here leaves every lock held and the log DOING: the
            // transaction is committed and a repairer must finish it.
            self.c.fabric.crash_point(CRASH_AT_COMMIT_POINT)?;
            let installed = self.install(lock, Some(doing), false).await?;
            self.c.stats.logged_commits += 1;
            self.committed(installed);
        } else {
            let installed = self.install(lock, None, false).await?;
            self.committed(installed);
        }
        Ok(())
    }

    /// Executes the batch that may make the commit visible: refused before
    /// any verb was sent, nothing of it happened and the commit is not in
    /// doubt.
    async fn execute_commit_point(&mut self) -> Result<(), TxError> {
        let sent = self.execute_under_locks().await;
        if let Err(TxError::Fabric(e)) = &sent {
            if e.sent_nothing() {
                self.c.commit_in_doubt = false;
            }
        }
        sent
    }

    /// Counts the commit, frees the blocks it replaced (or parks them until
    /// a taker marks the log DONE), and keeps the metas of the objects it
    /// created as hints (the written ones were kept by `install`, which saw
    /// their releases).
    fn committed(&mut self, installed: Installed) {
        self.c.stats.commits += 1;
        let replaced = self
            .writes
            .iter()
            .filter(|w| !w.retire)
            .map(|w| (w.old.offset(), w.obj.len));
        match installed {
            Installed::Done => {
                for (offset, len) in replaced {
                    self.c.alloc.free(offset, len);
                }
            }
            Installed::LogDone => {
                self.c.close_log();
                for (offset, len) in replaced {
                    self.c.alloc.free(offset, len);
                }
            }
            Installed::TakenOver => {
                // Judged now, by the reclaims this section knows: a block
                // unlinked while its owner was announced stays given up
                // even if the log closes after the reclaim is over.
                let mut kept: Vec<(u64, u32)> = replaced.collect();
                self.c.alloc.retain_undoomed(&mut kept);
                let open = self.c.open_log.get_or_insert_with(Default::default);
                open.parked.extend(kept);
            }
        }
        for f in &self.fresh {
            let hint = MetaHint {
                version: 0,
                dptr: DataPtr::new(0, f.data_offset),
            };
            self.c.hints.put(f.meta, hint);
        }
    }

    /// Abandons the transaction: releases pre-locks and frees what it
    /// allocated. Nothing of it was visible. (A pre-lock a fabric error
    /// left held is this owner's to repair when it meets it:
    /// `TxClient::may_repair`.)
    pub async fn rollback(mut self) -> Result<(), TxError> {
        self.release().await
    }

    async fn release(&mut self) -> Result<(), TxError> {
        if let Some(lock) = self.prelock {
            self.abort_holding(lock, false).await?;
        } else {
            self.free_new_blocks();
        }
        Ok(())
    }

    fn log(&self, lock: LockWord) -> Log {
        Log {
            header: LogHeader::of(LogState::Init, lock),
            checksum: lock,
            entries: self
                .writes
                .iter()
                .map(|w| LogEntry {
                    meta: w.obj.meta,
                    old: w.old,
                    new: w.new.expect("new blocks are allocated before logging"),
                    old_version: w.seen.version(),
                })
                .collect(),
        }
    }

    /// True when the log's primary is the node of every lock, so that one
    /// batch writes the log before taking the locks.
    fn log_shares_node_with_locks(&self) -> bool {
        let log_node = self.c.primary(self.c.heap.region());
        self.writes
            .iter()
            .all(|w| self.c.primary(w.obj.meta.region()) == log_node)
    }

    fn push_new_data(&mut self) {
        for w in &self.writes {
            let new = w.new.expect("allocated");
            self.batch
                .on(Replica::All)
                .write(GlobalAddr::new(w.obj.meta.region(), new.offset()), &w.data);
        }
        for f in &self.fresh {
            self.batch
                .on(Replica::All)
                .write(GlobalAddr::new(f.meta.region(), f.data_offset), &f.data);
            let dptr = DataPtr::new(0, f.data_offset);
            self.batch
                .on(Replica::All)
                .write(f.meta, &meta_bytes(LockWord::unlocked(0), dptr));
        }
    }

    fn push_log(&mut self, log: &Log) -> Result<(), TxError> {
        let slot = self.c.heap.log_slot(self.c.owner)?;
        debug_assert!(
            self.c.open_log.is_none(),
            "a log slot is written only once settled"
        );
        // Open from the moment its WRITE may land: a commit that stops on a
        // fabric error from here on leaves it for the next settle.
        self.c.open_log = Some(Default::default());
        let mut bytes = Vec::with_capacity(log.encoded_len());
        log.encode(&mut bytes);
        self.batch.on(Replica::All).write(slot, &bytes);
        Ok(())
    }

    /// Lock CASes for every write-set object: unlocked ones from the version
    /// seen, pre-locked ones from the pre-lock word when the commit lock
    /// differs (a logged commit re-locks them under the word its log names).
    fn push_locks(&mut self, lock: LockWord) -> Vec<(usize, VerbHandle)> {
        let mut handles = Vec::with_capacity(self.writes.len());
        for (i, w) in self.writes.iter().enumerate() {
            let from = match (w.prelocked, self.prelock) {
                (true, Some(pre)) if pre == lock => continue,
                (true, Some(pre)) => pre,
                _ => w.seen,
            };
            handles.push((i, self.batch.cas(w.obj.lock_addr(), from.raw(), lock.raw())));
        }
        handles
    }

    /// Every verb of the last batch completed (a CAS that did not swap still
    /// completes); an error completion here is a layout bug, not a conflict.
    fn check_done(&self) -> Result<(), TxError> {
        match self.batch.first_error() {
            Some(e) => Err(TxError::Verb(e)),
            None => Ok(()),
        }
    }

    /// Validates the read set against DM (one round trip): every object read
    /// and not written must be unlocked at the version and pointer seen.
    /// `holding` is the lock word this transaction holds its write set with.
    async fn validate_reads(&mut self, holding: Option<LockWord>) -> Result<(), TxError> {
        let to_check: Vec<usize> = (0..self.reads.len())
            .filter(|&i| !self.writes.iter().any(|w| w.obj.meta == self.reads[i].obj.meta))
            .collect();
        if to_check.is_empty() {
            return Ok(());
        }
        self.batch.clear();
        let handles: Vec<VerbHandle> = to_check
            .iter()
            .map(|&i| self.batch.read(self.reads[i].obj.meta, META_BYTES as u32))
            .collect();
        self.execute_under_locks().await?;
        for (&i, h) in to_check.iter().zip(handles) {
            let meta = self.batch.read_result(h).map_err(TxError::Verb)?;
            let lock = LockWord::from_raw(le_word(meta, 0));
            let dptr = le_word(meta, 8);
            let r = &self.reads[i];
            if lock == r.seen && dptr == r.dptr.raw() {
                continue;
            }
            if lock.is_locked() && Some(lock) != holding {
                let obj = r.obj;
                if holding.is_some() {
                    // The caller releases its locks before repairing: an
                    // expired lock is handled by the next attempt's read.
                    return Err(TxError::Abort(if lock.is_expired(self.c.now_tick()) {
                        self.c.stats.expired_seen += 1;
                        AbortReason::Repaired
                    } else {
                        AbortReason::Locked
                    }));
                }
                return Err(self.conflict(obj, lock).await);
            }
            return Err(TxError::Abort(AbortReason::Changed));
        }
        Ok(())
    }

    /// Installs the new pointers and releases the locks (TryCommit lines
    /// 4–10), then marks a logged transaction DONE.
    /// With `with_data`, the new blocks (and created objects) are written in
    /// the first batch, ahead of the CASes that publish them.
    ///
    /// Every pointer CAS is checked (issue 19, items 2 and 4). While this
    /// client holds an object's lock, only a repairer that stole it (Opt1)
    /// or took the log over (logged) moves its pointers; a pointer that
    /// moved while the lock is still this client's is a broken invariant,
    /// reported and never acknowledged.
    async fn install(
        &mut self,
        lock: LockWord,
        doing: Option<LogHeader>,
        with_data: bool,
    ) -> Result<Installed, TxError> {
        let single_replica = self
            .writes
            .iter()
            .all(|w| self.c.replicas(w.obj.meta.region()) == 1)
            && self.c.replicas(self.c.heap.region()) == 1;
        let logged = doing.is_some();
        // An Opt1 commit's first pointer CAS may make it visible: on the
        // primary at once, on a backup once that backup is promoted. (A
        // logged one is in doubt from its DOING CAS on.)
        self.c.commit_in_doubt = true;
        let mut first_batch = !logged;
        let mut installs = Vec::with_capacity(self.writes.len());
        let mut map_moves = 0;
        let (primary_cas, releases, done, header_addr) = loop {
            // Backups first: a separate round trip when there are backups,
            // and the primary's batch pinned to the map it was routed by.
            let mut pinned = None;
            if !single_replica {
                self.batch.clear();
                if with_data {
                    self.push_new_data();
                }
                for (i, w) in self.writes.iter().enumerate() {
                    let replicas = self.c.replicas(w.obj.meta.region());
                    let new = w.new.expect("allocated").raw();
                    if logged {
                        let h = self
                            .batch
                            .on(Replica::All)
                            .cas(w.obj.dptr_addr(), w.old.raw(), new);
                        installs.push((i, 0, h));
                    } else {
                        for b in 0..replicas.saturating_sub(1) {
                            let h = self.batch.on(Replica::Backup(b as u8)).cas(
                                w.obj.dptr_addr(),
                                w.old.raw(),
                                new,
                            );
                            installs.push((i, b + 1, h));
                        }
                    }
                }
                if std::mem::take(&mut first_batch) {
                    self.execute_commit_point().await?;
                } else {
                    self.execute_under_locks().await?;
                }
                pinned = Some(self.c.fabric.epoch());
                self.check_done()?;
                let moved = pointers_moved(&self.batch, &installs, |i| self.old_new(i))?;
                if !moved.is_empty() {
                    self.install_refused(lock, logged, &moved).await?;
                }
                installs.clear();
            }
            self.batch.clear();
            if with_data && single_replica {
                self.push_new_data();
            }
            let mut primary_cas = Vec::new();
            for (i, w) in self.writes.iter().enumerate() {
                if single_replica || !logged {
                    let new = w.new.expect("allocated").raw();
                    let h = self.batch.cas(w.obj.dptr_addr(), w.old.raw(), new);
                    primary_cas.push(h);
                    installs.push((i, 0, h));
                }
            }
            let mut releases = Vec::with_capacity(self.writes.len());
            for w in &self.writes {
                let released = LockWord::unlocked(w.seen.version() + 1);
                releases.push(self.batch.cas(w.obj.lock_addr(), lock.raw(), released.raw()));
            }
            let header_addr = self.c.heap.log_slot(self.c.owner)?.add(HEADER_OFFSET);
            let done = doing.map(|doing| {
                self.batch.on(Replica::All).cas(
                    header_addr,
                    doing.raw(),
                    LogHeader::of(LogState::Done, lock).raw(),
                )
            });
            match pinned {
                // A replica that joined after the backups' round trip was
                // copied from the primary before this commit's pointer
                // reached it (Opt1: its commit point is in this batch), and
                // would stay behind: the backups' round trip goes again,
                // under the new map (every CAS in it is idempotent).
                Some(epoch) => match self.c.fabric.execute_pinned(&mut self.batch, epoch).await {
                    // Followed only while the primary, which holds the
                    // locks, is the same (`Tx::execute_under_locks`);
                    // otherwise the commit stops here, in doubt.
                    Err(FabricError::MapMoved { pinned, now })
                        if map_moves < MAP_MOVES_MAX && self.primary_kept() =>
                    {
                        map_moves += 1;
                        tracing::debug!(
                            owner = self.c.owner,
                            pinned,
                            now,
                            "map moved under a commit: backups again"
                        );
                        installs.clear();
                        continue;
                    }
                    sent => sent?,
                },
                None if first_batch => self.execute_commit_point().await?,
                None => self.execute_under_locks().await?,
            }
            break (primary_cas, releases, done, header_addr);
        };
        self.check_done()?;
        if let Some(done) = done {
            self.c
                .converge_if_split(&self.batch, done, header_addr, lock)
                .await?;
        }
        // Each release that won left the meta unlocked at `seen + 1` with
        // the new pointer: a hint. One that lost to a repairer (who stole
        // the expired lock after the pointer CAS) left another version.
        for (w, &h) in self.writes.iter().zip(&releases) {
            if self.batch.old_value(h) == Ok(lock.raw()) {
                let hint = MetaHint {
                    version: w.seen.version() + 1,
                    dptr: w.new.expect("allocated"),
                };
                self.c.hints.put(w.obj.meta, hint);
            }
        }
        if let (Some(done), Some(doing)) = (done, doing) {
            // One replica: the pointer CASes ran just before the releases,
            // in order on the one node; a release that still found the lock
            // proves its object's pointer moved under it.
            for (i, replica, now) in pointers_moved(&self.batch, &installs, |i| self.old_new(i))? {
                if self.batch.old_value(releases[i]) == Ok(lock.raw()) {
                    return Err(self.pointer_moved_under_lock(i, replica, now));
                }
            }
            // The header is still ours only if nobody took the log over.
            return Ok(
                if self.batch.old_value(done).map_err(TxError::Verb)? == doing.raw() {
                    Installed::LogDone
                } else {
                    Installed::TakenOver
                },
            );
        }
        // A transaction that only created objects writes nothing here (and
        // used to index `writes[0]` out of bounds): its RT1 WRITEs were all.
        if !self.writes.is_empty() {
            // Opt1: the primary's pointer CAS is the commit point. If it
            // failed, a repairer stole the expired lock and fenced the object:
            // this transaction did not happen. Its new block may be
            // referenced by a backup until the repairer is done, so it is
            // not reused.
            // It may find its own new pointer: a backup that its first
            // round trip reached was promoted since (the round trip went
            // again under the new map, `MapMoved`). The commit is then in.
            let w = &self.writes[0];
            let found = self.batch.old_value(primary_cas[0]).map_err(TxError::Verb)?;
            let ours = w.new.is_some_and(|n| n.raw() == found);
            if found != w.old.raw() && !ours {
                tracing::debug!(owner = self.c.owner, "single-object commit fenced by a repairer");
                if !single_replica {
                    return Err(self.fenced_after_backups().await?);
                }
                return Err(TxError::Abort(AbortReason::Repaired));
            }
        }
        Ok(Installed::Done)
    }

    /// An Opt1 commit fenced at its commit point after its backups' round
    /// trip installed its pointer: the repairer that fenced it puts the
    /// primary's value back on every backup, and until it has, a promoted
    /// backup would keep this write. So the backups are read: if none holds
    /// this commit's pointer any more, it did not happen and is retried (an
    /// abort); if one does, its outcome is unknown ([`TxError::InDoubt`]),
    /// never silently run again (docs/txn.md §8).
    async fn fenced_after_backups(&mut self) -> Result<TxError, TxError> {
        let w = &self.writes[0];
        let ours = w.new.expect("allocated").raw();
        let region = w.obj.meta.region();
        let backups = self.c.replicas(region).saturating_sub(1);
        debug_assert!(backups > 0, "an Opt1 commit with backups");
        self.batch.clear();
        let reads: Vec<VerbHandle> = (0..backups)
            .map(|b| self.batch.on(Replica::Backup(b as u8)).read(w.obj.dptr_addr(), 8))
            .collect();
        self.c.fabric.execute(&mut self.batch).await?;
        let mut holders = Vec::new();
        for (b, h) in reads.into_iter().enumerate() {
            let now = le_word(self.batch.read_result(h).map_err(TxError::Verb)?, 0);
            if now == ours {
                holders.push(b + 1);
            }
        }
        if holders.is_empty() {
            return Ok(TxError::Abort(AbortReason::Repaired));
        }
        Ok(TxError::InDoubt(format!(
            "owner {}'s single-object commit of {:?} was fenced by a repairer after replicas {holders:?} took \
             its pointer: a promotion before the repair ends would keep it",
            self.c.owner, w.obj.meta
        )))
    }

    /// Some pointer CASes of the backups' round trip found another pointer.
    /// If this client still holds those objects' locks (read after the CASes
    /// completed), nobody the protocol allows moved them: a broken
    /// invariant. Otherwise a repairer took over: an Opt1 commit was fenced
    /// (its primary CAS, not yet sent, is never sent); a logged one is
    /// committed (it passed DOING), its taker finishes it, and the owner
    /// goes on with its releases (idempotent, as the taker's), whose DONE
    /// CAS will then find the taker's header.
    async fn install_refused(
        &mut self,
        lock: LockWord,
        logged: bool,
        moved: &[(usize, usize, u64)],
    ) -> Result<(), TxError> {
        self.batch.clear();
        let locks: Vec<VerbHandle> = moved
            .iter()
            .map(|&(i, _, _)| self.batch.read(self.writes[i].obj.lock_addr(), 8))
            .collect();
        self.c.fabric.execute(&mut self.batch).await?;
        self.check_done()?;
        for (&(i, replica, now), h) in moved.iter().zip(locks) {
            let held = self.batch.read_result(h).map_err(TxError::Verb)?;
            if le_word(held, 0) == lock.raw() {
                return Err(self.pointer_moved_under_lock(i, replica, now));
            }
        }
        if logged {
            tracing::debug!(owner = self.c.owner, "logged commit taken over by a repairer");
            Ok(())
        } else {
            tracing::debug!(owner = self.c.owner, "single-object commit fenced by a repairer");
            Err(TxError::Abort(AbortReason::Repaired))
        }
    }

    /// The pointer write `i` replaces and the one it installs.
    fn old_new(&self, i: usize) -> (DataPtr, DataPtr) {
        let w = &self.writes[i];
        (w.old, w.new.expect("allocated"))
    }

    fn pointer_moved_under_lock(&mut self, i: usize, replica: usize, now: u64) -> TxError {
        let w = &self.writes[i];
        let what = format!(
            "owner {}'s commit found the pointer of {:?} on replica {replica} at {:?}, neither its old {:?} \
             nor its new {:?}, while it still held the lock",
            self.c.owner,
            w.obj.meta,
            DataPtr::from_raw(now),
            w.old,
            w.new
        );
        // The new blocks may be named by some replica now: never reused.
        for w in &mut self.writes {
            w.new = None;
        }
        self.c.invariant_broken(what)
    }

    /// Aborts a transaction that may hold locks with `lock` and may have
    /// written its log: log INIT -> ABORT (unless a repairer did), release
    /// every held lock back to the version seen, log -> DONE.
    async fn abort_holding(&mut self, lock: LockWord, logged: bool) -> Result<(), TxError> {
        let header_addr = self.c.heap.log_slot(self.c.owner)?.add(HEADER_OFFSET);
        if logged {
            self.batch.clear();
            let h = self.batch.on(Replica::All).cas(
                header_addr,
                LogHeader::of(LogState::Init, lock).raw(),
                LogHeader::of(LogState::Abort, lock).raw(),
            );
            self.c.fabric.execute(&mut self.batch).await?;
            self.c
                .converge_if_split(&self.batch, h, header_addr, lock)
                .await?;
        }
        self.batch.clear();
        for w in &self.writes {
            if w.prelocked {
                self.batch.cas(w.obj.lock_addr(), lock.raw(), w.seen.raw());
            }
        }
        let done = logged.then(|| {
            self.batch.on(Replica::All).cas(
                header_addr,
                LogHeader::of(LogState::Abort, lock).raw(),
                LogHeader::of(LogState::Done, lock).raw(),
            )
        });
        if !self.batch.is_empty() {
            self.c.fabric.execute(&mut self.batch).await?;
        }
        // A repairer that aborted the log may be the one to mark it DONE;
        // until someone has, the slot stays open (`settle.rs`).
        if let Some(done) = done {
            self.c
                .converge_if_split(&self.batch, done, header_addr, lock)
                .await?;
            if self.batch.old_value(done) == Ok(LogHeader::of(LogState::Abort, lock).raw()) {
                self.c.close_log();
            }
        }
        for w in &mut self.writes {
            w.prelocked = false;
        }
        self.prelock = None;
        self.free_new_blocks();
        Ok(())
    }

    fn free_new_blocks(&mut self) {
        for w in &mut self.writes {
            if let Some(new) = w.new.take() {
                self.c.alloc.free(new.offset(), w.obj.len);
            }
        }
        for f in self.fresh.drain(..) {
            self.c.alloc.free(f.data_offset, f.data.len() as u32);
        }
    }
}

/// How a commit's install ended, which decides when the blocks it replaced
/// may come back (`settle.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Installed {
    /// Unlogged and installed: free the replaced blocks.
    Done,
    /// Logged, and this owner marked its own log DONE: free them.
    LogDone,
    /// Logged, and a repairer took the log over: park them until its DONE.
    TakenOver,
}

/// The pointer CASes among `installs` that found neither the pointer they
/// replace nor the one they install: `(index, replica, pointer found)`.
/// Each install is `(index, replica of its first completion, handle)` of a
/// CAS on one or every replica, and `old_new(index)` its two pointers.
pub(crate) fn pointers_moved(
    batch: &fabric::Batch,
    installs: &[(usize, usize, VerbHandle)],
    old_new: impl Fn(usize) -> (DataPtr, DataPtr),
) -> Result<Vec<(usize, usize, u64)>, TxError> {
    let mut moved = Vec::new();
    for &(i, first, h) in installs {
        let (old, new) = old_new(i);
        for at in 0..batch.completions(h).len() {
            let now = batch.old_value_of(h, at).map_err(TxError::Verb)?;
            if now != old.raw() && now != new.raw() {
                moved.push((i, first + at, now));
            }
        }
    }
    Ok(moved)
}
