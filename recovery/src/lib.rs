//! Recovery: what the cluster does about the control plane's decisions
//! (`docs/recovery.md`).
//!
//! The control plane decides that a memory node is dead or a client has
//! expired; the [`Coordinator`], run beside the Raft leader, acts on it:
//!
//! - a dead node's replicas are evicted (`evict_replica`): a dead backup
//!   is dropped, a dead primary's first live backup is promoted and its
//!   primary-only words rebuilt before the region is published again; a
//!   dead primary with no live, allocated backup leaves its region lost
//!   (`declare_region_lost`), out of the clients' map until an operator
//!   drops it;
//! - a region with fewer replicas than it was made with gets a new one on
//!   a spare node, copied while clients keep writing, then joined and
//!   caught up at an epoch ([`copy`]);
//! - an expired client's logs are rolled at once, and its owner ids freed
//!   once its quarantine is over.
//!
//! Every step is one Raft command or an idempotent rebuild, and the
//! coordinator reads what to do from the replicated state alone, so the
//! next leader's coordinator resumes whatever the last one left. Recovery
//! is per region: a region or client whose step fails is stuck, and tried
//! again after its own backoff, while every other goes on.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod coordinator;
pub mod copy;
mod error;
pub mod metrics;
mod stuck;

pub use coordinator::{Coordinator, RecoveryOptions, Step, Stopped, Stuck, Work, CLIENT_NAME};
pub use copy::{CaughtUp, Copied, COPY_CHUNK_BYTES};
pub use error::RecoveryError;
