//! One line of a history: a client's invocation or completion of an op, and
//! reading and writing histories as JSON lines.
//!
//! ```text
//! {"process":3,"type":"invoke","f":"put","key":12,"value":99,"time_ns":123456}
//! {"process":3,"type":"ok","f":"put","key":12,"value":99,"time_ns":123999}
//! {"process":3,"type":"ok","f":"get","key":12,"result":null,"time_ns":124500}
//! {"process":3,"type":"invoke","f":"scan","key":10,"value":4,"time_ns":125000}
//! {"process":3,"type":"ok","f":"scan","key":10,"value":4,"entries":[[12,99],[15,7]],"time_ns":125900}
//! ```
//!
//! A scan names the key it starts from and, as its `value`, the most entries
//! it asks for. It is not one op on one key: the checker reads it as the gets
//! it implies (`history::operations`).

use std::io::{BufRead, Write};

use serde::{Deserialize, Deserializer, Serialize};

use super::history::HistoryError;

/// What a line records: the start of an op, or how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    /// The client issued the op.
    Invoke,
    /// The op took effect and returned `result`.
    Ok,
    /// The op definitely did not take effect.
    Fail,
    /// The outcome is unknown: the op may take effect at any time after its
    /// invocation, or never.
    Info,
}

/// The op on the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Function {
    /// Reads the key's value (`result` null when absent).
    Get,
    /// Writes `value` whether or not the key is present.
    Put,
    /// Writes `value` only if the key is absent (`result`: whether it wrote).
    Insert,
    /// Writes `value` only if the key is present (`result`: whether it wrote).
    Update,
    /// Removes the key if present (`result`: whether it removed it).
    Delete,
    /// Up to `value` entries with keys at or above `key`, in key order
    /// (`entries`). Not a snapshot: each key it covers is read at some
    /// moment of it, as a get would be.
    Scan,
}

impl Function {
    /// Whether the op carries a `value`: the value it writes, or the most
    /// entries a scan asks for.
    pub fn takes_value(self) -> bool {
        matches!(
            self,
            Function::Put | Function::Insert | Function::Update | Function::Scan
        )
    }

    /// The name used in the JSON `f` field.
    pub fn name(self) -> &'static str {
        match self {
            Function::Get => "get",
            Function::Put => "put",
            Function::Insert => "insert",
            Function::Update => "update",
            Function::Delete => "delete",
            Function::Scan => "scan",
        }
    }
}

/// What an `ok` op returned.
///
/// Untagged so that the JSON holds the bare value: a bool for
/// insert/update/delete, a number or null for get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OpResult {
    /// insert/update/delete: whether the op wrote. Listed first because an
    /// untagged enum tries its variants in order and `null` must not be
    /// taken for a bool.
    Wrote(bool),
    /// get: the value read; `None` (JSON null) when the key was absent.
    Value(Option<u64>),
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The client's process id; a process has at most one op outstanding and
    /// never issues another op after an `info`.
    pub process: u64,
    /// Invocation or completion.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The op.
    pub f: Function,
    /// The key the op is on.
    pub key: u64,
    /// The value put/insert/update writes, or the most entries a scan asks
    /// for; absent for get and delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// What an `ok` op returned; absent for put and on invoke/fail/info.
    /// `Some(OpResult::Value(None))` is a JSON null, which a missing field
    /// must not be confused with.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<OpResult>,
    /// What an `ok` scan returned, (key, value) in key order; absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<(u64, u64)>>,
    /// Monotonic nanoseconds since the run's start.
    pub time_ns: u64,
}

/// A field that is there, even as null, is `Some`: serde's own `Option`
/// would turn a null get result into "no result".
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<OpResult>, D::Error> {
    OpResult::deserialize(deserializer).map(Some)
}

impl Event {
    /// An invocation of `f` on `key` by `process` at `time_ns`.
    pub fn invoke(process: u64, f: Function, key: u64, value: Option<u64>, time_ns: u64) -> Self {
        Event {
            process,
            kind: EventType::Invoke,
            f,
            key,
            value,
            result: None,
            entries: None,
            time_ns,
        }
    }

    /// The completion of `process`'s outstanding op as `kind`.
    pub fn complete(
        process: u64,
        kind: EventType,
        f: Function,
        key: u64,
        value: Option<u64>,
        result: Option<OpResult>,
        time_ns: u64,
    ) -> Self {
        Event {
            process,
            kind,
            f,
            key,
            value,
            result,
            entries: None,
            time_ns,
        }
    }

    /// The `ok` completion of `process`'s scan from `from` for at most
    /// `count` entries, which returned `entries`.
    pub fn scanned(process: u64, from: u64, count: u64, entries: Vec<(u64, u64)>, time_ns: u64) -> Self {
        Event {
            process,
            kind: EventType::Ok,
            f: Function::Scan,
            key: from,
            value: Some(count),
            result: None,
            entries: Some(entries),
            time_ns,
        }
    }
}

/// Reads a history written one JSON event per line. Blank lines are
/// skipped; an error names the line (from 1).
pub fn read_jsonl<R: BufRead>(reader: R) -> Result<Vec<Event>, HistoryError> {
    let mut events = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line_no = index + 1;
        let line = line.map_err(|source| HistoryError::Io {
            line: line_no,
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str(&line).map_err(|source| HistoryError::Parse {
            line: line_no,
            source,
        })?;
        events.push(event);
    }
    Ok(events)
}

/// Appends one event as a JSON line: what a recorder calls as ops happen.
pub fn write_event<W: Write>(mut writer: W, event: &Event) -> std::io::Result<()> {
    serde_json::to_writer(&mut writer, event)?;
    writer.write_all(b"\n")
}

/// Writes a whole history as JSON lines, readable by [`read_jsonl`].
pub fn write_jsonl<W: Write>(mut writer: W, events: &[Event]) -> std::io::Result<()> {
    for event in events {
        write_event(&mut writer, event)?;
    }
    writer.flush()
}
