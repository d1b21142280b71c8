//! The API's routes, its bearer-token check and the forwarding of writes
//! to the leader.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use fabric::{ClusterMap, Epoch};
use serde::Deserialize;

use super::operations;
use super::{
    AddMember, AdmissionView, AnnouncedOwners, CredentialRequest, InitRequest, IssuedCredential,
    ReclaimReadiness, Renewed, Status, API_BODY_BYTES_MAX, AUDIT_LIMIT_DEFAULT, FORWARDED_HEADER,
    RESTORE_PATH, SNAPSHOT_BYTES_MAX,
};
use crate::config::{millis, Role};
use crate::member::{Leader, Node, WriteError};
use crate::raft::MemberId;
use crate::reply::{JsonBody, PathParam, QueryParams, Refusal};
use crate::state::{
    AuditEntry, Client, ClientId, ClientState, Command, CommandError, IndexRecord, MemNode, MemNodeId,
    MemNodeState, Outcome, Region,
};

type Shared = Arc<Node>;

/// Who is asking: the name and role of the token presented.
#[derive(Clone, Debug)]
pub(super) struct Actor(pub(super) String, pub(super) Role);

/// The `/v1` routes, behind the bearer-token check; writes behind the
/// forwarding to the leader. Unknown paths and methods get JSON errors too.
pub(crate) fn api_router(node: Shared) -> Router {
    let writes = Router::new()
        .route("/v1/commands", post(command))
        .route("/v1/memnodes/{id}/renew", post(renew_memnode))
        .route("/v1/clients/{id}/renew", post(renew_client))
        .route("/v1/clients/{id}/reclaim", get(reclaim_readiness))
        .route("/v1/admission", post(issue_credential))
        .route_layer(middleware::from_fn_with_state(node.clone(), to_leader));
    // Checked for the admin role before anything is forwarded.
    let membership = Router::new()
        .route("/v1/members", post(add_member))
        .route("/v1/members/{id}", delete(remove_member))
        .route_layer(middleware::from_fn_with_state(node.clone(), to_leader))
        .route_layer(middleware::from_fn(admin_only));
    let init = Router::new()
        .route("/v1/init", post(init))
        .route("/v1/campaign", post(operations::campaign))
        .route_layer(middleware::from_fn(admin_only));
    // Served by the leader: a snapshot is its applied state; a restore and
    // a hand-over are its to make.
    let leader_reads = Router::new()
        .route("/v1/snapshot", get(operations::snapshot))
        .route_layer(middleware::from_fn_with_state(node.clone(), to_leader));
    let leader_admin = Router::new()
        .route(
            RESTORE_PATH,
            post(operations::restore).layer(DefaultBodyLimit::max(SNAPSHOT_BYTES_MAX)),
        )
        .route("/v1/leader", post(operations::transfer_leader))
        .route_layer(middleware::from_fn_with_state(node.clone(), to_leader))
        .route_layer(middleware::from_fn(admin_only));
    let reads = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/admission", get(admission_view))
        .route("/v1/map", get(map))
        .route("/v1/memnodes", get(memnodes))
        .route("/v1/regions", get(regions))
        .route("/v1/clients", get(clients))
        .route("/v1/indexes", get(indexes))
        .route("/v1/audit", get(audit))
        .route("/v1/check", get(operations::check));
    reads
        .merge(writes)
        .merge(membership)
        .merge(init)
        .merge(leader_reads)
        .merge(leader_admin)
        .route_layer(middleware::from_fn_with_state(node.clone(), authenticate))
        .layer(DefaultBodyLimit::max(API_BODY_BYTES_MAX))
        .fallback(|| async { Refusal::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            Refusal::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
        })
        .with_state(node)
}

/// Lets a request through only with `Authorization: Bearer <token>` of a
/// configured token, and records the token's name as its actor.
async fn authenticate(State(node): State<Shared>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
        .map(|v| &v[7..]);
    let Some(presented) = presented else {
        return unauthorized("missing `Authorization: Bearer <token>` header");
    };
    let Some(name) = node.settings.token_holder(presented) else {
        tracing::warn!(uri = %req.uri(), "api request with an unknown token");
        return unauthorized("unknown bearer token");
    };
    let actor = Actor(name.name.clone(), name.role);
    req.extensions_mut().insert(actor);
    next.run(req).await
}

