//! The control plane: a Raft-replicated record of the cluster's memory
//! nodes, regions and their replica roles, clients with their leases and
//! owner-id blocks, the map epoch, and an audit trail of operator actions.
//!
//! Layers, after openraft's split of the pure engine from its I/O:
//! - [`state`]: the replicated state machine as plain data and a pure,
//!   deterministic `apply` (no clock, no I/O: a command carries its time);
//! - [`liveness`]: the leader's lease judge, pure (time is an argument);
//! - [`raft`]: the openraft type configuration;
//! - [`store`]: the Raft log, vote and state machine persisted in sled;
//! - [`network`]: Raft RPCs between members over HTTP/JSON;
//! - [`api`]: the operators' and clients' HTTP/JSON API and its client;
//! - [`member`]: one member process's parts, started and stopped together;
//! - [`metrics`]: what a member exports (Raft state, latencies, tables);
//! - [`config`]: a member's settings (TOML);
//! - [`tls`]: HTTPS for the API and Raft traffic (rustls).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod api;
mod clock;
pub mod config;
pub mod listener;
pub mod liveness;
pub mod member;
pub mod metrics;
pub mod network;
pub mod raft;
mod reply;
pub mod state;
pub mod store;
pub mod tls;
