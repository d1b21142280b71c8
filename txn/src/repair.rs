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
//! nor release it), reads every replica's pointer and the lock, then the
//! primary's data and the lock again (still the stolen word: every pointer
//! was read under it), writes a copy of the data to a fresh block on every
//! replica, CASes the primary's pointer to it (the fence: the owner's own
//! pointer CAS now fails), points every backup at it from the pointer read
//! under the lock, and releases the lock at a version floor above any
//! version the object had. A backup CAS that finds another pointer is
//! retried from it only after a READ of the lock shows the lock still
//! stolen, so a repairer stalled at any verb never moves a pointer that
//! someone committed after it lost the lock.
//!
//! Wrap-around bound (§4.4): pointer versions are 16 bits, so a repair that
//! takes long could install a pointer whose version wrapped back. A repair
//! re-checks that the log is still its DOING before each step once it has
//! run for [`REPAIR_STEP_TICKS_MAX`], and stops otherwise. What closes the
//! window for a repairer stalled *between* a check and its CAS is the
//! owner's side: the blocks a log names come back only once the log is DONE
//! (`settle.rs`), so the (version, block) pair a stale CAS expects cannot
//! come round while that log is still being finished.

use fabric::{Batch, GlobalAddr, Replica};

use crate::client::TxClient;
use crate::commit::pointers_moved;
use crate::error::TxError;
use crate::log::{Log, HEADER_OFFSET, LOG_SLOT_BYTES};
use crate::obj::RawObj;
use crate::word::{DataPtr, LockWord, LogHeader, LogState, OwnerId};
use fabric::le_word;