fn unauthorized(why: &str) -> Response {
    let mut resp = Refusal::new(StatusCode::UNAUTHORIZED, why).into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// Lets only admin tokens form the cluster or change its members.
async fn admin_only(req: Request, next: Next) -> Response {
    match req.extensions().get::<Actor>() {
        Some(Actor(_, Role::Admin)) => next.run(req).await,
        Some(Actor(name, _)) => Refusal::new(
            StatusCode::FORBIDDEN,
            format!("token {name:?} may not change the membership: it needs role = \"admin\""),
        )
        .into_response(),
        // `authenticate` runs first; without an actor, refuse anyway.
        None => unauthorized("missing `Authorization: Bearer <token>` header"),
    }
}

/// Runs a write here if this member leads, else forwards it to the leader
/// once (see the module docs of [`crate::api`]).
async fn to_leader(State(node): State<Shared>, req: Request, next: Next) -> Response {
    match node.leader() {
        Leader::Me => next.run(req).await,
        Leader::At(addr) if !req.headers().contains_key(FORWARDED_HEADER) => forward(&node, &addr, req).await,
        Leader::At(addr) => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("member {} does not lead; send the request to the leader", node.id),
        )
        .with_leader(Some(addr))
        .into_response(),
        Leader::Unknown => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "member {} knows of no leader (an election may be under way); retry",
                node.id
            ),
        )
        .into_response(),
    }
}

/// Sends `req` on to the leader at `addr` and relays its answer.
async fn forward(node: &Node, addr: &str, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let limit = if parts.uri.path() == RESTORE_PATH {
        SNAPSHOT_BYTES_MAX
    } else {
        API_BODY_BYTES_MAX
    };
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "request body is too large").into_response()
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}://{addr}{path}", node.scheme());
    let mut out = node.http.request(parts.method.clone(), &url).body(bytes);
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE] {
        if let Some(v) = parts.headers.get(&name) {
            out = out.header(name, v.clone());
        }
    }
    // The leader may need its whole commit timeout, or a whole membership
    // change; a little more lets its own answer arrive first.
    let timing = &node.settings.timing;
    let leader_wait = if parts.uri.path().starts_with("/v1/members") {
        timing.membership_timeout()
    } else {
        timing.commit_timeout
    };
    let limit = leader_wait + timing.commit_timeout / 2;
    let sent = out
        .header(FORWARDED_HEADER, node.id.to_string())
        .timeout(limit)
        .send()
        .await;
    let reply = match sent {
        Ok(reply) => reply,
        Err(e) => {
            return Refusal::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "forwarding to the leader at {addr} failed: {}",
                    crate::reply::chain(&e)
                ),
            )
            .with_leader(Some(addr.to_owned()))
            .into_response()
        }
    };
    let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = reply.headers().get(header::CONTENT_TYPE).cloned();
    match reply.bytes().await {
        Ok(body) => {
            let mut resp = (status, Body::from(body)).into_response();
            if let Some(ct) = content_type {
                resp.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            resp
        }
        Err(e) => Refusal::new(
            StatusCode::BAD_GATEWAY,
            format!("reading the leader's answer failed: {e}"),
        )
        .into_response(),
    }
}

impl From<WriteError> for Refusal {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Refused(e) => {
                let status = match e {
                    CommandError::UnknownMemNode { .. }
                    | CommandError::UnknownRegion { .. }
                    | CommandError::UnknownClient { .. }
                    | CommandError::UnknownIndex { .. } => StatusCode::NOT_FOUND,
                    CommandError::Invalid(_) => StatusCode::BAD_REQUEST,
                    CommandError::Conflict(_) | CommandError::Placement { .. } | CommandError::Full(_) => {
                        StatusCode::CONFLICT
                    }
                };
                Refusal::new(status, e.to_string())
            }
            WriteError::NotLeader(leader) => Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "this member lost the lead; send the request to the leader",
            )
            .with_leader(leader),
            WriteError::Timeout(after) => Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not committed within {}: no majority reachable? The write may still commit",
                    humantime::format_duration(after)
                ),
            ),
            WriteError::Membership(why) => Refusal::new(StatusCode::CONFLICT, why),
            WriteError::NoQuorum(why) => Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this member cannot confirm with a quorum that it leads: {why}"),
            ),
            WriteError::Stopped(why) => Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("raft has stopped: {why}"),
            ),
            WriteError::Unanswered => Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "raft dropped the request without an answer (the lead changed under it?): the write may still \
                 commit; retry",
            ),
            WriteError::HandingOver => Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "this member is handing the lead to another: try again once it leads",
            ),
        }
    }
}

