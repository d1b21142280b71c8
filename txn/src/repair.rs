//! Repair: what a client does when it meets a lock whose lease expired
//! (the paper's Figure 10, with the log-less case of Opt1).
//!
//! The repairer reads the owner's log slot. If its checksum is the lock word
//! found, the log belongs to the transaction holding the lock:
//!
//! - INIT: the owner had not committed; CAS the log to ABORT.
//! - ABORT: release every lock the log names, back to its old version; DONE.
//! - DOING with an expired commit lease: take the commit over (new commit
//!   lease), install every pointer on every replica, release every lock to
//!   version + 1, DONE. Each step is a CAS, so the owner waking up and doing
//!   the same is harmless.
//! - DOING with a live lease: nothing to do now.
//! - DONE: the lock found is a late lock CAS of an owner whose log a
//!   repairer aborted and finished; release it to its old version.
//!
//! If the checksum differs, the lock was taken without a log (a single-object
//! commit, or a pre-lock before its transaction logged): the repairer steals
//! the lock (a TryLock on the expired word, so the owner can neither re-lock
//! nor release it), checks with each read of the pointers that the lock is
//! still the word it stole (else a repairer suspecting it took over), copies
//! the primary's current data to a fresh block,
//! installs that block on every replica, and releases the lock at a version
//! floor above any version the object had. The owner's own pointer CAS then
//! fails, and its transaction did not happen.
//!
//! Wrap-around bound (§4.4): pointer versions are 16 bits, so a repair that
//! takes long could install a pointer whose version wrapped back. A repair
//! re-checks that the log is still its DOING before each step once it has
//! run for [`REPAIR_STEP_TICKS_MAX`], and stops otherwise.

use fabric::{Batch, GlobalAddr, Replica};

use crate::client::{le_word, TxClient};
use crate::error::TxError;
use crate::log::{Log, HEADER_OFFSET, LOG_SLOT_BYTES};
use crate::obj::RawObj;
use crate::word::{DataPtr, LockWord, LogHeader, LogState};

/// A repair re-reads its log before a step once it has run this long
/// (10 ms, in lease ticks like the clock it is compared with). Far below the
/// shortest time in which one object's 16-bit pointer version can wrap
/// (65,536 commits of one object, each several round trips).
pub const REPAIR_STEP_TICKS_MAX: u64 = 10 * crate::lease::TICKS_PER_MS;
/// Rounds of reading the log and acting on it within one repair call.
const REPAIR_ROUNDS_MAX: u32 = 8;
/// Attempts at installing a copy on one backup whose pointer moves under the
/// repairer (only the suspected owner's single late CAS can move it).
const BACKUP_CAS_ATTEMPTS_MAX: u32 = 4;

/// What a repair achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The lock found is gone and its transaction is finished either way.
    Repaired,
    /// The lock changed under the repairer; look again.
    Retry,
    /// Someone is legitimately committing (a live DOING lease); wait.
    Busy,
}

impl TxClient {
    /// Repairs the transaction holding `obj`'s lock as `found`, whose lease
    /// has expired by this client's clock.
    pub async fn repair(&mut self, obj: RawObj, found: LockWord) -> Result<RepairOutcome, TxError> {
        debug_assert!(found.is_locked());
        let slot = self.heap.log_slot(found.owner())?;
        let mut batch = Batch::new();
        for _ in 0..REPAIR_ROUNDS_MAX {
            batch.clear();
            let h = batch.read(slot, LOG_SLOT_BYTES as u32);
            self.fabric.execute(&mut batch).await?;
            let log = Log::decode(batch.read_result(h).map_err(TxError::Verb)?);
            let log = match log {
                Some(log) if log.checksum == found => log,
                _ => return self.repair_without_log(obj, found).await,
            };
            let header_addr = slot.add(HEADER_OFFSET);
            match log.header.state() {
                LogState::Init => {
                    batch.clear();
                    batch.on(Replica::All).cas(
                        header_addr,
                        log.header.raw(),
                        LogHeader::new(LogState::Abort, 0).raw(),
                    );
                    self.fabric.execute(&mut batch).await?;
                    // Next round sees ABORT (ours, or the owner's own).
                }
                LogState::Abort => {
                    batch.clear();
                    for e in &log.entries {
                        batch.cas(e.meta, found.raw(), LockWord::unlocked(e.old_version).raw());
                    }
                    batch.on(Replica::All).cas(
                        header_addr,
                        log.header.raw(),
                        LogHeader::new(LogState::Done, 0).raw(),
                    );
                    self.fabric.execute(&mut batch).await?;
                    self.stats.repairs += 1;
                    return Ok(RepairOutcome::Repaired);
                }
                LogState::Doing if log.header.lease_tick() > self.now_tick() => {
                    return Ok(RepairOutcome::Busy);
                }
                LogState::Doing => {
                    return self.roll_forward(&log, found, header_addr).await;
                }
                LogState::Done => {
                    // Every lock a commit or abort knew of was released
                    // before DONE, so `found` still on `obj` is a lock CAS
                    // of an owner paused in RT1 that landed after a repairer
                    // aborted its log and finished it; if the owner then
                    // died, nothing else would ever release it. Nothing
                    // happened under it: back to the version logged.
                    if let Some(e) = log.entries.iter().find(|e| e.meta == obj.meta) {
                        batch.clear();
                        let h = batch.cas(e.meta, found.raw(), LockWord::unlocked(e.old_version).raw());
                        self.fabric.execute(&mut batch).await?;
                        if batch.old_value(h).map_err(TxError::Verb)? == found.raw() {
                            self.stats.repairs += 1;
                            return Ok(RepairOutcome::Repaired);
                        }
                    }
                    return Ok(RepairOutcome::Retry);
                }
                LogState::Empty => return Ok(RepairOutcome::Retry),
            }
        }
        Ok(RepairOutcome::Retry)
    }

