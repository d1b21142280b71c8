//! Metrics of a memory node's tcp server, and the one definition of what a
//! metric is ([`MetricDef`]) that every crate's table uses.
//!
//! Recorded through the `metrics` facade: nothing is kept until a process
//! installs a recorder (the `kintsugi` binary does, with
//! `--metrics-listen`), so tests and embedded nodes pay only a no-op.
//! The server takes its handles once per connection and adds per batch,
//! one increment per verb kind it saw, never per verb.

use ::metrics::{Counter, Unit};

use crate::verb::{Completions, Op, OpKind, VerbError};

/// What kind of series a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (its name ends in `_total`).
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets (its name ends in `_seconds`).
    Histogram,
}

/// One metric: its name, kind, unit and what it means.
#[derive(Clone, Copy, Debug)]
pub struct MetricDef {
    /// The Prometheus name (`kintsugi_` prefix).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its unit, if it has one beyond a count.
    pub unit: Option<Unit>,
    /// The `# HELP` text.
    pub help: &'static str,
}

impl MetricDef {
    /// A metric of any kind: what the shorthands below make.
    pub const fn new(name: &'static str, kind: MetricKind, unit: Option<Unit>, help: &'static str) -> Self {
        MetricDef {
            name,
            kind,
            unit,
            help,
        }
    }

    /// A counter of events (`_total`).
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        Self::new(name, MetricKind::Counter, Some(Unit::Count), help)
    }

    /// A gauge without a unit.
    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self::new(name, MetricKind::Gauge, None, help)
    }

    /// A histogram of durations (`_seconds`).
    pub const fn seconds(name: &'static str, help: &'static str) -> Self {
        Self::new(name, MetricKind::Histogram, Some(Unit::Seconds), help)
    }

    /// Registers its description and unit with the installed recorder.
    pub fn describe(&self) {
        let (name, help) = (self.name, self.help);
        match (self.kind, self.unit) {
            (MetricKind::Counter, Some(u)) => ::metrics::describe_counter!(name, u, help),
            (MetricKind::Counter, None) => ::metrics::describe_counter!(name, help),
            (MetricKind::Gauge, Some(u)) => ::metrics::describe_gauge!(name, u, help),
            (MetricKind::Gauge, None) => ::metrics::describe_gauge!(name, help),
            (MetricKind::Histogram, Some(u)) => ::metrics::describe_histogram!(name, u, help),
            (MetricKind::Histogram, None) => ::metrics::describe_histogram!(name, help),
        }
    }
}

/// Why `defs` is not a valid table: a name that is not a Prometheus name
/// with the `kintsugi_` prefix, one whose suffix does not match its kind
/// (`_total` for counters and only them, `_seconds` for histograms), or a
/// name defined twice.
pub fn check_table(defs: &[MetricDef]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for d in defs {
        let n = d.name;
        let chars_ok = n
            .chars()
            .enumerate()
            .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()));
        if !chars_ok || !n.starts_with("kintsugi_") {
            return Err(format!(
                "{n:?} is not a Prometheus name with the kintsugi_ prefix"
            ));
        }
        let suffix_ok = match d.kind {
            MetricKind::Counter => n.ends_with("_total"),
            MetricKind::Gauge => !n.ends_with("_total"),
            MetricKind::Histogram => n.ends_with("_seconds"),
        };
        if !suffix_ok {
            return Err(format!(
                "{n:?}: its suffix does not match its kind ({:?})",
                d.kind
            ));
        }
        if !seen.insert(n) {
            return Err(format!("{n:?} is defined twice"));
        }
    }
    Ok(())
}