async fn command(
    State(node): State<Shared>,
    Extension(Actor(actor, role)): Extension<Actor>,
    JsonBody(command): JsonBody<Command>,
) -> Result<Json<Outcome>, Refusal> {
    if role == Role::Client && !command.for_clients() {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "token {actor:?} has role \"client\": it may register clients and open indexes, not change \
                 memory nodes or regions (that needs role \"operator\")"
            ),
        ));
    }
    if let Command::Restore { .. } = command {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("a restore goes to POST {RESTORE_PATH} (admin), which checks the snapshot's format and digest"),
        ));
    }
    Ok(Json(node.propose(&actor, command).await?))
}

/// `POST /v1/memnodes/{id}/renew` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemNodeRenewQuery {
    /// The image the node serves from: refused if its record names
    /// another.
    image: Option<fabric::ImageId>,
}

async fn renew_memnode(
    State(node): State<Shared>,
    PathParam(id): PathParam<MemNodeId>,
    QueryParams(q): QueryParams<MemNodeRenewQuery>,
) -> Result<Json<Renewed>, Refusal> {
    let mut timer = crate::metrics::RenewalTimer::start(node.id, "memnode");
    let term = node.confirm_lead().await?;
    let known = node
        .reader
        .with_state(|s| s.memnodes.get(&id).map(|n| (n.state, n.image)));
    match known {
        None => Err(WriteError::Refused(CommandError::UnknownMemNode { id }).into()),
        Some((_, Some(recorded))) if q.image.is_some_and(|i| i != recorded) => Err(Refusal::new(
            StatusCode::CONFLICT,
            format!(
                "memory node {id} is recorded with image {recorded}, not {}: a node with another image holds \
                 none of its replicas; register again",
                q.image.map(|i| i.to_string()).unwrap_or_default()
            ),
        )),
        Some((MemNodeState::Dead, _)) => Err(Refusal::new(
            StatusCode::CONFLICT,
            format!("memory node {id} was declared dead; register it again"),
        )),
        Some(_) => {
            let mut liveness = node.liveness();
            if liveness.memnode_going(id) {
                return Err(going(format!("memory node {id}")));
            }
            liveness.renew_memnode(id, Instant::now(), term);
            timer.granted();
            Ok(Json(Renewed {
                lease_ms: millis(node.settings.timing.memnode_lease),
                reclaim_seq: 0,
                announced: Vec::new(),
            }))
        }
    }
}

/// `POST /v1/clients/{id}/renew` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewQuery {
    /// How far the client has quiesced (`txn::quiesce`).
    quiesced: Option<u64>,
    /// When the renewing client registered: refused if the record under
    /// its id is another registration.
    registered_at_ms: Option<u64>,
}

async fn renew_client(
    State(node): State<Shared>,
    PathParam(id): PathParam<ClientId>,
    QueryParams(q): QueryParams<RenewQuery>,
) -> Result<Json<Renewed>, Refusal> {
    let mut timer = crate::metrics::RenewalTimer::start(node.id, "client");
    let term = node.confirm_lead().await?;
    // One read: the sequence and the announced ids of the same state.
    let known = node.reader.with_state(|s| {
        s.clients.get(&id).map(|c| {
            let announced: Vec<AnnouncedOwners> = s
                .clients
                .values()
                .filter_map(|c| match c.state {
                    ClientState::Expired { seq, .. } => Some(AnnouncedOwners {
                        owners: c.owners,
                        seq,
                    }),
                    ClientState::Live => None,
                })
                .collect();
            (c.state, c.lease_ms, s.reclaim_seq, announced, c.registered_at_ms)
        })
    });
    match known {
        None => Err(WriteError::Refused(CommandError::UnknownClient { id }).into()),
        Some((.., registered)) if q.registered_at_ms.is_some_and(|t| t != registered) => Err(Refusal::new(
            StatusCode::CONFLICT,
            format!(
                "client {id} is another registration (at {registered} ms, not {} ms): the cluster's state was \
                 restored; register again",
                q.registered_at_ms.unwrap_or_default()
            ),
        )),
        Some((ClientState::Expired { at_ms, .. }, ..)) => Err(Refusal::new(
            StatusCode::CONFLICT,
            format!("client {id} expired at {at_ms} ms; register again"),
        )),
        Some((ClientState::Live, lease_ms, reclaim_seq, announced, _)) => {
            let mut liveness = node.liveness();
            if liveness.client_going(id) {
                return Err(going(format!("client {id}")));
            }
            liveness.renew_client(id, Instant::now(), term);
            if let Some(q) = q.quiesced {
                // A report past what the state has numbered is a bug or
                // a lie; it is capped, so it cannot hurry a reclaim.
                liveness.report_quiesced(id, q.min(reclaim_seq));
            }
            timer.granted();
            Ok(Json(Renewed {
                lease_ms,
                reclaim_seq,
                announced,
            }))
        }
    }
}

