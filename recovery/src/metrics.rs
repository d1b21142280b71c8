//! The recovery coordinator's metrics: the steps it took (recovery's
//! phases), its passes, and what it cannot get on with (regions and
//! clients stuck, regions lost).
//!
//! Recorded through the `metrics` facade (a no-op until the process
//! installs a recorder: `kintsugi control --metrics-listen`). A process
//! runs one coordinator at a time, so the series carry no member label:
//! the scrape's `instance` tells members apart.

use std::time::Instant;

use fabric::metrics::MetricDef;

use crate::Step;

/// Steps taken, by `step` ([`Step::name`]: evicted, restored, caught-up,
/// rolled-client, forgot-client, added-backup, copied, joined).
pub const STEPS: &str = "kintsugi_recovery_steps_total";
/// Passes by `outcome`: step (took one), idle (nothing to do), failed,
/// timeout (abandoned past its bound).
pub const PASSES: &str = "kintsugi_recovery_passes_total";
/// How long a pass took, whatever its outcome.
pub const PASS_SECONDS: &str = "kintsugi_recovery_pass_seconds";
/// Regions whose last recovery step failed, left alone until their own
/// backoff has passed while the others go on (the coordinator's log says
/// why). 0 on a member that does not lead.
pub const REGIONS_STUCK: &str = "kintsugi_recovery_regions_stuck";
/// Expired clients whose roll or forgetting failed, or waits on a lost or
/// stuck index region.
pub const CLIENTS_STUCK: &str = "kintsugi_recovery_clients_stuck";
/// Regions declared lost (their only copy died): out of the clients' map
/// until an operator drops them (`kintsugi ctl region lost`).
pub const REGIONS_LOST: &str = "kintsugi_recovery_regions_lost";

/// Every metric of this crate.
pub const ALL: &[MetricDef] = &[
    MetricDef::counter(STEPS, "Recovery steps taken, by step."),
    MetricDef::counter(
        PASSES,
        "Recovery passes by outcome (step, idle, failed, timeout).",
    ),
    MetricDef::seconds(PASS_SECONDS, "Recovery pass durations."),
    MetricDef::gauge(
        REGIONS_STUCK,
        "Regions whose last recovery step failed, retried after a backoff.",
    ),
    MetricDef::gauge(
        CLIENTS_STUCK,
        "Expired clients whose roll or forgetting failed or waits on a lost or stuck region.",
    ),
    MetricDef::gauge(
        REGIONS_LOST,
        "Regions lost with their only copy, until an operator drops them.",
    ),
];

/// Registers this crate's descriptions with the installed recorder.
pub fn describe() {
    ALL.iter().for_each(MetricDef::describe);
}

/// How a pass ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PassOutcome {
    Step,
    Idle,
    Failed,
    Timeout,
}

/// Counts a pass that started at `started` and times it.
pub(crate) fn pass(started: Instant, outcome: PassOutcome) {
    ::metrics::histogram!(PASS_SECONDS).record(started.elapsed());
    let outcome = match outcome {
        PassOutcome::Step => "step",
        PassOutcome::Idle => "idle",
        PassOutcome::Failed => "failed",
        PassOutcome::Timeout => "timeout",
    };
    ::metrics::counter!(PASSES, "outcome" => outcome).increment(1);
}

/// Counts a step taken.
pub(crate) fn step(step: Step) {
    ::metrics::counter!(STEPS, "step" => step.name()).increment(1);
}

/// Sets what recovery cannot get on with, after a pass (all 0 when the
/// coordinator stops: another member's reports from then on).
pub(crate) fn backlog(regions_stuck: usize, clients_stuck: usize, regions_lost: usize) {
    ::metrics::gauge!(REGIONS_STUCK).set(regions_stuck as f64);
    ::metrics::gauge!(CLIENTS_STUCK).set(clients_stuck as f64);
    ::metrics::gauge!(REGIONS_LOST).set(regions_lost as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn the_table_is_valid() {
        assert_eq!(fabric::metrics::check_table(ALL), Ok(()));
    }

    #[test]
    fn steps_and_passes_are_counted_by_name_and_timed() {
        let recorder = DebuggingRecorder::new();
        let snapshots = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            step(Step::CaughtUp);
            pass(Instant::now(), PassOutcome::Step);
            pass(Instant::now(), PassOutcome::Timeout);
        });
        let mut seen = Vec::new();
        for (key, _, _, value) in snapshots.snapshot().into_vec() {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(n) => n,
                DebugValue::Histogram(samples) => samples.len() as u64,
                DebugValue::Gauge(_) => panic!("no gauges here"),
            };
            seen.push((key.key().name().to_owned(), labels.join(","), value));
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                (PASS_SECONDS.to_owned(), String::new(), 2),
                (PASSES.to_owned(), "outcome=step".to_owned(), 1),
                (PASSES.to_owned(), "outcome=timeout".to_owned(), 1),
                (STEPS.to_owned(), "step=caught-up".to_owned(), 1),
            ]
        );
    }

    #[test]
    fn stuck_and_lost_are_gauges_set_after_each_pass() {
        let recorder = DebuggingRecorder::new();
        let snapshots = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            backlog(3, 1, 2);
            backlog(2, 0, 1);
        });
        let mut seen: Vec<(String, f64)> = snapshots
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| match value {
                DebugValue::Gauge(v) => (key.key().name().to_owned(), v.into_inner()),
                other => panic!("{key:?} is not a gauge: {other:?}"),
            })
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                (CLIENTS_STUCK.to_owned(), 0.0),
                (REGIONS_LOST.to_owned(), 1.0),
                (REGIONS_STUCK.to_owned(), 2.0),
            ]
        );
    }
}
