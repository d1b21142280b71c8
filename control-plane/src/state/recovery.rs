//! What recovery asks of the state: a dead node's replicas evicted (a
//! backup dropped, a primary replaced by its first live backup), a copied
//! replica joined, a dead node that came back taken in again as an empty
//! spare. Each is one command, applied atomically, so a coordinator that
//! dies between two of them leaves a state the next one resumes from.

use super::{ControlState, MemNodeState, Outcome, Response};
use crate::state::{ClientId, ClientState, CommandError, MemNodeId, Region, RegionId};

impl ControlState {
    /// Drops `node`'s replica of `region`; `node` must be dead. A dead
    /// primary is replaced by the first backup that is on a live node and
    /// allocated, and the region is out of the clients' map until the
    /// new primary's primary-only words are rebuilt (`restoring`). A join
    /// in progress is undone: the joining replica was not caught up, so it
    /// goes back to being made.
    ///
    /// A dead primary without such a backup is refused: the region is
    /// lost, which recovery declares (`declare_region_lost`) instead of
    /// hiding it by an eviction. Nothing is evicted from a lost region: it
    /// keeps its replicas, to show where it lived, until it is dropped.
    pub(super) fn evict_replica(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let n = self
            .memnodes
            .get(&node)
            .ok_or(CommandError::UnknownMemNode { id: node })?;
        if n.state != MemNodeState::Dead {
            return Err(CommandError::Conflict(format!(
                "memory node {node} is {}, not dead: only a dead node's replicas are evicted",
                n.state
            )));
        }
        self.drop_replica(region, node)
    }

