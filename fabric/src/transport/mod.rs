//! Transports: how a batch of routed ops reaches memory nodes.
//!
//! One trait, [`Transport`], and one enum, [`AnyTransport`], that clients hold
//! so that the layers above (txn, index) are not generic over the transport.
//! A transport gets the whole batch at once (a multi-node batch is posted to
//! every node before waiting for any, as an RDMA client rings several
//! doorbells and then polls its completion queue) and must fill exactly one
//! completion per op, in op order.

mod later;
mod local;
#[cfg(feature = "rdma")]
mod rdma;
mod shm;
mod tcp;

use std::future::Future;
use std::sync::Arc;

pub use later::NODES_JOINED_MAX;
pub use local::LocalTransport;
#[cfg(feature = "rdma")]
pub use rdma::{RdmaTransport, COMPLETION_WAIT_MAX};
pub use shm::ShmTransport;
pub use tcp::{
    TcpOptions, TcpTransport, CONNECT_TIMEOUT, RECONNECT_ATTEMPTS_MAX, RECONNECT_BACKOFF_MAX,
    RECONNECT_BACKOFF_MIN, REQUEST_DEADLINE, TLS_SCHEME,
};

use crate::addr::{Epoch, NodeId, RegionId};
use crate::error::FabricError;
use crate::fault::{FaultPlan, Faulty};
use crate::memnode::MemoryNode;
use crate::memory::PageAccess;
use crate::verb::{Completions, Op};

/// Executes batches of routed ops.
///
/// Contract: on `Ok`, `out` holds one completion per op, in op order; verbs
/// to the same node ran in op order. On `Err`, `out` is unspecified and verbs
/// may or may not have run (a stale epoch is refused per node, before any of
/// that node's verbs run).
pub trait Transport: Send + Sync {
    /// Executes `ops` as one round trip. `payload` holds WRITE data.
    fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> impl Future<Output = Result<(), FabricError>> + Send + 'a;

    /// A named point in protocol code: fault injection may crash the client
    /// here. Plain transports never do.
    fn crash_point(&self, _name: &str) -> Result<(), FabricError> {
        Ok(())
    }

    /// Milliseconds to add to this client's clock (clock-skew injection).
    fn clock_skew_ms(&self) -> i64 {
        0
    }

    /// Breaks this client's connections to memory nodes, as a network that
    /// drops them would (fault injection). Transports without connections
    /// (in-process, shared memory) have nothing to break.
    fn drop_connections(&self) {}
}

/// A real transport, without fault injection.
#[derive(Clone, Debug)]
pub enum BaseTransport {
    /// In-process memory nodes.
    Local(LocalTransport),
    /// Memory images shared by processes on one host.
    Shm(ShmTransport),
    /// A tcp connection per memory node.
    Tcp(TcpTransport),
    /// An RDMA queue pair per memory node.
    #[cfg(feature = "rdma")]
    Rdma(RdmaTransport),
}

impl Transport for BaseTransport {
    async fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> Result<(), FabricError> {
        match self {
            BaseTransport::Local(t) => t.execute(epoch, ops, payload, out).await,
            BaseTransport::Shm(t) => t.execute(epoch, ops, payload, out).await,
            BaseTransport::Tcp(t) => t.execute(epoch, ops, payload, out).await,
            #[cfg(feature = "rdma")]
            BaseTransport::Rdma(t) => t.execute(epoch, ops, payload, out).await,
        }
    }

    fn drop_connections(&self) {
        match self {
            BaseTransport::Tcp(t) => t.drop_all(),
            #[cfg(feature = "rdma")]
            BaseTransport::Rdma(t) => t.drop_all(),
            BaseTransport::Local(_) | BaseTransport::Shm(_) => {}
        }
    }
}

/// The transport a [`Client`](crate::Client) holds, so that the layers
/// above (txn, index) are not generic over it. Cheap to clone: clones share
/// connections, mappings and fault state.
#[derive(Clone, Debug)]
pub enum AnyTransport {
    /// A real transport.
    Base(BaseTransport),
    /// A real transport with faults injected.
    Faulty(Arc<Faulty<BaseTransport>>),
}

impl AnyTransport {
    /// The same real transport with faults injected according to `plan`
    /// (replacing any plan already injected). Returns the handle through
    /// which a test inspects the faults.
    pub fn with_faults(self, plan: FaultPlan) -> (AnyTransport, Arc<Faulty<BaseTransport>>) {
        let base = match self {
            AnyTransport::Base(b) => b,
            AnyTransport::Faulty(f) => f.inner().clone(),
        };
        let f = Arc::new(Faulty::new(base, plan));
        (AnyTransport::Faulty(f.clone()), f)
    }
}

impl AnyTransport {
    /// Takes on the nodes of `map` this transport has not reached yet
    /// (they joined the cluster after it was made): `shm` maps their
    /// images now, `tcp` connects at their first batch. Called by a client
    /// whenever its map changes. Returns how many nodes were taken on.
    pub fn learn(&self, map: &crate::map::ClusterMap) -> Result<usize, FabricError> {
        let base = match self {
            AnyTransport::Base(b) => b,
            AnyTransport::Faulty(f) => f.inner(),
        };
        match base {
            // In-process nodes are all there from the start.
            BaseTransport::Local(_) => Ok(0),
            BaseTransport::Shm(t) => t.learn(map),
            BaseTransport::Tcp(t) => t.learn(map),
            #[cfg(feature = "rdma")]
            BaseTransport::Rdma(t) => t.learn(map),
        }
    }

