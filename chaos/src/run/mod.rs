//! `kintsugi chaos run`: an experiment with real processes.
//!
//! Per variant, on fresh processes ([`cluster`]):
//! 1. start a control-plane member and form it ([`control`]; unless the
//!    experiment says `control_plane = false`), then `kintsugi memnode`
//!    per memory node (images under /dev/shm for `shm`), registered with it;
//! 2. load the index in this process (the loader). With a control plane,
//!    every client (the loader, each client process, the checker) takes its
//!    owner ids with a lease from it and acts under them only while the
//!    lease certainly holds; without one they are numbered: the loader 1,
//!    the client threads next, the checker last;
//! 3. start the client processes (`kintsugi chaos client`, [`client`]),
//!    wait until all are `ready`, send them one common start;
//! 4. inject the faults at their times (SIGKILL; SIGSTOP then SIGCONT) while
//!    gathering every client's ops per bucket;
//! 5. after the duration, give the clients [`GRACE`] to finish their op;
//!    those that do not are blocked (on a dead client's lock): killed;
//! 6. with a control plane, wait until it has expired the dead clients;
//!    check with a fresh client ([`check`]): repair what dead clients left
//!    (rtx, as recovery would), the index's structural checker (no lock
//!    held), and every acknowledged write against the index's contents;
//!    then, if the check found nothing wrong, have the control plane
//!    forget the dead clients, freeing their owner ids (not otherwise: a
//!    lock optimal cannot repair would seem to be a new holder's).
//!
//! Then the outputs ([`output`]): `timeline.csv`, `timeline.png`,
//! `history.jsonl`, `summary.json`.

pub mod check;
pub mod client;
pub mod cluster;
pub mod control;
pub mod dtx_recovery;
pub mod output;
pub mod partition;
pub mod replica;
mod variant;
pub mod workers;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use index::Variant;
use serde::{Deserialize, Serialize};

use crate::experiment::{Experiment, ExperimentError};
use workload::timeline::FaultEffect;

pub use variant::run_variant;

/// Owner id of the loader without a control plane; clients follow; the
/// checker is the last.
pub use harness::layout::LOADER;
/// The region every run's heap lives in.
pub use harness::layout::REGION;
/// How long the clients get after the duration to finish their last op:
/// an op takes microseconds, so one still running after this is blocked.
pub const GRACE: Duration = Duration::from_secs(2);
/// How long a client process may take to open the index.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Width of a timeline bucket.
pub const BUCKET_US: u64 = 1000;

/// Where the clients find the memory nodes, primary first.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// Their memory images, mapped.
    Shm(Vec<PathBuf>),
    /// Their verb servers.
    Tcp(Vec<String>),
}

/// What a client process is told (`run-spec.json` in the variant's
/// directory).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSpec {
    /// The experiment (seed resolved).
    pub experiment: Experiment,
    /// The variant this run is of.
    pub variant: Variant,
    /// The memory nodes.
    pub endpoint: Endpoint,
    /// Where the client writes its history.
    pub out_dir: PathBuf,
    /// Timeline bucket width.
    pub bucket_us: u64,
    /// Owner id of thread 0 of client 0, without a control plane.
    pub first_client_owner: u16,
    /// The control-plane member clients register with (the bearer token
    /// comes in the environment, `KINTSUGI_TOKEN`).
    pub control: Option<String>,
    /// The runner's own credential for the memory nodes; not written:
    /// clients derive theirs from the cluster secret in their environment
    /// (`KINTSUGI_CLUSTER_SECRET`), as they get their token.
    #[serde(skip)]
    pub credential: Option<fabric::Credential>,
}

impl RunSpec {
    /// What this process presents to the run's memory nodes: the runner's
    /// credential, or one derived from the secret in the environment.
    pub fn data_credential(&self) -> Result<Option<fabric::Credential>, RunError> {
        match &self.credential {
            Some(c) => Ok(Some(c.clone())),
            None => Ok(harness::memory::service_credential()?),
        }
    }

    /// Reads a spec the runner wrote.
    pub fn read(path: &Path) -> Result<RunSpec, RunError> {
        let text = std::fs::read_to_string(path).map_err(|e| RunError::io(path, e))?;
        serde_json::from_str(&text).map_err(RunError::json(path.display().to_string()))
    }