/// A repair re-reads its log before a step once it has run this long
/// (10 ms, in lease ticks like the clock it is compared with). Far below the
/// shortest time in which one object's 16-bit pointer version can wrap
/// (65,536 commits of one object, each several round trips).
pub const REPAIR_STEP_TICKS_MAX: u64 = 10 * crate::lease::TICKS_PER_MS;
/// Rounds of reading the log and acting on it within one repair call.
const REPAIR_ROUNDS_MAX: u32 = 8;
/// Rounds of reading the primary and fencing it in one log-less repair: the
/// suspected holder has one pointer CAS that may land late, and so has each
/// suspected repairer before this one; more rounds mean the lock was lost.
const FENCE_ROUNDS_MAX: u32 = 3;
/// Attempts at installing a copy on the backups while their pointers move
/// under the repairer (only late CASes of suspected parties move them, one
/// each).
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
        for _ in 0..REPAIR_ROUNDS_MAX {
            let log = match self.read_log(slot).await? {
                Some(log) if log.checksum == found => log,
                _ => return self.repair_without_log(obj, found).await,
            };
            if log.header.state() == LogState::Done {
                return self.release_late_lock(&log, obj, found).await;
            }
            if let Some(outcome) = self.finish_log(&log, slot.add(HEADER_OFFSET), false).await? {
                return Ok(outcome);
            }
        }
        Ok(RepairOutcome::Retry)
    }

    /// Finishes the last log of `owner`, a client whose lease expired (what
    /// recovery runs for each owner id of a dead client, and the crash-point
    /// explorer for its crashed victims): aborts an INIT log, finishes an
    /// ABORT one, rolls a DOING one forward once its commit lease expired
    /// (`Busy` before), and brings every backup's header to the primary's.
    pub async fn finish_owner_log(&mut self, owner: OwnerId) -> Result<RepairOutcome, TxError> {
        let slot = self.heap.log_slot(owner)?;
        for _ in 0..REPAIR_ROUNDS_MAX {
            let log = match self.read_log(slot).await? {
                Some(log) if log.header.state() != LogState::Empty => log,
                _ => {
                    self.sync_slot(slot).await?;
                    return Ok(RepairOutcome::Repaired);
                }
            };
            if let Some(outcome) = self.finish_log(&log, slot.add(HEADER_OFFSET), false).await? {
                if outcome == RepairOutcome::Repaired {
                    self.sync_slot(slot).await?;
                }
                return Ok(outcome);
            }
        }
        Ok(RepairOutcome::Retry)
    }

    /// Reads and decodes the log slot at `slot` (`None`: nothing decodable).
    pub(crate) async fn read_log(&mut self, slot: GlobalAddr) -> Result<Option<Log>, TxError> {
        let mut batch = Batch::new();
        let h = batch.read(slot, LOG_SLOT_BYTES as u32);
        self.fabric.execute(&mut batch).await?;
        Ok(Log::decode(batch.read_result(h).map_err(TxError::Verb)?))
    }

    /// One step towards finishing `log`, whose locks carry its checksum and
    /// whose header is at `header_addr`: abort an INIT log, finish an ABORT
    /// one, roll an expired DOING one forward (a live one too with
    /// `take_live`: its owner settling its own log). `None`: read the log
    /// again. A DONE log is finished (`Repaired`).
    pub(crate) async fn finish_log(
        &mut self,
        log: &Log,
        header_addr: GlobalAddr,
        take_live: bool,
    ) -> Result<Option<RepairOutcome>, TxError> {
        let mut batch = Batch::new();
        match log.header.state() {
            LogState::Init => {
                let h = batch.on(Replica::All).cas(
                    header_addr,
                    log.header.raw(),
                    LogHeader::of(LogState::Abort, log.checksum).raw(),
                );
                self.fabric.execute(&mut batch).await?;
                self.converge_if_split(&batch, h, header_addr, log.checksum)
                    .await?;
                // Next round sees ABORT (ours, or the owner's own).
                Ok(None)
            }
            LogState::Abort => {
                for e in &log.entries {
                    batch.cas(
                        e.meta,
                        log.checksum.raw(),
                        LockWord::unlocked(e.old_version).raw(),
                    );
                }
                let h = batch.on(Replica::All).cas(
                    header_addr,
                    log.header.raw(),
                    LogHeader::of(LogState::Done, log.checksum).raw(),
                );
                self.fabric.execute(&mut batch).await?;
                self.converge_if_split(&batch, h, header_addr, log.checksum)
                    .await?;
                self.stats.repairs += 1;
                Ok(Some(RepairOutcome::Repaired))
            }
            LogState::Doing if !take_live && log.header.lease_tick() > self.now_tick() => {
                Ok(Some(RepairOutcome::Busy))
            }
            LogState::Doing => self.roll_forward(log, header_addr).await.map(Some),
            LogState::Done => {
                // What finishes a log also brings its backups along: a
                // party that stopped after its DONE reached the primary
                // may have left a backup behind.
                self.converge_header(header_addr, log.checksum).await?;
                Ok(Some(RepairOutcome::Repaired))
            }
            // `Log::decode` gives no log for DTX states: never here.
            LogState::Empty | LogState::Locking | LogState::Committed => Ok(Some(RepairOutcome::Retry)),
        }
    }

    /// `found` on `obj` names a log that is DONE. Every lock a commit or
    /// abort knew of was released before DONE, so it is a lock CAS of an
    /// owner paused in RT1 that landed after a repairer aborted its log and
    /// finished it; if the owner then died, nothing else would ever release
    /// it. Nothing happened under it: back to the version logged.
    async fn release_late_lock(
        &mut self,
        log: &Log,
        obj: RawObj,
        found: LockWord,
    ) -> Result<RepairOutcome, TxError> {
        if let Some(e) = log.entries.iter().find(|e| e.meta == obj.meta) {
            let mut batch = Batch::new();
            let h = batch.cas(e.meta, found.raw(), LockWord::unlocked(e.old_version).raw());
            self.fabric.execute(&mut batch).await?;
            if batch.old_value(h).map_err(TxError::Verb)? == found.raw() {
                self.stats.repairs += 1;
                return Ok(RepairOutcome::Repaired);
            }
        }
        Ok(RepairOutcome::Retry)
    }

    /// Finishes a DOING log whose commit lease expired (TryCommit by a
    /// repairer, or by its owner settling it).
    async fn roll_forward(&mut self, log: &Log, header_addr: GlobalAddr) -> Result<RepairOutcome, TxError> {
        let found = log.checksum;
        let started_tick = self.now_tick();
        let mine = LogHeader::new(LogState::Doing, self.commit_lease(log.entries.len(), true).await);
        let mut batch = Batch::new();
        let h = batch
            .on(Replica::All)
            .cas(header_addr, log.header.raw(), mine.raw());
        self.fabric.execute(&mut batch).await?;
        if batch.old_value(h).map_err(TxError::Verb)? != log.header.raw() {
            return Ok(RepairOutcome::Retry);
        }
        // Every backup says DOING before any pointer of the log lands on it.
        self.converge_if_split(&batch, h, header_addr, found).await?;
        let single_replica = log.entries.iter().all(|e| self.replicas(e.meta.region()) == 1)
            && self.replicas(self.heap.region()) == 1;
        if !self.still_mine(header_addr, mine, started_tick).await? {
            return Ok(RepairOutcome::Retry);
        }
        // The pointers on every replica (at one replica, the primary's, in
        // the batch of the releases: in order on its node); checked once the
        // releases tell whether each lock was still held.
        batch.clear();
        let installs: Vec<_> = log
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let h =
                    batch
                        .on(Replica::All)
                        .cas(e.meta.add(crate::obj::DPTR_OFFSET), e.old.raw(), e.new.raw());
                (i, 0, h)
            })
            .collect();
        let old_new = |i: usize| (log.entries[i].old, log.entries[i].new);
        let mut moved = Vec::new();
        if !single_replica {
            self.fabric.execute(&mut batch).await?;
            moved = pointers_moved(&batch, &installs, old_new)?;
            if !self.still_mine(header_addr, mine, started_tick).await? {
                return Ok(RepairOutcome::Retry);
            }
            batch.clear();
        }
        let (releases, done) = self.push_roll_releases(&mut batch, log, found, header_addr, mine);
        self.fabric.execute(&mut batch).await?;
        if single_replica {
            moved = pointers_moved(&batch, &installs, old_new)?;
        }
        self.check_installs(&batch, log, &moved, &releases)?;
        self.converge_if_split(&batch, done, header_addr, found).await?;
        self.stats.repairs += 1;
        Ok(RepairOutcome::Repaired)
    }

    /// The releases of a roll-forward (every logged lock from `found` to
    /// `old version + 1`) and its DONE, pushed on `batch`; returns the
    /// releases' handles in entry order and the DONE CAS's.
    fn push_roll_releases(
        &self,
        batch: &mut Batch,
        log: &Log,
        found: LockWord,
        header_addr: GlobalAddr,
        mine: LogHeader,
    ) -> (Vec<fabric::VerbHandle>, fabric::VerbHandle) {
        let releases = log
            .entries
            .iter()
            .map(|e| batch.cas(e.meta, found.raw(), LockWord::unlocked(e.old_version + 1).raw()))
            .collect();
        let done = batch.on(Replica::All).cas(
            header_addr,
            mine.raw(),
            LogHeader::of(LogState::Done, log.checksum).raw(),
        );
        (releases, done)
    }

    /// A pointer CAS of a roll-forward that found neither the logged old
    /// nor the new pointer is fine if the object's lock was gone by then:
    /// the owner installed and released, and later commits moved on. If the
    /// release that followed it (in order, on the primary) still found the
    /// logged lock, the pointer moved while that lock was held, which no
    /// step of the protocol does: a broken invariant.
    fn check_installs(
        &mut self,
        batch: &Batch,
        log: &Log,
        moved: &[(usize, usize, u64)],
        releases: &[fabric::VerbHandle],
    ) -> Result<(), TxError> {
        for &(i, replica, now) in moved {
            if batch.old_value(releases[i]).map_err(TxError::Verb)? == log.checksum.raw() {
                let e = &log.entries[i];
                return Err(self.invariant_broken(format!(
                    "rolling owner {}'s log forward, the pointer of {:?} on replica {replica} was {:?}, \
                     neither the logged old {:?} nor new {:?}, while its lock was still held",
                    log.checksum.owner(),
                    e.meta,
                    DataPtr::from_raw(now),
                    e.old,
                    e.new
                )));
            }
        }
        Ok(())
    }

    /// Counts and reports a broken protocol invariant; returns the error.
    pub(crate) fn invariant_broken(&mut self, what: String) -> TxError {
        self.stats.invariant_violations += 1;
        tracing::error!(owner = self.owner, %what, "rTX invariant broken");
        TxError::Invariant(what)
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

    /// Repairs a lock taken without a log: steal, copy, fence the primary,
    /// install on the backups, release above any earlier version.
    ///
    /// Every pointer CAS starts from a value read while this repair still
    /// held the stolen lock, proven by a READ of the lock issued after that
    /// value was seen. A repairer stalled anywhere here can therefore act
    /// only on pointers nobody moved since it lost the lock, and a pointer
    /// moves only by a CAS that bumps its version: whatever it does late
    /// fails. (Before, a "chase" CASed a backup from whatever it found, so
    /// a stalled repairer rolled a backup back behind an acknowledged
    /// commit: issue 19, item 1.)
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
        let stolen = self.next_lock(1).await;
        let mut batch = Batch::new();
        let h = batch.cas(obj.lock_addr(), found.raw(), stolen.raw());
        self.fabric.execute(&mut batch).await?;
        if batch.old_value(h).map_err(TxError::Verb)? != found.raw() {
            return Ok(RepairOutcome::Retry);
        }
        let Some((seen, copy)) = self.fence_primary(obj, stolen).await? else {
            return Ok(RepairOutcome::Retry);
        };
        if !self.install_on_backups(obj, stolen, &seen[1..], copy).await? {
            // A repairer that suspected this one holds the lock now; it
            // reads the backups under its own lock and installs its copy.
            return Ok(RepairOutcome::Retry);
        }
        batch.clear();
        let released = LockWord::unlocked(LockWord::version_floor(found));
        batch.cas(obj.lock_addr(), stolen.raw(), released.raw());
        self.fabric.execute(&mut batch).await?;
        self.stats.repairs += 1;
        Ok(RepairOutcome::Repaired)
    }

    /// Copies the primary's value to a fresh block on every replica and
    /// CASes the primary's pointer to it: the fence after which the
    /// suspected holder's own pointer CAS fails. Returns the pointers read
    /// on every replica under the lock (primary first) and the copy, or
    /// `None` if the lock is no longer `stolen`.
    ///
    /// The primary goes first, unlike a commit's backups-first order,
    /// because the copy holds the primary's committed value: a backup still
    /// pointing at the old block, or ahead at the holder's unacknowledged
    /// one, is never behind an acknowledged write. Backups first would let
    /// the holder's late primary CAS land after the repairer replaced its
    /// backups with the old value, and the holder acknowledge (item 2).
    async fn fence_primary(
        &mut self,
        obj: RawObj,
        stolen: LockWord,
    ) -> Result<Option<(Vec<DataPtr>, DataPtr)>, TxError> {
        // A section from the copy's allocation to the CAS that names it
        // (`crate::quiesce`); a repair inside a transaction nests in its.
        crate::client::Section::new(self)
            .0
            .fence_primary_in_section(obj, stolen)
            .await
    }

    async fn fence_primary_in_section(
        &mut self,
        obj: RawObj,
        stolen: LockWord,
    ) -> Result<Option<(Vec<DataPtr>, DataPtr)>, TxError> {
        let mut batch = Batch::new();
        // The suspected holder has at most one pointer CAS left to land on
        // the primary, and so has each repairer suspected before this one.
        for _ in 0..FENCE_ROUNDS_MAX {
            batch.clear();
            let ptrs = batch.on(Replica::All).read(obj.dptr_addr(), 8);
            // After the primary's pointer on its node: if the lock is still
            // ours, the primary's pointer was read under it.
            let held = batch.read(obj.lock_addr(), 8);
            self.fabric.execute(&mut batch).await?;
            if le_word(batch.read_result(held).map_err(TxError::Verb)?, 0) != stolen.raw() {
                return Ok(None);
            }
            // As many as the map the batch was routed by has, which may
            // not be the one of the previous round (a replica joined or
            // left: a chaos campaign pausing a primary panicked here).
            let replicas = batch.completions(ptrs).len();
            let seen: Vec<DataPtr> = (0..replicas)
                .map(|i| {
                    batch
                        .read_result_of(ptrs, i)
                        .map(|b| DataPtr::from_raw(le_word(b, 0)))
                        .map_err(TxError::Verb)
                })
                .collect::<Result<_, _>>()?;
            let primary = seen[0];
            // The lock again, issued after every backup's pointer READ
            // completed: still ours, so those were read under it too.
            batch.clear();
            let d = batch.read(GlobalAddr::new(obj.meta.region(), primary.offset()), obj.len);
            let held = batch.read(obj.lock_addr(), 8);
            self.fabric.execute(&mut batch).await?;
            if le_word(batch.read_result(held).map_err(TxError::Verb)?, 0) != stolen.raw() {
                return Ok(None);
            }
            let data = batch.read_result(d).map_err(TxError::Verb)?.to_vec();
            let offset = self.alloc_data(obj.len).await?;
            let copy = primary.successor(offset);
            // The copy on every replica; on the primary's node the WRITE
            // runs before the fence CAS (in order), and the backups have
            // theirs before any backup pointer names it (a later round trip).
            batch.clear();
            batch
                .on(Replica::All)
                .write(GlobalAddr::new(obj.meta.region(), offset), &data);
            let p = batch.cas(obj.dptr_addr(), primary.raw(), copy.raw());
            self.fabric.execute(&mut batch).await?;
            if let Some(e) = batch.first_error() {
                return Err(TxError::Verb(e));
            }
            if batch.old_value(p).map_err(TxError::Verb)? == primary.raw() {
                return Ok(Some((seen, copy)));
            }
            // The holder's late single-object commit (or a suspected
            // repairer's fence) landed: that value is the truth now. The
            // block just written is named by nothing; it stays with this
            // client's chunks.
        }
        Ok(None)
    }

    /// Points every backup at `copy`, each from the pointer read under the
    /// lock. A backup CAS that finds another value (the suspected holder's
    /// late backup CAS, or a suspected repairer's) is retried from that
    /// value only once a READ of the lock, issued after the CAS that found
    /// it, shows the lock still `stolen`: then it appeared while this repair
    /// held the lock, and no acknowledged commit can have put it there.
    /// Returns false if the lock was lost.
    async fn install_on_backups(
        &mut self,
        obj: RawObj,
        stolen: LockWord,
        seen: &[DataPtr],
        copy: DataPtr,
    ) -> Result<bool, TxError> {
        let mut from: Vec<(u8, u64)> = seen.iter().enumerate().map(|(b, p)| (b as u8, p.raw())).collect();
        let mut batch = Batch::new();
        for _ in 0..BACKUP_CAS_ATTEMPTS_MAX {
            if from.is_empty() {
                return Ok(true);
            }
            batch.clear();
            let handles: Vec<_> = from
                .iter()
                .map(|&(b, ptr)| batch.on(Replica::Backup(b)).cas(obj.dptr_addr(), ptr, copy.raw()))
                .collect();
            self.fabric.execute(&mut batch).await?;
            let mut moved = Vec::new();
            for (&(b, ptr), h) in from.iter().zip(handles) {
                let now = batch.old_value(h).map_err(TxError::Verb)?;
                if now != ptr && now != copy.raw() {
                    moved.push((b, now));
                }
            }
            if moved.is_empty() {
                return Ok(true);
            }
            batch.clear();
            let held = batch.read(obj.lock_addr(), 8);
            self.fabric.execute(&mut batch).await?;
            if le_word(batch.read_result(held).map_err(TxError::Verb)?, 0) != stolen.raw() {
                return Ok(false);
            }
            from = moved;
        }
        Err(TxError::Heap(format!(
            "a backup of {:?} keeps moving under a repair that holds its lock",
            obj.meta
        )))
    }
}
