//! The Raft log, vote and state machine of one member, persisted in sled.
//!
//! One sled database per member directory holds three trees:
//! - `raft_log`: log entries keyed by big-endian index (so sled's byte order
//!   is log order and ranges are key ranges), values in JSON;
//! - `raft_meta`: the vote, the committed log id and the last purged log id;
//! - `state_machine`: the current snapshot ([`AppliedState`] as JSON: the
//!   control state, last applied log id, last membership, with its metadata).
//!
//! Durability: openraft requires a saved vote and appended entries to be on
//! disk before it acts on them, so those paths wait for `flush_async`. The
//! committed log id is saved unflushed (if a crash loses it, the next leader
//! commits those entries again). Applying an entry writes
//! nothing: the state machine lives in memory and reaches disk with each
//! snapshot (every `SnapshotPolicy` entries, see `config`), which is flushed
//! before openraft purges the log behind it. On restart, [`open`] loads the
//! snapshot and openraft applies the committed entries after it again, so a
//! member never loses an applied entry and never pays for the whole state
//! (an audit trail of thousands of entries) on every commit. Purging the log
//! only follows a flushed snapshot, so no entry is purged before the state
//! that includes it is on disk.
//!
//! [`open`] returns the two halves openraft wants ([`LogStore`] and
//! [`StateMachineStore`]); [`StateMachineStore::reader`] hands out a
//! [`StateReader`] that outlives the move of the state machine into
//! `Raft::new`, for the HTTP layer's reads and its epoch long-polls.

mod log;
mod state_machine;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use self::log::LogStore;
pub use self::state_machine::{AppliedState, SnapshotBuilder, StateMachineStore, StateReader};

/// Tree names: changing one orphans the data of every existing member.
const LOG_TREE: &str = "raft_log";
const META_TREE: &str = "raft_meta";
const SM_TREE: &str = "state_machine";

/// Why the store could not be opened, read or written.
///
/// Inside openraft's traits these are wrapped in
/// [`openraft::StorageError`], which stops the member: a store that cannot
/// be trusted must not keep voting.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled failed (I/O, or its own corruption checks).
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    /// A record on disk does not decode.
    #[error("corrupt {what} on disk: {source}")]
    Corrupt {
        /// Which record.
        what: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// A value could not be encoded (a bug rather than a disk problem).
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// Which record.
        what: &'static str,
        /// The encoding error.
        #[source]
        source: serde_json::Error,
    },
    /// A log key is not an 8-byte index.
    #[error("corrupt log key of {len} bytes (want 8)")]
    LogKey {
        /// The key's length.
        len: usize,
    },
    /// A log entry is stored under another index than its own.
    #[error("log entry for index {found} stored under index {key}")]
    LogIndex {
        /// The index of the key.
        key: u64,
        /// The index inside the entry.
        found: u64,
    },
    /// A snapshot's payload disagrees with its metadata.
    #[error("snapshot {id} does not match its metadata: {why}")]
    SnapshotMismatch {
        /// The snapshot's id.
        id: String,
        /// What differs.
        why: String,
    },
    /// A snapshot's metadata is on disk but its data is not.
    #[error("snapshot {id} has metadata but no data")]
    SnapshotDataMissing {
        /// The snapshot's id.
        id: String,
    },
    /// The state decodes but breaks the state machine's invariants.
    #[error("stored control state is invalid: {0}")]
    InvalidState(String),
    /// Another handle holds the directory's lock: a live member, or (after
    /// the retries [`open`] makes) one that did not finish closing.
    #[error("{dir} is in use by another open store: {source}")]
    Locked {
        /// The member directory.
        dir: PathBuf,
        /// sled's error.
        #[source]
        source: sled::Error,
    },
    /// The blocking task that opened sled did not finish.
    #[error("opening the store: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Opens (creating if needed) the member store in `dir` and loads the
/// applied state.
///
/// sled takes a lock on the directory: a second `open` of the same
/// directory fails with [`StoreError::Locked`] while the first is open.
pub async fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StoreError> {
    let dir = dir.to_path_buf();
    // Opening replays sled's log, which can take a while: keep it off the
    // runtime's worker threads.
    let db = tokio::task::spawn_blocking(move || open_db(&dir)).await??;
    let logs = db.open_tree(LOG_TREE)?;
    let meta = db.open_tree(META_TREE)?;
    let sm = db.open_tree(SM_TREE)?;
    let state_machine = StateMachineStore::load(db.clone(), sm)?;
    Ok((LogStore::new(db, logs, meta), state_machine))
}

/// How long [`open_db`] waits out a held lock, in total.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Opens sled, retrying while the directory's lock is held. sled 0.34 lets
/// go of the lock in background threads some time after the last handle is
/// dropped (spacejam/sled#1289), so reopening a member in the same process,
/// as a restart test does, can find it still taken for a few milliseconds.
/// A member that really is open holds it far longer than the wait.
fn open_db(dir: &Path) -> Result<sled::Db, StoreError> {
    let deadline = Instant::now() + LOCK_WAIT;
    let mut pause = Duration::from_millis(5);
    loop {
        match sled::open(dir) {
            Ok(db) => return Ok(db),
            Err(e) if is_lock_held(&e) => {
                if Instant::now() >= deadline {
                    return Err(StoreError::Locked {
                        dir: dir.to_path_buf(),
                        source: e,
                    });
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// sled reports a held lock only as an `Other` I/O error with this text.
fn is_lock_held(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|source| StoreError::Encode { what, source })
}

fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Corrupt { what, source })
}
