//! The applied state machine, its snapshots, and the read handle the HTTP
//! layer serves from.

use std::io::Cursor;
use std::sync::{Arc, PoisonError, RwLock};

use fabric::Epoch;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{decode, encode, StoreError};
use crate::raft::{MemberId, TypeConfig};
use crate::state::{ControlState, Outcome, Response};

type StorageResult<T> = Result<T, StorageError<MemberId>>;
type Meta = SnapshotMeta<MemberId, BasicNode>;

/// Keys in the state machine tree.
const SNAPSHOT_META: &str = "snapshot_meta";
const SNAPSHOT_DATA: &str = "snapshot_data";

/// Everything the state machine has applied: the control state and where in
/// the log it stands.
///
/// Its JSON is both the persisted state machine and a snapshot's data, so
/// installing a snapshot is storing its bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AppliedState {
    /// The id of the last entry applied.
    pub last_applied: Option<LogId<MemberId>>,
    /// The membership of the last membership entry applied.
    pub last_membership: StoredMembership<MemberId, BasicNode>,
    /// The replicated state.
    pub state: ControlState,
}

/// What the state machine and its readers share.
struct Shared {
    applied: RwLock<AppliedState>,
    epoch: watch::Sender<Epoch>,
    /// The last applied log id, published after every apply batch and
    /// snapshot install.
    progress: watch::Sender<Option<LogId<MemberId>>>,
}

/// Terse: the control state (audit trail included) and sled's trees are
/// far too large to print in a log line.
impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let applied = self.read();
        f.debug_struct("Shared")
            .field("last_applied", &applied.last_applied)
            .field("epoch", &applied.state.epoch)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// A panic while holding the lock cannot leave `applied` half-written
    /// (every writer replaces or applies whole requests), so a poisoned
    /// lock is still safe to read.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, AppliedState> {
        self.applied.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, AppliedState> {
        self.applied.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, epoch: Epoch, last_applied: Option<LogId<MemberId>>) {
        self.epoch
            .send_if_modified(|e| std::mem::replace(e, epoch) != epoch);
        self.progress.send_replace(last_applied);
    }
}

/// The state machine of one member, persisted in sled.
///
/// openraft owns it once it is handed to `Raft::new`; take a
/// [`StateReader`] first (see [`StateMachineStore::reader`]).
pub struct StateMachineStore {
    db: sled::Db,
    tree: sled::Tree,
    shared: Arc<Shared>,
    /// Serialises replacing the current snapshot: a snapshot builder runs in
    /// its own task and must not overwrite a newer snapshot installed
    /// meanwhile.
    snapshot_lock: Arc<tokio::sync::Mutex<()>>,
}

/// Builds snapshots of a [`StateMachineStore`] in openraft's snapshot task.
pub struct SnapshotBuilder {
    db: sled::Db,
    tree: sled::Tree,
    shared: Arc<Shared>,
    snapshot_lock: Arc<tokio::sync::Mutex<()>>,
}

/// A read-only view of the applied state, cheap to clone, for serving reads
/// outside Raft.
///
/// Reads see every applied entry, which on a follower may lag the leader:
/// callers wanting linearizable reads go through the leader first.
#[derive(Clone, Debug)]
pub struct StateReader {
    shared: Arc<Shared>,
}

impl StateReader {
    /// A copy of the applied control state.
    pub fn state(&self) -> ControlState {
        self.shared.read().state.clone()
    }

    /// Runs `f` on the applied control state without copying it. `f` holds
    /// the state machine's lock, so applying waits for it: keep it short.
    pub fn with_state<R>(&self, f: impl FnOnce(&ControlState) -> R) -> R {
        f(&self.shared.read().state)
    }

    /// Calls `f` with the applied state and the log id it was applied to,
    /// read together (`ctl check` compares states at the same index).
    pub fn with_applied<R>(&self, f: impl FnOnce(&ControlState, Option<LogId<MemberId>>) -> R) -> R {
        let shared = self.shared.read();
        f(&shared.state, shared.last_applied)
    }

    /// The id of the last applied log entry.
    pub fn last_applied(&self) -> Option<LogId<MemberId>> {
        self.shared.read().last_applied
    }

    /// The membership as of the last applied membership entry.
    pub fn last_membership(&self) -> StoredMembership<MemberId, BasicNode> {
        self.shared.read().last_membership.clone()
    }

