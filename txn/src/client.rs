//! The transaction client: one owner id, its log slot, its allocator, and
//! the retry loop around transaction bodies.

use std::time::Duration;

use bytemuck::Pod;
use fabric::{Batch, Client, NodeId, RegionId, Replica};
use rand::{Rng, SeedableRng};

use crate::alloc::BlockAllocator;
use crate::config::TxConfig;
use crate::error::{AbortReason, TxError};
use crate::heap::Heap;
use crate::obj::TxObj;
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
    last_lease_ms: u64,
    last_commit_lease_ms: u64,
    rng: rand::rngs::StdRng,
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
            last_lease_ms: 0,
            last_commit_lease_ms: 0,
            rng: rand::rngs::StdRng::seed_from_u64(u64::from(owner)),
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

    /// The fabric client (for its counters, or for verbs outside transactions).
    pub fn fabric(&mut self) -> &mut Client {
        &mut self.fabric
    }

    /// Starts a transaction by hand; prefer [`TxClient::run`].
    pub fn begin(&mut self) -> Tx<'_> {
        Tx::new(self)
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
        let ceiling = min.saturating_mul(1 << attempt.min(20)).min(max).max(1);
        let wait = Duration::from_nanos(self.rng.gen_range(0..=ceiling));
        if attempt <= 2 || tokio::runtime::Handle::try_current().is_err() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(wait).await;
        }
    }

    /// Creates an object outside any transaction: allocated and written on
    /// every replica at once. It is unreachable until a transaction stores
    /// its handle somewhere (or an index root names it).
    pub async fn create<T: Pod>(&mut self, value: &T) -> Result<TxObj<T>, TxError> {
        let bytes = bytemuck::bytes_of(value);
        let meta = self.alloc.meta(&mut self.fabric).await?;
        let data = self.alloc.data(&mut self.fabric, bytes.len() as u32).await?;
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
        Ok(TxObj::at(meta))
    }

    /// The next lock word of this owner for a commit locking `objects`
    /// objects: `now + objects * OP_TIME + DRIFT`, and strictly later than
    /// any lease this owner used before (the log checksum rule).
    pub(crate) fn next_lock(&mut self, objects: usize) -> LockWord {
        let lease = (self.fabric.now_ms() + self.config.lease_ms(objects)).max(self.last_lease_ms + 1);
        self.last_lease_ms = lease;
        LockWord::locked(self.owner, lease)
    }

    /// The commit lease of a log taken to DOING now, strictly later than any
    /// this client used before. The take-over CAS of a repairer compares the
    /// header word only: two commits of one owner within a millisecond used
    /// to write the same DOING word, so a repairer holding the first one's
    /// header could take over (and mark DONE) the second one's log.
    pub(crate) fn commit_lease(&mut self, objects: usize) -> u64 {
        let lease = (self.fabric.now_ms() + self.config.lease_ms(objects)).max(self.last_commit_lease_ms + 1);
        self.last_commit_lease_ms = lease;
        lease
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

/// Reads a little-endian word out of READ bytes.
pub(crate) fn le_word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}
