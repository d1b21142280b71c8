//! A YCSB-A-shaped load whose every acknowledged write can be checked: each
//! task owns a disjoint range of keys and writes values that name it and
//! count up, so the last value a task was told was written is what its key
//! must hold afterwards, whatever happened meanwhile (a promotion, a kill,
//! a repair, this process's own lease lost and the process joined again as
//! a new client). What `kintsugi cluster ycsb` runs and the cluster tests
//! check.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use control_plane::state::IndexKind;
use index::IndexError;

use crate::{Cluster, ClusterError, Membership, Table, Tree};

/// Keys one task may own: a value carries the key's task in its high bits.
pub const KEYS_PER_TASK_MAX: u64 = 1 << 32;

/// Writes of one key in a row whose outcome may be unknown before the
/// load gives up on it: each is a map change under a commit.
const IN_DOUBT_REWRITES_MAX: u32 = 8;

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// The index, opened (or created) by name.
    pub index: String,
    /// B+tree or hash.
    pub kind: IndexKind,
    /// Concurrent tasks, one index handle (owner id) each.
    pub tasks: usize,
    /// Keys each task owns.
    pub keys_per_task: u64,
    /// How long to run.
    pub duration: Duration,
    /// Seeds the key choice.
    pub seed: u64,
}

/// What a load did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Operations completed.
    pub ops: u64,
    /// Writes acknowledged.
    pub writes: u64,
    /// Operations run again after a map change or a lost connection.
    pub retries: u64,
    /// Writes whose outcome the index could not know (`IndexError::InDoubt`:
    /// cut off at their commit point); each was followed by another write
    /// of the same key, acknowledged, which decides what the key holds.
    pub in_doubt: u64,
    /// Times a task reopened its handle under a new client, after this
    /// process's lease was lost and it joined again ([`Membership`]).
    pub rejoins: u64,
    /// The last acknowledged value of every key written.
    pub acked: BTreeMap<u64, u64>,
    /// Why a task stopped early, per task that did.
    pub errors: Vec<String>,
}

/// One open handle of either kind.
pub enum Handle {
    /// A B+tree.
    Tree(Tree),
    /// A hash table.
    Table(Table),
}

impl Handle {
    /// Opens `name` as `kind`.
    pub async fn open(cluster: &Cluster, name: &str, kind: IndexKind) -> Result<Handle, ClusterError> {
        Ok(match kind {
            IndexKind::Btree => Handle::Tree(cluster.btree(name).await?),
            IndexKind::Hash => Handle::Table(cluster.hash(name).await?),
        })
    }

    /// The value of `key`.
    pub async fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        match self {
            Handle::Tree(t) => t.get(key).await,
            Handle::Table(t) => t.get(key).await,
        }
    }

    /// Sets `key` to `value`.
    pub async fn put(&mut self, key: u64, value: u64) -> Result<(), IndexError> {
        match self {
            Handle::Tree(t) => t.put(key, value).await.map(|_| ()),
            Handle::Table(t) => t.put(key, value).await,
        }
    }

    /// Inserts `key` if absent; `false` (nothing written) if present.
    pub async fn insert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        match self {
            Handle::Tree(t) => t
                .insert(key, value)
                .await
                .map(|w| w != index::btree::Written::Unchanged),
            Handle::Table(t) => t.insert(key, value).await,
        }
    }

    /// Replaces `key`'s value if present; `false` (nothing written) if absent.
    pub async fn update(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        match self {
            Handle::Tree(t) => t
                .update(key, value)
                .await
                .map(|w| w != index::btree::Written::Unchanged),
            Handle::Table(t) => t.update(key, value).await,
        }
    }

    /// Removes `key`; `false` if it was absent.
    pub async fn delete(&mut self, key: u64) -> Result<bool, IndexError> {
        match self {
            Handle::Tree(t) => t.delete(key).await.map(|w| w != index::btree::Written::Unchanged),
            Handle::Table(t) => t.delete(key).await,
        }
    }

    /// Up to `count` entries with keys at or above `from`, in key order;
    /// `None` for a hash table, which keeps no order to scan.
    pub async fn scan(&mut self, from: u64, count: usize) -> Option<Result<Vec<(u64, u64)>, IndexError>> {
        match self {
            Handle::Tree(t) => Some(t.scan(from, count).await),
            Handle::Table(_) => None,
        }
    }

    /// The rTX client's counters (`None` for the optimal variant, which
    /// has none).
    pub fn tx_stats(&self) -> Option<txn::TxStats> {
        match self {
            Handle::Tree(t) => t.tx_stats(),
            Handle::Table(t) => t.tx_stats(),
        }
    }

    /// The epoch of the map this process routes by now.
    pub fn epoch(&self) -> fabric::Epoch {
        match self {
            Handle::Tree(t) => t.epoch(),
            Handle::Table(t) => t.epoch(),
        }
    }

    /// Operations retried so far.
    pub fn retries(&self) -> u64 {
        match self {
            Handle::Tree(t) => t.retries(),
            Handle::Table(t) => t.retries(),
        }
    }
}

