//! Replica identity (design.md §1b): a node back with another image
//! (`replace_image`, in `mod.rs` beside registration) and a replica whose
//! node does not hold it at the generation the map names.

use super::{ControlState, Outcome, Response};
use crate::state::{CommandError, MemNodeId, RegionId};

impl ControlState {
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
