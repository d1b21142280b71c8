//! What may be asked of the state, and what it answers: the log entry's
//! payload ([`Request`]) and the result of applying it ([`Response`]).

use fabric::RegionId;
use serde::{Deserialize, Serialize};

use super::{Client, ClientId, IndexKind, IndexRecord, IndexVariant, MemNode, MemNodeId, Region, SavedState};

/// A change to the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Command {
    /// Adds a memory node (state `joining`).
    RegisterMemNode {
        /// Where clients reach it.
        endpoint: String,
        /// Bytes it offers.
        capacity_bytes: u64,
        /// The image it serves from (`fabric::image`): a node back under
        /// its endpoint with another image is a new, empty node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<fabric::ImageId>,
    },
    /// Memory node `id` is back under its endpoint with another image than
    /// its record's (restarted without its file, on a new tmpfs, on a
    /// replaced disk): it holds none of its replicas, so it is declared
    /// dead at once, its replicas are evicted and refilled like a dead
    /// node's, and it registers again as an empty node. It is never served
    /// meanwhile: it holds no lease.
    ReplaceImage {
        /// The node.
        id: MemNodeId,
        /// The image it is back with.
        image: fabric::ImageId,
    },
    /// Memory node `node` does not hold its replica of `region` at the
    /// generation the map names (its image holds it at `found`, 0 for a
    /// region it had to allocate afresh): an image restored from an old
    /// copy, or one that missed a hand-out while it was down. The replica
    /// is never served: it is dropped like a dead node's (a primary's heir
    /// promoted; the region lost if there is none) and refilled.
    ReplicaUnproven {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
        /// The generation its image holds the region at.
        found: u64,
    },
    /// `node` shows that its image holds `region` at `generation`, the one
    /// the map names, after a snapshot restore named it (`Region::unverified`).
    /// Refused for a node not awaiting proof, or at another generation (that
    /// is `ReplicaUnproven`'s).
    ReplicaProven {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
        /// The generation its image holds the region at.
        generation: u64,
        /// The last epoch the node's image followed before the restored
        /// cluster's maps: how far it went with the old cluster. A holder
        /// behind another's is stale (it stopped following, the region
        /// going on without it: a node that died after the snapshot) and is
        /// dropped. 0: unknown, compared with nothing.
        #[serde(default)]
        followed_epoch: fabric::Epoch,
    },
    /// Joining or suspect → active (its lease was renewed).
    ActivateMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Active → suspect (missed renewals).
    SuspectMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Declares a node dead.
    DeclareMemNodeDead {
        /// The node.
        id: MemNodeId,
    },
    /// Takes a node out of placement; its replicas stay.
    DrainMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Forgets a node that holds no replica.
    RemoveMemNode {
        /// The node.
        id: MemNodeId,
    },
    /// Creates a region with `replicas` (1 + f) replicas on distinct active nodes.
    CreateRegion {
        /// Bytes.
        size_bytes: u64,
        /// Replicas, primary included.
        replicas: u8,
    },
    /// Makes a backup the primary (the old primary becomes a backup).
    PromoteBackup {
        /// The region.
        region: RegionId,
        /// The backup's node.
        node: MemNodeId,
        /// The client that will restore it, claimed with the promotion
        /// (`ClaimRestore`); none: whoever claims it first.
        #[serde(default)]
        restorer: Option<ClientId>,
    },
    /// Claims the restore of a region being restored for `client`, at a
    /// new epoch: refused while another live client holds the claim. A
    /// claimant waits until every replica's node fences at that epoch
    /// before it writes, so an earlier claimant's verbs are refused.
    ClaimRestore {
        /// The region.
        region: RegionId,
        /// The claimant.
        client: ClientId,
    },
    /// `client` gives back its claim on the restore of a region
    /// (`ClaimRestore`) without having published it: a recovery
    /// coordinator whose member lost the lead steps down this way, so the
    /// new leader's coordinator may claim at once rather than wait until
    /// the deposed one leaves or expires. Refused unless `client` holds the
    /// claim. The next claimant's new epoch fences any late verb of the
    /// old one.
    ReleaseRestore {
        /// The region.
        region: RegionId,
        /// The holder.
        client: ClientId,
    },
    /// Starts a new replica on an active node: allocated there, then
    /// copied by recovery while clients keep writing the others, then
    /// joined (`join_backup`).
    AddBackup {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
    },
    /// A copy into the replica being made on `node` starts: a new epoch,
    /// which the copier waits for every node to fence at before its first
    /// WRITE, so that the WRITEs of any earlier copy (a deposed leader's
    /// coordinator, paused and resumed) are refused by the nodes rather
    /// than land after this copy passed their chunk (design.md §1b).
    FenceCopy {
        /// The region.
        region: RegionId,
        /// The node the replica is being made on.
        node: MemNodeId,
    },
    /// A replica being made is copied: it joins the replicas clients
    /// write, and the region leaves their map until recovery has caught
    /// it up with the writes of the copy's time (`region_restored`).
    JoinBackup {
        /// The region.
        region: RegionId,
        /// The new replica's node.
        node: MemNodeId,
    },
    /// Recovery drops the replica of a dead node. A dead backup is simply
    /// dropped; a dead primary's first live backup is promoted, and the
    /// region is out of the clients' map until its primary-only words are
    /// rebuilt (`region_restored`).
    EvictReplica {
        /// The region.
        region: RegionId,
        /// The dead node.
        node: MemNodeId,
    },
    /// Recovery declares a region lost: its primary is on a dead node and
    /// no other replica can take over (none on a live node and allocated,
    /// as eviction judges an heir), so its contents died with that node.
    /// The region leaves the clients' map for good, recovery does nothing
    /// more with it, and it keeps its replica list, to show where it
    /// lived, until an operator drops it (`DropRegion`). Refused while an
    /// heir exists (evict the dead primary instead) and for a region lost
    /// already.
    DeclareRegionLost {
        /// The region.
        region: RegionId,
    },
    /// An operator removes a region and frees its bytes on every node that
    /// held a replica of it (or was making one): its contents are gone.
    /// A region an index uses is dropped only once it is lost, and the
    /// index with it (its data was lost with the region); the region of a
    /// live index is refused.
    DropRegion {
        /// The region.
        region: RegionId,
    },
    /// Removes a backup (never the primary).
    RemoveBackup {
        /// The region.
        region: RegionId,
        /// The node.
        node: MemNodeId,
    },
    /// A memory node reports the fence it now follows
    /// ([`ControlState::fence_view`]'s `seq`): it refuses every client the
    /// view does not admit. Forgetting an expired client, and reclaiming its
    /// blocks, wait until every node not declared dead has reported a fence
    /// at or past the client's expiry.
    MemNodeFence {
        /// The node.
        id: MemNodeId,
        /// The view's sequence.
        seq: u64,
    },
    /// A memory node reports the epoch it now fences at.
    MemNodeEpoch {
        /// The node.
        id: MemNodeId,
        /// Its epoch.
        epoch: fabric::Epoch,
    },
    /// The promoter has rebuilt a promoted region's primary-only words:
    /// it is back in the clients' map.
    RegionRestored {
        /// The region.
        region: RegionId,
    },
    /// A node placed to hold a replica reports it allocated.
    ReplicaReady {
        /// The region.
        region: RegionId,
        /// The reporting node.
        node: MemNodeId,
    },
    /// Places a region for a new named index and records the index as
    /// being created by `client`, which formats it and then says
    /// `index_ready`.
    CreateIndex {
        /// Its name.
        name: String,
        /// B+tree or hash.
        kind: IndexKind,
        /// optimal or rtx.
        variant: IndexVariant,
        /// Bytes of its region.
        size_bytes: u64,
        /// Replicas, primary included.
        replicas: u8,
        /// The (live) client that formats it.
        client: ClientId,
    },
    /// Takes over the creation of an index whose creating client is no
    /// longer live: `client` formats it from the start.
    ClaimIndex {
        /// Its name.
        name: String,
        /// The (live) client that takes over.
        client: ClientId,
    },
    /// The creating client has formatted the index: it may be opened.
    IndexReady {
        /// Its name.
        name: String,
        /// The client that created it.
        client: ClientId,
    },
    /// Registers a client: an id, an owner-id block and a lease length.
    RegisterClient {
        /// A name for operators.
        name: String,
        /// Owner ids wanted (one per coroutine).
        owner_ids: u16,
        /// Lease length; 0 (or absent in JSON) asks for the cluster's
        /// default, which the proposing member fills in from its settings
        /// (`timing.client_lease`) before the command enters the log.
        #[serde(default)]
        lease_ms: u64,
    },
    /// A live client leaves: its logs are DONE (it says so, having
    /// finished them and stopped issuing verbs), so its owner ids are free
    /// at once.
    DeregisterClient {
        /// The client.
        id: ClientId,
    },
    /// Declares a client's lease lapsed.
    ExpireClient {
        /// The client.
        id: ClientId,
    },
    /// Forgets an expired client whose logs recovery has rolled, freeing its
    /// owner ids. Refused while another client holds the claim on its
    /// reclaim (`ClaimReclaim`) and may still be writing the runs.
    ForgetClient {
        /// The client.
        id: ClientId,
        /// Who forgets it: the holder of the claim on its reclaim, if any.
        #[serde(default)]
        by: Option<ClientId>,
    },
    /// Claims the reclaim of expired client `id`'s unreferenced blocks for
    /// client `by` (leak repair, `txn::reclaim`): one reclaimer at a time
    /// writes an owner id's runs. Refused until `id`'s quarantine is over,
    /// and while another holder is live or in its own quarantine (its
    /// writes may still land).
    ClaimReclaim {
        /// The expired client.
        id: ClientId,
        /// The reclaimer.
        by: ClientId,
    },
    /// Puts a memory node in or out of maintenance: while in, its silence
    /// is not judged (a planned restart is not declared dead) and no new
    /// replica is placed on it. Going in takes its backups (and replicas
    /// being made) out of their regions' write sets at a new epoch, so that
    /// writes go on while it restarts: those regions serve degraded until
    /// recovery fills a replica again (on it, once it is out, or on a
    /// spare). Refused while it holds the primary of a region with another
    /// replica (`ctl memnode maintenance` promotes one first) or a replica
    /// of a region being restored; a sole copy stays, unavailable while the
    /// node is down.
    SetMaintenance {
        /// The node.
        id: MemNodeId,
        /// In (true) or out.
        on: bool,
    },
    /// Replaces the state of a new cluster with a snapshot's (`ctl snapshot
    /// restore`): refused once the cluster holds any memory node, region or
    /// index, and unless the snapshot's state passes
    /// [`ControlState::check`]. Clients of the new cluster (its recovery
    /// coordinator) hold no memory yet and are dropped: they join again.
    Restore {
        /// The saved state.
        state: SavedState,
    },
}

