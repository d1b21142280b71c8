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
use fabric::{Epoch, MemoryNode};

use crate::members::{chain, Members, MEMBER_TIMEOUT};
use crate::ClusterError;

/// Longest long poll of the map; the member caps it with its `watch_max`.
pub const WATCH_WAIT: Duration = Duration::from_secs(30);

/// Pause after a failed watch or report before the next try.
pub const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Registers the memory node at `endpoint` offering `capacity_bytes`, or
/// finds its record by endpoint (a node that restarts keeps its id).
/// Retries until a member answers; a refusal other than "registered
/// already" is returned.
pub async fn register(
    members: &Members,
    endpoint: &str,
    capacity_bytes: u64,
) -> Result<MemNodeId, ClusterError> {
    let register = Command::RegisterMemNode {
        endpoint: endpoint.to_owned(),
        capacity_bytes,
    };
    let what = format!("registering memory node {endpoint}");
    loop {
        match try_register(members, endpoint, &what, &register).await? {
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
    what: &str,
    register: &Command,
) -> Result<Option<MemNodeId>, ClusterError> {
    match members.command(what, register).await {
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
) -> Result<(), ClusterError> {
    let id = loop {
        match register(&members, &endpoint, capacity_bytes).await {
            Ok(id) => break id,
            Err(e @ ClusterError::Unreachable { .. }) => {
                tracing::warn!(error = %e, "cannot register with the control plane; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    };
    tracing::info!(memnode = id, %endpoint, "registered with the control plane");
    keep_lease(
        members.clients(),
        Leaseholder::MemNode(id),
        std::future::pending(),
    )
    .await
    .map_err(|e| ClusterError::LeaseLost(chain(&e)))
}

/// Serves placements to `node` (memory node `id`) until the lease is lost
/// (returned as an error) or the caller drops the future.
pub async fn follow(members: Members, id: MemNodeId, node: Arc<MemoryNode>) -> Result<(), ClusterError> {
    // The node serves verbs only until it could have been declared dead
    // (`MemoryNode::hold_lease_until`, `memnode_serves_until`): one paused
    // or cut off that long may have been replaced, and must not serve what
    // clients sent it before. Nor before its first grant: a node reopened
    // from its image holds regions it may since have lost.
    node.hold_lease_until(std::time::Instant::now());
    let lease = keep_lease_with(
        members.clients(),
        Leaseholder::MemNode(id),
        None,
        std::future::pending(),
        |sent, lease| node.hold_lease_until(memnode_serves_until(sent, lease)),
    );
    let watch = watch_placements(&members, id, &node);
    tokio::select! {
        lost = lease => match lost {
            Ok(()) => Ok(()),
            Err(e) => {
                fence_at_the_clusters_epoch(&members, &node).await;
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
    loop {
        match follow(members.clone(), id, node.clone()).await {
            Err(ClusterError::LeaseLost(why)) => {
                tracing::warn!(memnode = id, %why, "lease lost; registering again");
            }
            other => return other,
        }
        let again = register(&members, &endpoint, capacity_bytes).await?;
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
async fn fence_at_the_clusters_epoch(members: &Members, node: &MemoryNode) {
    let mut newest = None;
    for c in members.clients() {
        if let Ok(Ok(status)) = tokio::time::timeout(MEMBER_TIMEOUT, c.status()).await {
            newest = newest.max(Some(status.epoch));
        }
    }
    if let Some(epoch) = newest {
        let now = node.advance_epoch(epoch);
        tracing::warn!(epoch = now, "lease lost: fenced clients with older maps");
    }
}

async fn watch_placements(
    members: &Members,
    id: MemNodeId,
    node: &Arc<MemoryNode>,
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
        match apply_placements(members, id, node, map.epoch()).await {
            Ok(()) => seen = Some(map.epoch()),
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

/// Allocates every region placed on `id`, raises the node's epoch to
/// `epoch`, then reports the replicas still pending as ready.
async fn apply_placements(
    members: &Members,
    id: MemNodeId,
    node: &Arc<MemoryNode>,
    epoch: Epoch,
) -> Result<(), ClusterError> {
    let regions = regions_as_of(members, epoch).await?;
    let mut pending = Vec::new();
    for r in regions.iter().filter(|r| r.on(id)) {
        let Some(loc) = r.replicas.iter().chain(&r.syncing).find(|l| l.node == id) else {
            continue;
        };
        match node.add_region(r.id, r.size_bytes, loc.key) {
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
}
