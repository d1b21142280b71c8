//! The clients of a local-cluster run (`run::replica`): one cluster session
//! per client (its own lease, owner ids, map and fabric, as a client process
//! has), `threads_per_client` tasks on each, every operation recorded as an
//! invocation and its completion (ok, fail, or info: outcome unknown) for the
//! linearizability checker.
//!
//! The tasks share the key space, so that operations on one key overlap and
//! the checker has something to decide: YCSB A's mix, half reads, and the
//! writes split among put, insert, update and delete. Every value written
//! is unique to its process and sequence number, so a read names the write
//! it saw.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::load::Handle;
use cluster::Cluster;
use control_plane::state::IndexKind;

use index::IndexError;
use txn::TxStats;

use crate::linearizability::{Event, EventType, Function, OpResult};

/// The process id of the final reads: above any client's, whose
/// incarnations count up by the number of tasks.
pub const CHECKER_PROCESS: u64 = 1 << 23;

/// A process id's sequence number stays in the value's low bits.
const SEQ_BITS: u32 = 40;

/// Of every 100 ops on an ordered index, how many are scans (taken from the
/// gets' share). Each is checked as a read of every key it covers, absent
/// ones too, so a scan costs the checker about twice its entries in reads:
/// few scans still read every key many times in a run.
const SCAN_PERCENT: u64 = 2;

/// The most entries a scan asks for: a leaf or two, so a scan stays short
/// against the faults' windows and its reads few for the checker.
const SCAN_ENTRIES_MAX: u64 = 8;

/// How an op that completed ok ended.
enum Done {
    /// What it returned (nothing for a put).
    Result(Option<OpResult>),
    /// A scan's entries.
    Entries(Vec<(u64, u64)>),
}

/// What the tasks run.
#[derive(Clone, Debug)]
pub struct WorkersSpec {
    /// The index, opened by name.
    pub index: String,
    /// B+tree or hash.
    pub kind: IndexKind,
    /// Keys `1..=keys`, shared by every task.
    pub keys: u64,
    /// How long to run.
    pub duration: Duration,
    /// Seeds each task's op stream.
    pub seed: u64,
}

/// What the tasks did.
#[derive(Debug, Default)]
pub struct WorkersReport {
    /// Operations that completed ok.
    pub ops: u64,
    /// Of them, writes.
    pub writes: u64,
    /// Operations the handles ran again after a map change or a lost
    /// connection.
    pub retries: u64,
    /// Why a task stopped early, per task that did (by task number, which
    /// names its session as processes don't: a task's later incarnations
    /// are other processes): an error that reached the application.
    pub errors: Vec<(u64, String)>,
    /// Writes whose outcome the index could not know (cut off at their
    /// commit point: `IndexError::InDoubt`), recorded as `info`. Each
    /// ended its process; the task went on as a new one.
    pub in_doubt: u64,
    /// Every task's events, in time order.
    pub events: Vec<Event>,
    /// Each client session's rTX counters, summed over its tasks (by
    /// client number): what a faulty client did to others' locks.
    pub tx_by_client: Vec<TxStats>,
}

/// The first process id of the heirs a `late-delivery` brings in: above any
/// client's incarnations, below [`CHECKER_PROCESS`].
pub const HEIR_PROCESS: u64 = 1 << 22;

/// Runs `threads` tasks on each of `sessions` until the duration passes or
/// `stop` is set; `ops` counts completed operations as they complete (the
/// timeline), `t0` is the run's clock (event times are nanoseconds since).
/// Task `i` of session `c` is process `c * threads + i`.
pub async fn run(
    sessions: &[Arc<Cluster>],
    threads: usize,
    spec: &WorkersSpec,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    t0: Instant,
) -> Result<WorkersReport, cluster::ClusterError> {
    let until = Instant::now() + spec.duration;
    run_until(sessions, threads, 0, spec, (stop, ops), t0, until).await
}

/// [`run`] until `until`, its processes numbered from `first` (an heir's:
/// [`HEIR_PROCESS`] and up).
pub async fn run_until(
    sessions: &[Arc<Cluster>],
    threads: usize,
    first: u64,
    spec: &WorkersSpec,
    (stop, ops): (Arc<AtomicBool>, Arc<AtomicU64>),
    t0: Instant,
    until: Instant,
) -> Result<WorkersReport, cluster::ClusterError> {
    let mut handles = Vec::with_capacity(sessions.len() * threads);
    for s in sessions {
        for _ in 0..threads {
            handles.push(Handle::open(s, &spec.index, spec.kind).await?);
        }
    }
    let deadline = until;
    let tasks = handles.len() as u64;
    let mut set = tokio::task::JoinSet::new();
    for (process, h) in handles.into_iter().enumerate() {
        let (spec, stop, ops) = (spec.clone(), stop.clone(), ops.clone());
        set.spawn(async move {
            let first = first + process as u64;
            (
                first,
                task(first, tasks, h, &spec, &stop, &ops, t0, deadline).await,
            )
        });
    }
    let mut total = WorkersReport {
        tx_by_client: vec![TxStats::default(); sessions.len()],
        ..WorkersReport::default()
    };
    while let Some(joined) = set.join_next().await {
        let (task, r) =
            joined.map_err(|e| cluster::ClusterError::Map(format!("a client task failed: {e}")))?;
        if let Some(client) = total.tx_by_client.get_mut(task as usize / threads.max(1)) {
            for t in &r.tx_by_client {
                *client += *t;
            }
        }
        total.absorb(r);
    }
    Ok(total)
}

