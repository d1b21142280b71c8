//! The DTX client: one owner id, its log slot's two halves, its undo area,
//! the releases it owes, and the retry loop around transaction bodies.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabric::{Batch, Client, GlobalAddr, Replica};
use rand::{Rng, SeedableRng};

use crate::alloc::BlockAllocator;
use crate::config::TxConfig;
use crate::dtx::log::{half_addr, HALF_BYTES};
use crate::dtx::record::{self, Record, Version, RECORD_ALIGN};
use crate::dtx::tx::DtxTx;
use crate::error::{AbortReason, TxError};
use crate::heap::Heap;
use crate::lease::{LeaseSequence, Parity};
use crate::stats::TxStats;
use crate::word::{LockWord, OwnerId};
use fabric::le_word;

/// Bytes of one half of a client's undo area: the undo images (version word
/// and data) of one transaction. Matches a log half: 31 entries of a 1 KiB
/// B+tree node (1,032 bytes each) fit.
pub const UNDO_HALF_BYTES: u64 = 32 * 1024;

/// Reads of a record found invisible (being written in place) before a
/// read gives up and aborts `Locked`: a writer holds a record invisible for
/// one round trip, so a few yields usually see it visible again.
pub const INVISIBLE_READS_MAX: u32 = 16;

/// The flusher: a release batch sent in the background; whether every
/// verb of it landed, and the verbs it took.
type Flusher = tokio::task::JoinHandle<(bool, fabric::Stats)>;

/// Releases owed and not yet sent, shared with the flusher: whichever runs
/// first, the client's next batch or the flusher, sends them.
#[derive(Debug, Default)]
pub(crate) struct Owed {
    pub(crate) releases: Vec<Release>,
    /// The flusher took releases and has not seen them land yet.
    sending: bool,
    /// A flusher runs (it clears this, under the lock, when it stops).
    flushing: bool,
}

/// What a committed or aborted transaction still owes a record: its lock,
/// and for a record it wrote, the visible version that replaces its
/// invisible mark.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release {
    pub record: Record,
    /// The version to make visible, if the transaction wrote the record.
    pub version: Option<u64>,
    /// The node that was the region's primary when the locks were taken.
    /// Lock words live on the primary only: once another node is primary
    /// (a promotion), the lock is gone and the promotion finished the
    /// transaction's log, so the release is void and must not land (it
    /// would free a lock, or mark a version, of a later transaction).
    pub primary: Option<fabric::NodeId>,
}

/// The release verbs [`DtxClient::open_batch`] put in a batch, to check
/// once it ran.
#[derive(Debug, Default)]
#[must_use]
pub(crate) struct Opened {
    release_verbs: Vec<fabric::VerbHandle>,
}

/// Runs DTX transactions as one owner. One per client thread or coroutine.
///
/// A transaction's release is owed, not waited for (FORD's background
/// release). It rides the client's next batch, in front of its verbs, so
/// that on each node it lands before them, as posts to one queue pair do
/// (`open_batch`); and a flusher task, spawned at once, sends it on a fork
/// of the client if the client yields before its next batch (idle, or
/// waiting on something else), so that an idle client keeps nothing locked
/// or invisible. The flusher's verbs join this client's counters once it
/// is reaped. A fabric error
/// on any batch that may have left this owner's locks or invisible marks
/// behind makes the client *unsettled*: before its next transaction it
/// finishes its own log halves with the recovery routine (`recover.rs`).
#[derive(Debug)]
pub struct DtxClient {
    pub(crate) fabric: Client,
    pub(crate) heap: Heap,
    pub(crate) owner: OwnerId,
    pub(crate) config: TxConfig,
    pub(crate) alloc: BlockAllocator,
    /// The undo area: two halves of [`UNDO_HALF_BYTES`], matching the log
    /// halves; taken at the first transaction that locks.
    pub(crate) undo: Option<GlobalAddr>,
    /// The log half (and undo half) the next locking transaction uses.
    pub(crate) parity: u8,
    lock_leases: LeaseSequence,
    /// Releases owed and not yet sent.
    pub(crate) pending: Arc<Mutex<Owed>>,
    /// Releases kept out of the flusher's reach for the next batch (a log
    /// half is about to be written: `halves`).
    kept: Vec<Release>,
    /// Flushers known to be done, to collect.
    finished_flushers: Vec<Flusher>,
    /// The flusher, until reaped. A log half is not written again while it
    /// may carry the release of the transaction that used it last.
    flusher: Option<Flusher>,
    /// A fabric error may have left this owner's log half in use (locks,
    /// invisible marks, a release cut off): settle before anything else.
    pub(crate) unsettled: bool,
    pub(crate) commit_in_doubt: bool,
    pub(crate) stats: TxStats,
    rng: rand::rngs::StdRng,
}

