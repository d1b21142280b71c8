//! The replicated state machine: what every member agrees on, and the one
//! function that changes it.
//!
//! `apply` is pure and deterministic: it reads nothing but the state and the
//! request (a request carries its own time, actor and nonce, stamped by the
//! member that proposed it), so every member that applies the same log ends
//! with the same state. A command that is not allowed (unknown id, impossible
//! placement, wrong state) changes nothing but the audit trail and returns an
//! error as its response.
//!
//! Invariants (checked by [`ControlState::check`], asserted in tests):
//! - every replica of a region sits on a known memory node, at most once per
//!   region, between 1 and [`REPLICAS_MAX`] replicas, primary first;
//! - a node's `allocated_bytes` is the sum of the sizes of the replicas it holds;
//! - owner-id blocks of clients never overlap and lie in `1..OWNER_ID_END`;
//! - the epoch grows by one with every change that alters routing, and each
//!   region's `epoch` is the epoch of its last change.

use std::collections::{BTreeMap, VecDeque};

use fabric::{AccessKey, ClusterMap, Epoch, NodeInfo, RegionId, RegionInfo, ReplicaLoc, REPLICAS_MAX};
use serde::{Deserialize, Serialize};

/// A memory node's id (the fabric's node id).
pub type MemNodeId = fabric::NodeId;

/// A client's id: never reused.
pub type ClientId = u64;

/// Owner ids handed out in blocks: `1..OWNER_ID_END`. The rTX heap keeps one
/// log slot per owner id (256 by default, `txn::HeapConfig::owner_slots`);
/// owner id 0 is reserved as "nobody".
pub const OWNER_ID_END: u16 = 256;

/// Owner ids one client may hold: one per coroutine of a client process.
pub const OWNER_IDS_PER_CLIENT_MAX: u16 = 64;

/// Audit entries kept: the oldest are dropped first. At about 200 bytes an
/// entry this bounds the trail near 2 MB of every snapshot.
pub const AUDIT_ENTRIES_MAX: usize = 10_000;

/// Longest name or endpoint accepted, in bytes: they are shown in tables and
/// kept in every snapshot.
pub const NAME_BYTES_MAX: usize = 256;

/// Shortest and longest client lease: below 1 ms a healthy client cannot
/// renew in time; above a minute a dead one blocks its objects too long.
pub const LEASE_MS_MIN: u64 = 1;
/// See [`LEASE_MS_MIN`].
pub const LEASE_MS_MAX: u64 = 60_000;

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
    /// Its state.
    pub state: MemNodeState,
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
}

impl Region {
    /// The primary's node.
    pub fn primary(&self) -> MemNodeId {
        self.replicas[0].node
    }

    /// True when `node` holds a replica of this region.
    pub fn on(&self, node: MemNodeId) -> bool {
        self.replicas.iter().any(|r| r.node == node)
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

    fn overlaps(self, other: OwnerBlock) -> bool {
        self.first < other.end() && other.first < self.end()
    }
}

/// Whether a client may still act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum ClientState {
    /// Holding a lease (renewed at the leader, outside the log).
    Live,
    /// Declared expired: recovery rolls its logs, then forgets it.
    Expired {
        /// When the decision was committed (ms since the Unix epoch).
        at_ms: u64,
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

/// A change to the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Command {
    /// Adds a memory node (state `joining`).
    RegisterMemNode {
        /// Where clients reach it.
        endpoint: String,
        /// Bytes it offers.
        capacity_bytes: u64,
    },
    /// Joining or suspect → active (its lease was renewed).
    ActivateMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Active → suspect (missed renewals).
    SuspectMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Declares a node dead.
    DeclareMemNodeDead {
        /// The node.
        id: MemNodeId,
    },
    /// Takes a node out of placement; its replicas stay.
    DrainMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Forgets a node that holds no replica.
    RemoveMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Creates a region with `replicas` (1 + f) replicas on distinct active nodes.
    CreateRegion {
        /// Bytes.
        size_bytes: u64,
        /// Replicas, primary included.
        replicas: u8,
    },
    /// Makes a backup the primary (the old primary becomes a backup).
    PromoteBackup {
        /// The region.
        region: RegionId,
        /// The backup's node.
        node: MemNodeId,
    },
    /// Adds a backup on an active node.
    AddBackup {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
    },
    /// Removes a backup (never the primary).
    RemoveBackup {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
    },
    /// Registers a client: an id, an owner-id block and a lease length.
    RegisterClient {
        /// A name for operators.
        name: String,
        /// Owner ids wanted (one per coroutine).
        owner_ids: u16,
        /// Lease length.
        lease_ms: u64,
    },
    /// Declares a client's lease lapsed.
    ExpireClient {
        /// The client.
        id: ClientId,
    },
    /// Forgets an expired client whose logs recovery has rolled, freeing its owner ids.
    ForgetClient {
        /// The client.
        id: ClientId,
    },
}

impl Command {
    /// True for commands that change routing (and so bump the epoch when
    /// they succeed).
    pub fn alters_routing(&self) -> bool {
        matches!(
            self,
            Command::DeclareMemNodeDead { .. }
                | Command::RemoveMemNode { .. }
                | Command::CreateRegion { .. }
                | Command::PromoteBackup { .. }
                | Command::AddBackup { .. }
                | Command::RemoveBackup { .. }
        )
    }
}

/// A log entry's payload: a command with the context `apply` may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// When the proposing member accepted it (ms since the Unix epoch).
    pub at_ms: u64,
    /// Who asked.
    pub actor: String,
    /// Randomness chosen by the proposer (access keys are derived from it).
    pub nonce: u64,
    /// The change.
    pub command: Command,
}

