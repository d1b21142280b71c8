//! Pairing a history's invocations with their completions into ops, per
//! key, and rejecting histories that break the recording rules.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::Serialize;

use super::event::{Event, EventType, Function, OpResult};

/// A history that cannot be checked: unreadable, or breaking the rules of
/// recording. `event` is the event's position in the history, from 1 (the
/// line number of a file without blank lines).
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A line could not be read.
    #[error("line {line}: {source}")]
    Io {
        /// The line, from 1.
        line: usize,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not an event.
    #[error("line {line}: not an event: {source}")]
    Parse {
        /// The line, from 1.
        line: usize,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// An ok/fail/info of a process with no op outstanding.
    #[error("event {event}: process {process} completes an op it never invoked")]
    CompletionWithoutInvoke {
        /// The completion.
        event: usize,
        /// Its process.
        process: u64,
    },
    /// An invoke of a process whose previous op has not completed.
    #[error("event {event}: process {process} invokes while its op of event {outstanding} is outstanding")]
    InvokeWhileOutstanding {
        /// The second invoke.
        event: usize,
        /// Its process.
        process: u64,
        /// The outstanding invoke.
        outstanding: usize,
    },
    /// An invoke of a process that already got an `info`: its earlier op may
    /// still take effect, so the recorder must use a fresh process id.
    #[error("event {event}: process {process} invokes after its info at event {info}")]
    InvokeAfterInfo {
        /// The invoke.
        event: usize,
        /// Its process.
        process: u64,
        /// The info.
        info: usize,
    },
    /// A completion whose f, key or value differ from its invoke's.
    #[error(
        "event {event}: process {process} completes {completed} but invoked {invoked} at event {invoke}"
    )]
    CompletionMismatch {
        /// The completion.
        event: usize,
        /// Its process.
        process: u64,
        /// The invoke.
        invoke: usize,
        /// The invoke's op.
        invoked: String,
        /// The completion's op.
        completed: String,
    },
    /// A process's event earlier in time than its previous one.
    #[error("event {event}: process {process}'s time goes back from {previous_ns} to {time_ns} ns")]
    TimeWentBackwards {
        /// The event.
        event: usize,
        /// Its process.
        process: u64,
        /// The process's previous time.
        previous_ns: u64,
        /// This event's time.
        time_ns: u64,
    },
    /// A field missing, superfluous or of the wrong kind for the op.
    #[error("event {event}: process {process}: {reason}")]
    BadField {
        /// The event.
        event: usize,
        /// Its process.
        process: u64,
        /// What is wrong.
        reason: String,
    },
}

/// When an event happened, in the order the checkers use: by time, and by
/// position in the history for equal times (so a process's completion at
/// the same nanosecond as its next invoke still comes first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Stamp {
    /// The event's `time_ns`.
    pub time_ns: u64,
    /// The event's position in the history, from 1.
    pub event: usize,
}

/// How an op that may have taken effect ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Outcome {
    /// Took effect between invoke and `at`, returning `result` (`None` for put).
    Ok {
        /// The completion.
        at: Stamp,
        /// What it returned.
        result: Option<OpResult>,
    },
    /// Outcome unknown: may take effect at any time after the invoke, or never.
    Info {
        /// The info event.
        at: Stamp,
    },
    /// Never completed before the history ended: the same as info.
    Pending,
}

/// One op as the checkers see it: an invoke and its completion. Failed ops
/// are not operations (they did not happen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Operation {
    /// The client process.
    pub process: u64,
    /// The op.
    pub f: Function,
    /// Its key.
    pub key: u64,
    /// The value it writes (put/insert/update).
    pub value: Option<u64>,
    /// The invocation.
    pub invoke: Stamp,
    /// How it ended.
    pub outcome: Outcome,
}

impl Operation {
    /// Whether the op's result is known (it completed ok).
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok { .. })
    }

    /// The stamp after which no linearization may place it: its completion,
    /// or `None` for +infinity (info and pending ops).
    pub fn returned(&self) -> Option<Stamp> {
        match self.outcome {
            Outcome::Ok { at, .. } => Some(at),
            Outcome::Info { .. } | Outcome::Pending => None,
        }
    }
}

/// One line per op for a human reading a failed key's ops.
impl fmt::Display for Operation {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(out, "[{} .. ", self.invoke.time_ns)?;
        match self.outcome {
            Outcome::Ok { at, .. } => write!(out, "{}]", at.time_ns)?,
            Outcome::Info { .. } | Outcome::Pending => write!(out, "inf)")?,
        }
        write!(out, " p{} {}", self.process, self.f.name())?;
        if let Some(value) = self.value {
            write!(out, "({value})")?;
        }
        match self.outcome {
            Outcome::Ok {
                result: Some(OpResult::Value(Some(value))),
                ..
            } => write!(out, " -> {value}"),
            Outcome::Ok {
                result: Some(OpResult::Value(None)),
                ..
            } => write!(out, " -> absent"),
            Outcome::Ok {
                result: Some(OpResult::Wrote(wrote)),
                ..
            } => write!(out, " -> {wrote}"),
            Outcome::Ok { result: None, .. } => write!(out, " -> ok"),
            Outcome::Info { .. } => write!(out, " -> info"),
            Outcome::Pending => write!(out, " -> pending"),
        }
    }
}

