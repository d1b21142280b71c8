//! `kintsugi chaos run` with memory-node faults (`kill-memnode`,
//! `restart-memnode`, `pause-memnode`, `wipe-memnode`, ...): a local cluster (three control-plane members, the
//! region's replicas and the spares, each a `kintsugi memnode` process
//! keeping its image with `--persist`) whose data path follows the control
//! plane's map, and the recovery coordinator on the Raft leader.
//!
//! 1. start the cluster, create the index (the experiment's one variant,
//!    rtx or dtx, `memory_nodes` replicas);
//! 2. run YCSB A (`cluster::load`) from this process, one task and owner id
//!    per client thread, counting ops per 1 ms bucket;
//! 3. at each fault's time: SIGKILL the node holding the index's primary or
//!    first backup, or restart the last killed one from its image, or
//!    kill one and start it again at once without its image (a wipe); then
//!    watch the control plane for the phases: the node declared dead
//!    (detection; for a wipe, its new image id), its replica evicted (a
//!    primary's backup promoted), the region serving again, and whole
//!    again (re-replicated on a spare); a restarted or wiped node active
//!    again (as an empty spare);
//! 4. after the duration, stop the load, wait until the region is whole,
//!    and check: no error reached the application, every acknowledged
//!    write present with its value, the structure sound, the replicas
//!    equal word for word (`Heap::compare_replicas`).
//!
//! The clients here are tasks of this process, not processes: what dies is
//! a memory node. Outputs: `summary.json` (each fault's phase times),
//! `timeline.csv` (ops per bucket, with the phases marked), `timeline.png`.

mod check;
mod faults;
mod leader;
mod outcome;
mod side;
mod watch;

pub use check::ReplicaRunCheck;
use faults::{Injector, Status, Watch};
pub use outcome::{MemnodeFault, Phases};
pub use side::SideCheck;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::load::Handle;
use cluster::{Cluster, ClusterOptions};
use control_plane::config::Timing;
use harness::local::{IndexSection, LocalCluster, LocalClusterSpec, MemorySection};
use index::Variant;
use serde::Serialize;

