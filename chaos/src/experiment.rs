//! Chaos experiments as TOML files (`deploy/experiments/*.toml`): the
//! cluster's shape, the index and its variants, the workload, how long it
//! runs, and the faults to inject when.
//!
//! ```toml
//! name = "kill-client"
//! duration = "6s"
//!
//! [cluster]
//! memory_nodes = 1           # 1 to 3: the region's primary, then backups
//! transport = "shm"          # or "tcp"
//! clients = 3                # client processes
//! threads_per_client = 1
//! control_plane = true       # owner ids and client leases from a control-plane member
//! client_lease = "1s"        # the control plane's lease of each client process
//!
//! [index]
//! kind = "btree"             # or "hash"
//! variants = ["optimal", "rtx"]
//! expect_violations = ["optimal"]
//!
//! [workload]
//! ycsb = "insert"            # a..e, or insert (100% inserts)
//! keys = 100000
//! distribution = "uniform"   # or "zipf"
//!
//! [[faults]]
//! kind = "kill-client"       # SIGKILL (after its next CAS that swaps)
//! client = 2
//! at = "2s"
//!
//! [[faults]]
//! kind = "pause-client"      # SIGSTOP (after its next CAS that swaps), then SIGCONT after `for`
//! client = 1
//! at = "3s"
//! for = "100ms"
//! ```
//!
//! Faults on memory nodes (`kill-memnode`, `restart-memnode`) run on a
//! local cluster whose data path follows the control plane's map, with the
//! recovery coordinator on its leader (`run::replica`):
//!
//! ```toml
//! [cluster]
//! memory_nodes = 3           # the region's replicas
//! spares = 1                 # memory nodes holding nothing at first
//! memnode_lease = "100ms"    # a silent memory node is suspect after it, dead after two
//!
//! [[faults]]
//! kind = "kill-memnode"      # SIGKILL the node holding a replica of the index
//! role = "primary"           # or "backup"
//! at = "1s"
//!
//! [[faults]]
//! kind = "restart-memnode"   # the last killed node, from its image
//! at = "3s"
//!
//! [[faults]]
//! kind = "pause-memnode"     # SIGSTOP, SIGCONT after `for` (past two leases: declared dead)
//! role = "backup"
//! at = "3500ms"
//! for = "400ms"
//!
//! [[faults]]
//! kind = "kill-control-leader" # SIGKILL the Raft leader; restarted after `for` (if given)
//! at = "4s"
//! for = "500ms"
//!
//! [[faults]]
//! kind = "clock-skew"        # the client's clock skew_ms ahead (negative: behind), for `for`
//! client = 1
//! skew_ms = 5
//! at = "4500ms"
//!
//! [[faults]]
//! kind = "partition"         # cut a memory node (by role) or a client from members, for `for`
//! target = "memnode"         # or "client" (with client = N)
//! role = "primary"
//! members = [1, 2]           # default: all three
//! at = "5s"
//! for = "300ms"
//! ```
//!
//! A `[campaign]` section says what `kintsugi chaos campaign` draws from
//! (`campaign::CampaignSpec`: kinds, faults_max, skew_beyond_drift).
//!
//! [`Experiment::from_toml`] parses and validates; every error names the
//! field and the rule.

use std::path::Path;
use std::time::Duration;

use index::Variant;
use serde::{Deserialize, Serialize};

use control_plane::state::{LEASE_MS_MAX, OWNER_ID_END};

use workload::{Distribution, Workload, MAX_RECORDS};

/// Most memory node processes: the region's primary and two backups, the
/// replication the rTX paper evaluates (f = 2). Every replica is a full
/// copy of the region in this machine's memory.
pub const MEMORY_NODES_MAX: u32 = 3;
/// Most client processes: each thread of each is an owner id, and every
/// client is a process of its own on a machine with few cores.
pub const CLIENTS_MAX: u32 = 64;
/// Most threads per client process.
pub const THREADS_PER_CLIENT_MAX: u32 = 16;
/// Longest experiment: its timeline has a bucket per millisecond per variant.
pub const DURATION_MAX: Duration = Duration::from_secs(600);
/// Shortest control-plane client lease: renewals go every third of it over
/// HTTP, and the leader checks leases every 20 ms.
pub const CLIENT_LEASE_MS_MIN: u64 = 100;
/// Most faults in one schedule.
pub const FAULTS_MAX: usize = 64;
/// Shortest memory-node lease: renewals go every third of it, and the
/// leader checks leases every 20 ms.
pub const MEMNODE_LEASE_MS_MIN: u64 = 60;
/// Shortest pause that can outlive a lease: the rTX lease is an operation's
/// share plus an 8 ms drift (`txn::TxConfig`), so anything shorter may
/// never be suspected.
pub const PAUSE_MIN: Duration = Duration::from_millis(20);
/// Largest clock skew a fault injects, either way: ten seconds is far past
/// any rTX lease (milliseconds) and a client lease (a second by default),
/// enough to show what breaks beyond the drift.
pub const SKEW_MS_MAX: u64 = 10_000;
/// Control-plane members of a local-cluster run (`run::replica`): three,
/// so that one can be killed and the others still form a quorum.
pub const CONTROL_MEMBERS: u32 = 3;