impl Command {
    /// True for commands that change routing (and so bump the epoch when
    /// they succeed).
    pub fn alters_routing(&self) -> bool {
        matches!(
            self,
            Command::DeclareMemNodeDead { .. }
                | Command::ReplaceImage { .. }
                | Command::ReplicaUnproven { .. }
                | Command::ReplicaProven { .. }
                | Command::RemoveMemNode { .. }
                | Command::CreateRegion { .. }
                | Command::PromoteBackup { .. }
                | Command::ClaimRestore { .. }
                | Command::AddBackup { .. }
                | Command::FenceCopy { .. }
                | Command::JoinBackup { .. }
                | Command::EvictReplica { .. }
                | Command::DeclareRegionLost { .. }
                | Command::DropRegion { .. }
                | Command::RemoveBackup { .. }
                | Command::CreateIndex { .. }
                | Command::ReplicaReady { .. }
                | Command::RegionRestored { .. }
                | Command::Restore { .. }
                | Command::SetMaintenance { .. }
        )
    }

    /// True for what a token of role `client` may ask: its own
    /// registration and the opening of indexes, nothing that places or
    /// moves memory of others.
    pub fn for_clients(&self) -> bool {
        matches!(
            self,
            Command::RegisterClient { .. }
                | Command::CreateIndex { .. }
                | Command::ClaimIndex { .. }
                | Command::IndexReady { .. }
                | Command::ForgetClient { .. }
                | Command::ClaimReclaim { .. }
                | Command::DeregisterClient { .. }
        )
    }
}

