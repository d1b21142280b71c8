//! What a memory node placed by the control plane runs beside its server:
//! it registers (or finds its record after a restart), keeps its lease, and
//! follows the map: every region the map places on it is allocated in its
//! image with the map's access key and reported ready; every newer epoch
//! is raised on the node, which then fences verbs of older ones.
//!
//! The watch is a long poll (`GET /v1/map?after_epoch=N`), so an epoch
//! change reaches the node within one round trip of the control plane's
//! answer. Allocation happens before the epoch is raised: a client routing
//! by the new map never finds the node at the new epoch without the
//! region (it may find the region before the epoch, which is harmless:
//! nobody uses a region before every replica reported it ready).

use std::sync::Arc;
use std::time::Duration;

use control_plane::api::{keep_lease, keep_lease_with, Leaseholder};
use control_plane::liveness::memnode_serves_until;
use control_plane::state::{Command, MemNodeId, MemNodeState, Outcome, Region};
use fabric::{Epoch, ImageId, MemoryNode, RegionId};

use crate::members::{chain, Members, MEMBER_TIMEOUT};
use crate::ClusterError;

/// Longest long poll of the map; the member caps it with its `watch_max`.
pub const WATCH_WAIT: Duration = Duration::from_secs(30);

/// Pause after a failed watch or report before the next try.
pub const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How often a memory node reads the admission key and the client fence
/// (`GET /v1/admission`). An expired client's ids wait for every live
/// node's acknowledgement of its fence, so this bounds how long after the
/// quarantine they go to an heir; a tenth of a second is one small read per
/// node, and short next to any lease.
pub const FENCE_POLL: Duration = Duration::from_millis(100);

/// Set (to anything) in a memory node's environment, the node serves a
/// wiped image as if it held its replicas, as nodes did before image
/// identity: it takes its old record back whatever its image, renews
/// without naming its image, and trusts every replica it finds or
/// allocates. A chaos campaign's sabotage (`serve-wiped`), which must make
/// it fail; never for anything else.
pub const SABOTAGE_SERVE_WIPED_ENV: &str = "KINTSUGI_SABOTAGE_SERVE_WIPED";

/// Whether [`SABOTAGE_SERVE_WIPED_ENV`] is set.
fn serving_wiped() -> bool {
    std::env::var_os(SABOTAGE_SERVE_WIPED_ENV).is_some()
}

/// Registers the memory node at `endpoint` offering `capacity_bytes` from
/// `image`, or finds its record by endpoint (a node that restarts with its
/// image keeps its id). Retries until a member answers; a refusal other
/// than "registered already" is returned.
///
/// A record under this endpoint that names another image is an image this
/// node does not hold (it restarted without its file): the node has it
/// declared dead (`ReplaceImage`), so that its replicas are evicted and
/// refilled, and waits to be taken in again as an empty node under the
/// same id.
pub async fn register(
    members: &Members,
    endpoint: &str,
    capacity_bytes: u64,
    image: ImageId,
) -> Result<MemNodeId, ClusterError> {
    let register = Command::RegisterMemNode {
        endpoint: endpoint.to_owned(),
        capacity_bytes,
        image: Some(image),
    };
    let what = format!("registering memory node {endpoint}");
    loop {
        match try_register(members, endpoint, image, &what, &register).await? {
            Some(id) => return Ok(id),
            None => tokio::time::sleep(RETRY_PAUSE).await,
        }
    }
}

