//! Recovery of DTX logs: what a dead (or cut-off) coordinator left is
//! rolled back or forward from its log halves and undo images.
//!
//! A DTX transaction is committed when every replica's half holds its
//! checksum in COMMITTED (or DONE, recovery's mark of a committed log), and
//! aborted otherwise. Once its owner stopped, that decision no longer
//! changes: recovery marks a log DONE only when committed and ABORT only
//! when aborted, so a recoverer stopped after any verb leaves the decision
//! to the next one as it found it.
//!
//! Per log (at most one per half of the owner's slot):
//!
//! 1. Act only on records whose lock this recoverer holds. The owner
//!    settling its own log holds its own lock word already. Anyone else
//!    **adopts**: writes a log of its own naming the records with
//!    `adopted` = the dead lock word (before the CASes, on each node), then
//!    CASes each lock from the dead word to its own. A second recoverer
//!    (after a leader change) loses those CASes and leaves the records
//!    alone; if the adopter dies, recovery of the adopter's owner id finds
//!    its log and adopts again, taking the decision from the original
//!    owner's slot (which is not reused before that id is forgotten). In
//!    the same round trip: every replica's version word and undo image.
//! 2. For each record whose version is the writer's lock word (invisible)
//!    on some replica (or, held, whose replicas disagree on a visible
//!    version: a recoverer stopped inside its writes; the highest wins): committed, WRITE version v + 1 on every replica (the
//!    data is in place everywhere); aborted, WRITE the undo image's data
//!    and version v + 1 on every replica. A committed record the recoverer
//!    does not hold (the owner released its lock on the primary, not yet
//!    its version on a backup) gets a CAS of the version from the writer's
//!    word to v + 1 on each such replica, which cannot clobber a later
//!    writer's mark. (1 round trip, when there is anything to write.)
//! 3. Only after those landed: every held lock freed (CAS, on the
//!    primary), so a backup's version is never behind a free lock; the
//!    log's headers marked DONE or ABORT; the adopter's own log DONE.
//!
//! Cost: reading the slot (1 round trip), then 2 or 3 per log found
//! unfinished, whatever the size of the index (no sweep).

use std::collections::HashMap;

use fabric::{Batch, GlobalAddr, Replica};

use crate::dtx::client::{replica, DtxClient, HALF_READ_BYTES};
use crate::dtx::log::{half_addr, is_unfinished, DtxEntry, DtxLog};
use crate::dtx::record::{self, Version};
use crate::error::TxError;
use crate::log::LOG_SLOT_BYTES;
use crate::word::{LockWord, LogHeader, LogState, OwnerId};
use fabric::le_word;

/// What recovery of one owner id's logs did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finished {
    /// Logs found unfinished and finished.
    pub logs: u32,
    /// Records put back from their undo images.
    pub rolled_back: u32,
    /// Records made visible at their new version.
    pub rolled_forward: u32,
    /// Locks freed.
    pub released: u32,
}

impl std::ops::AddAssign for Finished {
    fn add_assign(&mut self, o: Finished) {
        self.logs += o.logs;
        self.rolled_back += o.rolled_back;
        self.rolled_forward += o.rolled_forward;
        self.released += o.released;
    }
}

/// The decision on a DTX transaction, from its owner's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Committed,
    Aborted,
    /// No half of the owner's slot names the transaction any more: it was
    /// finished and its half reused.
    Gone,
}

/// An owner's slot as every replica holds it.
struct SlotView {
    slot: GlobalAddr,
    /// Per replica, per half: the decoded log, if it is a DTX log.
    halves: Vec<[Option<DtxLog>; 2]>,
}

impl SlotView {
    /// The decision on the transaction that logged as `w`, and the half it
    /// is in.
    fn decide(&self, w: LockWord) -> (Decision, Option<u8>) {
        // (The half is for diagnostics and tests of this module.)
        for h in 0..2u8 {
            let named = self
                .halves
                .iter()
                .any(|r| r[h as usize].as_ref().is_some_and(|l| l.checksum == w));
            if !named {
                continue;
            }
            let committed = self.halves.iter().all(|r| {
                r[h as usize].as_ref().is_some_and(|l| {
                    l.checksum == w && matches!(l.header.state(), LogState::Committed | LogState::Done)
                })
            });
            let d = if committed {
                Decision::Committed
            } else {
                Decision::Aborted
            };
            return (d, Some(h));
        }
        (Decision::Gone, None)
    }