    /// The applied map epoch ([`ControlState::epoch`]).
    pub fn epoch(&self) -> Epoch {
        *self.shared.epoch.borrow()
    }

    /// The applied map epoch as a watch: it changes when an applied entry
    /// or an installed snapshot changes [`ControlState::epoch`], so a
    /// long-poll for "a map newer than epoch N" waits with
    /// `rx.wait_for(|&e| e > n)`. The sender lives as long as any reader or
    /// the state machine, so the watch does not close while it is held.
    pub fn watch_epoch(&self) -> watch::Receiver<Epoch> {
        self.shared.epoch.subscribe()
    }

    /// Waits until `f` finds what it looks for in the applied state, and
    /// returns it. `f` runs now and after every apply batch or installed
    /// snapshot, under the state machine's lock (keep it short). Callers
    /// bound the wait (a condition that never holds never returns).
    pub async fn wait_for<R>(&self, mut f: impl FnMut(&ControlState) -> Option<R>) -> R {
        let mut progress = self.shared.progress.subscribe();
        loop {
            progress.mark_unchanged();
            if let Some(found) = self.with_state(&mut f) {
                return found;
            }
            // The sender lives in `shared`, which `self` holds: `changed`
            // cannot fail while we wait, but if it ever did, polling would
            // spin, so fall back to waiting forever (the caller's bound).
            if progress.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

impl std::fmt::Debug for StateMachineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachineStore")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SnapshotBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBuilder")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

fn read_sm(e: StoreError) -> StorageError<MemberId> {
    StorageIOError::read_state_machine(&e).into()
}

fn write_sm(e: StoreError) -> StorageError<MemberId> {
    StorageIOError::write_state_machine(&e).into()
}

/// The response to an entry that carries no command (blank and membership
/// entries): openraft needs one per entry, but nobody proposed a command.
fn no_command() -> Response {
    Ok(Outcome::NoCommand)
}

/// Reads the current snapshot's metadata and data.
fn load_snapshot(tree: &sled::Tree) -> Result<Option<(Meta, sled::IVec)>, StoreError> {
    let Some(meta) = tree.get(SNAPSHOT_META)? else {
        return Ok(None);
    };
    let meta: Meta = decode("snapshot metadata", &meta)?;
    let data = tree
        .get(SNAPSHOT_DATA)?
        .ok_or_else(|| StoreError::SnapshotDataMissing {
            id: meta.snapshot_id.clone(),
        })?;
    Ok(Some((meta, data)))
}

/// Decodes snapshot data and checks it against its metadata and the state
/// machine's invariants: installing a bad snapshot would spread it.
fn decode_snapshot(meta: &Meta, data: &[u8]) -> Result<AppliedState, StoreError> {
    let applied: AppliedState = decode("snapshot data", data)?;
    let mismatch = |why: String| StoreError::SnapshotMismatch {
        id: meta.snapshot_id.clone(),
        why,
    };
    if applied.last_applied != meta.last_log_id {
        return Err(mismatch(format!(
            "data applied up to {:?}, metadata says {:?}",
            applied.last_applied, meta.last_log_id
        )));
    }
    if applied.last_membership != meta.last_membership {
        return Err(mismatch(format!(
            "data has membership {:?}, metadata says {:?}",
            applied.last_membership, meta.last_membership
        )));
    }
    applied.state.check().map_err(StoreError::InvalidState)?;
    Ok(applied)
}

/// Makes `meta`/`data` the current snapshot unless a newer one is already
/// stored, and flushes: openraft purges the log behind a snapshot. Returns
/// whether it was stored.
async fn store_snapshot(
    db: &sled::Db,
    tree: &sled::Tree,
    lock: &tokio::sync::Mutex<()>,
    meta: &Meta,
    data: &[u8],
) -> Result<bool, StoreError> {
    let _guard = lock.lock().await;
    if let Some(current) = tree.get(SNAPSHOT_META)? {
        let current: Meta = decode("snapshot metadata", &current)?;
        if current.last_log_id > meta.last_log_id {
            return Ok(false);
        }
    }
    // One batch: metadata never names data that is not there.
    let mut batch = sled::Batch::default();
    batch.insert(SNAPSHOT_META, encode("snapshot metadata", meta)?);
    batch.insert(SNAPSHOT_DATA, data);
    tree.apply_batch(batch)?;
    db.flush_async().await?;
    Ok(true)
}

impl StateMachineStore {
    /// Loads the current snapshot, or an empty state: openraft then applies
    /// the committed log entries after it again.
    pub(super) fn load(db: sled::Db, tree: sled::Tree) -> Result<Self, StoreError> {
        let applied = match load_snapshot(&tree)? {
            Some((meta, data)) => decode_snapshot(&meta, &data)?,
            None => AppliedState::default(),
        };
        let (epoch, _) = watch::channel(applied.state.epoch);
        let (progress, _) = watch::channel(applied.last_applied);
        Ok(StateMachineStore {
            db,
            tree,
            shared: Arc::new(Shared {
                applied: RwLock::new(applied),
                epoch,
                progress,
            }),
            snapshot_lock: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// A read handle on the applied state that stays valid after this store
    /// is moved into `Raft::new`.
    pub fn reader(&self) -> StateReader {
        StateReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// A copy of the applied control state.
    pub fn state(&self) -> ControlState {
        self.shared.read().state.clone()
    }

    /// The id of the last applied log entry.
    pub fn last_applied(&self) -> Option<LogId<MemberId>> {
        self.shared.read().last_applied
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let (data, last_log_id, last_membership) = {
            let applied = self.shared.read();
            let data = encode("snapshot data", &*applied).map_err(read_sm)?;
            (data, applied.last_applied, applied.last_membership.clone())
        };
        // Two snapshots at the same log id may differ in bytes (openraft
        // compares ids when streaming), hence the sled-unique suffix.
        let unique = self.db.generate_id().map_err(|e| write_sm(e.into()))?;
        let snapshot_id = match last_log_id {
            Some(id) => format!("{id}-{unique}"),
            None => format!("empty-{unique}"),
        };
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        // A newer snapshot installed meanwhile wins; this one is still a
        // true snapshot of what was applied, so it is returned either way.
        let _stored = store_snapshot(&self.db, &self.tree, &self.snapshot_lock, &meta, &data)
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<MemberId>>, StoredMembership<MemberId, BasicNode>)> {
        let applied = self.shared.read();
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        let (epoch, last_applied) = {
            let mut applied = self.shared.write();
            for entry in entries {
                applied.last_applied = Some(entry.log_id);
                replies.push(match entry.payload {
                    EntryPayload::Blank => no_command(),
                    EntryPayload::Normal(req) => applied.state.apply(&req),
                    EntryPayload::Membership(m) => {
                        applied.last_membership = StoredMembership::new(Some(entry.log_id), m);
                        no_command()
                    }
                });
            }
            if replies.is_empty() {
                return Ok(replies);
            }
            (applied.state.epoch, applied.last_applied)
        };
        // Nothing is written here: the entries are durable in the log, and
        // the state reaches disk with the next snapshot (see the module docs
        // of `store`).
        self.shared.publish(epoch, last_applied);
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            tree: self.tree.clone(),
            shared: Arc::clone(&self.shared),
            snapshot_lock: Arc::clone(&self.snapshot_lock),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<Cursor<Vec<u8>>>) -> StorageResult<()> {
        let write_snapshot = |e: StoreError| StorageIOError::write_snapshot(Some(meta.signature()), &e);
        let data = snapshot.into_inner();
        let applied = decode_snapshot(meta, &data).map_err(write_snapshot)?;
        let stored = store_snapshot(&self.db, &self.tree, &self.snapshot_lock, meta, &data)
            .await
            .map_err(write_snapshot)?;
        if !stored {
            // openraft installs only snapshots past what is applied, and a
            // stored snapshot never is: this is a bug, and replacing the
            // state with the older one would make memory and disk disagree.
            return Err(write_snapshot(StoreError::SnapshotMismatch {
                id: meta.snapshot_id.clone(),
                why: "older than the snapshot already stored".to_owned(),
            })
            .into());
        }
        let (epoch, last_applied) = (applied.state.epoch, applied.last_applied);
        *self.shared.write() = applied;
        self.shared.publish(epoch, last_applied);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let current = load_snapshot(&self.tree)
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?
            .map(|(meta, data)| Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data.to_vec())),
            });
        Ok(current)
    }
}
