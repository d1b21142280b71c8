//! The HTTP/JSON API of operators and clients, next to the Raft routes on a
//! member's listener.
//!
//! | route | what | served by |
//! |---|---|---|
//! | `GET /v1/status` | leader, term, members, log position, the state | this member |
//! | `GET /v1/map?after_epoch=N&wait=30s` | the cluster map; long-polls until its epoch exceeds N | this member |
//! | `GET /v1/memnodes`, `/v1/regions`, `/v1/clients`, `/v1/indexes`, `/v1/audit?limit=N` | one table of the state | this member |
//! | `POST /v1/commands` | a [`Command`](crate::state::Command) as JSON; answers its [`Outcome`](crate::state::Outcome) | the leader |
//! | `POST /v1/memnodes/{id}/renew`, `/v1/clients/{id}/renew?quiesced=N` | a lease renewal (a client's says how far it has quiesced, `txn::quiesce`) | the leader |
//! | `GET /v1/clients/{id}/reclaim` | whether expired client `id`'s owner ids may be reclaimed: the live clients not yet quiesced to its expiry | the leader |
//! | `POST /v1/members`, `DELETE /v1/members/{id}` | add a voter or learner, remove a member | the leader |
//! | `POST /v1/init` | form a new cluster from pristine members | this member |
//! | `GET /v1/snapshot` | the whole state with its digest, for `ctl snapshot save` | the leader |
//! | `POST /v1/snapshot/restore` | a saved state becomes a new, empty cluster's (admin) | the leader |
//! | `GET /v1/check` | this member's applied index and state digest | this member |
//! | `POST /v1/leader` | move the leadership to another voter (admin) | the leader |
//! | `POST /v1/campaign` | campaign for the lead (sent by a leader handing over; admin) | this member |
//!
//! Every route needs `Authorization: Bearer <token>` with a token from the
//! settings; the token's name is recorded as the actor of what it asks.
//! Reads are served from this member's applied state, which may lag the
//! leader's by the commit of the newest entries (`status` says how far it
//! has applied). A write sent to a follower is forwarded to the leader with
//! the same token, once; a member that knows no leader, or receives a
//! forwarded write while not leading, answers 503 with the leader's address
//! when it knows it. Errors are 4xx/5xx with an [`ErrorBody`].

mod client;
mod lease;
mod operations;
mod server;

use fabric::Epoch;
use serde::{Deserialize, Serialize};

use crate::raft::MemberId;
use crate::state::{Client, ClientId, ControlState, IndexRecord, MemNode, OwnerBlock, Region, StateHash};

pub use crate::reply::{chain as error_chain, ErrorBody};
pub use client::{ClientError, ControlClient};
pub use lease::{
    keep_lease, keep_lease_with, LeaseLost, Leaseholder, Quiescence, RENEW_RETRY, RENEW_TIMEOUT_INITIAL,
};
pub(crate) use server::api_router;

/// Largest request body the API accepts, in bytes: the largest request is
/// a command or a member list, well under a KiB; the bound keeps a caller
/// from making a member buffer more.
pub const API_BODY_BYTES_MAX: usize = 64 << 10;

/// Marks a write forwarded by a follower, so the leader it reaches does not
/// forward it again if it has lost the lead meanwhile (it answers 503).
pub const FORWARDED_HEADER: &str = "x-kintsugi-forwarded-by";

/// Largest snapshot `POST /v1/snapshot/restore` accepts, in bytes: a state
/// of thousands of clients and regions is a few MiB of JSON; the bound
/// keeps a member from buffering more (the Raft entry carrying it is bounded
/// by [`crate::network::RAFT_BODY_BYTES_MAX`], which is larger).
pub const SNAPSHOT_BYTES_MAX: usize = 16 << 20;

/// The snapshot file format this build writes and reads.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// Path of the restore route (its body limit differs from the others').
pub const RESTORE_PATH: &str = "/v1/snapshot/restore";

/// Audit entries `GET /v1/audit` returns when no limit is given.
pub const AUDIT_LIMIT_DEFAULT: usize = 100;

/// True when `addr` is a plain `host:port`: a hostname or IP (IPv6 in
/// brackets), a port above 0, nothing else. Members are named this way
/// because the leader sends the log, with the cluster secret, to whatever a
/// member's address says.
pub fn is_member_addr(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => {
            let host = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:".contains(&b))
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

/// A member of the Raft cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Its Raft id.
    pub id: MemberId,
    /// Where it serves Raft and the API (`host:port`).
    pub addr: String,
    /// A voter (counts toward the majority) or a learner (only replicates).
    pub voter: bool,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The member that answered.
    pub member: MemberId,
    /// Its Raft role: `leader`, `follower`, `candidate`, `learner`, `shutdown`.
    pub role: String,
    /// The leader it knows of.
    pub leader: Option<MemberId>,
    /// The current term.
    pub term: u64,
    /// Index of its last log entry.
    pub last_log_index: Option<u64>,
    /// Index of its last applied entry.
    pub last_applied: Option<u64>,
    /// The cluster's members as this member knows them.
    pub members: Vec<MemberInfo>,
    /// The applied map epoch.
    pub epoch: Epoch,
    /// The cluster clock (ms) as this member reads it: the leader's
    /// reading, or a follower's applied one, never ahead of it. What a
    /// client judges another's quarantine by (`state::Request::clock_ms`).
    #[serde(default)]
    pub clock_ms: u64,
    /// Memory nodes by id.
    pub memnodes: Vec<MemNode>,
    /// Regions by id.
    pub regions: Vec<Region>,
    /// Clients by id.
    pub clients: Vec<Client>,
    /// Named indexes by name.
    #[serde(default)]
    pub indexes: Vec<IndexRecord>,
}

/// `POST /v1/init`: the members of a new cluster, this one included. An
/// empty list forms a cluster of this member alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitRequest {
    /// Members by id and address.
    #[serde(default)]
    pub members: Vec<MemberInfo>,
}

