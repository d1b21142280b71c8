//! The records the state keeps: memory nodes, regions, clients and their
//! owner-id blocks, and the audit trail.

use fabric::{Epoch, RegionId, ReplicaLoc};
use serde::{Deserialize, Serialize};

use super::Command;

/// A memory node's id (the fabric's node id).
pub type MemNodeId = fabric::NodeId;

/// A client's id: never reused.
pub type ClientId = u64;
/// Where a memory node is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemNodeState {
    /// Registered, not yet heard from: holds no new replicas.
    Joining,
    /// Serving: may hold new replicas.
    Active,
    /// Missed lease renewals; not yet declared dead.
    Suspect,
    /// Declared dead: its replicas are to be replaced.
    Dead,
    /// Taken out of placement by an operator; existing replicas stay.
    Drained,
}

impl std::fmt::Display for MemNodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemNodeState::Joining => "joining",
            MemNodeState::Active => "active",
            MemNodeState::Suspect => "suspect",
            MemNodeState::Dead => "dead",
            MemNodeState::Drained => "drained",
        })
    }
}

/// A memory node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemNode {
    /// Its id.
    pub id: MemNodeId,
    /// Where clients reach it (`host:port` for tcp, an image path for shm).
    pub endpoint: String,
    /// Bytes it offers to regions.
    pub capacity_bytes: u64,
    /// Bytes its replicas take.
    pub allocated_bytes: u64,
    /// The newest map epoch it reported fencing at (it refuses verbs of
    /// older epochs): a promoter waits for every replica's node to reach
    /// the promotion's epoch before it rebuilds anything.
    #[serde(default)]
    pub epoch: fabric::Epoch,
    /// The newest client fence it reported following (`MemNodeFence`): it
    /// refuses every client expired at or before this reclaim sequence.
    #[serde(default)]
    pub fence_seq: u64,
    /// Its state.
    pub state: MemNodeState,
    /// Under planned maintenance (`SetMaintenance`): its silence is not
    /// judged and it takes no new replica, whatever its state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
    /// The image it registered with (`fabric::image`). A node that comes
    /// back under this endpoint with another image holds none of this
    /// record's replicas (`ReplaceImage`). `None` in records of nodes that
    /// did not say, which are taken at their word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<fabric::ImageId>,
}

/// A region: primary first, then backups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// Its id.
    pub id: RegionId,
    /// Bytes, identical on every replica.
    pub size_bytes: u64,
    /// Primary first.
    pub replicas: Vec<ReplicaLoc>,
    /// The map epoch of its last change.
    pub epoch: Epoch,
    /// Nodes placed to hold a replica that have not yet reported it
    /// allocated (`replica_ready`): nobody may use the region before this
    /// is empty.
    #[serde(default)]
    pub pending: Vec<MemNodeId>,
    /// Promoted, and its new primary's primary-only words (lock words,
    /// chunk counter) not yet rebuilt: out of the clients' map until a
    /// promoter says `region_restored`.
    #[serde(default)]
    pub restoring: bool,
    /// Replicas being made (re-replication): allocated on their node (once
    /// out of `pending`) and copied from the primary by recovery, but not
    /// yet written by clients, who route by `replicas` alone. Recovery's
    /// full map lists them after the replicas.
    #[serde(default)]
    pub syncing: Vec<ReplicaLoc>,
    /// A copied replica that joined `replicas` (`join_backup`) and is being
    /// caught up with the writes that landed during its copy: the region
    /// is out of the clients' map until `region_restored`.
    #[serde(default)]
    pub catching_up: Option<MemNodeId>,
    /// The client restoring it while it is being restored
    /// (`claim_restore`): one promoter at a time, so that none rebuilds
    /// lock words or aligns backups after another has published the
    /// region and clients write it again.
    #[serde(default)]
    pub restorer: Option<ClientId>,
    /// Replicas it should have (1 + f): recovery makes new ones while it
    /// has fewer. 0 in records made before this field: the count at
    /// creation is unknown, and the current count is taken.
    #[serde(default)]
    pub replication: u8,
    /// Lost, and why (`DeclareRegionLost`): its primary's node died with
    /// no live, allocated backup to take over, so its contents died with
    /// it. Out of the clients' map, and recovery does nothing more with it;
    /// its replica list stays as it was, to show where it lived, until an
    /// operator drops it (`DropRegion`). A node of it that registers again
    /// (declared dead falsely, `revive_memnode`) does not make it whole
    /// again: it stays lost until dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
    /// The last replica generation handed out for this region: bumped each
    /// time a replica is handed to a node (created, placed to be filled,
    /// joined once filled, promoted). 0 in records made before generations.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
    /// The generation each holder's replica (one being made included) was
    /// last handed out at. A node serves its replica only while its image
    /// holds the region at exactly this generation (`fabric::image`); a
    /// holder missing here is at generation 0 (records made before
    /// generations, whose images say 0 too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generations: Vec<ReplicaGeneration>,
    /// Holders not proven yet since a snapshot restore brought this record
    /// back (`Command::Restore`): the restored map names the roles of the
    /// snapshot, which the nodes' images may have moved past. The region
    /// stays out of the clients' map while any of them still holds a
    /// replica of it, until each has shown its image holds the replica at
    /// the recorded generation (`Command::ReplicaProven`), been found not
    /// to (`ReplicaUnproven`: dropped) or been evicted; none of them is an
    /// heir meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<MemNodeId>,
    /// The proofs of those holders so far: how far each node's image
    /// followed the old cluster (`Command::ReplicaProven`), to find the
    /// stale ones among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proofs: Vec<ReplicaProof>,
}

