//! The DM fabric: the layer through which compute nodes touch disaggregated
//! memory.
//!
//! - [`GlobalAddr`] names a byte of a region; [`Replica`] picks which
//!   replica(s) of that region a verb goes to.
//! - [`Batch`] collects READ, WRITE, CAS, FAA and FLUSH verbs;
//!   [`Client::execute`] runs one batch in one round trip. Verbs to the same
//!   memory node run in order; there is no order across nodes.
//! - [`ClusterMap`] routes each verb to the memory node holding the replica.
//! - [`Transport`]s: [`LocalTransport`] (in-process), [`ShmTransport`]
//!   (a memory image mapped by several processes: the CXL model),
//!   [`TcpTransport`] (a pipelined client of the [`server`]).
//! - [`MemoryNode`] checks every verb (region, bounds, alignment, access key,
//!   epoch) and executes it.
//! - [`Faulty`] wraps any transport to crash the client, fly a WRITE, slow
//!   round trips or skew the clock.
//! - [`Stats`] counts round trips, verbs and bytes per client.
//! - [`rdma_control`]: the tcp control channel of rdma memory nodes (its
//!   messages and the node's answer to a hello), built without the `rdma`
//!   feature so that it is tested and fuzzed everywhere.

#![warn(missing_docs)]

#[cfg(not(target_endian = "little"))]
compile_error!("DM words are little-endian and atomics are native: only little-endian targets are supported");

mod addr;
pub mod admission;
mod batch;
mod client;
pub mod deadline;
mod error;
pub mod fault;
pub mod image;
pub use image::ImageId;
mod mandate;
mod map;
mod memnode;
mod memory;
pub mod metrics;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod rdma_control;
mod region_table;
pub mod server;
mod stats;
pub mod transport;
mod verb;
pub mod wire;
pub mod word;

pub use addr::{
    AccessKey, Epoch, GlobalAddr, NodeId, RegionId, Replica, ATOMIC_BYTES, OFFSET_BITS, OFFSET_MAX,
};
pub use admission::{AdmissionKey, Credential, FenceView, Gate, Holder, Refusal};
pub use batch::{Batch, On, VerbHandle};
pub use client::{Client, ReadError};
pub use error::{FabricError, NodeError, NODE_LAPSE_WAIT_MAX};
pub use fault::{FaultPlan, Faulty, FlyWrite};
pub use mandate::Mandate;
pub use map::{ClusterMap, MapError, NodeInfo, RegionInfo, ReplicaLoc, REPLICAS_MAX};
pub use memnode::{
    validate as validate_regions, Backing, MemoryNode, NodeDescriptor, RegionDescriptor, RegionSpec,
    CAPACITY_BYTES_MAX,
};
pub use memory::{prefetch_local, PageAccess, RawCell, RawRegion};
pub use stats::Stats;
pub use word::{le_word, le_word_at};

#[cfg(feature = "rdma")]
pub use transport::RdmaTransport;
pub use transport::{AnyTransport, BaseTransport, LocalTransport, ShmTransport, TcpTransport, Transport};
pub use verb::{
    Completion, Completions, Op, OpKind, Outcome, PayloadRange, VerbError, VerbKind, BATCH_BYTES_MAX,
    VERBS_PER_BATCH_MAX, VERB_BYTES_MAX,
};
