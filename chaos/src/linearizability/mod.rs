//! Per-key linearizability of a chaos history: every client op on an index,
//! recorded as JSON lines in the style of Jepsen ([`Event`]), judged by two
//! independent checkers whose verdicts must agree.
//!
//! # The model
//!
//! Linearizability is local (Herlihy & Wing): a history is linearizable iff
//! each key's sub-history is, so each key is checked on its own. A key holds
//! `Option<u64>`, absent unless the caller gives it an initial value:
//! - `get` returns the state (null when absent);
//! - `put(v)` sets it to `v`;
//! - `insert(v)` sets it to `v` and returns true if absent, else returns
//!   false and changes nothing;
//! - `update(v)` sets it to `v` and returns true if present, else false;
//! - `delete` empties it and returns true if present, else false.
//!
//! Real time is the order of events by `time_ns`, and by position in the
//! history for equal times: op A precedes op B when A's completion comes
//! before B's invocation in that order.
//!
//! # Unknown outcomes
//!
//! As in Knossos and Porcupine: a `fail` op did not happen and is dropped.
//! An `info` op, or one whose invocation is never completed, may have taken
//! effect at any time after its invocation, or never: its return time is
//! +infinity and any result is accepted for it. Such a `get` is dropped: it
//! changes nothing and constrains nothing. A process never invokes again
//! after an `info` (the recorder moves on to a fresh process id), and a
//! history breaking that or any other recording rule is a [`HistoryError`].
//!
//! # The checkers
//!
//! Both were taken from the registry rather than written here; the search is
//! theirs, the model ([`model`] above, one table) ours.
//!
//! - Primary: [`check_key_wgl`], on `todc-utils` 0.1.1's `WGLChecker`: the
//!   Wing–Gong search with Lowe's memoisation (a cache of (linearized set,
//!   state) pairs never explored twice), after Horn & Kroening's
//!   description, the algorithm of Knossos' `wgl` and of Porcupine. MIT, no
//!   dependencies of its own, small enough to read whole (about 250 lines of
//!   search and history). Its limits, and how they are bridged, are in
//!   [`wgl`]'s notes: no `self` in its specification (the initial value and
//!   budget travel in thread-locals), and no pending ops (an info op gets a
//!   response after every other event, and a model that accepts any
//!   result). Its history is a `Vec` with O(n) removal, fine for the
//!   hundreds to thousands of ops a key gets in a chaos run.
//! - Cross-check: [`check_key_stateright`], on `stateright` 0.31's
//!   `LinearizabilityTester`: a plain depth-first search over per-process
//!   op queues, with native in-flight ops (no +infinity adaptation) and no
//!   memoisation, so it is exponential on hard non-linearizable keys and
//!   quadratic in memory; see [`tester`]'s notes. It is the better-kept
//!   crate of the two (many contributors, regular releases), but it is a
//!   model checker first: it brings a dozen crates (`dashmap`,
//!   `parking_lot`, `tiny_http` for its explorer UI, `rand` 0.9, …) and has
//!   no features to leave them out. Being the weaker search it cannot be
//!   primary; being an independent one it is the cross-check.
//!
//! A key's verdicts are compared when both are definite: a disagreement
//! means a bug in one checker or in our adaptation of it, is counted and
//! listed in [`Report::disagreements`], and makes the overall verdict
//! [`Verdict::Unknown`] unless another key is definitely not linearizable.
//!
//! # Limits
//!
//! - [`MAX_SEARCH_STEPS_PER_KEY`]: model steps each checker may spend on a
//!   key. Past it the checker's verdict is [`Verdict::Unknown`], never
//!   linearizable.
//! - [`CROSS_CHECK_MAX_STEPS_PER_KEY`]: the same for the cross-check, lower
//!   because its steps cost more.
//! - [`CROSS_CHECK_MAX_OPS`]: keys with more ops are not cross-checked (the
//!   skip is counted and listed); nor are the keys the primary rejects past
//!   the first [`MAX_REPORTED_KEYS`].
//! - [`MAX_REPORTED_KEYS`] and [`MAX_RENDERED_OPS`]: how much of each list
//!   the report spells out; the counts are always complete.
//!
//! [`model`]: #the-model

mod event;
mod history;
mod model;
mod report;
pub mod tester;
pub mod wgl;