/// One holder's proof after a restore (see [`Region::proofs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaProof {
    /// The node.
    pub node: MemNodeId,
    /// The last epoch its image followed before the restored cluster's.
    pub followed_epoch: Epoch,
}

/// One holder's replica generation (see [`Region::generations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaGeneration {
    /// The node.
    pub node: MemNodeId,
    /// The generation its replica was last handed out at.
    pub generation: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Region {
    /// Every replica clients write is allocated on its node: the region
    /// may be used (replicas being made do not hold it back).
    pub fn ready(&self) -> bool {
        self.pending
            .iter()
            .all(|&n| !self.replicas.iter().any(|r| r.node == n))
    }

    /// Out of the clients' map while recovery works on it: being restored
    /// after a promotion, or catching a new replica up.
    pub fn being_restored(&self) -> bool {
        self.restoring || self.catching_up.is_some()
    }

    /// In the clients' map: allocated, not being restored, not lost, every
    /// holder proven since a restore.
    pub fn usable(&self) -> bool {
        self.ready() && !self.being_restored() && self.lost.is_none() && !self.awaiting_proof()
    }

    /// Whether a holder named by a restore has not proven its replica yet
    /// (see [`Region::unverified`]).
    pub fn awaiting_proof(&self) -> bool {
        self.unverified.iter().any(|&n| self.on(n))
    }

    /// Whether `node` holds a replica the restore named and has not proven.
    pub fn unverified_on(&self, node: MemNodeId) -> bool {
        self.on(node) && self.unverified.contains(&node)
    }

    /// Whole: usable, with as many replicas as it was made with and none
    /// being made.
    pub fn whole(&self) -> bool {
        self.usable() && self.replicas.len() >= self.replication_target() && self.syncing.is_empty()
    }

    /// Replicas it should have.
    pub fn replication_target(&self) -> usize {
        if self.replication == 0 {
            self.replicas.len()
        } else {
            usize::from(self.replication)
        }
    }

    /// The generation `node`'s replica was last handed out at (0 if it
    /// holds none, or was never given one).
    pub fn generation_of(&self, node: MemNodeId) -> u64 {
        self.generations
            .iter()
            .find(|g| g.node == node)
            .map_or(0, |g| g.generation)
    }

    /// Hands `node`'s replica out at a new generation (placement, fill
    /// done, promotion) and returns it.
    pub fn hand_out(&mut self, node: MemNodeId) -> u64 {
        self.generation += 1;
        let generation = self.generation;
        match self.generations.iter_mut().find(|g| g.node == node) {
            Some(g) => g.generation = generation,
            None => self.generations.push(ReplicaGeneration { node, generation }),
        }
        generation
    }

    /// Forgets the generations of nodes that hold no replica any more.
    pub fn forget_generations(&mut self) {
        let holders: Vec<MemNodeId> = self
            .replicas
            .iter()
            .chain(&self.syncing)
            .map(|l| l.node)
            .collect();
        self.generations.retain(|g| holders.contains(&g.node));
    }

    /// The primary's node.
    pub fn primary(&self) -> MemNodeId {
        self.replicas[0].node
    }

    /// True when `node` holds a replica of this region, one being made
    /// included.
    pub fn on(&self, node: MemNodeId) -> bool {
        self.replicas.iter().chain(&self.syncing).any(|r| r.node == node)
    }

    /// True when `node` holds one of the replicas clients write.
    pub fn serves(&self, node: MemNodeId) -> bool {
        self.replicas.iter().any(|r| r.node == node)
    }

    /// Where its replicas stand, in one line, for a message about a region
    /// that is not where it should be.
    pub fn summary(&self) -> String {
        let nodes = |l: &[ReplicaLoc]| l.iter().map(|l| l.node).collect::<Vec<_>>();
        format!(
            "replicas {:?}, syncing {:?}, pending {:?}, catching up {:?}, restoring {} (by {:?}), epoch {}{}",
            nodes(&self.replicas),
            nodes(&self.syncing),
            self.pending,
            self.catching_up,
            self.restoring,
            self.restorer,
            self.epoch,
            if self.awaiting_proof() {
                let waiting: Vec<MemNodeId> =
                    self.unverified.iter().copied().filter(|&n| self.on(n)).collect();
                format!(", awaiting proof from {waiting:?} since a restore")
            } else {
                String::new()
            },
        )
    }
}

