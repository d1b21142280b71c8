//! What a coordinator remembers of steps that failed: each region and each
//! expired client is its own piece of work with its own backoff, so one
//! that keeps failing is retried on its own clock and holds back no other
//! (design.md §1b: recovery is per region).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use control_plane::state::ClientId;
use fabric::RegionId;

/// First pause before a stuck region or client is tried again: a step
/// that fails at once (a refusal, a node that does not answer) is not
/// repeated every tick, where it would only load the control plane.
/// Doubled with every failure in a row, up to [`STUCK_BACKOFF_MAX`].
pub const STUCK_BACKOFF_MIN: Duration = Duration::from_millis(100);

/// Longest pause before a stuck region or client is tried again: a cause
/// that clears (a node back, a restore claim lapsed, an operator's drop)
/// is acted on within it.
pub const STUCK_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// What a step is about: a region, or an expired client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Work {
    /// A region's eviction, restore, catch-up or re-replication.
    Region(RegionId),
    /// An expired client's roll or forgetting.
    Client(ClientId),
}

impl std::fmt::Display for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Work::Region(id) => write!(f, "region {id}"),
            Work::Client(id) => write!(f, "client {id}"),
        }
    }
}

/// A region or client whose step failed, as many times in a row as
/// `attempts`: left alone until `retry_at`, while the others go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    /// Why the last attempt failed.
    pub reason: String,
    /// When the first of these failures was seen.
    pub since: Instant,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// Not tried again before this.
    pub retry_at: Instant,
}

/// The pause after `attempts` failures in a row: [`STUCK_BACKOFF_MIN`],
/// doubled with each failure after the first, at most
/// [`STUCK_BACKOFF_MAX`].
pub fn stuck_backoff(attempts: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempts.saturating_sub(1));
    STUCK_BACKOFF_MIN.saturating_mul(factor).min(STUCK_BACKOFF_MAX)
}

/// The regions and clients whose last step failed.
#[derive(Debug, Default)]
pub(crate) struct Backoffs {
    pub(crate) stuck: BTreeMap<Work, Stuck>,
}

impl Backoffs {
    /// `work` may be tried at `now`: it is not stuck, or its backoff has
    /// passed.
    pub(crate) fn due(&self, work: Work, now: Instant) -> bool {
        self.stuck.get(&work).is_none_or(|s| now >= s.retry_at)
    }

    /// Records a failed attempt of `work` at `now`, and why.
    pub(crate) fn failed(&mut self, work: Work, reason: String, now: Instant) -> &Stuck {
        let s = self.stuck.entry(work).or_insert_with(|| Stuck {
            reason: String::new(),
            since: now,
            attempts: 0,
            retry_at: now,
        });
        s.attempts = s.attempts.saturating_add(1);
        s.reason = reason;
        s.retry_at = now + stuck_backoff(s.attempts);
        s
    }

    /// `work`'s step went through (or had nothing to do): no longer stuck.
    pub(crate) fn succeeded(&mut self, work: Work) -> Option<Stuck> {
        self.stuck.remove(&work)
    }

    pub(crate) fn get(&self, work: Work) -> Option<&Stuck> {
        self.stuck.get(&work)
    }

    /// Stuck regions and stuck clients.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let regions = self.stuck.keys().filter(|w| matches!(w, Work::Region(_))).count();
        (regions, self.stuck.len() - regions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_step_backs_off_doubling_up_to_a_bound_and_is_forgotten_once_it_goes_through() {
        assert_eq!(stuck_backoff(1), STUCK_BACKOFF_MIN);
        assert_eq!(stuck_backoff(2), STUCK_BACKOFF_MIN * 2);
        assert_eq!(stuck_backoff(4), STUCK_BACKOFF_MIN * 8);
        assert_eq!(stuck_backoff(60), STUCK_BACKOFF_MAX);
        assert_eq!(stuck_backoff(u32::MAX), STUCK_BACKOFF_MAX);

        let mut b = Backoffs::default();
        let t0 = Instant::now();
        let (r, c) = (Work::Region(3), Work::Client(7));
        assert!(b.due(r, t0));
        let s = b.failed(r, "refused".into(), t0).clone();
        assert_eq!((s.attempts, s.since, s.retry_at), (1, t0, t0 + STUCK_BACKOFF_MIN));
        assert!(
            !b.due(r, t0) && b.due(c, t0),
            "one stuck region holds back no other work"
        );
        let t1 = s.retry_at;
        assert!(b.due(r, t1));
        let s = b.failed(r, "refused again".into(), t1).clone();
        assert_eq!(
            (s.attempts, s.since, s.retry_at, s.reason.as_str()),
            (2, t0, t1 + STUCK_BACKOFF_MIN * 2, "refused again")
        );
        b.failed(c, "waits".into(), t1);
        assert_eq!(b.counts(), (1, 1));
        assert_eq!(b.succeeded(r).map(|s| s.attempts), Some(2));
        assert!(b.due(r, t1));
        assert_eq!(b.counts(), (0, 1));
    }
}
