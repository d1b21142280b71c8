//! The gateway's metrics: requests by command, error replies, connections,
//! and the keyspaces' rTX and fabric counters.
//!
//! Recorded through the `metrics` facade (a no-op until the process
//! installs a recorder: `kintsugi serve --metrics-listen`). Handles are
//! looked up once, when the gateway is made, so a request costs an atomic
//! add; a keyspace's counters are added as deltas when it returns to the
//! pool (once per burst of requests, not per operation).

use ::metrics::{Counter, Gauge, Unit};
use fabric::metrics::{MetricDef, MetricKind};

use crate::command::TABLE;
use crate::keyspace::Counters;

/// Requests by `command` (lower-case; `unknown` for names not served).
pub const COMMANDS: &str = "kintsugi_gateway_commands_total";
/// Error replies by `command`.
pub const ERRORS: &str = "kintsugi_gateway_errors_total";
/// Writes whose outcome was unknown (cut off at their commit point).
pub const WRITES_IN_DOUBT: &str = "kintsugi_gateway_writes_in_doubt_total";
/// Client connections open now.
pub const CONNECTIONS: &str = "kintsugi_gateway_connections";
/// Connections accepted (refused ones included).
pub const CONNECTIONS_RECEIVED: &str = "kintsugi_gateway_connections_received_total";
/// Connections refused: over the connection limit.
pub const CONNECTIONS_REFUSED: &str = "kintsugi_gateway_connections_refused_total";
/// Connections closed for silence or for what they sent before AUTH: no
/// AUTH in time, too much before AUTH, idle.
pub const CONNECTIONS_CLOSED_UNHEARD: &str = "kintsugi_gateway_connections_closed_unheard_total";
/// rTX commits (the index's own and the buckets').
pub const RTX_COMMITS: &str = "kintsugi_gateway_rtx_commits_total";
/// rTX aborts.
pub const RTX_ABORTS: &str = "kintsugi_gateway_rtx_aborts_total";
/// Expired locks of others repaired.
pub const RTX_REPAIRS: &str = "kintsugi_gateway_rtx_repairs_total";
/// Index operations run again (map changes, lost connections).
pub const RETRIES: &str = "kintsugi_gateway_retries_total";
/// Fabric round trips.
pub const ROUND_TRIPS: &str = "kintsugi_gateway_round_trips_total";
/// Fabric verbs of every kind.
pub const VERBS: &str = "kintsugi_gateway_verbs_total";
/// Buckets created for new keys.
pub const BUCKETS_CREATED: &str = "kintsugi_gateway_buckets_created_total";
/// Buckets moved to a larger size class.
pub const BUCKETS_GROWN: &str = "kintsugi_gateway_buckets_grown_total";
/// Buckets read without a transaction.
pub const LOCK_FREE_READS: &str = "kintsugi_gateway_lock_free_reads_total";
/// The epoch of the map the gateway routes by.
pub const MAP_EPOCH: &str = "kintsugi_gateway_map_epoch";
/// 1 while the gateway's cluster lease certainly holds, else 0.
pub const LEASE_HOLDS: &str = "kintsugi_gateway_lease_holds";

