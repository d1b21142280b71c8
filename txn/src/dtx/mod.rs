//! The DTX baseline: FORD-style distributed transactions on the same fabric
//! (`../shared/design.md` §4, `papers/ford-localized-validation.txt`), the
//! comparison every rTX figure is made against.
//!
//! A DTX record carries its data inline behind a lock word and a version
//! word ([`record`]); a transaction locks and reads in one batch (CAS +
//! READ, no wait), writes undo images to every replica before it changes
//! anything in place, commits in one round trip to every replica, and
//! releases in the background. Its log ([`log`]) names the records it
//! locked and where their undo images are. Unlike rTX, nobody but recovery
//! acts on a DTX lock: a dead coordinator blocks others until recovery
//! rolls its logs back, after its lease expired.
//!
//! - [`record`], [`log`]: the bit layouts.
//! - [`DtxClient`] runs transactions as one owner id; [`DtxTx`] is one
//!   attempt (`tx.rs` tabulates its round trips).
//! - [`DtxClient::finish_owner_log`] (`recover.rs`): rolls a stopped
//!   owner's logs back or forward.
//!
//! The indexes' `dtx` arms follow (issue 24, `docs/plans/dtx.md`).

mod client;
pub mod log;
pub mod record;
mod recover;
mod tx;

pub use client::{DtxClient, INVISIBLE_READS_MAX, UNDO_HALF_BYTES};
pub use recover::Finished;
pub use tx::{DtxTx, CRASH_AFTER_COMMIT, CRASH_BEFORE_COMMIT};
