//! Known verdicts of the linearizability checker, its history rules, and
//! seeded random histories on which both checkers must agree.
//!
//! One module per idea: `verdicts` (histories of known verdicts, in the
//! shorthand below), `history` (the recording rules and the JSON lines),
//! `limits` (the search caps and what is cross-checked), `random` (seeded
//! random histories), `scans` (scans read as the gets they imply).

mod history;
mod limits;
mod random;
mod scans;
mod verdicts;

use std::collections::BTreeMap;

use chaos::linearizability::{
    check, check_key_stateright, check_key_wgl, check_with_limits, operations, read_jsonl, write_jsonl,
    CrossCheck, Event, EventType, Function, HistoryError, Limits, OpResult, Report, Verdict,
    CROSS_CHECK_MAX_OPS, CROSS_CHECK_MAX_STEPS_PER_KEY, MAX_SEARCH_STEPS_PER_KEY,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A history in shorthand, one event per line, times 10 ns apart:
/// `process type f [kKEY] [value] [result]`, e.g. `1 ok get k2 nil`,
/// `3 ok insert 7 false`. The first number after f is put/insert/update's
/// value (a scan's count), the next token the result (`nil` is a get of an
/// absent key); a scan's entries are `=KEY:VALUE,...` (`=` alone: none).
fn h(lines: &[&str]) -> Vec<Event> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| parse(line, 10 * (i as u64 + 1)))
        .collect()
}

fn parse(line: &str, time_ns: u64) -> Event {
    let mut tokens = line.split_whitespace();
    let mut next = || {
        tokens
            .next()
            .unwrap_or_else(|| panic!("short shorthand {line:?}"))
    };
    let process = next().parse().expect("process");
    let kind = match next() {
        "invoke" => EventType::Invoke,
        "ok" => EventType::Ok,
        "fail" => EventType::Fail,
        "info" => EventType::Info,
        other => panic!("type {other}"),
    };
    let f = match next() {
        "get" => Function::Get,
        "put" => Function::Put,
        "insert" => Function::Insert,
        "update" => Function::Update,
        "delete" => Function::Delete,
        "scan" => Function::Scan,
        other => panic!("f {other}"),
    };
    let mut event = Event {
        process,
        kind,
        f,
        key: 0,
        value: None,
        result: None,
        entries: None,
        time_ns,
    };
    for token in line.split_whitespace().skip(3) {
        match token {
            t if t.starts_with('=') => {
                let pairs = t[1..].split(',').filter(|p| !p.is_empty());
                let entry = |p: &str| {
                    let (k, v) = p.split_once(':').expect("KEY:VALUE");
                    (k.parse().expect("key"), v.parse().expect("value"))
                };
                event.entries = Some(pairs.map(entry).collect());
            }
            "nil" => event.result = Some(OpResult::Value(None)),
            "true" => event.result = Some(OpResult::Wrote(true)),
            "false" => event.result = Some(OpResult::Wrote(false)),
            t if t.starts_with('k') => event.key = t[1..].parse().expect("key"),
            t if f.takes_value() && event.value.is_none() => event.value = Some(t.parse().expect("value")),
            t => event.result = Some(OpResult::Value(Some(t.parse().expect("result")))),
        }
    }
    event
}

fn absent(_: u64) -> Option<u64> {
    None
}

fn report(lines: &[&str]) -> Report {
    check(&h(lines), &absent).expect("well-formed history")
}

/// Asserts the verdict, and that both checkers reached it on every key.
fn assert_verdict(lines: &[&str], expected: Verdict) -> Report {
    let report = report(lines);
    assert_eq!(report.verdict, expected, "{report}");
    assert_eq!(report.disagreement_count, 0, "{report}");
    assert_eq!(report.cross_check_skipped, 0, "{report}");
    report
}

fn accepted(lines: &[&str]) {
    assert_verdict(lines, Verdict::Linearizable);
}

fn rejected(lines: &[&str]) {
    let report = assert_verdict(lines, Verdict::NotLinearizable);
    for detail in &report.non_linearizable {
        assert_eq!(detail.verdicts.primary, Verdict::NotLinearizable);
        assert_eq!(
            detail.verdicts.cross_check,
            CrossCheck::Ran {
                verdict: Verdict::NotLinearizable
            }
        );
    }
}