/// An experiment, as read from its file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, used in file names and the plot's title.
    pub name: String,
    /// What the experiment shows (free text).
    #[serde(default)]
    pub description: String,
    /// How long the clients run the workload, from their common start.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// The processes.
    pub cluster: ClusterSpec,
    /// The index under test.
    pub index: IndexSpec,
    /// What the clients do.
    pub workload: WorkloadToml,
    /// What happens to them, in time order.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Seed of the keys, values and op streams (`--seed` overrides it).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// What `kintsugi chaos campaign` may draw from this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<crate::campaign::CampaignSpec>,
}

fn default_seed() -> u64 {
    42
}

/// Where the memory is and how many clients use it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Memory node processes, each holding a replica of the index's region:
    /// the first is the primary, the others backups.
    #[serde(default = "one")]
    pub memory_nodes: u32,
    /// How clients reach it.
    #[serde(default = "default_transport")]
    pub transport: TransportKind,
    /// Client processes.
    pub clients: u32,
    /// Threads (each one index client, one owner id) per client process.
    #[serde(default = "one")]
    pub threads_per_client: u32,
    /// Whether a control-plane member runs beside the memory nodes: they
    /// register with it, and every client (the loader, each client process,
    /// the checker) takes its owner ids with a lease from it. Without it
    /// owner ids are numbered by the runner (design §3: the embedded case).
    #[serde(default = "yes")]
    pub control_plane: bool,
    /// The control plane's lease of each client process: renewed every
    /// third of it; a killed client's lapses and the control plane expires
    /// it. (The rTX lease of a lock is another, of milliseconds.)
    #[serde(default = "default_client_lease", with = "humantime_serde")]
    pub client_lease: Duration,
    /// Memory nodes beyond `memory_nodes` that hold no replica at first:
    /// where recovery re-replicates a dead node's region (memory-node
    /// faults only).
    #[serde(default)]
    pub spares: u32,
    /// The control plane's lease of each memory node: one that has not
    /// renewed for this long is suspect, for twice this long dead
    /// (memory-node faults only).
    #[serde(default = "default_memnode_lease", with = "humantime_serde")]
    pub memnode_lease: Duration,
}

fn default_memnode_lease() -> Duration {
    Duration::from_millis(100)
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn default_client_lease() -> Duration {
    Duration::from_secs(1)
}

impl ClusterSpec {
    /// The transport's name.
    pub fn transport_name(&self) -> &'static str {
        self.transport.name()
    }
}

/// How clients reach the memory nodes: the one transport enum; a run's
/// clients are processes, so `local` is refused by [`Experiment::validate`].
pub use harness::TransportKind;
/// Transports a run's client processes can use.
const RUN_TRANSPORTS: &[TransportKind] = &[TransportKind::Shm, TransportKind::Tcp];

fn default_transport() -> TransportKind {
    TransportKind::Shm
}

/// Which index, in which variants (each runs on a fresh memory node).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IndexSpec {
    /// The index.
    pub kind: IndexKind,
    /// Variants, run one after the other.
    pub variants: Vec<Variant>,
    /// Variants whose checks are expected to fail (optimal, which cannot
    /// repair a dead client's locks): reported, but they do not fail the run.
    #[serde(default)]
    pub expect_violations: Vec<Variant>,
}

/// The index under test: the control plane's catalog names the same two.
pub use control_plane::state::IndexKind;

/// The workload as the file gives it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkloadToml {
    /// YCSB letter (a..e) or `insert`.
    pub ycsb: String,
    /// Keys loaded before the clients start.
    pub keys: u64,
    /// Request distribution: `uniform` or `zipf`.
    #[serde(default = "uniform")]
    pub distribution: String,
}

fn uniform() -> String {
    "uniform".to_owned()
}

