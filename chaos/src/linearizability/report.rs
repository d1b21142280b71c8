//! What a check found, per key and in total.

use std::fmt;

use serde::Serialize;

use super::history::{Operation, Operations};
use super::{CrossCheck, KeyVerdict, Limits, Verdict};

/// A key the report spells out, with its ops rendered for a human.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyDetail {
    /// The key.
    pub key: u64,
    /// Both checkers' verdicts.
    pub verdicts: KeyVerdict,
    /// The key's ops, one line each, in invocation order (the first
    /// [`Limits::max_rendered_ops`]).
    pub ops: Vec<String>,
    /// How many ops the key has, rendered or not.
    pub ops_total: usize,
}

/// The outcome of checking a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Not linearizable if any key is; else unknown if any key is unknown or
    /// the checkers disagree on one; else linearizable.
    pub verdict: Verdict,
    /// Keys with at least one op checked.
    pub keys_checked: usize,
    /// Ops given to the checkers (ok, info and pending ones; not fails, nor
    /// gets of unknown outcome).
    pub ops_checked: usize,
    /// Completions that were ok.
    pub ok: usize,
    /// Completions that were fail.
    pub fail: usize,
    /// Completions that were info.
    pub info: usize,
    /// Invocations never completed (treated as info).
    pub pending: usize,
    /// Entries that ok scans returned, each checked as a get of its key
    /// (keys a scan covered and found absent are checked too, uncounted).
    pub scan_reads: usize,
    /// Keys found linearizable.
    pub linearizable_keys: usize,
    /// Keys found not linearizable, by either checker with the other not
    /// contradicting it.
    pub non_linearizable_keys: usize,
    /// Keys neither checker could decide within its budget.
    pub unknown_keys: usize,
    /// Keys on which the checkers reached opposite verdicts: a bug in one of
    /// them or in this module. Must be zero.
    pub disagreement_count: usize,
    /// Keys the cross-check did not run on.
    pub cross_check_skipped: usize,
    /// The first non-linearizable keys.
    pub non_linearizable: Vec<KeyDetail>,
    /// The first keys the checkers disagreed on.
    pub disagreements: Vec<KeyDetail>,
    /// The first undecided keys.
    pub unknown: Vec<KeyDetail>,
    /// The first keys not cross-checked, with the reason.
    pub skipped: Vec<(u64, String)>,
    /// Wall time of the whole check, in nanoseconds.
    pub elapsed_ns: u64,
    /// Time the primary checker took, summed over keys.
    pub primary_ns: u64,
    /// Time the cross-check took, summed over keys.
    pub cross_check_ns: u64,
}

impl Report {
    pub(super) fn new(ops: &Operations) -> Report {
        Report {
            verdict: Verdict::Linearizable,
            keys_checked: 0,
            ops_checked: 0,
            ok: ops.ok,
            fail: ops.fail,
            info: ops.info,
            pending: ops.pending,
            scan_reads: ops.scan_reads,
            linearizable_keys: 0,
            non_linearizable_keys: 0,
            unknown_keys: 0,
            disagreement_count: 0,
            cross_check_skipped: 0,
            non_linearizable: Vec::new(),
            disagreements: Vec::new(),
            unknown: Vec::new(),
            skipped: Vec::new(),
            elapsed_ns: 0,
            primary_ns: 0,
            cross_check_ns: 0,
        }
    }

    pub(super) fn add(&mut self, key: u64, ops: &[Operation], verdicts: &KeyVerdict, limits: &Limits) {
        self.keys_checked += 1;
        self.ops_checked += ops.len();
        self.primary_ns += verdicts.primary_ns;
        self.cross_check_ns += verdicts.cross_check_ns;
        let detail = || KeyDetail {
            key,
            verdicts: verdicts.clone(),
            ops: ops
                .iter()
                .take(limits.max_rendered_ops)
                .map(Operation::to_string)
                .collect(),
            ops_total: ops.len(),
        };
        if let CrossCheck::Skipped { reason } = &verdicts.cross_check {
            self.cross_check_skipped += 1;
            if self.skipped.len() < limits.max_reported_keys {
                self.skipped.push((key, reason.clone()));
            }
        }
        if verdicts.disagree() {
            self.disagreement_count += 1;
            if self.disagreements.len() < limits.max_reported_keys {
                self.disagreements.push(detail());
            }
        }
        let (count, list) = match verdicts.verdict() {
            Verdict::Linearizable => {
                self.linearizable_keys += 1;
                return;
            }
            Verdict::NotLinearizable => (&mut self.non_linearizable_keys, &mut self.non_linearizable),
            // A disagreement is listed as one, not a second time as unknown.
            Verdict::Unknown if verdicts.disagree() => return,
            Verdict::Unknown => (&mut self.unknown_keys, &mut self.unknown),
        };
        *count += 1;
        if list.len() < limits.max_reported_keys {
            list.push(detail());
        }
    }

    pub(super) fn finish(&mut self, elapsed_ns: u64) {
        self.elapsed_ns = elapsed_ns;
        self.verdict = if self.non_linearizable_keys > 0 {
            Verdict::NotLinearizable
        } else if self.unknown_keys > 0 || self.disagreement_count > 0 {
            Verdict::Unknown
        } else {
            Verdict::Linearizable
        };
    }

    /// Whether every key was found linearizable, with no disagreement.
    pub fn is_linearizable(&self) -> bool {
        self.verdict == Verdict::Linearizable
    }
}

/// A summary for a terminal: counts, then each listed key with its ops.
impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            out,
            "linearizability: {:?}: {} keys, {} ops checked (ok {}, fail {}, info {}, pending {}; scan entries {}) in {:.3} s",
            self.verdict,
            self.keys_checked,
            self.ops_checked,
            self.ok,
            self.fail,
            self.info,
            self.pending,
            self.scan_reads,
            self.elapsed_ns as f64 / 1e9
        )?;
        writeln!(
            out,
            "  keys: {} linearizable, {} NOT linearizable, {} unknown; cross-check skipped on {}",
            self.linearizable_keys, self.non_linearizable_keys, self.unknown_keys, self.cross_check_skipped
        )?;
        if self.disagreement_count > 0 {
            writeln!(
                out,
                "  CHECKERS DISAGREE on {} keys: one of them, or its adaptation, is wrong",
                self.disagreement_count
            )?;
        }
        let lists = [
            (
                "not linearizable",
                &self.non_linearizable,
                self.non_linearizable_keys,
            ),
            ("checkers disagree", &self.disagreements, self.disagreement_count),
            ("unknown", &self.unknown, self.unknown_keys),
        ];
        for (what, list, total) in lists {
            for detail in list {
                writeln!(
                    out,
                    "  key {} ({what}; primary {:?}, cross-check {:?}):",
                    detail.key, detail.verdicts.primary, detail.verdicts.cross_check
                )?;
                for op in &detail.ops {
                    writeln!(out, "    {op}")?;
                }
                if detail.ops_total > detail.ops.len() {
                    writeln!(out, "    … {} more ops", detail.ops_total - detail.ops.len())?;
                }
            }
            if total > list.len() {
                writeln!(out, "  … {} more keys {what}", total - list.len())?;
            }
        }
        Ok(())
    }
}
