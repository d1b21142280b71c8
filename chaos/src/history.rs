//! The history of acknowledged writes, and the check of an index's final
//! contents against it.
//!
//! A client acknowledges a write when its record reaches its history file
//! (flushed at least once per timeline bucket): what a killed client wrote
//! in its last unflushed bucket, or was writing when it died, was never
//! acknowledged. Such writes may or may not be in the index: the checker
//! recognises their values (every value a thread writes is
//! `KeyMap::value(key, write_version(thread, seq))`) among the next
//! [`IN_FLIGHT_OPS_MAX`] ops of a dead thread's stream.
//!
//! The rules, per key:
//! - a key with acknowledged writes is present, holding the value of one
//!   of them that no other acknowledged write to it followed (started
//!   after it was acknowledged), or an unacknowledged value of a dead
//!   thread;
//! - a loaded key without one holds its loaded value (or a dead thread's);
//! - any other key present is an unacknowledged insert of a dead thread.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use workload::{write_version, KeyMap};

/// Ops of a dead thread's stream after its last acknowledged write among
/// which an unacknowledged value is looked for: far more than one bucket's
/// worth of one thread's ops.
pub const IN_FLIGHT_OPS_MAX: u64 = 1 << 16;
/// Violations listed in full; the rest are counted.
pub const VIOLATIONS_LISTED_MAX: usize = 20;

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteKind {
    /// Inserted a fresh key.
    Insert,
    /// Overwrote an existing key.
    Update,
}

/// One acknowledged write (a line of `history.jsonl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// The client process.
    pub client: u32,
    /// The op stream (global thread index) that made it.
    pub thread: u32,
    /// Its op's sequence number in the stream (from 1).
    pub seq: u64,
    /// What it did.
    pub kind: WriteKind,
    /// The key and the value written.
    pub key: u64,
    /// The value.
    pub value: u64,
    /// When it started and when it was acknowledged (Unix nanoseconds: all
    /// processes of a run share the host's clock).
    pub start_ns: u64,
    /// When the client saw it complete.
    pub ack_ns: u64,
}

/// What the check found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HistoryCheck {
    /// Acknowledged writes checked.
    pub acked_writes: u64,
    /// Keys in the index.
    pub keys_present: u64,
    /// Keys holding an unacknowledged value (or insert) of a dead thread.
    pub unacked_values: u64,
    /// Acknowledged or loaded keys missing from the index.
    pub missing: u64,
    /// Keys holding a value no rule allows.
    pub wrong_value: u64,
    /// Keys present that nobody loaded or wrote.
    pub unexpected: u64,
    /// The first few problems, in words.
    pub violations: Vec<String>,
}

impl HistoryCheck {
    /// True when nothing acknowledged was lost or changed.
    pub fn is_ok(&self) -> bool {
        self.missing == 0 && self.wrong_value == 0 && self.unexpected == 0
    }

    fn note(&mut self, what: String) {
        if self.violations.len() < VIOLATIONS_LISTED_MAX {
            self.violations.push(what);
        }
    }
}

/// The inputs of a check besides the history.
#[derive(Clone, Debug)]
pub struct Expectation {
    /// The run's key map (the experiment's seed).
    pub keys: KeyMap,
    /// Records loaded before the run: keys `keys.key(0..records)`.
    pub records: u64,
    /// Insert lanes (one per thread: lane = global thread index).
    pub lanes: u64,
    /// Global thread indices whose client died (killed, or stopped by the
    /// runner while blocked).
    pub dead_threads: HashSet<u32>,
}