/// When an operation first completed under each newer epoch: how soon the
/// clients were served again after a map change.
#[derive(Debug, Default)]
pub struct Firsts {
    newest: AtomicU64,
    seen: std::sync::Mutex<Vec<(fabric::Epoch, Instant)>>,
}

impl Firsts {
    /// An operation completed now, with the process at `epoch`.
    pub fn note(&self, epoch: fabric::Epoch) {
        // The common case, nothing new, is one load.
        if epoch <= self.newest.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if self.newest.fetch_max(epoch, Ordering::AcqRel) < epoch {
            seen.push((epoch, now));
        }
    }

    /// When an operation first completed at `epoch` or later.
    pub fn first_at(&self, epoch: fabric::Epoch) -> Option<Instant> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter().filter(|(e, _)| *e >= epoch).map(|(_, t)| *t).min()
    }
}

/// The key `i` of task `task`.
fn key(spec: &LoadSpec, task: usize, i: u64) -> u64 {
    1 + task as u64 * spec.keys_per_task + i
}

/// Runs `spec` on the client `membership` holds until its duration passes
/// or `stop` is set. `ops` counts completed operations as they complete
/// (for progress). A task whose operation fails because the client's lease
/// was lost reopens its handle under the client the membership joins with
/// next ([`Membership::keep`], run by the caller) and goes on; a write cut
/// off so is written again, as one in doubt is.
pub async fn run(
    membership: Arc<Membership>,
    spec: &LoadSpec,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
) -> Result<LoadReport, ClusterError> {
    run_observed(membership, spec, stop, ops, Arc::default()).await
}

