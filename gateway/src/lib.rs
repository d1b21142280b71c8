//! A Redis-protocol gateway: Redis clients (redis-cli, redis-benchmark, any
//! Redis library) on a crash-tolerant kintsugi index.
//!
//! - [`resp`]: the wire (RESP2 and RESP3 through `redis-protocol`, inline
//!   requests, the request limits), [`command`]: the command table and
//!   parsing, with Redis's error texts.
//! - [`bucket`]: how Redis keys and values are laid out in DM (a bucket
//!   object per 64-bit key hash, size classes, forwards), one definition.
//! - [`keyspace`]: the operations, each one rTX over buckets on an rtx
//!   index handle (`cluster::Tree` or `cluster::Table`).
//! - [`server`]: the listener, the keyspace pool, connections,
//!   pipelining, AUTH ([`auth`]: passwords are cluster tokens, checked with
//!   the control plane) and INFO ([`info`]).
//! - [`metrics`]: what `kintsugi serve --metrics-listen` exports.
//!
//! `docs/gateway.md` describes the design and its limits.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod bucket;
pub mod command;
pub mod glob;
pub mod info;
pub mod keyspace;
pub mod metrics;
pub mod resp;
pub mod server;

pub use auth::TokenCheck;
pub use keyspace::{Condition, Handle, Keyspace, KeyspaceError};
pub use server::{Gateway, GatewayControl, Settings};
