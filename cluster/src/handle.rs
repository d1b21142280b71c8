//! Index handles: one index client each, with one owner id of the
//! process, retrying what a map change or a lost connection interrupts.
//!
//! A batch refused for a stale epoch ran no verb on the node that refused
//! it; the handle waits until the process routes by a map at least as new
//! as the node's (a region being restored after a promotion is out of the
//! map: the handle waits for the map that has it again), then runs the
//! operation again (rTX settles a commit cut
//! off this way before its next transaction: `docs/txn.md`). A lost
//! connection is reconnected by the transport on the next batch, and a
//! lease that lapsed because no renewal got through in time (the control
//! plane between leaders) is waited for until a renewal lands; so is a
//! memory node's (it refuses batches meanwhile), or the map that replaces
//! it. A batch
//! aimed at a backup that left the map after the operation counted its
//! replicas is refused whole, before any verb, and the operation runs
//! again. The application sees none of this, only the time it took; after
//! [`RETRIES_MAX`] it sees the error.

use std::sync::Arc;
use std::time::Duration;

use fabric::{Epoch, FabricError, Mandate};
use index::btree::{BTree, Written};
use index::hash::HashTable;
use index::IndexError;
use tokio::sync::watch;
use txn::{Tx, TxClient, TxError};

use crate::owners::Owner;

/// Retries of one operation after a stale epoch or a lost connection.
pub const RETRIES_MAX: u32 = 32;

/// Longest wait for the newer map a node demands; and how long an
/// operation is retried after lost connections (a dead node leaves the map
/// well within it: two memory-node leases and a promotion).
pub const MAP_WAIT: Duration = Duration::from_secs(10);

/// Longest wait, per retry, for a newer map after a node whose lease may
/// have lapsed refused a batch: a fraction of a memory node's lease, so
/// that the node's next renewal is not waited out by much; [`RETRIES_MAX`]
/// of them outlast a control-plane election.
const LAPSED_PAUSE: Duration = Duration::from_millis(100);

/// Pause before retrying after a lost connection (the transport backs off
/// too).
const RECONNECT_PAUSE: Duration = Duration::from_millis(5);

/// What a handle needs to retry: the process's map and its epochs.
#[derive(Debug)]
pub(crate) struct Retry {
    index: String,
    mandate: Arc<Mandate>,
    epochs: watch::Receiver<Epoch>,
    retried: u64,
    /// When the operation being retried first failed.
    failed_at: Option<tokio::time::Instant>,
}

impl Retry {
    pub(crate) fn new(index: String, mandate: Arc<Mandate>, epochs: watch::Receiver<Epoch>) -> Retry {
        Retry {
            index,
            mandate,
            epochs,
            retried: 0,
            failed_at: None,
        }
    }

    /// Whether to run the operation again after `e` (the `attempt`th).
    async fn again(&mut self, e: &IndexError, attempt: u32) -> bool {
        if attempt >= RETRIES_MAX {
            return false;
        }
        if attempt == 0 {
            self.failed_at = Some(tokio::time::Instant::now());
        }
        let again = match e.fabric_cause() {
            Some(FabricError::StaleEpoch { node_epoch, .. }) => {
                let want = *node_epoch;
                if self.mandate.epoch() < want {
                    let waited = tokio::time::timeout(MAP_WAIT, self.epochs.wait_for(|&e| e >= want)).await;
                    if !matches!(waited, Ok(Ok(_))) {
                        tracing::warn!(index = %self.index, want, "no map of the epoch a node demands arrived");
                        return false;
                    }
                }
                true
            }
            // The region left the map (a promotion being restored): it
            // comes back at a newer epoch.
            Some(FabricError::UnknownRegion { .. }) => {
                let now = self.mandate.epoch();
                let waited = tokio::time::timeout(MAP_WAIT, self.epochs.wait_for(|&e| e > now)).await;
                matches!(waited, Ok(Ok(_)))
            }
            // A backup left the map between the operation's start (which
            // counted the replicas) and this batch, which was refused whole
            // before any verb: run it again under the new map.
            Some(FabricError::NoSuchReplica { .. }) => true,
            // The primary changed under a transaction before its commit
            // point (after it, the index says the write is in doubt): its
            // locks were on the old primary; run it again on the new one.
            Some(FabricError::MapMoved { .. }) => true,
            // The process could not renew its lease in time (no leader
            // for a moment): no verb was issued. A renewal that arrives
            // lets it go on; a lease that is lost for good does not.
            Some(FabricError::LeaseUncertain) => self.mandate.held_within(MAP_WAIT).await,
            // A node whose own lease may have lapsed refused the batch
            // (before any verb on it): it serves again once renewed, or
            // the map moves on without it (declared dead). Wait for
            // either, a little at a time.
            Some(FabricError::NodeLeaseLapsed { .. }) => {
                let now = self.mandate.epoch();
                let _ = tokio::time::timeout(LAPSED_PAUSE, self.epochs.wait_for(|&e| e > now)).await;
                true
            }
            // A node that died leaves the map within detection and
            // promotion: the operation rides that out. One black-holed
            // while its lease is kept alive never leaves it: the
            // operation fails once it has been retried for MAP_WAIT.
            Some(FabricError::Disconnected { .. }) => {
                if self.failed_at.is_some_and(|at| at.elapsed() >= MAP_WAIT) {
                    tracing::warn!(index = %self.index, error = %e, "lost connections for {MAP_WAIT:?}: giving up");
                    return false;
                }
                tokio::time::sleep(RECONNECT_PAUSE).await;
                true
            }
            _ => false,
        };
        if again {
            self.retried += 1;
            tracing::debug!(index = %self.index, error = %e, attempt, "retrying");
        }
        again
    }
}