/// Whether expired client `id`'s owner ids may be reclaimed: every live
/// client has reported quiescence to its expiry (`txn::quiesce`). Served by
/// the leader, which hears the reports.
/// `GET /v1/admission`: the key and the fence a memory node admits by, as
/// this member's state has them (a lagging member's fence is older, which a
/// node only acknowledges as older). Not for clients' tokens: the key
/// checks every credential.
async fn admission_view(
    State(node): State<Shared>,
    Extension(Actor(actor, role)): Extension<Actor>,
) -> Result<Json<AdmissionView>, Refusal> {
    if role == Role::Client {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!("token {actor:?} has role \"client\": the admission key is for memory nodes (role \"operator\")"),
        ));
    }
    let fence = node.reader.with_state(|s| s.fence_view());
    let key = node.settings.cluster_secret.admission_key();
    Ok(Json(AdmissionView {
        key: fabric::admission::hex(&key.to_bytes()),
        fence,
    }))
}

/// `POST /v1/admission`: a credential for a live client (any token), or a
/// service credential (operators and admins). Served by the leader, whose
/// state has every registration it acknowledged.
async fn issue_credential(
    State(node): State<Shared>,
    Extension(Actor(actor, role)): Extension<Actor>,
    JsonBody(req): JsonBody<CredentialRequest>,
) -> Result<Json<IssuedCredential>, Refusal> {
    let holder = match req.client {
        None if role == Role::Client => {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                "token {actor:?} has role \"client\": it may ask for a registered client's credential only"
            ),
            ))
        }
        None => fabric::Holder::Service { id: 0 },
        Some(id) => {
            let client = node.reader.with_state(|s| s.clients.get(&id).cloned());
            match client {
                Some(c) if c.state == ClientState::Live => fabric::Holder::Client {
                    id,
                    owners_first: c.owners.first,
                    owners_count: c.owners.count,
                },
                Some(_) => {
                    return Err(Refusal::new(
                        StatusCode::CONFLICT,
                        format!("client {id} has expired: join again as a new client"),
                    ))
                }
                None => return Err(WriteError::Refused(CommandError::UnknownClient { id }).into()),
            }
        }
    };
    let credential = node.settings.cluster_secret.admission_key().issue(holder);
    tracing::debug!(%actor, %holder, "admission credential issued");
    Ok(Json(IssuedCredential {
        credential: credential.to_hex(),
    }))
}

async fn reclaim_readiness(
    State(node): State<Shared>,
    PathParam(id): PathParam<ClientId>,
) -> Result<Json<ReclaimReadiness>, Refusal> {
    node.confirm_lead().await?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let known = node.reader.with_state(|s| {
        s.clients.get(&id).map(|c| {
            let others: Vec<Client> = s.clients.values().filter(|o| o.id != id).cloned().collect();
            let unfenced = match c.state {
                ClientState::Expired { seq, .. } => s.unfenced(seq),
                ClientState::Live => Vec::new(),
            };
            (c.state, others, unfenced)
        })
    });
    match known {
        None => Err(WriteError::Refused(CommandError::UnknownClient { id }).into()),
        Some((ClientState::Live, _, _)) => Err(Refusal::new(
            StatusCode::CONFLICT,
            format!("client {id} is live: only an expired client's owner ids are reclaimed"),
        )),
        Some((ClientState::Expired { seq, .. }, others, unfenced)) => {
            let liveness = node.liveness();
            let mut readiness = ReclaimReadiness {
                seq,
                waiting: Vec::new(),
                finish_first: Vec::new(),
                unfenced,
            };
            for c in others {
                if liveness.quiesced(c.id).is_some_and(|q| q >= seq) {
                    continue;
                }
                match c.state {
                    ClientState::Expired { at_ms, .. } if now_ms >= at_ms.saturating_add(c.lease_ms) => {
                        readiness.finish_first.push(c.owners);
                    }
                    _ => readiness.waiting.push(c.id),
                }
            }
            Ok(Json(readiness))
        }
    }
}

/// The answer to a renewal that arrives while its holder's death or expiry
/// is being committed: neither "renewed" (the decision may commit) nor
/// "gone" (it may not). The holder retries and learns which.
fn going(holder: String) -> Refusal {
    Refusal::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{holder}'s lease lapsed and the decision is being committed; retry"),
    )
}

async fn add_member(
    State(node): State<Shared>,
    JsonBody(m): JsonBody<AddMember>,
) -> Result<Json<Vec<super::MemberInfo>>, Refusal> {
    let info = super::MemberInfo {
        id: m.id,
        addr: m.addr,
        voter: m.voter,
    };
    check_member_addr(&info.addr)?;
    Ok(Json(node.add_member(&info).await?))
}

