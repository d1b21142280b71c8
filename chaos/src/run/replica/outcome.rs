//! What a fault of a local-cluster run did: when each of its phases came
//! (`Phases`), and the fault with its rates read off the timeline
//! (`MemnodeFault`), as `faults::Injector` records and the summary reports.

use std::time::Instant;

use control_plane::state::{MemNodeId, MemNodeState};
use serde::Serialize;

use super::watch::Status;
use crate::experiment::{Fault, FaultKind, ReplicaRole};
use crate::run::{RunError, BUCKET_US};

/// When each phase of one fault came, in ms after the fault.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phases {
    /// The control plane declared the killed node dead (a wiped one: for
    /// the new image id it registered with).
    pub detected_ms: Option<f64>,
    /// Its replica left the region's replica set (a dead primary's first
    /// live backup promoted in its place).
    pub evicted_ms: Option<f64>,
    /// The region back in the clients' map: serving verbs.
    pub serving_ms: Option<f64>,
    /// The region whole again: as many replicas as it was made with, none
    /// being made, and in the map; or settled degraded
    /// (`control_plane::state::settled`: serving, short of replicas, with
    /// no node left to take another), which `degraded` says.
    pub rereplicated_ms: Option<f64>,
    /// The region settled short of replicas for want of a spare: degraded,
    /// as `ctl status` says, not a missing re-replication (issue 46).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
    /// A restarted or resumed node registered and active again (an empty
    /// spare, or still in its replica set after a pause shorter than
    /// detection); a wiped one, active under its new image id; a node
    /// killed before a `snapshot-restore`, started again after it.
    pub active_ms: Option<f64>,
    /// A paused node continued (SIGCONT); a partition healed.
    pub resumed_ms: Option<f64>,
    /// The client cut off by a `late-delivery` declared expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expired_ms: Option<f64>,
    /// It forgotten: its logs rolled, its owner ids free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgotten_ms: Option<f64>,
    /// Its heir joined, holding its owner ids (`late-delivery`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heir_ms: Option<f64>,
    /// Bytes of the client's data path the network held while cut, and
    /// delivered at the heal (`partition-data`, `late-delivery`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_bytes: Option<u64>,
    /// The single-copy side region on the killed node reported lost
    /// (`sole-copy`), with its operator action.
    pub lost_ms: Option<f64>,
    /// The Raft leader was stopped (`pause-control-leader`) or asked to
    /// hand over (`transfer-leader`): after the kill of `role`'s node, once
    /// recovery was at work on the region.
    pub leader_faulted_ms: Option<f64>,
    /// Another member claimed the lead (`kill-control-leader`,
    /// `pause-control-leader`, `transfer-leader`).
    pub elected_ms: Option<f64>,
    /// The killed leader restarted and a member again (`for` given); the
    /// paused or moved one following the new leader.
    pub member_back_ms: Option<f64>,
    /// The snapshot restored into a fresh control plane and every process
    /// pointed at it (`snapshot-restore`).
    pub restored_ms: Option<f64>,
    /// The region whole again in the restored cluster, its replicas proven
    /// or replaced, the killed node on none of them (`snapshot-restore`).
    pub restored_whole_ms: Option<f64>,
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
    /// The Raft leader it paused or moved (`pause-control-leader`,
    /// `transfer-leader` with a `role`: `node` is then the memory node
    /// killed first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<MemNodeId>,
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
    /// Writes stopped: the longest stretch with no operation completed,
    /// from the fault to a second after its last phase, ms.
    pub stopped_ms: f64,
}

