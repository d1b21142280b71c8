//! `kintsugi chaos run` with memory-node faults (`kill-memnode`,
//! `restart-memnode`): a local cluster (three control-plane members, the
//! region's replicas and the spares, each a `kintsugi memnode` process
//! keeping its image with `--persist`) whose data path follows the control
//! plane's map, and the recovery coordinator on the Raft leader.
//!
//! 1. start the cluster, create the index (rtx, `memory_nodes` replicas);
//! 2. run YCSB A (`cluster::load`) from this process, one task and owner id
//!    per client thread, counting ops per 1 ms bucket;
//! 3. at each fault's time: SIGKILL the node holding the index's primary or
//!    first backup, or restart the last killed one from its image; then
//!    watch the control plane for the phases: the node declared dead
//!    (detection), its replica evicted (a primary's backup promoted), the
//!    region serving again, and whole again (re-replicated on a spare);
//!    a restarted node active again (as an empty spare);
//! 4. after the duration, stop the load, wait until the region is whole,
//!    and check: no error reached the application, every acknowledged
//!    write present with its value, the structure sound, the replicas
//!    equal word for word (`Heap::compare_replicas`).
//!
//! The clients here are tasks of this process, not processes: what dies is
//! a memory node. Outputs: `summary.json` (each fault's phase times),
//! `timeline.csv` (ops per bucket, with the phases marked), `timeline.png`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::load::{Handle, LoadSpec};
use cluster::{Cluster, ClusterOptions};
use control_plane::config::Timing;
use control_plane::state::{MemNodeId, MemNodeState, Region};
use harness::local::{IndexSection, LocalCluster, LocalClusterSpec, MemorySection};
use index::{ObjectSizes, Variant};
use serde::Serialize;

use super::check::{compare_replicas, ReplicaCheck};
use super::output::{PLOT_HEIGHT, PLOT_WIDTH, SMOOTH_BUCKETS};
use super::{Options, RunError, BUCKET_US};
use crate::experiment::{Experiment, FaultKind, ReplicaRole};
use crate::plot::{render_png, Marker, Series, TimelinePlot};

/// The index every such run creates.
const INDEX: &str = "chaos";
/// Longest wait for a phase after its fault, and for the region to be
/// whole before the check: far beyond a lease and a copy, so a run that
/// reaches it has a recovery that does not finish.
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the control plane is asked while a phase is awaited.
const PHASE_POLL: Duration = Duration::from_millis(2);
/// Bytes each memory node offers (address space until written).
const CAPACITY: &str = "1GiB";
/// The index's region: room for the keys at a B+tree's or a table's
/// footprint, with slack for copy-on-write.
fn index_bytes(keys: u64) -> u64 {
    (keys * 1024).clamp(16 << 20, 512 << 20)
}

/// When each phase of one fault came, in ms after the fault.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phases {
    /// The control plane declared the killed node dead.
    pub detected_ms: Option<f64>,
    /// Its replica left the region's replica set (a dead primary's first
    /// live backup promoted in its place).
    pub evicted_ms: Option<f64>,
    /// The region back in the clients' map: serving verbs.
    pub serving_ms: Option<f64>,
    /// The region whole again: as many replicas as it was made with, none
    /// being made, and in the map.
    pub rereplicated_ms: Option<f64>,
    /// A restarted node registered and active again (an empty spare).
    pub active_ms: Option<f64>,
}

/// What one fault did.
#[derive(Clone, Debug, Serialize)]
pub struct MemnodeFault {
    /// `kill-memnode` or `restart-memnode`.
    pub kind: FaultKind,
    /// The role of the killed node's replica.
    pub role: Option<ReplicaRole>,
    /// The node.
    pub node: MemNodeId,
    /// When, in ms after the load started.
    pub at_ms: f64,
    /// Its phases.
    pub phases: Phases,
    /// From the control plane's dead decision to the region serving again.
    pub dead_to_serving_ms: Option<f64>,
    /// Mean ops/s over the second before the fault.
    pub ops_per_sec_before: f64,
    /// Mean ops/s from the region serving again to one second later.
    pub ops_per_sec_after: f64,
}

impl MemnodeFault {
    /// What and whom: `kill-memnode 2 (primary)`.
    pub fn label(&self) -> String {
        match self.role {
            Some(r) => format!("{} {} ({r})", self.kind, self.node),
            None => format!("{} {}", self.kind, self.node),
        }
    }
}

