//! The transaction client: one owner id, its log slot, its allocator, and
//! the retry loop around transaction bodies.

use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;
use fabric::{Batch, Client, NodeId, RegionId, Replica};
use rand::{Rng, SeedableRng};

use crate::alloc::BlockAllocator;
use crate::config::TxConfig;
use crate::error::{AbortReason, TxError};
use crate::heap::Heap;
use crate::hint::HintCache;
use crate::lease::{LeaseSequence, Parity};
use crate::obj::{RawObj, TxObj};
use crate::quiesce::{Announced, Pin, ReclaimEvent, ReclaimView};
use crate::settle::OpenLog;
use crate::stats::TxStats;
use crate::tx::Tx;
use crate::word::{DataPtr, LockWord, OwnerId};

/// Runs transactions as one owner. One per client thread or coroutine.
#[derive(Debug)]
pub struct TxClient {
    pub(crate) fabric: Client,
    pub(crate) heap: Heap,
    pub(crate) owner: OwnerId,
    pub(crate) config: TxConfig,
    pub(crate) alloc: BlockAllocator,
    pub(crate) stats: TxStats,
    /// Lease ends of this owner's lock words.
    lock_leases: LeaseSequence,
    /// Lease ends of this owner's DOING header words.
    commit_leases: LeaseSequence,
    rng: rand::rngs::StdRng,
    /// Metas seen or installed, shared with the other clients of the
    /// process that were given the same cache.
    pub(crate) hints: Arc<HintCache>,
    /// This owner's last log while it is not known to be DONE (`settle.rs`).
    pub(crate) open_log: Option<OpenLog>,
    /// The last commit was cut off by a fabric error at or after its first
    /// batch that can make it visible (a logged commit's DOING CAS, an Opt1
    /// commit's pointer CASes): it may or may not have taken effect
    /// ([`TxClient::take_commit_in_doubt`]).
    pub(crate) commit_in_doubt: bool,
    /// The process's view of reclaims and this client's pin in it
    /// (`crate::quiesce`); `None` for a client that follows no control
    /// plane, where nothing is ever reclaimed.
    reclaims: Option<(Arc<ReclaimView>, Arc<Pin>)>,
    /// Nesting of sections (transactions, repairs, creations)...
    section_depth: u32,
    /// ...and the reclaim sequence the section in flight is pinned at,
    /// once it allocated (`None` before, and between sections).
    section_seq: Option<u64>,
    /// Owner ids already announced when this client began following
    /// reclaims: doomed at its first catch-up.
    announced_before: Vec<Announced>,
}

impl TxClient {
    /// A client running transactions in `heap` as `owner`.
    pub fn new(fabric: Client, heap: Heap, owner: OwnerId, config: TxConfig) -> Result<Self, TxError> {
        heap.log_slot(owner)?;
        Ok(TxClient {
            fabric,
            heap,
            owner,
            config,
            alloc: BlockAllocator::new(heap, owner),
            stats: TxStats::default(),
            lock_leases: LeaseSequence::default(),
            commit_leases: LeaseSequence::default(),
            rng: rand::rngs::StdRng::seed_from_u64(u64::from(owner)),
            hints: Arc::new(HintCache::default()),
            open_log: None,
            commit_in_doubt: false,
            reclaims: None,
            section_depth: 0,
            section_seq: None,
            announced_before: Vec::new(),
        })
    }

    /// Follows `view`'s reclaims (`crate::quiesce`): every client of a
    /// process whose owner ids a control plane grants must, before its
    /// first transaction, or a reclaim may hand out a block it holds.
    pub fn follow_reclaims(&mut self, view: Arc<ReclaimView>) {
        let (pin, announced) = view.register();
        self.reclaims = Some((view, pin));
        self.announced_before = announced;
    }

    /// Begins a section: from its first allocation until
    /// [`TxClient::exit_section`] of the outermost one, every block this
    /// client allocates or frees is judged by the reclaims it knew at that
    /// allocation (`crate::quiesce`).
    pub(crate) fn enter_section(&mut self) {
        self.section_depth += 1;
    }