impl DtxClient {
    /// A client running DTX transactions in `heap` as `owner`.
    pub fn new(fabric: Client, heap: Heap, owner: OwnerId, config: TxConfig) -> Result<Self, TxError> {
        heap.log_slot(owner)?;
        Ok(DtxClient {
            fabric,
            heap,
            owner,
            config,
            alloc: BlockAllocator::raw(heap, owner),
            undo: None,
            parity: 0,
            lock_leases: LeaseSequence::default(),
            pending: Arc::default(),
            finished_flushers: Vec::new(),
            kept: Vec::new(),
            flusher: None,
            unsettled: false,
            commit_in_doubt: false,
            stats: TxStats::default(),
            rng: rand::rngs::StdRng::seed_from_u64(u64::from(owner) ^ 0xD7C0),
        })
    }

    /// The owner id.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// The heap.
    pub fn heap(&self) -> Heap {
        self.heap
    }

    /// The configuration.
    pub fn config(&self) -> &TxConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// The fabric client (for its counters, or for verbs outside
    /// transactions).
    pub fn fabric(&mut self) -> &mut Client {
        &mut self.fabric
    }

    /// The fabric client, shared.
    pub fn fabric_ref(&self) -> &Client {
        &self.fabric
    }

    /// This client's clock in lease ticks.
    pub fn now_tick(&self) -> u64 {
        crate::lease::now_tick(&self.fabric)
    }

    /// Whether releases are owed and not known to have landed.
    pub fn owes_releases(&self) -> bool {
        !self.owed().releases.is_empty() || !self.kept.is_empty() || self.flusher.is_some()
    }