    /// Finishes a DOING log whose commit lease expired (TryCommit by a
    /// repairer).
    async fn roll_forward(
        &mut self,
        log: &Log,
        found: LockWord,
        header_addr: GlobalAddr,
    ) -> Result<RepairOutcome, TxError> {
        let started_tick = self.now_tick();
        let mine = LogHeader::new(LogState::Doing, self.commit_lease(log.entries.len()).await);
        let mut batch = Batch::new();
        let h = batch
            .on(Replica::All)
            .cas(header_addr, log.header.raw(), mine.raw());
        self.fabric.execute(&mut batch).await?;
        if batch.old_value(h).map_err(TxError::Verb)? != log.header.raw() {
            return Ok(RepairOutcome::Retry);
        }
        let single_replica = log.entries.iter().all(|e| self.replicas(e.meta.region()) == 1)
            && self.replicas(self.heap.region()) == 1;
        if !single_replica {
            batch.clear();
            for e in &log.entries {
                batch
                    .on(Replica::All)
                    .cas(e.meta.add(crate::obj::DPTR_OFFSET), e.old.raw(), e.new.raw());
            }
            self.fabric.execute(&mut batch).await?;
            if !self.still_mine(header_addr, mine, started_tick).await? {
                return Ok(RepairOutcome::Retry);
            }
        }
        batch.clear();
        for e in &log.entries {
            if single_replica {
                batch.cas(e.meta.add(crate::obj::DPTR_OFFSET), e.old.raw(), e.new.raw());
            }
        }
        for e in &log.entries {
            batch.cas(e.meta, found.raw(), LockWord::unlocked(e.old_version + 1).raw());
        }
        batch
            .on(Replica::All)
            .cas(header_addr, mine.raw(), LogHeader::new(LogState::Done, 0).raw());
        self.fabric.execute(&mut batch).await?;
        self.stats.repairs += 1;
        Ok(RepairOutcome::Repaired)
    }

    /// The wrap-around guard: past the step bound, the log must still be the
    /// DOING this repair took.
    async fn still_mine(
        &mut self,
        header_addr: GlobalAddr,
        mine: LogHeader,
        started_tick: u64,
    ) -> Result<bool, TxError> {
        if self.now_tick() < started_tick + REPAIR_STEP_TICKS_MAX {
            return Ok(true);
        }
        let mut batch = Batch::new();
        let h = batch.read(header_addr, 8);
        self.fabric.execute(&mut batch).await?;
        Ok(le_word(batch.read_result(h).map_err(TxError::Verb)?, 0) == mine.raw())
    }

