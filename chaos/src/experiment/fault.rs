//! The fault schedule: what each fault kind is, its parameters, and the
//! rules a schedule must keep (one runner per file; faults in time order,
//! within the duration; what each runner can survive).

use std::time::Duration;

use index::Variant;
use serde::{Deserialize, Serialize};

use super::{
    invalid, Experiment, ExperimentError, TransportKind, CONTROL_MEMBERS, FAULTS_MAX, LEADER_PAUSE_MIN,
    LEASE_MS_MAX, MEMNODE_LEASE_MS_MIN, PAUSE_MIN, SIDE_INDEXES_MAX, SKEW_MS_MAX,
};

/// The shortest `cluster.request_deadline`: a loaded 2-core machine running
/// a cluster answers within tens of milliseconds, and a deadline it misses
/// while healthy is a false loss, not the fault's.
const REQUEST_DEADLINE_MIN: Duration = Duration::from_millis(100);
/// The longest: a run lasts seconds.
const REQUEST_DEADLINE_MAX: Duration = Duration::from_secs(60);

/// One fault of the schedule.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// What to do.
    pub kind: FaultKind,
    /// To which client process (0-based; client faults only).
    #[serde(default)]
    pub client: u32,
    /// Which replica's node (`kill-memnode`, `pause-memnode`,
    /// `wipe-memnode`, a memory node's `partition`). For
    /// `pause-control-leader` and `transfer-leader`, optional: that node is
    /// killed first, and the leader is faulted once recovery is at work on
    /// the region (see [`FaultKind::PauseControlLeader`]).
    #[serde(default)]
    pub role: Option<ReplicaRole>,
    /// When, from the clients' common start.
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    /// How long the fault lasts: a pause (`pause-client`, `pause-memnode`,
    /// `pause-control-leader`), a skew (`clock-skew`; to the end without it), or a leader's absence
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
    /// SIGKILL the memory node holding the index's primary or a backup
    /// (`role`) and start it again at once, inside the detection window,
    /// with the same flags but without its image (a new tmpfs, a replaced
    /// disk): the same endpoint, an empty image with another image id. It
    /// must be declared dead for it at once, never served: its replica
    /// evicted (a primary's backup promoted), the region refilled, the
    /// node taken in again as an empty one (design.md §1b). tcp only: on
    /// shm clients keep their mapping of the old image file.
    WipeMemnode,
    /// SIGSTOP the control plane's Raft leader for `for` (past an
    /// election), then SIGCONT it: it resumes believing it leads, with its
    /// recovery coordinator mid-step. With a `role`, the node of that
    /// replica is SIGKILLed first and the leader is stopped once recovery
    /// is at work on the region: a promotion under way (a primary's) or a
    /// replica being made (a backup's, or a primary's after its
    /// promotion). The deposed coordinator's late verbs must be fenced
    /// (design.md §1b: copies are fenced), the new leader's recovery must
    /// finish the region, and the old leader must rejoin as a follower.
    PauseControlLeader,
    /// Move the Raft lead to another member (`ctl members transfer-leader`),
    /// with a `role` once recovery is at work on the region, as for
    /// `pause-control-leader`: the old leader's coordinator stops, the new
    /// one's finishes what it began.
    TransferLeader,
    /// Save a snapshot of the control plane, SIGKILL the node of `role`
    /// and let recovery make the region whole, let the clients write on,
    /// then restore the snapshot into a fresh control plane (three new
    /// members, the same tokens) that every process is pointed at in place
    /// of the old one, which is killed. The restored map names the roles of
    /// the snapshot: every replica must prove itself (design.md §1b), the
    /// region made whole again from the ones that do, and every write
    /// acknowledged before and after the snapshot read back. With `for`,
    /// the killed node is started again from its image that long after the
    /// restore, before the restored cluster could declare it dead: its
    /// image holds the replica at the generation the snapshot recorded,
    /// and what it holds is older than the others'. Once a run.
    SnapshotRestore,
    /// Cut `client`'s data path (its tcp links to every memory node, or
    /// with a `role` to that replica's node only) for `for`, then heal it
    /// (`run::partition`: in-path proxies the client reaches through an
    /// endpoint rewrite). Its lease goes on. The network holds what it
    /// sends meanwhile and delivers it at the heal, as TCP does: batches
    /// past their deadline are called lost by the client and refused by
    /// the node when they arrive (`fabric::deadline`). tcp only.
    PartitionData,
    /// Hold `client`'s data path and cut it from the control plane: its
    /// lease lapses, it is expired, its logs rolled, and it is forgotten.
    /// An heir joins, takes its owner ids and writes under them. Only then
    /// does the network deliver what the old client sent: every memory node
    /// must refuse it (the client is fenced) and the heir's data, logs and
    /// locks stay intact. tcp only.
    LateDelivery,
}