    /// The releases owed and not yet sent.
    pub(crate) fn owed(&self) -> std::sync::MutexGuard<'_, Owed> {
        lock_owed(&self.pending)
    }

    /// Owes `releases`: they ride the next batch, or the flusher sends them
    /// if it runs first (in a tokio runtime). One flusher at a time, which
    /// goes on while releases are owed: it stops, under the lock, only when
    /// it finds none, and `owe` starts one, under the same lock, whenever
    /// none is running, so no owed release is left without one.
    pub(crate) fn owe(&mut self, releases: Vec<Release>) {
        if releases.is_empty() {
            return;
        }
        let start = {
            let mut o = self.owed();
            o.releases.extend(releases);
            let start = !o.flushing && tokio::runtime::Handle::try_current().is_ok();
            o.flushing |= start;
            start
        };
        if !start {
            return;
        }
        if let Some(done) = self.flusher.take() {
            // The last flusher stopped (it cleared `flushing`): its counters
            // are collected at the next reap.
            self.finished_flushers.push(done);
        }
        let owed = self.pending.clone();
        let region = self.heap.region();
        let mut fork = self.fabric.fork();
        self.flusher = Some(tokio::spawn(async move {
            let mut landed = true;
            let mut batch = Batch::new();
            loop {
                let releases = {
                    let mut o = lock_owed(&owed);
                    if o.releases.is_empty() || !landed {
                        o.flushing = false;
                        break;
                    }
                    o.sending = true;
                    std::mem::take(&mut o.releases)
                };
                batch.clear();
                let releases = void_after_promotion(releases, &fork, region);
                let handles = push_releases(&mut batch, &releases);
                landed =
                    fork.execute(&mut batch).await.is_ok() && handles.iter().all(|&h| batch.done(h).is_ok());
                lock_owed(&owed).sending = false;
            }
            (landed, fork.stats())
        }));
    }

    /// Drops the releases kept for the next batch (recovery decides from
    /// DM instead).
    pub(crate) fn forget_kept(&mut self) {
        self.kept.clear();
    }

    /// Collects the flushers that are done (or waits for the one running,
    /// with `wait`): their verbs join this client's counters, and a release
    /// that did not land leaves the client unsettled.
    pub(crate) async fn reap(&mut self, wait: bool) {
        if self.flusher.as_ref().is_some_and(|f| wait || f.is_finished()) {
            if let Some(f) = self.flusher.take() {
                self.finished_flushers.push(f);
            }
        }
        for f in std::mem::take(&mut self.finished_flushers) {
            match f.await {
                Ok((landed, stats)) => {
                    self.fabric.absorb_stats(stats);
                    self.unsettled |= !landed;
                }
                // The task panicked or was cancelled (its runtime shut
                // down): what it sent is unknown.
                Err(_) => self.unsettled = true,
            }
        }
    }

    /// Whether the last commit was cut off by a fabric error in its commit
    /// batch, and forgets it: it may or may not have committed (every
    /// replica's COMMITTED decides, and recovery, which this client runs
    /// on its own log before its next transaction, finds out). Running the
    /// caller's operation again could apply it twice.
    pub fn take_commit_in_doubt(&mut self) -> bool {
        std::mem::take(&mut self.commit_in_doubt)
    }

    /// Starts a transaction by hand; prefer [`DtxClient::run`]. The client
    /// must be settled first ([`DtxClient::settle`]), which `run` does.
    pub fn begin(&mut self) -> DtxTx<'_> {
        DtxTx::new(self)
    }

    /// Runs `body` as a transaction until it commits, retrying on abort with
    /// exponential backoff (no-wait locking: a record found locked aborts
    /// the attempt), and returns the body's value from the attempt that
    /// committed. A body error other than an abort rolls the attempt back
    /// and is returned as is.
    pub async fn run<R>(
        &mut self,
        mut body: impl AsyncFnMut(&mut DtxTx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            self.settle().await?;
            let mut tx = self.begin();
            let result = match body(&mut tx).await {
                Ok(value) => tx.commit().await.map(|()| value),
                Err(e) => {
                    tx.rollback();
                    Err(e)
                }
            };
            let reason = match result {
                Ok(value) => return Ok(value),
                Err(TxError::Abort(reason)) => reason,
                Err(e) => return Err(e),
            };
            self.stats.aborts += 1;
            if attempt >= self.config.attempts_max {
                self.release_pending().await?;
                return Err(TxError::TooManyAborts {
                    attempts: attempt,
                    last: reason,
                });
            }
            self.backoff(attempt).await?;
        }
    }

    /// Waits before attempt `attempt + 1`. A wait that sleeps sends the
    /// releases owed first: nobody should wait on locks this client holds
    /// while it sleeps.
    pub async fn backoff(&mut self, attempt: u32) -> Result<(), TxError> {
        let min = self.config.backoff_min.as_nanos() as u64;
        let max = self.config.backoff_max.as_nanos() as u64;
        let ceiling = min.saturating_mul(1 << attempt.min(20)).min(max);
        let wait = Duration::from_nanos(self.rng.gen_range(0..=ceiling));
        if attempt <= 2 || wait.is_zero() || tokio::runtime::Handle::try_current().is_err() {
            tokio::task::yield_now().await;
        } else {
            self.release_pending().await?;
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// Sends the releases owed now and waits for them to land, those in
    /// the background included (shutdown, a test's quiescence, before a
    /// sleep). Nothing owed costs nothing.
    pub async fn release_pending(&mut self) -> Result<(), TxError> {
        self.reap(true).await;
        if self.owed().releases.is_empty() && self.kept.is_empty() {
            return Ok(());
        }
        let mut batch = self.fabric.take_batch();
        let opened = self.open_batch(&mut batch);
        let result = self.send(&mut batch, opened, None).await;
        self.fabric.give_batch(batch);
        result
    }

    /// Finishes this owner's own logs if a fabric error may have left them
    /// in use (locks held, records invisible): the recovery routine on its
    /// own slot. Every transaction of [`DtxClient::run`] does this first.
    pub async fn settle(&mut self) -> Result<(), TxError> {
        self.reap(false).await;
        if !self.unsettled {
            return Ok(());
        }
        self.reap(true).await;
        self.finish_own_logs().await?;
        self.unsettled = false;
        Ok(())
    }

    /// Clears `batch` and puts the releases owed at its head: on each
    /// node they precede whatever the caller pushes next. Pass the result
    /// to [`DtxClient::send`].
    pub(crate) fn open_batch(&mut self, batch: &mut Batch) -> Opened {
        batch.clear();
        let mut releases = std::mem::take(&mut self.kept);
        releases.append(&mut self.owed().releases);
        let releases = void_after_promotion(releases, &self.fabric, self.heap.region());
        Opened {
            release_verbs: push_releases(batch, &releases),
        }
    }

    /// The node that is the primary of this client's region in the map it
    /// routes by now.
    pub(crate) fn primary_node(&self) -> Option<fabric::NodeId> {
        primary_of(&self.fabric, self.heap.region())
    }

    /// Executes a batch [`DtxClient::open_batch`] began, in one round trip,
    /// pinned to `epoch` when given ([`Client::execute_pinned`]: a commit's
    /// batches must reach the replicas its locks' batch reached).
    ///
    /// A fabric error, or a release verb refused, makes the client
    /// unsettled: its releases may or may not have landed, and only the
    /// recovery routine (which looks at what DM holds) may finish them.
    /// (Callers mark it unsettled too when their own verbs may have left
    /// locks or marks.)
    pub(crate) async fn send(
        &mut self,
        batch: &mut Batch,
        opened: Opened,
        epoch: Option<fabric::Epoch>,
    ) -> Result<(), TxError> {
        let result = match epoch {
            Some(epoch) => self.fabric.execute_pinned(batch, epoch).await,
            None => self.fabric.execute(batch).await,
        };
        if let Err(e) = result {
            self.unsettled |= !opened.release_verbs.is_empty();
            return Err(e.into());
        }
        for h in opened.release_verbs {
            if let Err(e) = batch.done(h) {
                self.unsettled = true;
                return Err(TxError::Verb(e));
            }
        }
        Ok(())
    }

    /// The next lock word of this owner: unique (the checksum rule), its
    /// lease `op_time * objects + drift` long. No DTX client acts on a
    /// lease; it makes the word unique and says when its holder meant to
    /// be done, for diagnostics.
    pub(crate) async fn next_lock(&mut self, objects: usize) -> LockWord {
        let lease_ticks = self.config.lease_ticks(objects);
        let (tick, waited) = self
            .lock_leases
            .take_by(&self.fabric, lease_ticks, Parity::Any)
            .await;
        self.stats.lease_waits += u64::from(waited);
        LockWord::locked(self.owner, tick)
    }

    /// The log half and undo half of the next locking transaction (once the
    /// release of the transaction that used them before has landed).
    pub(crate) async fn halves(&mut self) -> Result<(GlobalAddr, GlobalAddr), TxError> {
        // The flusher may be sending the release of the transaction that
        // used this half last: it must have landed before the half is
        // written again. (Releases not taken yet ride this transaction's
        // first batch, in front of its log on every node.)
        // Releases not taken yet are kept for this client's next batch,
        // out of the flusher's reach.
        loop {
            let sending = {
                let mut o = self.owed();
                if !o.sending {
                    let taken = std::mem::take(&mut o.releases);
                    drop(o);
                    self.kept.extend(taken);
                    break;
                }
                true
            };
            self.reap(sending).await;
        }
        let undo = match self.undo {
            Some(undo) => undo,
            None => {
                let at = self
                    .alloc
                    .data(&mut self.fabric, (2 * UNDO_HALF_BYTES) as u32)
                    .await?;
                let undo = GlobalAddr::new(self.heap.region(), at);
                self.undo = Some(undo);
                undo
            }
        };
        let slot = self.heap.log_slot(self.owner)?;
        let p = self.parity;
        Ok((half_addr(slot, p), undo.add(u64::from(p) * UNDO_HALF_BYTES)))
    }

    /// A locking transaction used its halves: the next one takes the
    /// others, so that this one's release, in flight while the next one
    /// logs, never shares a half with its log.
    pub(crate) fn flip_halves(&mut self) {
        self.parity ^= 1;
    }

    /// Space for a record of `len` data bytes (16-byte aligned), never
    /// reused (as an index's own memory).
    pub(crate) async fn alloc_record(&mut self, len: u32) -> Result<Record, TxError> {
        let bytes = (record::HEADER_BYTES + u64::from(len)).next_multiple_of(RECORD_ALIGN);
        let bytes = u32::try_from(bytes)
            .map_err(|_| TxError::BadObject(format!("a record of {len} bytes is too large")))?;
        let at = self.alloc.data(&mut self.fabric, bytes).await?;
        if at % RECORD_ALIGN != 0 {
            return Err(TxError::Heap(format!(
                "the allocator returned {at:#x} for a record: not {RECORD_ALIGN}-byte aligned"
            )));
        }
        Ok(Record::new(GlobalAddr::new(self.heap.region(), at), len))
    }

    /// Creates a record holding `bytes` outside any transaction: allocated
    /// and written (free, visible at version 0) on every replica in one
    /// round trip. It is unreachable until something committed names it.
    pub async fn create_raw(&mut self, bytes: &[u8]) -> Result<Record, TxError> {
        self.settle().await?;
        let len = u32::try_from(bytes.len())
            .map_err(|_| TxError::BadObject(format!("a record of {} bytes is too large", bytes.len())))?;
        let rec = self.alloc_record(len).await?;
        let mut batch = self.fabric.take_batch();
        let opened = self.open_batch(&mut batch);
        let h = batch.on(Replica::All).write(rec.addr, &created_image(bytes));
        let result = match self.send(&mut batch, opened, None).await {
            Ok(()) => batch.done(h).map_err(TxError::Verb),
            Err(e) => Err(e),
        };
        self.fabric.give_batch(batch);
        result.map(|()| rec)
    }

    /// Reads a record outside any transaction, without a lock: its version
    /// and data, consistent (the version word read before and after the
    /// data, in one round trip, equal and visible). For an index's lookups.
    pub async fn read_record(&mut self, rec: Record) -> Result<(u64, Vec<u8>), TxError> {
        self.settle().await?;
        let mut batch = self.fabric.take_batch();
        let result = self.read_consistent(&mut batch, rec).await;
        self.fabric.give_batch(batch);
        result
    }

    /// One record, read whole and then its version word again (1 round
    /// trip per try), again while it is invisible.
    pub(crate) async fn read_consistent(
        &mut self,
        batch: &mut Batch,
        rec: Record,
    ) -> Result<(u64, Vec<u8>), TxError> {
        for _ in 0..INVISIBLE_READS_MAX {
            let whole = u32::try_from(rec.bytes())
                .map_err(|_| TxError::BadObject(format!("record {rec:?} is too large to read")))?;
            let opened = self.open_batch(batch);
            let r = batch.read(rec.addr, whole);
            let v = batch.read(rec.version_addr(), 8);
            self.send(batch, opened, None).await?;
            let bytes = batch.read_result(r).map_err(TxError::Verb)?;
            let after = batch.read_result(v).map_err(TxError::Verb)?;
            let before = le_word(bytes, record::VERSION_OFFSET as usize);
            match Version::from_raw(before) {
                Version::Visible(version) if before == le_word(after, 0) => {
                    return Ok((version, bytes[record::DATA_OFFSET as usize..].to_vec()));
                }
                Version::Invisible(by) if by.owner() == self.owner && self.owes_releases() => {
                    // This owner's own commit, its release in flight.
                    self.release_pending().await?;
                }
                _ => {
                    self.stats.invisible_waits += 1;
                    tokio::task::yield_now().await;
                }
            }
        }
        Err(TxError::Abort(AbortReason::Locked))
    }

    /// Replicas of the heap's region.
    pub(crate) fn replicas(&self) -> usize {
        self.fabric
            .map()
            .region(self.heap.region())
            .map_or(1, |r| r.replicas.len())
    }
}

fn lock_owed(owed: &Mutex<Owed>) -> std::sync::MutexGuard<'_, Owed> {
    // A panic while the lock was held left plain values.
    owed.lock().unwrap_or_else(|p| p.into_inner())
}

