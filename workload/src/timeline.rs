//! Throughput timelines: ops completed per bucket, what a fault did to
//! them, and when they recovered.

use serde::Serialize;

/// Buckets of the window that decides recovery: ten, so that one
/// descheduled bucket does not decide it, yet short next to the 8 ms lease
/// drift a repairer waits out.
pub const RECOVERY_WINDOW_BUCKETS: usize = 10;
/// A window is back to normal at this share of the expected rate...
pub const RECOVERED_SHARE: f64 = 0.8;
/// ...when none of its buckets is under this share (no stall inside it).
pub const STALLED_SHARE: f64 = 0.25;
/// Buckets before a fault whose mean is the rate before it (at most; fewer
/// when the run or the previous fault is closer).
pub const BEFORE_BUCKETS_MAX: usize = 1000;

/// The first bucket at or after `fault_bucket` (and after the last run of
/// [`RECOVERY_WINDOW_BUCKETS`] stalled buckets, if a collapse came later)
/// that starts a window of
/// [`RECOVERY_WINDOW_BUCKETS`] back to normal: no bucket under
/// [`STALLED_SHARE`] and a mean of at least [`RECOVERED_SHARE`] of
/// `share` times the mean rate of the buckets before the fault (the second
/// half of them, at most [`BEFORE_BUCKETS_MAX`]: the first half warms
/// caches up). `share` is what is left of the load: 2/3 after one of
/// three clients dies. `None` if no such window fits before the end.
pub fn recovery(timeline: &[u64], fault_bucket: usize, share: f64) -> Option<usize> {
    let normal = mean_before(timeline, fault_bucket)? * share;
    if normal <= 0.0 {
        return None;
    }
    let last_start = timeline.len().checked_sub(RECOVERY_WINDOW_BUCKETS)?;
    // A collapse that comes later (clients blocking one after another on a
    // dead client's locks, until recovery frees them: DTX) is the one that
    // counts: recovery is after the last stalled run of a window's length.
    let stalled = |n: u64| (n as f64) < STALLED_SHARE * normal;
    let mut from = fault_bucket;
    let mut run = 0;
    for (b, &n) in timeline.iter().enumerate().skip(fault_bucket) {
        run = if stalled(n) { run + 1 } else { 0 };
        if run >= RECOVERY_WINDOW_BUCKETS {
            from = b + 1;
        }
    }
    (from..=last_start).find(|&b| {
        let w = &timeline[b..b + RECOVERY_WINDOW_BUCKETS];
        let mean = w.iter().sum::<u64>() as f64 / w.len() as f64;
        mean >= RECOVERED_SHARE * normal && w.iter().all(|&n| n as f64 >= STALLED_SHARE * normal)
    })
}