impl WorkersReport {
    /// Adds `other`'s operations, errors and events to this report's
    /// (events kept in time order; rTX counters are per client, summed by
    /// the caller).
    pub fn absorb(&mut self, other: WorkersReport) {
        self.ops += other.ops;
        self.writes += other.writes;
        self.retries += other.retries;
        self.errors.extend(other.errors);
        self.in_doubt += other.in_doubt;
        self.events.extend(other.events);
        self.events.sort_by_key(|e| e.time_ns);
    }
}

fn ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

#[allow(clippy::too_many_arguments)]
async fn task(
    first: u64,
    tasks: u64,
    mut h: Handle,
    spec: &WorkersSpec,
    stop: &AtomicBool,
    ops: &AtomicU64,
    t0: Instant,
    deadline: Instant,
) -> WorkersReport {
    let mut report = WorkersReport::default();
    // After an `info` the task goes on as a new process (Jepsen's rule):
    // `first`, then `first + tasks`, and so on.
    let mut process = first;
    let ordered = matches!(h, Handle::Tree(_));
    // xorshift: seeded, per task.
    let mut x = spec.seed ^ (first + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = 1 + (x >> 8) % spec.keys;
        let f = match x % 100 {
            0..SCAN_PERCENT if ordered => Function::Scan,
            0..50 => Function::Get,
            50..70 => Function::Put,
            70..80 => Function::Insert,
            80..90 => Function::Update,
            _ => Function::Delete,
        };
        let value = match f {
            Function::Scan => Some(1 + (x >> 32) % SCAN_ENTRIES_MAX),
            _ => f.takes_value().then(|| {
                seq += 1;
                (process + 1) << SEQ_BITS | seq
            }),
        };
        report.events.push(Event::invoke(process, f, key, value, ns(t0)));
        let v = value.unwrap_or_default();
        let done = match f {
            Function::Get => h.get(key).await.map(|r| Done::Result(Some(OpResult::Value(r)))),
            Function::Scan => match h.scan(key, v as usize).await {
                Some(scanned) => scanned.map(Done::Entries),
                None => unreachable!("scans are drawn for ordered indexes only"),
            },
            Function::Put => h.put(key, v).await.map(|()| Done::Result(None)),
            Function::Insert => h
                .insert(key, v)
                .await
                .map(|w| Done::Result(Some(OpResult::Wrote(w)))),
            Function::Update => h
                .update(key, v)
                .await
                .map(|w| Done::Result(Some(OpResult::Wrote(w)))),
            Function::Delete => h
                .delete(key)
                .await
                .map(|w| Done::Result(Some(OpResult::Wrote(w)))),
        };
        let time_ns = ns(t0);
        match done {
            Ok(done) => {
                report.events.push(match done {
                    Done::Result(result) => {
                        Event::complete(process, EventType::Ok, f, key, value, result, time_ns)
                    }
                    Done::Entries(entries) => Event::scanned(process, key, v, entries, time_ns),
                });
                report.ops += 1;
                report.writes += u64::from(!matches!(f, Function::Get | Function::Scan));
                ops.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // The op may or may not have taken effect: unknown, and
                // this process issues nothing more (Jepsen's rule).
                report.events.push(Event::complete(
                    process,
                    EventType::Info,
                    f,
                    key,
                    value,
                    None,
                    time_ns,
                ));
                if matches!(e, IndexError::InDoubt(_)) {
                    report.in_doubt += 1;
                    process += tasks;
                    seq = 0;
                    continue;
                }
                report.errors.push((
                    first,
                    format!("process {process}: {} of key {key}: {e}", f.name()),
                ));
                break;
            }
        }
        // Shm verbs complete inline: let the runtime breathe.
        if report.ops % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // A dtx client's last release, before the task's handle goes idle. (A
    // failure here is the next reader's to wait out: nothing to report.)
    let _ = match &mut h {
        Handle::Tree(t) => t.inner().flush().await,
        Handle::Table(t) => t.inner().flush().await,
    };
    report.retries = h.retries();
    report.tx_by_client = h.tx_stats().into_iter().collect();
    report
}

/// Reads every key `1..=keys` once, as process `process`, after everything
/// else: the final state, whose reads the checker holds against the
/// history (an acknowledged write that a later read does not see is lost).
pub async fn read_all(
    cluster: &Cluster,
    spec: &WorkersSpec,
    process: u64,
    t0: Instant,
) -> Result<Vec<Event>, cluster::ClusterError> {
    let mut h = Handle::open(cluster, &spec.index, spec.kind).await?;
    let mut events = Vec::with_capacity(2 * spec.keys as usize);
    for key in 1..=spec.keys {
        events.push(Event::invoke(process, Function::Get, key, None, ns(t0)));
        let found = h.get(key).await?;
        events.push(Event::complete(
            process,
            EventType::Ok,
            Function::Get,
            key,
            None,
            Some(OpResult::Value(found)),
            ns(t0),
        ));
    }
    Ok(events)
}
