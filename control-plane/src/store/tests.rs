//! openraft's storage conformance suite, plus restart and corruption tests.

use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{log_id, StoreBuilder, Suite};
use openraft::{Entry, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageError, Vote};
use tempfile::TempDir;

use super::{open, open_db, LogStore, StateMachineStore, StoreError, LOG_TREE, SM_TREE};
use crate::raft::{MemberId, TypeConfig};
use crate::state::{Command, Outcome, Request};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<MemberId>> {
        let dir = TempDir::new().map_err(|e| openraft::StorageIOError::write(&e))?;
        let (log, sm) = open(dir.path())
            .await
            .map_err(|e| openraft::StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_conformance_suite() {
    Suite::test_all(Builder).unwrap_or_else(|e| panic!("{e}"));
}

fn request(command: Command) -> Request {
    Request {
        at_ms: 1_700_000_000_000,
        clock_ms: 1_700_000_000_000,
        actor: "test".to_owned(),
        nonce: 7,
        command,
    }
}

fn normal(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, 0, index),
        payload: EntryPayload::Normal(request(command)),
    }
}

async fn reopen(dir: &Path) -> (LogStore, StateMachineStore) {
    open(dir).await.expect("reopen")
}

#[tokio::test]
async fn applied_state_survives_restart_as_of_the_last_snapshot() {
    let dir = TempDir::new().unwrap();
    let (_log, mut sm) = open(dir.path()).await.unwrap();
    let reader = sm.reader();
    let mut epochs = reader.watch_epoch();
    assert_eq!(*epochs.borrow_and_update(), 0);

    let replies = sm
        .apply([
            Entry {
                log_id: log_id(1, 0, 1),
                payload: EntryPayload::Blank,
            },
            normal(
                2,
                Command::RegisterMemNode {
                    endpoint: "mn0:7000".to_owned(),
                    capacity_bytes: 1 << 30,
                    image: None,
                },
            ),
            normal(
                3,
                Command::RegisterMemNode {
                    endpoint: "mn1:7000".to_owned(),
                    capacity_bytes: 1 << 30,
                    image: None,
                },
            ),
            normal(4, Command::ActivateMemNode { id: 0 }),
            normal(
                5,
                Command::CreateRegion {
                    size_bytes: 1 << 20,
                    replicas: 1,
                },
            ),
            // Refused (node 9 is unknown): still applied, as an audit entry.
            normal(6, Command::ActivateMemNode { id: 9 }),
        ])
        .await
        .unwrap();
    assert_eq!(replies.len(), 6);
    assert!(matches!(replies[1], Ok(Outcome::MemNode(_))));
    assert!(matches!(replies[4], Ok(Outcome::Region(_))));
    assert!(replies[5].is_err());

    // The region bumped the epoch, and the watch saw it.
    assert!(epochs.has_changed().unwrap());
    assert_eq!(*epochs.borrow_and_update(), 1);
    assert_eq!(reader.epoch(), 1);

    let before = sm.state();
    assert_eq!(before.memnodes.len(), 2);
    assert_eq!(before.regions.len(), 1);
    assert_eq!(reader.with_state(|s| s.audit.len()), 5);
    assert_eq!(sm.last_applied(), Some(log_id(1, 0, 6)));
    let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 0, 6)));
    // Applied after the snapshot: in memory only, until the next one.
    sm.apply([normal(7, Command::DrainMemNode { id: 1 })])
        .await
        .unwrap();
    assert_eq!(sm.last_applied(), Some(log_id(1, 0, 7)));
    drop((_log, sm));

    // The snapshot comes back; openraft re-applies entry 7 from the log.
    let (_log, mut sm) = reopen(dir.path()).await;
    assert_eq!(sm.state(), before);
    assert_eq!(sm.last_applied(), Some(log_id(1, 0, 6)));
    assert_eq!(sm.reader().epoch(), 1);
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 0, 6)));

    // The old reader still shows what was applied before the restart.
    assert_eq!(reader.last_applied(), Some(log_id(1, 0, 7)));
}

#[tokio::test]
async fn log_vote_and_snapshot_survive_restart() {
    let dir = TempDir::new().unwrap();
    let (mut log, mut sm) = open(dir.path()).await.unwrap();
    log.save_vote(&Vote::new(3, 1)).await.unwrap();
    log.blocking_append((1..=4).map(|i| normal(i, Command::ActivateMemNode { id: 0 })))
        .await
        .unwrap();
    log.purge(log_id(1, 0, 1)).await.unwrap();
    log.save_committed(Some(log_id(1, 0, 3))).await.unwrap();
    sm.apply([normal(
        1,
        Command::RegisterMemNode {
            endpoint: "mn0:7000".to_owned(),
            capacity_bytes: 4096,
            image: None,
        },
    )])
    .await
    .unwrap();
    let built = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    drop((log, sm));

    let (mut log, mut sm) = reopen(dir.path()).await;
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 0, 3)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 0, 1)));
    assert_eq!(state.last_log_id, Some(log_id(1, 0, 4)));
    let entries = log.try_get_log_entries(0..10).await.unwrap();
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, [2, 3, 4]);

    let current = sm.get_current_snapshot().await.unwrap().expect("a snapshot");
    assert_eq!(current.meta, built.meta);
    assert_eq!(current.snapshot.into_inner(), built.snapshot.into_inner());
}

