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
//!   region's `epoch` is the epoch of its last change;
//! - a lost region says why (its reason is not blank); it is in no map
//!   clients route by ([`Region::usable`]).

mod catalog;
mod clients;
mod command;
mod identity;
mod operations;
mod records;
mod recovery;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use fabric::{AccessKey, ClusterMap, Epoch, NodeInfo, RegionId, RegionInfo, ReplicaLoc, REPLICAS_MAX};
use serde::{Deserialize, Serialize};

pub use command::{Command, CommandError, Outcome, Request, Response, RestoreSummary};
pub use operations::{state_hash, SavedState, StateHash, RESTORE_EPOCH_JUMP};
pub use records::{
    AuditEntry, Client, ClientId, ClientState, IndexKind, IndexRecord, IndexState, IndexVariant, MemNode,
    MemNodeId, MemNodeState, OwnerBlock, Region, ReplicaGeneration, ReplicaProof,
};

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
    /// Named indexes by name.
    #[serde(default)]
    pub indexes: BTreeMap<String, IndexRecord>,
    /// The reclaim sequence: bumped by every client expiry and every
    /// forgetting of one. Clients learn it, and the owner ids announced for
    /// reclaim, with each renewal, and report how far they have quiesced
    /// (`txn::quiesce`); a reclaim waits for every live client.
    #[serde(default)]
    pub reclaim_seq: u64,
    /// The claim on each expired client's reclaim: who writes its runs
    /// (`ClaimReclaim`), until it is forgotten.
    #[serde(default)]
    pub reclaimers: BTreeMap<ClientId, ClientId>,
    /// The cluster clock (ms): the newest [`Request::clock`] applied. It
    /// never goes back; expiries and quarantines are judged by it.
    #[serde(default)]
    pub clock_ms: u64,
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
        self.clock_ms = self.clock_ms.max(req.clock());
        let result = self.execute(req);
        if result.is_ok() && req.command.alters_routing() {
            // The handler stamped what it changed with this epoch.
            self.epoch = self.next_epoch();
        }
        self.audit.push_back(AuditEntry {
            at_ms: req.at_ms,
            actor: req.actor.clone(),
            command: req.command.for_audit(),
            outcome: match &result {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.to_string(),
            },
        });
        while self.audit.len() > AUDIT_ENTRIES_MAX {
            self.audit.pop_front();
        }
        debug_assert!(
            self.epoch == before
                || self.epoch == before + 1
                || matches!(req.command, Command::Restore { .. })
        );
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
                image,
            } => self.register_memnode(endpoint, capacity_bytes, image),
            Command::ReplaceImage { id, image } => self.replace_image(id, image),
            Command::ReplicaUnproven { region, node, found } => self.replica_unproven(region, node, found),
            Command::ReplicaProven {
                region,
                node,
                generation,
                followed_epoch,
            } => self.replica_proven(region, node, generation, followed_epoch),
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
            Command::DeclareMemNodeDead { id } => self.declare_dead(id),
            Command::DrainMemNode { id } => self.transition(
                id,
                &[MemNodeState::Joining, MemNodeState::Active, MemNodeState::Suspect],
                MemNodeState::Drained,
            ),
            Command::RemoveMemNode { id } => self.remove_memnode(id),
            Command::CreateRegion { size_bytes, replicas } => {
                self.create_region(size_bytes, replicas, req.nonce)
            }
            Command::PromoteBackup {
                region,
                node,
                restorer,
            } => self.promote(region, node, restorer),
            Command::ClaimRestore { region, client } => self.claim_restore(region, client),
            Command::ReleaseRestore { region, client } => self.release_restore(region, client),
            Command::AddBackup { region, node } => self.add_backup(region, node, req.nonce),
            Command::FenceCopy { region, node } => self.fence_copy(region, node),
            Command::JoinBackup { region, node } => self.join_backup(region, node),
            Command::EvictReplica { region, node } => self.evict_replica(region, node),
            Command::DeclareRegionLost { region } => self.declare_region_lost(region),
            Command::DropRegion { region } => self.drop_region(region),
            Command::RemoveBackup { region, node } => self.remove_backup(region, node),
            Command::ReplicaReady { region, node } => self.replica_ready(region, node),
            Command::MemNodeEpoch { id, epoch } => self.memnode_epoch(id, epoch),
            Command::MemNodeFence { id, seq } => self.memnode_fence(id, seq),
            Command::RegionRestored { region } => self.region_restored(region),
            Command::CreateIndex {
                ref name,
                kind,
                variant,
                size_bytes,
                replicas,
                client,
            } => self.create_index(name, kind, variant, size_bytes, replicas, client, req),
            Command::ClaimIndex { ref name, client } => self.claim_index(name, client),
            Command::IndexReady { ref name, client } => self.index_ready(name, client),
            Command::RegisterClient {
                ref name,
                owner_ids,
                lease_ms,
            } => self.register_client(name, owner_ids, lease_ms, req.at_ms),
            Command::ExpireClient { id } => self.expire_client(id),
            Command::ForgetClient { id, by } => self.forget_client(id, by, self.clock_ms),
            Command::ClaimReclaim { id, by } => self.claim_reclaim(id, by, self.clock_ms),
            Command::SetMaintenance { id, on } => self.set_maintenance(id, on),
            Command::Restore { ref state } => self.restore(&state.0),
            Command::DeregisterClient { id } => {
                let c = self.clients.get(&id).ok_or(CommandError::UnknownClient { id })?;
                if c.state != ClientState::Live {
                    return Err(CommandError::Conflict(format!(
                        "client {id} has expired: recovery finishes its logs and forgets it"
                    )));
                }
                self.clients.remove(&id);
                Ok(Outcome::Removed)
            }
        }
    }

    fn register_memnode(
        &mut self,
        endpoint: &str,
        capacity_bytes: u64,
        image: Option<fabric::ImageId>,
    ) -> Response {
        check_name("endpoint", endpoint)?;
        if capacity_bytes == 0 {
            return Err(CommandError::Invalid("capacity must be above 0 bytes".into()));
        }
        if let Some(n) = self.memnodes.values().find(|n| n.endpoint == endpoint) {
            let id = n.id;
            if n.state == MemNodeState::Dead {
                return self.revive_memnode(id, capacity_bytes, image);
            }
            if let (Some(was), Some(now)) = (n.image, image) {
                if was != now {
                    return Err(CommandError::Conflict(format!(
                        "memory node {id} at {endpoint} is recorded with image {was}, not {now}: a new image holds \
                         none of its replicas; replace the image (which declares the node dead) and register again"
                    )));
                }
            }
            return Err(CommandError::Conflict(format!(
                "memory node {id} already has endpoint {endpoint}"
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
            epoch: 0,
            fence_seq: 0,
            state: MemNodeState::Joining,
            maintenance: false,
            image,
        };
        self.memnodes.insert(id, node.clone());
        Ok(Outcome::MemNode(node))
    }

    /// See [`Command::ReplaceImage`]. Refused for a node whose record has
    /// no image or this one: nothing says its replicas are gone.
    fn replace_image(&mut self, id: MemNodeId, image: fabric::ImageId) -> Response {
        let n = self
            .memnodes
            .get(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        match n.image {
            Some(was) if was != image => {}
            Some(_) => {
                return Err(CommandError::Conflict(format!(
                    "memory node {id} is recorded with image {image} already"
                )))
            }
            None => {
                return Err(CommandError::Conflict(format!(
                    "memory node {id}'s record names no image: it cannot be told apart from image {image}"
                )))
            }
        }
        if n.state == MemNodeState::Dead {
            return Ok(Outcome::MemNode(n.clone()));
        }
        self.declare_dead(id)
    }

    /// Memory node `id` is dead: its regions are stamped with the new
    /// epoch, so that recovery evicts its replicas.
    fn declare_dead(&mut self, id: MemNodeId) -> Response {
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

    fn candidates(&self, size_bytes: u64, exclude: &[MemNodeId]) -> Vec<MemNodeId> {
        candidates(self.memnodes.values(), size_bytes, exclude)
    }

    fn create_region(&mut self, size_bytes: u64, replicas: u8, nonce: u64) -> Response {
        self.place_region(size_bytes, replicas, nonce)
            .map(Outcome::Region)
    }

    /// Places a region on the roomiest active nodes, every replica pending
    /// until its node reports it allocated.
    fn place_region(&mut self, size_bytes: u64, replicas: u8, nonce: u64) -> Result<Region, CommandError> {
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
        // Region 0 names no region (a zero `GlobalAddr` is a null pointer).
        self.next_region = self.next_region.max(1);
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
        let mut region = Region {
            id,
            size_bytes,
            pending: replicas.iter().map(|r| r.node).collect(),
            restoring: false,
            syncing: Vec::new(),
            catching_up: None,
            restorer: None,
            replication: replicas.len() as u8,
            replicas,
            epoch: self.next_epoch(),
            lost: None,
            generation: 0,
            generations: Vec::new(),
            unverified: Vec::new(),
            proofs: Vec::new(),
        };
        let holders: Vec<MemNodeId> = region.replicas.iter().map(|l| l.node).collect();
        for node in holders {
            region.hand_out(node);
        }
        self.regions.insert(id, region.clone());
        Ok(region)
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

    fn promote(&mut self, region: RegionId, node: MemNodeId, restorer: Option<ClientId>) -> Response {
        if !self.memnodes.contains_key(&node) {
            return Err(CommandError::UnknownMemNode { id: node });
        }
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        let i = backup_position(r, node, "is already its primary")?;
        if r.being_restored() {
            return Err(CommandError::Conflict(format!(
                "region {region} is being restored; wait until it is published"
            )));
        }
        r.replicas.swap(0, i);
        r.epoch = epoch;
        // Out of the map until the new primary's primary-only words are
        // rebuilt (`region_restored`).
        r.restoring = true;
        r.restorer = restorer;
        r.hand_out(node);
        Ok(Outcome::Region(r.clone()))
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
        if r.replicas.len() + r.syncing.len() >= REPLICAS_MAX {
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
        if r.being_restored() {
            return Err(CommandError::Conflict(format!(
                "region {region} is being restored; add a backup once it is published"
            )));
        }
        self.charge(node, size as i128);
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        r.syncing.push(ReplicaLoc {
            node,
            key: access_key(nonce, region, node),
        });
        r.hand_out(node);
        r.pending.push(node);
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    fn remove_backup(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        let i = backup_position(r, node, "is its primary: promote a backup first")?;
        // A replica being caught up must stay until it is published.
        if r.being_restored() {
            return Err(CommandError::Conflict(format!(
                "region {region} is being restored; remove a backup once it is published"
            )));
        }
        r.replicas.remove(i);
        r.pending.retain(|&n| n != node);
        r.forget_generations();
        r.epoch = epoch;
        let (size, out) = (r.size_bytes, r.clone());
        self.charge(node, -(size as i128));
        Ok(Outcome::Region(out))
    }

    /// The map clients route by: every memory node (a dead one too, while
    /// replicas still name it) and every region that may be used (allocated
    /// on every replica, not being restored), at the current epoch.
    pub fn map(&self) -> Result<ClusterMap, fabric::MapError> {
        self.map_of(Region::usable, false)
    }

    /// The map of every region, usable or not, with the replicas being
    /// made listed after the others: what recovery routes by while it
    /// restores a region the clients' map leaves out, or copies one.
    pub fn full_map(&self) -> Result<ClusterMap, fabric::MapError> {
        self.map_of(|_| true, true)
    }

    fn map_of(&self, keep: impl Fn(&Region) -> bool, syncing: bool) -> Result<ClusterMap, fabric::MapError> {
        map_of(
            self.epoch,
            self.memnodes.values(),
            self.regions.values().filter(|r| keep(r)),
            syncing,
        )
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
            let all: Vec<&ReplicaLoc> = r.replicas.iter().chain(&r.syncing).collect();
            for (i, x) in all.iter().enumerate() {
                if !self.memnodes.contains_key(&x.node) {
                    return Err(format!(
                        "region {} has a replica on unknown node {}",
                        r.id, x.node
                    ));
                }
                if all[..i].iter().any(|y| y.node == x.node) {
                    return Err(format!("region {} has two replicas on node {}", r.id, x.node));
                }
                *allocated.entry(x.node).or_default() += r.size_bytes;
            }
            for g in &r.generations {
                if !r.on(g.node) || g.generation == 0 || g.generation > r.generation {
                    return Err(format!(
                        "region {} records generation {} for node {}, which {} (last handed out: {})",
                        r.id,
                        g.generation,
                        g.node,
                        if r.on(g.node) {
                            "is out of range"
                        } else {
                            "holds no replica"
                        },
                        r.generation
                    ));
                }
            }
            if let Some(n) = r.catching_up.filter(|&n| !r.serves(n)) {
                return Err(format!(
                    "region {} catches up node {n}, which it does not write",
                    r.id
                ));
            }
            if let Some(c) = r.restorer.filter(|_| !r.being_restored()) {
                return Err(format!(
                    "region {} is claimed by restorer {c} but not being restored",
                    r.id
                ));
            }
            if let Some(n) = r.pending.iter().find(|&&n| !r.on(n)) {
                return Err(format!(
                    "region {} waits for node {n}, which holds no replica",
                    r.id
                ));
            }
            // An operator reads the reason to decide to drop it.
            if r.lost.as_ref().is_some_and(|why| why.trim().is_empty()) {
                return Err(format!("region {} is lost without a reason", r.id));
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
        for x in self.indexes.values() {
            if !self.regions.contains_key(&x.region) {
                return Err(format!("index {:?} lives in unknown region {}", x.name, x.region));
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
        self.check_ids()
    }

    /// Every record sits under its own id, every id is below the next one
    /// handed out (else a new record would overwrite an old one), and the
    /// reclaim claims are of known clients. What `apply` keeps by
    /// construction; checked for states that come from outside (a restore).
    fn check_ids(&self) -> Result<(), String> {
        if let Some((k, n)) = self.memnodes.iter().find(|(&k, n)| n.id != k) {
            return Err(format!("memory node {} is kept under id {k}", n.id));
        }
        if let Some((k, r)) = self.regions.iter().find(|(&k, r)| r.id != k) {
            return Err(format!("region {} is kept under id {k}", r.id));
        }
        if let Some((k, c)) = self.clients.iter().find(|(&k, c)| c.id != k) {
            return Err(format!("client {} is kept under id {k}", c.id));
        }
        if let Some((k, x)) = self.indexes.iter().find(|(k, x)| x.name != **k) {
            return Err(format!("index {:?} is kept under name {k:?}", x.name));
        }
        if let Some(&id) = self
            .memnodes
            .keys()
            .find(|&&id| u32::from(id) >= self.next_memnode)
        {
            return Err(format!(
                "memory node {id} is not below the next id {}",
                self.next_memnode
            ));
        }
        if let Some(&id) = self.regions.keys().find(|&&id| u32::from(id) >= self.next_region) {
            return Err(format!(
                "region {id} is not below the next id {}",
                self.next_region
            ));
        }
        if let Some(&id) = self.clients.keys().find(|&&id| id >= self.next_client) {
            return Err(format!(
                "client {id} is not below the next id {}",
                self.next_client
            ));
        }
        // A claim lasts until its client is forgotten (its claimant may go
        // first).
        if let Some(c) = self.reclaimers.keys().find(|c| !self.clients.contains_key(c)) {
            return Err(format!("the reclaim of unknown client {c} is claimed"));
        }
        Ok(())
    }
}

/// The map of `regions` on `memnodes` at `epoch`: the one translation of
/// records into what clients route by ([`ControlState::map`], and a
/// promoter's full map from a status).
pub fn map_of<'a>(
    epoch: Epoch,
    memnodes: impl Iterator<Item = &'a MemNode>,
    regions: impl Iterator<Item = &'a Region>,
    syncing: bool,
) -> Result<ClusterMap, fabric::MapError> {
    let nodes = memnodes
        .map(|n| NodeInfo {
            id: n.id,
            endpoint: n.endpoint.clone(),
        })
        .collect();
    let regions = regions
        .map(|r| RegionInfo {
            id: r.id,
            size: r.size_bytes,
            replicas: if syncing {
                r.replicas.iter().chain(&r.syncing).copied().collect()
            } else {
                r.replicas.clone()
            },
        })
        .collect();
    ClusterMap::new(epoch, nodes, regions)
}

/// Nodes of `memnodes` that may take a new replica of `size_bytes`
/// (active, with room, not in `exclude`), roomiest first, ties by id: how
/// regions are placed, and where recovery puts a new replica.
pub fn candidates<'a>(
    memnodes: impl Iterator<Item = &'a MemNode>,
    size_bytes: u64,
    exclude: &[MemNodeId],
) -> Vec<MemNodeId> {
    let mut nodes: Vec<&MemNode> = memnodes
        .filter(|n| n.state == MemNodeState::Active && !n.maintenance && !exclude.contains(&n.id))
        .filter(|n| n.capacity_bytes.saturating_sub(n.allocated_bytes) >= size_bytes)
        .collect();
    nodes.sort_by_key(|n| (std::cmp::Reverse(n.capacity_bytes - n.allocated_bytes), n.id));
    nodes.into_iter().map(|n| n.id).collect()
}

/// Whether region `r` is as whole as the cluster can make it now: whole,
/// or degraded (serving with fewer replicas than it asks for, none being
/// made or caught up) with no node of `memnodes` able to take another
/// (`candidates`). Recovery has nothing more to do for it until a node
/// returns or joins; it then heals on its own.
pub fn settled<'a>(r: &Region, memnodes: impl Iterator<Item = &'a MemNode>) -> bool {
    if r.whole() {
        return true;
    }
    let holders: Vec<MemNodeId> = r.replicas.iter().chain(&r.syncing).map(|l| l.node).collect();
    r.usable()
        && r.syncing.is_empty()
        && r.catching_up.is_none()
        && candidates(memnodes, r.size_bytes, &holders).is_empty()
}

/// Where `node` sits among `r`'s backups; the primary is refused with
/// `if_primary`, which says why.
fn backup_position(r: &Region, node: MemNodeId, if_primary: &str) -> Result<usize, CommandError> {
    match r.replicas.iter().position(|x| x.node == node) {
        None => Err(CommandError::Conflict(format!(
            "memory node {node} holds no replica of region {}",
            r.id
        ))),
        Some(0) => Err(CommandError::Conflict(format!(
            "memory node {node} {if_primary} (region {})",
            r.id
        ))),
        Some(i) => Ok(i),
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