/// What a successful command produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Outcome {
    /// The memory node as it now is.
    MemNode(MemNode),
    /// The region as it now is.
    Region(Region),
    /// The client as it now is.
    Client(Client),
    /// Something was removed.
    Removed,
    /// A log entry without a command (openraft's blank or membership
    /// entries) was applied: the state is unchanged.
    NoCommand,
}

/// Why a command was refused. Each leaves the state as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case", tag = "error")]
pub enum CommandError {
    /// No such memory node.
    #[error("no memory node {id}")]
    UnknownMemNode {
        /// The id asked for.
        id: MemNodeId,
    },
    /// No such region.
    #[error("no region {id}")]
    UnknownRegion {
        /// The id asked for.
        id: RegionId,
    },
    /// No such client.
    #[error("no client {id}")]
    UnknownClient {
        /// The id asked for.
        id: ClientId,
    },
    /// The command does not apply in the current state.
    #[error("{0}")]
    Conflict(String),
    /// Not enough distinct active nodes with room.
    #[error("cannot place {needed} replicas of {size_bytes} bytes: only {available} active nodes with room")]
    Placement {
        /// Replicas asked for.
        needed: usize,
        /// Size asked for.
        size_bytes: u64,
        /// Nodes that could take one.
        available: usize,
    },
    /// An argument out of range.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A limit of the state is reached.
    #[error("limit reached: {0}")]
    Full(String),
}

/// The result of applying one request: what every member returns for it.
pub type Response = Result<Outcome, CommandError>;

/// The replicated state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlState {
    /// The map epoch: bumped by every change that alters routing.
    pub epoch: Epoch,
    /// Memory nodes by id.
    pub memnodes: BTreeMap<MemNodeId, MemNode>,
    /// Regions by id.
    pub regions: BTreeMap<RegionId, Region>,
    /// Clients by id (expired ones stay until forgotten).
    pub clients: BTreeMap<ClientId, Client>,
    /// The most recent applied commands, oldest first.
    pub audit: VecDeque<AuditEntry>,
    next_memnode: u32,
    next_region: u32,
    next_client: ClientId,
}

impl ControlState {
    /// Applies one request. Deterministic: the same state and request give
    /// the same result on every member.
    pub fn apply(&mut self, req: &Request) -> Response {
        let before = self.epoch;
        let result = self.execute(req);
        if result.is_ok() && req.command.alters_routing() {
            // The handler stamped what it changed with this epoch.
            self.epoch = self.next_epoch();
        }
        self.audit.push_back(AuditEntry {
            at_ms: req.at_ms,
            actor: req.actor.clone(),
            command: req.command.clone(),
            outcome: match &result {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.to_string(),
            },
        });
        while self.audit.len() > AUDIT_ENTRIES_MAX {
            self.audit.pop_front();
        }
        debug_assert!(self.epoch == before || self.epoch == before + 1);
        debug_assert_eq!(self.check(), Ok(()));
        result
    }

    /// The epoch a routing change being applied now is stamped with.
    fn next_epoch(&self) -> Epoch {
        self.epoch + 1
    }

