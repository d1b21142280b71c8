//! The serving side: three POST routes in front of a member's [`Raft`].

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use axum::{Json, Router};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;

use super::{
    ClusterSecret, ErrorBody, APPEND_PATH, RAFT_BODY_BYTES_MAX, SECRET_HEADER, SNAPSHOT_PATH, VOTE_PATH,
};
use crate::raft::{MemberId, Raft, TypeConfig};

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
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Raft RPCs are POST requests".to_owned(),
            ),
        )
    })
}

async fn append(
    _: Authenticated,
    State(state): State<RaftState>,
    RaftJson(rpc): RaftJson<AppendEntriesRequest<TypeConfig>>,
) -> Json<Result<AppendEntriesResponse<MemberId>, RaftError<MemberId>>> {
    Json(state.raft.append_entries(rpc).await)
}

async fn vote(
    _: Authenticated,
    State(state): State<RaftState>,
    RaftJson(rpc): RaftJson<VoteRequest<MemberId>>,
) -> Json<Result<VoteResponse<MemberId>, RaftError<MemberId>>> {
    Json(state.raft.vote(rpc).await)
}

async fn snapshot(
    _: Authenticated,
    State(state): State<RaftState>,
    RaftJson(rpc): RaftJson<InstallSnapshotRequest<TypeConfig>>,
) -> Json<Result<InstallSnapshotResponse<MemberId>, RaftError<MemberId, InstallSnapshotError>>> {
    Json(state.raft.install_snapshot(rpc).await)
}

/// A refusal: a status and the message of its `{"error": "..."}` body.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: String) -> Self {
        Self { status, message }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.message })).into_response()
    }
}

/// Proof that the request carried the cluster secret. Being a parts
/// extractor listed before the body, it runs before any of the body is read.
struct Authenticated;

impl FromRequestParts<RaftState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &RaftState) -> Result<Self, Self::Rejection> {
        let Some(presented) = parts.headers.get(SECRET_HEADER) else {
            tracing::warn!(uri = %parts.uri, "raft rpc without a cluster secret");
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                format!("missing {SECRET_HEADER} header"),
            ));
        };
        if !state.secret.matches(presented.as_bytes()) {
            tracing::warn!(uri = %parts.uri, "raft rpc with a wrong cluster secret");
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "wrong cluster secret".to_owned(),
            ));
        }
        Ok(Authenticated)
    }
}

/// axum's `Json` with every rejection answered as a JSON error: 413 for an
/// oversized body (the client may shrink it), 400 for everything else the
/// sender got wrong (axum would say 415 or 422, which tell a peer nothing
/// more and leave it to parse a plain-text body).
struct RaftJson<T>(T);

impl<S, T> FromRequest<S> for RaftJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(RaftJson(value)),
            Err(rejection) => Err(json_refusal(rejection)),
        }
    }
}

fn json_refusal(rejection: JsonRejection) -> ApiError {
    let (status, what) = match &rejection {
        r if r.status() == StatusCode::PAYLOAD_TOO_LARGE => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds {RAFT_BODY_BYTES_MAX} bytes"),
        ),
        JsonRejection::MissingJsonContentType(_) => (
            StatusCode::BAD_REQUEST,
            "expected content-type: application/json".to_owned(),
        ),
        JsonRejection::JsonSyntaxError(_) => (
            StatusCode::BAD_REQUEST,
            "request body is not valid JSON".to_owned(),
        ),
        JsonRejection::JsonDataError(_) => (
            StatusCode::BAD_REQUEST,
            "request body is not the expected Raft request".to_owned(),
        ),
        _ => (
            StatusCode::BAD_REQUEST,
            "request body could not be read".to_owned(),
        ),
    };
    tracing::debug!(%rejection, "raft rpc body refused");
    ApiError::new(status, format!("{what}: {}", rejection.body_text()))
}