/// `POST /v1/members`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    /// The new member's Raft id.
    pub id: MemberId,
    /// Where it listens (`host:port`).
    pub addr: String,
    /// Promote it to voter once it has caught up (otherwise a learner).
    #[serde(default = "yes")]
    pub voter: bool,
}

fn yes() -> bool {
    true
}

/// The answer to a lease renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    /// The lease now runs this long from when the leader heard the renewal:
    /// renew well within it (a third is customary).
    pub lease_ms: u64,
    /// A client's renewal: the reclaim sequence of the state that granted it
    /// ([`ControlState::reclaim_seq`](crate::state::ControlState)).
    #[serde(default)]
    pub reclaim_seq: u64,
    /// A client's renewal: the owner ids announced for reclaim then (of
    /// expired clients not yet forgotten).
    #[serde(default)]
    pub announced: Vec<AnnouncedOwners>,
}

/// Owner ids announced for reclaim: an expired client's, until it is
/// forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnouncedOwners {
    /// The ids.
    pub owners: OwnerBlock,
    /// The reclaim sequence number of the client's expiry.
    pub seq: u64,
}

/// The answer of `GET /v1/admission`: what a memory node admits by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionView {
    /// The admission key, in hex (`fabric::admission`): it checks every
    /// credential, so only operators' and admins' tokens get it.
    pub key: String,
    /// The client fence as this member's state has it.
    pub fence: fabric::FenceView,
}

/// The body of `POST /v1/admission`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialRequest {
    /// The live client to issue for; absent: a service credential (never
    /// fenced; operators' and admins' tokens only).
    #[serde(default)]
    pub client: Option<ClientId>,
}

/// The answer of `POST /v1/admission`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedCredential {
    /// The credential, in hex (`fabric::Credential::from_hex`).
    pub credential: String,
}

/// The answer of `GET /v1/clients/{id}/reclaim`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimReadiness {
    /// The expired client's reclaim sequence number.
    pub seq: u64,
    /// Clients that have not reported quiescence to it yet (none: its
    /// owner ids may be reclaimed): live ones, and expired ones still in
    /// their quarantine (what they sent before they stopped may yet land).
    pub waiting: Vec<ClientId>,
    /// Owner ids of expired clients past their quarantine that had not
    /// quiesced to it when they stopped: a section of theirs may have
    /// allocated a block of its chunks that only their logs name, so the
    /// reclaimer finishes their logs before it scans.
    #[serde(default)]
    pub finish_first: Vec<OwnerBlock>,
    /// Memory nodes (not declared dead) that do not yet refuse the expired
    /// client (`MemNodeFence`): until none, a frame it sent may still run,
    /// so nobody rolls its logs, reclaims its blocks or forgets it.
    #[serde(default)]
    pub unfenced: Vec<crate::state::MemNodeId>,
}

/// A saved state (`GET /v1/snapshot`, `ctl snapshot save`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// [`SNAPSHOT_FORMAT`] of the build that saved it.
    pub format: u32,
    /// When it was taken (ms since the Unix epoch).
    pub saved_at_ms: u64,
    /// The member (the leader) that served it.
    pub member: MemberId,
    /// The log index its state was applied to.
    pub last_applied: Option<u64>,
    /// The members of the cluster it was taken from.
    pub members: Vec<MemberInfo>,
    /// The digest of `state`, checked again on restore.
    pub state_hash: StateHash,
    /// The state.
    pub state: ControlState,
}

/// `GET /v1/check`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDigest {
    /// The member that answered.
    pub member: MemberId,
    /// Its Raft role.
    pub role: String,
    /// The log index its state is applied to.
    pub last_applied: Option<u64>,
    /// Its applied map epoch.
    pub epoch: Epoch,
    /// The digest of its state at `last_applied`.
    pub state_hash: StateHash,
}

/// `POST /v1/leader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferLeader {
    /// The voter to lead.
    pub to: MemberId,
}

/// The answer of `POST /v1/leader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderMoved {
    /// The member that led.
    pub from: MemberId,
    /// The member that leads now.
    pub to: MemberId,
    /// The term it leads in.
    pub term: u64,
    /// How long the hand-over took, in ms.
    pub took_ms: u64,
}

/// `POST /v1/campaign`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Campaign {
    /// Wait this long (ms) before the first election: until the followers'
    /// leader leases have lapsed.
    pub after_ms: u64,
}