/// Verbs a memory node executed for remote clients, by `kind` (read,
/// write, cas, faa, flush).
pub const MEMNODE_VERBS: &str = "kintsugi_memnode_verbs_total";
/// Bytes READs returned and WRITEs stored, by `kind` (read, write).
pub const MEMNODE_BYTES: &str = "kintsugi_memnode_bytes_total";
/// Verbs refused with an error completion, by `error`.
pub const MEMNODE_VERB_ERRORS: &str = "kintsugi_memnode_verb_errors_total";
/// Batches (round trips) executed.
pub const MEMNODE_BATCHES: &str = "kintsugi_memnode_batches_total";
/// Batches refused whole before any verb ran, by `reason` (stale_epoch,
/// lease_lapsed).
pub const MEMNODE_BATCHES_REFUSED: &str = "kintsugi_memnode_batches_refused_total";
/// Client connections open now.
pub const MEMNODE_CONNECTIONS: &str = "kintsugi_memnode_connections";
/// Connections closed at once: over the connection limit.
pub const MEMNODE_CONNECTIONS_REFUSED: &str = "kintsugi_memnode_connections_refused_total";
/// Connections closed for a bad frame or an I/O error.
pub const MEMNODE_CONNECTION_ERRORS: &str = "kintsugi_memnode_connection_errors_total";
/// Connections refused admission (`crate::admission`), by `reason`
/// (no_credential, malformed, bad_mac, fenced, not_ready, full, protocol,
/// hello_timeout, evicted; expired: a batch past its deadline, held in
/// the network).
pub const MEMNODE_ADMISSIONS_REFUSED: &str = "kintsugi_memnode_admissions_refused_total";
/// Connections closed after an idle timeout.
pub const MEMNODE_CONNECTIONS_IDLE_CLOSED: &str = "kintsugi_memnode_connections_idle_closed_total";
/// The node's epoch: batches of older maps are refused.
pub const MEMNODE_EPOCH: &str = "kintsugi_memnode_epoch";
/// 1 while the node serves verbs (its lease current, or none kept), else 0.
pub const MEMNODE_SERVING: &str = "kintsugi_memnode_serving";
/// Regions the node holds.
pub const MEMNODE_REGIONS: &str = "kintsugi_memnode_regions";

/// Every metric of this crate.
pub const ALL: &[MetricDef] = &[
    MetricDef::new(
        MEMNODE_VERBS,
        MetricKind::Counter,
        Some(Unit::Count),
        "Verbs executed for remote clients, by kind.",
    ),
    MetricDef::new(
        MEMNODE_BYTES,
        MetricKind::Counter,
        Some(Unit::Bytes),
        "Bytes read and written by verbs, by kind.",
    ),
    MetricDef::new(
        MEMNODE_VERB_ERRORS,
        MetricKind::Counter,
        Some(Unit::Count),
        "Verbs refused with an error completion, by error.",
    ),
    MetricDef::new(
        MEMNODE_BATCHES,
        MetricKind::Counter,
        Some(Unit::Count),
        "Batches (round trips) executed.",
    ),
    MetricDef::new(
        MEMNODE_BATCHES_REFUSED,
        MetricKind::Counter,
        Some(Unit::Count),
        "Batches refused before any verb ran, by reason (stale_epoch, lease_lapsed).",
    ),
    MetricDef::new(
        MEMNODE_CONNECTIONS,
        MetricKind::Gauge,
        Some(Unit::Count),
        "Client connections open.",
    ),
    MetricDef::new(
        MEMNODE_CONNECTIONS_REFUSED,
        MetricKind::Counter,
        Some(Unit::Count),
        "Connections closed at once: over the connection limit.",
    ),
    MetricDef::new(
        MEMNODE_CONNECTION_ERRORS,
        MetricKind::Counter,
        Some(Unit::Count),
        "Connections closed for a bad frame or an I/O error.",
    ),
    MetricDef::new(
        MEMNODE_ADMISSIONS_REFUSED,
        MetricKind::Counter,
        Some(Unit::Count),
        "Connections or frames refused admission (no, forged or fenced credential; limits), by reason.",
    ),
    MetricDef::new(
        MEMNODE_CONNECTIONS_IDLE_CLOSED,
        MetricKind::Counter,
        Some(Unit::Count),
        "Admitted connections closed after their idle timeout.",
    ),
    MetricDef::new(MEMNODE_EPOCH, MetricKind::Gauge, None, "The node's map epoch."),
    MetricDef::new(
        MEMNODE_SERVING,
        MetricKind::Gauge,
        None,
        "1 while the node serves verbs (its lease holds), else 0.",
    ),
    MetricDef::new(
        MEMNODE_REGIONS,
        MetricKind::Gauge,
        Some(Unit::Count),
        "Regions the node holds.",
    ),
];

/// Registers this crate's descriptions with the installed recorder.
pub fn describe() {
    ALL.iter().for_each(MetricDef::describe);
}

/// Sets the gauges that describe `node` now (epoch, serving, regions):
/// what a scrape samples, so the verb path never sets them.
pub fn sample_node(node: &crate::MemoryNode) {
    ::metrics::gauge!(MEMNODE_EPOCH).set(node.epoch() as f64);
    ::metrics::gauge!(MEMNODE_SERVING).set(if node.serving() { 1.0 } else { 0.0 });
    ::metrics::gauge!(MEMNODE_REGIONS).set(node.descriptor().regions.len() as f64);
}