    /// Where the runner writes it: `run-spec.json` in the variant's directory.
    pub fn path(&self) -> PathBuf {
        self.out_dir.join("run-spec.json")
    }
}

/// Why a run could not be carried out (a failed check is not an error: it
/// is in the [`Summary`]).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The experiment is not valid.
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A child process could not be started, got no ready, or could not
    /// be signalled.
    #[error(transparent)]
    Launch(#[from] harness::LaunchError),
    /// The run's memory nodes could not be reached.
    #[error(transparent)]
    Memory(#[from] harness::MemoryError),
    /// The run's control plane could not be started, formed or reached.
    #[error("control plane: {0}")]
    ControlPlane(#[from] harness::control::ControlError),
    /// A process said something that is none of the lines it may say.
    #[error("{from}: {source}")]
    Line {
        /// Who said it.
        from: String,
        /// The line.
        #[source]
        source: harness::LineError,
    },
    /// A JSON file or line could not be written or read.
    #[error("{what}: {source}")]
    Json {
        /// Which.
        what: String,
        /// Why not.
        #[source]
        source: serde_json::Error,
    },
    /// The loader, a client or the checker failed at the fabric, the heap
    /// or the index.
    #[error("{what}: {source}")]
    Index {
        /// What was being done.
        what: String,
        /// The failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A process did not behave (the message is all there is).
    #[error("{0}")]
    Process(String),
    /// Inside a client process (the message is all there is).
    #[error("{0}")]
    Client(String),
    /// A client's operation gave up on a lock nobody released (optimal:
    /// its holder is presumably dead).
    #[error("{0}")]
    Blocked(String),
    /// The control plane refused or did not answer as a run needs.
    #[error("control plane: {0}")]
    Control(String),
    /// The plot could not be drawn.
    #[error("cannot draw the timeline: {0}")]
    Plot(#[from] crate::plot::PlotError),
}

/// A runtime on the calling thread: the runner, each client thread and
/// each lease keeper runs its async work on one of its own.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RunError::Io {
            what: "cannot start a runtime".into(),
            source,
        })
}

/// Nanoseconds since the Unix epoch: the clock every process of a run
/// shares (the common start, acknowledgement times).
pub(crate) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch (the control plane's clock unit).
pub(crate) fn unix_ms() -> u64 {
    unix_ns() / 1_000_000
}

impl RunError {
    fn io(path: &Path, source: std::io::Error) -> RunError {
        RunError::Io {
            what: path.display().to_string(),
            source,
        }
    }

    /// Wraps a failure of the fabric, heap or index with what was tried.
    fn index<E>(what: impl Into<String>) -> impl FnOnce(E) -> RunError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let what = what.into();
        move |e| RunError::Index {
            what,
            source: Box::new(e),
        }
    }

    /// Wraps a JSON failure with the file or line it was about.
    fn json(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> RunError {
        let what = what.into();
        move |source| RunError::Json { what, source }
    }
}

/// How to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `kintsugi` binary (started as control-plane member, memory
    /// nodes and clients).
    pub exe: PathBuf,
    /// Where the outputs go (created).
    pub out: PathBuf,
    /// Overrides the experiment's seed.
    pub seed: Option<u64>,
    /// Print progress (a line per phase and a live line while running) on stderr.
    pub progress: bool,
    /// Break the system on purpose (local-cluster runs only), to show that
    /// the checks catch it.
    pub sabotage: Option<Sabotage>,
}

/// A defect put in on purpose: a campaign run with one must fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sabotage {
    /// Every client's WRITEs to the index's first backup are reported done
    /// and never sent (`fabric::Faulty::drop_writes_to`).
    DropBackupWrites,
    /// The clients repair no other owner's expired lock
    /// (`txn::TxConfig::repair` off): a lock a cut-off commit left blocks
    /// everyone else.
    NoRepair,
    /// The memory nodes serve a wiped image as if it held their replicas,
    /// as they did before image identity (design.md §1b): every memory
    /// node runs with `cluster::placement::SABOTAGE_SERVE_WIPED_ENV` set,
    /// so a node restarted without its image takes its old record back and
    /// serves zeroed replicas. A `wipe-memnode` fault must then fail the
    /// run; other kinds do not show it.
    ServeWiped,
}

