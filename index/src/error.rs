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
}

impl From<fabric::ReadError> for IndexError {
    fn from(e: fabric::ReadError) -> Self {
        match e {
            fabric::ReadError::Fabric(e) => IndexError::Fabric(e),
            fabric::ReadError::Verb(e) => IndexError::Verb(e),
        }
    }
}
