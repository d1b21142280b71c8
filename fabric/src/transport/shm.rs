//! The shared-memory transport: memory images mapped by several processes.
//!
//! This is the CXL-3 model. A memory node process creates its image under
//! `/dev/shm`; clients map the same file and execute verbs with real
//! cross-process atomics. Killing a client leaves exactly what it had written.

use std::path::PathBuf;
use std::sync::Arc;

use crate::addr::{Epoch, NodeId};
use crate::error::{FabricError, NodeError};
use crate::map::{ClusterMap, NodeInfo};
use crate::memnode::{execute_inline, MemoryNode};
use crate::transport::later::Later;
use crate::transport::Transport;
use crate::verb::{Completions, Op};

/// Attached memory images; verbs execute on the calling thread.
#[derive(Clone, Debug)]
pub struct ShmTransport {
    nodes: Arc<[MemoryNode]>,
    /// Images of nodes that joined the map after the transport was made
    /// ([`ShmTransport::learn`]), appended once and never removed: the
    /// verb path finds a node without a lock.
    later: Arc<Later<MemoryNode>>,
}

impl ShmTransport {
    /// Maps each image and builds the map they describe: a region found in
    /// several images is replicated on them, the first image holding its
    /// primary. The map's epoch is the highest of the nodes' epochs.
    pub fn attach(paths: &[PathBuf]) -> Result<(Self, ClusterMap), NodeError> {
        let mut nodes = Vec::new();
        let mut descriptors = Vec::new();
        for p in paths {
            let node = MemoryNode::attach(p)?;
            descriptors.push((node.descriptor(), p.display().to_string()));
            nodes.push(node);
        }
        let epoch = descriptors.iter().map(|(d, _)| d.epoch).max().unwrap_or(1);
        let map = ClusterMap::from_descriptors(epoch, &descriptors).map_err(|e| NodeError::Regions(e.0))?;
        Ok((
            ShmTransport {
                nodes: nodes.into(),
                later: Arc::new(Later::new()),
            },
            map,
        ))
    }

    /// Maps the image of every node of `map` (each node's endpoint is its
    /// image's path) and checks that each image is the node the map says
    /// it is: a process that routes by the control plane's map.
    pub fn attach_map(map: &ClusterMap) -> Result<Self, NodeError> {
        let mut nodes = Vec::new();
        for n in map.nodes() {
            // A node that died may have taken its image with it; the map
            // routes around it once recovery has moved its replicas.
            let node = match MemoryNode::attach(&PathBuf::from(&n.endpoint)) {
                Ok(node) => node,
                Err(e) => {
                    tracing::warn!(node = n.id, endpoint = %n.endpoint, error = %e, "cannot map this node's image; skipped");
                    continue;
                }
            };
            nodes.push(is_node(node, n)?);
        }
        Ok(ShmTransport {
            nodes: nodes.into(),
            later: Arc::new(Later::new()),
        })
    }

    /// Maps the image of every node of `map` not attached yet (a node that
    /// joined the cluster after this transport was made; one whose image
    /// cannot be mapped is skipped). Returns how many were attached.
    pub fn learn(&self, map: &ClusterMap) -> Result<usize, FabricError> {
        self.later.learn(
            map,
            |id| self.node(id).is_some(),
            MemoryNode::id,
            |n| is_node(MemoryNode::attach(&PathBuf::from(&n.endpoint))?, n),
        )
    }

    /// Maps every page of every attached image into this process now
    /// ([`MemoryNode::populate`]): a client that does this once no longer
    /// takes a page fault on its first touch of each page. Pages the node
    /// has not populated are allocated too.
    pub fn populate(&self) -> Result<(), NodeError> {
        self.nodes.iter().try_for_each(MemoryNode::populate)
    }

    /// The attached node with this id.
    pub fn node(&self, id: NodeId) -> Option<&MemoryNode> {
        self.nodes
            .iter()
            .find(|n| n.id() == id)
            .or_else(|| self.later.iter().find(|n| n.id() == id))
    }
}

impl ShmTransport {
    /// Executes a batch on the calling thread.
    pub(crate) fn execute_now(
        &self,
        epoch: Epoch,
        ops: &[Op],
        payload: &[u8],
        out: &mut Completions,
    ) -> Result<(), FabricError> {
        execute_inline(|id| self.node(id), epoch, ops, payload, out)
    }
}

/// `node`, if its image is the node `n` of the map says it is.
fn is_node(node: MemoryNode, n: &NodeInfo) -> Result<MemoryNode, NodeError> {
    if node.id() != n.id {
        return Err(NodeError::Regions(format!(
            "{} is the image of memory node {}, the map says {}",
            n.endpoint,
            node.id(),
            n.id
        )));
    }
    Ok(node)
}

impl Transport for ShmTransport {
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
