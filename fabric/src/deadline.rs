//! A batch's deadline, carried in its frame and checked by the node: what
//! settles the outcome of a batch its client gave up on.
//!
//! A client that hears nothing within its request deadline cannot tell a
//! batch that ran from one still in the network: TCP retransmits what a
//! partition held for many minutes, and a closed socket's kernel goes on
//! sending what it had. The client's next steps (settling its own log,
//! reusing a block it allocated, taking the lock again) are safe only if
//! the batch can no longer run once they begin. So every BATCH carries the
//! wall-clock instant past which it must not run ([`stamp`]), the node
//! refuses it after that instant by its own clock ([`passed`]), and the
//! client reports the batch lost only once that instant has passed by any
//! clock within [`CLOCK_DRIFT_MAX`] of its own ([`settled_after`]): from
//! then on, the batch has run or never will.
//!
//! An expired client's frames are the fence's (`crate::admission`): they
//! may be stamped long after its lease, as long as its deadline allows.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most two clocks of a cluster may disagree by: the same bound rTX's
/// leases assume (`txn::TxConfig::drift` defaults to it). A node whose
/// clock runs further from a client's refuses its batches early (behind
/// it: as expired, with the reason) or runs them late, past the moment the
/// client gave them up (ahead of it): keep clocks synchronised (chrony, PTP).
pub const CLOCK_DRIFT_MAX: Duration = Duration::from_millis(8);

/// Microseconds since the Unix epoch by this machine's clock (0 before it).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The instant (µs since the Unix epoch) past which a batch sent now with
/// `deadline` must not run.
pub fn stamp(deadline: Duration) -> u64 {
    now_us().saturating_add(u64::try_from(deadline.as_micros()).unwrap_or(u64::MAX))
}

/// Whether a batch stamped `expires_at_us` is past it at `now_us`.
pub fn passed(expires_at_us: u64, now_us: u64) -> bool {
    now_us > expires_at_us
}

/// How long after sending a batch with `deadline` its client may call it
/// lost: by then no node within [`CLOCK_DRIFT_MAX`] of the client's clock
/// runs it.
pub fn settled_after(deadline: Duration) -> Duration {
    deadline.saturating_add(CLOCK_DRIFT_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_runs_up_to_its_stamp_and_not_after() {
        let at = stamp(Duration::from_millis(5));
        assert!(!passed(at, at));
        assert!(passed(at, at + 1));
        assert!(at >= now_us() + 4_000, "a 5 ms deadline stamps about 5 ms ahead");
    }

    #[test]
    fn a_client_waits_out_the_drift_before_calling_a_batch_lost() {
        let d = Duration::from_secs(2);
        assert_eq!(settled_after(d), d + CLOCK_DRIFT_MAX);
        // A node whose clock is ahead by the bound refuses the batch from
        // the client's `deadline - drift`; behind by it, from
        // `deadline + drift`: no later than the client calls it lost.
        let sent_us = 1_000_000u64;
        let expires = sent_us + d.as_micros() as u64;
        let behind_us = CLOCK_DRIFT_MAX.as_micros() as u64;
        let lost_at_us = sent_us + settled_after(d).as_micros() as u64;
        assert!(passed(expires, lost_at_us - behind_us + 1));
        assert_eq!(settled_after(Duration::MAX), Duration::MAX);
    }
}