    /// The lock words of the logs in half `h` some replica holds
    /// unfinished, oldest first.
    fn unfinished(&self, h: u8) -> Vec<LockWord> {
        let mut ws: Vec<LockWord> = self
            .halves
            .iter()
            .filter_map(|r| r[h as usize].as_ref())
            .filter(|l| is_unfinished(l.header.state()))
            .map(|l| l.checksum)
            .collect();
        ws.sort_by_key(|w| w.lease_tick());
        ws.dedup();
        ws
    }

    /// The entries of `w`'s log in half `h`: the longest any replica holds
    /// (a lock batch cut off may have reached one replica and not another;
    /// on the primary the log always names every lock taken).
    fn entries(&self, h: u8, w: LockWord) -> Vec<DtxEntry> {
        self.halves
            .iter()
            .filter_map(|r| r[h as usize].as_ref())
            .filter(|l| l.checksum == w)
            .map(|l| l.entries.clone())
            .max_by_key(Vec::len)
            .unwrap_or_default()
    }

    /// The header CASes that mark `w`'s log in half `h` finished: per
    /// replica holding it unfinished, (replica, address, old header).
    fn marks(&self, h: u8, w: LockWord) -> Vec<(usize, GlobalAddr, u64)> {
        self.halves
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let l = r[h as usize].as_ref()?;
                (l.checksum == w && is_unfinished(l.header.state()))
                    .then(|| (i, half_addr(self.slot, h), l.header.raw()))
            })
            .collect()
    }
}

/// One header CAS of a mark: replica, address, old and new header.
type Mark = (usize, GlobalAddr, u64, u64);

impl DtxClient {
    /// Finishes every unfinished DTX log of `owner` (a client whose lease
    /// expired and whose quarantine is over: DTX assumes it does nothing
    /// more), rolling each transaction back or forward. Idempotent; a
    /// recoverer stopped after any verb is finished by the next.
    pub async fn finish_owner_log(&mut self, owner: OwnerId) -> Result<Finished, TxError> {
        if owner == self.owner {
            return self.finish_own_logs().await;
        }
        self.settle().await?;
        self.release_pending().await?;
        self.finish_logs_of(owner, false).await
    }

    /// After a promotion made another node the region's primary: takes
    /// again, on the new primary and with the log's own lock word, every
    /// lock an unfinished log of `owner` held that recovery needs. Lock
    /// words live on the primary only, so the new one's are free, or stale
    /// (a re-replication copied the primary's lock words as they were),
    /// and [`DtxClient::finish_owner_log`] acts only on records whose lock
    /// it adopts. A record needs its lock back when some replica's version
    /// is its writer's mark (invisible): the writer held it and its data
    /// may be half-written. A logged record without that mark needs nothing
    /// (never written in place, or already visible again) and may never
    /// have been locked at all (a no-wait abort logs before its CAS). The
    /// lock is written, not CASed from free: nobody else acts on the region
    /// meanwhile, and a stale word must not stand in the way. Run by the
    /// promoter after the fence and before anyone uses the region, for
    /// every owner id, then `finish_owner_log` for each, then
    /// [`DtxClient::free_stale_locks`]; idempotent. Returns the locks
    /// taken.
    pub async fn relock_after_promotion(&mut self, owner: OwnerId) -> Result<u32, TxError> {
        let view = self.read_slot(owner).await?;
        let mut relocked = 0;
        for h in 0..2u8 {
            for w in view.unfinished(h) {
                let entries = view.entries(h, w);
                if entries.is_empty() {
                    continue;
                }
                let mut batch = self.fabric.take_batch();
                let taken = self.relock_log(&mut batch, w, &entries).await;
                self.fabric.give_batch(batch);
                relocked += taken?;
            }
        }
        if relocked > 0 {
            tracing::debug!(owner, relocked, "DTX locks taken again after a promotion");
        }
        Ok(relocked)
    }

    /// [`DtxClient::relock_after_promotion`] of the log locked as `w`.
    async fn relock_log(
        &mut self,
        batch: &mut Batch,
        w: LockWord,
        entries: &[DtxEntry],
    ) -> Result<u32, TxError> {
        let replicas = self.replicas();
        batch.clear();
        let versions: Vec<_> = entries
            .iter()
            .map(|e| {
                let rec = record::Record::new(e.record, e.len);
                batch.on(Replica::All).read(rec.version_addr(), 8)
            })
            .collect();
        self.fabric.execute(batch).await?;
        let mut marked = Vec::new();
        for (e, &v) in entries.iter().zip(&versions) {
            let writer = e.adopted.unwrap_or(w);
            let mut invisible = false;
            for i in 0..replicas {
                invisible |= le_word(batch.read_result_of(v, i).map_err(TxError::Verb)?, 0) == writer.raw();
            }
            if invisible {
                marked.push(record::Record::new(e.record, e.len));
            }
        }
        if marked.is_empty() {
            return Ok(0);
        }
        batch.clear();
        let writes: Vec<_> = marked
            .iter()
            .map(|r| batch.write(r.lock_addr(), &w.raw().to_le_bytes()))
            .collect();
        self.fabric.execute(batch).await?;
        for h in writes {
            batch.done(h).map_err(TxError::Verb)?;
        }
        Ok(marked.len() as u32)
    }

