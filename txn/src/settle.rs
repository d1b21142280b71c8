//! An owner's own log slot between its transactions: the paper reuses a log
//! slot, and the data blocks its transaction replaced, only once that
//! transaction is DONE.
//!
//! An owner that finishes its own commit marks the log DONE itself and frees
//! the replaced blocks at once. It cannot when a repairer took its commit
//! over (its DOING -> DONE CAS fails: the header is the taker's), nor when
//! the commit stopped half way on a fabric error. Then the slot stays
//! *open*: the replaced blocks are parked, and before this owner writes its
//! slot again it settles it: reads it back and waits for the taker's DONE,
//! or finishes the log itself (abort an INIT log, roll a DOING one forward,
//! its own DOING at once, a taker's once that taker's lease expired).
//!
//! Why the blocks wait: a taker stalled between its take-over and its
//! pointer CASes still holds CASes from the log's old pointers. Pointer
//! versions are 16 bits, so an old block freed at once could come back under
//! the same object at the same version after 65,536 installs, and the stale
//! CAS would then succeed and roll the object back (issue 19, item 3;
//! `tests/replicated_repair.rs`).

use crate::client::TxClient;
use crate::error::{AbortReason, TxError};
use crate::log::HEADER_OFFSET;
use crate::repair::RepairOutcome;
use crate::word::LogHeader;

/// Rounds of reading the own slot and acting on it in one settle: an INIT
/// log takes two (abort, finish), a DOING one one; more means someone else
/// keeps moving it, and the commit aborts to come back later.
const SETTLE_ROUNDS_MAX: u32 = 4;

/// This owner's log slot while its last transaction is not known to be DONE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpenLog {
    /// The DOING header this owner wrote, once it reached its commit point.
    pub doing: Option<LogHeader>,
    /// Data blocks (offset, bytes) the transaction replaced, freed once the
    /// log is DONE.
    pub parked: Vec<(u64, u32)>,
    /// The commit stopped on a fabric error (a lost connection, a stale
    /// epoch) with this log unfinished: the owner settles it before its
    /// next transaction of any kind, not only before its next log.
    pub interrupted: bool,
}

impl TxClient {
    /// True while this owner's last log is not known to be DONE.
    pub fn log_open(&self) -> bool {
        self.open_log.is_some()
    }

    /// Offsets of the data blocks this client would reuse next (for
    /// checkers: none may be named by a log that is not DONE).
    pub fn free_blocks(&self) -> Vec<u64> {
        self.alloc.free_offsets().collect()
    }

    /// Makes sure this owner's last log is DONE before its slot is written
    /// again, finishing it if nobody else is, then frees the blocks parked
    /// for it. Aborts with [`AbortReason::LogInUse`] while a repairer with a
    /// live lease is finishing it.
    pub(crate) async fn settle_log(&mut self) -> Result<(), TxError> {
        let Some(doing) = self.open_log.as_ref().map(|o| o.doing) else {
            return Ok(());
        };
        let slot = self.heap.log_slot(self.owner)?;
        for _ in 0..SETTLE_ROUNDS_MAX {
            let log = match self.read_log(slot).await? {
                Some(log) if !log.header.is_finished() => log,
                // DONE; or the log WRITE never landed, so nothing of it
                // was visible.
                _ => {
                    self.sync_slot(slot).await?;
                    self.close_log();
                    return Ok(());
                }
            };
            let own = doing == Some(log.header);
            match self.finish_log(&log, slot.add(HEADER_OFFSET), own).await? {
                Some(RepairOutcome::Busy) => return Err(TxError::Abort(AbortReason::LogInUse)),
                // Read it again: DONE closes it.
                _ => continue,
            }
        }
        Err(TxError::Abort(AbortReason::LogInUse))
    }

    /// True while this owner's last commit stopped on a fabric error with
    /// its log unfinished: the next commit of any kind settles it first.
    pub(crate) fn log_interrupted(&self) -> bool {
        self.open_log.as_ref().is_some_and(|o| o.interrupted)
    }

    /// The log is DONE: it is closed, and its parked blocks can come back.
    pub(crate) fn close_log(&mut self) {
        for (offset, len) in self.open_log.take().map(|o| o.parked).unwrap_or_default() {
            self.alloc.free(offset, len);
        }
    }
}