/// One fault of the schedule.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// What to do.
    pub kind: FaultKind,
    /// To which client process (0-based; client faults only).
    #[serde(default)]
    pub client: u32,
    /// Which replica's node (`kill-memnode`, `pause-memnode`).
    #[serde(default)]
    pub role: Option<ReplicaRole>,
    /// When, from the clients' common start.
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    /// How long the fault lasts: a pause (`pause-client`, `pause-memnode`),
    /// a skew (`clock-skew`; to the end without it), or a leader's absence
    /// (`kill-control-leader`: restarted after it; never without it).
    #[serde(default, rename = "for", with = "humantime_serde")]
    pub pause: Option<Duration>,
    /// Milliseconds added to the client's clock (`clock-skew` only; negative
    /// is behind).
    #[serde(default)]
    pub skew_ms: Option<i64>,
    /// What a `partition` cuts off: a memory node (by `role`) or a client
    /// (`client`).
    #[serde(default)]
    pub target: Option<PartitionTarget>,
    /// The control-plane members (1..=3) a `partition` cuts the target
    /// from; empty: all of them.
    #[serde(default)]
    pub members: Vec<u32>,
}

/// What a `partition` cuts off from the control plane.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionTarget {
    /// The memory node holding the index's primary or first backup (`role`).
    Memnode,
    /// A client (`client`): its lease renewals and map watch.
    Client,
}

/// The fault kinds this runner injects.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the client process right after its next CAS that swaps: it dies
    /// holding a lock, its half-done work left behind.
    KillClient,
    /// SIGSTOP it right after its next CAS that swaps, holding a lock, and SIGCONT it
    /// `for` after the fault's time: it is suspected dead (its lease
    /// expires), repaired around, and then carries on mid-operation.
    PauseClient,
    /// SIGKILL the memory node holding the index's primary or a backup
    /// (`role`): recovery must promote or drop it and make the region
    /// whole again on a spare.
    KillMemnode,
    /// Start the last killed memory node again from its image: it must
    /// come back as an empty spare, never with its stale replica.
    RestartMemnode,
    /// SIGSTOP the memory node holding the index's primary or a backup
    /// (`role`) and SIGCONT it `for` later. Past two memory-node leases it
    /// is declared dead and recovery acts as for a kill; when it resumes it
    /// must serve nothing stale and come back as an empty spare.
    PauseMemnode,
    /// SIGKILL the control plane's Raft leader; restart it `for` later (if
    /// given). The members elect another; leases, recovery and the clients'
    /// map go on through it.
    KillControlLeader,
    /// Put `client`'s clock `skew_ms` ahead (or behind) for `for` (or to
    /// the end): the lock leases it writes and the expiries it judges move
    /// with it. Within the rTX drift the run must pass.
    ClockSkew,
    /// Cut a memory node's or a client's traffic to some (or all)
    /// control-plane members for `for`, then heal it (`run::partition`:
    /// in-path proxies). A node cut off past two leases is declared dead
    /// and comes back as a spare; a client cut off past its lease loses it
    /// and must stop.
    Partition,
}

impl FaultKind {
    /// Every kind, for campaigns and `--help`.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::KillClient,
        FaultKind::PauseClient,
        FaultKind::KillMemnode,
        FaultKind::RestartMemnode,
        FaultKind::PauseMemnode,
        FaultKind::KillControlLeader,
        FaultKind::ClockSkew,
        FaultKind::Partition,
    ];

    /// Whether the fault is run by the local-cluster runner (`run::replica`):
    /// faults on memory nodes and control-plane members, and the clock of
    /// its in-process clients.
    pub fn on_memnode(self) -> bool {
        matches!(
            self,
            FaultKind::KillMemnode
                | FaultKind::RestartMemnode
                | FaultKind::PauseMemnode
                | FaultKind::KillControlLeader
                | FaultKind::ClockSkew
                | FaultKind::Partition
        )
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FaultKind::KillClient => "kill-client",
            FaultKind::PauseClient => "pause-client",
            FaultKind::KillMemnode => "kill-memnode",
            FaultKind::RestartMemnode => "restart-memnode",
            FaultKind::PauseMemnode => "pause-memnode",
            FaultKind::KillControlLeader => "kill-control-leader",
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::Partition => "partition",
        })
    }
}

/// A replica's role in its region.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaRole {
    /// The first replica: every decision is made on it.
    Primary,
    /// The first backup.
    Backup,
}

impl std::fmt::Display for ReplicaRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplicaRole::Primary => "primary",
            ReplicaRole::Backup => "backup",
        })
    }
}