    fn execute(&mut self, req: &Request) -> Response {
        match req.command {
            Command::RegisterMemNode {
                ref endpoint,
                capacity_bytes,
            } => self.register_memnode(endpoint, capacity_bytes),
            Command::ActivateMemNode { id } => self.transition(
                id,
                &[MemNodeState::Joining, MemNodeState::Suspect, MemNodeState::Active],
                MemNodeState::Active,
            ),
            Command::SuspectMemNode { id } => self.transition(
                id,
                &[MemNodeState::Active, MemNodeState::Suspect],
                MemNodeState::Suspect,
            ),
            Command::DeclareMemNodeDead { id } => {
                let dead = self.transition(
                    id,
                    &[
                        MemNodeState::Joining,
                        MemNodeState::Active,
                        MemNodeState::Suspect,
                        MemNodeState::Drained,
                    ],
                    MemNodeState::Dead,
                )?;
                let epoch = self.next_epoch();
                for r in self.regions.values_mut().filter(|r| r.on(id)) {
                    r.epoch = epoch;
                }
                Ok(dead)
            }
            Command::DrainMemNode { id } => self.transition(
                id,
                &[MemNodeState::Joining, MemNodeState::Active, MemNodeState::Suspect],
                MemNodeState::Drained,
            ),
            Command::RemoveMemNode { id } => self.remove_memnode(id),
            Command::CreateRegion { size_bytes, replicas } => {
                self.create_region(size_bytes, replicas, req.nonce)
            }
            Command::PromoteBackup { region, node } => self.promote(region, node),
            Command::AddBackup { region, node } => self.add_backup(region, node, req.nonce),
            Command::RemoveBackup { region, node } => self.remove_backup(region, node),
            Command::RegisterClient {
                ref name,
                owner_ids,
                lease_ms,
            } => self.register_client(name, owner_ids, lease_ms, req.at_ms),
            Command::ExpireClient { id } => {
                let c = self
                    .clients
                    .get_mut(&id)
                    .ok_or(CommandError::UnknownClient { id })?;
                if let ClientState::Expired { at_ms } = c.state {
                    return Err(CommandError::Conflict(format!(
                        "client {id} already expired at {at_ms} ms"
                    )));
                }
                c.state = ClientState::Expired { at_ms: req.at_ms };
                Ok(Outcome::Client(c.clone()))
            }
            Command::ForgetClient { id } => {
                let c = self.clients.get(&id).ok_or(CommandError::UnknownClient { id })?;
                if c.state == ClientState::Live {
                    return Err(CommandError::Conflict(format!(
                        "client {id} is live: expire it (and let recovery roll its logs) first"
                    )));
                }
                self.clients.remove(&id);
                Ok(Outcome::Removed)
            }
        }
    }

    fn register_memnode(&mut self, endpoint: &str, capacity_bytes: u64) -> Response {
        check_name("endpoint", endpoint)?;
        if capacity_bytes == 0 {
            return Err(CommandError::Invalid("capacity must be above 0 bytes".into()));
        }
        if let Some(n) = self.memnodes.values().find(|n| n.endpoint == endpoint) {
            return Err(CommandError::Conflict(format!(
                "memory node {} already has endpoint {endpoint}",
                n.id
            )));
        }
        let id = MemNodeId::try_from(self.next_memnode)
            .map_err(|_| CommandError::Full(format!("memory node ids are {} at most", MemNodeId::MAX)))?;
        self.next_memnode += 1;
        let node = MemNode {
            id,
            endpoint: endpoint.to_owned(),
            capacity_bytes,
            allocated_bytes: 0,
            state: MemNodeState::Joining,
        };
        self.memnodes.insert(id, node.clone());
        Ok(Outcome::MemNode(node))
    }