    /// Ends a section. The pin outlives it while this owner's log is open
    /// (a commit cut off, or taken over): the log may name a block the
    /// owner allocated under the pin, which its settling or a repairer
    /// installs later. Unpinned at the end of the first section after the
    /// log is closed.
    pub(crate) fn exit_section(&mut self) {
        assert!(self.section_depth > 0, "a section ended that never began");
        self.section_depth -= 1;
        if self.section_depth == 0 && self.open_log.is_none() && self.section_seq.take().is_some() {
            if let Some((view, pin)) = &self.reclaims {
                view.unpin(pin);
            }
        }
    }

    /// Catches up with the reclaims announced or finished up to the
    /// section's pin: dooms the chunks of newly announced owner ids (their
    /// blocks leave the free lists and the parked blocks), undooms those of
    /// forgotten ones. Before every data block this client allocates.
    async fn catch_up_reclaims(&mut self) -> Result<(), TxError> {
        let Some((view, pin)) = &self.reclaims else {
            return Ok(());
        };
        assert!(self.section_depth > 0, "an allocation outside a section");
        let seq = match self.section_seq {
            Some(seq) => seq,
            None => {
                let seq = view.pin(pin);
                self.section_seq = Some(seq);
                seq
            }
        };
        if self.announced_before.is_empty() && pin.seen() >= seq {
            return Ok(()); // the common case: nothing new, no lock taken
        }
        let (view, pin) = (view.clone(), pin.clone());
        // Nothing is marked caught up before all of it is done: a catch-up
        // cut off by a fabric error is done again whole (dooming twice
        // is harmless).
        let events: Vec<ReclaimEvent> = self
            .announced_before
            .iter()
            .copied()
            .map(ReclaimEvent::Announced)
            .chain(view.events_to(&pin, seq))
            .collect();
        for event in events {
            match event {
                ReclaimEvent::Announced(owners) => {
                    self.alloc.doom(&mut self.fabric, owners).await?;
                    if let Some(open) = &mut self.open_log {
                        self.alloc.retain_undoomed(&mut open.parked);
                    }
                    tracing::debug!(
                        owner = self.owner,
                        ?owners,
                        "owner ids announced for reclaim: their blocks are doomed here"
                    );
                }
                ReclaimEvent::Forgotten(owners) => self.alloc.undoom(owners),
                ReclaimEvent::Lost => {
                    self.alloc
                        .give_up_everything(self.open_log.as_mut().map(|o| &mut o.parked));
                    tracing::warn!(
                        owner = self.owner,
                        "fell behind the reclaims this process heard of: gave up every free block"
                    );
                }
            }
        }
        self.announced_before.clear();
        view.caught_up(&pin, seq);
        Ok(())
    }

    /// A data block of at least `len` bytes, after catching up with the
    /// reclaims (inside a section).
    pub(crate) async fn alloc_data(&mut self, len: u32) -> Result<u64, TxError> {
        self.catch_up_reclaims().await?;
        self.alloc.data(&mut self.fabric, len).await
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
        let a = self.alloc.counts();
        TxStats {
            blocks_adopted: a.blocks_adopted,
            blocks_doomed: a.blocks_doomed,
            tail_bytes_adopted: a.tail_bytes_adopted,
            ..self.stats
        }
    }

    /// This client's clock in lease ticks (1/256 ms since 2024-01-01,
    /// with the fabric's injected skew): what leases are compared with.
    pub fn now_tick(&self) -> u64 {
        crate::lease::now_tick(&self.fabric)
    }

    /// The lease end of the last lock word this owner took (0 before the
    /// first): every lock word it takes has a later one (the checksum rule),
    /// at most `LEAD_TICKS_MAX` past `now + lease` by its clock.
    pub fn last_lock_tick(&self) -> u64 {
        self.lock_leases.last_tick()
    }

    /// The meta hints this client reads and keeps (`txn::hint`): every
    /// commit leaves the metas it installed there, and
    /// [`Tx::read_locked`](crate::Tx::read_locked) starts from them.
    pub fn hints(&self) -> &Arc<HintCache> {
        &self.hints
    }

    /// Shares `hints` with other clients (of one process, as Sherman shares
    /// its cache per compute node): one client's commit saves the others
    /// the round trip a stale hint costs.
    pub fn share_hints(&mut self, hints: Arc<HintCache>) {
        self.hints = hints;
    }