/// A record's bytes as created: free, visible at version 0, the data.
pub(crate) fn created_image(data: &[u8]) -> Vec<u8> {
    let mut image = Vec::with_capacity(record::HEADER_BYTES as usize + data.len());
    image.extend_from_slice(&record::created_header(0));
    image.extend_from_slice(data);
    image
}

/// Pushes `releases` onto `batch`: per record, its new visible version
/// (every replica) before its lock word (the primary), so that on the
/// primary a free lock never shows an invisible record. Returns the
/// handles to check.
pub(crate) fn push_releases(batch: &mut Batch, releases: &[Release]) -> Vec<fabric::VerbHandle> {
    let mut handles = Vec::with_capacity(releases.len() * 2);
    for r in releases {
        if let Some(v) = r.version {
            let visible = Version::Visible(v).raw().to_le_bytes();
            handles.push(batch.on(Replica::All).write(r.record.version_addr(), &visible));
        }
        handles.push(batch.write(r.record.lock_addr(), &record::FREE.to_le_bytes()));
    }
    handles
}

/// The node that is `region`'s primary in the map `fabric` routes by now.
fn primary_of(fabric: &Client, region: fabric::RegionId) -> Option<fabric::NodeId> {
    fabric
        .map()
        .region(region)
        .and_then(|r| r.replicas.first().map(|l| l.node))
}