/// Every metric of this crate.
pub const ALL: &[MetricDef] = &[
    MetricDef::counter(COMMANDS, "Requests by command."),
    MetricDef::counter(ERRORS, "Error replies by command."),
    MetricDef::counter(
        WRITES_IN_DOUBT,
        "Writes whose outcome was unknown (cut off at their commit point).",
    ),
    MetricDef {
        name: CONNECTIONS,
        kind: MetricKind::Gauge,
        unit: Some(Unit::Count),
        help: "Client connections open.",
    },
    MetricDef::counter(
        CONNECTIONS_RECEIVED,
        "Connections accepted, refused ones included.",
    ),
    MetricDef::counter(
        CONNECTIONS_REFUSED,
        "Connections refused: over the connection limit.",
    ),
    MetricDef::counter(
        CONNECTIONS_CLOSED_UNHEARD,
        "Connections closed for silence or for what they sent before AUTH (no AUTH in time, too much before AUTH, idle).",
    ),
    MetricDef::counter(RTX_COMMITS, "rTX commits."),
    MetricDef::counter(RTX_ABORTS, "rTX aborts."),
    MetricDef::counter(RTX_REPAIRS, "Expired locks of others repaired."),
    MetricDef::counter(
        RETRIES,
        "Index operations run again (map changes, lost connections).",
    ),
    MetricDef::counter(ROUND_TRIPS, "Fabric round trips."),
    MetricDef::counter(VERBS, "Fabric verbs of every kind."),
    MetricDef::counter(BUCKETS_CREATED, "Buckets created for new keys."),
    MetricDef::counter(BUCKETS_GROWN, "Buckets moved to a larger size class."),
    MetricDef::counter(LOCK_FREE_READS, "Buckets read without a transaction."),
    MetricDef::gauge(MAP_EPOCH, "The epoch of the map the gateway routes by."),
    MetricDef::gauge(LEASE_HOLDS, "1 while the gateway's cluster lease holds, else 0."),
];

/// Registers this crate's descriptions with the installed recorder.
pub fn describe() {
    ALL.iter().for_each(MetricDef::describe);
}

/// Sets the gauges read from the gateway's cluster client at scrape
/// time: the map's `epoch` and whether its lease `holds`.
pub fn sample(epoch: u64, holds: bool) {
    ::metrics::gauge!(MAP_EPOCH).set(epoch as f64);
    ::metrics::gauge!(LEASE_HOLDS).set(if holds { 1.0 } else { 0.0 });
}

/// The label of requests whose name is not in the command table.
const UNKNOWN: &str = "unknown";

/// The gateway's handles on its request and connection metrics.
pub(crate) struct Meters {
    /// By command-table position; the last is [`UNKNOWN`].
    commands: Vec<Counter>,
    errors: Vec<Counter>,
    pub(crate) in_doubt: Counter,
    pub(crate) connections: Gauge,
    pub(crate) received: Counter,
    pub(crate) refused: Counter,
    pub(crate) closed_unheard: Counter,
}

impl Meters {
    pub(crate) fn new() -> Meters {
        let names = || TABLE.iter().map(|s| s.name).chain([UNKNOWN]);
        Meters {
            commands: names()
                .map(|c| ::metrics::counter!(COMMANDS, "command" => c))
                .collect(),
            errors: names()
                .map(|c| ::metrics::counter!(ERRORS, "command" => c))
                .collect(),
            in_doubt: ::metrics::counter!(WRITES_IN_DOUBT),
            connections: ::metrics::gauge!(CONNECTIONS),
            received: ::metrics::counter!(CONNECTIONS_RECEIVED),
            refused: ::metrics::counter!(CONNECTIONS_REFUSED),
            closed_unheard: ::metrics::counter!(CONNECTIONS_CLOSED_UNHEARD),
        }
    }

    /// The slot of a request named `name`, for [`Meters::command`] and
    /// [`Meters::error`].
    pub(crate) fn slot(name: &[u8]) -> usize {
        TABLE
            .iter()
            .position(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
            .unwrap_or(TABLE.len())
    }

    /// Counts a request.
    pub(crate) fn command(&self, slot: usize) {
        if let Some(c) = self.commands.get(slot) {
            c.increment(1);
        }
    }

    /// Counts an error reply.
    pub(crate) fn error(&self, slot: usize) {
        if let Some(c) = self.errors.get(slot) {
            c.increment(1);
        }
    }
}

/// Handles on the keyspace counters, which the pool adds to as each
/// keyspace comes back.
pub(crate) struct KeyspaceMeters {
    commits: Counter,
    aborts: Counter,
    repairs: Counter,
    retries: Counter,
    round_trips: Counter,
    verbs: Counter,
    buckets_created: Counter,
    buckets_grown: Counter,
    lock_free_reads: Counter,
}

impl KeyspaceMeters {
    pub(crate) fn new() -> KeyspaceMeters {
        KeyspaceMeters {
            commits: ::metrics::counter!(RTX_COMMITS),
            aborts: ::metrics::counter!(RTX_ABORTS),
            repairs: ::metrics::counter!(RTX_REPAIRS),
            retries: ::metrics::counter!(RETRIES),
            round_trips: ::metrics::counter!(ROUND_TRIPS),
            verbs: ::metrics::counter!(VERBS),
            buckets_created: ::metrics::counter!(BUCKETS_CREATED),
            buckets_grown: ::metrics::counter!(BUCKETS_GROWN),
            lock_free_reads: ::metrics::counter!(LOCK_FREE_READS),
        }
    }