    /// The fabric client (for its counters, or for verbs outside transactions).
    pub fn fabric(&mut self) -> &mut Client {
        &mut self.fabric
    }

    /// The fabric client, shared (for what needs no counters: prefetches,
    /// the map, the clock).
    pub fn fabric_ref(&self) -> &Client {
        &self.fabric
    }

    /// Starts a transaction by hand; prefer [`TxClient::run`].
    pub fn begin(&mut self) -> Tx<'_> {
        Tx::new(self)
    }

    /// Whether the last commit was cut off by a fabric error once it may
    /// have become visible, and forgets it. Such a commit may or may not
    /// have taken effect: running the caller's operation again would apply
    /// a write twice (a put another write came between) or report a
    /// conditional one's result wrong (an insert that finds its own key,
    /// a delete that finds the key it removed gone). Its log, if it has
    /// one, is settled before the next commit either way. Cut off before
    /// that batch, nothing of it is visible and it can run again.
    pub fn take_commit_in_doubt(&mut self) -> bool {
        std::mem::take(&mut self.commit_in_doubt)
    }

    /// A transaction of this owner stopped on a fabric error: its open log
    /// (if it wrote one) is settled before the next transaction. (The locks
    /// it left are this owner's to repair when it meets them:
    /// [`TxClient::may_repair`].)
    pub(crate) fn cut_off(&mut self) {
        if let Some(open) = &mut self.open_log {
            open.interrupted = true;
        }
    }

    /// Runs `body` as a transaction until it commits, retrying on abort with
    /// exponential backoff, and returns the body's value from the attempt
    /// that committed. A body error other than an abort rolls the attempt
    /// back and is returned as is.
    ///
    /// The body is an async closure taking the attempt: `c.run(async move
    /// |tx| { ... })`. Write it `async move` when the returned future must be
    /// `Send` (to spawn it): the closure then owns copies of the handles it
    /// uses instead of borrowing them.
    pub async fn run<R>(
        &mut self,
        mut body: impl AsyncFnMut(&mut Tx<'_>) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            // (A commit that stopped on a fabric error left its log behind:
            // the next commit finishes it first, `Tx::commit`.)
            let mut tx = self.begin();
            let result = match body(&mut tx).await {
                Ok(value) => tx.commit().await.map(|()| value),
                Err(e) => match tx.rollback().await {
                    Ok(()) => Err(e),
                    Err(rollback) => Err(rollback),
                },
            };
            let reason = match result {
                Ok(value) => return Ok(value),
                Err(TxError::Abort(reason)) => reason,
                Err(e) => return Err(e),
            };
            // `TxStats::aborts` was documented but never counted.
            self.stats.aborts += 1;
            if attempt >= self.config.attempts_max {
                return Err(TxError::TooManyAborts {
                    attempts: attempt,
                    last: reason,
                });
            }
            self.backoff(attempt, reason).await;
        }
    }

    async fn backoff(&mut self, attempt: u32, reason: AbortReason) {
        if reason == AbortReason::Repaired {
            // The obstacle is gone: retry at once.
            return;
        }
        let min = self.config.backoff_min.as_nanos() as u64;
        let max = self.config.backoff_max.as_nanos() as u64;
        let ceiling = min.saturating_mul(1 << attempt.min(20)).min(max);
        let wait = Duration::from_nanos(self.rng.gen_range(0..=ceiling));
        // A zero wait (a configuration without backoff) only yields: a
        // timer rounds any sleep up to its tick (1 ms in tokio).
        if attempt <= 2 || wait.is_zero() || tokio::runtime::Handle::try_current().is_err() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(wait).await;
        }
    }

    /// Creates an object outside any transaction: allocated and written on
    /// every replica at once. It is unreachable until a transaction stores
    /// its handle somewhere (or an index root names it).
    pub async fn create<T: Pod>(&mut self, value: &T) -> Result<TxObj<T>, TxError> {
        Ok(TxObj::at(self.create_raw(bytemuck::bytes_of(value)).await?.meta))
    }

    /// Creates an object holding `bytes` outside any transaction (see
    /// [`TxClient::create`]).
    pub async fn create_raw(&mut self, bytes: &[u8]) -> Result<RawObj, TxError> {
        // A section until the meta names the block.
        Section::new(self).0.create_in_section(bytes).await
    }

    async fn create_in_section(&mut self, bytes: &[u8]) -> Result<RawObj, TxError> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| TxError::BadObject(format!("an object of {} bytes is too large", bytes.len())))?;
        let meta = self.alloc.meta(&mut self.fabric).await?;
        let data = self.alloc_data(len).await?;
        let mut batch = Batch::new();
        let region = self.heap.region();
        let d = batch
            .on(Replica::All)
            .write(fabric::GlobalAddr::new(region, data), bytes);
        let m = batch
            .on(Replica::All)
            .write(meta, &meta_bytes(LockWord::unlocked(0), DataPtr::new(0, data)));
        self.fabric.execute(&mut batch).await?;
        batch.done(d).map_err(TxError::Verb)?;
        batch.done(m).map_err(TxError::Verb)?;
        Ok(RawObj { meta, len })
    }

    /// The next lock word of this owner for a commit locking `objects`
    /// objects: lease end `now + objects * OP_TIME + DRIFT` in ticks, and
    /// strictly later than any lease this owner used before (the log checksum
    /// rule). An owner taking lock words faster than one per tick (1/256 ms)
    /// gets `last + 1`, up to `LEAD_TICKS_MAX` ahead of its clock; beyond,
    /// this waits for the clock (`crate::lease`). Lock leases in whole ms
    /// with `last + 1` ran an owner's leases hours ahead after a benchmark.
    pub(crate) async fn next_lock(&mut self, objects: usize) -> LockWord {
        let lease_ticks = self.config.lease_ticks(objects);
        let (tick, waited) = self
            .lock_leases
            .take_by(&self.fabric, lease_ticks, Parity::Any)
            .await;
        self.stats.lease_waits += u64::from(waited);
        LockWord::locked(self.owner, tick)
    }

    /// The commit lease end (ticks) of a log taken to DOING now, strictly
    /// later than any this client used before, with the same bounded lead as
    /// [`TxClient::next_lock`]. The take-over CAS of a repairer compares the
    /// header word only: two commits of one owner within a millisecond used
    /// to write the same DOING word, so a repairer holding the first one's
    /// header could take over (and mark DONE) the second one's log.
    /// Even for the owner's own commit, odd for a take-over (`taker`), so
    /// that no taker's word is one the owner writes later.
    pub(crate) async fn commit_lease(&mut self, objects: usize, taker: bool) -> u64 {
        let lease_ticks = self.config.lease_ticks(objects);
        let parity = if taker { Parity::Odd } else { Parity::Even };
        let (tick, waited) = self
            .commit_leases
            .take_by(&self.fabric, lease_ticks, parity)
            .await;
        self.stats.lease_waits += u64::from(waited);
        tick
    }

    /// True if a lock found held as `lock` may be repaired by this client
    /// now, while its running transaction holds its locks as `running`:
    /// the lease expired by this client's clock, or the lock is this
    /// owner's and not `running`. An owner runs one transaction at a time,
    /// so its only live lock word is the running one's; any other of its
    /// words was left by a transaction that stopped on an error (a fabric
    /// error cut its commit or its release off, or a repair it was running),
    /// and nothing of that one still runs: waiting out its lease would only
    /// stall this owner (issue 22: a backup's death stalled writers so).
    pub(crate) fn may_repair(&self, lock: LockWord, running: Option<LockWord>) -> bool {
        debug_assert!(lock.is_locked());
        if lock.owner() == self.owner {
            return Some(lock) != running;
        }
        self.config.repair && lock.is_expired(self.now_tick())
    }

    /// Replicas of `region`.
    pub(crate) fn replicas(&self, region: RegionId) -> usize {
        self.fabric.map().region(region).map_or(1, |r| r.replicas.len())
    }

    /// The node holding the primary of `region`.
    pub(crate) fn primary(&self, region: RegionId) -> Option<NodeId> {
        self.fabric.map().region(region).map(|r| r.replicas[0].node)
    }
}