    /// Repairs a lock taken without a log: steal, copy, install everywhere,
    /// release above any earlier version.
    async fn repair_without_log(&mut self, obj: RawObj, found: LockWord) -> Result<RepairOutcome, TxError> {
        let region = obj.meta.region();
        // The copy is allocated in this client's heap but addressed in the
        // object's region (see `Tx::unlocked_meta`): refuse other regions.
        if region != self.heap.region() {
            return Err(TxError::BadObject(format!(
                "{:?} is outside this client's heap (region {})",
                obj.meta,
                self.heap.region()
            )));
        }
        let replicas = self.replicas(region);
        let stolen = self.next_lock(1).await;
        let mut batch = Batch::new();
        let h = batch.cas(obj.lock_addr(), found.raw(), stolen.raw());
        self.fabric.execute(&mut batch).await?;
        if batch.old_value(h).map_err(TxError::Verb)? != found.raw() {
            return Ok(RepairOutcome::Retry);
        }

        // The primary's value is the truth (its pointer CAS is the commit
        // point of a single-object write); backups may be ahead with an
        // unacknowledged one. At most two rounds: the suspected owner has at
        // most one pointer CAS left to land on the primary.
        let mut installed = false;
        for _ in 0..2 {
            batch.clear();
            let ptrs = batch.on(Replica::All).read(obj.dptr_addr(), 8);
            // The lock, read after the primary's pointer (in order on its
            // node): if it is no longer the word this repair stole, a
            // repairer that suspected this one took over, and a pointer read
            // now may be one a later transaction is committing from; CASing
            // it would undo that commit. If it still is ours, the pointer was
            // read while we held the lock, and any later move of it bumps
            // its version, so our CASes from it fail harmlessly.
            let held = batch.read(obj.lock_addr(), 8);
            self.fabric.execute(&mut batch).await?;
            if le_word(batch.read_result(held).map_err(TxError::Verb)?, 0) != stolen.raw() {
                return Ok(RepairOutcome::Retry);
            }
            let seen: Vec<DataPtr> = (0..replicas)
                .map(|i| {
                    batch
                        .read_result_of(ptrs, i)
                        .map(|b| DataPtr::from_raw(le_word(b, 0)))
                        .map_err(TxError::Verb)
                })
                .collect::<Result<_, _>>()?;
            let primary = seen[0];
            batch.clear();
            let d = batch.read(GlobalAddr::new(region, primary.offset()), obj.len);
            self.fabric.execute(&mut batch).await?;
            let data = batch.read_result(d).map_err(TxError::Verb)?.to_vec();
            let offset = self.alloc.data(&mut self.fabric, obj.len).await?;
            let copy = primary.successor(offset);

            // Copy to every replica, and point the backups at it.
            batch.clear();
            batch
                .on(Replica::All)
                .write(GlobalAddr::new(region, offset), &data);
            let mut backup_cas = Vec::new();
            for (b, &ptr) in seen.iter().enumerate().skip(1) {
                backup_cas.push((
                    b,
                    ptr,
                    batch
                        .on(Replica::Backup(b as u8 - 1))
                        .cas(obj.dptr_addr(), ptr.raw(), copy.raw()),
                ));
            }
            self.fabric.execute(&mut batch).await?;
            if let Some(e) = batch.first_error() {
                return Err(TxError::Verb(e));
            }
            for (b, mut ptr, mut h) in backup_cas {
                let mut attempts = 0;
                loop {
                    let now = batch.old_value(h).map_err(TxError::Verb)?;
                    if now == ptr.raw() || now == copy.raw() {
                        break;
                    }
                    attempts += 1;
                    if attempts >= BACKUP_CAS_ATTEMPTS_MAX {
                        return Err(TxError::Heap(format!(
                            "backup {b} of {:?} keeps moving during repair",
                            obj.meta
                        )));
                    }
                    ptr = DataPtr::from_raw(now);
                    batch.clear();
                    h = batch
                        .on(Replica::Backup(b as u8 - 1))
                        .cas(obj.dptr_addr(), ptr.raw(), copy.raw());
                    self.fabric.execute(&mut batch).await?;
                }
            }

            // The primary last: its CAS is what fences the suspected owner.
            // If it moved (the owner's late single-object commit landed),
            // copy again: that value is committed.
            batch.clear();
            let p = batch.cas(obj.dptr_addr(), primary.raw(), copy.raw());
            self.fabric.execute(&mut batch).await?;
            if batch.old_value(p).map_err(TxError::Verb)? == primary.raw() {
                installed = true;
                break;
            }
        }
        if installed {
            batch.clear();
            let released = LockWord::unlocked(LockWord::version_floor(found));
            batch.cas(obj.lock_addr(), stolen.raw(), released.raw());
            self.fabric.execute(&mut batch).await?;
        }
        if installed {
            self.stats.repairs += 1;
            Ok(RepairOutcome::Repaired)
        } else {
            Ok(RepairOutcome::Retry)
        }
    }
}