use std::time::Instant;

use serde::Serialize;

pub use event::{read_jsonl, write_event, write_jsonl, Event, EventType, Function, OpResult};
pub use history::{operations, HistoryError, Operation, Operations, Outcome, Stamp};
pub use report::{KeyDetail, Report};
pub use tester::{check_key_stateright, CrossCheck};
pub use wgl::check_key_wgl;

/// Model steps (one op applied to one state) each checker may spend on one
/// key. A linearizable key of n ops usually needs a few times n; the cap
/// exists so a pathological key cannot run forever or, as the primary caches
/// one bitset of the key's ops per step, exhaust memory (a million steps on
/// a thousand-op key is about a gigabyte of cache: this is a quarter of it).
pub const MAX_SEARCH_STEPS_PER_KEY: u64 = 250_000;

/// Keys with more ops than this are not cross-checked: stateright's search
/// holds a copy of the remaining history per level of recursion, so its
/// memory grows with the square of a key's ops, and each of its steps costs
/// time in proportion to the ops and processes left.
pub const CROSS_CHECK_MAX_OPS: usize = 500;

/// Model steps the cross-check may spend on a key. Lower than the
/// primary's: a stateright step clones the remaining history (measured at
/// about 40 µs on a 200-op key), and without memoisation a key with no
/// linearization and a few unknown outcomes uses any budget up: this one
/// bounds that at a few seconds a key.
pub const CROSS_CHECK_MAX_STEPS_PER_KEY: u64 = 50_000;

/// Keys listed in each of the report's lists (not linearizable,
/// disagreements, unknown, skipped); a broken run can fail every key and the
/// report must stay readable. The counts cover all keys. It also bounds the
/// keys the primary rejects that are cross-checked: those are the keys the
/// cross-check is slowest on, and past the listed ones a confirmation would
/// cost seconds each and show nowhere.
pub const MAX_REPORTED_KEYS: usize = 20;

/// Ops rendered per listed key; a hot key can have thousands.
pub const MAX_RENDERED_OPS: usize = 200;

/// What a checker concluded on a key, or on the whole history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A linearization was found.
    Linearizable,
    /// The search was exhausted: no linearization exists.
    NotLinearizable,
    /// The search was cut short by a limit: nothing is proven either way.
    Unknown,
}

/// The checkers' limits; [`Default`] takes the named constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// See [`MAX_SEARCH_STEPS_PER_KEY`].
    pub max_steps_per_key: u64,
    /// See [`CROSS_CHECK_MAX_STEPS_PER_KEY`].
    pub cross_check_max_steps_per_key: u64,
    /// See [`CROSS_CHECK_MAX_OPS`].
    pub cross_check_max_ops: usize,
    /// See [`MAX_REPORTED_KEYS`].
    pub max_reported_keys: usize,
    /// See [`MAX_RENDERED_OPS`].
    pub max_rendered_ops: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps_per_key: MAX_SEARCH_STEPS_PER_KEY,
            cross_check_max_steps_per_key: CROSS_CHECK_MAX_STEPS_PER_KEY,
            cross_check_max_ops: CROSS_CHECK_MAX_OPS,
            max_reported_keys: MAX_REPORTED_KEYS,
            max_rendered_ops: MAX_RENDERED_OPS,
        }
    }
}

/// Both checkers' verdicts on one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyVerdict {
    /// The primary's (todc-utils).
    pub primary: Verdict,
    /// The cross-check's (stateright).
    pub cross_check: CrossCheck,
    /// Nanoseconds the primary took.
    pub primary_ns: u64,
    /// Nanoseconds the cross-check took.
    pub cross_check_ns: u64,
}

impl KeyVerdict {
    /// Whether both checkers reached definite verdicts that differ.
    pub fn disagree(&self) -> bool {
        match &self.cross_check {
            CrossCheck::Ran { verdict } => {
                *verdict != Verdict::Unknown && self.primary != Verdict::Unknown && *verdict != self.primary
            }
            CrossCheck::Skipped { .. } => false,
        }
    }