/// The `kind` labels of verbs, in `verb_slot` order.
const VERB_KINDS: [&str; 5] = ["read", "write", "cas", "faa", "flush"];
/// The `error` labels of verb errors, in `error_slot` order.
const VERB_ERRORS: [&str; 7] = [
    "unknown_region",
    "out_of_bounds",
    "misaligned",
    "bad_key",
    "too_large",
    "flushed",
    "flush_failed",
];

fn verb_slot(kind: &OpKind) -> usize {
    match kind {
        OpKind::Read { .. } => 0,
        OpKind::Write { .. } => 1,
        OpKind::Cas { .. } => 2,
        OpKind::Faa { .. } => 3,
        OpKind::Flush { .. } => 4,
    }
}

fn error_slot(e: &VerbError) -> usize {
    match e {
        VerbError::UnknownRegion { .. } => 0,
        VerbError::OutOfBounds { .. } => 1,
        VerbError::Misaligned { .. } => 2,
        VerbError::BadKey => 3,
        VerbError::TooLarge { .. } => 4,
        VerbError::Flushed => 5,
        VerbError::FlushFailed => 6,
    }
}

/// Why the server refused a whole batch.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    StaleEpoch,
    LeaseLapsed,
}

/// One connection's handles on the server's counters: looked up once,
/// so that a batch costs a few atomic adds.
pub(crate) struct ServerMeters {
    verbs: [Counter; VERB_KINDS.len()],
    read_bytes: Counter,
    written_bytes: Counter,
    errors: [Counter; VERB_ERRORS.len()],
    batches: Counter,
    stale_epoch: Counter,
    lease_lapsed: Counter,
}

impl ServerMeters {
    pub(crate) fn new() -> Self {
        ServerMeters {
            verbs: VERB_KINDS.map(|k| ::metrics::counter!(MEMNODE_VERBS, "kind" => k)),
            read_bytes: ::metrics::counter!(MEMNODE_BYTES, "kind" => "read"),
            written_bytes: ::metrics::counter!(MEMNODE_BYTES, "kind" => "write"),
            errors: VERB_ERRORS.map(|e| ::metrics::counter!(MEMNODE_VERB_ERRORS, "error" => e)),
            batches: ::metrics::counter!(MEMNODE_BATCHES),
            stale_epoch: ::metrics::counter!(MEMNODE_BATCHES_REFUSED, "reason" => "stale_epoch"),
            lease_lapsed: ::metrics::counter!(MEMNODE_BATCHES_REFUSED, "reason" => "lease_lapsed"),
        }
    }

    /// Counts one executed batch: `ops` and their completions `out`.
    pub(crate) fn batch(&self, ops: &[Op], out: &Completions) {
        let t = Tally::of(ops, out);
        self.batches.increment(1);
        add_nonzero(&self.verbs, &t.verbs);
        add_nonzero(&self.errors, &t.errors);
        add_nonzero(
            [&self.read_bytes, &self.written_bytes],
            &[t.read_bytes, t.written_bytes],
        );
    }

    /// Counts a batch refused whole.
    pub(crate) fn refused(&self, why: Refusal) {
        match why {
            Refusal::StaleEpoch => self.stale_epoch.increment(1),
            Refusal::LeaseLapsed => self.lease_lapsed.increment(1),
        }
    }
}

/// What one batch did, by label slot.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    verbs: [u64; VERB_KINDS.len()],
    errors: [u64; VERB_ERRORS.len()],
    /// Bytes of READs that succeeded.
    read_bytes: u64,
    /// Bytes of WRITEs that succeeded.
    written_bytes: u64,
}

impl Tally {
    fn of(ops: &[Op], out: &Completions) -> Tally {
        let mut t = Tally::default();
        for (op, done) in ops.iter().zip(out.as_slice()) {
            t.verbs[verb_slot(&op.kind)] += 1;
            match (done, &op.kind) {
                (Err(e), _) => t.errors[error_slot(e)] += 1,
                (Ok(_), OpKind::Read { len }) => t.read_bytes += u64::from(*len),
                (Ok(_), OpKind::Write { data }) => t.written_bytes += u64::from(data.len),
                (Ok(_), _) => {}
            }
        }
        t
    }
}

fn add_nonzero<'a>(counters: impl IntoIterator<Item = &'a Counter>, counts: &[u64]) {
    for (c, &n) in counters.into_iter().zip(counts) {
        if n > 0 {
            c.increment(n);
        }
    }
}

/// Holds one open connection in the gauge while it lives.
pub(crate) struct ConnectionGauge(::metrics::Gauge);