/// Checks `present` (the index's final contents) against `writes`.
pub fn check(present: &BTreeMap<u64, u64>, writes: &[Write], e: &Expectation) -> HistoryCheck {
    let mut r = HistoryCheck {
        acked_writes: writes.len() as u64,
        keys_present: present.len() as u64,
        ..HistoryCheck::default()
    };
    let mut by_key: HashMap<u64, Vec<&Write>> = HashMap::new();
    for w in writes {
        by_key.entry(w.key).or_default().push(w);
    }
    // The last acknowledged op of every dead thread: its unacknowledged
    // ops come after.
    let mut last_seq: HashMap<u32, u64> = e.dead_threads.iter().map(|&t| (t, 0)).collect();
    for w in writes {
        if let Some(s) = last_seq.get_mut(&w.thread) {
            *s = (*s).max(w.seq);
        }
    }
    let dead_value = |key: u64, value: u64| {
        last_seq.iter().any(|(&t, &after)| {
            (after + 1..=after + IN_FLIGHT_OPS_MAX)
                .any(|s| e.keys.value(key, write_version(t as usize, s)) == value)
        })
    };

    for (&key, ws) in &by_key {
        let latest_start = ws.iter().map(|w| w.start_ns).max().unwrap_or(0);
        match present.get(&key) {
            None => {
                r.missing += 1;
                r.note(format!(
                    "key {key:#x}: acknowledged {} write(s), the last of value {:#x}, but the key is missing",
                    ws.len(),
                    ws.iter().max_by_key(|w| w.ack_ns).map_or(0, |w| w.value)
                ));
            }
            Some(&v) => {
                if ws.iter().any(|w| w.value == v && w.ack_ns >= latest_start) {
                    continue;
                }
                if dead_value(key, v) {
                    r.unacked_values += 1;
                    continue;
                }
                r.wrong_value += 1;
                let older = ws.iter().any(|w| w.value == v);
                r.note(format!(
                    "key {key:#x}: holds {v:#x}, {}",
                    if older {
                        "the value of a write that later acknowledged writes replaced (a lost update)"
                    } else {
                        "a value no acknowledged write of it wrote"
                    }
                ));
            }
        }
    }

    for (&key, &v) in present {
        if by_key.contains_key(&key) {
            continue;
        }
        match e.keys.index(key) {
            Some(i) if i < e.records => {
                if v == e.keys.load_value(key) {
                    continue;
                }
                if dead_value(key, v) {
                    r.unacked_values += 1;
                } else {
                    r.wrong_value += 1;
                    r.note(format!(
                        "loaded key {key:#x}: holds {v:#x}, written by no acknowledged write"
                    ));
                }
            }
            Some(i) => {
                let lane = (i - e.records) % e.lanes.max(1);
                let from_dead = u32::try_from(lane).is_ok_and(|t| e.dead_threads.contains(&t));
                if from_dead && dead_value(key, v) {
                    r.unacked_values += 1;
                } else {
                    r.unexpected += 1;
                    r.note(format!(
                        "key {key:#x} (record {i}): present, but no acknowledged write inserted it"
                    ));
                }
            }
            None => {
                r.unexpected += 1;
                r.note(format!("key {key:#x}: a reserved key is present"));
            }
        }
    }

    // Loaded keys that nobody wrote must still be there.
    let missing_loaded: Vec<u64> = (0..e.records)
        .map(|i| e.keys.key(i))
        .filter(|k| !present.contains_key(k) && !by_key.contains_key(k))
        .collect();
    r.missing += missing_loaded.len() as u64;
    for k in missing_loaded.iter().take(3) {
        r.note(format!("loaded key {k:#x} is missing"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(thread: u32, seq: u64, key: u64, value: u64, start_ns: u64, ack_ns: u64) -> Write {
        Write {
            client: thread,
            thread,
            seq,
            kind: WriteKind::Update,
            key,
            value,
            start_ns,
            ack_ns,
        }
    }

    fn setup() -> (KeyMap, BTreeMap<u64, u64>, Expectation) {
        let keys = KeyMap::new(7);
        let present: BTreeMap<u64, u64> = (0..10)
            .map(|i| (keys.key(i), keys.load_value(keys.key(i))))
            .collect();
        let e = Expectation {
            keys,
            records: 10,
            lanes: 2,
            dead_threads: HashSet::new(),
        };
        (keys, present, e)
    }

    #[test]
    fn loaded_keys_untouched_pass_and_a_lost_one_fails() {
        let (keys, mut present, e) = setup();
        assert!(check(&present, &[], &e).is_ok());
        present.remove(&keys.key(3));
        let r = check(&present, &[], &e);
        assert_eq!(r.missing, 1, "{r:?}");
    }

    #[test]
    fn the_last_write_or_a_concurrent_one_is_allowed_a_replaced_one_is_not() {
        let (keys, mut present, e) = setup();
        let k = keys.key(1);
        // A at [0, 10], B at [5, 20] overlap: either may be last. C at [30, 40] follows both.
        let a = w(0, 1, k, 111, 0, 10);
        let b = w(1, 1, k, 222, 5, 20);
        present.insert(k, 111);
        assert!(check(&present, &[a, b], &e).is_ok());
        present.insert(k, 222);
        assert!(check(&present, &[a, b], &e).is_ok());
        let c = w(0, 2, k, 333, 30, 40);
        let r = check(&present, &[a, b, c], &e);
        assert_eq!(r.wrong_value, 1, "B was replaced by C: {r:?}");
        assert!(r.violations[0].contains("lost update"), "{r:?}");
        present.remove(&k);
        assert_eq!(check(&present, &[a, b, c], &e).missing, 1);
    }

    #[test]
    fn a_dead_threads_unacknowledged_write_is_recognised() {
        let (keys, mut present, mut e) = setup();
        let k = keys.key(2);
        // Thread 1 acknowledged op 5, then died while writing op 9.
        let acked = w(1, 5, keys.key(4), 5, 0, 1);
        present.insert(keys.key(4), 5);
        present.insert(k, keys.value(k, write_version(1, 9)));
        let r = check(&present, &[acked], &e);
        assert_eq!(r.wrong_value, 1, "thread 1 is alive: {r:?}");
        e.dead_threads.insert(1);
        let r = check(&present, &[acked], &e);
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(r.unacked_values, 1);
        // An op of its stream before its last acknowledged one is no excuse.
        present.insert(k, keys.value(k, write_version(1, 4)));
        assert_eq!(check(&present, &[acked], &e).wrong_value, 1);
    }

    #[test]
    fn inserts_are_checked_by_lane() {
        let (keys, mut present, mut e) = setup();
        // Record 10 + 2n + lane: record 13 is lane 1's second insert.
        let k = keys.key(13);
        let v = keys.value(k, write_version(1, 3));
        present.insert(k, v);
        let r = check(&present, &[], &e);
        assert_eq!(r.unexpected, 1, "{r:?}");
        e.dead_threads.insert(1);
        assert!(check(&present, &[], &e).is_ok());
        let mut ins = w(1, 3, k, v, 0, 1);
        ins.kind = WriteKind::Insert;
        e.dead_threads.clear();
        assert!(check(&present, &[ins], &e).is_ok());
        present.remove(&k);
        assert_eq!(check(&present, &[ins], &e).missing, 1);
    }

    #[test]
    fn a_history_line_round_trips_through_json() {
        let a = w(3, 9, 0xdead, 0xbeef, 1, 2);
        let line = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Write>(&line).unwrap(), a);
    }
}