impl FaultKind {
    /// Every kind, for campaigns and `--help`.
    pub const ALL: [FaultKind; 14] = [
        FaultKind::KillClient,
        FaultKind::PauseClient,
        FaultKind::KillMemnode,
        FaultKind::RestartMemnode,
        FaultKind::PauseMemnode,
        FaultKind::KillControlLeader,
        FaultKind::ClockSkew,
        FaultKind::Partition,
        FaultKind::WipeMemnode,
        FaultKind::PauseControlLeader,
        FaultKind::TransferLeader,
        FaultKind::SnapshotRestore,
        FaultKind::PartitionData,
        FaultKind::LateDelivery,
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
                | FaultKind::WipeMemnode
                | FaultKind::PauseControlLeader
                | FaultKind::TransferLeader
                | FaultKind::SnapshotRestore
                | FaultKind::PartitionData
                | FaultKind::LateDelivery
        )
    }

    /// Whether the fault acts on one client (`client`).
    pub fn on_client(self) -> bool {
        matches!(
            self,
            FaultKind::ClockSkew | FaultKind::PartitionData | FaultKind::LateDelivery
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
            FaultKind::WipeMemnode => "wipe-memnode",
            FaultKind::PauseControlLeader => "pause-control-leader",
            FaultKind::TransferLeader => "transfer-leader",
            FaultKind::SnapshotRestore => "snapshot-restore",
            FaultKind::PartitionData => "partition-data",
            FaultKind::LateDelivery => "late-delivery",
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
    /// The only replica of the first single-copy side index
    /// (`cluster.side_replicas` holds a 1; `kill-memnode` only): its
    /// region is lost with the node.
    SoleCopy,
}

impl std::fmt::Display for ReplicaRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplicaRole::Primary => "primary",
            ReplicaRole::Backup => "backup",
            ReplicaRole::SoleCopy => "sole copy",
        })
    }
}