    /// Region `region`, which `node` holds a replica of and which is not
    /// lost: what dropping that replica starts from.
    pub(super) fn held_replica(&self, region: RegionId, node: MemNodeId) -> Result<&Region, CommandError> {
        let r = self
            .regions
            .get(&region)
            .ok_or(CommandError::UnknownRegion { id: region })?;
        if !r.on(node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node} holds no replica of region {region}"
            )));
        }
        if let Some(why) = &r.lost {
            return Err(CommandError::Conflict(format!(
                "region {region} is lost ({why}): nothing is evicted from it; an operator drops it \
                 (`kintsugi ctl region drop {region} --confirm`)"
            )));
        }
        Ok(r)
    }

    /// What [`ControlState::evict_replica`] does once it has judged that
    /// `node`'s replica of `region` is gone: also what a replica whose node
    /// does not hold it at its generation comes to (`replica_unproven`).
    pub(super) fn drop_replica(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let epoch = self.next_epoch();
        let mut r = self.held_replica(region, node)?.clone();
        if let Some(i) = r.syncing.iter().position(|x| x.node == node) {
            r.syncing.remove(i);
        } else {
            if let Some(j) = r.catching_up.take() {
                if j != node {
                    let at = r.replicas.iter().position(|x| x.node == j).ok_or_else(|| {
                        CommandError::Conflict(format!("region {region} catches up {j}, not a replica"))
                    })?;
                    let back = r.replicas.remove(at);
                    r.syncing.push(back);
                    // Not caught up: to be filled again, at a new generation.
                    r.hand_out(j);
                }
            }
            let at = r.replicas.iter().position(|x| x.node == node).ok_or_else(|| {
                CommandError::Conflict(format!("node {node} is not a replica of region {region}"))
            })?;
            if at == 0 {
                let heir = self.heir(&r).ok_or_else(|| {
                    CommandError::Conflict(format!(
                        "region {region} has no live, allocated backup: its contents are lost with node \
                         {node}; recovery declares it lost (`declare_region_lost`)"
                    ))
                })?;
                r.replicas.swap(0, heir);
                r.restoring = true;
                // Whoever restored the last promotion works on a map
                // this one replaced: the next claim fences it.
                r.restorer = None;
                r.replicas.remove(heir);
                let primary = r.primary();
                r.hand_out(primary);
            } else {
                r.replicas.remove(at);
            }
        }
        r.pending.retain(|&p| p != node);
        r.forget_generations();
        r.epoch = epoch;
        let size = r.size_bytes;
        self.regions.insert(region, r.clone());
        self.charge(node, -(size as i128));
        Ok(Outcome::Region(r))
    }

    /// Declares `region` lost (`Command::DeclareRegionLost`): its primary
    /// is on a dead node and no replica can take over, as eviction judges
    /// an heir (`heir`) once a join in progress is undone (a replica being
    /// caught up was not). The region leaves the clients' map at a new
    /// epoch and keeps its replicas as they were, so that an operator sees
    /// where it lived; a claim on its restore lapses (nobody restores it).
    ///
    /// A lost region stays lost until it is dropped, even if its primary's
    /// node registers again as it was (`revive_memnode` takes a sole copy
    /// back active): what it held may be stale or torn, and only an
    /// operator can judge that; dropping it is the way out.
    pub(super) fn declare_region_lost(&mut self, region: RegionId) -> Response {
        let r = self
            .regions
            .get(&region)
            .ok_or(CommandError::UnknownRegion { id: region })?;
        if let Some(why) = &r.lost {
            return Err(CommandError::Conflict(format!(
                "region {region} is lost already: {why}"
            )));
        }
        let primary = r.primary();
        let state = self.memnodes.get(&primary).map(|n| n.state);
        if state != Some(MemNodeState::Dead) {
            let state = state.map_or_else(|| "unknown".to_owned(), |s| s.to_string());
            return Err(CommandError::Conflict(format!(
                "region {region}'s primary node {primary} is {state}, not dead: the region is not lost"
            )));
        }
        let mut judged = r.clone();
        if let Some(j) = judged.catching_up.take().filter(|&j| j != primary) {
            judged.replicas.retain(|x| x.node != j);
        }
        if let Some(heir) = self.heir(&judged) {
            return Err(CommandError::Conflict(format!(
                "region {region} is not lost: node {} can take over from dead node {primary}; evict \
                 the dead primary instead",
                judged.replicas[heir].node
            )));
        }
        // A live backup a restore named may yet prove itself: not lost
        // until it has, or has been found not to.
        if let Some(x) = judged.replicas[1..].iter().find(|x| {
            judged.unverified_on(x.node)
                && self
                    .memnodes
                    .get(&x.node)
                    .is_some_and(|n| n.state != MemNodeState::Dead)
        }) {
            return Err(CommandError::Conflict(format!(
                "region {region} is not lost yet: its backup on node {} has not proven its replica since \
                 the restore",
                x.node
            )));
        }
        let nodes: Vec<MemNodeId> = r.replicas.iter().map(|x| x.node).collect();
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        r.lost = Some(format!(
            "its primary's node {primary} died with no live, allocated backup (replicas on nodes \
             {nodes:?}); lost at epoch {epoch}"
        ));
        r.restorer = None;
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    /// Removes `region` (`Command::DropRegion`) and frees its bytes on
    /// every node it was on, the replicas being made included, so that a
    /// dead node it named may register again. The region of an index is
    /// dropped only once it is lost, and the index record with it: the
    /// index's data was lost with the region, and a record naming no
    /// region would break every client that opens it. A live index's
    /// region is refused (nothing drops an index's data by mistake).
    pub(super) fn drop_region(&mut self, region: RegionId) -> Response {
        let r = self
            .regions
            .get(&region)
            .ok_or(CommandError::UnknownRegion { id: region })?;
        let indexes: Vec<String> = self
            .indexes
            .values()
            .filter(|x| x.region == region)
            .map(|x| x.name.clone())
            .collect();
        if r.lost.is_none() && !indexes.is_empty() {
            return Err(CommandError::Conflict(format!(
                "region {region} holds index {indexes:?}, which is not lost: the region of a live index is \
                 not dropped"
            )));
        }
        let Some(r) = self.regions.remove(&region) else {
            return Err(CommandError::UnknownRegion { id: region });
        };
        for x in r.replicas.iter().chain(&r.syncing) {
            self.charge(x.node, -(r.size_bytes as i128));
        }
        for name in &indexes {
            self.indexes.remove(name);
        }
        Ok(Outcome::Removed)
    }

    /// Moves `node`'s copied replica of `region` into the replicas
    /// clients write; the region leaves their map until recovery has
    /// caught the replica up (`region_restored`).
    /// A copy into `node`'s replica of `region` starts (`FenceCopy`): the
    /// region is stamped with a new epoch, which the copier waits for the
    /// nodes to fence at before it writes.
    pub(super) fn fence_copy(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        if !r.syncing.iter().any(|x| x.node == node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node} is not making a replica of region {region}"
            )));
        }
        if r.pending.contains(&node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node} has not allocated region {region} yet"
            )));
        }
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    pub(super) fn join_backup(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        let Some(i) = r.syncing.iter().position(|x| x.node == node) else {
            return Err(CommandError::Conflict(format!(
                "memory node {node} is not making a replica of region {region}"
            )));
        };
        if r.pending.contains(&node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node} has not allocated region {region} yet"
            )));
        }
        if r.being_restored() {
            return Err(CommandError::Conflict(format!(
                "region {region} is being restored; join once it is published"
            )));
        }
        let x = r.syncing.remove(i);
        r.replicas.push(x);
        // Filled: the replica is handed out again, now as one clients write.
        r.hand_out(node);
        r.catching_up = Some(node);
        r.restorer = None;
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    /// `client` claims the restore of `region` (see `Region::restorer`):
    /// granted while the region is being restored and no other live
    /// client holds the claim; a new epoch, which the claimant waits for
    /// every replica's node to fence at before it writes.
    pub(super) fn claim_restore(&mut self, region: RegionId, client: ClientId) -> Response {
        let r = self
            .regions
            .get(&region)
            .ok_or(CommandError::UnknownRegion { id: region })?;
        if !r.being_restored() {
            return Err(CommandError::Conflict(format!(
                "region {region} is not being restored"
            )));
        }
        if let Some(holder) = r.restorer.filter(|&h| h != client) {
            if self
                .clients
                .get(&holder)
                .is_some_and(|c| c.state == ClientState::Live)
            {
                return Err(CommandError::Conflict(format!(
                    "region {region} is being restored by client {holder}"
                )));
            }
        }
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        r.restorer = Some(client);
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    /// `client` gives back its claim on `region`'s restore
    /// (`Command::ReleaseRestore`).
    pub(super) fn release_restore(&mut self, region: RegionId, client: ClientId) -> Response {
        let r = self.region_mut(region)?;
        if r.restorer != Some(client) {
            return Err(CommandError::Conflict(format!(
                "client {client} holds no claim on the restore of region {region} (held by {:?})",
                r.restorer
            )));
        }
        r.restorer = None;
        Ok(Outcome::Region(r.clone()))
    }

    /// A dead node registers again (it restarted): taken in as joining,
    /// holding nothing, once recovery has evicted all its replicas.
    /// Whatever its memory kept is never served again: a new replica on
    /// it is copied afresh.
    ///
    /// Except where it is the only copy: a node declared dead while it was
    /// a region's primary with no live, allocated backup cannot be evicted
    /// (its contents would be lost), and nothing was promoted in its place,
    /// so what it holds is still the region. Such a node, declared dead
    /// falsely (a renewal late under load, a partition shorter than
    /// recovery), comes back as it was, active, its replicas kept;
    /// otherwise it would wait for an eviction that never comes, and the
    /// region with it.
    ///
    /// A node back with another image than its record's holds nothing of
    /// what it held (`Command::ReplaceImage`): it is never taken back as a
    /// sole copy, only as an empty node once its replicas are evicted.
    pub(super) fn revive_memnode(
        &mut self,
        id: MemNodeId,
        capacity_bytes: u64,
        image: Option<fabric::ImageId>,
    ) -> Response {
        let recorded = self.memnodes.get(&id).and_then(|n| n.image);
        let new_image = matches!((recorded, image), (Some(was), Some(now)) if was != now);
        let naming: Vec<&Region> = self.regions.values().filter(|r| r.on(id)).collect();
        if let Some(r) = naming.first() {
            // As eviction judges it: no heir to hand the region to.
            let sole_copy = |r: &Region| {
                !new_image && r.replicas.first().is_some_and(|p| p.node == id) && self.heir(r).is_none()
            };
            if !naming.iter().all(|r| sole_copy(r)) {
                return Err(CommandError::Conflict(format!(
                    "memory node {id} is dead and still named by region {}: recovery has not evicted it yet; retry",
                    r.id
                )));
            }
            let n = self
                .memnodes
                .get_mut(&id)
                .ok_or(CommandError::UnknownMemNode { id })?;
            n.state = MemNodeState::Active;
            n.image = n.image.or(image);
            return Ok(Outcome::MemNode(n.clone()));
        }
        let n = self
            .memnodes
            .get_mut(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        debug_assert_eq!(n.allocated_bytes, 0);
        n.state = MemNodeState::Joining;
        n.capacity_bytes = capacity_bytes;
        if image.is_some() {
            n.image = image;
        }
        Ok(Outcome::MemNode(n.clone()))
    }

    /// The position of the backup a dead primary of `r` hands over to: the
    /// first proven one, on a live node. Proven: allocated (not pending)
    /// and filled, its fill done at the generation it holds (not a joined
    /// replica still being caught up, which missed the writes of its copy).
    pub(super) fn heir(&self, r: &Region) -> Option<usize> {
        let live = |id: MemNodeId| {
            self.memnodes
                .get(&id)
                .is_some_and(|n| n.state != MemNodeState::Dead)
        };
        r.replicas[1..]
            .iter()
            .position(|x| {
                live(x.node)
                    && !r.pending.contains(&x.node)
                    && r.catching_up != Some(x.node)
                    && !r.unverified_on(x.node)
            })
            .map(|i| i + 1)
    }
}
