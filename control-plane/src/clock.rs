//! The cluster clock: the one clock client expiries and quarantines are
//! judged by (issue 46).
//!
//! A quarantine is "one client lease after the expiry". Judged by each
//! member's wall clock, a member whose clock runs ahead would, once it
//! leads, forget an expired client early and hand its owner ids to an heir
//! while its frames may still land. So every committed request carries a
//! reading of the cluster clock (`Request::clock_ms`), taken by the leader
//! that proposed it, and the state machine judges by that alone
//! (`ControlState::clock_ms`).
//!
//! Where a leader's clock is trusted: only its monotonic clock's *rate*
//! during its own term. A leader reads the clock as the value the log had
//! reached when it took office plus the time its monotonic clock says has
//! passed since; its wall clock is never read, except once, to start the
//! clock of a log that has none yet. The time between the last entry of
//! one term and the first of the next is not counted: the clock can only
//! run slow, which lengthens a quarantine, never shortens it.

use std::sync::Mutex;
use std::time::Instant;

/// One leader's readings of the cluster clock.
#[derive(Debug, Default)]
pub(crate) struct LeaderClock {
    office: Mutex<Option<Office>>,
}

/// Where the current office's readings start.
#[derive(Clone, Copy, Debug)]
struct Office {
    term: u64,
    base_ms: u64,
    since: Instant,
}

impl LeaderClock {
    /// The cluster clock now (ms), for this member leading in `term`, whose
    /// applied state's clock is `applied_ms`. `wall_ms` is read only when
    /// the log has no clock yet (`applied_ms` 0).
    ///
    /// A new term starts from `applied_ms`; so does a reading that the
    /// applied clock has passed (a restored snapshot's clock): the clock
    /// never goes back.
    pub(crate) fn now(&self, term: u64, applied_ms: u64, wall_ms: u64, now: Instant) -> u64 {
        let mut office = self
            .office
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let reading = |o: &Office| {
            let elapsed = now.saturating_duration_since(o.since).as_millis();
            o.base_ms
                .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
        };
        let current = office
            .filter(|o| o.term == term)
            .map(|o| reading(&o))
            .filter(|&r| r >= applied_ms);
        if let Some(r) = current {
            return r;
        }
        let base_ms = if applied_ms == 0 { wall_ms } else { applied_ms };
        let o = Office {
            term,
            base_ms,
            since: now,
        };
        *office = Some(o);
        reading(&o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_leader_reads_the_log_s_clock_plus_its_own_elapsed_time_never_its_wall_clock() {
        let t0 = Instant::now();
        let clock = LeaderClock::default();
        // A log with no clock yet starts from the wall clock, once.
        assert_eq!(clock.now(1, 0, 5_000, t0), 5_000);
        assert_eq!(
            clock.now(1, 5_000, 999_999, t0 + Duration::from_millis(250)),
            5_250
        );
        // A new leader whose wall clock runs an hour ahead continues the
        // log's clock from where it was applied, not from its wall time.
        let other = LeaderClock::default();
        let ahead = 5_000 + 3_600_000;
        assert_eq!(other.now(2, 5_250, ahead, t0 + Duration::from_secs(1)), 5_250);
        assert_eq!(
            other.now(2, 5_250, ahead, t0 + Duration::from_millis(1_100)),
            5_350
        );
        // Leading again in a later term starts again from the log.
        assert_eq!(clock.now(3, 7_000, ahead, t0 + Duration::from_secs(9)), 7_000);
        // The applied clock jumped ahead (a restored snapshot): readings
        // go on from it, never back.
        assert_eq!(clock.now(3, 50_000, ahead, t0 + Duration::from_secs(10)), 50_000);
        assert_eq!(
            clock.now(3, 50_000, ahead, t0 + Duration::from_millis(10_020)),
            50_020
        );
    }
}
