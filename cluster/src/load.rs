//! A YCSB-A-shaped load whose every acknowledged write can be checked: each
//! task owns a disjoint range of keys and writes values that name it and
//! count up, so the last value a task was told was written is what its key
//! must hold afterwards, whatever happened meanwhile (a promotion, a kill,
//! a repair). What `kintsugi cluster ycsb` runs and the cluster tests check.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use control_plane::state::IndexKind;
use index::IndexError;

use crate::{Cluster, ClusterError, Table, Tree};

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

/// Runs `spec` on `cluster` until its duration passes or `stop` is set.
/// `ops` counts completed operations as they complete (for progress).
pub async fn run(
    cluster: &Cluster,
    spec: &LoadSpec,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
) -> Result<LoadReport, ClusterError> {
    run_observed(cluster, spec, stop, ops, Arc::default()).await
}

/// [`run`], noting in `firsts` when operations first complete under each
/// newer epoch.
pub async fn run_observed(
    cluster: &Cluster,
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
    let mut handles = Vec::with_capacity(spec.tasks);
    for _ in 0..spec.tasks {
        handles.push(Handle::open(cluster, &spec.index, spec.kind).await?);
    }
    let deadline = Instant::now() + spec.duration;
    let mut set = tokio::task::JoinSet::new();
    for (task, mut h) in handles.into_iter().enumerate() {
        let (spec, stop, ops, firsts) = (spec.clone(), stop.clone(), ops.clone(), firsts.clone());
        set.spawn(async move {
            let mut acked = BTreeMap::new();
            let mut report = LoadReport::default();
            // xorshift: seeded, per task.
            let mut x = spec.seed ^ (task as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut seq = 0u64;
            let result = loop {
                if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    break Ok(());
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(&spec, task, x % spec.keys_per_task);
                // YCSB A: half reads, half updates.
                let done = if x & (1 << 40) == 0 {
                    h.get(k).await.map(|_| ())
                } else {
                    // A write in doubt may or may not have landed (and will
                    // not land later: its commit was settled or never
                    // happened). Writing the key again, acknowledged, decides
                    // what it holds.
                    let mut written = Ok(());
                    for _ in 0..IN_DOUBT_REWRITES_MAX {
                        seq += 1;
                        let v = (task as u64 + 1) << 40 | seq;
                        written = h.put(k, v).await.map(|()| {
                            acked.insert(k, v);
                            report.writes += 1;
                        });
                        match &written {
                            Err(IndexError::InDoubt(_)) => report.in_doubt += 1,
                            _ => break,
                        }
                    }
                    written
                };
                if let Err(e) = done {
                    break Err(format!("task {task}: {e}"));
                }
                report.ops += 1;
                ops.fetch_add(1, Ordering::Relaxed);
                firsts.note(h.epoch());
                // Shm verbs complete inline: let the runtime breathe.
                if report.ops % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            };
            report.retries = h.retries();
            report.acked = acked;
            if let Err(e) = result {
                report.errors.push(e);
            }
            report
        });
    }
    let mut total = LoadReport::default();
    while let Some(joined) = set.join_next().await {
        let r = joined.map_err(|e| ClusterError::Map(format!("a load task failed: {e}")))?;
        total.ops += r.ops;
        total.writes += r.writes;
        total.retries += r.retries;
        total.in_doubt += r.in_doubt;
        total.acked.extend(r.acked);
        total.errors.extend(r.errors);
    }
    Ok(total)
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