    /// Adds what a keyspace counted between `before` and `after`. A
    /// counter that went down (never expected: they only grow) adds 0.
    pub(crate) fn add(&self, before: &Counters, after: &Counters) {
        let pairs = [
            (&self.commits, before.commits, after.commits),
            (&self.aborts, before.aborts, after.aborts),
            (&self.repairs, before.repairs, after.repairs),
            (&self.retries, before.retries, after.retries),
            (&self.round_trips, before.round_trips, after.round_trips),
            (&self.verbs, before.verbs, after.verbs),
            (
                &self.buckets_created,
                before.buckets_created,
                after.buckets_created,
            ),
            (&self.buckets_grown, before.buckets_grown, after.buckets_grown),
            (
                &self.lock_free_reads,
                before.lock_free_reads,
                after.lock_free_reads,
            ),
        ];
        for (c, b, a) in pairs {
            let n = a.saturating_sub(b);
            if n > 0 {
                c.increment(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::CompositeKey;

    type Recorded = (
        CompositeKey,
        Option<Unit>,
        Option<::metrics::SharedString>,
        DebugValue,
    );

    #[test]
    fn the_table_is_valid() {
        assert_eq!(fabric::metrics::check_table(ALL), Ok(()));
    }

    /// The value of counter `name` (any labels matching `labels`) in a
    /// snapshot (which reset the recorder's counters when it was taken).
    fn counter_value(snapshot: &[Recorded], name: &str, labels: &[(&str, &str)]) -> u64 {
        snapshot
            .iter()
            .filter(|(k, ..)| k.key().name() == name)
            .filter(|(k, ..)| {
                labels
                    .iter()
                    .all(|(lk, lv)| k.key().labels().any(|l| l.key() == *lk && l.value() == *lv))
            })
            .map(|(.., v)| match v {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    #[test]
    fn keyspace_counters_are_exported_as_deltas() {
        let recorder = DebuggingRecorder::new();
        let snapshots = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let m = KeyspaceMeters::new();
            let first = Counters {
                commits: 2,
                aborts: 1,
                ..Counters::default()
            };
            let second = Counters {
                commits: 5,
                aborts: 1,
                repairs: 1,
                ..Counters::default()
            };
            m.add(&Counters::default(), &first);
            m.add(&first, &second);
            let meters = Meters::new();
            meters.command(Meters::slot(b"SET"));
            meters.error(Meters::slot(b"nosuch"));
        });
        let snapshot = snapshots.snapshot().into_vec();
        let value = |name, labels: &[(&str, &str)]| counter_value(&snapshot, name, labels);
        assert_eq!(value(RTX_COMMITS, &[]), 5);
        assert_eq!(value(RTX_ABORTS, &[]), 1);
        assert_eq!(value(RTX_REPAIRS, &[]), 1);
        assert_eq!(value(COMMANDS, &[("command", "set")]), 1);
        assert_eq!(value(ERRORS, &[("command", "unknown")]), 1);
    }

    #[test]
    fn every_command_has_a_slot_and_others_share_one() {
        let m = Meters::new();
        assert_eq!(m.commands.len(), TABLE.len() + 1);
        assert_eq!(Meters::slot(b"GET"), 0);
        assert_eq!(Meters::slot(b"quit"), TABLE.len() - 1);
        assert_eq!(Meters::slot(b"flushall"), TABLE.len());
    }
}
