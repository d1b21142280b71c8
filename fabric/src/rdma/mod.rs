//! RDMA (cargo feature `rdma`): memory nodes whose regions a NIC serves
//! to clients' one-sided verbs, on `sideway`.
//!
//! - [`RdmaServer`] (`node`): a memory node's side: regions registered
//!   with the device, a queue pair per client, fencing by revocation.
//! - [`RdmaTransport`](crate::transport::RdmaTransport): the client side,
//!   one RC queue pair per node, a batch posted as one chained list.
//! - [`crate::rdma_control`]: the tcp control channel between them (queue
//!   pair set-up, region table, revocation), outside this feature.
//! - `verbs`: the device, memory regions and queue pairs; every `unsafe`
//!   of the rdma code.

pub(crate) use crate::rdma_control as control;
mod node;
pub(crate) mod verbs;

pub use node::{RdmaServer, CLIENTS_MAX, HELLO_WAIT_MAX, LEASE_POLL, REVOKE_ACK_WAIT_MAX};
pub use verbs::{DEVICE_ENV, GID_INDEX_ENV};

use thiserror::Error;

/// Why an rdma device, server or connection could not be set up.
#[derive(Debug, Error)]
pub enum RdmaError {
    /// The host has no (such) RDMA device.
    #[error("{0}")]
    NoDevice(String),
    /// The device refused an operation.
    #[error("RDMA device: {0}")]
    Device(String),
    /// A socket or thread of the control channel.
    #[error("{0}")]
    Io(String),
}

/// Whether this host has an RDMA device [`RdmaServer`] and the transport
/// can open (the one [`DEVICE_ENV`] names, if set).
pub fn device_present() -> bool {
    verbs::Device::open().is_ok()
}