/// A fault as injected, before the timeline is known.
struct Injected {
    kind: FaultKind,
    role: Option<ReplicaRole>,
    node: MemNodeId,
    at_ms: f64,
    phases: Phases,
}

impl Injected {
    /// The fault with its rates read off `timeline` (1 ms buckets): the
    /// second before it, and the second from the region serving again (a
    /// restart: from the node active again).
    fn outcome(self, timeline: &[u64]) -> MemnodeFault {
        let per_sec = 1e3 / (BUCKET_US as f64 / 1e3);
        let second = (1e3 / (BUCKET_US as f64 / 1e3)) as usize;
        let b = (self.at_ms as usize).min(timeline.len());
        let a = (self.at_ms + self.phases.serving_ms.or(self.phases.active_ms).unwrap_or(0.0)) as usize;
        MemnodeFault {
            kind: self.kind,
            role: self.role,
            node: self.node,
            at_ms: self.at_ms,
            dead_to_serving_ms: self
                .phases
                .detected_ms
                .zip(self.phases.serving_ms)
                .map(|(d, s)| s - d),
            phases: self.phases,
            ops_per_sec_before: crate::timeline::mean(timeline, b.saturating_sub(second)..b) * per_sec,
            ops_per_sec_after: crate::timeline::mean(timeline, a..a + second) * per_sec,
        }
    }
}

/// The final check.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaRunCheck {
    /// Errors that reached the application (a task stopped early).
    pub errors: Vec<String>,
    /// Keys written with an acknowledgement.
    pub acked_keys: u64,
    /// Of those, keys missing or holding another value.
    pub lost: u64,
    /// The first of them: (key, found, acknowledged).
    pub lost_listed: Vec<String>,
    /// Structural violations of the index.
    pub structure_violations: u64,
    /// The first of them.
    pub structure: Vec<String>,
    /// Every backup against the primary, after re-replication.
    pub replicas: ReplicaCheck,
}

impl ReplicaRunCheck {
    /// Nothing wrong.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
            && self.lost == 0
            && self.structure_violations == 0
            && self.replicas.differences == 0
    }
}

/// A run with memory-node faults.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaSummary {
    /// The experiment (seed resolved).
    pub experiment: Experiment,
    /// Ops per 1 ms bucket.
    #[serde(skip)]
    pub timeline: Vec<u64>,
    /// Ops completed.
    pub ops: u64,
    /// Mean ops/s over the duration.
    pub ops_per_sec: f64,
    /// Operations the handles ran again after a map change or a lost
    /// connection (what the application did not see).
    pub retries: u64,
    /// The faults.
    pub faults: Vec<MemnodeFault>,
    /// The check.
    pub check: ReplicaRunCheck,
    /// Whether every check held and every phase came.
    pub passed: bool,
}

/// Runs `experiment` (memory-node faults) and writes its outputs in
/// `options.out`.
pub fn run(experiment: Experiment, options: &Options) -> Result<ReplicaSummary, RunError> {
    let experiment = super::prepare(experiment, options)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|source| RunError::Io {
            what: "cannot start a runtime".into(),
            source,
        })?;
    let summary = rt.block_on(run_async(experiment, options))?;
    write_outputs(&summary, &options.out)?;
    Ok(summary)
}

fn say(options: &Options, line: &str) {
    if options.progress {
        eprintln!("chaos run: {line}");
    }
}

/// The local cluster an experiment asks for, in `dir`.
fn cluster_spec(e: &Experiment, dir: &Path) -> LocalClusterSpec {
    let c = &e.cluster;
    LocalClusterSpec {
        dir: dir.to_owned(),
        memory: MemorySection {
            nodes: (c.memory_nodes + c.spares) as usize,
            capacity: CAPACITY.into(),
            transport: c.transport,
            persist: true,
        },
        indexes: IndexSection {
            replicas: c.memory_nodes as u8,
        },
        timing: Timing {
            memnode_lease: c.memnode_lease,
            client_lease: c.client_lease,
            ..Timing::default()
        },
        ..LocalClusterSpec::default()
    }
}