    /// Clients under `mandate` use this transport: `tcp` stops reconnecting
    /// to a node once the mandate's map stops routing to it
    /// ([`TcpTransport::follow`]). Local and shared-memory nodes are not
    /// reconnected to.
    pub fn follow(&self, mandate: &std::sync::Arc<crate::mandate::Mandate>) {
        let base = match self {
            AnyTransport::Base(b) => b,
            AnyTransport::Faulty(f) => f.inner(),
        };
        match base {
            BaseTransport::Tcp(t) => t.follow(mandate),
            #[cfg(feature = "rdma")]
            BaseTransport::Rdma(t) => t.follow(mandate),
            BaseTransport::Local(_) | BaseTransport::Shm(_) => {}
        }
    }

    /// `node`'s memory when this process maps it (local, shm).
    fn mapped(&self, node: NodeId) -> Option<&MemoryNode> {
        let base = match self {
            AnyTransport::Base(b) => b,
            AnyTransport::Faulty(f) => f.inner(),
        };
        match base {
            BaseTransport::Local(t) => t.node(node).map(|n| &**n),
            BaseTransport::Shm(t) => t.node(node),
            BaseTransport::Tcp(_) => None,
            #[cfg(feature = "rdma")]
            BaseTransport::Rdma(_) => None,
        }
    }

    /// Raises the epoch of `node`'s memory to `epoch` where this process
    /// maps it (local, shm), and returns the epoch now in force there;
    /// `None` where it does not (tcp). For a node declared dead: its own
    /// process raises nothing any more, and a client of this host still
    /// routing by an older map would read and write its image directly.
    /// Fenced, it refuses them with `StaleEpoch` (a tcp node's clients
    /// reach it through its process, which is gone).
    pub fn fence_mapped(&self, node: NodeId, epoch: Epoch) -> Option<Epoch> {
        self.mapped(node).map(|n| n.advance_epoch(epoch))
    }

    /// Prefetches `[offset, offset + len)` of `region` on `node` when this
    /// process maps that memory (see [`crate::Client::prefetch`]).
    pub(crate) fn prefetch(&self, node: NodeId, region: RegionId, offset: u64, len: u64) {
        if let Some(n) = self.mapped(node) {
            n.prefetch_range(region, offset, len);
        }
    }

    /// Maps every page of `region` on `node` into this process when it maps
    /// that memory (see [`crate::Client::populate`]); blocks for as long as
    /// that takes.
    pub(crate) fn populate(
        &self,
        node: NodeId,
        region: RegionId,
        access: PageAccess,
    ) -> Result<(), FabricError> {
        let Some(n) = self.mapped(node) else {
            return Ok(());
        };
        n.populate_region(region, access)
            .map_err(|e| FabricError::Populate {
                node,
                region,
                reason: e.to_string(),
            })
    }

    /// Executes the batch at once on the calling thread if this transport
    /// completes inline (local, shm without faults); `None` otherwise.
    /// The verb path of the inline transports thus skips the state machine
    /// of the async path, which has room for the largest transport's future.
    pub(crate) fn execute_now(
        &self,
        epoch: Epoch,
        ops: &[Op],
        payload: &[u8],
        out: &mut Completions,
    ) -> Option<Result<(), FabricError>> {
        match self {
            AnyTransport::Base(BaseTransport::Local(t)) => Some(t.execute_now(epoch, ops, payload, out)),
            AnyTransport::Base(BaseTransport::Shm(t)) => Some(t.execute_now(epoch, ops, payload, out)),
            _ => None,
        }
    }
}

impl From<LocalTransport> for AnyTransport {
    fn from(t: LocalTransport) -> Self {
        AnyTransport::Base(BaseTransport::Local(t))
    }
}

impl From<ShmTransport> for AnyTransport {
    fn from(t: ShmTransport) -> Self {
        AnyTransport::Base(BaseTransport::Shm(t))
    }
}

impl From<TcpTransport> for AnyTransport {
    fn from(t: TcpTransport) -> Self {
        AnyTransport::Base(BaseTransport::Tcp(t))
    }
}

#[cfg(feature = "rdma")]
impl From<RdmaTransport> for AnyTransport {
    fn from(t: RdmaTransport) -> Self {
        AnyTransport::Base(BaseTransport::Rdma(t))
    }
}

impl Transport for AnyTransport {
    async fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> Result<(), FabricError> {
        match self {
            AnyTransport::Base(t) => t.execute(epoch, ops, payload, out).await,
            AnyTransport::Faulty(t) => t.execute(epoch, ops, payload, out).await,
        }
    }

    fn crash_point(&self, name: &str) -> Result<(), FabricError> {
        match self {
            AnyTransport::Base(_) => Ok(()),
            AnyTransport::Faulty(t) => t.crash_point(name),
        }
    }

    fn clock_skew_ms(&self) -> i64 {
        match self {
            AnyTransport::Base(_) => 0,
            AnyTransport::Faulty(t) => t.clock_skew_ms(),
        }
    }
}