/// An experiment file that cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML of this shape.
    #[error("{0}")]
    Parse(String),
    /// A field breaks a rule.
    #[error("{field}: {rule}")]
    Invalid {
        /// The field, as a TOML path.
        field: String,
        /// The rule it breaks.
        rule: String,
    },
}

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ExperimentError {
    ExperimentError::Invalid {
        field: field.into(),
        rule: rule.into(),
    }
}

impl Experiment {
    /// Reads and validates the experiment in `path`.
    pub fn from_file(path: &Path) -> Result<Experiment, ExperimentError> {
        let text = std::fs::read_to_string(path).map_err(|source| ExperimentError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Parses and validates an experiment.
    pub fn from_toml(text: &str) -> Result<Experiment, ExperimentError> {
        let e: Experiment = toml::from_str(text).map_err(|e| ExperimentError::Parse(e.to_string()))?;
        e.validate()?;
        Ok(e)
    }

    /// Checks every rule; the first broken one is the error.
    pub fn validate(&self) -> Result<(), ExperimentError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(invalid(
                "name",
                "1 to 64 characters of a-z, A-Z, 0-9, '-' and '_'",
            ));
        }
        if self.duration.is_zero() || self.duration > DURATION_MAX {
            return Err(invalid(
                "duration",
                format!("more than 0 and at most {DURATION_MAX:?}"),
            ));
        }
        self.validate_cluster()?;
        self.validate_index()?;
        self.validate_faults()
    }

    /// The cluster's shape, transport and lease.
    fn validate_cluster(&self) -> Result<(), ExperimentError> {
        let c = &self.cluster;
        if c.memory_nodes == 0 || c.memory_nodes > MEMORY_NODES_MAX {
            return Err(invalid(
                "cluster.memory_nodes",
                format!("1 to {MEMORY_NODES_MAX} (a primary and up to 2 backups)"),
            ));
        }
        if let Err(e) = c
            .transport
            .require("a chaos run's client processes", RUN_TRANSPORTS)
        {
            return Err(invalid("cluster.transport", e.to_string()));
        }
        let lease_ms = c.client_lease.as_millis();
        if !(u128::from(CLIENT_LEASE_MS_MIN)..=u128::from(LEASE_MS_MAX)).contains(&lease_ms) {
            return Err(invalid(
                "cluster.client_lease",
                format!("{CLIENT_LEASE_MS_MIN}ms to {LEASE_MS_MAX}ms"),
            ));
        }
        if c.clients == 0 || c.clients > CLIENTS_MAX {
            return Err(invalid("cluster.clients", format!("1 to {CLIENTS_MAX}")));
        }
        if c.threads_per_client == 0 || c.threads_per_client > THREADS_PER_CLIENT_MAX {
            return Err(invalid(
                "cluster.threads_per_client",
                format!("1 to {THREADS_PER_CLIENT_MAX}"),
            ));
        }
        if c.control_plane && self.owner_ids() >= u32::from(OWNER_ID_END) {
            return Err(invalid(
                "cluster.clients",
                format!(
                    "the control plane hands out owner ids 1..{OWNER_ID_END}; this run needs {} \
                     (one per client thread, the loader and the checker)",
                    self.owner_ids()
                ),
            ));
        }
        Ok(())
    }

    /// The index, its variants, and the workload it runs.
    fn validate_index(&self) -> Result<(), ExperimentError> {
        if self.index.variants.is_empty() {
            return Err(invalid("index.variants", "at least one of optimal, rtx"));
        }
        for (i, v) in self.index.variants.iter().enumerate() {
            if self.index.variants[..i].contains(v) {
                return Err(invalid("index.variants", format!("{v} is listed twice")));
            }
        }
        if let Some(v) = self
            .index
            .expect_violations
            .iter()
            .find(|v| !self.index.variants.contains(v))
        {
            return Err(invalid(
                "index.expect_violations",
                format!("{v} is not one of index.variants"),
            ));
        }
        let w = self.workload()?;
        if self.index.kind == IndexKind::Hash && w.workload == Workload::E {
            return Err(invalid(
                "workload.ycsb",
                "RACE hashing has no scans: workload e needs kind = \"btree\"",
            ));
        }
        Ok(())
    }

    /// Whether the schedule faults memory nodes (such a run is a
    /// `run::replica` one).
    pub fn on_memnodes(&self) -> bool {
        self.faults.iter().any(|f| f.kind.on_memnode())
    }