/// A log entry's payload: a command with the context `apply` may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// When the proposing member accepted it (ms since the Unix epoch), by
    /// its wall clock: what the audit shows. Nothing is judged by it.
    pub at_ms: u64,
    /// The cluster clock when the leader proposed it (ms): the leader's
    /// monotonic time since it took office, added to the clock the log had
    /// reached by then (`member::LeaderClock`). Client expiries and
    /// quarantines are judged by it alone, so a member whose wall clock is
    /// ahead cannot shorten a quarantine by leading. 0 in entries written
    /// before it existed: `at_ms` stands in ([`Request::clock`]).
    #[serde(default)]
    pub clock_ms: u64,
    /// Who asked.
    pub actor: String,
    /// Randomness chosen by the proposer (access keys are derived from it).
    pub nonce: u64,
    /// The change.
    pub command: Command,
}

impl Request {
    /// The cluster clock this request was proposed at ([`Request::clock_ms`],
    /// or `at_ms` in an entry from before it existed).
    pub fn clock(&self) -> u64 {
        if self.clock_ms == 0 {
            self.at_ms
        } else {
            self.clock_ms
        }
    }
}

/// What a successful command produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Outcome {
    /// The memory node as it now is.
    MemNode(MemNode),
    /// The region as it now is.
    Region(Region),
    /// The client as it now is.
    Client(Client),
    /// The index as it now is.
    Index(IndexRecord),
    /// Something was removed.
    Removed,
    /// A log entry without a command (openraft's blank or membership
    /// entries) was applied: the state is unchanged.
    NoCommand,
    /// A snapshot's state was restored.
    Restored(RestoreSummary),
}

