//! The indexes' one error type.

use fabric::VerbError;
use txn::TxError;

use crate::btree::NodeRef;

/// Errors of the indexes.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Keys must be strictly between `KEY_MIN` and `KEY_MAX`.
    #[error("key {0} is reserved (keys must be above 0 and below u64::MAX)")]
    ReservedKey(u64),
    /// The fabric failed.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// A memory node refused a verb: a layout bug or a corrupt pointer.
    #[error("memory node refused a verb: {0}")]
    Verb(VerbError),
    /// The transaction layer failed (not an abort: those are retried).
    #[error(transparent)]
    Tx(#[from] TxError),
    /// A hash subtable cannot split: its local depth reached the directory's.
    #[error(
        "subtable {0:#x} is full and at the directory's depth: create the table with a larger dir_depth"
    )]
    Full(u64),
    /// DM holds something the index never writes (a KV block whose check
    /// fails under a published slot, a header of another subtable).
    #[error("corrupt index: {0}")]
    Corrupt(String),
    /// A node kept reading torn.
    #[error("node {0:#x} kept reading torn")]
    Torn(NodeRef),
    /// A lock was never released (optimal: its holder is presumably dead).
    /// Names the B+tree node or the hash subtable.
    #[error("{0:#x} stays locked: its holder does not release it")]
    Blocked(NodeRef),
    /// The heap holds no tree, or another variant's.
    #[error("{0}")]
    Layout(String),
    /// The operation kept being retried.
    #[error("gave up after {0} attempts")]
    TooManyAttempts(u32),
    /// A write was cut off (the error inside) once its commit point may
    /// have been reached: it may or may not have taken effect. Not run
    /// again: a second run would apply it twice, or find its own effect and
    /// report the wrong result. The caller learns the outcome by reading.
    #[error("outcome unknown: the write was cut off at its commit point ({0})")]
    InDoubt(Box<IndexError>),
}

impl IndexError {
    /// A node refused a verb's access key (or the verbs after it in the
    /// batch, flushed): the replica was taken from it (retired) under a
    /// map the writer had not seen. The batch's other verbs ran: at a
    /// write's commit point or after it, the write may have happened.
    pub(crate) fn key_refused(&self) -> bool {
        use fabric::VerbError::{BadKey, Flushed};
        matches!(
            self,
            IndexError::Verb(BadKey | Flushed) | IndexError::Tx(TxError::Verb(BadKey | Flushed))
        )
    }

    /// The fabric failure under this error, if it is one (directly, or
    /// under a transaction's).
    pub fn fabric_cause(&self) -> Option<&fabric::FabricError> {
        match self {
            IndexError::Fabric(f) | IndexError::Tx(TxError::Fabric(f)) => Some(f),
            _ => None,
        }
    }

    /// `e`, from the batch that is a write's commit point, as
    /// [`IndexError::InDoubt`] when it is a fabric failure (a lost
    /// connection, a stale map, a crash) that may have let some of the
    /// batch run; a batch refused before any verb was sent changed nothing.
    pub(crate) fn in_doubt_if_cut_off(e: IndexError) -> IndexError {
        if matches!(e, IndexError::Tx(TxError::InDoubt(_))) || e.key_refused() {
            return IndexError::InDoubt(Box::new(e));
        }
        match e.fabric_cause() {
            Some(f) if !f.sent_nothing() => IndexError::InDoubt(Box::new(e)),
            _ => e,
        }
    }

    /// `e`, from a step after a write's commit point was reached (its
    /// backups, its settling), as [`IndexError::InDoubt`] when it is any
    /// fabric failure: the write happened, or may have, whatever this batch
    /// did.
    pub(crate) fn in_doubt_after_commit(e: IndexError) -> IndexError {
        if matches!(e, IndexError::Tx(TxError::InDoubt(_))) || e.key_refused() {
            return IndexError::InDoubt(Box::new(e));
        }
        match e.fabric_cause() {
            Some(_) => IndexError::InDoubt(Box::new(e)),
            None => e,
        }
    }
}

impl From<fabric::ReadError> for IndexError {
    fn from(e: fabric::ReadError) -> Self {
        match e {
            fabric::ReadError::Fabric(e) => IndexError::Fabric(e),
            fabric::ReadError::Verb(e) => IndexError::Verb(e),
        }
    }
}