/// A meta as 16 bytes: lock word, data pointer.
pub(crate) fn meta_bytes(lock: LockWord, dptr: DataPtr) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&lock.raw().to_le_bytes());
    b[8..].copy_from_slice(&dptr.raw().to_le_bytes());
    b
}

/// A section of a [`TxClient`] (`crate::quiesce`) that ends when dropped,
/// also when the future holding it is cancelled at an await.
pub(crate) struct Section<'c>(pub(crate) &'c mut TxClient);

impl<'c> Section<'c> {
    pub(crate) fn new(c: &'c mut TxClient) -> Self {
        c.enter_section();
        Section(c)
    }
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        self.0.exit_section();
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use fabric::{LocalTransport, RegionSpec};

    use super::*;
    use crate::heap::HeapConfig;
    use crate::lease::LEAD_TICKS_MAX;

    async fn client() -> TxClient {
        let (t, map) = LocalTransport::cluster(1, &[RegionSpec { id: 1, size: 4 << 20 }]).unwrap();
        let mut fabric = Client::new(map, t.into());
        let heap = Heap::format(&mut fabric, 1, HeapConfig::default()).await.unwrap();
        TxClient::new(fabric, heap, 7, TxConfig::default()).unwrap()
    }

    /// Lease ends taken with no verbs in between, far faster than one per
    /// tick: each is later than the last, none runs more than
    /// `LEAD_TICKS_MAX` past `now + lease`, so the owner waits for its clock
    /// (with `last + 1` in whole ms, 5,000 of them ran 5 s ahead).
    #[tokio::test]
    async fn lease_ends_are_unique_and_wait_for_the_clock() {
        const TAKES: u64 = 5_000;
        let mut c = client().await;
        let lease_ticks = c.config.lease_ticks(1);
        let start_tick = c.now_tick();
        let (mut last_lock, mut last_commit) = (0, 0);
        for i in 0..TAKES {
            let lock = c.next_lock(1).await;
            // An owner's own DOING words are even, a taker's odd.
            let taker = i % 2 == 1;
            let commit = c.commit_lease(1, taker).await;
            assert_eq!(commit % 2 == 1, taker);
            let now_tick = c.now_tick();
            assert_eq!(lock.owner(), 7);
            assert!(
                lock.lease_tick() > last_lock,
                "lock words of an owner never repeat"
            );
            assert!(commit > last_commit, "DOING headers of an owner never repeat");
            assert!(lock.lease_tick() <= now_tick + lease_ticks + LEAD_TICKS_MAX);
            assert!(commit <= now_tick + lease_ticks + LEAD_TICKS_MAX);
            (last_lock, last_commit) = (lock.lease_tick(), commit);
        }
        assert_eq!(c.last_lock_tick(), last_lock);
        // 5,000 ends, at most LEAD_TICKS_MAX + 1 of them ahead of the clock:
        // the clock must have moved by the rest (so the owner waited for it,
        // `lease_waits`, unless it was descheduled for as long).
        let elapsed_ticks = c.now_tick() - start_tick;
        assert!(
            elapsed_ticks + lease_ticks + LEAD_TICKS_MAX + 1 >= last_lock - start_tick,
            "{elapsed_ticks} ticks elapsed, last lock {} after start",
            last_lock - start_tick
        );
        assert!(elapsed_ticks >= TAKES - LEAD_TICKS_MAX - 1, "{elapsed_ticks}");
    }

    /// Outside any tokio runtime (another executor) the wait only yields:
    /// here a busy-polling one with a no-op waker.
    #[test]
    fn waiting_works_outside_tokio() {
        const TAKES: u64 = 1_000;
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut c = rt.block_on(client());
        drop(rt);
        let lease_ticks = c.config.lease_ticks(1);
        let start_tick = c.now_tick();
        {
            let mut takes = std::pin::pin!(async {
                let mut last = 0;
                for _ in 0..TAKES {
                    let lock = c.next_lock(1).await;
                    assert!(lock.lease_tick() > last);
                    assert!(lock.lease_tick() <= c.now_tick() + lease_ticks + LEAD_TICKS_MAX);
                    last = lock.lease_tick();
                }
            });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            while takes.as_mut().poll(&mut cx).is_pending() {}
        }
        assert!(c.now_tick() - start_tick >= TAKES - LEAD_TICKS_MAX - 1);
    }
}