    /// The fault schedule: in time order, within the duration, one per client.
    fn validate_faults(&self) -> Result<(), ExperimentError> {
        let c = &self.cluster;
        if self.faults.len() > FAULTS_MAX {
            return Err(invalid("faults", format!("at most {FAULTS_MAX}")));
        }
        for (i, f) in self.faults.iter().enumerate() {
            if f.at >= self.duration {
                return Err(invalid(
                    format!("faults[{i}].at"),
                    "must fall within the duration",
                ));
            }
            if i > 0 && f.at < self.faults[i - 1].at {
                return Err(invalid(
                    format!("faults[{i}].at"),
                    "faults must be listed in time order",
                ));
            }
        }
        if self.on_memnodes() {
            return self.validate_memnode_faults();
        }
        if c.spares > 0 {
            return Err(invalid(
                "cluster.spares",
                "only a run with memory-node faults has spares",
            ));
        }
        let mut faulted = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            let field = |name: &str| format!("faults[{i}].{name}");
            if f.role.is_some() {
                return Err(invalid(field("role"), "only a kill-memnode fault has a role"));
            }
            if f.skew_ms.is_some() {
                return Err(invalid(field("skew_ms"), "only a clock-skew fault takes skew_ms"));
            }
            if f.target.is_some() || !f.members.is_empty() {
                return Err(invalid(
                    field("target"),
                    "only a partition takes a target and members",
                ));
            }
            if f.client >= c.clients {
                return Err(invalid(
                    field("client"),
                    format!("{} is not a client (0..{})", f.client, c.clients),
                ));
            }
            match (f.kind, f.pause) {
                (FaultKind::KillClient, Some(_)) => {
                    return Err(invalid(field("for"), "only a pause-client fault lasts"));
                }
                (FaultKind::PauseClient, None) => {
                    return Err(invalid(
                        field("for"),
                        "a pause-client fault needs `for`, e.g. \"200ms\"",
                    ));
                }
                (FaultKind::PauseClient, Some(p)) if p < PAUSE_MIN => {
                    return Err(invalid(
                        field("for"),
                        format!("at least {PAUSE_MIN:?}, to outlive the rTX lease of the client's locks"),
                    ));
                }
                (FaultKind::PauseClient, Some(p)) if c.control_plane && p * 3 > c.client_lease => {
                    return Err(invalid(
                        field("for"),
                        format!(
                            "at most a third of cluster.client_lease ({}): renewals go every \
                             third, so a longer pause may lapse the client's control-plane \
                             lease, and the client must then stop",
                            humantime::format_duration(c.client_lease)
                        ),
                    ));
                }
                (FaultKind::PauseClient, Some(p)) if f.at + p >= self.duration => {
                    return Err(invalid(field("for"), "the pause must end within the duration"));
                }
                _ => {}
            }
            if faulted.contains(&f.client) {
                return Err(invalid(
                    field("client"),
                    "one fault per client (a killed client cannot be faulted again)",
                ));
            }
            faulted.push(f.client);
        }
        Ok(())
    }

    /// A schedule of memory-node faults: on rtx, replicated, with a
    /// control plane and a YCSB-A load; kills before restarts.
    fn validate_memnode_faults(&self) -> Result<(), ExperimentError> {
        let c = &self.cluster;
        if let Some(i) = self.faults.iter().position(|f| !f.kind.on_memnode()) {
            return Err(invalid(
                format!("faults[{i}].kind"),
                "client faults and memory-node faults run on different runners: one kind per file",
            ));
        }
        if !c.control_plane {
            return Err(invalid(
                "cluster.control_plane",
                "memory-node faults need the control plane (it decides a node is dead and recovery acts)",
            ));
        }
        if self.index.variants != [Variant::Rtx] {
            return Err(invalid(
                "index.variants",
                "memory-node faults run on [\"rtx\"] only: optimal keeps its locks on the primary and \
                 its writes unreplicated, so a memory node's death is fatal to it",
            ));
        }
        if c.memory_nodes < 2 {
            return Err(invalid(
                "cluster.memory_nodes",
                "at least 2 replicas to survive a memory node",
            ));
        }
        if c.spares > 2 {
            return Err(invalid("cluster.spares", "0 to 2"));
        }
        let lease_ms = c.memnode_lease.as_millis();
        if !(u128::from(MEMNODE_LEASE_MS_MIN)..=u128::from(LEASE_MS_MAX)).contains(&lease_ms) {
            return Err(invalid(
                "cluster.memnode_lease",
                format!("{MEMNODE_LEASE_MS_MIN}ms to {LEASE_MS_MAX}ms"),
            ));
        }
        if self.workload.ycsb != "a" || self.workload.distribution != "uniform" {
            return Err(invalid(
                "workload",
                "memory-node faults run YCSB a, uniform (the load whose acknowledged writes are checked)",
            ));
        }
        // Nodes lost in all (killed or paused), nodes down (killed, not
        // restarted) so far, and when the last killed leader is back.
        let (mut kills, mut down) = (0, 0);
        let mut leader_back: Option<Duration> = None;
        for (i, f) in self.faults.iter().enumerate() {
            let field = |name: &str| format!("faults[{i}].{name}");
            let has_role = matches!(f.kind, FaultKind::KillMemnode | FaultKind::PauseMemnode)
                || f.target == Some(PartitionTarget::Memnode);
            if f.target.is_some() != (f.kind == FaultKind::Partition) {
                return Err(invalid(
                    field("target"),
                    "a partition needs target = \"memnode\" or \"client\"; no other fault takes one",
                ));
            }
            if !f.members.is_empty() && f.kind != FaultKind::Partition {
                return Err(invalid(field("members"), "only a partition names members"));
            }
            if let Some(m) = f.members.iter().find(|m| !(1..=CONTROL_MEMBERS).contains(*m)) {
                return Err(invalid(
                    field("members"),
                    format!("{m} is not a member (1..={CONTROL_MEMBERS})"),
                ));
            }
            match (has_role, f.role) {
                (true, None) => return Err(invalid(field("role"), "\"primary\" or \"backup\"")),
                (false, Some(_)) => {
                    return Err(invalid(
                        field("role"),
                        "only kill-memnode and pause-memnode faults take a role \
                         (a restart takes the last killed node)",
                    ));
                }
                _ => {}
            }
            if f.skew_ms.is_some() != (f.kind == FaultKind::ClockSkew) {
                return Err(invalid(
                    field("skew_ms"),
                    "a clock-skew fault needs skew_ms (milliseconds, negative for behind); no other takes it",
                ));
            }
            let has_client = f.kind == FaultKind::ClockSkew || f.target == Some(PartitionTarget::Client);
            if !has_client && f.client != 0 {
                return Err(invalid(
                    field("client"),
                    "only a clock-skew fault and a client partition name a client",
                ));
            }
            if has_client && f.client >= c.clients {
                return Err(invalid(
                    field("client"),
                    format!("{} is not a client (0..{})", f.client, c.clients),
                ));
            }
            if let Some(p) = f.pause {
                if f.at + p >= self.duration {
                    return Err(invalid(field("for"), "the fault must end within the duration"));
                }
            }
            match f.kind {
                FaultKind::KillMemnode => {
                    if f.pause.is_some() {
                        return Err(invalid(
                            field("for"),
                            "a kill lasts; restart-memnode brings the node back",
                        ));
                    }
                    kills += 1;
                    down += 1;
                }
                FaultKind::RestartMemnode => {
                    if f.pause.is_some() {
                        return Err(invalid(field("for"), "a restart does not last"));
                    }
                    if down == 0 {
                        return Err(invalid(
                            field("kind"),
                            "a restart-memnode needs a kill-memnode before it",
                        ));
                    }
                    down -= 1;
                }
                FaultKind::PauseMemnode => {
                    match f.pause {
                        None => {
                            return Err(invalid(
                                field("for"),
                                "a pause-memnode fault needs `for`, e.g. \"500ms\" (past two \
                                 memory-node leases it is declared dead)",
                            ));
                        }
                        Some(p) if p < PAUSE_MIN => {
                            return Err(invalid(field("for"), format!("at least {PAUSE_MIN:?}")));
                        }
                        Some(_) => {}
                    }
                    kills += 1;
                }
                FaultKind::KillControlLeader => {
                    if leader_back.is_some_and(|back| f.at < back) {
                        return Err(invalid(
                            field("at"),
                            "a leader killed earlier is not back yet (its `for` has not passed, or it \
                             has none): a second member down would leave the three without a quorum",
                        ));
                    }
                    leader_back = Some(f.pause.map_or(Duration::MAX, |p| f.at + p));
                }
                FaultKind::Partition => {
                    if f.pause.is_none() {
                        return Err(invalid(field("for"), "a partition needs `for`, e.g. \"500ms\""));
                    }
                    if f.target == Some(PartitionTarget::Memnode) {
                        kills += 1;
                    }
                }
                FaultKind::ClockSkew => {
                    if f.skew_ms.is_some_and(|s| s.unsigned_abs() > SKEW_MS_MAX) {
                        return Err(invalid(
                            field("skew_ms"),
                            format!("-{SKEW_MS_MAX} to {SKEW_MS_MAX}"),
                        ));
                    }
                }
                // Refused above: one runner per file.
                FaultKind::KillClient | FaultKind::PauseClient => {}
            }
        }
        if kills > c.memory_nodes - 1 + c.spares {
            return Err(invalid(
                "faults",
                "more memory nodes killed or paused than the cluster can lose",
            ));
        }
        Ok(())
    }

    /// The workload, resolved.
    pub fn workload(&self) -> Result<ResolvedWorkload, ExperimentError> {
        let w = &self.workload;
        let workload = w
            .ycsb
            .parse::<Workload>()
            .map_err(|_| invalid("workload.ycsb", format!("'{}' is not a..e or insert", w.ycsb)))?;
        let distribution = w.distribution.parse::<Distribution>().map_err(|_| {
            invalid(
                "workload.distribution",
                format!("'{}' is not uniform or zipf", w.distribution),
            )
        })?;
        if w.keys == 0 || w.keys > MAX_RECORDS {
            return Err(invalid("workload.keys", format!("1 to {MAX_RECORDS}")));
        }
        Ok(ResolvedWorkload {
            workload,
            distribution,
            keys: w.keys,
        })
    }

    /// One line naming what runs: index, transport, workload, clients.
    pub fn headline(&self) -> String {
        let c = &self.cluster;
        let replicas = if c.memory_nodes > 1 {
            format!(" x{} replicas", c.memory_nodes)
        } else {
            String::new()
        };
        format!(
            "{}: {} on {}{replicas}, YCSB {} over {} keys, {} client(s) x {} thread(s)",
            self.name,
            self.index.kind,
            c.transport_name(),
            self.workload.ycsb,
            self.workload.keys,
            c.clients,
            c.threads_per_client
        )
    }

    /// Owner ids the run needs: the loader, one per client thread, the checker.
    pub fn owner_ids(&self) -> u32 {
        2 + self.cluster.clients * self.cluster.threads_per_client
    }
}