/// The longest run of buckets with no operation completed that overlaps
/// `window` (its part inside the window): how long a fault stopped the
/// clients ("writes stopped"). 0 when every bucket of it saw one.
pub fn longest_stop(timeline: &[u64], window: std::ops::Range<usize>) -> usize {
    let end = window.end.min(timeline.len());
    let (mut longest, mut run) = (0, 0);
    for &n in timeline.get(window.start..end).unwrap_or_default() {
        run = if n == 0 { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// Mean ops per bucket before `fault_bucket` (see [`recovery`]).
pub fn mean_before(timeline: &[u64], fault_bucket: usize) -> Option<f64> {
    let from = (fault_bucket / 2).max(fault_bucket.saturating_sub(BEFORE_BUCKETS_MAX));
    let before = timeline.get(from..fault_bucket)?;
    if before.is_empty() {
        return None;
    }
    Some(before.iter().sum::<u64>() as f64 / before.len() as f64)
}

/// Mean ops per bucket over `range` of the timeline (0 when empty).
pub fn mean(timeline: &[u64], range: std::ops::Range<usize>) -> f64 {
    let end = range.end.min(timeline.len());
    let start = range.start.min(end);
    let w = &timeline[start..end];
    if w.is_empty() {
        0.0
    } else {
        w.iter().sum::<u64>() as f64 / w.len() as f64
    }
}

/// What one fault did to the total throughput.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FaultEffect {
    /// `kill-client` or `pause-client`.
    pub kind: String,
    /// The client process.
    pub client: u32,
    /// When, from the clients' start.
    pub at_ms: f64,
    /// Mean throughput before the fault (see [`mean_before`]).
    pub ops_per_sec_before: f64,
    /// Mean throughput over the second half of the time from the fault to
    /// the next one (or the end): where it settled.
    pub ops_per_sec_after: f64,
    /// From the fault to the first window back to normal for the clients
    /// left running ([`recovery`]); `None`: not before the next fault or
    /// the end.
    pub recovery_ms: Option<f64>,
}

/// The effect of a fault at `at_bucket` until `until_bucket` (the next
/// fault or the end), with `share` of the load left running.
pub fn effect(
    timeline: &[u64],
    bucket_ms: f64,
    (kind, client): (&str, u32),
    at_bucket: usize,
    until_bucket: usize,
    share: f64,
) -> FaultEffect {
    let per_sec = 1000.0 / bucket_ms;
    let until = until_bucket.min(timeline.len());
    let settled_from = at_bucket + until.saturating_sub(at_bucket) / 2;
    let before = mean_before(timeline, at_bucket).unwrap_or(0.0);
    let after = mean(timeline, settled_from..until);
    // Throughput that decays (clients blocking one after another) may look
    // normal just after the fault: recovered only if it also settled there.
    let settled = after >= RECOVERED_SHARE * share * before;
    FaultEffect {
        kind: kind.to_owned(),
        client,
        at_ms: at_bucket as f64 * bucket_ms,
        ops_per_sec_before: before * per_sec,
        ops_per_sec_after: after * per_sec,
        recovery_ms: recovery(&timeline[..until], at_bucket, share)
            .filter(|_| settled)
            .map(|b| (b - at_bucket) as f64 * bucket_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_stop_is_the_longest_empty_run_inside_the_window() {
        let t = [5, 0, 0, 0, 3, 0, 0, 4, 0, 0, 0, 0, 2];
        assert_eq!(longest_stop(&t, 0..t.len()), 4);
        assert_eq!(longest_stop(&t, 0..7), 3);
        // Only the part inside the window counts.
        assert_eq!(longest_stop(&t, 2..7), 2);
        assert_eq!(longest_stop(&t, 0..100), 4, "a window past the end is cut to it");
        assert_eq!(longest_stop(&t, 20..30), 0);
        assert_eq!(longest_stop(&[1, 1], 0..2), 0);
    }

    #[test]
    fn recovery_is_the_first_normal_window_after_the_fault() {
        // 20 buckets at 100 before the fault at bucket 20, a 5-bucket stall.
        let mut t = vec![100; 20];
        t.extend([100, 0, 0, 0, 0, 0]);
        t.extend(vec![95; 12]);
        assert_eq!(recovery(&t, 20, 1.0), Some(26));
        // A window with one stalled bucket is not normal, whatever its mean.
        t[30] = 10;
        assert_eq!(recovery(&t, 20, 1.0), None, "no clean window after 30 fits in 38");
        t.extend(vec![100; 10]);
        assert_eq!(recovery(&t, 20, 1.0), Some(31));
        // No collapse: recovered at the fault.
        assert_eq!(recovery(&[100; 40], 20, 1.0), Some(20));
        // A collapse that comes later (DTX: survivors block one by one on
        // a dead client's locks until recovery rolls its log): recovery is
        // after it, not at the fault.
        let mut t = vec![100; 20];
        t.extend(vec![100; 12]);
        t.extend(vec![0; 30]);
        t.extend(vec![100; 15]);
        assert_eq!(recovery(&t, 20, 1.0), Some(62));
        // Never recovered, nothing before, or no throughput before.
        let dead: Vec<u64> = [vec![100; 20], vec![0; 30]].concat();
        assert_eq!(recovery(&dead, 20, 1.0), None);
        assert_eq!(recovery(&[100; 10], 0, 1.0), None);
        assert_eq!(recovery(&[0; 40], 20, 1.0), None);
    }

    #[test]
    fn the_share_left_running_sets_normal() {
        // One of three clients dies: 2/3 of the rate is normal after it.
        let t: Vec<u64> = [vec![90; 20], vec![60; 20]].concat();
        assert_eq!(recovery(&t, 20, 1.0), None);
        assert_eq!(recovery(&t, 20, 2.0 / 3.0), Some(20));
    }

    #[test]
    fn an_effect_reports_rates_per_second() {
        let t: Vec<u64> = [vec![100; 20], vec![0; 5], vec![50; 35]].concat();
        let e = effect(&t, 1.0, ("kill-client", 1), 20, 60, 0.5);
        assert_eq!(e.at_ms, 20.0);
        assert_eq!(e.ops_per_sec_before, 100_000.0);
        assert_eq!(e.ops_per_sec_after, 50_000.0);
        assert_eq!(e.recovery_ms, Some(5.0));
        // Normal at first, then every client blocks: not recovered.
        let t: Vec<u64> = [vec![100; 20], vec![100; 20], vec![0; 20]].concat();
        let e = effect(&t, 1.0, ("kill-client", 1), 20, 60, 1.0);
        assert_eq!(e.recovery_ms, None);
    }
}
