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

use cluster::load::Handle;
use cluster::{Cluster, ClusterOptions};
use control_plane::config::Timing;
use control_plane::state::{MemNodeId, MemNodeState, Region};
use harness::local::{IndexSection, LocalCluster, LocalClusterSpec, MemorySection};
use index::{ObjectSizes, Variant};
use nix::sys::signal::Signal;
use serde::Serialize;

use super::check::{compare_replicas, ReplicaCheck};
use super::output::{PLOT_HEIGHT, PLOT_WIDTH, SMOOTH_BUCKETS};
use super::partition::Links;
use super::workers::{self, WorkersSpec};
use super::{Options, RunError, Sabotage, BUCKET_US};
use crate::experiment::{Experiment, FaultKind, PartitionTarget, ReplicaRole};
use crate::linearizability::{self, Event};
use crate::plot::{render_png, Marker, Series, TimelinePlot};

/// The index every such run creates.
const INDEX: &str = "chaos";
/// Longest wait for a phase after its fault, and for the region to be
/// whole before the check: far beyond a lease and a copy, so a run that
/// reaches it has a recovery that does not finish.
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
/// Opens of the index before a run gives up creating it, and the pause
/// between them.
const CREATE_ATTEMPTS_MAX: u32 = 4;
const CREATE_RETRY_PAUSE: Duration = Duration::from_millis(250);
/// How long a paused node that was not declared dead is watched after it
/// resumes: a few memory-node leases, for a late detection to show.
const PAUSE_SETTLE: Duration = Duration::from_millis(500);
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
    /// A restarted or resumed node registered and active again (an empty
    /// spare, or still in its replica set after a pause shorter than
    /// detection).
    pub active_ms: Option<f64>,
    /// A paused node continued (SIGCONT).
    pub resumed_ms: Option<f64>,
    /// Another member claimed the lead (`kill-control-leader`).
    pub elected_ms: Option<f64>,
    /// The killed leader restarted and a member again (`for` given).
    pub member_back_ms: Option<f64>,
}

/// What one fault did.
#[derive(Clone, Debug, Serialize)]
pub struct MemnodeFault {
    /// Its kind.
    pub kind: FaultKind,
    /// The role of the faulted node's replica.
    pub role: Option<ReplicaRole>,
    /// The memory node, control-plane member (`kill-control-leader`) or
    /// client (`clock-skew`) it hit.
    pub node: MemNodeId,
    /// The clock skew put in (`clock-skew`).
    pub skew_ms: Option<i64>,
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
    /// Whether every phase the fault must go through came.
    pub fn completed(&self) -> bool {
        let p = &self.phases;
        match self.kind {
            FaultKind::KillMemnode => p.rereplicated_ms.is_some(),
            FaultKind::RestartMemnode | FaultKind::PauseMemnode => p.active_ms.is_some(),
            FaultKind::KillControlLeader => p.elected_ms.is_some(),
            // A memory node's (it has a role): back as for a pause.
            FaultKind::Partition if self.role.is_some() => p.active_ms.is_some(),
            FaultKind::Partition => p.resumed_ms.is_some(),
            FaultKind::ClockSkew | FaultKind::KillClient | FaultKind::PauseClient => true,
        }
    }

    /// From the fault to the cluster whole again, ms: the last phase that
    /// came (none: 0).
    pub fn recovered_ms(&self) -> f64 {
        let p = &self.phases;
        [p.rereplicated_ms, p.active_ms, p.elected_ms, p.member_back_ms]
            .into_iter()
            .flatten()
            .fold(0.0, f64::max)
    }

    /// What and whom: `kill-memnode 2 (primary)`.
    pub fn label(&self) -> String {
        match (self.role, self.skew_ms) {
            (None, None) if self.kind == FaultKind::Partition => {
                format!("{} client {}", self.kind, self.node)
            }
            (Some(r), _) => format!("{} {} ({r})", self.kind, self.node),
            (None, Some(skew)) => format!("{} client {} {skew:+} ms", self.kind, self.node),
            (None, None) => format!("{} {}", self.kind, self.node),
        }
    }
}