/// The workload of an experiment, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedWorkload {
    /// The YCSB workload (or inserts only).
    pub workload: Workload,
    /// The request distribution.
    pub distribution: Distribution,
    /// Keys loaded before the run.
    pub keys: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "kill-client"
duration = "3s"
[cluster]
clients = 3
[index]
kind = "btree"
variants = ["optimal", "rtx"]
expect_violations = ["optimal"]
[workload]
ycsb = "insert"
keys = 1000
[[faults]]
kind = "kill-client"
client = 2
at = "1s"
[[faults]]
kind = "pause-client"
client = 0
at = "1500ms"
for = "100ms"
"#;

    /// `base` with `from` replaced by `to` is refused naming `field`, or
    /// (`field` empty) accepted.
    fn assert_rule(base: &str, from: &str, to: &str, field: &str) {
        assert!(base.contains(from), "{from}");
        let r = Experiment::from_toml(&base.replacen(from, to, 1));
        if field.is_empty() {
            assert!(r.is_ok(), "{to}: {r:?}");
        } else {
            let e = r.expect_err(to).to_string();
            assert!(e.contains(field), "{to}: {e}");
        }
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let e = Experiment::from_toml(GOOD).unwrap();
        assert_eq!(e.duration, Duration::from_secs(3));
        assert_eq!(e.cluster.transport, TransportKind::Shm);
        assert_eq!(e.cluster.threads_per_client, 1);
        assert_eq!(e.seed, 42);
        assert_eq!(e.faults[1].pause, Some(Duration::from_millis(100)));
        assert_eq!(e.workload().unwrap().workload, Workload::Insert);
        assert_eq!(e.owner_ids(), 5);
        assert_eq!(e.cluster.memory_nodes, 1);
        assert!(e.cluster.control_plane);
        assert_eq!(e.cluster.client_lease, Duration::from_secs(1));
    }

    #[test]
    fn every_rule_names_its_field() {
        for (from, to, field) in [
            ("name = \"kill-client\"", "name = \"a b\"", "name"),
            ("duration = \"3s\"", "duration = \"0s\"", "duration"),
            ("clients = 3", "clients = 0", "cluster.clients"),
            (
                "clients = 3",
                "clients = 3\nmemory_nodes = 4",
                "cluster.memory_nodes",
            ),
            ("clients = 3", "clients = 3\nmemory_nodes = 3", ""),
            (
                "clients = 3",
                "clients = 3\nclient_lease = \"10ms\"",
                "cluster.client_lease",
            ),
            (
                "clients = 3",
                "clients = 64\nthreads_per_client = 4",
                "owner ids 1..256",
            ),
            (
                "clients = 3",
                "clients = 64\nthreads_per_client = 4\ncontrol_plane = false",
                "",
            ),
            (
                "clients = 3",
                "clients = 3\nclient_lease = \"150ms\"",
                "faults[1].for",
            ),
            ("\"optimal\", \"rtx\"]", "\"rtx\", \"rtx\"]", "index.variants"),
            (
                "expect_violations = [\"optimal\"]",
                "expect_violations = [\"dtx\"]",
                "variant",
            ),
            ("ycsb = \"insert\"", "ycsb = \"z\"", "workload.ycsb"),
            ("keys = 1000", "keys = 0", "workload.keys"),
            ("client = 2", "client = 3", "faults[0].client"),
            ("at = \"1s\"", "at = \"9s\"", "faults[0].at"),
            ("at = \"1s\"", "at = \"2s\"", "faults[1].at"),
            ("for = \"100ms\"", "for = \"1ms\"", "faults[1].for"),
            ("for = \"100ms\"", "for = \"2s\"", "faults[1].for"),
            ("client = 0", "client = 2", "faults[1].client"),
            ("kind = \"btree\"", "kind = \"hash\"\n", ""),
            ("[workload]", "[workload]\nbogus = 1", "bogus"),
        ] {
            assert_rule(GOOD, from, to, field);
        }
        let hash_e = GOOD
            .replace("kind = \"btree\"", "kind = \"hash\"")
            .replace("\"insert\"", "\"e\"");
        let e = Experiment::from_toml(&hash_e).unwrap_err().to_string();
        assert!(e.contains("no scans"), "{e}");
    }

    const CLUSTER: &str = r#"
