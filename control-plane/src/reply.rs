//! The error answers every route of a member shares: a status and a JSON
//! body `{"error": "...", "leader": "..."}` (the leader only where knowing it
//! helps the caller), and a JSON body extractor whose refusals take that
//! shape instead of axum's plain-text ones.

use axum::extract::rejection::JsonRejection;
use axum::extract::FromRequest;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// Where the leader can be reached (`host:port`), when the request has
    /// to go there and this member knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

/// A refusal: a status and its [`ErrorBody`].
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) body: ErrorBody,
}

impl Refusal {
    pub(crate) fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Refusal {
            status,
            body: ErrorBody {
                error: error.into(),
                leader: None,
            },
        }
    }

    pub(crate) fn with_leader(mut self, leader: Option<String>) -> Self {
        self.body.leader = leader;
        self
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// axum's `Json` with every rejection answered as a [`Refusal`]: 413 for an
/// oversized body (the client may shrink it), 400 for everything else the
/// sender got wrong (axum would say 415 or 422, which tell a caller nothing
/// more and leave it to parse a plain-text body).
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Refusal;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(json_refusal(rejection)),
        }
    }
}

fn json_refusal(rejection: JsonRejection) -> Refusal {
    let (status, what) = match &rejection {
        r if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            (StatusCode::PAYLOAD_TOO_LARGE, "request body is too large")
        }
        JsonRejection::MissingJsonContentType(_) => {
            (StatusCode::BAD_REQUEST, "expected content-type: application/json")
        }
        JsonRejection::JsonSyntaxError(_) => (StatusCode::BAD_REQUEST, "request body is not valid JSON"),
        JsonRejection::JsonDataError(_) => (
            StatusCode::BAD_REQUEST,
            "request body is not the expected request",
        ),
        _ => (StatusCode::BAD_REQUEST, "request body could not be read"),
    };
    tracing::debug!(%rejection, "request body refused");
    Refusal::new(status, format!("{what}: {}", rejection.body_text()))
}

/// axum's `Path` with a rejection answered as a 400 [`Refusal`] (axum's
/// own is plain text).
pub(crate) struct PathParam<T>(pub(crate) T);

impl<S, T> axum::extract::FromRequestParts<S> for PathParam<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Refusal> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(PathParam(value)),
            Err(rejection) => Err(Refusal::new(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

/// axum's `Query` with a rejection answered as a 400 [`Refusal`].
pub(crate) struct QueryParams<T>(pub(crate) T);

impl<S, T> axum::extract::FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Refusal> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(QueryParams(value)),
            Err(rejection) => Err(Refusal::new(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

/// An error and its sources on one line: reqwest's own message leaves out
/// the cause (a refused connection, a failed TLS handshake).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