impl MemnodeFault {
    /// Whether every phase the fault must go through came.
    pub fn completed(&self) -> bool {
        let p = &self.phases;
        match self.kind {
            // The single copy lost, and the checked index whole again if
            // it lost a replica too.
            FaultKind::KillMemnode if self.role == Some(ReplicaRole::SoleCopy) => {
                p.lost_ms.is_some() && (p.evicted_ms.is_none() || p.rereplicated_ms.is_some())
            }
            FaultKind::KillMemnode => p.rereplicated_ms.is_some(),
            // Declared dead (never served), the region refilled, the node
            // taken in again with its new image.
            FaultKind::WipeMemnode => {
                p.detected_ms.is_some() && p.rereplicated_ms.is_some() && p.active_ms.is_some()
            }
            FaultKind::RestartMemnode | FaultKind::PauseMemnode => p.active_ms.is_some(),
            FaultKind::SnapshotRestore => {
                p.rereplicated_ms.is_some() && p.restored_ms.is_some() && p.restored_whole_ms.is_some()
            }
            FaultKind::KillControlLeader => p.elected_ms.is_some(),
            // Another member led, the old one follows it, and a node
            // killed first is made up for.
            FaultKind::PauseControlLeader | FaultKind::TransferLeader => {
                let paused = self.kind != FaultKind::PauseControlLeader || p.resumed_ms.is_some();
                paused
                    && p.elected_ms.is_some()
                    && p.member_back_ms.is_some()
                    && (self.role.is_none() || p.rereplicated_ms.is_some())
            }
            // A memory node's (it has a role): back as for a pause.
            FaultKind::Partition if self.role.is_some() => p.active_ms.is_some(),
            FaultKind::Partition | FaultKind::PartitionData => p.resumed_ms.is_some(),
            // Forgotten, its ids taken by an heir, and only then its held
            // frames delivered.
            FaultKind::LateDelivery => {
                p.forgotten_ms.is_some() && p.heir_ms.is_some() && p.resumed_ms.is_some()
            }
            FaultKind::ClockSkew | FaultKind::KillClient | FaultKind::PauseClient => true,
        }
    }

    /// From the fault to the cluster whole again, ms: the last phase that
    /// came (none: 0).
    pub fn recovered_ms(&self) -> f64 {
        let p = &self.phases;
        [
            p.rereplicated_ms,
            p.active_ms,
            p.elected_ms,
            p.member_back_ms,
            p.restored_whole_ms,
        ]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max)
    }

    /// What and whom: `kill-memnode 2 (primary)`.
    pub fn label(&self) -> String {
        if let Some(leader) = self.leader {
            return match self.role {
                Some(r) => format!("{} member {leader}, memory node {} ({r})", self.kind, self.node),
                None => format!("{} member {leader}", self.kind),
            };
        }
        if matches!(self.kind, FaultKind::PartitionData | FaultKind::LateDelivery) {
            let held = self.phases.held_bytes.unwrap_or_default();
            return match self.role {
                Some(r) => format!("{} client {} to {r}, {held} B held", self.kind, self.node),
                None => format!("{} client {}, {held} B held", self.kind, self.node),
            };
        }
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
pub(super) struct Injected {
    pub(super) kind: FaultKind,
    pub(super) role: Option<ReplicaRole>,
    pub(super) node: MemNodeId,
    pub(super) skew_ms: Option<i64>,
    pub(super) leader: Option<MemNodeId>,
    pub(super) at_ms: f64,
    pub(super) phases: Phases,
}

impl Injected {
    /// Fault `f`, which hit `node` (a memory node, member or client) at
    /// `at` (`t0`: the run's start), and its phases.
    pub(super) fn new(f: &Fault, node: MemNodeId, (at, t0): (Instant, Instant), phases: Phases) -> Injected {
        Injected {
            kind: f.kind,
            role: f.role,
            node,
            skew_ms: f.skew_ms,
            leader: None,
            at_ms: (at - t0).as_secs_f64() * 1e3,
            phases,
        }
    }

    /// The fault with its rates read off `timeline` (1 ms buckets): the
    /// second before it, and the second from the region serving again (a
    /// restart: from the node active again).
    pub(super) fn outcome(self, timeline: &[u64]) -> MemnodeFault {
        let per_sec = 1e3 / (BUCKET_US as f64 / 1e3);
        let second = (1e3 / (BUCKET_US as f64 / 1e3)) as usize;
        let b = (self.at_ms as usize).min(timeline.len());
        let p = &self.phases;
        let back = p.serving_ms.or(p.active_ms).or(p.elected_ms).unwrap_or(0.0);
        let a = (self.at_ms + back) as usize;
        let last_phase = [
            p.detected_ms,
            p.evicted_ms,
            p.serving_ms,
            p.rereplicated_ms,
            p.active_ms,
            p.resumed_ms,
            p.elected_ms,
            p.member_back_ms,
            p.restored_whole_ms,
            p.forgotten_ms,
        ]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
        let bucket_ms = BUCKET_US as f64 / 1e3;
        let window = b..((self.at_ms + last_phase) / bucket_ms) as usize + second;
        let stopped_ms = workload::timeline::longest_stop(timeline, window) as f64 * bucket_ms;
        MemnodeFault {
            stopped_ms,
            kind: self.kind,
            role: self.role,
            node: self.node,
            skew_ms: self.skew_ms,
            leader: self.leader,
            at_ms: self.at_ms,
            dead_to_serving_ms: self
                .phases
                .detected_ms
                .zip(self.phases.serving_ms)
                .map(|(d, s)| s - d),
            phases: self.phases,
            ops_per_sec_before: workload::timeline::mean(timeline, b.saturating_sub(second)..b) * per_sec,
            ops_per_sec_after: workload::timeline::mean(timeline, a..a + second) * per_sec,
        }
    }
}

/// The phases that came, for a progress line: `dead 457 ms, evicted 460
/// ms, ...`, or `done` when the fault has none (a skew).
impl std::fmt::Display for Phases {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let phases = [
            ("dead", self.detected_ms),
            ("evicted", self.evicted_ms),
            ("serving", self.serving_ms),
            ("re-replicated", self.rereplicated_ms),
            ("resumed", self.resumed_ms),
            ("expired", self.expired_ms),
            ("forgotten", self.forgotten_ms),
            ("heir joined", self.heir_ms),
            ("single copy lost", self.lost_ms),
            ("active", self.active_ms),
            ("restored", self.restored_ms),
            ("whole in the restored cluster", self.restored_whole_ms),
            ("leader faulted", self.leader_faulted_ms),
            ("elected", self.elected_ms),
            ("member back", self.member_back_ms),
        ];
        let came: Vec<String> = phases
            .iter()
            .filter_map(|(name, ms)| ms.map(|ms| format!("{name} {ms:.0} ms")))
            .collect();
        if came.is_empty() {
            write!(out, "done")
        } else {
            write!(out, "{}", came.join(", "))?;
            if self.degraded {
                write!(out, " (degraded: no spare left)")?;
            }
            Ok(())
        }
    }
}

