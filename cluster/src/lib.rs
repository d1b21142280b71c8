//! The one way into a kintsugi cluster.
//!
//! - For a service: [`Cluster::connect`] joins the cluster through its
//!   control plane and opens indexes by name ([`Cluster::btree`],
//!   [`Cluster::hash`]); the process's lease and map are kept on a thread
//!   of its own, and every verb it issues carries the epoch of the newest
//!   map and stops when the lease is not certain.
//! - For a memory node placed by the control plane: [`placement`]
//!   registers it, keeps its lease, and allocates what the map places on
//!   it, raising its epoch with every newer map.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = cluster::Cluster::connect(&["127.0.0.1:7400"], "a-client-token").await?;
//! let mut orders = cluster.btree("orders").await?;
//! orders.put(42, 7).await?;
//! assert_eq!(orders.get(42).await?, Some(7));
//! drop(orders);
//! cluster.close().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod catalog;
mod client;
mod error;
mod handle;
mod lease;
pub mod load;
pub mod members;
pub mod membership;
mod owners;
pub mod placement;
mod promote;
mod session;

pub use catalog::{CHUNK_BYTES, OPEN_POLL, OPEN_TIMEOUT};
pub use client::{Cluster, ClusterOptions};
pub use control_plane::state::{IndexKind, IndexVariant};
pub use error::ClusterError;
pub use handle::{Table, Tree, MAP_WAIT, RETRIES_MAX};
pub use index::btree::Written;
pub use lease::Lease;
pub use members::Members;
pub use membership::Membership;
pub use promote::{Promotion, FENCE_SETTLE, PROMOTE_TIMEOUT};