use crate::experiment::{Experiment, TransportKind};
use crate::plot::{render_png, Marker, Series, TimelinePlot};
use crate::run::output::{PLOT_HEIGHT, PLOT_WIDTH, SMOOTH_BUCKETS};
use crate::run::partition::Links;
use crate::run::workers::{self, WorkersSpec};
use crate::run::{Options, RunError, Sabotage, BUCKET_US};

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
/// Bytes each memory node offers (address space until written).
const CAPACITY: &str = "1GiB";
/// The index's region: room for the keys at a B+tree's or a table's
/// footprint, with slack for copy-on-write.
fn index_bytes(keys: u64) -> u64 {
    (keys * 1024).clamp(16 << 20, 512 << 20)
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
    /// Each client's rTX counters (by client number): repairs it made,
    /// expired locks it met (each a false expiry while every client
    /// lives, as under a clock skew past the drift), aborts.
    pub tx_by_client: Vec<txn::TxStats>,
    /// The faults.
    pub faults: Vec<MemnodeFault>,
    /// The check.
    pub check: ReplicaRunCheck,
    /// The side indexes of a mixed-rf cluster (`cluster.side_replicas`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sides: Vec<SideCheck>,
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
        for s in self.sides.iter().filter(|s| !s.is_ok()) {
            why.push(format!("side index {}", s.describe()));
        }
        for f in self.faults.iter().filter(|f| !f.completed()) {
            why.push(format!(
                "{} did not complete its phases ({})",
                f.label(),
                f.phases.came()
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

/// The local cluster an experiment asks for, in `dir`; with the
/// `serve-wiped` sabotage its memory nodes serve wiped images.
fn cluster_spec(e: &Experiment, dir: &Path, sabotage: Option<Sabotage>) -> LocalClusterSpec {
    let c = &e.cluster;
    let env = match sabotage {
        Some(Sabotage::ServeWiped) => vec![(
            cluster::placement::SABOTAGE_SERVE_WIPED_ENV.to_owned(),
            "1".to_owned(),
        )],
        _ => Vec::new(),
    };
    LocalClusterSpec {
        dir: dir.to_owned(),
        memory: MemorySection {
            nodes: (c.memory_nodes + c.spares) as usize,
            capacity: CAPACITY.into(),
            transport: c.transport,
            persist: true,
            env,
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
    // One variant (the experiment's rules): rtx or dtx.
    let variant = e.index.variants.first().copied().unwrap_or(Variant::Rtx);
    let index_variant = match variant {
        Variant::Dtx => control_plane::state::IndexVariant::Dtx,
        Variant::Rtx | Variant::Optimal => control_plane::state::IndexVariant::Rtx,
    };
    let dir = options.out.join(variant.to_string());
    std::fs::create_dir_all(&dir).map_err(|err| RunError::io(&dir, err))?;
    // The cluster is this run's own: images a previous run left there
    // (`--persist`) would come back as stale nodes.
    let cluster_dir = dir.join("cluster");
    if cluster_dir.exists() {
        std::fs::remove_dir_all(&cluster_dir).map_err(|err| RunError::io(&cluster_dir, err))?;
    }
    let spec = cluster_spec(e, &cluster_dir, options.sabotage);
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
    // The runner's own session reaches the members through proxies too,
    // which a snapshot restore points at the new members.
    let runner_links = Links::start(&file.control).map_err(|e| RunError::io(&dir, e))?;
    let tasks = (c.clients * c.threads_per_client) as usize;
    let cluster = Arc::new(
        Cluster::connect_with(
            &runner_links.addrs(),
            &file.client_token,
            ClusterOptions {
                name: "chaos".into(),
                replicas: c.memory_nodes as u8,
                index_bytes: index_bytes(e.workload.keys),
                hash_keys: e.workload.keys,
                owner_ids: (tasks + 4) as u16,
                variant: index_variant,
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
    // Over tcp each session reaches each memory node through a proxy of
    // its own too, which `partition-data` and `late-delivery` cut.
    let mut data_links = Vec::with_capacity(c.clients as usize);
    let client_options = ClusterOptions {
        owner_ids: c.threads_per_client as u16 + 2,
        faults: Some(fabric::FaultPlan::default()),
        tx: txn::TxConfig {
            repair: options.sabotage != Some(Sabotage::NoRepair),
            ..txn::TxConfig::default()
        },
        variant: index_variant,
        request_deadline: c.request_deadline,
        ..ClusterOptions::default()
    };
    for i in 0..c.clients {
        let links = Links::start(&file.control).map_err(|e| RunError::io(&dir, e))?;
        let data = match c.transport {
            TransportKind::Tcp => Links::start(&file.memnodes).map_err(|e| RunError::io(&dir, e))?,
            _ => Links(Vec::new()),
        };
        let session = Cluster::connect_with(
            &links.addrs(),
            &file.client_token,
            ClusterOptions {
                name: format!("chaos-client-{i}"),
                data_path_via: file.memnodes.iter().cloned().zip(data.addrs()).collect(),
                ..client_options.clone()
            },
        )
        .await
        .map_err(RunError::index("a client cannot join the cluster"))?;
        sessions.push(Arc::new(session));
        session_links.push(links);
        data_links.push(data);
    }
    let sides = side::make(
        &runner_links.addrs(),
        &file.client_token,
        &c.side_replicas,
        e.index.kind,
        index_variant,
    )
    .await?;
    if !sides.is_empty() {
        say(
            options,
            &format!(
                "side indexes of {:?} replicas made and loaded with {} keys each",
                c.side_replicas,
                crate::experiment::SIDE_KEYS
            ),
        );
    }
    let sole = c
        .side_replicas
        .iter()
        .position(|&rf| rf == 1)
        .and_then(|i| sides.get(i))
        .map(|s| s.region);
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
    if options.sabotage == Some(Sabotage::ServeWiped) {
        say(
            options,
            "sabotage: the memory nodes serve a wiped image as if it held their replicas",
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
    let watch = Watch::new(&file.control, &file.client_token)?;
    let mut injector = Injector {
        watch: &watch,
        local: &mut local,
        region,
        sole,
        t0,
        sessions: &sessions,
        session_links: &session_links,
        node_links: &node_links,
        runner_links: &runner_links,
        control: file.control.clone(),
        client_lease: c.client_lease,
        killed: Vec::new(),
        skews: Vec::new(),
        cut_off: Vec::new(),
        data_links: &data_links,
        heir_kit: faults::HeirKit {
            token: &file.client_token,
            options: client_options.clone(),
            spec: &spec,
            threads: c.threads_per_client as usize,
            stop: stop.clone(),
            ops: ops.clone(),
        },
        heirs: Vec::new(),
        heir_work: Vec::new(),
    };
    for f in &e.faults {
        tokio::time::sleep_until((t0 + f.at).into()).await;
        let done = injector.inject(f).await?;
        say(
            options,
            &format!(
                "{} {} at {:.0} ms: {}",
                done.kind, done.node, done.at_ms, done.phases
            ),
        );
        injected.push(done);
    }

    let mut report = task
        .await
        .map_err(|e| RunError::Process(format!("the client tasks failed: {e}")))?
        .map_err(RunError::index("the clients failed"))?;
    let Injector {
        skews,
        cut_off,
        control: members,
        heirs,
        heir_work,
        ..
    } = injector;
    // The heirs' operations are checked with everyone else's.
    for work in heir_work {
        let heir = work
            .await
            .map_err(|e| RunError::Process(format!("an heir's tasks failed: {e}")))?
            .map_err(RunError::index("an heir failed"))?;
        report.absorb(heir);
    }
    stop.store(true, Ordering::Relaxed);
    for s in skews {
        let _ = s.await;
    }
    let timeline = sampler.await.unwrap_or_default();
    let faults: Vec<MemnodeFault> = injected.into_iter().map(|i| i.outcome(&timeline)).collect();
    say(options, &format!("{} ops; checking", report.ops));

    // The region whole again before anything is compared.
    // A check that cannot run after a fault that did not complete (a
    // wiped primary served empty: nothing to read back) says so, or the
    // error names only its symptom.
    let incomplete: Vec<String> = faults
        .iter()
        .filter(|f| !f.completed())
        .map(|f| format!("{} did not complete its phases ({})", f.label(), f.phases.came()))
        .collect();
    let after_faults = |e: RunError| {
        if incomplete.is_empty() {
            e
        } else {
            RunError::Process(format!("{e}; after: {}", incomplete.join("; ")))
        }
    };
    faults::await_whole(&cluster, region)
        .await
        .map_err(after_faults)?;
    let checker = workers::CHECKER_PROCESS;
    let mut history = report.events;
    let before_final = history.len();
    history.extend(
        workers::read_all(&cluster, &spec, checker, t0)
            .await
            .map_err(RunError::index("cannot read the keys back"))
            .map_err(after_faults)?,
    );
    check::write_history(&history, &options.out)?;
    let threads = u64::from(c.threads_per_client);
    let (expected, errors): (Vec<_>, Vec<_>) = report
        .errors
        .into_iter()
        .partition(|(task, _)| cut_off.contains(&((task / threads) as usize)));
    let errors = errors.into_iter().map(|(_, e)| e).collect();
    let mut check = check::check(&cluster, &spec, &history, before_final, errors, region)
        .await
        .map_err(after_faults)?;
    check.lease_lost = expected.into_iter().map(|(_, e)| e).collect();
    check.in_doubt = report.in_doubt;
    let operator = cluster::Members::new(&members, &file.token)
        .map_err(|e| RunError::Control(format!("cannot reach the members as an operator: {e}")))?;
    let sides = side::check(&sides, &operator).await.map_err(after_faults)?;
    let passed =
        check.is_ok() && faults.iter().all(MemnodeFault::completed) && sides.iter().all(SideCheck::is_ok);
    // The sessions' map watches go before the members they watch.
    drop(heirs);
    drop(sessions);
    drop(cluster);
    drop(local);
    Ok(ReplicaSummary {
        ops: report.ops,
        ops_per_sec: report.ops as f64 / e.duration.as_secs_f64(),
        retries: report.retries,
        tx_by_client: report.tx_by_client,
        timeline,
        faults,
        check,
        sides,
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
            ("single copy lost", p.lost_ms),
            ("leader faulted", p.leader_faulted_ms),
            ("elected", p.elected_ms),
        ] {
            if let Some(t) = t {
                marks.push((f.at_ms + t, name.to_owned()));
            }
        }
    }
    let path = out.join("timeline.csv");
    let io = |e| RunError::io(&path, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    let variant = s
        .experiment
        .index
        .variants
        .first()
        .map_or_else(|| "rtx".to_owned(), ToString::to_string);
    writeln!(w, "ms,{variant},phase").map_err(io)?;
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
                label: variant.clone(),
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