    /// Frees every lock word of `records` that is held on the primary:
    /// after a promotion, once every log is finished, what is left held is
    /// a stale word a re-replication copied from a former primary (lock
    /// words are primary-only, and a copy takes them as they were). Only
    /// for a promoter, with nobody else acting on the region. Returns the
    /// locks freed.
    pub async fn free_stale_locks(&mut self, records: &[record::Record]) -> Result<u32, TxError> {
        let mut freed = 0;
        let mut batch = self.fabric.take_batch();
        let result = async {
            for chunk in records.chunks(fabric::VERBS_PER_BATCH_MAX / 2) {
                batch.clear();
                let reads: Vec<_> = chunk.iter().map(|r| batch.read(r.lock_addr(), 8)).collect();
                self.fabric.execute(&mut batch).await?;
                let held: Vec<record::Record> = chunk
                    .iter()
                    .zip(&reads)
                    .map(|(r, &h)| Ok((*r, le_word(batch.read_result(h).map_err(TxError::Verb)?, 0))))
                    .collect::<Result<Vec<_>, TxError>>()?
                    .into_iter()
                    .filter(|&(_, w)| w != record::FREE)
                    .map(|(r, _)| r)
                    .collect();
                if held.is_empty() {
                    continue;
                }
                batch.clear();
                let writes: Vec<_> = held
                    .iter()
                    .map(|r| batch.write(r.lock_addr(), &record::FREE.to_le_bytes()))
                    .collect();
                self.fabric.execute(&mut batch).await?;
                for h in writes {
                    batch.done(h).map_err(TxError::Verb)?;
                }
                freed += held.len() as u32;
            }
            Ok::<(), TxError>(())
        }
        .await;
        self.fabric.give_batch(batch);
        result.map(|()| freed)
    }

    /// Finishes this owner's own logs after a fabric error cut a batch off
    /// (it holds its own lock words: no adoption). Releases owed are
    /// dropped: recovery decides from what DM holds.
    pub(crate) async fn finish_own_logs(&mut self) -> Result<Finished, TxError> {
        self.reap(true).await;
        self.owed().releases.clear();
        self.forget_kept();
        self.finish_logs_of(self.owner, true).await
    }

    async fn finish_logs_of(&mut self, owner: OwnerId, own: bool) -> Result<Finished, TxError> {
        let view = self.read_slot(owner).await?;
        let mut finished = Finished::default();
        let mut logs: Vec<(u8, LockWord)> = (0..2u8)
            .flat_map(|h| view.unfinished(h).into_iter().map(move |w| (h, w)))
            .collect();
        logs.sort_by_key(|(_, w)| w.lease_tick());
        let mut slots: HashMap<OwnerId, SlotView> = HashMap::new();
        for (h, w) in logs {
            let entries = view.entries(h, w);
            // Decisions: the log's own, or, for a recoverer's log, those of
            // the transactions it adopted, from their owners' slots.
            let own_decision = view.decide(w).0;
            let mut decisions = Vec::with_capacity(entries.len());
            for e in &entries {
                let Some(adopted) = e.adopted else {
                    decisions.push(own_decision);
                    continue;
                };
                let o = adopted.owner();
                if let std::collections::hash_map::Entry::Vacant(v) = slots.entry(o) {
                    let s = self.read_slot(o).await?;
                    v.insert(s);
                }
                // The adopted transaction's own log is left as it is: its
                // recovery (which may find records this adopter never got
                // to) marks it.
                decisions.push(slots[&o].decide(adopted).0);
            }
            let mut marks: Vec<Mark> = Vec::new();
            let all_adopted = !entries.is_empty() && entries.iter().all(|e| e.adopted.is_some());
            let this_mark = if all_adopted {
                LogHeader::of(LogState::Done, w).raw()
            } else {
                mark_of(own_decision, w)
            };
            for (i, at, old) in view.marks(h, w) {
                marks.push((i, at, old, this_mark));
            }
            self.finish_log(w, &entries, &decisions, own, marks, &mut finished)
                .await?;
            finished.logs += 1;
        }
        self.stats.rollbacks += u64::from(finished.rolled_back);
        self.stats.rollforwards += u64::from(finished.rolled_forward);
        if finished.rolled_back + finished.rolled_forward + finished.released > 0 {
            self.stats.repairs += 1;
            tracing::debug!(owner, recoverer = self.owner, ?finished, "DTX logs finished");
        }
        Ok(finished)
    }

