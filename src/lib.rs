//! Kintsugi: crash-tolerant indexes on disaggregated memory.
//!
//! This crate is the facade: it re-exports the layers so that a service can
//! depend on `kintsugi` alone, and it hosts the `kintsugi` binary. Each layer
//! lives in its own crate (see `ARCHITECTURE.md`):
//!
//! - [`fabric`]: global addresses, one-sided verbs, batches, memory nodes,
//!   transports (local, shm, tcp), fault injection, per-client counters.
//! - [`txn`]: repairable transactions (rTX) over the fabric.

pub use fabric;
pub use txn;