/// `releases` without those whose locks were taken under another primary
/// than `fabric`'s map has now ([`Release::primary`]). While the region is
/// out of the map (a restore: a promotion, or a re-replication that keeps
/// the primary) nothing is dropped: the batch fails to route, which leaves
/// the client unsettled, and its own recovery decides from DM.
fn void_after_promotion(releases: Vec<Release>, fabric: &Client, region: fabric::RegionId) -> Vec<Release> {
    // Every batch of the client passes here: nothing owed, no map lookup.
    if releases.is_empty() {
        return releases;
    }
    let Some(now) = primary_of(fabric, region) else {
        return releases;
    };
    let before = releases.len();
    let live: Vec<Release> = releases
        .into_iter()
        .filter(|r| r.primary.is_none_or(|p| p == now))
        .collect();
    if live.len() < before {
        tracing::debug!(
            region,
            void = before - live.len(),
            "releases of locks taken under a former primary dropped: the promotion finished their logs"
        );
    }
    live
}

/// The replica target of the `i`-th replica (0: the primary).
pub(crate) fn replica(i: usize) -> Replica {
    match i {
        0 => Replica::Primary,
        i => Replica::Backup(u8::try_from(i - 1).unwrap_or(u8::MAX)),
    }
}

/// Bytes of one half of the log, as a READ length.
pub(crate) const HALF_READ_BYTES: u32 = HALF_BYTES as u32;