/// A checked history's ops by key, and its counts.
#[derive(Clone, Debug, Default)]
pub struct Operations {
    /// Each key's ops, in invocation order.
    pub by_key: BTreeMap<u64, Vec<Operation>>,
    /// Completions that were ok.
    pub ok: usize,
    /// Completions that were fail (dropped: they did not happen).
    pub fail: usize,
    /// Completions that were info.
    pub info: usize,
    /// Invokes never completed.
    pub pending: usize,
    /// Info and pending gets and scans, dropped: a read whose result is
    /// unknown constrains nothing.
    pub dropped_reads: usize,
    /// Entries ok scans returned, each checked as a get of its key (the
    /// keys a scan covered and found absent are checked too, uncounted).
    pub scan_reads: usize,
}

/// A process's outstanding invoke.
struct Outstanding {
    event: usize,
    at: Stamp,
    f: Function,
    key: u64,
    value: Option<u64>,
}

#[derive(Default)]
struct ProcessState {
    last_ns: u64,
    outstanding: Option<Outstanding>,
    info: Option<usize>,
}

fn describe(f: Function, key: u64, value: Option<u64>) -> String {
    match value {
        Some(value) => format!("{}({value}) on key {key}", f.name()),
        None => format!("{} on key {key}", f.name()),
    }
}

/// Pairs the history's invokes with their completions, per key, checking the
/// recording rules.
pub fn operations(history: &[Event]) -> Result<Operations, HistoryError> {
    let mut ops = Operations::default();
    let mut scans = Vec::new();
    let mut processes: HashMap<u64, ProcessState> = HashMap::new();
    for (index, ev) in history.iter().enumerate() {
        let event = index + 1;
        let process = ev.process;
        let bad = |reason: String| HistoryError::BadField {
            event,
            process,
            reason,
        };
        let state = processes.entry(process).or_default();
        if ev.time_ns < state.last_ns {
            return Err(HistoryError::TimeWentBackwards {
                event,
                process,
                previous_ns: state.last_ns,
                time_ns: ev.time_ns,
            });
        }
        state.last_ns = ev.time_ns;
        let at = Stamp {
            time_ns: ev.time_ns,
            event,
        };
        if ev.kind == EventType::Invoke {
            if let Some(info) = state.info {
                return Err(HistoryError::InvokeAfterInfo { event, process, info });
            }
            if let Some(outstanding) = &state.outstanding {
                return Err(HistoryError::InvokeWhileOutstanding {
                    event,
                    process,
                    outstanding: outstanding.event,
                });
            }
            if ev.f.takes_value() != ev.value.is_some() {
                return Err(bad(match ev.value {
                    Some(_) => format!("{} carries no value", ev.f.name()),
                    None => format!("{} without a value", ev.f.name()),
                }));
            }
            if ev.result.is_some() || ev.entries.is_some() {
                return Err(bad("an invoke has no result".into()));
            }
            state.outstanding = Some(Outstanding {
                event,
                at,
                f: ev.f,
                key: ev.key,
                value: ev.value,
            });
            continue;
        }
        let Some(invoked) = state.outstanding.take() else {
            return Err(HistoryError::CompletionWithoutInvoke { event, process });
        };
        // A completion may leave the value out: the invoke's is the one written.
        if ev.f != invoked.f || ev.key != invoked.key || ev.value.is_some_and(|v| Some(v) != invoked.value) {
            return Err(HistoryError::CompletionMismatch {
                event,
                process,
                invoke: invoked.event,
                invoked: describe(invoked.f, invoked.key, invoked.value),
                completed: describe(ev.f, ev.key, ev.value),
            });
        }
        if ev.f != Function::Scan && ev.entries.is_some() {
            return Err(bad(format!("{} returns no entries", ev.f.name())));
        }
        if ev.f == Function::Scan {
            match (ev.kind, &ev.entries) {
                (EventType::Ok, Some(entries)) => {
                    ops.ok += 1;
                    let count = invoked.value.unwrap_or_default();
                    check_scan(invoked.key, count, entries).map_err(bad)?;
                    scans.push(Scan {
                        process,
                        from: invoked.key,
                        count,
                        entries: entries.clone(),
                        invoke: invoked.at,
                        at,
                    });
                }
                (EventType::Ok, None) => return Err(bad("an ok scan without entries".into())),
                (_, Some(_)) => return Err(bad("only an ok scan has entries".into())),
                // An unknown or failed scan read nothing anyone can hold
                // it to, and changed nothing.
                (EventType::Fail, None) => ops.fail += 1,
                (EventType::Info, None) => {
                    ops.info += 1;
                    ops.dropped_reads += 1;
                    state.info = Some(event);
                }
                (EventType::Invoke, None) => unreachable!("invokes are handled above"),
            }
            if ev.result.is_some() {
                return Err(bad("a scan's result is its entries".into()));
            }
            continue;
        }
        let outcome = match ev.kind {
            EventType::Invoke => unreachable!("invokes are handled above"),
            EventType::Fail => {
                ops.fail += 1;
                if ev.result.is_some() {
                    return Err(bad("a fail has no result".into()));
                }
                continue;
            }
            EventType::Info => {
                ops.info += 1;
                state.info = Some(event);
                if ev.result.is_some() {
                    return Err(bad("an info has no result".into()));
                }
                Outcome::Info { at }
            }
            EventType::Ok => {
                ops.ok += 1;
                let fits = matches!(
                    (ev.f, ev.result),
                    (Function::Get, Some(OpResult::Value(_)))
                        | (Function::Put, None)
                        | (
                            Function::Insert | Function::Update | Function::Delete,
                            Some(OpResult::Wrote(_))
                        )
                );
                if !fits {
                    return Err(bad(format!(
                        "ok {} with result {:?}: get returns a value or null, put nothing, \
                         insert/update/delete a bool",
                        ev.f.name(),
                        ev.result
                    )));
                }
                Outcome::Ok {
                    at,
                    result: ev.result,
                }
            }
        };
        push(&mut ops, invoked, process, outcome);
    }
    let mut left: Vec<(u64, Outstanding)> = processes
        .into_iter()
        .filter_map(|(p, s)| s.outstanding.map(|o| (p, o)))
        .collect();
    left.sort_by_key(|(_, o)| o.event);
    for (process, invoked) in left {
        ops.pending += 1;
        if invoked.f == Function::Scan {
            ops.dropped_reads += 1;
            continue;
        }
        push(&mut ops, invoked, process, Outcome::Pending);
    }
    // Every key named anywhere, scans' entries included, before any scan is
    // expanded: which keys a scan found absent must not depend on the order.
    let mut keys: BTreeSet<u64> = ops.by_key.keys().copied().collect();
    keys.extend(scans.iter().flat_map(|s| s.entries.iter().map(|&(k, _)| k)));
    for scan in scans {
        scan.expand(&keys, &mut ops);
    }
    for key_ops in ops.by_key.values_mut() {
        key_ops.sort_by_key(|op| op.invoke);
    }
    Ok(ops)
}

