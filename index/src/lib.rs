//! Indexes on disaggregated memory, each in variants that differ only in
//! how they keep their nodes consistent across concurrent and crashing
//! clients.
//!
//! - [`btree`]: a Sherman-like B-link tree, `optimal` or `rtx`.
//! - [`hash`]: RACE hashing, `optimal` or `rtx`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod btree;
mod error;
pub mod hash;
mod mix;

pub use btree::Variant;
pub use error::IndexError;
mod objects;
pub use objects::ObjectSizes;