/// A fault as injected, before the timeline is known.
struct Injected {
    kind: FaultKind,
    role: Option<ReplicaRole>,
    node: MemNodeId,
    skew_ms: Option<i64>,
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
        let p = &self.phases;
        let back = p.serving_ms.or(p.active_ms).or(p.elected_ms).unwrap_or(0.0);
        let a = (self.at_ms + back) as usize;
        MemnodeFault {
            kind: self.kind,
            role: self.role,
            node: self.node,
            skew_ms: self.skew_ms,
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
    /// Errors of clients a partition cut off from the control plane past
    /// half their lease: their lease lost, they had to stop (not a failure).
    pub lease_lost: Vec<String>,
    /// Writes cut off at their commit point, outcome unknown to the
    /// client (`info` in the history; not a failure: the checker lets each
    /// have happened or not).
    pub in_doubt: u64,
    /// Keys in the workload's key space (each read back at the end).
    pub keys: u64,
    /// Keys whose history holds up until the final read and not with it:
    /// an acknowledged write lost (or a value nobody wrote found).
    pub lost: u64,
    /// Keys whose history, final reads included, has no linearization
    /// (`lost` among them).
    pub non_linearizable: u64,
    /// The linearizability check of the whole history, per key.
    pub linearizability: linearizability::Report,
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
            && self.non_linearizable == 0
            && self.linearizability.unknown_keys == 0
            && self.linearizability.disagreement_count == 0
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

impl ReplicaSummary {
    /// Why the run failed, in a line (empty if it passed).
    pub fn why(&self) -> String {
        let c = &self.check;
        let l = &c.linearizability;
        let mut why = Vec::new();
        if let Some(e) = c.errors.first() {
            why.push(format!(
                "{} error(s) reached the application, first: {e}",
                c.errors.len()
            ));
        }
        if c.lost > 0 {
            why.push(format!("{} key(s) lost an acknowledged write", c.lost));
        }
        if c.non_linearizable > 0 {
            let keys: Vec<String> = l
                .non_linearizable
                .iter()
                .take(5)
                .map(|k| k.key.to_string())
                .collect();
            why.push(format!(
                "{} non-linearizable key(s): {}",
                c.non_linearizable,
                keys.join(", ")
            ));
        }
        if l.unknown_keys > 0 {
            why.push(format!("{} key(s) too hard to check", l.unknown_keys));
        }
        if l.disagreement_count > 0 {
            why.push(format!(
                "the two checkers disagree on {} key(s)",
                l.disagreement_count
            ));
        }
        if c.structure_violations > 0 {
            why.push(format!("{} structural violation(s)", c.structure_violations));
        }
        if c.replicas.differences > 0 {
            why.push(format!("{} replica difference(s)", c.replicas.differences));
        }
        for f in self.faults.iter().filter(|f| !f.completed()) {
            why.push(format!(
                "{} did not complete its phases: {:?}",
                f.label(),
                f.phases
            ));
        }
        why.join("; ")
    }
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
    // Every memory node reaches the members through proxies a partition
    // can cut (`run::partition`), kept here by node number (from 1).
    let mut node_links: BTreeMap<usize, Links> = BTreeMap::new();
    let mut local = LocalCluster::up_routed(
        &options.exe,
        &spec,
        |_| {},
        |i, members| {
            let links = Links::start(members)
                .map_err(|e| harness::local::LocalError::State(format!("cannot start a proxy: {e}")))?;
            let addrs = links.addrs();
            node_links.insert(i, links);
            Ok(addrs)
        },
    )
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
    let spec = WorkersSpec {
        index: INDEX.into(),
        kind: e.index.kind,
        keys: e.workload.keys,
        duration: e.duration,
        seed: e.seed,
    };
    // Creates the index before the clock starts. Under load the first
    // open can find the region missing from a map that should have it (a
    // known race in `cluster::catalog`, not a fault of the run's: noted in
    // docs/chaos.md §7): tried again a few times before it counts.
    let mut opened = Handle::open(&cluster, INDEX, spec.kind).await.map(|_| ());
    for _ in 1..CREATE_ATTEMPTS_MAX {
        if opened.is_ok() {
            break;
        }
        tokio::time::sleep(CREATE_RETRY_PAUSE).await;
        opened = Handle::open(&cluster, INDEX, spec.kind).await.map(|_| ());
    }
    opened.map_err(RunError::index("cannot create the index"))?;
    let region = Status::read(&cluster).await?.region_of(INDEX)?.id;
    // One session per client: its own lease, owner ids, map and fabric
    // (where a clock skew or a sabotage goes), as a client process has.
    let mut sessions = Vec::with_capacity(c.clients as usize);
    let mut session_links = Vec::with_capacity(c.clients as usize);
    for i in 0..c.clients {
        let links = Links::start(&file.control).map_err(|e| RunError::io(&dir, e))?;
        let session = Cluster::connect_with(
            &links.addrs(),
            &file.client_token,
            ClusterOptions {
                name: format!("chaos-client-{i}"),
                owner_ids: c.threads_per_client as u16 + 2,
                faults: Some(fabric::FaultPlan::default()),
                tx: txn::TxConfig {
                    repair: options.sabotage != Some(Sabotage::NoRepair),
                    ..txn::TxConfig::default()
                },
                ..ClusterOptions::default()
            },
        )
        .await
        .map_err(RunError::index("a client cannot join the cluster"))?;
        sessions.push(Arc::new(session));
        session_links.push(links);
    }
    if options.sabotage == Some(Sabotage::DropBackupWrites) {
        let status = Status::read(&cluster).await?;
        let backup = status.region(region)?.replicas.get(1).map(|l| l.node);
        let node = backup.ok_or_else(|| RunError::Process("the region has no backup to sabotage".into()))?;
        for s in &sessions {
            if let Some(f) = s.faults() {
                f.drop_writes_to(Some(node));
            }
        }
        say(
            options,
            &format!("sabotage: every client's writes to memory node {node} are dropped"),
        );
    }
    say(
        options,
        &format!(
            "YCSB A over {} shared keys on the {}, {} client(s) x {} thread(s), for {}",
            spec.keys,
            e.index.kind,
            c.clients,
            c.threads_per_client,
            humantime::format_duration(e.duration)
        ),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let task = {
        let (sessions, spec, stop, ops) = (sessions.clone(), spec.clone(), stop.clone(), ops.clone());
        let threads = c.threads_per_client as usize;
        tokio::spawn(async move { workers::run(&sessions, threads, &spec, stop, ops, t0).await })
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
    let mut skews = Vec::new();
    // Clients a partition cut off past half their lease: an error that
    // stopped their tasks is their lease lost, as it must be.
    let mut cut_off: Vec<usize> = Vec::new();
    for f in &e.faults {
        tokio::time::sleep_until((t0 + f.at).into()).await;
        let done = match f.kind {
            FaultKind::Partition if f.target == Some(PartitionTarget::Client) => {
                let links = session_links
                    .get(f.client as usize)
                    .ok_or_else(|| RunError::Process(format!("no client {}", f.client)))?;
                let members = member_indexes(&f.members);
                let pause = f.pause.unwrap_or_default();
                links.set_cut(&members, true);
                let at = Instant::now();
                tokio::time::sleep_until((at + pause).into()).await;
                links.set_cut(&members, false);
                if pause * 3 >= c.client_lease {
                    // Renewals go every third of the lease: cut off longer, its
                    // lease may lapse by its own reckoning (and the control
                    // plane may expire it), and then its tasks must stop with
                    // an error.
                    cut_off.push(f.client as usize);
                }
                Injected {
                    kind: f.kind,
                    role: None,
                    node: f.client as MemNodeId,
                    skew_ms: None,
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases: Phases {
                        resumed_ms: Some(at.elapsed().as_secs_f64() * 1e3),
                        ..Phases::default()
                    },
                }
            }
            FaultKind::Partition => {
                let (node, process) = node_by_role(&cluster, &local, region, f.role).await?;
                let links = node_links.get(&(process + 1)).ok_or_else(|| {
                    RunError::Process(format!("memory node process {process} has no proxies"))
                })?;
                let members = member_indexes(&f.members);
                let pause = f.pause.unwrap_or_default();
                links.set_cut(&members, true);
                let at = Instant::now();
                let heal = async {
                    tokio::time::sleep_until((at + pause).into()).await;
                    links.set_cut(&members, false);
                    Instant::now()
                };
                let (phases, healed) = tokio::join!(watch_pause(&cluster, region, node, at, pause), heal);
                let mut phases = phases?;
                phases.resumed_ms = Some((healed - at).as_secs_f64() * 1e3);
                Injected {
                    kind: f.kind,
                    role: f.role,
                    node,
                    skew_ms: None,
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases,
                }
            }
            FaultKind::KillMemnode | FaultKind::PauseMemnode => {
                let (node, process) = node_by_role(&cluster, &local, region, f.role).await?;
                let p = local
                    .memnode(process)
                    .ok_or_else(|| RunError::Process(format!("no memory node process {process}")))?;
                let (at, phases) = if f.kind == FaultKind::KillMemnode {
                    p.kill()?;
                    let at = Instant::now();
                    killed.push((process, node));
                    (at, watch_kill(&cluster, region, node, at).await?)
                } else {
                    let pause = f.pause.unwrap_or_default();
                    p.signal(Signal::SIGSTOP)?;
                    let at = Instant::now();
                    let pid = p.pid();
                    let resume = async move {
                        tokio::time::sleep_until((at + pause).into()).await;
                        let sent = pid.map(|pid| nix::sys::signal::kill(pid, Signal::SIGCONT));
                        (Instant::now(), sent)
                    };
                    let (phases, (resumed, sent)) =
                        tokio::join!(watch_pause(&cluster, region, node, at, pause), resume);
                    if let Some(Err(e)) = sent {
                        return Err(RunError::Process(format!(
                            "cannot SIGCONT memory node {node}: {e}"
                        )));
                    }
                    let mut phases = phases?;
                    phases.resumed_ms = Some((resumed - at).as_secs_f64() * 1e3);
                    (at, phases)
                };
                Injected {
                    kind: f.kind,
                    role: f.role,
                    node,
                    skew_ms: None,
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
                    skew_ms: None,
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases,
                }
            }
            FaultKind::KillControlLeader => {
                let (member, at, phases) = kill_leader(&mut local, f.pause).await?;
                Injected {
                    kind: f.kind,
                    role: None,
                    node: member,
                    skew_ms: None,
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases,
                }
            }
            FaultKind::ClockSkew => {
                let skew = f.skew_ms.unwrap_or_default();
                let faults = sessions
                    .get(f.client as usize)
                    .and_then(|s| s.faults())
                    .ok_or_else(|| RunError::Process(format!("no client {}", f.client)))?
                    .clone();
                faults.set_clock_skew_ms(skew);
                let at = Instant::now();
                if let Some(d) = f.pause {
                    skews.push(tokio::spawn(async move {
                        tokio::time::sleep_until((at + d).into()).await;
                        faults.set_clock_skew_ms(0);
                    }));
                }
                Injected {
                    kind: f.kind,
                    role: None,
                    node: f.client as MemNodeId,
                    skew_ms: Some(skew),
                    at_ms: (at - t0).as_secs_f64() * 1e3,
                    phases: Phases::default(),
                }
            }
            FaultKind::KillClient | FaultKind::PauseClient => {
                return Err(RunError::Process(format!(
                    "{} is not a local-cluster fault",
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
        .map_err(|e| RunError::Process(format!("the client tasks failed: {e}")))?
        .map_err(RunError::index("the clients failed"))?;
    stop.store(true, Ordering::Relaxed);
    for s in skews {
        let _ = s.await;
    }
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
    let checker = workers::CHECKER_PROCESS;
    let mut history = report.events;
    let before_final = history.len();
    history.extend(
        workers::read_all(&cluster, &spec, checker, t0)
            .await
            .map_err(RunError::index("cannot read the keys back"))?,
    );
    write_history(&history, &options.out)?;
    let threads = u64::from(c.threads_per_client);
    let (expected, errors): (Vec<_>, Vec<_>) = report
        .errors
        .into_iter()
        .partition(|(process, _)| cut_off.contains(&((process / threads) as usize)));
    let errors = errors.into_iter().map(|(_, e)| e).collect();
    let mut check = check(&cluster, &spec, &history, before_final, errors, region).await?;
    check.lease_lost = expected.into_iter().map(|(_, e)| e).collect();
    check.in_doubt = report.in_doubt;
    let passed = check.is_ok() && faults.iter().all(MemnodeFault::completed);
    // The sessions' map watches go before the members they watch.
    drop(sessions);
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

/// The final check (module docs, step 4). `history` ends with the final
/// reads, which start at `before_final`.
async fn check(
    cluster: &Cluster,
    spec: &WorkersSpec,
    history: &[Event],
    before_final: usize,
    errors: Vec<String>,
    region: fabric::RegionId,
) -> Result<ReplicaRunCheck, RunError> {
    let absent = |_| None;
    let full = linearizability::check(history, &absent)
        .map_err(|e| RunError::Process(format!("the history is malformed: {e}")))?;
    // A key whose history holds up until the final read, and not with it,
    // lost an acknowledged write (or gained one nobody made): counted
    // apart from keys that went wrong while the clients ran.
    let ran = linearizability::check(&history[..before_final], &absent)
        .map_err(|e| RunError::Process(format!("the history is malformed: {e}")))?;
    let lost = full
        .non_linearizable_keys
        .saturating_sub(ran.non_linearizable_keys) as u64;
    let (structure, sizes) = match Handle::open(cluster, INDEX, spec.kind)
        .await
        .map_err(RunError::index("cannot open the index"))?
    {
        // A write cut off past its commit point (in doubt) may have left
        // its locks, long expired: repaired first, as any client meeting
        // them would, so that only locks nobody can repair count.
        Handle::Tree(mut t) => {
            t.inner()
                .repair_expired_locks()
                .await
                .map_err(RunError::index("cannot repair expired locks"))?;
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            let objects = t.inner().objects_in(&r);
            (r.violations, ObjectSizes::new(objects))
        }
        Handle::Table(mut t) => {
            t.inner()
                .repair_expired_locks()
                .await
                .map_err(RunError::index("cannot repair expired locks"))?;
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
        lease_lost: Vec::new(),
        in_doubt: 0,
        keys: spec.keys,
        lost,
        non_linearizable: full.non_linearizable_keys as u64,
        linearizability: full,
        structure_violations: structure.len() as u64,
        structure: structure.into_iter().take(10).collect(),
        replicas,
    })
}

/// `history.jsonl`: every event, one JSON line each, the final reads last.
fn write_history(history: &[Event], out: &Path) -> Result<(), RunError> {
    let path = out.join("history.jsonl");
    let io = |e| RunError::io(&path, e);
    let w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    linearizability::write_jsonl(w, history).map_err(io)
}

/// Polls the control plane from a pause at `start` of `node` for `pause`:
/// a pause past detection goes as a kill (declared dead, evicted, the
/// region whole again elsewhere) and then the node active again as an
/// empty spare; a shorter one ends with the node still active a few leases
/// after it resumed.
async fn watch_pause(
    cluster: &Cluster,
    region: fabric::RegionId,
    node: MemNodeId,
    start: Instant,
    pause: Duration,
) -> Result<Phases, RunError> {
    let ms = || start.elapsed().as_secs_f64() * 1e3;
    let settle = pause + PAUSE_SETTLE;
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        let status = Status::read(cluster).await?;
        let state = status.node_state(node);
        if p.detected_ms.is_none() && state == Some(MemNodeState::Dead) {
            p.detected_ms = Some(ms());
        }
        let r = status.region(region)?;
        if p.evicted_ms.is_none() && !r.on(node) {
            p.evicted_ms = Some(ms());
            p.detected_ms = p.detected_ms.or(p.evicted_ms);
        }
        if p.evicted_ms.is_some() && p.serving_ms.is_none() && r.usable() {
            p.serving_ms = Some(ms());
        }
        if p.evicted_ms.is_some() && p.rereplicated_ms.is_none() && r.whole() {
            p.rereplicated_ms = Some(ms());
        }
        let resumed = start.elapsed() > pause;
        if resumed && state == Some(MemNodeState::Active) {
            let back = match p.evicted_ms {
                Some(_) => p.rereplicated_ms.is_some() && !r.on(node) || r.whole(),
                None => start.elapsed() > settle,
            };
            if back {
                p.active_ms = Some(ms());
                return Ok(p);
            }
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// The members `members` (1-based, as a fault names them) as link indexes.
fn member_indexes(members: &[u32]) -> Vec<usize> {
    members.iter().map(|m| *m as usize - 1).collect()
}

/// The memory node holding the region's primary or first backup, and its
/// process (from 0).
async fn node_by_role(
    cluster: &Cluster,
    local: &LocalCluster,
    region: fabric::RegionId,
    role: Option<ReplicaRole>,
) -> Result<(MemNodeId, usize), RunError> {
    let status = Status::read(cluster).await?;
    let r = status.region(region)?;
    let replica = usize::from(role == Some(ReplicaRole::Backup));
    let node = r
        .replicas
        .get(replica)
        .ok_or_else(|| RunError::Process(format!("region {region} has no replica {replica}: {r:?}")))?
        .node;
    let process = local.process_of(node, &status.0.memnodes).map_err(local_error)?;
    Ok((node, process))
}

/// SIGKILLs the Raft leader, waits for another member to claim the lead,
/// and (with `back_after`) restarts it that long after the kill and waits
/// until it knows the leader again. Returns the member's id and when it
/// was killed.
async fn kill_leader(
    local: &mut LocalCluster,
    back_after: Option<Duration>,
) -> Result<(MemNodeId, Instant, Phases), RunError> {
    let control = |e: harness::control::ControlError| RunError::Control(e.to_string());
    let clients = local.control().clients().map_err(control)?;
    let (i, status) = local
        .control()
        .leader(&clients, PHASE_TIMEOUT)
        .await
        .map_err(control)?;
    let at = local.control().kill(i).map_err(control)?;
    let mut p = Phases::default();
    let (_, new) = local
        .control()
        .leader(&clients, PHASE_TIMEOUT)
        .await
        .map_err(control)?;
    p.elected_ms = Some(at.elapsed().as_secs_f64() * 1e3);
    tracing::info!(
        killed = status.member,
        elected = new.member,
        "control-plane leader replaced"
    );
    if let Some(d) = back_after {
        tokio::time::sleep_until((at + d).into()).await;
        local.control().restart(i).await.map_err(control)?;
        let c = &clients[i];
        while at.elapsed() < d + PHASE_TIMEOUT {
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await {
                if s.leader.is_some() {
                    p.member_back_ms = Some(at.elapsed().as_secs_f64() * 1e3);
                    break;
                }
            }
            tokio::time::sleep(PHASE_POLL).await;
        }
    }
    Ok((status.member as MemNodeId, at, p))
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
