//! The serving side: three POST routes in front of a member's [`Raft`].

use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::routing::{post, MethodRouter};
use axum::{Json, Router};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use super::{ClusterSecret, APPEND_PATH, RAFT_BODY_BYTES_MAX, SECRET_HEADER, SNAPSHOT_PATH, VOTE_PATH};
use crate::raft::{MemberId, Raft, TypeConfig};
use crate::reply::{JsonBody, Refusal};

/// The routes `POST /raft/append`, `/raft/vote` and `/raft/snapshot`, which
/// hand authenticated requests to `raft` and answer the JSON of its
/// `Result<response, RaftError>`.
///
/// Refusals never reach `raft` and answer `{"error": "..."}`: 401 for a
/// missing or wrong secret (checked before the body is read), 400 for a body
/// that is not JSON of the expected request or lacks the JSON content type,
/// 413 for a body over [`RAFT_BODY_BYTES_MAX`], 405 for another method.
///
/// The router has no fallback of its own, so it can be merged with other
/// routers (the operator API) on the same listener.
pub fn raft_router(raft: Raft, secret: ClusterSecret) -> Router {
    Router::new()
        .route(APPEND_PATH, only_post(post(append)))
        .route(VOTE_PATH, only_post(post(vote)))
        .route(SNAPSHOT_PATH, only_post(post(snapshot)))
        .layer(DefaultBodyLimit::max(RAFT_BODY_BYTES_MAX))
        .with_state(RaftState { raft, secret })
}

/// What the handlers share.
#[derive(Clone)]
struct RaftState {
    raft: Raft,
    secret: ClusterSecret,
}

/// Gives a route's 405 the same JSON error body as every other refusal
/// (axum's own is empty), keeping the `Allow` header HTTP asks of a 405.
fn only_post(route: MethodRouter<RaftState>) -> MethodRouter<RaftState> {
    route.fallback(|| async {
        (
            [(header::ALLOW, "POST")],
            Refusal::new(StatusCode::METHOD_NOT_ALLOWED, "Raft RPCs are POST requests"),
        )
    })
}

async fn append(
    _: Authenticated,
    State(state): State<RaftState>,
    JsonBody(rpc): JsonBody<AppendEntriesRequest<TypeConfig>>,
) -> Json<Result<AppendEntriesResponse<MemberId>, RaftError<MemberId>>> {
    Json(state.raft.append_entries(rpc).await)
}

async fn vote(
    _: Authenticated,
    State(state): State<RaftState>,
    JsonBody(rpc): JsonBody<VoteRequest<MemberId>>,
) -> Json<Result<VoteResponse<MemberId>, RaftError<MemberId>>> {
    Json(state.raft.vote(rpc).await)
}

async fn snapshot(
    _: Authenticated,
    State(state): State<RaftState>,
    JsonBody(rpc): JsonBody<InstallSnapshotRequest<TypeConfig>>,
) -> Json<Result<InstallSnapshotResponse<MemberId>, RaftError<MemberId, InstallSnapshotError>>> {
    Json(state.raft.install_snapshot(rpc).await)
}
/// Proof that the request carried the cluster secret. Being a parts
/// extractor listed before the body, it runs before any of the body is read.
struct Authenticated;

impl FromRequestParts<RaftState> for Authenticated {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &RaftState) -> Result<Self, Self::Rejection> {
        let Some(presented) = parts.headers.get(SECRET_HEADER) else {
            tracing::warn!(uri = %parts.uri, "raft rpc without a cluster secret");
            return Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                format!("missing {SECRET_HEADER} header"),
            ));
        };
        if !state.secret.matches(presented.as_bytes()) {
            tracing::warn!(uri = %parts.uri, "raft rpc with a wrong cluster secret");
            return Err(Refusal::new(StatusCode::UNAUTHORIZED, "wrong cluster secret"));
        }
        Ok(Authenticated)
    }
}
