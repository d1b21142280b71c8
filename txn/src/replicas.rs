//! Comparing a heap's backups with its primary, word for word wherever the
//! two must agree (`docs/txn.md` §8): what an experiment or the crash-point
//! explorer runs after the fact to see a backup left behind.
//!
//! Compared: the header page (the chunk counter only has to be past every
//! chunk taken, on every replica: a taker stopped between the replicas'
//! FAAs leaves them apart, and a promotion takes it past the table); the
//! chunk owner table (a chunk recorded on some replicas only is allowed for
//! an owner stopped while taking it, who never used it); every log slot;
//! the data pointer and data of every object the caller names (its index's
//! objects), for the length it gives. Not compared: lock words, which live
//! on the primary only; metas the caller does not name (an aborted
//! create's, which may have reached some replicas only); and data no meta
//! names (a block a dead client wrote on some replicas only is named by
//! nothing).

use fabric::{le_word, Batch, Client, GlobalAddr, Replica, VERB_BYTES_MAX};

use crate::error::TxError;
use crate::heap::{ChunkKind, ChunkTag, Heap};
use crate::obj::META_BYTES;
use crate::word::OwnerId;

/// Differences listed in full; the count stays exact.
pub const DIFFERENCES_LISTED_MAX: usize = 100;
/// Objects whose data is read in one round trip, at most (fewer when their
/// bytes on every replica would pass `fabric::BATCH_BYTES_MAX`).
const OBJECTS_PER_BATCH: usize = 64;

/// One word that differs between the primary and a backup where they must
/// agree.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// The backup (1 = the first).
    pub replica: usize,
    /// Where.
    pub at: GlobalAddr,
    /// What lives there.
    pub what: String,
    /// The primary's word.
    pub primary: u64,
    /// The backup's word.
    pub backup: u64,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {:?}: replica {} holds {:#x}, the primary {:#x}",
            self.what, self.at, self.replica, self.backup, self.primary
        )
    }
}

/// What [`Heap::compare_replicas`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaReport {
    /// Replicas of the region (1: nothing to compare).
    pub replicas: usize,
    /// Words compared, over all backups.
    pub words_compared: u64,
    /// Objects (metas in use) compared.
    pub objects: u64,
    /// Words that differ where they must agree.
    pub differences: u64,
    /// The first of them.
    pub listed: Vec<Difference>,
}

impl ReplicaReport {
    fn differ(&mut self, d: Difference) {
        self.differences += 1;
        if self.listed.len() < DIFFERENCES_LISTED_MAX {
            self.listed.push(d);
        }
    }

    /// Compares `copies[i]` (replica i's bytes at `at`) word by word with
    /// `copies[0]`.
    fn compare(&mut self, at: GlobalAddr, copies: &[Vec<u8>], what: &dyn Fn(u64) -> Option<String>) {
        for (r, copy) in copies.iter().enumerate().skip(1) {
            for (j, (a, b)) in copies[0].chunks_exact(8).zip(copy.chunks_exact(8)).enumerate() {
                let offset = j as u64 * 8;
                let Some(what) = what(offset) else { continue };
                self.words_compared += 1;
                if a != b {
                    self.differ(Difference {
                        replica: r,
                        at: at.add(offset),
                        what,
                        primary: le_word(a, 0),
                        backup: le_word(b, 0),
                    });
                }
            }
        }
    }
}

