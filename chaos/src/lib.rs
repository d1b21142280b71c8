//! Chaos for kintsugi: experiments that crash and pause clients at every
//! point of a protocol and check that nothing acknowledged is lost and
//! nothing is left half done.
//!
//! - [`crash_points`]: systematic exploration: one run per verb position at
//!   which a client crashes (or pauses past its lease), each followed by a
//!   healthy client and a checker.
//! - [`campaign`]: `kintsugi chaos campaign`: seeded random fault
//!   schedules, one local-cluster run each, a row per seed.
//! - [`experiment`]: experiments as TOML files: cluster, index, workload,
//!   fault schedule.
//! - [`run`]: `kintsugi chaos run`: starts a memory node and client
//!   processes, injects the faults, collects the timeline and the history,
//!   checks the index with a fresh client.
//! - [`history`], `workload::timeline`, [`plot`]: acknowledged writes and the final
//!   check against them; throughput per bucket and what faults did to it;
//!   the PNG.
//! - [`linearizability`]: per-key linearizability of a history of every
//!   client op (Jepsen-style JSON lines), judged by two independent checkers
//!   that must agree.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod campaign;
pub mod crash_points;
pub mod experiment;
pub mod history;
pub mod linearizability;
pub mod plot;
pub mod run;
