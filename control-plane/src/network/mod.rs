//! Raft RPCs between members over HTTP/JSON.
//!
//! Each member serves [`raft_router`] and reaches its peers through an
//! [`HttpNetworkFactory`]. An RPC is a `POST` of the openraft request as JSON
//! to `http://{BasicNode.addr}{path}`; the answer is the JSON of
//! `Result<response, RaftError>`, so a Raft-level refusal travels as data and
//! comes back to openraft as a `RemoteError`, distinct from a transport
//! failure.
//!
//! Members authenticate each other with a shared [`ClusterSecret`] sent in
//! the [`SECRET_HEADER`] header: whoever can reach the port but lacks the
//! secret can neither vote nor append. The secret is checked before the body
//! is read, so an outsider cannot make a member buffer a large body either.

mod client;
mod server;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use crate::raft::MemberId;

pub use client::{HttpNetwork, HttpNetworkFactory, RETRY_PAUSE_DEFAULT};
pub use server::raft_router;

/// Header carrying the cluster secret on every Raft RPC.
pub const SECRET_HEADER: &str = "x-kintsugi-cluster-secret";

/// Path of `AppendEntries` (also the heartbeat).
pub const APPEND_PATH: &str = "/raft/append";
/// Path of `RequestVote`.
pub const VOTE_PATH: &str = "/raft/vote";
/// Path of one chunk of `InstallSnapshot`.
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";

/// Largest request body a member accepts on a Raft route, in bytes.
///
/// Snapshot chunks are the largest RPCs: openraft cuts a snapshot into chunks
/// of `Config::snapshot_max_chunk_size` (3 MiB by default), and JSON spells
/// each byte of a chunk as a decimal number and a comma, up to 4 bytes, so a
/// default chunk is at most about 12 MiB on the wire. 64 MiB leaves room for a
/// chunk size raised to 16 MiB while bounding what one (authenticated) request
/// can make a member buffer. Append batches of control-plane commands are far
/// smaller.
pub const RAFT_BODY_BYTES_MAX: usize = 64 << 20;

/// Largest response body a member reads from a peer, in bytes: every Raft
/// response is a vote, a log id or an error, a few hundred bytes; the bound
/// keeps a confused or hostile peer from making us buffer without end.
pub const RAFT_RESPONSE_BYTES_MAX: usize = 1 << 20;

/// Shortest cluster secret accepted, in bytes: anything shorter can be
/// guessed by whoever can reach a member's port.
pub const SECRET_BYTES_MIN: usize = 16;

/// Longest cluster secret accepted, in bytes: it rides in a header of every
/// RPC, and HTTP servers commonly cap a header near 8 KiB.
pub const SECRET_BYTES_MAX: usize = 1024;

/// The secret shared by the members of one control-plane cluster.
///
/// Its `Debug` form never shows the secret, so it can sit in configuration
/// structs that get logged.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    /// Checks and wraps a secret: [`SECRET_BYTES_MIN`] to
    /// [`SECRET_BYTES_MAX`] bytes of visible ASCII (`!` to `~`), because it
    /// must travel verbatim as an HTTP header value.
    pub fn new(secret: impl Into<String>) -> Result<Self, SecretError> {
        let secret = secret.into();
        let len = secret.len();
        if len < SECRET_BYTES_MIN {
            return Err(SecretError::TooShort { len });
        }
        if len > SECRET_BYTES_MAX {
            return Err(SecretError::TooLong { len });
        }
        // The position is reported, never the byte: an error message must not
        // leak part of the secret.
        if let Some(at) = secret.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(SecretError::NotVisibleAscii { at });
        }
        Ok(ClusterSecret(secret))
    }

    /// True when `presented` is this secret. Takes the same time for every
    /// presented value of the secret's length, so timing does not reveal how
    /// long a matching prefix a guess has (the length itself is not secret).
    pub fn matches(&self, presented: &[u8]) -> bool {
        crate::config::constant_time_eq(self.0.as_bytes(), presented)
    }

    /// The secret as sent on the wire.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The data path's admission key (`fabric::admission`), derived from
    /// this secret: what memory nodes check credentials with.
    pub fn admission_key(&self) -> fabric::AdmissionKey {
        fabric::AdmissionKey::derive(self.0.as_bytes())
    }

    /// A service credential under this secret's admission key: what a
    /// process holding the secret itself presents to memory nodes that have
    /// no control plane (never fenced).
    pub fn service_credential(&self) -> fabric::Credential {
        self.admission_key().issue(fabric::Holder::Service { id: 0 })
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

/// Why a cluster secret was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Fewer than [`SECRET_BYTES_MIN`] bytes.
    #[error("cluster secret has {len} bytes, at least {SECRET_BYTES_MIN} are needed")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// More than [`SECRET_BYTES_MAX`] bytes.
    #[error("cluster secret has {len} bytes, at most {SECRET_BYTES_MAX} are allowed")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A byte outside `!`..=`~` (spaces and control characters included).
    #[error("cluster secret byte {at} is not visible ASCII")]
    NotVisibleAscii {
        /// Offset of the first offending byte.
        at: usize,
    },
}

/// Why the Raft transport could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// reqwest refused to build its client (e.g. no usable resolver).
    #[error("cannot build the HTTP client for Raft RPCs: {0}")]
    Client(#[source] reqwest::Error),
}

/// An injected network fault: the peers this member's Raft RPCs cannot
/// reach. An RPC to a cut-off peer fails as unreachable without being sent,
/// as it would behind a dropped link. Cloning shares the set, so a test keeps
/// a handle and cuts or heals while the member runs; a partition is
/// symmetric when each side cuts the other.
#[derive(Clone, Debug, Default)]
pub struct Partition(Arc<RwLock<BTreeSet<MemberId>>>);

impl Partition {
    /// Cuts this member off from `peers` (adding to what is already cut).
    pub fn cut(&self, peers: impl IntoIterator<Item = MemberId>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(peers);
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.0.write().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// True when RPCs to `peer` are cut.
    pub fn cuts(&self, peer: MemberId) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&peer)
    }
}