/// A block of owner ids: `first..first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerBlock {
    /// First owner id.
    pub first: u16,
    /// How many.
    pub count: u16,
}

impl OwnerBlock {
    /// One past the last id.
    pub fn end(self) -> u16 {
        self.first + self.count
    }

    /// Every id of the block.
    pub fn ids(self) -> Vec<u16> {
        (self.first..self.end()).collect()
    }

    pub(crate) fn overlaps(self, other: OwnerBlock) -> bool {
        self.first < other.end() && other.first < self.end()
    }
}

/// Whether a client may still act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum ClientState {
    /// Holding a lease (renewed at the leader, outside the log).
    Live,
    /// Declared expired: recovery rolls its logs, reclaims what it held,
    /// then forgets it.
    Expired {
        /// When the decision was committed, on the cluster clock
        /// ([`ControlState::clock_ms`](crate::state::ControlState): ms, close
        /// to the Unix epoch's, never ahead of the leaders' time).
        at_ms: u64,
        /// The reclaim sequence number of the decision
        /// ([`ControlState::reclaim_seq`](crate::state::ControlState)): its
        /// owner ids are reclaimed once every live client has quiesced to it.
        #[serde(default)]
        seq: u64,
    },
}

/// A registered client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// Its id.
    pub id: ClientId,
    /// A name for operators.
    pub name: String,
    /// The lease length it must renew within.
    pub lease_ms: u64,
    /// The owner ids it may use.
    pub owners: OwnerBlock,
    /// When it registered (ms since the Unix epoch).
    pub registered_at_ms: u64,
    /// Live or expired.
    pub state: ClientState,
}

/// One applied command, for operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When it was proposed (ms since the Unix epoch).
    pub at_ms: u64,
    /// Who asked (the token's name, or the member that decided).
    pub actor: String,
    /// What was asked.
    pub command: Command,
    /// `ok`, or the error it was refused with.
    pub outcome: String,
}

/// What an index is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// A Sherman-like B+tree (ordered: range scans).
    Btree,
    /// RACE hashing (point operations).
    Hash,
}

impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IndexKind::Btree => "btree",
            IndexKind::Hash => "hash",
        })
    }
}

/// How an index's writes are made crash-tolerant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexVariant {
    /// The original algorithm: fastest, and a crashed writer leaves its
    /// locks held for good.
    Optimal,
    /// Every operation a repairable transaction.
    Rtx,
    /// Every operation a FORD-style DTX transaction (the baseline): a
    /// crashed writer's records stay locked until recovery rolls its logs,
    /// one client lease after it expired.
    Dtx,
}

impl std::fmt::Display for IndexVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IndexVariant::Optimal => "optimal",
            IndexVariant::Rtx => "rtx",
            IndexVariant::Dtx => "dtx",
        })
    }
}

/// Whether a named index may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum IndexState {
    /// Its region is placed; `client` formats it. If that client expires
    /// first, another claims the creation and starts it over.
    Creating {
        /// The client formatting it.
        client: ClientId,
    },
    /// Formatted: open it.
    Ready,
}

/// A named index: one region holding one index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRecord {
    /// Its name (what `cluster.btree(name)` opens).
    pub name: String,
    /// B+tree or hash.
    pub kind: IndexKind,
    /// optimal or rtx.
    pub variant: IndexVariant,
    /// The region that holds it.
    pub region: RegionId,
    /// Creating or ready.
    pub state: IndexState,
    /// When it was created (ms since the Unix epoch).
    pub created_at_ms: u64,
}
