//! A transaction's execution phase: reads fetch the meta then the data and
//! keep local copies; writes stay local until commit (`commit.rs`).
//!
//! The paper's Figure 7: `TXRead` is two READs (meta, then data) the first
//! time an object is touched and none after; `TXWrite` only records the new
//! value. Opt2 adds [`Tx::lock_now`] (pre-lock during execution, as Sherman's
//! leaf updates want) and [`Tx::check_lease`] (no concurrency control on an
//! object whose update is atomic by other means, keeping only the lease
//! check, as RACE inserts want).

use bytemuck::Pod;
use fabric::{Batch, GlobalAddr};

use crate::client::TxClient;
use crate::error::{AbortReason, TxError};
use crate::hint::MetaHint;
use crate::obj::{RawObj, TxObj, META_BYTES};
use crate::repair::RepairOutcome;
use crate::word::{DataPtr, LockWord};
use fabric::le_word;

/// Rounds of "meet an expired lock, repair it, look again" before an access
/// gives up and aborts: repairs are idempotent and a round usually suffices;
/// the bound keeps a pathological owner from pinning this transaction.
const REPAIR_ROUNDS_MAX: u32 = 8;

/// What a transaction read.
#[derive(Debug)]
pub(crate) struct ReadEntry {
    pub obj: RawObj,
    /// The unlocked lock word seen: the version validation expects.
    pub seen: LockWord,
    pub dptr: DataPtr,
    pub data: Vec<u8>,
}

/// What a transaction will write.
#[derive(Debug)]
pub(crate) struct WriteEntry {
    pub obj: RawObj,
    /// The unlocked lock word seen; the lock CAS expects it, so locking also
    /// validates that the object did not change.
    pub seen: LockWord,
    pub old: DataPtr,
    pub data: Vec<u8>,
    /// Set at commit: the block the new data goes to.
    pub new: Option<DataPtr>,
    /// Locked during execution (Opt2).
    pub prelocked: bool,
    /// The replaced block is never reused ([`Tx::retire_replaced`]).
    pub retire: bool,
}

/// An object created by this transaction: written at commit.
#[derive(Debug)]
pub(crate) struct Fresh {
    pub meta: GlobalAddr,
    pub data_offset: u64,
    pub data: Vec<u8>,
}

/// A transaction in progress. Made by [`TxClient::run`] (or
/// [`TxClient::begin`]); ends with [`Tx::commit`] or [`Tx::rollback`].
#[derive(Debug)]
pub struct Tx<'c> {
    pub(crate) c: &'c mut TxClient,
    pub(crate) reads: Vec<ReadEntry>,
    pub(crate) writes: Vec<WriteEntry>,
    pub(crate) fresh: Vec<Fresh>,
    /// The lock word pre-locks were taken with, if any.
    pub(crate) prelock: Option<LockWord>,
    /// The map the transaction's first locks were taken under, and the
    /// primary of its heap's region there: every later batch is pinned to
    /// it ([`Tx::execute_under_locks`]).
    pub(crate) locked_under: Option<(fabric::Epoch, Option<fabric::NodeId>)>,
    pub(crate) batch: Batch,
}

impl Drop for Tx<'_> {
    /// Gives the batch's buffers back to the client for its next operation,
    /// and ends the transaction's section (`crate::quiesce`).
    fn drop(&mut self) {
        self.c.fabric.give_batch(std::mem::take(&mut self.batch));
        self.c.exit_section();
    }
}

impl<'c> Tx<'c> {
    pub(crate) fn new(c: &'c mut TxClient) -> Self {
        let batch = c.fabric.take_batch();
        c.enter_section();
        Tx {
            c,
            reads: Vec::new(),
            writes: Vec::new(),
            fresh: Vec::new(),
            prelock: None,
            locked_under: None,
            batch,
        }
    }

    /// The client running this transaction.
    pub fn client(&mut self) -> &mut TxClient {
        self.c
    }

    /// Reads a typed object.
    pub async fn read<T: Pod>(&mut self, obj: TxObj<T>) -> Result<T, TxError> {
        let bytes = self.read_raw(obj.raw()).await?;
        Ok(bytemuck::pod_read_unaligned(bytes))
    }