/// Runs `$op` (an expression using `$self.inner`) until it succeeds, fails
/// for good, or runs out of retries.
macro_rules! retried {
    ($self:ident, $op:expr) => {{
        let mut attempt = 0;
        loop {
            match $op {
                Err(e) if $self.retry.again(&e, attempt).await => attempt += 1,
                done => break done,
            }
        }
    }};
}

/// An index whose client may run transactions of its caller's.
trait TxHost {
    fn tx_client(&mut self) -> Option<&mut TxClient>;
}

impl TxHost for BTree {
    fn tx_client(&mut self) -> Option<&mut TxClient> {
        BTree::tx_client(self)
    }
}

impl TxHost for HashTable {
    fn tx_client(&mut self) -> Option<&mut TxClient> {
        HashTable::tx_client(self)
    }
}

/// Runs `body` as one rTX on the index's client (the index's own: same heap, owner
/// id and log slot) until it commits, retrying as an index operation is
/// after a map change or a lost connection. A commit cut off once it may
/// have taken effect is not run again: [`IndexError::InDoubt`].
async fn transact<R>(
    retry: &mut Retry,
    index: &mut impl TxHost,
    body: impl AsyncFnMut(&mut Tx<'_>) -> Result<R, TxError> + Clone,
) -> Result<R, IndexError> {
    let mut attempt = 0;
    loop {
        let Some(c) = index.tx_client() else {
            return Err(IndexError::Layout(
                "only an rtx index runs transactions of its caller's (this one is optimal or dtx)".into(),
            ));
        };
        // A fresh copy per run: lent as `&mut`, the body's call futures
        // would not be provably `Send` for a spawned caller.
        let e = match c.run(body.clone()).await {
            Ok(v) => return Ok(v),
            Err(e) if c.take_commit_in_doubt() => {
                return Err(IndexError::InDoubt(Box::new(IndexError::Tx(e))))
            }
            Err(e) => IndexError::Tx(e),
        };
        if !retry.again(&e, attempt).await {
            return Err(e);
        }
        attempt += 1;
    }
}

/// A handle on a named B+tree: keys and values are `u64`, keys between 1
/// and `u64::MAX - 1`.
#[derive(Debug)]
pub struct Tree {
    inner: BTree,
    retry: Retry,
    _owner: Owner,
}

impl Tree {
    pub(crate) fn new(inner: BTree, owner: Owner, retry: Retry) -> Tree {
        Tree {
            inner,
            retry,
            _owner: owner,
        }
    }

    /// The value of `key`, if present.
    pub async fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        retried!(self, self.inner.get(key).await)
    }

    /// Up to `count` pairs with keys from `from` on, in key order.
    pub async fn scan(&mut self, from: u64, count: usize) -> Result<Vec<(u64, u64)>, IndexError> {
        retried!(self, self.inner.scan(from, count).await)
    }

    /// Inserts `key` if absent (`Unchanged` if present: nothing written).
    pub async fn insert(&mut self, key: u64, value: u64) -> Result<Written, IndexError> {
        retried!(self, self.inner.insert(key, value).await)
    }

    /// Replaces `key`'s value if present (`Unchanged` if absent).
    pub async fn update(&mut self, key: u64, value: u64) -> Result<Written, IndexError> {
        retried!(self, self.inner.update(key, value).await)
    }

    /// Sets `key` to `value`, present or not.
    pub async fn put(&mut self, key: u64, value: u64) -> Result<Written, IndexError> {
        retried!(self, self.inner.upsert(key, value).await)
    }

    /// Removes `key` (`Unchanged` if absent).
    pub async fn delete(&mut self, key: u64) -> Result<Written, IndexError> {
        retried!(self, self.inner.delete(key).await)
    }

    /// Runs `body` as one rTX over objects of the index's heap (rtx
    /// only), with the handle's retries; see [`Tx`] for what a body does.
    /// Each attempt runs a fresh clone of `body` (write it `async move`,
    /// owning cheap copies of what it uses).
    /// Objects it creates live in the index's region; the index's own
    /// operations and these transactions share one owner id, so they run
    /// one at a time.
    pub async fn transact<R>(
        &mut self,
        body: impl AsyncFnMut(&mut Tx<'_>) -> Result<R, TxError> + Clone,
    ) -> Result<R, IndexError> {
        transact(&mut self.retry, &mut self.inner, body).await
    }

    /// Operations run again after a map change or a lost connection.
    pub fn retries(&self) -> u64 {
        self.retry.retried
    }

    /// The epoch of the map this process routes by now.
    pub fn epoch(&self) -> Epoch {
        self.retry.mandate.epoch()
    }

    /// The index client underneath, for what this handle does not wrap
    /// (its counters, its cache). Operations through it are not retried.
    pub fn inner(&mut self) -> &mut BTree {
        &mut self.inner
    }

    /// The rTX client's counters (`None` for the optimal variant).
    pub fn tx_stats(&self) -> Option<txn::TxStats> {
        self.inner.tx_stats()
    }
}

/// A handle on a named hash table: keys and values are `u64`.
#[derive(Debug)]
pub struct Table {
    inner: HashTable,
    retry: Retry,
    _owner: Owner,
}

impl Table {
    pub(crate) fn new(inner: HashTable, owner: Owner, retry: Retry) -> Table {
        Table {
            inner,
            retry,
            _owner: owner,
        }
    }

    /// The value of `key`, if present.
    pub async fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        retried!(self, self.inner.get(key).await)
    }

    /// Inserts `key` if absent; `false` if present (nothing written).
    pub async fn insert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        retried!(self, self.inner.insert(key, value).await)
    }

    /// Replaces `key`'s value if present; `false` if absent.
    pub async fn update(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        retried!(self, self.inner.update(key, value).await)
    }

    /// Sets `key` to `value`, present or not.
    pub async fn put(&mut self, key: u64, value: u64) -> Result<(), IndexError> {
        retried!(self, self.inner.upsert(key, value).await)
    }

    /// Removes `key`; `false` if absent.
    pub async fn delete(&mut self, key: u64) -> Result<bool, IndexError> {
        retried!(self, self.inner.delete(key).await)
    }

    /// Runs `body` as one rTX over objects of the index's heap (rtx
    /// only), with the handle's retries; see [`Tx`] for what a body does.
    /// Each attempt runs a fresh clone of `body` (write it `async move`,
    /// owning cheap copies of what it uses).
    /// Objects it creates live in the index's region; the index's own
    /// operations and these transactions share one owner id, so they run
    /// one at a time.
    pub async fn transact<R>(
        &mut self,
        body: impl AsyncFnMut(&mut Tx<'_>) -> Result<R, TxError> + Clone,
    ) -> Result<R, IndexError> {
        transact(&mut self.retry, &mut self.inner, body).await
    }

    /// Operations run again after a map change or a lost connection.
    pub fn retries(&self) -> u64 {
        self.retry.retried
    }

    /// The epoch of the map this process routes by now.
    pub fn epoch(&self) -> Epoch {
        self.retry.mandate.epoch()
    }

    /// The index client underneath. Operations through it are not retried.
    pub fn inner(&mut self) -> &mut HashTable {
        &mut self.inner
    }

    /// The rTX client's counters (`None` for the optimal variant).
    pub fn tx_stats(&self) -> Option<txn::TxStats> {
        self.inner.tx_stats()
    }
}