async fn run_async(experiment: Experiment, options: &Options) -> Result<ReplicaSummary, RunError> {
    let e = &experiment;
    let c = &e.cluster;
    let dir = options.out.join(Variant::Rtx.to_string());
    std::fs::create_dir_all(&dir).map_err(|err| RunError::io(&dir, err))?;
    // The cluster is this run's own: images a previous run left there
    // (`--persist`) would come back as stale nodes.
    let cluster_dir = dir.join("cluster");
    if cluster_dir.exists() {
        std::fs::remove_dir_all(&cluster_dir).map_err(|err| RunError::io(&cluster_dir, err))?;
    }
    let spec = cluster_spec(e, &cluster_dir);
    spec.validate().map_err(local_error)?;
    say(
        options,
        &format!(
            "starting {} memory node(s) and {} control-plane members",
            spec.memory.nodes, spec.control.members
        ),
    );
    let mut local = LocalCluster::up(&options.exe, &spec, |_| {})
        .await
        .map_err(local_error)?;
    let file = local.file.clone();
    let tasks = (c.clients * c.threads_per_client) as usize;
    let cluster = Arc::new(
        Cluster::connect_with(
            &file.control,
            &file.client_token,
            ClusterOptions {
                name: "chaos".into(),
                replicas: c.memory_nodes as u8,
                index_bytes: index_bytes(e.workload.keys),
                hash_keys: e.workload.keys,
                owner_ids: (tasks + 4) as u16,
                ..ClusterOptions::default()
            },
        )
        .await
        .map_err(RunError::index("cannot join the cluster"))?,
    );
    let load = LoadSpec {
        index: INDEX.into(),
        kind: e.index.kind,
        tasks,
        keys_per_task: (e.workload.keys / tasks as u64).max(1),
        duration: e.duration,
        seed: e.seed,
    };
    // Creates the index before the clock starts.
    Handle::open(&cluster, INDEX, load.kind)
        .await
        .map_err(RunError::index("cannot create the index"))?;
    let region = Status::read(&cluster).await?.region_of(INDEX)?.id;
    say(
        options,
        &format!(
            "YCSB A on the {} for {}",
            e.index.kind,
            humantime::format_duration(e.duration)
        ),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let task = {
        let (cluster, load, stop, ops) = (cluster.clone(), load.clone(), stop.clone(), ops.clone());
        tokio::spawn(async move { cluster::load::run(&cluster, &load, stop, ops).await })
    };
    let sampler = {
        let (ops, stop) = (ops.clone(), stop.clone());
        tokio::spawn(async move { sample(t0, &ops, &stop).await })
    };

    // Faults in order, each watched until its last phase (or
    // PHASE_TIMEOUT): a fault due meanwhile goes late, and its `at_ms`
    // says when it went.
    let mut injected = Vec::new();
    let mut killed: Vec<(usize, MemNodeId)> = Vec::new();
    for f in &e.faults {
        tokio::time::sleep_until((t0 + f.at).into()).await;
        let done = match f.kind {
            FaultKind::KillMemnode => {
                let status = Status::read(&cluster).await?;
                let r = status.region(region)?;
                let replica = usize::from(f.role == Some(ReplicaRole::Backup));
                let node = r
                    .replicas
                    .get(replica)
                    .ok_or_else(|| {
                        RunError::Process(format!("region {region} has no replica {replica}: {r:?}"))
                    })?
                    .node;
                let process = local.process_of(node, &status.0.memnodes).map_err(local_error)?;
                local
                    .memnode(process)
                    .ok_or_else(|| RunError::Process(format!("no memory node process {process}")))?
                    .kill()?;
                let at = Instant::now();
                killed.push((process, node));
                let phases = watch_kill(&cluster, region, node, at).await?;
                Injected {
                    kind: f.kind,
                    role: f.role,
                    node,
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases,
                }
            }
            FaultKind::RestartMemnode => {
                let (process, node) = killed
                    .pop()
                    .ok_or_else(|| RunError::Process("a restart with no node killed".into()))?;
                local.restart_memnode(process).map_err(local_error)?;
                let at = Instant::now();
                let phases = watch_restart(&cluster, node, at).await?;
                Injected {
                    kind: f.kind,
                    role: None,
                    node,
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases,
                }
            }
            FaultKind::KillClient | FaultKind::PauseClient => {
                return Err(RunError::Process(format!(
                    "{} is not a memory-node fault",
                    f.kind
                )));
            }
        };
        say(
            options,
            &format!(
                "{} {} at {:.0} ms: {:?}",
                done.kind, done.node, done.at_ms, done.phases
            ),
        );
        injected.push(done);
    }

    let report = task
        .await
        .map_err(|e| RunError::Process(format!("the load task failed: {e}")))?
        .map_err(RunError::index("the load failed"))?;
    stop.store(true, Ordering::Relaxed);
    let timeline = sampler.await.unwrap_or_default();
    let faults: Vec<MemnodeFault> = injected.into_iter().map(|i| i.outcome(&timeline)).collect();
    say(options, &format!("{} ops; checking", report.ops));

    // The region whole again before anything is compared.
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let status = Status::read(&cluster).await?;
        let r = status.region(region)?;
        if r.whole() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(RunError::Process(format!(
                "the region was not whole again within {PHASE_TIMEOUT:?}: {r:?}"
            )));
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    let check = check(&cluster, &load, &report.acked, report.errors.clone(), region).await?;
    let passed = check.is_ok()
        && faults.iter().all(|f| match f.kind {
            FaultKind::KillMemnode => f.phases.rereplicated_ms.is_some(),
            _ => f.phases.active_ms.is_some(),
        });
    // The session's map watch goes before the members it watches.
    drop(cluster);
    drop(local);
    Ok(ReplicaSummary {
        ops: report.ops,
        ops_per_sec: report.ops as f64 / e.duration.as_secs_f64(),
        retries: report.retries,
        timeline,
        faults,
        check,
        passed,
        experiment,
    })
}

fn local_error(e: harness::local::LocalError) -> RunError {
    RunError::Process(format!("local cluster: {e}"))
}

/// Ops per [`BUCKET_US`] bucket until `stop`.
async fn sample(t0: Instant, ops: &AtomicU64, stop: &AtomicBool) -> Vec<u64> {
    let mut timeline = Vec::new();
    let mut last = 0;
    let bucket = Duration::from_micros(BUCKET_US);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until((t0 + bucket * (timeline.len() as u32 + 1)).into()).await;
        let now = ops.load(Ordering::Relaxed);
        timeline.push(now - last);
        last = now;
    }
    timeline
}