async fn remove_member(
    State(node): State<Shared>,
    PathParam(id): PathParam<MemberId>,
) -> Result<Json<Vec<super::MemberInfo>>, Refusal> {
    Ok(Json(node.remove_member(id).await?))
}

/// Refuses a member address that is not `host:port` (a hostname or IP, a
/// port above 0, nothing else): the leader will send that member its log.
fn check_member_addr(addr: &str) -> Result<(), Refusal> {
    if super::is_member_addr(addr) {
        Ok(())
    } else {
        Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("member address {addr:?} is not host:port"),
        ))
    }
}

/// The body is optional: none forms a cluster of this member alone.
async fn init(State(node): State<Shared>, body: axum::body::Bytes) -> Result<Json<Status>, Refusal> {
    let request: InitRequest = if body.iter().all(u8::is_ascii_whitespace) {
        InitRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                format!("request body is not the expected request: {e}"),
            )
        })?
    };
    for m in &request.members {
        check_member_addr(&m.addr)?;
    }
    node.init(&request.members).await?;
    Ok(Json(status_of(&node)))
}

async fn status(State(node): State<Shared>) -> Json<Status> {
    Json(status_of(&node))
}

fn status_of(node: &Node) -> Status {
    let (role, leader, term, last_log_index) = {
        let metrics = node.raft.metrics();
        let m = metrics.borrow();
        (
            operations::role_name(m.state),
            m.current_leader,
            m.current_term,
            m.last_log_index,
        )
    };
    let members = node.members();
    let last_applied = node.reader.last_applied().map(|id| id.index);
    let clock_ms = node.cluster_clock_ms();
    node.reader.with_state(|s| Status {
        clock_ms,
        member: node.id,
        role: role.to_owned(),
        leader,
        term,
        last_log_index,
        last_applied,
        members,
        epoch: s.epoch,
        memnodes: s.memnodes.values().cloned().collect(),
        regions: s.regions.values().cloned().collect(),
        clients: s.clients.values().cloned().collect(),
        indexes: s.indexes.values().cloned().collect(),
    })
}

/// `GET /v1/map` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapQuery {
    /// Answer only once the epoch exceeds this (or `wait` passes).
    after_epoch: Option<Epoch>,
    /// Longest wait, humantime (`30s`); capped by `timing.watch_max`.
    wait: Option<String>,
}

async fn map(
    State(node): State<Shared>,
    QueryParams(q): QueryParams<MapQuery>,
) -> Result<Json<ClusterMap>, Refusal> {
    let max = node.settings.timing.watch_max;
    let wait = match q.wait.as_deref() {
        None => max,
        Some(text) => humantime::parse_duration(text)
            .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, format!("wait={text:?}: {e}")))?
            .min(max),
    };
    if let Some(after) = q.after_epoch {
        let mut epochs = node.reader.watch_epoch();
        let mut stopped = node.stopped.clone();
        // Whichever comes first: a newer epoch, the wait, or shutdown; the
        // current map is the answer in every case.
        tokio::select! {
            _ = epochs.wait_for(|&e| e > after) => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.wait_for(|&s| s) => {}
        }
    }
    node.reader.with_state(|s| s.map()).map(Json).map_err(|e| {
        Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the state makes no valid map: {e}"),
        )
    })
}

async fn memnodes(State(node): State<Shared>) -> Json<Vec<MemNode>> {
    Json(node.reader.with_state(|s| s.memnodes.values().cloned().collect()))
}

async fn regions(State(node): State<Shared>) -> Json<Vec<Region>> {
    Json(node.reader.with_state(|s| s.regions.values().cloned().collect()))
}

async fn clients(State(node): State<Shared>) -> Json<Vec<Client>> {
    Json(node.reader.with_state(|s| s.clients.values().cloned().collect()))
}

async fn indexes(State(node): State<Shared>) -> Json<Vec<IndexRecord>> {
    Json(node.reader.with_state(|s| s.indexes.values().cloned().collect()))
}

/// `GET /v1/audit` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    /// Newest entries to return.
    limit: Option<usize>,
}

async fn audit(
    State(node): State<Shared>,
    QueryParams(q): QueryParams<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>, Refusal> {
    let limit = q.limit.unwrap_or(AUDIT_LIMIT_DEFAULT);
    Ok(Json(node.reader.with_state(|s| {
        let skip = s.audit.len().saturating_sub(limit);
        s.audit.iter().skip(skip).cloned().collect()
    })))
}
