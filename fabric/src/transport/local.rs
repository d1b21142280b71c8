//! The in-process transport: memory nodes in this process's memory.

use std::sync::Arc;

use crate::addr::{Epoch, NodeId};
use crate::error::{FabricError, NodeError};
use crate::map::ClusterMap;
use crate::memnode::{execute_inline, MemoryNode, RegionSpec};
use crate::transport::Transport;
use crate::verb::{Completions, Op};

/// Memory nodes that live in this process; verbs execute on the calling thread.
#[derive(Clone, Debug)]
pub struct LocalTransport {
    nodes: Arc<[Arc<MemoryNode>]>,
}

impl LocalTransport {
    /// A transport over existing nodes.
    pub fn new(nodes: Vec<Arc<MemoryNode>>) -> Self {
        LocalTransport { nodes: nodes.into() }
    }

    /// Creates `replicas` anonymous nodes (ids 1..=replicas), each holding
    /// every region of `regions`, and the map that makes node 1 the primary.
    /// The quickest way to a working fabric for tests and benchmarks.
    pub fn cluster(replicas: u16, regions: &[RegionSpec]) -> Result<(Self, ClusterMap), NodeError> {
        let mut nodes = Vec::new();
        let mut descriptors = Vec::new();
        for id in 1..=replicas {
            let node = Arc::new(MemoryNode::anonymous(id, regions)?);
            descriptors.push((node.descriptor(), format!("local:{id}")));
            nodes.push(node);
        }
        let map = ClusterMap::from_descriptors(1, &descriptors).map_err(|e| NodeError::Regions(e.0))?;
        Ok((LocalTransport::new(nodes), map))
    }

    /// The node with this id.
    pub fn node(&self, id: NodeId) -> Option<&Arc<MemoryNode>> {
        self.nodes.iter().find(|n| n.id() == id)
    }
}

impl LocalTransport {
    /// Executes a batch on the calling thread.
    pub(crate) fn execute_now(
        &self,
        epoch: Epoch,
        ops: &[Op],
        payload: &[u8],
        out: &mut Completions,
    ) -> Result<(), FabricError> {
        execute_inline(|id| self.node(id).map(|n| &**n), epoch, ops, payload, out)
    }
}

impl Transport for LocalTransport {
    async fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> Result<(), FabricError> {
        self.execute_now(epoch, ops, payload, out)
    }
}