impl Experiment {
    /// The fault schedule: in time order, within the duration, one per client.
    pub(super) fn validate_faults(&self) -> Result<(), ExperimentError> {
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
        if !c.side_replicas.is_empty() {
            return Err(invalid(
                "cluster.side_replicas",
                "only a run with memory-node faults has side indexes",
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
        if self.index.variants != [Variant::Rtx] && self.index.variants != [Variant::Dtx] {
            return Err(invalid(
                "index.variants",
                "memory-node faults run on one variant, [\"rtx\"] or [\"dtx\"]: optimal keeps its locks on \
                 the primary and its writes unreplicated, so a memory node's death is fatal to it",
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
        if c.side_replicas.len() > SIDE_INDEXES_MAX {
            return Err(invalid(
                "cluster.side_replicas",
                format!("at most {SIDE_INDEXES_MAX} side indexes"),
            ));
        }
        if let Some(rf) = c
            .side_replicas
            .iter()
            .find(|&&rf| rf == 0 || u32::from(rf) > c.memory_nodes + c.spares)
        {
            return Err(invalid(
                "cluster.side_replicas",
                format!(
                    "{rf} replicas: each side index has 1 to {} (the memory nodes and spares)",
                    c.memory_nodes + c.spares
                ),
            ));
        }
        let lease_ms = c.memnode_lease.as_millis();
        if !(u128::from(MEMNODE_LEASE_MS_MIN)..=u128::from(LEASE_MS_MAX)).contains(&lease_ms) {
            return Err(invalid(
                "cluster.memnode_lease",
                format!("{MEMNODE_LEASE_MS_MIN}ms to {LEASE_MS_MAX}ms"),
            ));
        }
        if !(REQUEST_DEADLINE_MIN..=REQUEST_DEADLINE_MAX).contains(&c.request_deadline) {
            return Err(invalid(
                "cluster.request_deadline",
                format!("{REQUEST_DEADLINE_MIN:?} to {REQUEST_DEADLINE_MAX:?}"),
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
        let (mut kills, mut down, mut sole_kills, mut restores) = (0, 0, 0, 0);
        let mut leader_back: Option<Duration> = None;
        // Clients a late-delivery ended: their sessions are gone.
        let mut late: Vec<u32> = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            let field = |name: &str| format!("faults[{i}].{name}");
            let has_role = matches!(
                f.kind,
                FaultKind::KillMemnode
                    | FaultKind::PauseMemnode
                    | FaultKind::WipeMemnode
                    | FaultKind::SnapshotRestore
            ) || f.target == Some(PartitionTarget::Memnode);
            let may_have_role = matches!(
                f.kind,
                FaultKind::PauseControlLeader | FaultKind::TransferLeader | FaultKind::PartitionData
            );
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
                (false, Some(_)) if !may_have_role => {
                    return Err(invalid(
                        field("role"),
                        "only kill-memnode, pause-memnode, wipe-memnode, snapshot-restore, a memory node's \
                         partition, partition-data, pause-control-leader and transfer-leader take a role (a \
                         restart takes the last killed node)",
                    ));
                }
                _ => {}
            }
            if f.role == Some(ReplicaRole::SoleCopy) {
                if sole_kills > 0 {
                    return Err(invalid(
                        field("role"),
                        "one sole-copy kill: the single copy is lost with the first",
                    ));
                }
                sole_kills += 1;
                if f.kind != FaultKind::KillMemnode {
                    return Err(invalid(
                        field("role"),
                        "only a kill-memnode takes the sole-copy role",
                    ));
                }
                if !c.side_replicas.contains(&1) {
                    return Err(invalid(
                        field("role"),
                        "sole-copy kills the node of a single-copy side index: add 1 to cluster.side_replicas",
                    ));
                }
            }
            if f.skew_ms.is_some() != (f.kind == FaultKind::ClockSkew) {
                return Err(invalid(
                    field("skew_ms"),
                    "a clock-skew fault needs skew_ms (milliseconds, negative for behind); no other takes it",
                ));
            }
            let has_client = f.kind.on_client() || f.target == Some(PartitionTarget::Client);
            if !has_client && f.client != 0 {
                return Err(invalid(
                    field("client"),
                    "only clock-skew, partition-data, late-delivery and a client partition name a client",
                ));
            }
            if matches!(f.kind, FaultKind::PartitionData | FaultKind::LateDelivery)
                && c.transport != TransportKind::Tcp
            {
                return Err(invalid(
                    "cluster.transport",
                    format!(
                        "{} cuts a client's tcp links to the memory nodes: tcp only, not {}",
                        f.kind,
                        c.transport_name()
                    ),
                ));
            }
            if has_client && late.contains(&f.client) {
                return Err(invalid(
                    field("client"),
                    "this client's late-delivery came earlier: it is gone, an heir took its ids",
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
                FaultKind::WipeMemnode => {
                    if f.pause.is_some() {
                        return Err(invalid(
                            field("for"),
                            "a wipe does not last: the node is started again at once, without its image",
                        ));
                    }
                    if c.transport != TransportKind::Tcp {
                        return Err(invalid(
                            "cluster.transport",
                            format!(
                                "wipe-memnode runs over tcp only, not {}: on shm every client maps each \
                                 node's image file once and keeps that mapping, so a node started again \
                                 with a new image under the same path and id would serve a file the \
                                 clients and recovery never see while they read and write the old, \
                                 unlinked one",
                                c.transport_name()
                            ),
                        ));
                    }
                    // Back as an empty node, like a pause past detection:
                    // lost to the region, not down.
                    kills += 1;
                }
                FaultKind::KillControlLeader => {
                    if leader_back.is_some_and(|back| f.at < back) {
                        return Err(invalid(
                            field("at"),
                            "a leader killed or paused earlier is not back yet (its `for` has not passed, or it \
                             has none): a second member down would leave the three without a quorum",
                        ));
                    }
                    leader_back = Some(f.pause.map_or(Duration::MAX, |p| f.at + p));
                }
                FaultKind::PauseControlLeader | FaultKind::TransferLeader => {
                    if leader_back.is_some_and(|back| f.at < back) {
                        return Err(invalid(
                            field("at"),
                            "a leader killed or paused earlier is not back yet (its `for` has not passed, \
                             or it has none): the leader must be faulted one at a time",
                        ));
                    }
                    match (f.kind, f.pause) {
                        (FaultKind::TransferLeader, Some(_)) => {
                            return Err(invalid(field("for"), "a transfer does not last"));
                        }
                        (FaultKind::PauseControlLeader, None) => {
                            return Err(invalid(
                                field("for"),
                                format!(
                                    "a pause-control-leader fault needs `for`, at least {} (past an election)",
                                    humantime::format_duration(LEADER_PAUSE_MIN)
                                ),
                            ));
                        }
                        (FaultKind::PauseControlLeader, Some(p)) if p < LEADER_PAUSE_MIN => {
                            return Err(invalid(
                                field("for"),
                                format!(
                                    "at least {}: a shorter pause may end before another member leads",
                                    humantime::format_duration(LEADER_PAUSE_MIN)
                                ),
                            ));
                        }
                        (_, p) => leader_back = p.map(|p| f.at + p),
                    }
                    // The node of `role` is killed first and stays down.
                    if f.role.is_some() {
                        kills += 1;
                        down += 1;
                    }
                }
                FaultKind::SnapshotRestore => {
                    if restores > 0 {
                        return Err(invalid(
                            field("kind"),
                            "one snapshot-restore a run: a second would restore over a restored cluster",
                        ));
                    }
                    if leader_back.is_some_and(|back| f.at < back) {
                        return Err(invalid(
                            field("at"),
                            "a leader killed or paused earlier is not back yet: the snapshot is saved from a \
                             whole control plane",
                        ));
                    }
                    restores += 1;
                    kills += 1;
                    down += 1;
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
                FaultKind::PartitionData => {
                    if f.pause.is_none() {
                        return Err(invalid(
                            field("for"),
                            "a partition-data needs `for`, e.g. \"3s\" (past cluster.request_deadline, \
                             batches are called lost and their late frames refused)",
                        ));
                    }
                }
                FaultKind::LateDelivery => {
                    if f.pause.is_some() {
                        return Err(invalid(
                            field("for"),
                            "a late-delivery lasts until the client is forgotten and an heir holds its \
                             ids: no `for`",
                        ));
                    }
                    late.push(f.client);
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
}
