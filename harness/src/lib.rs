//! What every kintsugi tool that runs a system shares, defined once: the
//! benchmarks, `chaos run`, `demo` and the process tests all start
//! processes, exchange lines with them, set up memory and name transports
//! the same way.
//!
//! - [`launch`]: the one process launcher: start, readiness, stop on every
//!   exit path, stop with the parent; a failed start reports the child's
//!   own last words.
//! - [`line`](mod@line): every line two processes exchange on a pipe, as enums that
//!   encode and parse (and refuse anything malformed).
//! - [`control`]: control-plane members as processes: started, formed,
//!   killed, restarted, their leader found.
//! - [`memory`]: the one memory set-up: fresh `local`, `shm` or `tcp` nodes
//!   in this process, or an existing image or server.
//! - [`local`]: a local multi-process cluster (`kintsugi cluster up`).
//! - [`transport`]: the one transport enum of every flag and file.
//! - [`layout`]: the region, loader owner id and chunk size every tool
//!   formats memory with.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod control;
pub mod launch;
pub mod layout;
pub mod line;
pub mod local;
pub mod memory;
pub mod transport;

pub use launch::{Launch, LaunchError, Process, StopBy};
pub use line::{ClientLine, LineError, RunnerLine, ServerLine};
pub use memory::{Memory, MemoryError, MemorySpec};
pub use transport::TransportKind;
