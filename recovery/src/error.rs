//! Why a recovery step failed. A failed step is tried again on the next
//! pass: nothing it did half-way is lost, every step being idempotent.

use control_plane::state::MemNodeId;
use fabric::RegionId;

/// A recovery step that failed.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// Talking to the control plane or the memory nodes failed.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// A verb batch failed.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// A memory node refused a verb of the copy.
    #[error("memory node refused a verb copying region {region}: {reason}")]
    Verb {
        /// The region being copied.
        region: RegionId,
        /// The node's answer.
        reason: String,
    },
    /// This coordinator could not prove that its member still leads, so
    /// it wrote nothing: a deposed leader's coordinator must not copy.
    #[error("not writing region {region}: this coordinator cannot prove its member still leads")]
    NotLeading {
        /// The region it was about to write.
        region: RegionId,
    },
    /// The map does not route the copy.
    #[error("region {region} has no replica being made on node {node} in the map")]
    NotSyncing {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
    },
}
