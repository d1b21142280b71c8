//! What can go wrong between a process and its cluster.

use control_plane::api::ClientError;

/// Why a cluster operation failed. Each names its cause; none leaves
/// anything half made in the cluster (an index whose creation failed is
/// formatted again by whoever opens it next).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No member of the control plane answered.
    #[error("no control-plane member answered ({tried}): {last}")]
    Unreachable {
        /// The members tried.
        tried: String,
        /// The last failure.
        last: String,
    },
    /// The control plane refused a request (bad token, unknown name,
    /// impossible placement, ...).
    #[error("{what}: {source}")]
    Refused {
        /// What was asked.
        what: String,
        /// The refusal, with its status and the member's message.
        #[source]
        source: ClientError,
    },
    /// No index has this name (and creating it was not asked for).
    #[error("no index named {0:?} (ctl index list shows them)")]
    UnknownIndex(String),
    /// An index exists under this name with another kind or variant.
    #[error("index {name:?} is a {found}, not a {asked}")]
    WrongKind {
        /// The name.
        name: String,
        /// What it is.
        found: String,
        /// What was asked for.
        asked: String,
    },
    /// Waited too long for something the cluster should have done.
    #[error("timed out after {after}: {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: String,
    },
    /// All owner ids of this process are in use by open handles.
    #[error("all {0} owner ids of this process are in use by open index handles: drop one, or connect with more (ClusterOptions::owner_ids)")]
    OwnerIdsExhausted(u16),
    /// This process's lease was lost: it issues no verb any more.
    #[error("this process's lease was lost ({0}); connect again")]
    LeaseLost(String),
    /// A promotion's or a catch-up's restore was asked of a region that
    /// is not being restored (published already, or never promoted).
    #[error("region {0} is not being restored")]
    NotRestoring(fabric::RegionId),
    /// The map the control plane serves does not route what is needed.
    #[error("cluster map: {0}")]
    Map(String),
    /// The memory nodes could not be reached.
    #[error("cannot reach the memory nodes: {0}")]
    Fabric(#[from] fabric::FabricError),
    /// A memory image could not be attached.
    #[error("cannot attach a memory image: {0}")]
    Node(#[from] fabric::NodeError),
    /// The rTX layer failed.
    #[error(transparent)]
    Tx(#[from] txn::TxError),
    /// The index failed.
    #[error(transparent)]
    Index(#[from] index::IndexError),
    /// A thread or runtime could not be started.
    #[error("{what}: {source}")]
    Io {
        /// What was started.
        what: String,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
}

impl ClusterError {
    /// Whether a memory node refused a batch whole, before any verb, because
    /// its own lease may have lapsed (a renewal came late): nothing ran,
    /// and the same step may simply be taken again.
    pub fn node_lease_lapsed(&self) -> bool {
        use fabric::FabricError::NodeLeaseLapsed;
        matches!(
            self,
            ClusterError::Fabric(NodeLeaseLapsed { .. })
                | ClusterError::Tx(txn::TxError::Fabric(NodeLeaseLapsed { .. }))
                | ClusterError::Index(index::IndexError::Fabric(NodeLeaseLapsed { .. }))
                | ClusterError::Index(index::IndexError::Tx(txn::TxError::Fabric(
                    NodeLeaseLapsed { .. }
                )))
        )
    }

    /// Whether the control plane refused the request with HTTP `status`
    /// (404: it knows no such thing; 409: the state forbids it now).
    pub fn refused_with(&self, status: u16) -> bool {
        matches!(self, ClusterError::Refused { source, .. } if source.status().is_some_and(|s| s.as_u16() == status))
    }

    /// The fabric error under this one, if there is one.
    pub fn fabric_cause(&self) -> Option<&fabric::FabricError> {
        match self {
            ClusterError::Fabric(f) | ClusterError::Tx(txn::TxError::Fabric(f)) => Some(f),
            ClusterError::Index(e) => e.fabric_cause(),
            _ => None,
        }
    }
}