    fn transition(&mut self, id: MemNodeId, from: &[MemNodeState], to: MemNodeState) -> Response {
        let n = self
            .memnodes
            .get_mut(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        if !from.contains(&n.state) {
            return Err(CommandError::Conflict(format!(
                "memory node {id} is {}; cannot become {to}",
                n.state
            )));
        }
        n.state = to;
        Ok(Outcome::MemNode(n.clone()))
    }

    fn remove_memnode(&mut self, id: MemNodeId) -> Response {
        if !self.memnodes.contains_key(&id) {
            return Err(CommandError::UnknownMemNode { id });
        }
        let held: Vec<String> = self
            .regions
            .values()
            .filter(|r| r.on(id))
            .map(|r| r.id.to_string())
            .collect();
        if !held.is_empty() {
            return Err(CommandError::Conflict(format!(
                "memory node {id} holds replicas of regions {}; move them first",
                held.join(", ")
            )));
        }
        self.memnodes.remove(&id);
        Ok(Outcome::Removed)
    }

    /// Nodes that may take a new replica of `size_bytes`, roomiest first
    /// (ties by id, so every member picks the same).
    fn candidates(&self, size_bytes: u64, exclude: &[MemNodeId]) -> Vec<MemNodeId> {
        let mut nodes: Vec<&MemNode> = self
            .memnodes
            .values()
            .filter(|n| n.state == MemNodeState::Active && !exclude.contains(&n.id))
            .filter(|n| n.capacity_bytes - n.allocated_bytes >= size_bytes)
            .collect();
        nodes.sort_by_key(|n| (std::cmp::Reverse(n.capacity_bytes - n.allocated_bytes), n.id));
        nodes.into_iter().map(|n| n.id).collect()
    }

    fn create_region(&mut self, size_bytes: u64, replicas: u8, nonce: u64) -> Response {
        let needed = usize::from(replicas);
        if needed == 0 || needed > REPLICAS_MAX {
            return Err(CommandError::Invalid(format!(
                "a region has 1 to {REPLICAS_MAX} replicas, not {needed}"
            )));
        }
        if size_bytes == 0 || size_bytes > fabric::OFFSET_MAX + 1 {
            return Err(CommandError::Invalid(format!(
                "region size must be 1 to {} bytes, not {size_bytes}",
                fabric::OFFSET_MAX + 1
            )));
        }
        let nodes = self.candidates(size_bytes, &[]);
        if nodes.len() < needed {
            return Err(CommandError::Placement {
                needed,
                size_bytes,
                available: nodes.len(),
            });
        }
        let id = RegionId::try_from(self.next_region)
            .map_err(|_| CommandError::Full(format!("region ids are {} at most", RegionId::MAX)))?;
        self.next_region += 1;
        let replicas: Vec<ReplicaLoc> = nodes[..needed]
            .iter()
            .map(|&node| ReplicaLoc {
                node,
                key: access_key(nonce, id, node),
            })
            .collect();
        for r in &replicas {
            self.charge(r.node, size_bytes as i128);
        }
        let region = Region {
            id,
            size_bytes,
            replicas,
            epoch: self.next_epoch(),
        };
        self.regions.insert(id, region.clone());
        Ok(Outcome::Region(region))
    }

    fn charge(&mut self, node: MemNodeId, bytes: i128) {
        if let Some(n) = self.memnodes.get_mut(&node) {
            n.allocated_bytes = (i128::from(n.allocated_bytes) + bytes) as u64;
        }
    }

    fn region_mut(&mut self, id: RegionId) -> Result<&mut Region, CommandError> {
        self.regions
            .get_mut(&id)
            .ok_or(CommandError::UnknownRegion { id })
    }

    fn promote(&mut self, region: RegionId, node: MemNodeId) -> Response {
        if !self.memnodes.contains_key(&node) {
            return Err(CommandError::UnknownMemNode { id: node });
        }
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        match r.replicas.iter().position(|x| x.node == node) {
            None => Err(CommandError::Conflict(format!(
                "memory node {node} holds no replica of region {region}"
            ))),
            Some(0) => Err(CommandError::Conflict(format!(
                "memory node {node} is already region {region}'s primary"
            ))),
            Some(i) => {
                r.replicas.swap(0, i);
                r.epoch = epoch;
                Ok(Outcome::Region(r.clone()))
            }
        }
    }

    fn add_backup(&mut self, region: RegionId, node: MemNodeId, nonce: u64) -> Response {
        let n = self
            .memnodes
            .get(&node)
            .ok_or(CommandError::UnknownMemNode { id: node })?;
        let r = self
            .regions
            .get(&region)
            .ok_or(CommandError::UnknownRegion { id: region })?;
        if r.on(node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node} already holds a replica of region {region}"
            )));
        }
        if r.replicas.len() >= REPLICAS_MAX {
            return Err(CommandError::Full(format!(
                "region {region} has {REPLICAS_MAX} replicas already"
            )));
        }
        if n.state != MemNodeState::Active {
            return Err(CommandError::Conflict(format!(
                "memory node {node} is {}, not active",
                n.state
            )));
        }
        let size = r.size_bytes;
        if n.capacity_bytes - n.allocated_bytes < size {
            return Err(CommandError::Placement {
                needed: 1,
                size_bytes: size,
                available: 0,
            });
        }
        self.charge(node, size as i128);
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        r.replicas.push(ReplicaLoc {
            node,
            key: access_key(nonce, region, node),
        });
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    fn remove_backup(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        match r.replicas.iter().position(|x| x.node == node) {
            None => Err(CommandError::Conflict(format!(
                "memory node {node} holds no replica of region {region}"
            ))),
            Some(0) => Err(CommandError::Conflict(format!(
                "memory node {node} is region {region}'s primary: promote a backup first"
            ))),
            Some(i) => {
                r.replicas.remove(i);
                r.epoch = epoch;
                let (size, out) = (r.size_bytes, r.clone());
                self.charge(node, -(size as i128));
                Ok(Outcome::Region(out))
            }
        }
    }

    fn register_client(&mut self, name: &str, owner_ids: u16, lease_ms: u64, at_ms: u64) -> Response {
        check_name("client name", name)?;
        if owner_ids == 0 || owner_ids > OWNER_IDS_PER_CLIENT_MAX {
            return Err(CommandError::Invalid(format!(
                "a client takes 1 to {OWNER_IDS_PER_CLIENT_MAX} owner ids, not {owner_ids}"
            )));
        }
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(CommandError::Invalid(format!(
                "a lease lasts {LEASE_MS_MIN} to {LEASE_MS_MAX} ms, not {lease_ms}"
            )));
        }
        let owners = self.free_owner_block(owner_ids).ok_or_else(|| {
            CommandError::Full(format!(
                "no {owner_ids} consecutive free owner ids below {OWNER_ID_END}"
            ))
        })?;
        let id = self.next_client;
        self.next_client += 1;
        let client = Client {
            id,
            name: name.to_owned(),
            lease_ms,
            owners,
            registered_at_ms: at_ms,
            state: ClientState::Live,
        };
        self.clients.insert(id, client.clone());
        Ok(Outcome::Client(client))
    }

    /// The lowest free run of `count` owner ids (first fit).
    fn free_owner_block(&self, count: u16) -> Option<OwnerBlock> {
        let mut taken: Vec<OwnerBlock> = self.clients.values().map(|c| c.owners).collect();
        taken.sort_by_key(|b| b.first);
        let mut first = 1u16;
        for b in taken {
            if b.first >= first + count {
                break;
            }
            first = first.max(b.end());
        }
        (u32::from(first) + u32::from(count) <= u32::from(OWNER_ID_END))
            .then_some(OwnerBlock { first, count })
    }

    /// The map clients route by: every memory node (a dead one too, while
    /// replicas still name it) and every region, at the current epoch.
    pub fn map(&self) -> Result<ClusterMap, fabric::MapError> {
        let nodes = self
            .memnodes
            .values()
            .map(|n| NodeInfo {
                id: n.id,
                endpoint: n.endpoint.clone(),
            })
            .collect();
        let regions = self
            .regions
            .values()
            .map(|r| RegionInfo {
                id: r.id,
                size: r.size_bytes,
                replicas: r.replicas.clone(),
            })
            .collect();
        ClusterMap::new(self.epoch, nodes, regions)
    }

    /// Checks the invariants in the module docs.
    pub fn check(&self) -> Result<(), String> {
        let mut allocated: BTreeMap<MemNodeId, u64> = BTreeMap::new();
        for r in self.regions.values() {
            if r.replicas.is_empty() || r.replicas.len() > REPLICAS_MAX {
                return Err(format!("region {} has {} replicas", r.id, r.replicas.len()));
            }
            if r.epoch > self.epoch {
                return Err(format!(
                    "region {} is stamped {} > epoch {}",
                    r.id, r.epoch, self.epoch
                ));
            }
            for (i, x) in r.replicas.iter().enumerate() {
                if !self.memnodes.contains_key(&x.node) {
                    return Err(format!(
                        "region {} has a replica on unknown node {}",
                        r.id, x.node
                    ));
                }
                if r.replicas[..i].iter().any(|y| y.node == x.node) {
                    return Err(format!("region {} has two replicas on node {}", r.id, x.node));
                }
                *allocated.entry(x.node).or_default() += r.size_bytes;
            }
        }
        for n in self.memnodes.values() {
            let want = allocated.get(&n.id).copied().unwrap_or(0);
            if n.allocated_bytes != want {
                return Err(format!(
                    "node {} records {} allocated bytes, regions take {want}",
                    n.id, n.allocated_bytes
                ));
            }
        }
        let blocks: Vec<(ClientId, OwnerBlock)> = self.clients.values().map(|c| (c.id, c.owners)).collect();
        for (i, &(a, x)) in blocks.iter().enumerate() {
            if x.first == 0 || x.end() > OWNER_ID_END {
                return Err(format!("client {a} holds owner ids {}..{}", x.first, x.end()));
            }
            if let Some(&(b, _)) = blocks[..i].iter().find(|(_, y)| y.overlaps(x)) {
                return Err(format!("clients {a} and {b} share owner ids"));
            }
        }
        Ok(())
    }
}

