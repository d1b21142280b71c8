//! openraft's type configuration for the control plane.

use crate::state::{Request, Response};

/// A Raft member's id (not a memory node's id: those live in the state).
pub type MemberId = u64;

openraft::declare_raft_types!(
    /// The control plane's Raft types: log entries carry a [`Request`], applying
    /// one yields a [`Response`].
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = MemberId,
        Node = openraft::BasicNode,
        SnapshotData = std::io::Cursor<Vec<u8>>,
);

/// The Raft handle of a member.
pub type Raft = openraft::Raft<TypeConfig>;
