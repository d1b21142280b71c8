//! Chaos for kintsugi: experiments that crash and pause clients at every
//! point of a protocol and check that nothing acknowledged is lost and
//! nothing is left half done.
//!
//! - [`crash_points`]: systematic exploration: one run per verb position at
//!   which a client crashes (or pauses past its lease), each followed by a
//!   healthy client and a checker.
//! - [`driver`]: the client loop that runs a YCSB op stream on an index.
//! - [`workload`]: seeded, reproducible YCSB A–E op streams (8-byte keys).

#![warn(missing_docs)]

pub mod crash_points;
pub mod driver;
pub mod workload;
