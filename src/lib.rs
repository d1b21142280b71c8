//! Kintsugi: crash-tolerant indexes on disaggregated memory.
//!
//! This crate is the facade: it re-exports every layer, so that a service
//! can depend on `kintsugi` alone, and it hosts the `kintsugi` binary. Each
//! layer lives in its own crate (see `ARCHITECTURE.md`):
//!
//! - [`fabric`]: global addresses, one-sided verbs, batches, memory nodes,
//!   transports (local, shm, tcp; rdma with `--features rdma`), fault injection, per-client counters.
//! - [`txn`]: repairable transactions (rTX) over the fabric.
//! - [`index`]: the Sherman-like B+tree and RACE hashing, each `optimal`
//!   or `rtx`.
//! - [`control_plane`]: the Raft-replicated record of memory nodes,
//!   regions, clients, leases and owner ids, its API and its client.
//! - [`workload`]: seeded YCSB op streams and the client loop that runs
//!   them on an index.
//! - [`harness`]: the process launcher, the lines processes exchange, the
//!   memory set-up and transport enum every tool shares.
//! - [`chaos`]: crash-point exploration and `chaos run` experiments.
//! - [`cluster`]: the way into a running cluster: [`Cluster::connect`],
//!   named indexes, and the placement a memory node follows.
//! - [`gateway`]: the Redis-protocol gateway (`kintsugi serve`): Redis
//!   clients on an rtx index.
//!
//! ```no_run
//! # async fn example() -> Result<(), kintsugi::ClusterError> {
//! let cluster = kintsugi::Cluster::connect(&["127.0.0.1:7400"], "token").await?;
//! let mut orders = cluster.btree("orders").await?;
//! orders.put(1, 100).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub use chaos;
pub use cluster;
pub use cluster::{Cluster, ClusterError, ClusterOptions};
pub use control_plane;
pub use fabric;
pub use gateway;
pub use harness;
pub use index;
pub use recovery;
pub use txn;
pub use workload;