/// One registration; `None` while the node's record says dead and still
/// names replicas (recovery evicts them, then registration takes the node
/// in again as an empty spare).
async fn try_register(
    members: &Members,
    endpoint: &str,
    image: ImageId,
    what: &str,
    register: &Command,
) -> Result<Option<MemNodeId>, ClusterError> {
    match members.command(what, register).await {
        Ok(Outcome::MemNode(n)) if n.state == MemNodeState::Dead => {
            // A dead sole copy is revived as it was only with its image;
            // otherwise it waits for recovery like any dead node.
            tracing::info!(
                memnode = n.id,
                "declared dead; waiting for recovery to evict its replicas"
            );
            Ok(None)
        }
        Ok(Outcome::MemNode(n)) => Ok(Some(n.id)),
        Ok(other) => Err(ClusterError::Map(format!(
            "unexpected answer to registration: {other:?}"
        ))),
        Err(e) if e.refused_with(409) => {
            let nodes = members
                .call("listing memory nodes", |c| async move { c.memnodes().await })
                .await?;
            let n = nodes
                .into_iter()
                .find(|n| n.endpoint == endpoint)
                .ok_or_else(|| {
                    ClusterError::Map(format!(
                        "registration of {endpoint} refused, and no record has it"
                    ))
                })?;
            if n.state == MemNodeState::Dead {
                // Declared dead while it was away: taken in again as an
                // empty spare once recovery has evicted its replicas.
                tracing::info!(
                    memnode = n.id,
                    "declared dead meanwhile; waiting for recovery to evict its replicas"
                );
                return Ok(None);
            }
            if let Some(recorded) = n.image.filter(|&r| r != image && !serving_wiped()) {
                // Never served under the old record: this image holds none
                // of its replicas. Declared dead, they are refilled.
                tracing::warn!(
                    memnode = n.id,
                    %recorded,
                    %image,
                    "this node's record names another image: it restarted without its image; \
                     having it declared dead so that its replicas are refilled"
                );
                let replace = Command::ReplaceImage { id: n.id, image };
                members
                    .command(&format!("replacing memory node {}'s image", n.id), &replace)
                    .await?;
                return Ok(None);
            }
            Ok(Some(n.id))
        }
        Err(e) => Err(e),
    }
}