name = "cluster-faults"
duration = "4s"
[cluster]
memory_nodes = 3
spares = 2
transport = "tcp"
clients = 2
[index]
kind = "btree"
variants = ["rtx"]
[workload]
ycsb = "a"
keys = 1000
[[faults]]
kind = "pause-memnode"
role = "backup"
at = "1s"
for = "300ms"
[[faults]]
kind = "kill-control-leader"
at = "1500ms"
for = "500ms"
[[faults]]
kind = "clock-skew"
client = 1
skew_ms = -5
at = "2s"
[[faults]]
kind = "partition"
target = "memnode"
role = "primary"
members = [1, 3]
at = "2500ms"
for = "300ms"
"#;

    #[test]
    fn local_cluster_fault_rules_name_their_field() {
        let e = Experiment::from_toml(CLUSTER).unwrap();
        assert!(e.on_memnodes());
        assert_eq!(e.faults[2].skew_ms, Some(-5));
        assert_eq!(e.faults[3].members, vec![1, 3]);
        for (from, to, field) in [
            ("for = \"300ms\"", "", "faults[0].for"),
            ("role = \"backup\"", "", "faults[0].role"),
            ("for = \"300ms\"", "for = \"10ms\"", "faults[0].for"),
            ("for = \"300ms\"", "for = \"9s\"", "faults[0].for"),
            // A second leader kill while the first is down.
            ("at = \"1500ms\"\nfor = \"500ms\"", "at = \"1500ms\"", ""),
            (
                "at = \"2s\"",
                "at = \"1600ms\"\n[[faults]]\nkind = \"kill-control-leader\"\nat = \"1700ms\"",
                "faults",
            ),
            ("skew_ms = -5", "", "faults[2].skew_ms"),
            ("skew_ms = -5", "skew_ms = 20000", "faults[2].skew_ms"),
            ("client = 1", "client = 2", "faults[2].client"),
            ("target = \"memnode\"", "", "faults[3].target"),
            ("target = \"memnode\"", "target = \"switch\"", "unknown variant"),
            ("members = [1, 3]", "members = [4]", "faults[3].members"),
            (
                "target = \"memnode\"\nrole = \"primary\"",
                "target = \"client\"\nclient = 1",
                "",
            ),
            (
                "target = \"memnode\"\nrole = \"primary\"",
                "target = \"client\"\nclient = 5",
                "faults[3].client",
            ),
            (
                "kind = \"clock-skew\"",
                "kind = \"kill-client\"",
                "faults[2].kind",
            ),
        ] {
            assert_rule(CLUSTER, from, to, field);
        }
    }

    #[test]
    fn the_shipped_experiments_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                Experiment::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 2, "kill-client.toml and pause-client.toml at least");
    }
}
