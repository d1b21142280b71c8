//! Lease time: what the 48-bit lease field of a lock word (and of a DOING
//! log header) counts, and how an owner picks lease ends that never repeat
//! without running ahead of its clock.
//!
//! **Unit.** A lease end is a count of *lease ticks*, 1/256 ms (3.90625 µs)
//! each, since [`LEASE_EPOCH_UNIX_MS`] (2024-01-01T00:00:00Z). 48 bits of
//! ticks last 2^48 / 256 ms ≈ 34.8 years: until 2058-11-03. `../shared/design.md`
//! §3 says `lease_end_ms` (ms since the Unix epoch); `docs/txn.md` §1 records
//! why this implementation deviates.
//!
//! **Why ticks.** The log checksum rule (rTX §4.4) needs every lock word an
//! owner uses to be unique, and so does every DOING header word (`docs/txn.md`
//! §6, §9 bug 5). With millisecond leases, uniqueness meant taking each
//! lease at least 1 ms after the previous one: an owner committing faster
//! than once per ms (in-memory transports do about a million commits per
//! second and thread) pushed its leases ever further ahead of its clock, an
//! hour and more after a few seconds, and its locks would have outlived its
//! crash by as much. Dropping uniqueness is not an option either: a stale
//! repairer acting on an earlier transaction's log with the same lock word
//! released a later transaction's locks, and committed increments were lost.
//!
//! **Bounded lead.** An owner's lease ends strictly increase
//! (`LeaseSequence`) and may run at most [`LEAD_TICKS_MAX`] past the lease
//! end its clock gives; a client that would go further waits for its clock.
//! That caps one owner at about 256,000 lock words per second, which no
//! network transport reaches; the in-process transport can (more owners,
//! that is more coroutines or threads, get more).

use std::time::Duration;

use fabric::Client;

/// Lease ticks per millisecond: a tick is 1/256 ms = 3.90625 µs. Fine
/// enough that an owner taking a new lock word per commit stays close to its
/// clock at any rate a real transport reaches (one commit is at least a few
/// µs of round trips), coarse enough that 48 bits last decades (see
/// [`LEASE_EPOCH_UNIX_MS`]); a power of two keeps conversions exact.
pub const TICKS_PER_MS: u64 = 256;

/// The lease epoch, 2024-01-01T00:00:00Z, as Unix milliseconds. Leases
/// count ticks from here rather than from 1970 so that 48 bits of
/// 1/256 ms ticks (≈ 34.8 years) last until 2058-11-03 rather than having
/// run out in 2004. Clocks earlier than the epoch give tick 0.
pub const LEASE_EPOCH_UNIX_MS: u64 = 1_704_067_200_000;

/// How far past its ideal end (`now + lease length` by the owner's clock)
/// an owner's lease may run: 256 ticks, 1 ms. Uniqueness forces the next
/// lease end to be at least the previous one + 1 tick, so an owner taking
/// more than one lease per tick runs ahead; past this bound it waits for its
/// clock instead. 1 ms is far below any lease (8 ms of drift by default), so
/// a dead owner's locks outlive their intended lease by at most that, and
/// it leaves 256 lease ends of slack for bursts.
pub const LEAD_TICKS_MAX: u64 = TICKS_PER_MS;

/// The largest lease end the 48-bit field holds (2058-11-03).
pub const LEASE_TICK_MAX: u64 = (1 << 48) - 1;

/// A waiting owner yields to the runtime (re-reading the clock each time)
/// rather than sleeping while its wait is at most this long: 64 ticks,
/// 250 µs. An owner at the lead bound waits under a tick (3.9 µs) per lease,
/// and tokio's timer would round any sleep up to a whole millisecond, which
/// a commit waiting for its DOING lease would spend holding its locks.
const WAIT_SPIN_TICKS_MAX: u64 = 64;

/// The lease tick of a clock reading in microseconds since the Unix epoch:
/// `unix_us * 256 / 1000` minus the epoch in ticks, 0 before the epoch.
pub fn tick_from_unix_us(unix_us: u64) -> u64 {
    let ticks = u128::from(unix_us) * u128::from(TICKS_PER_MS) / 1000;
    let epoch_ticks = u128::from(LEASE_EPOCH_UNIX_MS) * u128::from(TICKS_PER_MS);
    u64::try_from(ticks.saturating_sub(epoch_ticks)).unwrap_or(u64::MAX)
}

/// `fabric`'s clock (with its injected skew) in lease ticks.
pub fn now_tick(fabric: &Client) -> u64 {
    tick_from_unix_us(fabric.now_us())
}