/// What a memory node holding regions of its own (`--region`) runs:
/// registers (retrying while no member answers) and keeps its lease until
/// the control plane refuses it (returned). Placements are not followed:
/// the node's regions are its flags'.
pub async fn keep_registered(
    members: Members,
    endpoint: String,
    capacity_bytes: u64,
    node: Arc<MemoryNode>,
) -> Result<(), ClusterError> {
    let image = node.image_id();
    let id = loop {
        match register(&members, &endpoint, capacity_bytes, image).await {
            Ok(id) => break id,
            Err(e @ ClusterError::Unreachable { .. }) => {
                tracing::warn!(error = %e, "cannot register with the control plane; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    };
    tracing::info!(memnode = id, %endpoint, "registered with the control plane");
    let lease = keep_lease(
        members.clients(),
        Leaseholder::MemNodeImage { id, image },
        std::future::pending(),
    );
    tokio::select! {
        lost = lease => lost.map_err(|e| ClusterError::LeaseLost(chain(&e))),
        never = follow_admission(members.clone(), id, node) => match never {},
    }
}

/// Keeps memory node `id`'s gate (`fabric::admission`) as the control plane
/// says, for the process's life: takes the admission key, follows the
/// client fence every [`FENCE_POLL`], and reports each new fence it follows
/// (`MemNodeFence`) once `node` refuses every client it fences. Until its
/// first view the node's gate (`Gate::placed`) admits no client.
pub async fn follow_admission(
    members: Members,
    id: MemNodeId,
    node: Arc<MemoryNode>,
) -> std::convert::Infallible {
    let mut reported = Followed::default();
    let mut failing = false;
    loop {
        match follow_admission_once(&members, id, &node, &mut reported).await {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(memnode = id, error = %e, "cannot follow the client fence; retrying");
            }
            Err(e) => tracing::debug!(memnode = id, error = %e, "still cannot follow the client fence"),
        }
        tokio::time::sleep(FENCE_POLL).await;
    }
}

/// What [`follow_admission`] gave the node and reported last: the gate is
/// written (which waits for batches under way) only when something changed.
#[derive(Default)]
struct Followed {
    key: Option<[u8; 32]>,
    seq: Option<u64>,
}

async fn follow_admission_once(
    members: &Members,
    id: MemNodeId,
    node: &MemoryNode,
    reported: &mut Followed,
) -> Result<(), ClusterError> {
    let view = members
        .call("reading the admission key and fence", |c| async move {
            c.admission().await
        })
        .await?;
    let key: [u8; 32] = fabric::admission::unhex(&view.key)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| ClusterError::Map("the admission key is not 32 bytes of hex".into()))?;
    if reported.key != Some(key) {
        node.set_admission_key(fabric::AdmissionKey::from_bytes(key));
        reported.key = Some(key);
    }
    view.fence
        .validate()
        .map_err(|why| ClusterError::Map(format!("a malformed client fence: {why}")))?;
    let unchanged = node.gate().view() == Some(&view.fence);
    let seq = if unchanged {
        Some(view.fence.seq)
    } else {
        node.follow_fence(view.fence)
    };
    let Some(seq) = seq else {
        return Ok(());
    };
    if reported.seq != Some(seq) {
        members
            .command("reporting the client fence", &Command::MemNodeFence { id, seq })
            .await?;
        tracing::debug!(memnode = id, seq, "following the client fence");
        reported.seq = Some(seq);
    }
    Ok(())
}

/// Serves placements to `node` (memory node `id`) until the lease is lost
/// (returned as an error) or the caller drops the future.
pub async fn follow(members: Members, id: MemNodeId, node: Arc<MemoryNode>) -> Result<(), ClusterError> {
    let mut proven = Proven::starting(&node);
    follow_proving(members, id, node, &mut proven).await
}

/// [`follow`], judging replicas with what `proven` remembers: the
/// generations this process has seen its image hold. They hold for the
/// process's whole life, across a lost lease: its memory never left it.
async fn follow_proving(
    members: Members,
    id: MemNodeId,
    node: Arc<MemoryNode>,
    proven: &mut Proven,
) -> Result<(), ClusterError> {
    // The node serves verbs only until it could have been declared dead
    // (`MemoryNode::hold_lease_until`, `memnode_serves_until`): one paused
    // or cut off that long may have been replaced, and must not serve what
    // clients sent it before. Nor before its first grant, nor before it has
    // judged its replicas against the map once: a node reopened from its
    // image holds regions it may since have lost.
    node.hold_lease_until(std::time::Instant::now());
    // A new image starts at epoch 1: raised to the cluster's first, so that
    // a client still routing by a map from before this node's restart (one
    // that named its old image's replicas) is refused as stale and fetches
    // the map, rather than told a region is not here.
    if let Some(epoch) = fence_at_the_clusters_epoch(&members, &node).await {
        tracing::info!(
            epoch,
            "starting at the cluster's epoch: clients with older maps are refused"
        );
    }
    let gate = ServingGate::default();
    let holder = if serving_wiped() {
        Leaseholder::MemNode(id)
    } else {
        Leaseholder::MemNodeImage {
            id,
            image: node.image_id(),
        }
    };
    let lease = keep_lease_with(
        members.clients(),
        holder,
        None,
        std::future::pending(),
        |sent, lease| gate.granted(&node, memnode_serves_until(sent, lease)),
    );
    let watch = watch_placements(&members, id, &node, &gate, proven);
    tokio::select! {
        lost = lease => match lost {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Some(epoch) = fence_at_the_clusters_epoch(&members, &node).await {
                    tracing::warn!(epoch, "lease lost: fenced clients with older maps");
                }
                Err(ClusterError::LeaseLost(chain(&e)))
            }
        },
        never = watch => match never {},
    }
}

/// [`follow`] for the node's whole life: a node whose lease is lost (it was
/// paused, or cut off, past two leases and declared dead) registers again,
/// which takes it in as an empty spare once recovery has evicted its
/// replicas, and follows the map again under the same id. Returns only if
/// registration fails or gives another id.
pub async fn follow_for_life(
    members: Members,
    id: MemNodeId,
    node: Arc<MemoryNode>,
    endpoint: String,
    capacity_bytes: u64,
) -> Result<(), ClusterError> {
    let mut proven = Proven::starting(&node);
    loop {
        match follow_proving(members.clone(), id, node.clone(), &mut proven).await {
            Err(ClusterError::LeaseLost(why)) => {
                tracing::warn!(memnode = id, %why, "lease lost; registering again");
            }
            other => return other,
        }
        let again = register(&members, &endpoint, capacity_bytes, node.image_id()).await?;
        if again != id {
            return Err(ClusterError::Map(format!(
                "memory node {id} registered again as {again}: a node keeps its id by its endpoint"
            )));
        }
        tracing::info!(memnode = id, "registered again; following the map");
    }
}

/// Raises `node`'s epoch to the newest any member has applied, so that a
/// client whose map still routes here is refused (`StaleEpoch`, and it
/// fetches the map) rather than served what this node held when its lease
/// lapsed: meanwhile the node may have been declared dead and its replicas
/// promoted elsewhere and written. Clients with the newer map do not route
/// here at all. Best effort: with no member reachable the node keeps its
/// epoch, and a client that reaches it with an old map is one whose map
/// no member could have changed either.
///
/// Returns the epoch now in force, if a member answered.
async fn fence_at_the_clusters_epoch(members: &Members, node: &MemoryNode) -> Option<Epoch> {
    let mut newest = None;
    for c in members.clients() {
        if let Ok(Ok(status)) = tokio::time::timeout(MEMBER_TIMEOUT, c.status()).await {
            newest = newest.max(Some(status.epoch));
        }
    }
    newest.map(|epoch| node.advance_epoch(epoch))
}

/// Holds a node's lease grants back until it has judged its replicas
/// against the map once ([`apply_placements`]), then passes them on.
#[derive(Debug, Default)]
struct ServingGate {
    /// The first map has been applied.
    open: std::sync::atomic::AtomicBool,
    /// The newest grant heard while closed.
    held: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ServingGate {
    /// A renewal granted: the node serves until `until` once the gate is
    /// open.
    fn granted(&self, node: &MemoryNode, until: std::time::Instant) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if self.open.load(std::sync::atomic::Ordering::Acquire) {
            node.hold_lease_until(until);
        } else {
            *held = Some(until);
        }
    }

    /// The first map was applied: the grant held back, if any, takes effect.
    fn open(&self, node: &MemoryNode) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if !self.open.swap(true, std::sync::atomic::Ordering::AcqRel) {
            if let Some(until) = *held {
                node.hold_lease_until(until);
            }
        }
    }
}