/// What a restore brought in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreSummary {
    /// The map epoch the cluster now has.
    pub epoch: fabric::Epoch,
    /// Memory nodes restored.
    pub memnodes: usize,
    /// Regions restored.
    pub regions: usize,
    /// Clients restored (live ones are judged afresh: those that do not
    /// renew with this cluster expire after a lease).
    pub clients: usize,
    /// Named indexes restored.
    pub indexes: usize,
}

/// Why a command was refused. Each leaves the state as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case", tag = "error")]
pub enum CommandError {
    /// No such memory node.
    #[error("no memory node {id}")]
    UnknownMemNode {
        /// The id asked for.
        id: MemNodeId,
    },
    /// No such region.
    #[error("no region {id}")]
    UnknownRegion {
        /// The id asked for.
        id: RegionId,
    },
    /// No such index.
    #[error("no index named {name:?}")]
    UnknownIndex {
        /// The name asked for.
        name: String,
    },
    /// No such client.
    #[error("no client {id}")]
    UnknownClient {
        /// The id asked for.
        id: ClientId,
    },
    /// The command does not apply in the current state.
    #[error("{0}")]
    Conflict(String),
    /// Not enough distinct active nodes with room.
    #[error("cannot place {needed} replicas of {size_bytes} bytes: only {available} active nodes with room")]
    Placement {
        /// Replicas asked for.
        needed: usize,
        /// Size asked for.
        size_bytes: u64,
        /// Nodes that could take one.
        available: usize,
    },
    /// An argument out of range.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A limit of the state is reached.
    #[error("limit reached: {0}")]
    Full(String),
}

/// The result of applying one request: what every member returns for it.
pub type Response = Result<Outcome, CommandError>;