impl std::fmt::Display for Sabotage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sabotage::DropBackupWrites => "drop-backup-writes",
            Sabotage::NoRepair => "no-repair",
            Sabotage::ServeWiped => "serve-wiped",
        })
    }
}

impl std::str::FromStr for Sabotage {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop-backup-writes" => Ok(Sabotage::DropBackupWrites),
            "no-repair" => Ok(Sabotage::NoRepair),
            "serve-wiped" => Ok(Sabotage::ServeWiped),
            other => Err(format!(
                "'{other}' is not a sabotage (drop-backup-writes, no-repair, serve-wiped)"
            )),
        }
    }
}

/// How a client process ended.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    /// Ran to the end.
    Finished,
    /// Killed by the schedule.
    Killed,
    /// Gave up on a lock nobody released, or still in an op after the
    /// grace (then killed): blocked behind a dead client.
    Blocked,
    /// Reported an error (or exited unexpectedly).
    Failed(String),
}

/// One client process of a variant's run.
#[derive(Clone, Debug, Serialize)]
pub struct ClientOutcome {
    /// Its number.
    pub client: u32,
    /// Ops it reported.
    pub ops: u64,
    /// Locks of other clients it repaired (rtx; a finished client's count).
    pub repairs: u64,
    /// How it ended.
    pub fate: Fate,
    /// Whether the schedule paused it (and resumed it).
    pub paused: bool,
}

/// One variant's run.
#[derive(Clone, Debug, Serialize)]
pub struct VariantOutcome {
    /// The variant.
    pub variant: Variant,
    /// Ops per bucket, all clients.
    #[serde(skip)]
    pub timeline: Vec<u64>,
    /// Total ops, and the mean rate over the duration.
    pub ops: u64,
    /// Mean ops per second over the duration.
    pub ops_per_sec: f64,
    /// What each fault did.
    pub faults: Vec<FaultEffect>,
    /// The client processes.
    pub clients: Vec<ClientOutcome>,
    /// The final check.
    pub check: check::CheckOutcome,
    /// What the control plane held and decided (with a control plane).
    pub control_plane: Option<control::ControlOutcome>,
    /// dtx: the dead clients whose DTX logs the runner rolled during the
    /// run, once their quarantine was over (`dtx_recovery`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dtx_rolled: Vec<dtx_recovery::Rolled>,
    /// Whether this variant is expected to fail its checks.
    pub expect_violations: bool,
    /// Whether its checks passed.
    pub passed: bool,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The experiment (seed resolved).
    pub experiment: Experiment,
    /// Timeline bucket width in milliseconds.
    pub bucket_ms: f64,
    /// Per variant.
    pub variants: Vec<VariantOutcome>,
    /// Every variant not expected to fail passed.
    pub passed: bool,
}

/// Runs `experiment`: every variant, then the outputs. Returns the summary
/// (whose `passed` says whether the checks held).
pub fn run(experiment: Experiment, options: &Options) -> Result<Summary, RunError> {
    let experiment = prepare(experiment, options)?;
    if experiment.on_memnodes() {
        return Err(RunError::Process(
            "an experiment with memory-node faults runs with run::replica::run".into(),
        ));
    }
    let mut variants = Vec::new();
    for &v in &experiment.index.variants.clone() {
        variants.push(run_variant(&experiment, v, options)?);
    }
    let passed = variants.iter().all(|v| v.passed || v.expect_violations);
    let summary = Summary {
        experiment,
        bucket_ms: BUCKET_US as f64 / 1000.0,
        variants,
        passed,
    };
    output::write_all(&summary, &options.out)?;
    Ok(summary)
}

/// What both runners do first: the seed override, validation, the output
/// directory.
pub(crate) fn prepare(mut experiment: Experiment, options: &Options) -> Result<Experiment, RunError> {
    if let Some(seed) = options.seed {
        experiment.seed = seed;
    }
    experiment.validate()?;
    std::fs::create_dir_all(&options.out).map_err(|e| RunError::io(&options.out, e))?;
    Ok(experiment)
}
