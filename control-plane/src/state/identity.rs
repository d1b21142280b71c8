//! Replica identity (design.md §1b): a node back with another image
//! (`replace_image`, in `mod.rs` beside registration) and a replica whose
//! node does not hold it at the generation the map names.

use super::{ControlState, Outcome, Response};
use crate::state::{CommandError, Epoch, MemNodeId, RegionId, ReplicaProof};

impl ControlState {
    /// `node` shows its image holds `region` at the generation the map
    /// names, after a restore named it (`Command::ReplicaProven`).
    ///
    /// Holders that prove the same generation may still differ: one that
    /// died after the snapshot and came back holds what it held then, one
    /// that stayed on holds everything since. The one that followed the old
    /// cluster further is current; a holder behind another's is dropped as
    /// an unproven one is (backups first, so that a current one is the
    /// heir of a stale primary).
    pub(super) fn replica_proven(
        &mut self,
        region: RegionId,
        node: MemNodeId,
        generation: u64,
        followed_epoch: Epoch,
    ) -> Response {
        if !self.memnodes.contains_key(&node) {
            return Err(CommandError::UnknownMemNode { id: node });
        }
        let r = self.held_replica(region, node)?;
        if !r.unverified_on(node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node}'s replica of region {region} awaits no proof"
            )));
        }
        let want = r.generation_of(node);
        if generation != want {
            return Err(CommandError::Conflict(format!(
                "memory node {node} holds region {region} at generation {generation}, not {want}: unproven"
            )));
        }
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        r.unverified.retain(|&n| n != node);
        r.proofs.retain(|p| p.node != node);
        r.proofs.push(ReplicaProof { node, followed_epoch });
        r.epoch = epoch;
        let ahead = r.proofs.iter().map(|p| p.followed_epoch).max().unwrap_or(0);
        let primary = r.primary();
        let mut stale: Vec<MemNodeId> = r
            .proofs
            .iter()
            .filter(|p| p.followed_epoch != 0 && p.followed_epoch < ahead && r.on(p.node))
            .map(|p| p.node)
            .collect();
        stale.sort_by_key(|&n| n == primary);
        let mut out = Outcome::Region(r.clone());
        for n in stale {
            tracing::warn!(
                region,
                node = n,
                ahead,
                "a replica proven after the restore is behind another's: stale, dropped"
            );
            out = self.drop_replica(region, n)?;
        }
        Ok(out)
    }

    /// `node` reports that its image holds `region` at generation `found`,
    /// not the one the map names (`Command::ReplicaUnproven`): its replica
    /// is dropped as a dead node's would be, and recovery refills it. A
    /// primary with no heir leaves nothing to serve: the region is lost.
    pub(super) fn replica_unproven(&mut self, region: RegionId, node: MemNodeId, found: u64) -> Response {
        if !self.memnodes.contains_key(&node) {
            return Err(CommandError::UnknownMemNode { id: node });
        }
        let r = self.held_replica(region, node)?;
        let want = r.generation_of(node);
        if found == want && want != 0 {
            return Err(CommandError::Conflict(format!(
                "memory node {node} holds region {region} at generation {want}, as the map names"
            )));
        }
        let sole = r.primary() == node && self.heir(r).is_none();
        // A backup a restore named may yet prove itself and take over: the
        // report is refused until it has (the node reports again with the
        // map that brings the proof).
        let live = |id: MemNodeId| {
            self.memnodes
                .get(&id)
                .is_some_and(|n| n.state != crate::state::MemNodeState::Dead)
        };
        if sole
            && r.replicas[1..]
                .iter()
                .any(|x| r.unverified_on(x.node) && live(x.node))
        {
            return Err(CommandError::Conflict(format!(
                "region {region}'s backups have not proven their replicas since the restore: the primary's \
                 replica on node {node} is dropped once one can take over"
            )));
        }
        if sole {
            let epoch = self.next_epoch();
            let r = self.region_mut(region)?;
            r.lost = Some(format!(
                "its only replica's node {node} holds it at generation {found}, not {want} (an image restored \
                 from an old copy, or one that missed a hand-out); lost at epoch {epoch}"
            ));
            r.epoch = epoch;
            r.restorer = None;
            return Ok(Outcome::Region(r.clone()));
        }
        self.drop_replica(region, node)
    }
}