impl ConnectionGauge {
    pub(crate) fn open() -> Self {
        let g = ::metrics::gauge!(MEMNODE_CONNECTIONS);
        g.increment(1.0);
        ConnectionGauge(g)
    }
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Counts a connection refused at the limit.
pub(crate) fn connection_refused() {
    ::metrics::counter!(MEMNODE_CONNECTIONS_REFUSED).increment(1);
}

/// Counts a connection or frame refused admission, by its reason.
pub(crate) fn admission_refused(why: &crate::admission::Refusal) {
    use crate::admission::Refusal as R;
    let reason = match why {
        R::NoCredential => "no_credential",
        R::Malformed(_) => "malformed",
        R::BadMac => "bad_mac",
        R::Fenced { .. } => "fenced",
        R::NotReady(_) => "not_ready",
        R::Full { .. } => "full",
        R::Protocol(_) => "protocol",
        R::Expired { .. } => "expired",
    };
    ::metrics::counter!(MEMNODE_ADMISSIONS_REFUSED, "reason" => reason).increment(1);
}

/// Counts an unauthenticated connection closed unheard: `reason` is
/// hello_timeout or evicted.
pub(crate) fn preauth_closed(reason: &'static str) {
    ::metrics::counter!(MEMNODE_ADMISSIONS_REFUSED, "reason" => reason).increment(1);
}

/// Counts a connection closed for idling.
pub(crate) fn idle_closed() {
    ::metrics::counter!(MEMNODE_CONNECTIONS_IDLE_CLOSED).increment(1);
}

/// Counts a connection closed by an error.
pub(crate) fn connection_error() {
    ::metrics::counter!(MEMNODE_CONNECTION_ERRORS).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_valid() {
        assert_eq!(check_table(ALL), Ok(()));
    }

    #[test]
    fn bad_tables_are_refused() {
        let counter = |name| MetricDef::new(name, MetricKind::Counter, None, "");
        assert!(
            check_table(&[counter("kintsugi_x")]).is_err(),
            "a counter without _total"
        );
        assert!(check_table(&[counter("x_total")]).is_err(), "no prefix");
        assert!(check_table(&[counter("kintsugi_a-b_total")]).is_err(), "a dash");
        assert!(check_table(&[counter("kintsugi_x_total"), counter("kintsugi_x_total")]).is_err());
        assert!(check_table(&[MetricDef::new("kintsugi_x_total", MetricKind::Gauge, None, "")]).is_err());
        assert!(check_table(&[MetricDef::new("kintsugi_x", MetricKind::Histogram, None, "")]).is_err());
        assert_eq!(check_table(&[counter("kintsugi_x_total")]), Ok(()));
    }

    #[test]
    fn a_batch_is_tallied_by_kind_error_and_bytes() {
        use crate::verb::PayloadRange;
        use crate::{MemoryNode, RegionSpec};
        let node = MemoryNode::anonymous(1, &[RegionSpec { id: 1, size: 4096 }]).expect("node");
        let key = node.descriptor().regions[0].key;
        let op = |kind, offset| Op {
            node: 1,
            region: 1,
            key,
            offset,
            kind,
        };
        let payload = [7u8; 16];
        let ops = [
            op(
                OpKind::Write {
                    data: PayloadRange { start: 0, len: 16 },
                },
                0,
            ),
            op(OpKind::Read { len: 16 }, 0),
            op(OpKind::Cas { expect: 0, new: 1 }, 64),
            op(OpKind::Faa { add: 1 }, 3),
            // After the misaligned FAA, every later verb to the node is
            // flushed: counted as a verb and an error, its bytes not.
            op(OpKind::Read { len: 8 }, 0),
        ];
        let mut out = Completions::default();
        crate::memnode::execute_inline(|_| Some(&node), node.epoch(), &ops, &payload, &mut out)
            .expect("runs");
        let t = Tally::of(&ops, &out);
        assert_eq!(t.verbs, [2, 1, 1, 1, 0]);
        assert_eq!(t.errors, [0, 0, 1, 0, 0, 1, 0]);
        assert_eq!((t.read_bytes, t.written_bytes), (16, 16));
    }

    #[test]
    fn every_verb_kind_and_error_has_a_label() {
        // The slot functions are exhaustive matches; this pins the arrays
        // to them, so a new verb or error cannot index past a label.
        assert_eq!(verb_slot(&OpKind::Flush { len: 0 }), VERB_KINDS.len() - 1);
        assert_eq!(error_slot(&VerbError::FlushFailed), VERB_ERRORS.len() - 1);
    }
}