/// A duration in lease ticks, rounded up.
pub fn ticks_from_duration(d: Duration) -> u64 {
    let ticks = (d.as_nanos() * u128::from(TICKS_PER_MS)).div_ceil(1_000_000);
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

/// Lease ticks as a duration (exact to the nanosecond below).
pub fn duration_from_ticks(ticks: u64) -> Duration {
    Duration::from_nanos((u128::from(ticks) * 1_000_000 / u128::from(TICKS_PER_MS)) as u64)
}

/// Lease ticks (or a difference of ticks) in milliseconds, for reports.
pub fn ms_from_ticks(ticks: i64) -> f64 {
    ticks as f64 / TICKS_PER_MS as f64
}

/// The lease ends one owner has taken for one purpose (lock words, or DOING
/// header words): each strictly later than the last, and never more than
/// [`LEAD_TICKS_MAX`] past the latest ideal end (`now + lease length`) it
/// was entitled to.
///
/// The bound is against the *latest* ideal end rather than the current
/// call's: a short lease right after a long one (a 1-object commit after a
/// 63-object one) may take the long one's end + 1, as any rule that keeps
/// ends increasing must, without waiting for the difference.
/// Which lease ends a sequence may take. DOING header words of an owner's
/// own commits are even and those of repairers taking a commit over odd, so
/// that a taker's word never equals one the owner writes in a later commit
/// to the same slot (`docs/txn.md` §1, "Log header").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parity {
    /// Any tick (lock words).
    Any,
    /// Even ticks (an owner's DOING).
    Even,
    /// Odd ticks (a taker's DOING).
    Odd,
}

