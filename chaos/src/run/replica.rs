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

use cluster::load::LoadSpec;
use cluster::{Cluster, ClusterOptions};
use control_plane::api::ControlClient;
use control_plane::state::{IndexKind, MemNodeId, MemNodeState, Region};
use harness::local::{LocalCluster, LocalClusterSpec};
use index::Variant;
use serde::Serialize;

use super::check::ReplicaCheck;
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

/// Runs `experiment` (memory-node faults; validated) and writes its
/// outputs in `options.out`.
pub fn run(mut experiment: Experiment, options: &Options) -> Result<ReplicaSummary, RunError> {
    if let Some(seed) = options.seed {
        experiment.seed = seed;
    }
    experiment.validate()?;
    std::fs::create_dir_all(&options.out).map_err(|e| RunError::io(&options.out, e))?;
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

async fn run_async(experiment: Experiment, options: &Options) -> Result<ReplicaSummary, RunError> {
    let e = &experiment;
    let c = &e.cluster;
    let dir = options.out.join(Variant::Rtx.to_string());
    std::fs::create_dir_all(&dir).map_err(|err| RunError::io(&dir, err))?;
    let text = format!(
        "dir = {:?}\n[memory]\nnodes = {}\ncapacity = {CAPACITY:?}\ntransport = \"{}\"\npersist = true\n\
         [indexes]\nreplicas = {}\n[timing]\nmemnode_lease = \"{}\"\nclient_lease = \"{}\"\n",
        dir.join("cluster"),
        c.memory_nodes + c.spares,
        c.transport_name(),
        c.memory_nodes,
        humantime::format_duration(c.memnode_lease),
        humantime::format_duration(c.client_lease),
    );
    let spec = LocalClusterSpec::parse(&text, "the experiment").map_err(local_error)?;
    say(
        options,
        &format!(
            "starting {} memory node(s) and 3 control-plane members",
            c.memory_nodes + c.spares
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
    let api = ControlClient::new(&file.control[0], Some(file.token.clone()))
        .map_err(|e| RunError::Control(format!("cannot make a client of the control plane: {e}")))?;
    let load = LoadSpec {
        index: INDEX.into(),
        kind: e.index.kind,
        tasks,
        keys_per_task: (e.workload.keys / tasks as u64).max(1),
        duration: e.duration,
        seed: e.seed,
    };
    // Creates the index before the clock starts.
    match e.index.kind {
        IndexKind::Btree => drop(
            cluster
                .btree(INDEX)
                .await
                .map_err(RunError::index("cannot create the index"))?,
        ),
        IndexKind::Hash => drop(
            cluster
                .hash(INDEX)
                .await
                .map_err(RunError::index("cannot create the index"))?,
        ),
    }
    let target = region_of(&api, INDEX).await?.replication_target();
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

    let mut faults = Vec::new();
    let mut killed: Vec<(usize, MemNodeId)> = Vec::new();
    for f in &e.faults {
        tokio::time::sleep_until((t0 + f.at).into()).await;
        let at_ms = t0.elapsed().as_secs_f64() * 1e3;
        match f.kind {
            FaultKind::KillMemnode => {
                let r = region_of(&api, INDEX).await?;
                let replica = match f.role {
                    Some(ReplicaRole::Backup) => 1,
                    _ => 0,
                };
                let node = r.replicas[replica].node;
                let process = process_of(&api, &file.memnodes, node).await?;
                local
                    .memnode(process)
                    .ok_or_else(|| RunError::Process(format!("no memory node process {process}")))?
                    .kill()?;
                say(
                    options,
                    &format!(
                        "killed memory node {node} ({}) at {:.0} ms",
                        f.role.unwrap_or(ReplicaRole::Primary),
                        at_ms
                    ),
                );
                killed.push((process, node));
                let phases = watch_kill(&api, node, target).await?;
                faults.push(fault(f.kind, f.role, node, at_ms, phases));
            }
            FaultKind::RestartMemnode => {
                let (process, node) = killed
                    .pop()
                    .ok_or_else(|| RunError::Process("a restart with no node killed".into()))?;
                local.restart_memnode(process).map_err(local_error)?;
                say(
                    options,
                    &format!("restarted memory node {node} at {:.0} ms", at_ms),
                );
                let phases = watch_restart(&api, node).await?;
                faults.push(fault(f.kind, None, node, at_ms, phases));
            }
            FaultKind::KillClient | FaultKind::PauseClient => {
                return Err(RunError::Process(format!(
                    "{} is not a memory-node fault",
                    f.kind
                )));
            }
        }
        for p in faults.last().map(|f: &MemnodeFault| &f.phases).into_iter() {
            say(options, &format!("  phases: {p:?}"));
        }
    }

    let report = task
        .await
        .map_err(|e| RunError::Process(format!("the load task failed: {e}")))?
        .map_err(RunError::index("the load failed"))?;
    stop.store(true, Ordering::Relaxed);
    let timeline = sampler.await.unwrap_or_default();
    let elapsed = t0.elapsed();
    say(options, &format!("{} ops; checking", report.ops));
    for f in &mut faults {
        let b = (f.at_ms as usize).min(timeline.len());
        f.ops_per_sec_before = crate::timeline::mean(&timeline, b.saturating_sub(1000)..b) * 1000.0;
        let from = f.at_ms + f.phases.serving_ms.or(f.phases.active_ms).unwrap_or(0.0);
        let a = from as usize;
        f.ops_per_sec_after = crate::timeline::mean(&timeline, a..a + 1000) * 1000.0;
    }

    // The region whole again before anything is compared.
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let region = loop {
        let r = region_of(&api, INDEX).await?;
        if whole(&r, target) {
            break r;
        }
        if Instant::now() >= deadline {
            return Err(RunError::Process(format!(
                "the region was not whole again within {PHASE_TIMEOUT:?}: {r:?}"
            )));
        }
        tokio::time::sleep(PHASE_POLL).await;
    };
    let check = check(
        &cluster,
        e.index.kind,
        &report.acked,
        report.errors.clone(),
        region.id,
    )
    .await?;
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
        ops_per_sec: report.ops as f64 / elapsed.as_secs_f64(),
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

fn fault(
    kind: FaultKind,
    role: Option<ReplicaRole>,
    node: MemNodeId,
    at_ms: f64,
    phases: Phases,
) -> MemnodeFault {
    MemnodeFault {
        kind,
        role,
        node,
        at_ms,
        dead_to_serving_ms: phases.detected_ms.zip(phases.serving_ms).map(|(d, s)| s - d),
        phases,
        ops_per_sec_before: 0.0,
        ops_per_sec_after: 0.0,
    }
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

async fn region_of(api: &ControlClient, name: &str) -> Result<Region, RunError> {
    let cp = |e: control_plane::api::ClientError| RunError::Control(e.to_string());
    let x = api
        .indexes()
        .await
        .map_err(cp)?
        .into_iter()
        .find(|x| x.name == name)
        .ok_or_else(|| RunError::Control(format!("no index {name}")))?;
    api.regions()
        .await
        .map_err(cp)?
        .into_iter()
        .find(|r| r.id == x.region)
        .ok_or_else(|| RunError::Control(format!("no region {}", x.region)))
}

/// The local cluster's process index of memory node `node`.
async fn process_of(api: &ControlClient, endpoints: &[String], node: MemNodeId) -> Result<usize, RunError> {
    let nodes = api
        .memnodes()
        .await
        .map_err(|e| RunError::Control(e.to_string()))?;
    let endpoint = nodes
        .iter()
        .find(|n| n.id == node)
        .map(|n| n.endpoint.clone())
        .ok_or_else(|| RunError::Control(format!("no memory node {node}")))?;
    endpoints.iter().position(|e| *e == endpoint).ok_or_else(|| {
        RunError::Process(format!(
            "memory node {node} ({endpoint}) is none of the cluster's processes"
        ))
    })
}

fn whole(r: &Region, target: usize) -> bool {
    r.usable() && r.replicas.len() >= target && r.syncing.is_empty()
}

async fn node_state(api: &ControlClient, node: MemNodeId) -> Result<Option<MemNodeState>, RunError> {
    let nodes = api
        .memnodes()
        .await
        .map_err(|e| RunError::Control(e.to_string()))?;
    Ok(nodes.iter().find(|n| n.id == node).map(|n| n.state))
}

/// Polls the control plane from a kill until the region is whole without
/// `node`.
async fn watch_kill(api: &ControlClient, node: MemNodeId, target: usize) -> Result<Phases, RunError> {
    let start = Instant::now();
    let ms = || start.elapsed().as_secs_f64() * 1e3;
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        if p.detected_ms.is_none() && node_state(api, node).await? == Some(MemNodeState::Dead) {
            p.detected_ms = Some(ms());
        }
        let r = region_of(api, INDEX).await?;
        if p.evicted_ms.is_none() && !r.on(node) {
            p.evicted_ms = Some(ms());
        }
        if p.evicted_ms.is_some() && p.serving_ms.is_none() && r.usable() {
            p.serving_ms = Some(ms());
        }
        if p.evicted_ms.is_some() && whole(&r, target) {
            p.rereplicated_ms = Some(ms());
            // A detection the poll missed is no later than the eviction.
            p.detected_ms = p.detected_ms.or(p.evicted_ms);
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// Polls the control plane from a restart until the node is active.
async fn watch_restart(api: &ControlClient, node: MemNodeId) -> Result<Phases, RunError> {
    let start = Instant::now();
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        if node_state(api, node).await? == Some(MemNodeState::Active) {
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
    kind: IndexKind,
    acked: &BTreeMap<u64, u64>,
    errors: Vec<String>,
    region: fabric::RegionId,
) -> Result<ReplicaRunCheck, RunError> {
    let lost = cluster::load::lost(cluster, INDEX, kind, acked)
        .await
        .map_err(RunError::index("cannot read the acknowledged keys back"))?;
    let (structure_violations, structure) = match kind {
        IndexKind::Btree => {
            let mut t = cluster
                .btree(INDEX)
                .await
                .map_err(RunError::index("cannot open the index"))?;
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            (r.violations.len() as u64, r.violations)
        }
        IndexKind::Hash => {
            let mut t = cluster
                .hash(INDEX)
                .await
                .map_err(RunError::index("cannot open the index"))?;
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            (r.violations.len() as u64, r.violations)
        }
    };
    let mut fabric = cluster.fabric();
    let heap = txn::Heap::open(&mut fabric, region)
        .await
        .map_err(RunError::index("cannot open the heap"))?;
    let report = heap
        .compare_replicas(&mut fabric, &|_| None, &|_| true)
        .await
        .map_err(RunError::index("cannot compare the replicas"))?;
    Ok(ReplicaRunCheck {
        errors,
        acked_keys: acked.len() as u64,
        lost: lost.len() as u64,
        lost_listed: lost
            .iter()
            .take(10)
            .map(|(k, found, want)| format!("key {k}: found {found:?}, acknowledged {want}"))
            .collect(),
        structure_violations,
        structure: structure.into_iter().take(10).collect(),
        replicas: ReplicaCheck {
            replicas: report.replicas,
            words_compared: report.words_compared,
            objects: report.objects,
            differences: report.differences,
            listed: report.listed.iter().take(10).map(ToString::to_string).collect(),
            converged: 0,
        },
    })
}

/// `summary.json`, `timeline.csv` (a `phase` column marks each phase's
/// bucket), `timeline.png`.
fn write_outputs(s: &ReplicaSummary, out: &Path) -> Result<(), RunError> {
    let mut marks: Vec<(f64, String)> = Vec::new();
    for f in &s.faults {
        let what = match f.role {
            Some(r) => format!("{} {} ({r})", f.kind, f.node),
            None => format!("{} {}", f.kind, f.node),
        };
        marks.push((f.at_ms, what));
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
            smooth_buckets: 10,
            series: &[Series {
                label: "rtx".into(),
                ops_per_bucket: s.timeline.clone(),
            }],
            markers: &markers,
        },
        1200,
        600,
    )?;
    let path = out.join("summary.json");
    let json = serde_json::to_string_pretty(s).map_err(RunError::json("summary.json"))?;
    std::fs::write(&path, json).map_err(|e| RunError::io(&path, e))
}