    /// Writes a typed object (at commit).
    pub async fn write<T: Pod>(&mut self, obj: TxObj<T>, value: &T) -> Result<(), TxError> {
        self.write_raw(obj.raw(), bytemuck::bytes_of(value)).await
    }

    /// Creates an object holding `value`; it is written at commit, and is
    /// reachable once something committed refers to it.
    pub async fn create<T: Pod>(&mut self, value: &T) -> Result<TxObj<T>, TxError> {
        Ok(TxObj::at(self.create_raw(bytemuck::bytes_of(value)).await?.meta))
    }

    /// Creates an object holding `bytes` (see [`Tx::create`]).
    pub async fn create_raw(&mut self, bytes: &[u8]) -> Result<RawObj, TxError> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| TxError::BadObject(format!("an object of {} bytes is too large", bytes.len())))?;
        let meta = self.c.alloc.meta(&mut self.c.fabric).await?;
        let data_offset = self.c.alloc_data(len).await?;
        self.fresh.push(Fresh {
            meta,
            data_offset,
            data: bytes.to_vec(),
        });
        Ok(RawObj { meta, len })
    }

    /// Keeps the block `obj`'s commit replaces out of reuse. For objects
    /// that lock-free writers outside rTX update in place (a RACE subtable's
    /// slots): such a writer may still CAS into the replaced block after the
    /// commit, which is harmless in a dead block and corruption in a reused
    /// one. `obj` must be in the write set, and the heap marked
    /// ([`Heap::mark_retiring`](crate::Heap::mark_retiring)) so that no
    /// reclaim takes the retired block for a free one.
    pub fn retire_replaced(&mut self, obj: RawObj) -> Result<(), TxError> {
        match self.writes.iter_mut().find(|w| w.obj.meta == obj.meta) {
            Some(w) => {
                w.retire = true;
                Ok(())
            }
            None => Err(TxError::BadObject(format!(
                "{:?} is not in the write set: only a written object's block is replaced",
                obj.meta
            ))),
        }
    }

    /// Reads an object's bytes: from the write set or read set if it is
    /// there, else from DM (meta, then data: two round trips).
    pub async fn read_raw(&mut self, obj: RawObj) -> Result<&[u8], TxError> {
        if let Some(i) = self.writes.iter().position(|w| w.obj.meta == obj.meta) {
            return Ok(&self.writes[i].data);
        }
        if let Some(i) = self.fresh.iter().position(|f| f.meta == obj.meta) {
            return Ok(&self.fresh[i].data);
        }
        if let Some(i) = self.reads.iter().position(|r| r.obj.meta == obj.meta) {
            return Ok(&self.reads[i].data);
        }
        let (seen, dptr) = self.unlocked_meta(obj).await?;
        self.batch.clear();
        let h = self
            .batch
            .read(GlobalAddr::new(obj.meta.region(), dptr.offset()), obj.len);
        self.c.fabric.execute(&mut self.batch).await?;
        let data = self.batch.read_result(h).map_err(TxError::Verb)?.to_vec();
        self.reads.push(ReadEntry {
            obj,
            seen,
            dptr,
            data,
        });
        Ok(&self.reads[self.reads.len() - 1].data)
    }

    /// Records a new value for part of an object: its copy in this
    /// transaction (what it read or last wrote) with `bytes` at byte `at`.
    /// Cheaper than [`Tx::write_raw`] when a small change of a large object
    /// would cost more to re-encode than to patch (a B+tree entry update:
    /// one entry check instead of every slot's). Reads the object first if
    /// the transaction has no copy of it.
    pub async fn write_part(&mut self, obj: RawObj, at: usize, bytes: &[u8]) -> Result<(), TxError> {
        let end = at.checked_add(bytes.len()).filter(|&e| e <= obj.len as usize);
        let Some(end) = end else {
            return Err(TxError::BadObject(format!(
                "{:?} holds {} bytes: no room for {} at {at}",
                obj.meta,
                obj.len,
                bytes.len()
            )));
        };
        if let Some(w) = self.writes.iter_mut().find(|w| w.obj.meta == obj.meta) {
            w.data[at..end].copy_from_slice(bytes);
            return Ok(());
        }
        let mut data = self.read_raw(obj).await?.to_vec();
        data[at..end].copy_from_slice(bytes);
        self.write_raw(obj, &data).await
    }

    /// Records a new value for an object. If the object was not read, its
    /// meta is read now (one round trip) for the version and pointer the
    /// commit must replace.
    pub async fn write_raw(&mut self, obj: RawObj, bytes: &[u8]) -> Result<(), TxError> {
        if bytes.len() != obj.len as usize {
            return Err(TxError::BadObject(format!(
                "{:?} holds {} bytes, not {}",
                obj.meta,
                obj.len,
                bytes.len()
            )));
        }
        if let Some(w) = self.writes.iter_mut().find(|w| w.obj.meta == obj.meta) {
            w.data.copy_from_slice(bytes);
            return Ok(());
        }
        if let Some(f) = self.fresh.iter_mut().find(|f| f.meta == obj.meta) {
            f.data.copy_from_slice(bytes);
            return Ok(());
        }
        let (seen, old) = match self.reads.iter().find(|r| r.obj.meta == obj.meta) {
            Some(r) => (r.seen, r.dptr),
            None => self.unlocked_meta(obj).await?,
        };
        self.writes.push(WriteEntry {
            obj,
            seen,
            old,
            data: bytes.to_vec(),
            new: None,
            prelocked: false,
            retire: false,
        });
        Ok(())
    }

    /// Opt2: locks an object now, during execution, so that concurrent
    /// writers of it wait instead of making this transaction abort at commit.
    /// The object joins the write set (with its current value until written).
    pub async fn lock_now(&mut self, obj: RawObj) -> Result<(), TxError> {
        if !self.writes.iter().any(|w| w.obj.meta == obj.meta) {
            let current = self.read_raw(obj).await?.to_vec();
            self.write_raw(obj, &current).await?;
        }
        let i = self
            .writes
            .iter()
            .position(|w| w.obj.meta == obj.meta)
            .expect("the object was just put in the write set");
        if self.writes[i].prelocked {
            return Ok(());
        }
        let lock = self.prelock_word().await;
        let seen = self.writes[i].seen;
        self.batch.clear();
        let h = self.batch.cas(obj.lock_addr(), seen.raw(), lock.raw());
        self.execute_under_locks().await?;
        self.note_locked();
        let found = LockWord::from_raw(self.batch.old_value(h).map_err(TxError::Verb)?);
        if found == seen {
            self.writes[i].prelocked = true;
            return Ok(());
        }
        Err(self.conflict(obj, found).await)
    }

    /// Opt2 with the read folded in: pre-locks `obj` and reads its data,
    /// and returns the data.
    ///
    /// Without a hint: reads the meta, then CASes the lock word seen to the
    /// pre-lock and READs the data in one batch (two round trips where
    /// `read_raw` then `lock_now` take three). Sound because the CAS precedes
    /// the READ on one memory node: if the CAS wins, the version did not
    /// change since the meta was read, so the data pointer read with it is
    /// still the live one and the READ returns the data under the lock.
    ///
    /// With a [`MetaHint`](crate::MetaHint) for `obj` in the client's
    /// cache: the same batch straight away, CASing from the hinted version
    /// and READing the hinted block (one round trip); by the hint rule
    /// (`txn::hint`) a CAS that wins proves the hinted pointer live. The
    /// batch also READs the data pointer after the CAS, so a stale hint
    /// (the CAS found another unlocked version) costs one round trip more,
    /// not two: that version and that pointer form a fresh pair.
    pub async fn read_locked(&mut self, obj: RawObj) -> Result<&[u8], TxError> {
        self.read_locked_hinted(obj, None).await
    }

    /// [`Tx::read_locked`] with a hint the caller keeps itself (a cache
    /// that has it where the caller already looks, see [`crate::HintSlot`])
    /// instead of the client's hint cache; `None` looks there. A stale one
    /// costs what a stale cached hint does: one round trip more.
    pub async fn read_locked_hinted(
        &mut self,
        obj: RawObj,
        hint: Option<MetaHint>,
    ) -> Result<&[u8], TxError> {
        let known = self.writes.iter().any(|w| w.obj.meta == obj.meta)
            || self.reads.iter().any(|r| r.obj.meta == obj.meta)
            || self.fresh.iter().any(|f| f.meta == obj.meta);
        if known {
            self.lock_now(obj).await?;
            return self.read_raw(obj).await;
        }
        let hint = hint.or_else(|| self.c.hints.get(obj.meta));
        let (mut seen, mut old) = match hint {
            Some(h) => {
                self.check_meta_addr(obj)?;
                (h.lock_word(), h.dptr)
            }
            None => self.unlocked_meta(obj).await?,
        };
        let lock = self.prelock_word().await;
        // At most two rounds: the first CAS can only miss on a stale hint,
        // and then the second has a pair read after it.
        let mut may_be_stale = hint.is_some();
        let data = loop {
            self.batch.clear();
            let c = self.batch.cas(obj.lock_addr(), seen.raw(), lock.raw());
            let p = may_be_stale.then(|| self.batch.read(obj.dptr_addr(), 8));
            let d = self
                .batch
                .read(GlobalAddr::new(obj.meta.region(), old.offset()), obj.len);
            self.c.fabric.execute(&mut self.batch).await?;
            let found = LockWord::from_raw(self.batch.old_value(c).map_err(TxError::Verb)?);
            if found == seen {
                break self.batch.read_result(d).map_err(TxError::Verb)?.to_vec();
            }
            match p {
                // The CAS found the word unlocked at `found` and the pointer
                // was read after it: if the next CAS wins from `found`, no
                // pointer moved since, and this one is live.
                Some(p) if !found.is_locked() => {
                    self.c.stats.stale_hints += 1;
                    seen = found;
                    old = DataPtr::from_raw(le_word(self.batch.read_result(p).map_err(TxError::Verb)?, 0));
                    may_be_stale = false;
                }
                _ => return Err(self.conflict(obj, found).await),
            }
        };
        self.writes.push(WriteEntry {
            obj,
            seen,
            old,
            data,
            new: None,
            prelocked: true,
            retire: false,
        });
        Ok(&self.writes[self.writes.len() - 1].data)
    }

    /// Opt2: checks only that no live transaction holds `obj`'s lock, and
    /// repairs an expired holder. For objects whose update is atomic by
    /// other means (a RACE slot CAS under a subtable TXObj): the object is
    /// not added to the read or write set.
    pub async fn check_lease(&mut self, obj: RawObj) -> Result<(), TxError> {
        for _ in 0..REPAIR_ROUNDS_MAX {
            self.batch.clear();
            let h = self.batch.read(obj.lock_addr(), 8);
            self.c.fabric.execute(&mut self.batch).await?;
            let lock = LockWord::from_raw(le_word(self.batch.read_result(h).map_err(TxError::Verb)?, 0));
            if !lock.is_locked() {
                return Ok(());
            }
            if !self.c.may_repair(lock, self.prelock) {
                return Err(TxError::Abort(AbortReason::Locked));
            }
            self.c.stats.expired_seen += 1;
            self.c.repair(obj, lock).await?;
        }
        Err(TxError::Abort(AbortReason::Locked))
    }

    /// Executes the batch, pinned to the map the transaction's locks were
    /// taken under, if it took any. Lock words live on the primary: a batch
    /// routed by a map with another primary would act on objects this
    /// transaction does not hold (a batch held up by a paused primary runs
    /// there when it resumes, while its replacement serves others). A map
    /// that moved and kept the primary (a backup joined or left) is followed;
    /// one that changed it is `FabricError::MapMoved`, nothing sent.
    pub(crate) async fn execute_under_locks(&mut self) -> Result<(), TxError> {
        let Some((mut epoch, primary)) = self.locked_under else {
            return Ok(self.c.fabric.execute(&mut self.batch).await?);
        };
        loop {
            match self.c.fabric.execute_pinned(&mut self.batch, epoch).await {
                Err(fabric::FabricError::MapMoved { now, .. }) if self.primary_kept() => {
                    epoch = now;
                    self.locked_under = Some((now, primary));
                }
                sent => return Ok(sent?),
            }
        }
    }

    /// Whether the map the client routes by now has the primary the
    /// transaction's locks were taken on (yes if it took none).
    pub(crate) fn primary_kept(&self) -> bool {
        self.locked_under
            .is_none_or(|(_, p)| self.c.primary(self.c.heap.region()) == p)
    }

    /// A batch that took locks ran: from now on the transaction's batches
    /// follow its map ([`Tx::execute_under_locks`]).
    pub(crate) fn note_locked(&mut self) {
        if self.locked_under.is_none() {
            let region = self.c.heap.region();
            self.locked_under = Some((self.c.fabric.epoch(), self.c.primary(region)));
        }
    }

    /// Aborts this attempt on purpose; [`TxClient::run`] retries it.
    pub fn abort(&self) -> TxError {
        TxError::Abort(AbortReason::User)
    }

    /// The lock word every pre-lock of this transaction shares, taken on
    /// the first pre-lock with a lease for the objects locked so far and
    /// one more.
    async fn prelock_word(&mut self) -> LockWord {
        if let Some(l) = self.prelock {
            return l;
        }
        let l = self.c.next_lock(self.writes.len() + 1).await;
        self.prelock = Some(l);
        l
    }

    /// Refuses a meta this client cannot commit: misaligned, or outside
    /// its heap's region.
    fn check_meta_addr(&self, obj: RawObj) -> Result<(), TxError> {
        if obj.meta.offset() % META_BYTES != 0 {
            return Err(TxError::BadObject(format!(
                "meta {:?} is not 16-byte aligned",
                obj.meta
            )));
        }
        // Data pointers are offsets in the meta's region, but this client
        // allocates new blocks (commits, log-less repairs) in its heap's
        // region only: an object of another region would get its new data
        // written at an offset allocated elsewhere, over whatever is there.
        if obj.meta.region() != self.c.heap.region() {
            return Err(TxError::BadObject(format!(
                "{:?} is outside this client's heap (region {})",
                obj.meta,
                self.c.heap.region()
            )));
        }
        Ok(())
    }

    /// Reads an object's meta (one round trip) until it is unlocked,
    /// repairing expired holders on the way.
    async fn unlocked_meta(&mut self, obj: RawObj) -> Result<(LockWord, DataPtr), TxError> {
        self.check_meta_addr(obj)?;
        for _ in 0..REPAIR_ROUNDS_MAX {
            self.batch.clear();
            let h = self.batch.read(obj.meta, META_BYTES as u32);
            self.c.fabric.execute(&mut self.batch).await?;
            let meta = self.batch.read_result(h).map_err(TxError::Verb)?;
            let lock = LockWord::from_raw(le_word(meta, 0));
            let dptr = DataPtr::from_raw(le_word(meta, 8));
            if !lock.is_locked() {
                return Ok((lock, dptr));
            }
            if !self.c.may_repair(lock, self.prelock) {
                return Err(TxError::Abort(AbortReason::Locked));
            }
            self.c.stats.expired_seen += 1;
            self.c.repair(obj, lock).await?;
        }
        Err(TxError::Abort(AbortReason::Locked))
    }

    /// Turns a lock word found where another was expected into the abort it
    /// means, repairing an expired holder first (the paper's Figure 8, lines
    /// 5–7 and 10–13).
    pub(crate) async fn conflict(&mut self, obj: RawObj, found: LockWord) -> TxError {
        if !found.is_locked() {
            return TxError::Abort(AbortReason::Changed);
        }
        if !self.c.may_repair(found, self.prelock) {
            return TxError::Abort(AbortReason::Locked);
        }
        self.c.stats.expired_seen += 1;
        match self.c.repair(obj, found).await {
            Ok(RepairOutcome::Repaired | RepairOutcome::Retry) => TxError::Abort(AbortReason::Repaired),
            Ok(RepairOutcome::Busy) => TxError::Abort(AbortReason::Locked),
            Err(e) => e,
        }
    }
}