impl Parity {
    fn round_up(self, tick: u64) -> u64 {
        match self {
            Parity::Any => tick,
            Parity::Even => tick + (tick & 1),
            Parity::Odd => tick + (!tick & 1),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaseSequence {
    /// The last lease end taken (0: none yet).
    last_tick: u64,
    /// The latest ideal lease end seen.
    ideal_max_tick: u64,
}

impl LeaseSequence {
    /// The last lease end taken (0 before the first).
    pub fn last_tick(&self) -> u64 {
        self.last_tick
    }

    /// Takes the next lease end for a lease of `lease_ticks` at `now_tick`:
    /// `max(now + lease, last + 1)`. `Err(tick)` if that runs more than
    /// [`LEAD_TICKS_MAX`] past the latest ideal end: the clock must reach
    /// `tick` first.
    #[cfg(test)]
    pub fn take(&mut self, now_tick: u64, lease_ticks: u64) -> Result<u64, u64> {
        self.take_with(now_tick, lease_ticks, Parity::Any)
    }

    /// [`LeaseSequence::take`], the end rounded up to `parity`.
    pub fn take_with(&mut self, now_tick: u64, lease_ticks: u64, parity: Parity) -> Result<u64, u64> {
        let ideal_tick = now_tick + lease_ticks;
        let ideal_max_tick = self.ideal_max_tick.max(ideal_tick);
        let tick = parity.round_up(ideal_tick.max(self.last_tick + 1));
        if tick > ideal_max_tick + LEAD_TICKS_MAX {
            // Only `now` moves `ideal_tick`; `ideal_max_tick` cannot be why.
            return Err(tick - lease_ticks - LEAD_TICKS_MAX);
        }
        self.last_tick = tick;
        self.ideal_max_tick = ideal_max_tick;
        Ok(tick)
    }

    /// Takes the next lease end by `fabric`'s clock, waiting for the clock
    /// while it would run too far ahead: yielding to the runtime and
    /// re-reading the clock while the wait is at most
    /// [`WAIT_SPIN_TICKS_MAX`] (the usual case: under a tick), sleeping in a
    /// tokio runtime when it is longer (which needs the runtime's timers, as
    /// `TxClient::run`'s backoff does; outside tokio it only yields). Longer
    /// waits take a wall clock stepped back by more than
    /// [`LEAD_TICKS_MAX`]: the owner waits until it is back past its last
    /// lease end. Returns the end and whether it waited.
    pub async fn take_by(&mut self, fabric: &Client, lease_ticks: u64, parity: Parity) -> (u64, bool) {
        let mut waited = false;
        loop {
            let now_tick = now_tick(fabric);
            let ready_tick = match self.take_with(now_tick, lease_ticks, parity) {
                Ok(tick) => return (tick, waited),
                Err(ready_tick) => ready_tick,
            };
            waited = true;
            let wait_ticks = ready_tick.saturating_sub(now_tick);
            if wait_ticks <= WAIT_SPIN_TICKS_MAX || tokio::runtime::Handle::try_current().is_err() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(duration_from_ticks(wait_ticks)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parity_rounds_lease_ends_up_and_keeps_them_increasing() {
        let mut s = LeaseSequence::default();
        assert_eq!(s.take_with(1000, 101, Parity::Even), Ok(1102));
        assert_eq!(
            s.take_with(1000, 101, Parity::Even),
            Ok(1104),
            "last + 1, made even"
        );
        assert_eq!(s.take_with(1000, 101, Parity::Odd), Ok(1105));
        assert_eq!(s.take_with(2000, 100, Parity::Odd), Ok(2101));
        assert_eq!(s.take_with(2000, 100, Parity::Any), Ok(2102));
    }

    #[test]
    fn ticks_count_from_the_epoch() {
        let epoch_us = LEASE_EPOCH_UNIX_MS * 1000;
        assert_eq!(tick_from_unix_us(epoch_us), 0);
        assert_eq!(tick_from_unix_us(epoch_us - 1), 0, "before the epoch saturates");
        assert_eq!(tick_from_unix_us(0), 0);
        assert_eq!(tick_from_unix_us(epoch_us + 1000), TICKS_PER_MS);
        assert_eq!(tick_from_unix_us(epoch_us + 3), 0, "3 us < 1 tick");
        assert_eq!(tick_from_unix_us(epoch_us + 4), 1, "3.90625 us = 1 tick");
        // 2025-01-01 (366 days later) fits, and so does the last ms before the limit.
        let day_ticks = 86_400_000 * TICKS_PER_MS;
        assert_eq!(
            tick_from_unix_us(epoch_us + 366 * 86_400_000_000),
            366 * day_ticks
        );
        let last_ms = LEASE_TICK_MAX / TICKS_PER_MS;
        assert!(tick_from_unix_us((LEASE_EPOCH_UNIX_MS + last_ms) * 1000) <= LEASE_TICK_MAX);
        // The limit is 2058-11-03 (Unix s 2_803_578_827).
        assert_eq!((LEASE_EPOCH_UNIX_MS + last_ms) / 1000, 2_803_578_827);
    }

    #[test]
    fn durations_round_up_to_ticks() {
        assert_eq!(ticks_from_duration(Duration::from_millis(8)), 2048);
        assert_eq!(ticks_from_duration(Duration::from_micros(8_100)), 2074, "2073.6");
        assert_eq!(ticks_from_duration(Duration::from_nanos(1)), 1);
        assert_eq!(ticks_from_duration(Duration::ZERO), 0);
        assert_eq!(duration_from_ticks(256), Duration::from_millis(1));
        assert_eq!(duration_from_ticks(1), Duration::from_nanos(3906));
        assert_eq!(ms_from_ticks(-128), -0.5);
    }

    #[test]
    fn lease_ends_increase_with_a_bounded_lead() {
        let mut s = LeaseSequence::default();
        let lease = 2074;
        // Many leases in one tick: +1 each, up to the lead bound.
        let mut last = 0;
        for i in 0..=LEAD_TICKS_MAX {
            let t = s.take(1000, lease).unwrap();
            assert_eq!(t, 1000 + lease + i);
            assert!(t > last);
            last = t;
        }
        // The next one must wait until the clock has moved one tick.
        assert_eq!(s.take(1000, lease), Err(1001));
        assert_eq!(s.last_tick(), last, "a refusal takes nothing");
        assert_eq!(s.take(1001, lease), Ok(last + 1));
        // Once the clock catches up, leases are the clock's again.
        assert_eq!(s.take(5000, lease), Ok(5000 + lease));
    }

    #[test]
    fn a_short_lease_after_a_long_one_does_not_wait() {
        let mut s = LeaseSequence::default();
        assert_eq!(s.take(1000, 10_000), Ok(11_000));
        // Ideal 1000 + 100: the sequence forces 11_001, 9,901 ticks past it,
        // but within the bound of the latest ideal end (11_000).
        assert_eq!(s.take(1000, 100), Ok(11_001));
        for _ in 0..LEAD_TICKS_MAX - 1 {
            s.take(1000, 100).unwrap();
        }
        assert_eq!(
            s.take(1000, 100),
            Err(11_000 + LEAD_TICKS_MAX + 1 - 100 - LEAD_TICKS_MAX)
        );
        // A clock that went backwards waits for it to come back.
        let mut s = LeaseSequence::default();
        s.take(10_000, 100).unwrap();
        assert_eq!(s.take(5_000, 100), Ok(10_101));
        assert!(s.take(5_000, 100).is_ok());
    }
}
