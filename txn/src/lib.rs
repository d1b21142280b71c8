//! Repairable transactions (rTX) over the DM fabric.
//!
//! An rTX reads objects into a local read set, writes them into a local write
//! set, and at commit logs the write set, locks it with leased locks
//! (LLLock), validates the read set, and installs new data blocks by CASing
//! versioned pointers. A client that meets a lock whose lease expired reads
//! the holder's log and finishes or aborts its transaction online
//! ([`TxClient::repair`]); every step is idempotent, so a holder that was only
//! slow does no harm when it wakes. See `docs/txn.md` for the protocol as
//! built, its round trips and verbs, and how it maps to the paper.
//!
//! - [`word`]: the lock word, data pointer and log header bit layouts.
//! - [`lease`]: lease time (1/256 ms ticks since 2024) and unique lease
//!   ends per owner with a bounded lead over its clock.
//! - [`log`]: the log slot layout.
//! - [`hint`]: meta hints (a version and pointer seen together) and the
//!   process-wide cache of them that saves reads their meta round trip.
//! - [`heap`]: how a region is organised (header, log array, chunk owner
//!   table, chunks) and chunk allocation.
//! - [`TxClient`] runs transactions as one owner id; [`Tx`] is one attempt.
//! - [`dtx`]: the FORD-style DTX baseline (its layouts so far).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod alloc;
mod client;
mod commit;
pub mod config;
mod converge;
pub mod dtx;
mod error;
pub mod heap;
pub mod hint;
pub mod lease;
pub mod log;
mod obj;
pub mod owner;
pub mod quiesce;
pub mod reclaim;
mod repair;
pub mod replicas;
mod settle;
mod stats;
mod tails;
mod tx;
pub mod word;

pub use alloc::{AllocCounts, BlockAllocator};
pub use client::TxClient;
pub use commit::CRASH_AT_COMMIT_POINT;
pub use config::TxConfig;
pub use error::{AbortReason, TxError};
pub use heap::{ChunkKind, ChunkTag, Heap, HeapConfig, Restored, BLOCK_BYTES_MAX, CHUNK_BYTES};
pub use hint::{HintCache, HintSlot, MetaHint};
pub use lease::{now_tick, LEAD_TICKS_MAX, LEASE_EPOCH_UNIX_MS, TICKS_PER_MS};
pub use obj::{RawObj, TxObj, DPTR_OFFSET, META_BYTES};
pub use owner::{LocalOwnerIds, OwnerIdAllocator};
pub use quiesce::{Announced, OwnerRange, ReclaimView};
pub use reclaim::Reclaimed;
pub use repair::RepairOutcome;
pub use stats::TxStats;
pub use tx::Tx;
pub use word::{DataPtr, LockWord, OwnerId};