/// A snapshot installed on a fresh member replaces its state and moves the
/// epoch watch.
#[tokio::test]
async fn installed_snapshot_replaces_state() {
    let (dir_a, dir_b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (_la, mut a) = open(dir_a.path()).await.unwrap();
    let (_lb, mut b) = open(dir_b.path()).await.unwrap();
    a.apply([
        normal(
            1,
            Command::RegisterMemNode {
                endpoint: "mn0:7000".to_owned(),
                capacity_bytes: 1 << 30,
                image: None,
            },
        ),
        normal(2, Command::ActivateMemNode { id: 0 }),
        normal(
            3,
            Command::CreateRegion {
                size_bytes: 4096,
                replicas: 1,
            },
        ),
    ])
    .await
    .unwrap();
    let snap = a.get_snapshot_builder().await.build_snapshot().await.unwrap();

    let epochs = b.reader().watch_epoch();
    let mut incoming = b.begin_receiving_snapshot().await.unwrap();
    *incoming = *snap.snapshot;
    b.install_snapshot(&snap.meta, incoming).await.unwrap();
    assert_eq!(b.state(), a.state());
    assert_eq!(b.last_applied(), Some(log_id(1, 0, 3)));
    assert!(epochs.has_changed().unwrap());
    assert_eq!(*epochs.borrow(), 1);
    drop((_lb, b));

    let (_lb, b) = reopen(dir_b.path()).await;
    assert_eq!(b.state(), a.state());
}

/// A snapshot whose data does not match its metadata is refused.
#[tokio::test]
async fn mismatched_snapshot_is_refused() {
    let (dir_a, dir_b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (_la, mut a) = open(dir_a.path()).await.unwrap();
    let (_lb, mut b) = open(dir_b.path()).await.unwrap();
    a.apply([Entry {
        log_id: log_id(1, 0, 1),
        payload: EntryPayload::Blank,
    }])
    .await
    .unwrap();
    let mut snap = a.get_snapshot_builder().await.build_snapshot().await.unwrap();
    snap.meta.last_log_id = Some(log_id(1, 0, 9));
    assert!(b.install_snapshot(&snap.meta, snap.snapshot).await.is_err());
    assert_eq!(b.last_applied(), None);
    assert!(b.get_current_snapshot().await.unwrap().is_none());
}

fn corrupt(dir: &Path, tree: &str, key: &[u8], value: &[u8]) {
    let db = open_db(dir).unwrap();
    db.open_tree(tree).unwrap().insert(key, value).unwrap();
    db.flush().unwrap();
}

#[tokio::test]
async fn corrupt_state_is_an_error_not_a_panic() {
    let dir = TempDir::new().unwrap();
    drop(open(dir.path()).await.unwrap());
    corrupt(dir.path(), SM_TREE, b"snapshot_meta", b"{not json");
    let err = open(dir.path()).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                what: "snapshot metadata",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn corrupt_log_entry_is_an_error_not_a_panic() {
    let dir = TempDir::new().unwrap();
    let (mut log, _sm) = open(dir.path()).await.unwrap();
    log.blocking_append([normal(1, Command::ActivateMemNode { id: 0 })])
        .await
        .unwrap();
    drop((log, _sm));
    corrupt(dir.path(), LOG_TREE, &2u64.to_be_bytes(), b"\xff");
    corrupt(dir.path(), LOG_TREE, b"short", b"{}");
    let (mut log, _sm) = reopen(dir.path()).await;
    assert!(log.try_get_log_entries(0..2).await.is_ok());
    assert!(log.try_get_log_entries(0..3).await.is_err());
    // The short key sorts after every index key: the last entry is garbage.
    assert!(log.get_log_state().await.is_err());
}

/// The lock retry absorbs a closing handle, not a live one.
#[tokio::test]
async fn second_open_of_a_live_store_is_refused() {
    let dir = TempDir::new().unwrap();
    let _live = open(dir.path()).await.unwrap();
    let err = open(dir.path()).await.unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
}

#[tokio::test]
async fn an_older_snapshot_is_refused_and_changes_nothing() {
    let (dir_a, dir_b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (_la, mut a) = open(dir_a.path()).await.unwrap();
    let (_lb, mut b) = open(dir_b.path()).await.unwrap();
    let register = |i: u64| {
        normal(
            i,
            Command::RegisterMemNode {
                endpoint: format!("mn{i}:7000"),
                capacity_bytes: 1 << 30,
                image: None,
            },
        )
    };
    a.apply([register(1)]).await.unwrap();
    let older = a.get_snapshot_builder().await.build_snapshot().await.unwrap();
    a.apply([register(2)]).await.unwrap();
    let newer = a.get_snapshot_builder().await.build_snapshot().await.unwrap();

    let mut incoming = b.begin_receiving_snapshot().await.unwrap();
    *incoming = *newer.snapshot;
    b.install_snapshot(&newer.meta, incoming).await.unwrap();
    let before = b.state();
    let mut incoming = b.begin_receiving_snapshot().await.unwrap();
    *incoming = *older.snapshot;
    assert!(b.install_snapshot(&older.meta, incoming).await.is_err());
    assert_eq!(b.state(), before);
    assert_eq!(b.last_applied(), Some(log_id(1, 0, 2)));
}