impl Phases {
    /// These phases (a node's loss) with the leader's from `leader`.
    pub(super) fn with_leader(self, leader: Phases) -> Phases {
        Phases {
            leader_faulted_ms: leader.leader_faulted_ms,
            elected_ms: leader.elected_ms,
            resumed_ms: leader.resumed_ms,
            member_back_ms: leader.member_back_ms,
            ..self
        }
    }

    /// The phases that came, for a failure's line: `dead 26 ms, ...`, or
    /// `none came`.
    pub fn came(&self) -> String {
        match self.to_string().as_str() {
            "done" => "none came".to_owned(),
            came => came.to_owned(),
        }
    }

    /// Notes the phases of losing `node` that `status` shows, timed from
    /// `start`: declared dead, evicted, the region serving again, whole
    /// again. Returns whether it is whole again without the node.
    pub(super) fn note_loss(
        &mut self,
        status: &Status,
        region: fabric::RegionId,
        node: MemNodeId,
        start: Instant,
    ) -> Result<bool, RunError> {
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if self.detected_ms.is_none() && status.node_state(node) == Some(MemNodeState::Dead) {
            self.detected_ms = Some(ms);
        }
        let r = status.region(region)?;
        if self.evicted_ms.is_none() && !r.on(node) {
            self.evicted_ms = Some(ms);
            // A detection the poll missed is no later than the eviction.
            self.detected_ms = self.detected_ms.or(self.evicted_ms);
        }
        if self.evicted_ms.is_some() && self.serving_ms.is_none() && r.usable() {
            self.serving_ms = Some(ms);
        }
        let whole = self.evicted_ms.is_some() && status.settled(r);
        if whole && self.rereplicated_ms.is_none() {
            self.rereplicated_ms = Some(ms);
            self.degraded = !r.whole();
        }
        Ok(whole)
    }
}