fn check_name(what: &str, s: &str) -> Result<(), CommandError> {
    if s.is_empty() || s.len() > NAME_BYTES_MAX || s.chars().any(char::is_control) {
        return Err(CommandError::Invalid(format!(
            "{what} must be 1 to {NAME_BYTES_MAX} bytes without control characters"
        )));
    }
    Ok(())
}

/// A replica's access key: derived from the proposer's nonce, so that every
/// member computes the same key and nobody can guess it from the ids.
fn access_key(nonce: u64, region: RegionId, node: MemNodeId) -> AccessKey {
    // SplitMix64 finaliser over the nonce and the replica's place.
    let mut z = nonce ^ (u64::from(region) << 16 | u64::from(node)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    // The high half: an access key is 32 bits.
    ((z ^ (z >> 31)) >> 32) as AccessKey
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(at_ms: u64, command: Command) -> Request {
        Request {
            at_ms,
            actor: "test".into(),
            nonce: at_ms.wrapping_mul(0x2545_F491_4F6C_DD1D),
            command,
        }
    }

    /// A state with `n` active nodes of `capacity` bytes each.
    fn cluster(n: u16, capacity: u64) -> ControlState {
        let mut s = ControlState::default();
        for i in 0..n {
            let cmd = Command::RegisterMemNode {
                endpoint: format!("10.0.0.{i}:7000"),
                capacity_bytes: capacity,
            };
            let Ok(Outcome::MemNode(m)) = s.apply(&req(1, cmd)) else {
                panic!("register failed")
            };
            assert_eq!(m.state, MemNodeState::Joining);
            s.apply(&req(2, Command::ActivateMemNode { id: m.id })).unwrap();
        }
        s
    }

    fn region(s: &mut ControlState, size_bytes: u64, replicas: u8) -> Region {
        match s.apply(&req(3, Command::CreateRegion { size_bytes, replicas })) {
            Ok(Outcome::Region(r)) => r,
            other => panic!("create region: {other:?}"),
        }
    }

    #[test]
    fn regions_are_placed_on_distinct_roomiest_active_nodes() {
        let mut s = cluster(3, 1 << 30);
        s.apply(&req(4, Command::DrainMemNode { id: 2 })).unwrap();
        let a = region(&mut s, 1 << 29, 2);
        assert_eq!(a.replicas.iter().map(|r| r.node).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!((a.epoch, s.epoch), (1, 1));
        assert_ne!(a.replicas[0].key, a.replicas[1].key);
        // Node 0 and 1 are half full; a second region of 1 GiB fits nowhere.
        let before = s.clone();
        let err = s.apply(&req(
            5,
            Command::CreateRegion {
                size_bytes: 1 << 30,
                replicas: 1,
            },
        ));
        assert_eq!(
            err,
            Err(CommandError::Placement {
                needed: 1,
                size_bytes: 1 << 30,
                available: 0
            })
        );
        assert_eq!(
            (s.epoch, &s.regions, &s.memnodes),
            (before.epoch, &before.regions, &before.memnodes)
        );
        assert_eq!(
            s.audit.back().map(|e| e.outcome.starts_with("cannot place")),
            Some(true)
        );
        let map = s.map().unwrap();
        assert_eq!((map.epoch(), map.regions().len(), map.nodes().len()), (1, 1, 3));
        assert_eq!(s.check(), Ok(()));
    }

    #[test]
    fn too_few_nodes_is_a_clear_error_and_changes_nothing() {
        let mut s = cluster(2, 1 << 20);
        let before = s.clone();
        let err = s
            .apply(&req(
                4,
                Command::CreateRegion {
                    size_bytes: 4096,
                    replicas: 3,
                },
            ))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot place 3 replicas of 4096 bytes: only 2 active nodes with room"
        );
        assert_eq!((s.epoch, &s.regions), (before.epoch, &before.regions));
        for bad in [
            Command::CreateRegion {
                size_bytes: 0,
                replicas: 1,
            },
            Command::CreateRegion {
                size_bytes: 4096,
                replicas: 0,
            },
            Command::CreateRegion {
                size_bytes: 4096,
                replicas: REPLICAS_MAX as u8 + 1,
            },
        ] {
            assert!(matches!(s.apply(&req(5, bad)), Err(CommandError::Invalid(_))));
        }
    }

    #[test]
    fn promote_add_and_remove_backups_bump_the_epoch() {
        let mut s = cluster(4, 1 << 20);
        let r = region(&mut s, 4096, 2);
        let (p, b) = (r.replicas[0].node, r.replicas[1].node);
        let promoted = s
            .apply(&req(
                4,
                Command::PromoteBackup {
                    region: r.id,
                    node: b,
                },
            ))
            .unwrap();
        let Outcome::Region(promoted) = promoted else {
            panic!()
        };
        assert_eq!((promoted.primary(), promoted.epoch, s.epoch), (b, 2, 2));
        assert!(matches!(
            s.apply(&req(
                5,
                Command::PromoteBackup {
                    region: r.id,
                    node: b
                }
            )),
            Err(CommandError::Conflict(_))
        ));
        assert!(matches!(
            s.apply(&req(
                5,
                Command::RemoveBackup {
                    region: r.id,
                    node: b
                }
            )),
            Err(CommandError::Conflict(_))
        ));
        let spare = (0..4).find(|n| !promoted.on(*n)).unwrap();
        s.apply(&req(
            6,
            Command::AddBackup {
                region: r.id,
                node: spare,
            },
        ))
        .unwrap();
        assert_eq!((s.regions[&r.id].replicas.len(), s.epoch), (3, 3));
        assert_eq!(s.memnodes[&spare].allocated_bytes, 4096);
        s.apply(&req(
            7,
            Command::RemoveBackup {
                region: r.id,
                node: p,
            },
        ))
        .unwrap();
        assert_eq!((s.regions[&r.id].replicas.len(), s.epoch), (2, 4));
        assert_eq!(s.memnodes[&p].allocated_bytes, 0);
        // Failed commands never bump it.
        assert!(s
            .apply(&req(
                8,
                Command::AddBackup {
                    region: r.id,
                    node: 99
                }
            ))
            .is_err());
        assert!(s
            .apply(&req(8, Command::PromoteBackup { region: 77, node: p }))
            .is_err());
        assert_eq!(s.epoch, 4);
        assert_eq!(s.check(), Ok(()));
    }

    #[test]
    fn a_node_holding_replicas_cannot_be_removed() {
        let mut s = cluster(2, 1 << 20);
        let r = region(&mut s, 4096, 1);
        let holder = r.primary();
        let err = s
            .apply(&req(4, Command::RemoveMemNode { id: holder }))
            .unwrap_err();
        assert!(err.to_string().contains("holds replicas of regions 0"), "{err}");
        let other = 1 - holder;
        assert_eq!(
            s.apply(&req(5, Command::RemoveMemNode { id: other })),
            Ok(Outcome::Removed)
        );
        assert_eq!(
            s.apply(&req(6, Command::RemoveMemNode { id: other })),
            Err(CommandError::UnknownMemNode { id: other })
        );
        s.apply(&req(7, Command::DeclareMemNodeDead { id: holder }))
            .unwrap();
        assert_eq!(
            (s.epoch, s.regions[&r.id].epoch),
            (3, 3),
            "a death re-stamps the node's regions"
        );
        assert!(
            s.apply(&req(8, Command::ActivateMemNode { id: holder })).is_err(),
            "the dead stay dead"
        );
    }

    #[test]
    fn clients_get_disjoint_owner_blocks_and_expire_exactly_once() {
        let mut s = ControlState::default();
        let register = |s: &mut ControlState, n: u16| match s.apply(&req(
            10,
            Command::RegisterClient {
                name: format!("c{n}"),
                owner_ids: n,
                lease_ms: 10,
            },
        )) {
            Ok(Outcome::Client(c)) => c,
            other => panic!("{other:?}"),
        };
        let a = register(&mut s, 8);
        let b = register(&mut s, 16);
        assert_eq!((a.owners.first, b.owners.first), (1, 9));
        let expired = s.apply(&req(20, Command::ExpireClient { id: a.id })).unwrap();
        assert!(matches!(
            expired,
            Outcome::Client(Client {
                state: ClientState::Expired { at_ms: 20 },
                ..
            })
        ));
        assert!(matches!(
            s.apply(&req(21, Command::ExpireClient { id: a.id })),
            Err(CommandError::Conflict(_))
        ));
        // An expired client keeps its ids until forgotten (recovery rolls its logs first).
        assert_eq!(register(&mut s, 4).owners.first, 25);
        assert!(matches!(
            s.apply(&req(22, Command::ForgetClient { id: b.id })),
            Err(CommandError::Conflict(_))
        ));
        assert_eq!(
            s.apply(&req(23, Command::ForgetClient { id: a.id })),
            Ok(Outcome::Removed)
        );
        assert_eq!(
            register(&mut s, 8).owners.first,
            1,
            "first fit reuses the freed block"
        );
        assert_eq!(s.check(), Ok(()));
        // The owner-id space is bounded.
        let mut full = ControlState::default();
        for _ in 0..(OWNER_ID_END - 1) / OWNER_IDS_PER_CLIENT_MAX {
            register(&mut full, OWNER_IDS_PER_CLIENT_MAX);
        }
        let err = full.apply(&req(
            30,
            Command::RegisterClient {
                name: "x".into(),
                owner_ids: OWNER_IDS_PER_CLIENT_MAX,
                lease_ms: 10,
            },
        ));
        assert!(matches!(err, Err(CommandError::Full(_))), "{err:?}");
    }

    #[test]
    fn bad_arguments_are_refused() {
        let mut s = ControlState::default();
        let long = "x".repeat(NAME_BYTES_MAX + 1);
        for bad in [
            Command::RegisterMemNode {
                endpoint: String::new(),
                capacity_bytes: 1,
            },
            Command::RegisterMemNode {
                endpoint: long.clone(),
                capacity_bytes: 1,
            },
            Command::RegisterMemNode {
                endpoint: "a\nb".into(),
                capacity_bytes: 1,
            },
            Command::RegisterMemNode {
                endpoint: "a:1".into(),
                capacity_bytes: 0,
            },
            Command::RegisterClient {
                name: long,
                owner_ids: 1,
                lease_ms: 10,
            },
            Command::RegisterClient {
                name: "c".into(),
                owner_ids: 0,
                lease_ms: 10,
            },
            Command::RegisterClient {
                name: "c".into(),
                owner_ids: OWNER_IDS_PER_CLIENT_MAX + 1,
                lease_ms: 10,
            },
            Command::RegisterClient {
                name: "c".into(),
                owner_ids: 1,
                lease_ms: 0,
            },
            Command::RegisterClient {
                name: "c".into(),
                owner_ids: 1,
                lease_ms: LEASE_MS_MAX + 1,
            },
        ] {
            assert!(
                matches!(s.apply(&req(1, bad.clone())), Err(CommandError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert!(s.memnodes.is_empty() && s.clients.is_empty());
        assert_eq!(s.audit.len(), 9, "refusals are audited too");
        s.apply(&req(
            2,
            Command::RegisterMemNode {
                endpoint: "a:1".into(),
                capacity_bytes: 1,
            },
        ))
        .unwrap();
        assert!(matches!(
            s.apply(&req(
                3,
                Command::RegisterMemNode {
                    endpoint: "a:1".into(),
                    capacity_bytes: 1
                }
            )),
            Err(CommandError::Conflict(_))
        ));
    }

    #[test]
    fn apply_is_deterministic_and_the_audit_is_bounded() {
        let script: Vec<Request> = (0..(AUDIT_ENTRIES_MAX as u64 + 50))
            .map(|i| {
                req(
                    i,
                    match i % 5 {
                        0 => Command::RegisterMemNode {
                            endpoint: format!("n{i}"),
                            capacity_bytes: 1 << 20,
                        },
                        1 => Command::ActivateMemNode {
                            id: (i / 5) as MemNodeId,
                        },
                        2 => Command::CreateRegion {
                            size_bytes: 64,
                            replicas: 1,
                        },
                        3 => Command::RegisterClient {
                            name: format!("c{i}"),
                            owner_ids: 1,
                            lease_ms: 5,
                        },
                        _ => Command::ExpireClient { id: i / 5 },
                    },
                )
            })
            .collect();
        let (mut a, mut b) = (ControlState::default(), ControlState::default());
        let ra: Vec<Response> = script.iter().map(|r| a.apply(r)).collect();
        let rb: Vec<Response> = script.iter().map(|r| b.apply(r)).collect();
        assert_eq!(ra, rb);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert_eq!(a.audit.len(), AUDIT_ENTRIES_MAX);
        assert_eq!(a.audit.front().map(|e| e.at_ms), Some(50));
        assert_eq!(a.check(), Ok(()));
        let back: ControlState = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }
}
