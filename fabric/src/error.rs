//! Errors of the fabric: a batch that could not run as a whole.
//!
//! A verb that a memory node refused is not an error here: it is an error
//! completion ([`VerbError`](crate::VerbError)) inside an otherwise executed
//! batch.

use std::path::PathBuf;

use thiserror::Error;

use crate::addr::{Epoch, NodeId, RegionId, Replica};
use crate::image::HeaderError;

/// How long a caller may keep offering batches to a node that refuses them
/// with [`FabricError::NodeLeaseLapsed`] before it takes the refusal as an
/// error: 3.2 s, past a control-plane election (a new leader gives every
/// node a full lease before it judges) and past the node's replacement.
pub const NODE_LAPSE_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(3200);

/// Why a batch could not be executed (or only partly: see each variant).
#[derive(Debug, Error)]
pub enum FabricError {
    /// A memory node's epoch is newer than the client's map: the client must
    /// refresh its map. Verbs to other nodes in the same batch may have run.
    #[error("stale map: client epoch {client_epoch}, memory node {node} is at epoch {node_epoch}")]
    StaleEpoch {
        /// The node that refused.
        node: NodeId,
        /// The epoch the client sent.
        client_epoch: Epoch,
        /// The node's epoch.
        node_epoch: Epoch,
    },
    /// A memory node refused the whole batch, before any verb, because its
    /// own lease with the control plane may have lapsed (it was paused or
    /// cut off): it may have been declared dead and its regions promoted
    /// elsewhere. Verbs to other nodes in the same batch may have run. The
    /// node serves again once its lease is renewed, or the map moves on
    /// without it.
    #[error("memory node {node} refused the batch: its lease may have lapsed")]
    NodeLeaseLapsed {
        /// The node that refused.
        node: NodeId,
    },
    /// The process's lease is not certain (it could not renew in time, or
    /// the control plane refused it): it issues no verb, since its owner
    /// ids may already be another's.
    #[error("this process's lease is not certain (not renewed in time, or lost): no verb was issued")]
    LeaseUncertain,
    /// A batch pinned to a map ([`crate::Client::execute_pinned`]) found a
    /// newer one to route by: no verb was issued, since the replicas it
    /// would reach are not those its earlier batches reached.
    #[error("the map moved from epoch {pinned} to {now} under a pinned batch: no verb was issued")]
    MapMoved {
        /// The epoch the batch was pinned to.
        pinned: Epoch,
        /// The epoch of the map the client routes by now.
        now: Epoch,
    },
    /// The client's map has no such region.
    #[error("region {region} is not in the cluster map")]
    UnknownRegion {
        /// The region asked for.
        region: RegionId,
    },
    /// The region has no replica at that position.
    #[error("region {region} has no replica {replica:?}")]
    NoSuchReplica {
        /// The region asked for.
        region: RegionId,
        /// The target asked for.
        replica: Replica,
    },
    /// The transport cannot reach that node.
    #[error("memory node {node} is not reachable through this transport")]
    UnknownNode {
        /// The node.
        node: NodeId,
    },
    /// More verbs, or more bytes, than one batch may carry.
    #[error("batch too large: {what}")]
    BatchTooLarge {
        /// Which limit, with numbers.
        what: String,
    },
    /// Fault injection crashed this client: it issues no verb ever again.
    #[error("client crashed by fault injection ({reason})")]
    Crashed {
        /// The crash point or verb count that fired.
        reason: String,
    },
    /// The connection to a memory node broke; outstanding verbs on it have
    /// unknown outcome.
    #[error("connection to memory node {node} lost: {reason}")]
    Disconnected {
        /// The node.
        node: NodeId,
        /// What happened.
        reason: String,
    },
    /// A memory node refused this client's connection or batch (no, a
    /// forged, or a fenced credential; a connection limit), and closed it;
    /// no verb of the refused batch ran.
    #[error("memory node {node} refused this client: {reason}")]
    Refused {
        /// The node.
        node: NodeId,
        /// The node's reason.
        reason: String,
        /// Whether the same credential may be admitted later (the node is
        /// not ready yet, or full): a transport tries again, as for a node
        /// it cannot reach.
        transient: bool,
    },
    /// A memory node answered something this client cannot decode.
    #[error("protocol error from memory node {node}: {reason}")]
    Protocol {
        /// The node.
        node: NodeId,
        /// What was wrong.
        reason: String,
    },
    /// This process could not map a region's pages in
    /// ([`crate::Client::populate`]).
    #[error("cannot map region {region} of memory node {node} in: {reason}")]
    Populate {
        /// The node.
        node: NodeId,
        /// The region.
        region: RegionId,
        /// What the host said.
        reason: String,
    },
}

impl FabricError {
    /// Whether the batch was refused before any of its verbs was sent (the
    /// process's lease or map refused it, or it was too large): nothing of
    /// it happened anywhere. Every other error may leave a batch run in
    /// part.
    pub fn sent_nothing(&self) -> bool {
        matches!(
            self,
            FabricError::LeaseUncertain
                | FabricError::MapMoved { .. }
                | FabricError::UnknownRegion { .. }
                | FabricError::NoSuchReplica { .. }
                | FabricError::BatchTooLarge { .. }
        )
    }
}

/// Why a memory node could not be created, opened or attached.
#[derive(Debug, Error)]
pub enum NodeError {
    /// File or mapping failure.
    #[error("{context} {path}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Anonymous mapping failure.
    #[error("cannot map {bytes} bytes of memory: {0}", bytes = .1)]
    Map(std::io::Error, u64),
    /// The pages of an image could not be populated (the host is out of
    /// memory, or its kernel predates `MADV_POPULATE_WRITE`, Linux 5.14).
    #[error("cannot populate {bytes} bytes of memory: {0}", bytes = .1)]
    Populate(std::io::Error, u64),
    /// The file is not a usable memory image.
    #[error("{path}: {source}")]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: HeaderError,
    },
    /// The requested regions are not acceptable.
    #[error("invalid regions: {0}")]
    Regions(String),
}