/// One read of the control plane's state (bounded, from any member that
/// answers: `Cluster::status`).
struct Status(control_plane::api::Status);

impl Status {
    async fn read(cluster: &Cluster) -> Result<Status, RunError> {
        cluster
            .status()
            .await
            .map(Status)
            .map_err(|e| RunError::Control(e.to_string()))
    }

    fn region_of(&self, index: &str) -> Result<&Region, RunError> {
        let x = self
            .0
            .indexes
            .iter()
            .find(|x| x.name == index)
            .ok_or_else(|| RunError::Control(format!("no index {index}")))?;
        self.region(x.region)
    }

    fn region(&self, id: fabric::RegionId) -> Result<&Region, RunError> {
        self.0
            .regions
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| RunError::Control(format!("no region {id}")))
    }

    fn node_state(&self, node: MemNodeId) -> Option<MemNodeState> {
        self.0.memnodes.iter().find(|n| n.id == node).map(|n| n.state)
    }
}

/// Polls the control plane from a kill at `start` until `region` is
/// whole without `node`.
async fn watch_kill(
    cluster: &Cluster,
    region: fabric::RegionId,
    node: MemNodeId,
    start: Instant,
) -> Result<Phases, RunError> {
    let ms = || start.elapsed().as_secs_f64() * 1e3;
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        let status = Status::read(cluster).await?;
        if p.detected_ms.is_none() && status.node_state(node) == Some(MemNodeState::Dead) {
            p.detected_ms = Some(ms());
        }
        let r = status.region(region)?;
        if p.evicted_ms.is_none() && !r.on(node) {
            p.evicted_ms = Some(ms());
        }
        if p.evicted_ms.is_some() && p.serving_ms.is_none() && r.usable() {
            p.serving_ms = Some(ms());
        }
        if p.evicted_ms.is_some() && r.whole() {
            p.rereplicated_ms = Some(ms());
            // A detection the poll missed is no later than the eviction.
            p.detected_ms = p.detected_ms.or(p.evicted_ms);
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// Polls the control plane from a restart at `start` until the node is
/// active.
async fn watch_restart(cluster: &Cluster, node: MemNodeId, start: Instant) -> Result<Phases, RunError> {
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        if Status::read(cluster).await?.node_state(node) == Some(MemNodeState::Active) {
            p.active_ms = Some(start.elapsed().as_secs_f64() * 1e3);
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// The final check (module docs, step 4).
async fn check(
    cluster: &Cluster,
    load: &LoadSpec,
    acked: &BTreeMap<u64, u64>,
    errors: Vec<String>,
    region: fabric::RegionId,
) -> Result<ReplicaRunCheck, RunError> {
    let lost = cluster::load::lost(cluster, INDEX, load.kind, acked)
        .await
        .map_err(RunError::index("cannot read the acknowledged keys back"))?;
    let (structure, sizes) = match Handle::open(cluster, INDEX, load.kind)
        .await
        .map_err(RunError::index("cannot open the index"))?
    {
        Handle::Tree(mut t) => {
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            let objects = t.inner().objects_in(&r);
            (r.violations, ObjectSizes::new(objects))
        }
        Handle::Table(mut t) => {
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            let objects = t
                .inner()
                .objects()
                .await
                .map_err(RunError::index("cannot list the hash table's objects"))?;
            (r.violations, ObjectSizes::new(objects))
        }
    };
    let mut fabric = cluster.fabric();
    let heap = txn::Heap::open(&mut fabric, region)
        .await
        .map_err(RunError::index("cannot open the heap"))?;
    // Any owner may have been cut off by the dead node while taking a chunk.
    let replicas = compare_replicas(&mut fabric, &heap, &sizes, &|_| true, 0).await?;
    Ok(ReplicaRunCheck {
        errors,
        acked_keys: acked.len() as u64,
        lost: lost.len() as u64,
        lost_listed: lost
            .iter()
            .take(10)
            .map(|(k, found, want)| format!("key {k}: found {found:?}, acknowledged {want}"))
            .collect(),
        structure_violations: structure.len() as u64,
        structure: structure.into_iter().take(10).collect(),
        replicas,
    })
}

/// `summary.json`, `timeline.csv` (a `phase` column marks each phase's
/// bucket), `timeline.png`.
fn write_outputs(s: &ReplicaSummary, out: &Path) -> Result<(), RunError> {
    let mut marks: Vec<(f64, String)> = Vec::new();
    for f in &s.faults {
        marks.push((f.at_ms, f.label()));
        let p = &f.phases;
        for (name, t) in [
            ("detected", p.detected_ms),
            ("evicted", p.evicted_ms),
            ("serving", p.serving_ms),
            ("re-replicated", p.rereplicated_ms),
            ("active", p.active_ms),
        ] {
            if let Some(t) = t {
                marks.push((f.at_ms + t, name.to_owned()));
            }
        }
    }
    let path = out.join("timeline.csv");
    let io = |e| RunError::io(&path, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    writeln!(w, "ms,rtx,phase").map_err(io)?;
    let bucket_ms = BUCKET_US as f64 / 1000.0;
    for (b, n) in s.timeline.iter().enumerate() {
        let at = b as f64 * bucket_ms;
        let here: Vec<&str> = marks
            .iter()
            .filter(|(t, _)| *t >= at && *t < at + bucket_ms)
            .map(|(_, m)| m.as_str())
            .collect();
        writeln!(w, "{at},{n},{}", here.join(" / ")).map_err(io)?;
    }
    w.flush().map_err(io)?;
    let markers: Vec<Marker> = marks
        .iter()
        .filter(|(t, _)| *t <= s.timeline.len() as f64 * bucket_ms)
        .map(|(t, m)| Marker {
            at_ms: *t,
            label: m.clone(),
        })
        .collect();
    let title = s.experiment.headline();
    render_png(
        &out.join("timeline.png"),
        &TimelinePlot {
            title: &title,
            bucket_ms,
            smooth_buckets: SMOOTH_BUCKETS,
            series: &[Series {
                label: "rtx".into(),
                ops_per_bucket: s.timeline.clone(),
            }],
            markers: &markers,
        },
        PLOT_WIDTH,
        PLOT_HEIGHT,
    )?;
    let path = out.join("summary.json");
    let json = serde_json::to_string_pretty(s).map_err(RunError::json("summary.json"))?;
    std::fs::write(&path, json).map_err(|e| RunError::io(&path, e))
}
