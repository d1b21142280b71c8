//! What the benchmarks that disturb a running cluster share (`bench
//! promote`, `bench recover`): a local cluster of real processes, an rtx
//! B+tree loaded with every key, YCSB A on it from this process until the
//! benchmark is done, an operator's client beside the load's, and at the
//! end what the clients saw ([`ClientsOutcome`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::cluster::load::{self, Firsts, LoadReport, LoadSpec};
use ::cluster::{Cluster, ClusterError, ClusterOptions, IndexKind, Membership};
use harness::local::{LocalCluster, LocalClusterSpec};
use serde::Serialize;

use crate::error::Context;
use crate::Result;

/// The index the load runs on.
pub const INDEX: &str = "bench";

/// Most client tasks (one owner id each, from one process).
pub const TASKS_MAX: usize = 64;

/// Most keys per client task: all are loaded one by one before the run.
pub const KEYS_PER_TASK_MAX: u64 = 10_000_000;

/// The load's shape.
#[derive(Clone, Debug)]
pub struct LoadShape {
    /// Client tasks, one owner id each.
    pub tasks: usize,
    /// Keys each task owns, all loaded first.
    pub keys_per_task: u64,
    /// Replicas of the index's region.
    pub replicas: u8,
    /// Bytes of the index's region.
    pub region_bytes: u64,
}

/// A local cluster with YCSB A running on it.
pub struct LocalLoad {
    /// The cluster (its memory nodes to kill and restart).
    pub local: LocalCluster,
    /// The load's client.
    pub clients: Arc<Cluster>,
    /// A client with the operator's token, for the benchmark's own moves
    /// and reads.
    pub operator: Cluster,
    spec: LoadSpec,
    stop: Arc<AtomicBool>,
    running: tokio::task::JoinHandle<std::result::Result<LoadReport, ClusterError>>,
    started: Instant,
}

impl LocalLoad {
    /// Starts the cluster `spec` describes, loads every key, and starts
    /// YCSB A, which notes in `firsts` when it first completes an
    /// operation at each epoch. `bench` names the benchmark in progress
    /// lines; `operator` names the operator's client.
    pub async fn start(
        bench: &str,
        exe: &std::path::Path,
        spec: &LocalClusterSpec,
        shape: &LoadShape,
        operator: &str,
        firsts: Arc<Firsts>,
    ) -> Result<LocalLoad> {
        eprintln!(
            "{bench}: starting a local cluster ({} memory nodes)",
            spec.memory.nodes
        );
        let local = LocalCluster::up(exe, spec, |s| eprintln!("{bench}: {s}"))
            .await
            .context("starting the local cluster")?;
        let file = local.file.clone();
        let options = |name: &str, owner_ids: usize| ClusterOptions {
            name: name.into(),
            owner_ids: owner_ids as u16,
            replicas: shape.replicas,
            index_bytes: shape.region_bytes,
            ..ClusterOptions::default()
        };
        let clients = Arc::new(
            Cluster::connect_with(
                &file.control,
                &file.client_token,
                options("load", shape.tasks + 1),
            )
            .await
            .context("connecting the load")?,
        );
        let operator = Cluster::connect_with(&file.control, &file.token, options(operator, 1))
            .await
            .with_context(|| format!("connecting the {operator}"))?;
        let spec = LoadSpec {
            index: INDEX.into(),
            kind: IndexKind::Btree,
            tasks: shape.tasks,
            keys_per_task: shape.keys_per_task,
            duration: Duration::from_secs(24 * 3600),
            seed: 1,
        };
        preload(bench, &clients, &spec).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let running = {
            let (c, s, stop) = (clients.clone(), spec.clone(), stop.clone());
            let ops = Arc::new(AtomicU64::new(0));
            let membership = Arc::new(Membership::of(c));
            tokio::spawn(async move { load::run_observed(membership, &s, stop, ops, firsts).await })
        };
        Ok(LocalLoad {
            local,
            clients,
            operator,
            spec,
            stop,
            running,
            started: Instant::now(),
        })
    }

    /// Stops the load, reads back every acknowledged write, and stops the
    /// cluster.
    pub async fn finish(self, bench: &str) -> Result<ClientsOutcome> {
        self.stop.store(true, Ordering::Relaxed);
        let report = self
            .running
            .await
            .map_err(|e| crate::msg!("the load failed: {e}"))?
            .context("the load")?;
        let elapsed = self.started.elapsed();
        eprintln!("{bench}: reading back {} acknowledged writes", report.acked.len());
        let lost = load::lost(&self.clients, &self.spec.index, self.spec.kind, &report.acked)
            .await
            .context("checking")?;
        let region_used_bytes = region_used_bytes(&self.clients, &self.spec).await?;
        self.operator
            .close()
            .await
            .context("closing the operator's client")?;
        // Before the cluster goes: a client outliving it would warn that it
        // cannot watch the map.
        drop(self.clients);
        drop(self.local);
        Ok(ClientsOutcome {
            ops: report.ops,
            ops_per_s: report.ops as f64 / elapsed.as_secs_f64(),
            writes: report.writes,
            retries: report.retries,
            errors: report.errors,
            lost: lost.len() as u64,
            region_used_bytes,
        })
    }
}

/// Bytes of the index's region in chunks taken (`txn::Heap::bytes_taken`).
async fn region_used_bytes(c: &Cluster, spec: &LoadSpec) -> Result<u64> {
    let heap = match load::Handle::open(c, &spec.index, spec.kind)
        .await
        .context("opening the index")?
    {
        load::Handle::Tree(mut t) => t.inner().heap(),
        load::Handle::Table(mut t) => t.inner().heap(),
    };
    heap.bytes_taken(&mut c.fabric())
        .await
        .context("reading the region's chunk table")
}

/// Writes every key once, so that the region holds a full tree.
async fn preload(bench: &str, c: &Cluster, spec: &LoadSpec) -> Result<()> {
    let mut h = load::Handle::open(c, &spec.index, spec.kind)
        .await
        .context("opening the index")?;
    let keys = spec.tasks as u64 * spec.keys_per_task;
    eprintln!("{bench}: loading {keys} keys");
    for k in 1..=keys {
        h.put(k, 1).await.context("loading")?;
    }
    Ok(())
}

/// What the load's clients saw over a run.
#[derive(Clone, Debug, Serialize)]
pub struct ClientsOutcome {
    /// Client operations over the run.
    pub ops: u64,
    /// Client operations per second over the run, disturbances included.
    pub ops_per_s: f64,
    /// Writes acknowledged.
    pub writes: u64,
    /// Operations run again by the library after a fence or a map change.
    pub retries: u64,
    /// Errors that reached the application.
    pub errors: Vec<String>,
    /// Acknowledged writes not found at the end.
    pub lost: u64,
    /// Bytes of the index's region in chunks taken at the end.
    pub region_used_bytes: u64,
}

impl ClientsOutcome {
    /// The table's last line.
    pub fn line(&self) -> String {
        format!(
            "clients: {} ops ({:.0}/s over the run), {} writes acknowledged, {} retries, {} errors, {} lost; region used: {} MiB\n",
            self.ops,
            self.ops_per_s,
            self.writes,
            self.retries,
            self.errors.len(),
            self.lost,
            self.region_used_bytes >> 20
        )
    }

    /// Why the run failed its checks, if it did.
    pub fn failure(&self) -> Option<String> {
        if self.lost > 0 {
            return Some(format!("{} acknowledged writes lost", self.lost));
        }
        self.errors
            .first()
            .map(|e| format!("an error reached the application: {e}"))
    }
}