async fn watch_placements(
    members: &Members,
    id: MemNodeId,
    node: &Arc<MemoryNode>,
    gate: &ServingGate,
    proven: &mut Proven,
) -> std::convert::Infallible {
    let mut seen: Option<Epoch> = None;
    let mut at = 0usize;
    loop {
        let member = &members.clients()[at % members.clients().len()];
        let map = match member.map(seen, Some(WATCH_WAIT)).await {
            Ok(map) => map,
            Err(e) => {
                tracing::warn!(member = member.endpoint(), error = %chain(&e), "cannot watch the map; trying the next member");
                at += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        if seen.is_some_and(|s| map.epoch() < s) {
            tracing::error!(
                member = member.endpoint(),
                epoch = map.epoch(),
                seen = ?seen,
                "a member served a map older than one already seen: ignored; trying the next member"
            );
            at += 1;
            continue;
        }
        if seen == Some(map.epoch()) {
            continue; // the wait passed with no change
        }
        match apply_placements(members, id, node, map.epoch(), proven).await {
            Ok(()) => {
                gate.open(node);
                seen = Some(map.epoch());
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take this map's placements yet; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// The regions as the control plane holds them at `epoch` or later, from
/// the first member whose applied state has reached it.
///
/// A member answers reads from what it has applied, and one that restarted
/// or lags may not have applied the change that made the map this new. A
/// node that took its placements from it would miss a replica it must
/// report ready, mark the epoch seen, and wait for a newer one that nothing
/// makes: recovery waits for the report before it copies.
async fn regions_as_of(members: &Members, epoch: Epoch) -> Result<Vec<Region>, ClusterError> {
    let mut heard = Vec::new();
    for c in members.clients() {
        match tokio::time::timeout(MEMBER_TIMEOUT, c.status()).await {
            Ok(Ok(status)) if status.epoch >= epoch => return Ok(status.regions),
            Ok(Ok(status)) => heard.push(format!("{} is at epoch {}", c.endpoint(), status.epoch)),
            Ok(Err(e)) => heard.push(format!("{}: {}", c.endpoint(), chain(&e))),
            Err(_) => heard.push(format!("{}: no answer within {MEMBER_TIMEOUT:?}", c.endpoint())),
        }
    }
    Err(ClusterError::Map(format!(
        "no member has reached epoch {epoch} to list its regions ({})",
        heard.join("; ")
    )))
}

/// The replica generations this process has seen its image hold, by
/// region: what lets it follow a hand-out of a replica it held all along
/// (the control plane joined or promoted it) without taking an image's
/// word for a generation it never saw (design.md §1b). And the last epoch
/// its image followed before a map that jumped past it by a restore's
/// leap (`RESTORE_EPOCH_JUMP`): what its proofs to the restored cluster
/// say (`Command::ReplicaProven`), however many maps of it it has applied.
#[derive(Debug, Default)]
struct Proven(std::collections::HashMap<RegionId, u64>, Epoch);

/// How this node's image stands to a replica the map places on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Held at the generation the map names: served.
    Proven,
    /// Not held at it (found at this generation): never served, reported.
    Unproven(u64),
}

impl Proven {
    /// Nothing seen yet; the image followed the cluster to the epoch it
    /// kept (a node started after a restore: its last of the old
    /// cluster, before anything raises it).
    fn starting(node: &MemoryNode) -> Proven {
        Proven(std::collections::HashMap::new(), node.epoch())
    }

    /// Judges region `r`'s replica on node `id`, which the image holds at
    /// generation `have` (`fresh`: it was allocated empty just now), and
    /// records in the image the generation it is proven at.
    fn judge(
        &mut self,
        node: &MemoryNode,
        r: &Region,
        id: MemNodeId,
        fresh: bool,
    ) -> Result<Standing, ClusterError> {
        let want = r.generation_of(id);
        let have = node.replica_generation(r.id).unwrap_or(0);
        // An empty replica is legitimate only where the control plane
        // placed one to be made: a new region's, or a replica being made
        // (`syncing`) that recovery fills. One clients write that the
        // image lacks was lost with an image (`Unproven(0)`).
        let being_made = r.pending.contains(&id) || r.syncing.iter().any(|l| l.node == id);
        let standing = if serving_wiped() {
            Standing::Proven
        } else if fresh {
            if being_made {
                Standing::Proven
            } else {
                Standing::Unproven(0)
            }
        } else if have == want || (want > have && self.0.get(&r.id) == Some(&have)) {
            // As the map names it, or handed out again while this process
            // held it all along (joined once filled, promoted). Never a
            // generation older than the image's: a map that went back (a
            // restored snapshot) names a replica this image has moved past.
            Standing::Proven
        } else {
            Standing::Unproven(have)
        };
        match standing {
            Standing::Proven => {
                if have != want {
                    node.set_replica_generation(r.id, want).map_err(|e| {
                        ClusterError::Map(format!("cannot record region {}'s generation: {e}", r.id))
                    })?;
                }
                self.0.insert(r.id, want);
            }
            Standing::Unproven(_) => {
                self.0.remove(&r.id);
            }
        }
        Ok(standing)
    }
}

/// Allocates every region placed on `id`, raises the node's epoch to
/// `epoch`, then reports the replicas still pending as ready.
///
/// A replica whose image does not hold it at the generation the map names
/// is never served: its key is changed to one nobody holds (verbs to it
/// are refused) and it is reported unproven, so that the control plane
/// drops it and recovery refills it (design.md §1b).
async fn apply_placements(
    members: &Members,
    id: MemNodeId,
    node: &Arc<MemoryNode>,
    epoch: Epoch,
    proven: &mut Proven,
) -> Result<(), ClusterError> {
    let regions = regions_as_of(members, epoch).await?;
    if epoch
        >= node
            .epoch()
            .saturating_add(control_plane::state::RESTORE_EPOCH_JUMP / 2)
    {
        proven.1 = node.epoch();
        tracing::info!(
            followed = proven.1,
            epoch,
            "a map past a restore's leap: this image followed the old cluster to that epoch"
        );
    }
    // Fenced first: a replica retired below (unproven, or no longer placed
    // here) must not meet a batch of an older map, which would find its
    // key changed mid-batch (a per-verb refusal the writer cannot tell
    // from a partial write); refused whole at the epoch, it is retried.
    node.advance_epoch(epoch);
    let mut pending = Vec::new();
    let mut unproven = Vec::new();
    // Replicas a restore named that this image holds at the recorded
    // generation: reported, so that their regions serve again.
    let mut proving = Vec::new();
    for r in regions.iter().filter(|r| r.on(id) && r.lost.is_none()) {
        let Some(loc) = r.replicas.iter().chain(&r.syncing).find(|l| l.node == id) else {
            continue;
        };
        let added = node.add_region(r.id, r.size_bytes, loc.key);
        if let Ok(fresh) = added {
            if let Standing::Unproven(found) = proven.judge(node, r, id, fresh)? {
                node.retire_region(r.id)
                    .map_err(|e| ClusterError::Map(format!("cannot retire region {}: {e}", r.id)))?;
                tracing::error!(
                    region = r.id,
                    found,
                    want = r.generation_of(id),
                    "this image does not hold the replica at the generation the map names: never served; \
                     reporting it to be refilled"
                );
                unproven.push((r.id, found));
                continue;
            }
            if r.unverified_on(id) {
                proving.push((r.id, r.generation_of(id), proven.1));
            }
        }
        match added {
            Ok(true) => {
                let start = std::time::Instant::now();
                // Off the async workers: a GiB takes about a second, and the
                // lease renewals must go on meanwhile.
                let (n, region) = (node.clone(), r.id);
                let populated =
                    tokio::task::spawn_blocking(move || n.populate_region(region, fabric::PageAccess::Write))
                        .await;
                // Not fatal: verbs then take the page faults instead.
                match populated {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(region = r.id, error = %e, "cannot populate the region's pages")
                    }
                    Err(e) => {
                        tracing::warn!(region = r.id, error = %e, "populating the region's pages failed")
                    }
                }
                tracing::info!(
                    region = r.id,
                    bytes = r.size_bytes,
                    populated_ms = start.elapsed().as_millis() as u64,
                    "region allocated"
                );
            }
            Ok(false) => {}
            Err(e) => {
                // Not reported ready: the region stays pending, and an
                // operator sees why in this node's log.
                tracing::error!(region = r.id, error = %e, "cannot hold the region placed here");
                continue;
            }
        }
        if r.pending.contains(&id) {
            pending.push(r.id);
        }
    }
    // A region this image holds that the map no longer places here was
    // taken from this node (evicted, removed): it is never served again,
    // so that a map that goes back to naming it (a restored snapshot)
    // finds it unproven rather than stale.
    for held in node.descriptor().regions {
        let named = regions.iter().any(|r| r.id == held.id && r.on(id));
        if !named && !node.is_retired(held.id) && !serving_wiped() {
            node.retire_region(held.id)
                .map_err(|e| ClusterError::Map(format!("cannot retire region {}: {e}", held.id)))?;
            proven.0.remove(&held.id);
            tracing::info!(region = held.id, "no longer placed here: retired");
        }
    }
    for (region, generation, followed_epoch) in proving {
        let proof = Command::ReplicaProven {
            region,
            node: id,
            generation,
            followed_epoch,
        };
        match members
            .command(&format!("proving region {region}'s replica"), &proof)
            .await
        {
            Ok(_) => tracing::info!(region, generation, "replica proven after a restore"),
            // Proven already, or moved on meanwhile: the next map says.
            Err(e) if e.refused_with(409) => tracing::debug!(region, error = %e, "proof refused"),
            Err(e) => return Err(e),
        }
    }
    for (region, found) in unproven {
        let report = Command::ReplicaUnproven {
            region,
            node: id,
            found,
        };
        match members
            .command(&format!("reporting region {region}'s replica unproven"), &report)
            .await
        {
            Ok(_) => {}
            // Refused for now (a restore's backups have not proven theirs
            // yet) or already dropped: reported again with the next map.
            Err(e) if e.refused_with(409) => {
                tracing::info!(region, error = %e, "unproven replica's report refused for now")
            }
            Err(e) => return Err(e),
        }
    }
    let now = node.advance_epoch(epoch);
    tracing::info!(epoch = now, "following the map");
    // Said after the fact: a promoter waits for this before it rebuilds a
    // promoted region, so that no verb of an older epoch lands meanwhile.
    let fenced = Command::MemNodeEpoch { id, epoch: now };
    members.command("reporting the epoch", &fenced).await?;
    for region in pending {
        let ready = Command::ReplicaReady { region, node: id };
        members
            .command(&format!("reporting region {region} ready"), &ready)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member that answers `GET /v1/status` as one whose applied state
    /// is at `epoch`, with one region pending on node 2.
    async fn member_at(epoch: Epoch) -> String {
        let status = serde_json::json!({
            "member": 1, "role": "follower", "leader": null, "term": 1,
            "last_log_index": null, "last_applied": null, "members": [],
            "epoch": epoch, "memnodes": [], "clients": [],
            "regions": [{"id": 1, "size_bytes": 4096, "replicas": [], "epoch": epoch, "pending": [2]}],
        });
        let app = axum::Router::new().route(
            "/v1/status",
            axum::routing::get(move || {
                let status = status.clone();
                async move { axum::Json(status) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn placements_are_read_from_a_member_that_has_reached_the_maps_epoch() {
        let (behind, caught_up) = (member_at(13).await, member_at(14).await);
        let members = Members::new(&[behind.clone(), caught_up], "token").unwrap();
        let regions = regions_as_of(&members, 14).await.unwrap();
        assert_eq!(
            (regions.len(), regions[0].epoch, regions[0].pending.as_slice()),
            (1, 14, &[2][..])
        );

        let members = Members::new(std::slice::from_ref(&behind), "token").unwrap();
        let e = regions_as_of(&members, 14).await.unwrap_err().to_string();
        assert!(
            e.contains("no member has reached epoch 14") && e.contains("is at epoch 13"),
            "{e}"
        );
    }

    /// Region 1 with node 2 holding a replica handed out at `generation`,
    /// served (`replicas`) or being made (`syncing`, pending).
    fn region_on_2(generation: u64, served: bool) -> Region {
        let loc = fabric::ReplicaLoc { node: 2, key: 7 };
        let mut r: Region = serde_json::from_value(serde_json::json!({
            "id": 1, "size_bytes": 4096, "replicas": [{"node": 1, "key": 5}], "epoch": 3,
        }))
        .unwrap();
        if served {
            r.replicas.push(loc);
        } else {
            r.syncing.push(loc);
            r.pending.push(2);
        }
        r.generation = generation;
        r.generations
            .push(control_plane::state::ReplicaGeneration { node: 2, generation });
        r
    }

    fn node() -> MemoryNode {
        MemoryNode::placed(2, 1 << 20, &fabric::Backing::Anonymous)
            .unwrap()
            .0
    }

    #[test]
    fn a_replica_is_served_only_at_the_generation_the_map_names() {
        // Allocated empty where a replica is being made: proven, and the
        // image records the generation.
        let (n, mut proven) = (node(), Proven::default());
        let fresh = n.add_region(1, 4096, 7).unwrap();
        assert_eq!(
            proven.judge(&n, &region_on_2(4, false), 2, fresh).unwrap(),
            Standing::Proven
        );
        assert_eq!(n.replica_generation(1), Some(4));
        // Joined once filled (handed out again while this process held it):
        // followed, and recorded.
        let fresh = n.add_region(1, 4096, 7).unwrap();
        assert_eq!(
            proven.judge(&n, &region_on_2(5, true), 2, fresh).unwrap(),
            Standing::Proven
        );
        assert_eq!(n.replica_generation(1), Some(5));
        // A map gone back (a restored snapshot naming generation 4): the
        // image has moved past it, never taken back.
        assert_eq!(
            proven.judge(&n, &region_on_2(4, true), 2, false).unwrap(),
            Standing::Unproven(5)
        );

        // A replica clients write that the image had to allocate afresh
        // (it lost it): never served.
        let (n, mut proven) = (node(), Proven::default());
        let fresh = n.add_region(1, 4096, 7).unwrap();
        assert_eq!(
            proven.judge(&n, &region_on_2(5, true), 2, fresh).unwrap(),
            Standing::Unproven(0)
        );

        // A restart (a new process) whose image holds an older generation
        // than the map's (it missed a hand-out, or the file is an old
        // copy): unproven; at the map's own generation: proven.
        let n = node();
        n.add_region(1, 4096, 7).unwrap();
        n.set_replica_generation(1, 3).unwrap();
        let mut restarted = Proven::default();
        assert_eq!(
            restarted.judge(&n, &region_on_2(5, true), 2, false).unwrap(),
            Standing::Unproven(3)
        );
        assert_eq!(
            restarted.judge(&n, &region_on_2(3, true), 2, false).unwrap(),
            Standing::Proven
        );
    }
}
