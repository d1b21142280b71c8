//! Drives an index with a YCSB op stream: the client loop shared by
//! `kintsugi bench ycsb` and chaos experiments.
//!
//! One [`drive`] call is one client (one owner id, one coroutine): it takes
//! ops from its generator and runs them until the deadline, counting ops by
//! kind and sampling latency. The caller runs as many as it wants on as many
//! threads as it wants, and adds the [`ClientResult`]s up.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use index::btree::BTree;
use index::hash::HashTable;
use index::IndexError;

use crate::{Op, OpGenerator};

/// Latency of one op in every this many is recorded: reading the clock for
/// every op would cost as much as a local-memory op itself.
pub const LATENCY_SAMPLE_EVERY: u64 = 16;
/// Ops between looks at the clock for the deadline.
const DEADLINE_CHECK_EVERY: u64 = 64;

/// An index client the driver can run ops on.
#[derive(Debug)]
pub enum IndexClient {
    /// A B+tree client.
    BTree(Box<BTree>),
    /// A RACE hash table client: no scans.
    Hash(Box<HashTable>),
}

/// Why [`drive`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The op stream holds an op the index cannot run (a scan on a hash
    /// table): callers should refuse such a workload before they start.
    #[error("{index} has no {op}")]
    Unsupported {
        /// The index.
        index: &'static str,
        /// The op it lacks.
        op: &'static str,
    },
}

impl IndexClient {
    /// Sends what the client still owes before it is dropped (a dtx
    /// client's last release: `BTree::flush`, `HashTable::flush`).
    pub async fn flush(&mut self) -> Result<(), DriveError> {
        match self {
            IndexClient::BTree(t) => t.flush().await?,
            IndexClient::Hash(t) => t.flush().await?,
        }
        Ok(())
    }

    /// Follows the reclaims of `view` (`txn::quiesce`): a B+tree's rtx
    /// client must, under a control plane that reclaims dead clients'
    /// blocks. A hash table's heap is never reclaimed.
    pub fn follow_reclaims(&mut self, view: std::sync::Arc<txn::ReclaimView>) {
        if let IndexClient::BTree(t) = self {
            t.follow_reclaims(view);
        }
    }

    /// Runs one op: whether it found (read, update) or wrote (insert) its
    /// key, or for a scan whether it found any key.
    pub async fn run(&mut self, op: Op) -> Result<bool, DriveError> {
        match self {
            IndexClient::BTree(t) => match op {
                Op::Read { key } => Ok(t.get(key).await?.is_some()),
                Op::Update { key, value } => {
                    Ok(t.update(key, value).await? != index::btree::Written::Unchanged)
                }
                Op::Insert { key, value } => {
                    Ok(t.upsert(key, value).await? != index::btree::Written::Unchanged)
                }
                Op::Scan { start, count } => Ok(!t.scan(start, count).await?.is_empty()),
            },
            IndexClient::Hash(t) => match op {
                Op::Read { key } => Ok(t.get(key).await?.is_some()),
                Op::Update { key, value } => Ok(t.update(key, value).await?),
                Op::Insert { key, value } => {
                    t.upsert(key, value).await?;
                    Ok(true)
                }
                Op::Scan { .. } => Err(DriveError::Unsupported {
                    index: "RACE hashing",
                    op: "range scans",
                }),
            },
        }
    }

    /// Repairs every expired lock of the index, as the next client to meet
    /// each would (rtx; optimal has nothing to repair with). Returns how many.
    pub async fn repair_expired_locks(&mut self) -> Result<usize, IndexError> {
        match self {
            IndexClient::BTree(t) => t.repair_expired_locks().await,
            IndexClient::Hash(t) => t.repair_expired_locks().await,
        }
    }

    /// The fabric counters of this client.
    pub fn fabric_stats(&mut self) -> fabric::Stats {
        match self {
            IndexClient::BTree(t) => t.fabric().stats(),
            IndexClient::Hash(t) => t.fabric().stats(),
        }
    }

    /// rTX counters, if the index runs on rTX.
    pub fn tx_stats(&self) -> txn::TxStats {
        match self {
            IndexClient::BTree(t) => t.tx_stats().unwrap_or_default(),
            IndexClient::Hash(t) => t.tx_stats().unwrap_or_default(),
        }
    }
}

/// What one client did.
#[derive(Clone, Debug)]
pub struct ClientResult {
    /// Ops completed.
    pub ops: u64,
    /// Ops by kind: read, update, insert, scan.
    pub by_kind: [u64; 4],
    /// Reads and updates that found no key (scans that found nothing).
    pub misses: u64,
    /// Sampled op latency in nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// Fabric counters over the run.
    pub fabric: fabric::Stats,
    /// rTX counters over the run.
    pub tx: txn::TxStats,
    /// Time spent.
    pub elapsed: Duration,
}

impl ClientResult {
    /// Adds another client's result to this one.
    pub fn merge(&mut self, o: &ClientResult) {
        self.ops += o.ops;
        for (a, b) in self.by_kind.iter_mut().zip(o.by_kind) {
            *a += b;
        }
        self.misses += o.misses;
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latency_ns.add(&o.latency_ns);
        self.fabric += o.fabric;
        self.tx += o.tx;
        self.elapsed = self.elapsed.max(o.elapsed);
    }

    /// An empty result.
    pub fn empty() -> ClientResult {
        ClientResult {
            ops: 0,
            by_kind: [0; 4],
            misses: 0,
            latency_ns: histogram(),
            fabric: fabric::Stats::default(),
            tx: txn::TxStats::default(),
            elapsed: Duration::ZERO,
        }
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 100 s, 3 significant digits: fixed bounds, so merging works.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("constant bounds are valid")
}

/// Runs `generator`'s ops on `client` until `deadline`.
pub async fn drive(
    client: &mut IndexClient,
    generator: &mut OpGenerator,
    deadline: Instant,
) -> Result<ClientResult, DriveError> {
    let fabric_before = client.fabric_stats();
    let tx_before = client.tx_stats();
    let start = Instant::now();
    let mut r = ClientResult::empty();
    loop {
        if r.ops % DEADLINE_CHECK_EVERY == 0 && Instant::now() >= deadline {
            break;
        }
        let op = generator.next_op();
        let kind = op.kind() as usize;
        let sampled = r.ops % LATENCY_SAMPLE_EVERY == 0;
        let t0 = sampled.then(Instant::now);
        let hit = client.run(op).await?;
        if let Some(t0) = t0 {
            r.latency_ns.saturating_record(t0.elapsed().as_nanos() as u64);
        }
        r.ops += 1;
        r.by_kind[kind] += 1;
        if !hit {
            r.misses += 1;
        }
    }
    // What the last op still owes (a dtx release) is sent before this
    // client goes idle: its thread may stop driving its runtime, and with
    // it the flusher, while other clients still run.
    client.flush().await?;
    r.elapsed = start.elapsed();
    r.fabric = client.fabric_stats() - fabric_before;
    let tx = client.tx_stats();
    r.tx = txn::TxStats {
        commits: tx.commits - tx_before.commits,
        aborts: tx.aborts - tx_before.aborts,
        repairs: tx.repairs - tx_before.repairs,
        logged_commits: tx.logged_commits - tx_before.logged_commits,
        ..tx
    };
    Ok(r)
}