    /// The key's verdict: the checkers' common one; the definite one if the
    /// other did not finish; unknown if neither did or they disagree.
    pub fn verdict(&self) -> Verdict {
        let cross = match &self.cross_check {
            CrossCheck::Ran { verdict } => *verdict,
            CrossCheck::Skipped { .. } => Verdict::Unknown,
        };
        match (self.primary, cross) {
            _ if self.disagree() => Verdict::Unknown,
            (Verdict::Unknown, other) | (other, _) => other,
        }
    }
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Checks one key's ops (all on the same key, from [`operations`]) with both
/// checkers, starting from `initial`.
pub fn check_key(ops: &[Operation], initial: Option<u64>, limits: &Limits) -> KeyVerdict {
    check_key_inner(ops, initial, limits, true)
}

/// Runs the primary, then the cross-check unless `cross_check_rejected` is
/// false and the primary rejected the key.
fn check_key_inner(
    ops: &[Operation],
    initial: Option<u64>,
    limits: &Limits,
    cross_check_rejected: bool,
) -> KeyVerdict {
    let started = Instant::now();
    let primary = check_key_wgl(ops, initial, limits.max_steps_per_key);
    let primary_ns = elapsed_ns(started);
    if primary == Verdict::NotLinearizable && !cross_check_rejected {
        let reason = format!(
            "more than {} keys rejected: only the listed ones are cross-checked",
            limits.max_reported_keys
        );
        return KeyVerdict {
            primary,
            cross_check: CrossCheck::Skipped { reason },
            primary_ns,
            cross_check_ns: 0,
        };
    }
    let started = Instant::now();
    let cross_check = check_key_stateright(
        ops,
        initial,
        limits.cross_check_max_steps_per_key,
        limits.cross_check_max_ops,
    );
    let cross_check_ns = elapsed_ns(started);
    KeyVerdict {
        primary,
        cross_check,
        primary_ns,
        cross_check_ns,
    }
}

/// Checks a whole history with the default [`Limits`]; `initial` gives each
/// key's value before the history (`None`: absent; for a map,
/// `&|k| map.get(&k).copied()`).
pub fn check(history: &[Event], initial: &impl Fn(u64) -> Option<u64>) -> Result<Report, HistoryError> {
    check_with_limits(history, initial, &Limits::default())
}

/// [`check`] with explicit limits.
pub fn check_with_limits(
    history: &[Event],
    initial: &impl Fn(u64) -> Option<u64>,
    limits: &Limits,
) -> Result<Report, HistoryError> {
    let started = Instant::now();
    let ops = operations(history)?;
    let mut report = Report::new(&ops);
    let mut rejected = 0;
    for (&key, key_ops) in &ops.by_key {
        let verdict = check_key_inner(key_ops, initial(key), limits, rejected < limits.max_reported_keys);
        rejected += usize::from(verdict.primary == Verdict::NotLinearizable);
        report.add(key, key_ops, &verdict, limits);
    }
    report.finish(elapsed_ns(started));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checkers have never been seen to disagree, so the report's
    /// handling of a disagreement is tried on a made-up one.
    #[test]
    fn a_disagreement_is_counted_listed_and_shouted() {
        let op = Operation {
            process: 1,
            f: Function::Get,
            key: 9,
            value: None,
            invoke: Stamp { time_ns: 1, event: 1 },
            outcome: Outcome::Ok {
                at: Stamp { time_ns: 2, event: 2 },
                result: Some(OpResult::Value(None)),
            },
        };
        let verdicts = KeyVerdict {
            primary: Verdict::Linearizable,
            cross_check: CrossCheck::Ran {
                verdict: Verdict::NotLinearizable,
            },
            primary_ns: 0,
            cross_check_ns: 0,
        };
        assert!(verdicts.disagree());
        assert_eq!(verdicts.verdict(), Verdict::Unknown);
        let mut report = Report::new(&Operations::default());
        report.add(9, &[op], &verdicts, &Limits::default());
        report.finish(0);
        assert_eq!(report.verdict, Verdict::Unknown);
        assert_eq!(
            (
                report.disagreement_count,
                report.unknown_keys,
                report.linearizable_keys
            ),
            (1, 0, 0)
        );
        assert_eq!(report.disagreements[0].key, 9);
        let text = report.to_string();
        assert!(text.contains("CHECKERS DISAGREE on 1 keys"), "{text}");
        assert!(text.contains("[1 .. 2] p1 get -> absent"), "{text}");
    }
}