    /// Finishes one log, locked as `w` (see the module's steps).
    async fn finish_log(
        &mut self,
        w: LockWord,
        entries: &[DtxEntry],
        decisions: &[Decision],
        own: bool,
        marks: Vec<Mark>,
        finished: &mut Finished,
    ) -> Result<(), TxError> {
        let replicas = self.replicas();
        let mut batch = self.fabric.take_batch();
        let result = self
            .finish_log_in(&mut batch, replicas, w, entries, decisions, own, marks, finished)
            .await;
        self.fabric.give_batch(batch);
        if result.is_err() && !own {
            // The adoption may have taken locks: this recoverer's own log
            // names them.
            self.unsettled = true;
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_log_in(
        &mut self,
        batch: &mut Batch,
        replicas: usize,
        w: LockWord,
        entries: &[DtxEntry],
        decisions: &[Decision],
        own: bool,
        mut marks: Vec<Mark>,
        finished: &mut Finished,
    ) -> Result<(), TxError> {
        // Step 1: hold the locks (adopting them unless they are ours), read
        // versions and undo images everywhere.
        let held = if own {
            w
        } else {
            self.next_lock(entries.len()).await
        };
        let mut own_log = None;
        batch.clear();
        if !own && !entries.is_empty() {
            let slot = self.heap.log_slot(self.owner)?;
            let at = half_addr(slot, self.parity);
            let mut log = Vec::new();
            DtxLog {
                header: LogHeader::of(LogState::Locking, held),
                checksum: held,
                entries: entries
                    .iter()
                    .map(|e| DtxEntry {
                        adopted: Some(e.adopted.unwrap_or(w)),
                        ..*e
                    })
                    .collect(),
            }
            .encode(&mut log);
            batch.on(Replica::All).write(at, &log);
            own_log = Some(at);
        }
        let mut verbs = Vec::with_capacity(entries.len());
        for e in entries {
            let rec = record::Record::new(e.record, e.len);
            let lock = if own {
                batch.read(rec.lock_addr(), 8)
            } else {
                batch.cas(rec.lock_addr(), w.raw(), held.raw())
            };
            let version = batch.on(Replica::All).read(rec.version_addr(), 8);
            let image = e.undo.map(|u| batch.on(Replica::All).read(u, 8 + e.len));
            verbs.push((rec, lock, version, image));
        }
        self.fabric.execute(batch).await?;
        if let Some(e) = batch.first_error() {
            return Err(TxError::Verb(e));
        }

        // Step 2: what each record needs.
        let mut won = Vec::new();
        let mut writes: Vec<(Replica, GlobalAddr, Vec<u8>)> = Vec::new();
        let mut cases: Vec<(usize, GlobalAddr, u64, u64)> = Vec::new();
        for (k, &(rec, lock, version, image)) in verbs.iter().enumerate() {
            let e = &entries[k];
            let writer = e.adopted.unwrap_or(w);
            let holds = if own {
                batch
                    .read_result(lock)
                    .map(|b| le_word(b, 0))
                    .map_err(TxError::Verb)?
                    == held.raw()
            } else {
                batch.cas_succeeded(lock).map_err(TxError::Verb)?
            };
            let invisible: Vec<usize> = (0..replicas)
                .filter(|&i| {
                    batch
                        .read_result_of(version, i)
                        .is_ok_and(|b| le_word(b, 0) == writer.raw())
                })
                .collect();
            if holds {
                won.push(rec);
            }
            let Some(&first) = invisible.first() else {
                // Nothing invisible, yet the replicas' versions may differ:
                // a recoverer stopped inside its writes left some replicas
                // at v + 1 and others at v, with the same data (an aborted
                // transaction's new data is only ever on a replica whose
                // version is its lock word). The holder brings them level.
                let visible: Vec<u64> = (0..replicas)
                    .filter_map(|i| batch.read_result_of(version, i).ok().map(|b| le_word(b, 0)))
                    .collect();
                let top = visible.iter().copied().max().unwrap_or(0);
                if holds && visible.iter().any(|&v| v != top) {
                    if !matches!(Version::from_raw(top), Version::Visible(_)) {
                        return Err(TxError::Invariant(format!(
                            "DTX record {rec:?} held by {held:?} shows version words {visible:x?}"
                        )));
                    }
                    writes.push((Replica::All, rec.version_addr(), top.to_le_bytes().to_vec()));
                }
                continue;
            };
            let (Some(image), Some(_)) = (image, e.undo) else {
                return Err(TxError::Invariant(format!(
                    "DTX record {rec:?} is invisible under {writer:?} but its log entry names no undo image"
                )));
            };
            let img = batch.read_result_of(image, first).map_err(TxError::Verb)?;
            let v = match Version::from_raw(le_word(img, 0)) {
                Version::Visible(v) => v,
                Version::Invisible(by) => {
                    return Err(TxError::Invariant(format!(
                        "the undo image of {rec:?} under {writer:?} holds an invisible version ({by:?})"
                    )))
                }
            };
            let next = Version::Visible(v + 1).raw();
            match (decisions[k], holds) {
                (Decision::Committed, true) => {
                    writes.push((Replica::All, rec.version_addr(), next.to_le_bytes().to_vec()));
                    finished.rolled_forward += 1;
                }
                (Decision::Aborted, true) => {
                    writes.push((Replica::All, rec.data_addr(), img[8..].to_vec()));
                    writes.push((Replica::All, rec.version_addr(), next.to_le_bytes().to_vec()));
                    finished.rolled_back += 1;
                }
                (Decision::Committed, false) => {
                    for &i in &invisible {
                        cases.push((i, rec.version_addr(), writer.raw(), next));
                    }
                    finished.rolled_forward += 1;
                }
                // Another recoverer holds it and acts on it.
                (Decision::Aborted, false) => {}
                (Decision::Gone, _) => {
                    return Err(TxError::Invariant(format!(
                        "DTX record {rec:?} is invisible under {writer:?}, whose log is gone"
                    )))
                }
            }
        }

        // Step 2's writes, acknowledged before any lock is freed.
        if !writes.is_empty() || !cases.is_empty() {
            batch.clear();
            for (target, at, bytes) in &writes {
                batch.on(*target).write(*at, bytes);
            }
            for &(i, at, old, new) in &cases {
                batch.on(replica(i)).cas(at, old, new);
            }
            self.fabric.execute(batch).await?;
            if let Some(e) = batch.first_error() {
                return Err(TxError::Verb(e));
            }
        }

        // Step 3: free the held locks, mark the logs finished.
        batch.clear();
        for rec in &won {
            batch.cas(rec.lock_addr(), held.raw(), record::FREE);
        }
        for (i, at, old, new) in marks.drain(..) {
            batch.on(replica(i)).cas(at, old, new);
        }
        if let Some(at) = own_log {
            batch
                .on(Replica::All)
                .write(at, &LogHeader::of(LogState::Done, held).raw().to_le_bytes());
        }
        self.fabric.execute(batch).await?;
        if let Some(e) = batch.first_error() {
            return Err(TxError::Verb(e));
        }
        finished.released += won.len() as u32;
        if own_log.is_some() {
            self.flip_halves();
        }
        Ok(())
    }

    /// Reads `owner`'s log slot on every replica (1 round trip).
    async fn read_slot(&mut self, owner: OwnerId) -> Result<SlotView, TxError> {
        let slot = self.heap.log_slot(owner)?;
        let replicas = self.replicas();
        let mut batch = self.fabric.take_batch();
        batch.clear();
        let h = batch.on(Replica::All).read(slot, LOG_SLOT_BYTES as u32);
        let result = self.fabric.execute(&mut batch).await;
        let view = result.map_err(TxError::from).and_then(|()| {
            let mut halves = Vec::with_capacity(replicas);
            for i in 0..replicas {
                let bytes = batch.read_result_of(h, i).map_err(TxError::Verb)?;
                let half = |p: usize| {
                    let start = p * HALF_READ_BYTES as usize;
                    bytes
                        .get(start..start + HALF_READ_BYTES as usize)
                        .and_then(DtxLog::decode)
                };
                halves.push([half(0), half(1)]);
            }
            Ok(SlotView { slot, halves })
        });
        self.fabric.give_batch(batch);
        view
    }
}

/// The header recovery leaves on a log it finished: DONE if committed,
/// ABORT otherwise (a log that is gone is not marked).
fn mark_of(d: Decision, w: LockWord) -> u64 {
    let state = match d {
        Decision::Committed => LogState::Done,
        Decision::Aborted | Decision::Gone => LogState::Abort,
    };
    LogHeader::of(state, w).raw()
}
