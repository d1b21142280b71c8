//! The Raft log and vote.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{decode, encode, StoreError};
use crate::raft::{MemberId, TypeConfig};

type StorageResult<T> = Result<T, StorageError<MemberId>>;

/// Meta keys; the strings double as the record names in errors.
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";

/// A member's Raft log and vote in sled.
///
/// Cloning is cheap and shares the trees: the clones serve as openraft's
/// log readers (one per replication stream), while writes come only through
/// the one instance openraft drives, which keeps them in order as
/// [`RaftLogStorage`] demands.
#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    logs: sled::Tree,
    meta: sled::Tree,
}

/// Terse: sled's own `Debug` prints every record, and counting them walks
/// the whole tree.
impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

/// Big-endian, so that sled's byte order is index order.
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| StoreError::LogKey { len: key.len() })?;
    Ok(u64::from_be_bytes(bytes))
}

fn key_bound(bound: Bound<&u64>) -> Bound<[u8; 8]> {
    match bound {
        Bound::Included(&i) => Bound::Included(index_key(i)),
        Bound::Excluded(&i) => Bound::Excluded(index_key(i)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Decodes one stored entry and checks it sits under its own index: an
/// entry under a wrong key would make openraft see a log it never wrote.
fn decode_entry(key: &[u8], value: &[u8]) -> Result<Entry<TypeConfig>, StoreError> {
    let index = key_index(key)?;
    let entry: Entry<TypeConfig> = decode("log entry", value)?;
    if entry.log_id.index != index {
        return Err(StoreError::LogIndex {
            key: index,
            found: entry.log_id.index,
        });
    }
    Ok(entry)
}

fn read_logs(e: StoreError) -> StorageError<MemberId> {
    StorageIOError::read_logs(&e).into()
}

fn write_logs(e: StoreError) -> StorageError<MemberId> {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    pub(super) fn new(db: sled::Db, logs: sled::Tree, meta: sled::Tree) -> Self {
        LogStore { db, logs, meta }
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &'static str) -> Result<Option<T>, StoreError> {
        self.meta.get(key)?.map(|v| decode(key, &v)).transpose()
    }

    fn put_meta<T: Serialize>(&self, key: &'static str, value: &T) -> Result<(), StoreError> {
        self.meta.insert(key, encode(key, value)?)?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.db.flush_async().await?;
        Ok(())
    }

    fn entries<R: RangeBounds<u64>>(&self, range: R) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let keys = (key_bound(range.start_bound()), key_bound(range.end_bound()));
        self.logs
            .range(keys)
            .map(|kv| {
                let (k, v) = kv?;
                decode_entry(&k, &v)
            })
            .collect()
    }

    fn last_log_id(&self) -> Result<Option<LogId<MemberId>>, StoreError> {
        match self.logs.last()? {
            Some((k, v)) => Ok(Some(decode_entry(&k, &v)?.log_id)),
            None => Ok(None),
        }
    }

    /// Removes the entries in `range` in one atomic batch, so a crash never
    /// leaves a hole in the middle.
    fn remove<R: RangeBounds<u64>>(&self, range: R) -> Result<(), StoreError> {
        let keys = (key_bound(range.start_bound()), key_bound(range.end_bound()));
        let mut batch = sled::Batch::default();
        for key in self.logs.range(keys).keys() {
            batch.remove(key?);
        }
        self.logs.apply_batch(batch)?;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        self.entries(range).map_err(read_logs)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<MemberId>> = self.get_meta(LAST_PURGED).map_err(read_logs)?;
        let last = self.last_log_id().map_err(read_logs)?.or(last_purged);
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<MemberId>) -> StorageResult<()> {
        let write_vote = |e: StoreError| StorageIOError::write_vote(&e);
        self.put_meta(VOTE, vote).map_err(write_vote)?;
        // A vote forgotten in a crash lets this member vote twice in a term.
        self.flush().await.map_err(write_vote)?;
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<MemberId>>> {
        Ok(self.get_meta(VOTE).map_err(|e| StorageIOError::read_vote(&e))?)
    }

    /// Not flushed: losing it costs only re-applying from the older value.
    async fn save_committed(&mut self, committed: Option<LogId<MemberId>>) -> StorageResult<()> {
        self.put_meta(COMMITTED, &committed).map_err(write_logs)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<MemberId>>> {
        let committed: Option<Option<LogId<MemberId>>> = self.get_meta(COMMITTED).map_err(read_logs)?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = sled::Batch::default();
        for entry in entries {
            batch.insert(
                &index_key(entry.log_id.index),
                encode("log entry", &entry).map_err(write_logs)?,
            );
        }
        self.logs.apply_batch(batch).map_err(|e| write_logs(e.into()))?;
        // The entries are readable now; openraft counts them towards a
        // quorum only once the callback says they are on disk.
        match self.flush().await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::other(e.to_string())));
                Err(write_logs(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<MemberId>) -> StorageResult<()> {
        self.remove(log_id.index..).map_err(write_logs)?;
        // Flushed so that conflicting entries cannot come back after a crash
        // and pass for the new leader's.
        self.flush().await.map_err(write_logs)
    }

    async fn purge(&mut self, log_id: LogId<MemberId>) -> StorageResult<()> {
        // The marker goes to disk before the entries go: a crash in between
        // leaves extra entries (harmless), never a log whose start is unknown.
        self.put_meta(LAST_PURGED, &log_id).map_err(write_logs)?;
        self.flush().await.map_err(write_logs)?;
        self.remove(..=log_id.index).map_err(write_logs)
    }
}