/// An ok scan, kept until every key of the history is known.
struct Scan {
    process: u64,
    from: u64,
    count: u64,
    entries: Vec<(u64, u64)>,
    invoke: Stamp,
    at: Stamp,
}

impl Scan {
    /// Whether the scan read `key`: from `from` on, up to its last entry, or
    /// past it when it returned fewer entries than it asked for (it then
    /// read to the end of the index).
    fn covers(&self, key: u64) -> bool {
        key >= self.from
            && (self.entries.len() < self.count as usize
                || self.entries.last().is_some_and(|&(last, _)| key <= last))
    }

    /// The gets the scan implies, each within its interval: every entry's
    /// value, and absence for every other key it covered. Keys nothing else
    /// in the history names are left out (absent throughout, they constrain
    /// nothing), which keeps a scan to the end of the index finite.
    fn expand(self, keys: &BTreeSet<u64>, ops: &mut Operations) {
        let read = |key: u64, value: Option<u64>| Operation {
            process: self.process,
            f: Function::Get,
            key,
            value: None,
            invoke: self.invoke,
            outcome: Outcome::Ok {
                at: self.at,
                result: Some(OpResult::Value(value)),
            },
        };
        let returned: BTreeMap<u64, u64> = self.entries.iter().copied().collect();
        let absent = keys
            .range(self.from..)
            .filter(|&&k| self.covers(k) && !returned.contains_key(&k));
        for &key in absent {
            ops.by_key.entry(key).or_default().push(read(key, None));
        }
        for (key, value) in returned {
            ops.by_key.entry(key).or_default().push(read(key, Some(value)));
        }
        ops.scan_reads += self.entries.len();
    }
}

/// A scan's entries must be what a scan can return: at most `count`, keys
/// at or above `from`, strictly ascending.
fn check_scan(from: u64, count: u64, entries: &[(u64, u64)]) -> Result<(), String> {
    if entries.len() as u64 > count {
        return Err(format!("a scan for {count} entries returned {}", entries.len()));
    }
    if entries.first().is_some_and(|&(k, _)| k < from) {
        return Err(format!("a scan from key {from} returned a key below it"));
    }
    if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err("a scan's keys are not strictly ascending".into());
    }
    Ok(())
}

fn push(ops: &mut Operations, invoked: Outstanding, process: u64, outcome: Outcome) {
    let unknown = !matches!(outcome, Outcome::Ok { .. });
    if unknown && invoked.f == Function::Get {
        ops.dropped_reads += 1;
        return;
    }
    ops.by_key.entry(invoked.key).or_default().push(Operation {
        process,
        f: invoked.f,
        key: invoked.key,
        value: invoked.value,
        invoke: invoked.at,
        outcome,
    });
}