impl Heap {
    /// Compares every backup of the heap with its primary (module docs).
    /// `object_bytes(meta)` is the length of the object `meta` names, if it
    /// is one the caller vouches for: its data pointer and its data (for
    /// that long) are compared. Any other meta is skipped: a transaction
    /// that aborted after writing a new object's meta leaves it behind,
    /// possibly on some replicas only (its batch cut off by a dying node),
    /// naming a block since reused. `half_taken_ok(owner)` says whether
    /// `owner` may have stopped in the middle of taking a chunk. Meant for a
    /// quiescent heap: a commit in flight is a difference.
    pub async fn compare_replicas(
        &self,
        client: &mut Client,
        object_bytes: &dyn Fn(GlobalAddr) -> Option<u32>,
        half_taken_ok: &dyn Fn(OwnerId) -> bool,
    ) -> Result<ReplicaReport, TxError> {
        let replicas = client.map().region(self.region()).map_or(1, |r| r.replicas.len());
        let mut report = ReplicaReport {
            replicas,
            ..ReplicaReport::default()
        };
        if replicas < 2 {
            return Ok(report);
        }
        let header = GlobalAddr::new(self.region(), 0);
        let counter = self.next_chunk_addr().offset();
        let copies = client
            .read_range(header, crate::heap::HEADER_BYTES, Replica::All)
            .await?;
        report.compare(header, &copies, &|o| {
            (o != counter).then(|| "heap header".to_string())
        });

        let (table, table_bytes) = self.owner_table_range();
        let tables = client.read_range(table, table_bytes, Replica::All).await?;
        let tag = |r: usize, c: usize| ChunkTag::from_raw(le_word(&tables[r], c * 8));
        let mut last_taken = None;
        for c in 0..self.chunk_count() as usize {
            let tags: Vec<ChunkTag> = (0..replicas).map(|r| tag(r, c)).collect();
            if tags.iter().any(|t| t.owner().is_some()) {
                last_taken = Some(c as u64);
            }
            report.words_compared += replicas as u64 - 1;
            if tags.iter().all(|t| *t == tags[0]) {
                continue;
            }
            let taken: Vec<ChunkTag> = tags.iter().copied().filter(|t| t.owner().is_some()).collect();
            let half_taken =
                taken.iter().all(|t| *t == taken[0]) && taken[0].owner().is_some_and(half_taken_ok);
            if !half_taken {
                for (r, t) in tags.iter().enumerate().skip(1).filter(|(_, t)| **t != tags[0]) {
                    report.differ(Difference {
                        replica: r,
                        at: table.add(c as u64 * 8),
                        what: format!("owner of chunk {c}"),
                        primary: tags[0].raw(),
                        backup: t.raw(),
                    });
                }
            }
        }
        for (r, copy) in copies.iter().enumerate() {
            let have = le_word(copy, counter as usize);
            if last_taken.is_some_and(|last| have <= last) {
                report.differ(Difference {
                    replica: r,
                    at: self.next_chunk_addr(),
                    what: format!("chunk counter, not past chunk {}", last_taken.unwrap_or(0)),
                    primary: le_word(&copies[0], counter as usize),
                    backup: have,
                });
            }
        }

        let logs = self.log_slot(0)?;
        let log_bytes = u64::from(self.owner_slots()) * crate::log::LOG_SLOT_BYTES;
        let copies = client.read_range(logs, log_bytes, Replica::All).await?;
        report.compare(logs, &copies, &|o| {
            Some(format!("log slot of owner {}", o / crate::log::LOG_SLOT_BYTES))
        });

        let mut objects = Vec::new();
        for c in (0..self.chunk_count() as usize).filter(|&c| tag(0, c).kind() == Some(ChunkKind::Metas)) {
            let at = GlobalAddr::new(self.region(), self.chunk_offset(c as u64));
            let copies = client.read_range(at, self.chunk_bytes(), Replica::All).await?;
            for (m, meta) in copies[0].chunks_exact(META_BYTES as usize).enumerate() {
                let dptr = le_word(meta, 8);
                if dptr == 0 {
                    continue;
                }
                let meta_at = at.add(m as u64 * META_BYTES);
                let Some(len) = object_bytes(meta_at) else {
                    continue;
                };
                let ptrs: Vec<Vec<u8>> = copies
                    .iter()
                    .map(|c| c[m * META_BYTES as usize + 8..][..8].to_vec())
                    .collect();
                report.compare(meta_at.add(8), &ptrs, &|_| Some("data pointer".to_string()));
                report.objects += 1;
                objects.push((meta_at, crate::word::DataPtr::from_raw(dptr).offset(), len));
            }
        }
        let mut groups: Vec<&[(GlobalAddr, u64, u32)]> = Vec::new();
        let mut start = 0;
        let mut bytes = 0u64;
        for (i, &(meta, _, len)) in objects.iter().enumerate() {
            let need = u64::from(len) * replicas as u64;
            if need > fabric::BATCH_BYTES_MAX || len > VERB_BYTES_MAX {
                return Err(TxError::BadObject(format!(
                    "the object at {meta:?} is {len} bytes: too large to compare in one batch"
                )));
            }
            if i - start == OBJECTS_PER_BATCH || bytes + need > fabric::BATCH_BYTES_MAX {
                groups.push(&objects[start..i]);
                start = i;
                bytes = 0;
            }
            bytes += need;
        }
        groups.push(&objects[start..]);
        for group in groups.into_iter().filter(|g| !g.is_empty()) {
            let mut batch = Batch::new();
            let handles: Vec<_> = group
                .iter()
                .map(|&(_, offset, len)| {
                    batch
                        .on(Replica::All)
                        .read(GlobalAddr::new(self.region(), offset), len)
                })
                .collect();
            client.execute(&mut batch).await?;
            for (&(meta, offset, _), h) in group.iter().zip(handles) {
                let copies: Vec<Vec<u8>> = (0..replicas)
                    .map(|r| {
                        batch
                            .read_result_of(h, r)
                            .map(<[u8]>::to_vec)
                            .map_err(TxError::Verb)
                    })
                    .collect::<Result<_, _>>()?;
                report.compare(GlobalAddr::new(self.region(), offset), &copies, &|_| {
                    Some(format!("data of the object at {meta:?}"))
                });
            }
        }
        Ok(report)
    }
}
