//! Bringing a log's header on every backup to the primary's decision.
//!
//! Header CASes go to every replica and the primary's old value decides,
//! but replicas may end in different states: an owner's INIT -> DOING and a
//! repairer's INIT -> ABORT race and each wins somewhere, or a party stops
//! (crash, lost connection) after its CAS reached the primary and before it
//! reached a backup. Decisions never read a backup's header; a promotion
//! does (a promoted backup's DOING logs are rolled forward, its INIT ones
//! aborted), so a backup must not say ABORT for a transaction whose
//! pointers it holds installed, nor DOING for one the primary aborted.
//!
//! So whoever's header CAS finds the replicas in different states converges
//! them before its next step: it reads header and checksum on every
//! replica and CASes each backup that still holds the same log (same
//! checksum) from its header to the primary's, only ever forward (INIT,
//! then ABORT or DOING, then DONE: [`LogHeader::stage`]). Pointers of a log
//! are installed on a backup only after such a step, so a backup that holds
//! any of them says DOING or DONE. Every header word of a transaction is
//! unique to it (`word.rs`), so a CAS from a header read earlier never
//! lands on a later log in the slot.

use fabric::{Batch, GlobalAddr, Replica, VerbHandle};

use crate::client::TxClient;
use crate::error::TxError;
use crate::word::{LockWord, LogHeader};
use fabric::le_word;

/// Rounds of reading and CASing backups in one convergence: each round
/// moves a backup at least one stage forward unless someone else moved it,
/// and there are three stages.
const CONVERGE_ROUNDS_MAX: u32 = 4;

/// True when the header CAS `h` (aimed at every replica) found the replicas
/// in different states: they need converging.
pub(crate) fn replicas_disagreed(batch: &Batch, h: VerbHandle) -> Result<bool, TxError> {
    let first = batch.old_value(h).map_err(TxError::Verb)?;
    for i in 1..batch.completions(h).len() {
        if batch.old_value_of(h, i).map_err(TxError::Verb)? != first {
            return Ok(true);
        }
    }
    Ok(false)
}

impl TxClient {
    /// Converges the header at `header_addr` of the log that locks with
    /// `checksum` on every backup to the primary's (module docs). Stops
    /// without error when the primary's slot holds another log by now (the
    /// owner's WRITE of it reaches every replica).
    pub(crate) async fn converge_header(
        &mut self,
        header_addr: GlobalAddr,
        checksum: LockWord,
    ) -> Result<(), TxError> {
        let mut batch = Batch::new();
        for _ in 0..CONVERGE_ROUNDS_MAX {
            batch.clear();
            let h = batch.on(Replica::All).read(header_addr, 16);
            self.fabric.execute(&mut batch).await?;
            let words = |i: usize| -> Result<(u64, u64), TxError> {
                let b = batch.read_result_of(h, i).map_err(TxError::Verb)?;
                Ok((le_word(b, 0), le_word(b, 8)))
            };
            let (primary, primary_sum) = words(0)?;
            let Some(target) = LogHeader::from_raw(primary) else {
                return Ok(());
            };
            if primary_sum != checksum.raw() {
                return Ok(());
            }
            let mut moves = Vec::new();
            for i in 1..batch.completions(h).len() {
                let (raw, sum) = words(i)?;
                let behind = LogHeader::from_raw(raw).is_some_and(|b| {
                    b.stage() < target.stage() || (b.stage() == target.stage() && b != target)
                });
                if sum == checksum.raw() && behind {
                    moves.push((i, raw));
                }
            }
            if moves.is_empty() {
                return Ok(());
            }
            batch.clear();
            for &(i, raw) in &moves {
                batch
                    .on(Replica::Backup(i as u8 - 1))
                    .cas(header_addr, raw, target.raw());
            }
            self.fabric.execute(&mut batch).await?;
            if let Some(e) = batch.first_error() {
                return Err(TxError::Verb(e));
            }
        }
        Ok(())
    }

    /// Makes the whole log slot at `slot` on every backup the primary's,
    /// once the log there is finished (DONE, or never written): a log WRITE
    /// that reached some replicas only (its owner stopped inside RT1) leaves
    /// a backup with another log, which header convergence leaves alone.
    /// Only the slot's owner, or recovery for a dead owner, may call this:
    /// nobody else writes a log slot, and the log being finished, no
    /// repairer acts on it (its header words are unique, so a stale CAS
    /// fails on the copy as on the original).
    pub(crate) async fn sync_slot(&mut self, slot: GlobalAddr) -> Result<(), TxError> {
        let mut batch = Batch::new();
        let h = batch
            .on(Replica::All)
            .read(slot, crate::log::LOG_SLOT_BYTES as u32);
        self.fabric.execute(&mut batch).await?;
        let primary = batch.read_result(h).map_err(TxError::Verb)?.to_vec();
        let finished = LogHeader::from_raw(le_word(&primary, 0)).is_some_and(LogHeader::is_finished);
        if !finished {
            return Ok(());
        }
        let stale: Vec<usize> = (1..batch.completions(h).len())
            .filter(|&i| batch.read_result_of(h, i).is_ok_and(|b| b != primary.as_slice()))
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        batch.clear();
        let writes: Vec<VerbHandle> = stale
            .iter()
            .map(|&i| batch.on(Replica::Backup(i as u8 - 1)).write(slot, &primary))
            .collect();
        self.fabric.execute(&mut batch).await?;
        for h in writes {
            batch.done(h).map_err(TxError::Verb)?;
        }
        Ok(())
    }

    /// [`TxClient::converge_header`] if the header CAS `h` of `batch` found
    /// the replicas in different states.
    pub(crate) async fn converge_if_split(
        &mut self,
        batch: &Batch,
        h: VerbHandle,
        header_addr: GlobalAddr,
        checksum: LockWord,
    ) -> Result<(), TxError> {
        if replicas_disagreed(batch, h)? {
            self.converge_header(header_addr, checksum).await?;
        }
        Ok(())
    }
}
