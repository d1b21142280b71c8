//! The end-of-run invariant: every object's counter counts the committed
//! transactions that wrote it, so the counters add up to commits x write set.
//! A lost update (a commit that did not land, or landed twice), or a fenced
//! commit that was counted, breaks it. The check also notices locks that
//! were left held: reading an object locked by a client that has finished
//! means meeting an expired lock (or waiting for one to expire).

use crate::error::Context;
use serde::Serialize;
use txn::{RawObj, TxClient};

use crate::worker::counter;

/// Objects read per (read-only) transaction of the check.
const OBJECTS_PER_READ: usize = 32;

/// What the check found.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Check {
    /// Commits (warm-up included) x write set.
    pub expected: u64,
    /// The sum of the counters.
    pub found: u64,
    /// Expired locks the checker met: locks left behind by finished clients.
    pub locks_left: u64,
}

impl Check {
    /// Whether the counters add up and no lock was left held.
    pub fn ok(&self) -> bool {
        self.expected == self.found && self.locks_left == 0
    }

    /// One line for people.
    pub fn describe(&self, objects: usize) -> String {
        let sum = if self.expected == self.found {
            format!(
                "the {objects} counters add up to commits x write set ({})",
                self.found
            )
        } else {
            format!(
                "FAILED: the {objects} counters add up to {}, commits x write set is {} (lost or phantom updates)",
                self.found, self.expected
            )
        };
        if self.locks_left == 0 {
            format!("{sum}; no lock left held")
        } else {
            format!(
                "{sum}; FAILED: {} lock(s) left held by finished clients",
                self.locks_left
            )
        }
    }
}

/// Reads every object as `checker` (no client may be running) and compares
/// the counters with `expected`.
pub async fn counters(checker: &mut TxClient, objects: &[RawObj], expected: u64) -> crate::Result<Check> {
    let expired_before = checker.stats().expired_seen;
    let mut found = 0u64;
    for chunk in objects.chunks(OBJECTS_PER_READ) {
        let sum = checker
            .run(async |tx| {
                let mut sum = 0u64;
                for &obj in chunk {
                    sum = sum.wrapping_add(counter(tx.read_raw(obj).await?));
                }
                Ok(sum)
            })
            .await
            .context("cannot read the objects back")?;
        found = found.wrapping_add(sum);
    }
    Ok(Check {
        expected,
        found,
        locks_left: checker.stats().expired_seen - expired_before,
    })
}