/// [`run`], noting in `firsts` when operations first complete under each
/// newer epoch.
pub async fn run_observed(
    membership: Arc<Membership>,
    spec: &LoadSpec,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    firsts: Arc<Firsts>,
) -> Result<LoadReport, ClusterError> {
    if spec.tasks == 0 || spec.keys_per_task == 0 || spec.keys_per_task > KEYS_PER_TASK_MAX {
        return Err(ClusterError::Map(format!(
            "a load needs at least one task and 1 to {KEYS_PER_TASK_MAX} keys per task"
        )));
    }
    let cluster = membership.current();
    let mut handles = Vec::with_capacity(spec.tasks);
    for _ in 0..spec.tasks {
        handles.push(Handle::open(&cluster, &spec.index, spec.kind).await?);
    }
    let deadline = Instant::now() + spec.duration;
    let mut set = tokio::task::JoinSet::new();
    for (task, h) in handles.into_iter().enumerate() {
        let mut t = Task {
            task,
            spec: spec.clone(),
            membership: membership.clone(),
            cluster: cluster.clone(),
            h,
            seq: 0,
            report: LoadReport::default(),
        };
        let (stop, ops, firsts) = (stop.clone(), ops.clone(), firsts.clone());
        set.spawn(async move {
            // xorshift: seeded, per task.
            let mut x = t.spec.seed ^ (task as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let result = loop {
                if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    break Ok(());
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(&t.spec, task, x % t.spec.keys_per_task);
                // YCSB A: half reads, half updates.
                let write = x & (1 << 40) != 0;
                if let Err(e) = t.op(k, write).await {
                    break Err(format!("task {task}: {e}"));
                }
                t.report.ops += 1;
                ops.fetch_add(1, Ordering::Relaxed);
                firsts.note(t.h.epoch());
                // Shm verbs complete inline: let the runtime breathe.
                if t.report.ops % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            };
            t.report.retries += t.h.retries();
            if let Err(e) = result {
                t.report.errors.push(e);
            }
            t.report
        });
    }
    drop(cluster);
    let mut total = LoadReport::default();
    while let Some(joined) = set.join_next().await {
        let r = joined.map_err(|e| ClusterError::Map(format!("a load task failed: {e}")))?;
        total.ops += r.ops;
        total.writes += r.writes;
        total.retries += r.retries;
        total.in_doubt += r.in_doubt;
        total.rejoins += r.rejoins;
        total.acked.extend(r.acked);
        total.errors.extend(r.errors);
    }
    Ok(total)
}

/// One task of a load: its handle, and the client it was opened under.
struct Task {
    task: usize,
    spec: LoadSpec,
    membership: Arc<Membership>,
    cluster: Arc<Cluster>,
    h: Handle,
    seq: u64,
    report: LoadReport,
}

impl Task {
    /// One operation on `k`, a write if `write`: run again under a new
    /// client if it failed because this one's lease was lost.
    async fn op(&mut self, k: u64, write: bool) -> Result<(), String> {
        loop {
            let done = if write {
                self.write(k).await
            } else {
                self.h.get(k).await.map(|_| ())
            };
            let Err(e) = done else { return Ok(()) };
            if self.cluster.lease_holds() && Arc::ptr_eq(&self.cluster, &self.membership.current()) {
                return Err(e.to_string());
            }
            // The lease was lost under it: nothing more is issued under the
            // old owner ids; recovery rolls what the cut-off write left.
            let next = self
                .membership
                .next_after(&self.cluster)
                .await
                .map_err(|lost| format!("{e}; {lost}"))?;
            self.report.retries += self.h.retries();
            self.h = Handle::open(&next, &self.spec.index, self.spec.kind)
                .await
                .map_err(|open| format!("{e}; reopening under client {}: {open}", next.id()))?;
            self.cluster = next;
            self.report.rejoins += 1;
        }
    }

    /// A write of `k`. One in doubt may or may not have landed (and will
    /// not land later: its commit was settled or never happened). Writing
    /// the key again, acknowledged, decides what it holds.
    async fn write(&mut self, k: u64) -> Result<(), IndexError> {
        let mut written = Ok(());
        for _ in 0..IN_DOUBT_REWRITES_MAX {
            self.seq += 1;
            let v = (self.task as u64 + 1) << 40 | self.seq;
            written = self.h.put(k, v).await;
            match &written {
                Ok(()) => {
                    self.report.acked.insert(k, v);
                    self.report.writes += 1;
                    break;
                }
                Err(IndexError::InDoubt(_)) => self.report.in_doubt += 1,
                Err(_) => break,
            }
        }
        written
    }
}

/// Keys whose value is not their last acknowledged write: `(key, found,
/// acknowledged)`. Empty when nothing acknowledged was lost.
pub async fn lost(
    cluster: &Cluster,
    index: &str,
    kind: IndexKind,
    acked: &BTreeMap<u64, u64>,
) -> Result<Vec<(u64, Option<u64>, u64)>, ClusterError> {
    let mut h = Handle::open(cluster, index, kind).await?;
    let mut lost = Vec::new();
    for (&k, &v) in acked {
        let found = h.get(k).await?;
        if found != Some(v) {
            lost.push((k, found, v));
        }
    }
    Ok(lost)
}
