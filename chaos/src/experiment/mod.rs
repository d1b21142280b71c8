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
//! Faults on memory nodes (`kill-memnode`, `restart-memnode`, `wipe-memnode`, ...) run on a
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
//! kind = "wipe-memnode"      # SIGKILL, then start it again at once without its image (tcp only)
//! role = "primary"
//! at = "3200ms"
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

mod fault;
#[cfg(test)]
mod tests;

pub use fault::{Fault, FaultKind, PartitionTarget, ReplicaRole};

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
/// Shortest pause of the Raft leader (`pause-control-leader`): past an
/// election, so that another member leads while it is stopped. Followers
/// wait at most `election_timeout_max` (300 ms by default,
/// `control_plane::config::Timing`) and then need a vote round; a second
/// more leaves room for a loaded machine.
pub const LEADER_PAUSE_MIN: Duration = Duration::from_millis(1000);
/// Largest clock skew a fault injects, either way: ten seconds is far past
/// any rTX lease (milliseconds) and a client lease (a second by default),
/// enough to show what breaks beyond the drift.
pub const SKEW_MS_MAX: u64 = 10_000;
/// Control-plane members of a local-cluster run (`run::replica`): three,
/// so that one can be killed and the others still form a quorum.
pub const CONTROL_MEMBERS: u32 = 3;
/// Indexes beside the checked one (`cluster.side_replicas`): each is a
/// region on the nodes and a load before the run; a few show a mixed-rf
/// cluster.
pub const SIDE_INDEXES_MAX: usize = 3;
/// Keys each side index is loaded with and read back: enough to span
/// many B+tree leaves and hash buckets, few enough to load in well under
/// a second.
pub const SIDE_KEYS: u64 = 500;

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
    /// Replication factors of indexes made beside the checked one: a
    /// mixed-rf cluster (memory-node faults only). Each is loaded with
    /// [`SIDE_KEYS`] keys before the faults and read back in full after
    /// them. A single-copy one whose node dies is lost instead: it must be
    /// reported lost, and its operator action (`ctl region drop ID
    /// --confirm`) must remove it; it must hold back no other index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_replicas: Vec<u8>,
    /// How long a client's batch waits for a memory node's answer before
    /// it is called lost (tcp; memory-node faults only): a partition-data
    /// longer than this has batches given up and their late frames refused
    /// when the network delivers them (`fabric::deadline`).
    #[serde(
        default = "default_request_deadline",
        with = "humantime_serde",
        skip_serializing_if = "is_default_request_deadline"
    )]
    pub request_deadline: Duration,
}

fn default_request_deadline() -> Duration {
    fabric::transport::REQUEST_DEADLINE
}

fn is_default_request_deadline(d: &Duration) -> bool {
    *d == default_request_deadline()
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
            return Err(invalid("index.variants", "at least one of optimal, rtx, dtx"));
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
        let dtx = self.index.variants.contains(&Variant::Dtx);
        let paused = self.faults.iter().any(|f| f.kind == FaultKind::PauseClient);
        if dtx && paused && !self.index.expect_violations.contains(&Variant::Dtx) {
            // DTX writes in place: a paused coordinator that carries on
            // after recovery rolled its logs overwrites what recovery
            // restored. That is what separates rTX from DTX; list it.
            return Err(invalid(
                "index.expect_violations",
                "a pause-client fault breaks dtx by design (a paused coordinator writes over what recovery \
                 rolled back): list dtx in expect_violations",
            ));
        }
        if dtx && !self.cluster.control_plane && self.faults.iter().any(|f| f.kind == FaultKind::KillClient) {
            return Err(invalid(
                "cluster.control_plane",
                "dtx recovers a killed client once the control plane expired it: set control_plane = true",
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
