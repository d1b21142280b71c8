//! Errors of rTX.

use fabric::{FabricError, RegionId, VerbError};
use thiserror::Error;

use crate::word::OwnerId;

/// Why a transaction aborted. Aborts are retried by [`TxClient::run`](crate::TxClient::run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// An object is locked by a live transaction.
    Locked,
    /// An object changed since this transaction read it.
    Changed,
    /// An object was locked by a transaction whose lease expired; this one
    /// aborted to repair it (the retry will find it repaired).
    Repaired,
    /// A repairer aborted this transaction's log while it was committing.
    LogAborted,
    /// This owner's previous log is still being finished by a repairer
    /// with a live lease; its slot cannot be written yet (`txn::settle`).
    LogInUse,
    /// The body asked to abort.
    User,
}

/// Errors of transactions and of the heap they run in.
#[derive(Debug, Error)]
pub enum TxError {
    /// The transaction aborted; retrying may succeed.
    #[error("transaction aborted: {0:?}")]
    Abort(AbortReason),
    /// The fabric failed (the client crashed, lost a node, or has a stale map).
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A memory node refused a verb: a bug in the layout or a corrupt pointer.
    #[error("memory node refused a verb: {0}")]
    Verb(VerbError),
    /// The heap is missing, corrupt or too small.
    #[error("heap: {0}")]
    Heap(String),
    /// No free chunk is left in the heap.
    #[error("region {region} is full: all {chunks} chunks are taken")]
    OutOfMemory {
        /// The heap's region.
        region: RegionId,
        /// Its chunk count.
        chunks: u64,
    },
    /// The owner id has no log slot in this heap.
    #[error("owner id {owner} has no log slot (the heap has {slots})")]
    OwnerOutOfRange {
        /// The id.
        owner: OwnerId,
        /// Slots in the heap.
        slots: u64,
    },
    /// The write set does not fit one log.
    #[error("write set of {objects} objects exceeds the log's {max} entries")]
    WriteSetTooLarge {
        /// Objects written.
        objects: usize,
        /// The limit.
        max: usize,
    },
    /// An object is not where the transaction expected it (wrong size or
    /// region); a bug in the caller.
    #[error("bad object: {0}")]
    BadObject(String),
    /// A protocol invariant does not hold: DM was changed by something the
    /// protocol does not allow (a pointer moved under a lock this client
    /// still owns). Never retried, never acknowledged; the transaction's
    /// locks stay held so that nobody builds on the damage, and
    /// `TxStats::invariant_violations` counts it.
    #[error("rTX invariant broken: {0}")]
    Invariant(String),
    /// A single-object (Opt1) commit was fenced by a repairer after its
    /// backups took its pointer, and a backup still holds it: were that
    /// backup promoted before the repairer puts the old value back, the
    /// write would be there. Its outcome is unknown, and it is not run
    /// again (docs/txn.md §8, "Opt1 in doubt").
    #[error("the commit's outcome is unknown: {0}")]
    InDoubt(String),
    /// The transaction aborted this many times in a row.
    #[error("gave up after {attempts} aborted attempts (last: {last:?})")]
    TooManyAborts {
        /// Attempts made.
        attempts: u32,
        /// Reason of the last abort.
        last: AbortReason,
    },
}

impl From<fabric::ReadError> for TxError {
    fn from(e: fabric::ReadError) -> Self {
        match e {
            fabric::ReadError::Fabric(e) => TxError::Fabric(e),
            fabric::ReadError::Verb(e) => TxError::Verb(e),
        }
    }
}

impl TxError {
    /// True when retrying the transaction may succeed.
    pub fn is_abort(&self) -> bool {
        matches!(self, TxError::Abort(_))
    }
}
