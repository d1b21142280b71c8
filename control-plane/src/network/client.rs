//! The calling side: openraft's network factory over one shared
//! `reqwest::Client`.

use std::error::Error as StdError;
use std::time::Duration;

use openraft::error::{
    Infallible, InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use reqwest::header::HeaderValue;
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::reply::ErrorBody;

use super::{
    ClusterSecret, Partition, TransportError, APPEND_PATH, RAFT_RESPONSE_BYTES_MAX, SECRET_HEADER,
    SNAPSHOT_PATH, VOTE_PATH,
};
use crate::raft::{MemberId, TypeConfig};

/// The error of one RPC, as openraft wants it.
type RpcResult<T, E> = Result<T, RPCError<MemberId, BasicNode, RaftError<MemberId, E>>>;

/// Makes an [`HttpNetwork`] per peer; every one shares the connection pool
/// of a single `reqwest::Client`.
#[derive(Clone)]
pub struct HttpNetworkFactory {
    me: MemberId,
    http: reqwest::Client,
    secret: HeaderValue,
    partition: Partition,
    retry_pause: Duration,
    scheme: &'static str,
}

/// How long openraft waits before retrying a peer it could not reach, unless
/// [`HttpNetworkFactory::with_retry_pause`] sets it. openraft's own default
/// (500 ms) lets a restarted member's election timer fire before the leader
/// tries it again, and with no pre-vote in openraft 0.9 that member's higher
/// term deposes a healthy leader.
pub const RETRY_PAUSE_DEFAULT: Duration = Duration::from_millis(50);

impl HttpNetworkFactory {
    /// A factory for member `me` (named in the timeout errors it reports)
    /// that sends `secret` with every RPC.
    pub fn new(me: MemberId, secret: &ClusterSecret) -> Result<Self, TransportError> {
        let http = reqwest::Client::builder()
            // Heartbeats are tiny and latency-bound: Nagle would hold them.
            .tcp_nodelay(true)
            .build()
            .map_err(TransportError::Client)?;
        Ok(Self::with_client(me, secret, http))
    }

    /// Like [`HttpNetworkFactory::new`] over a client the caller configured
    /// (or shares with other parts of the process).
    pub fn with_client(me: MemberId, secret: &ClusterSecret, http: reqwest::Client) -> Self {
        Self {
            me,
            http,
            secret: secret_header(secret),
            partition: Partition::default(),
            retry_pause: RETRY_PAUSE_DEFAULT,
            scheme: "http",
        }
    }

    /// The same factory, dialling peers at `https://` (its client must
    /// have been made with [`crate::tls::ClientTls::apply`]).
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.scheme = crate::tls::scheme(tls);
        self
    }

    /// The same factory, retrying unreachable peers every `pause` (one
    /// heartbeat is right: a peer that comes back hears from the leader
    /// before its election timer fires). A refused connection costs
    /// microseconds on a dead peer's host.
    pub fn with_retry_pause(mut self, pause: Duration) -> Self {
        self.retry_pause = pause;
        self
    }

    /// The same factory, with its RPCs subject to `partition` (a fault
    /// injected by tests and chaos runs).
    pub fn with_partition(mut self, partition: Partition) -> Self {
        self.partition = partition;
        self
    }
}

impl std::fmt::Debug for HttpNetworkFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpNetworkFactory")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// The header value of a secret, marked sensitive so that http's `Debug`
/// and HPACK-style caches never expose it.
fn secret_header(secret: &ClusterSecret) -> HeaderValue {
    // `ClusterSecret::new` admits only visible ASCII, which is always a valid
    // header value; the fallback only exists to avoid a panic path.
    let mut value = HeaderValue::from_str(secret.as_str()).unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

impl RaftNetworkFactory<TypeConfig> for HttpNetworkFactory {
    type Network = HttpNetwork;

    async fn new_client(&mut self, target: MemberId, node: &BasicNode) -> HttpNetwork {
        HttpNetwork {
            me: self.me,
            target,
            node: node.clone(),
            base: format!("{}://{}", self.scheme, node.addr),
            http: self.http.clone(),
            secret: self.secret.clone(),
            partition: self.partition.clone(),
            retry_pause: self.retry_pause,
        }
    }
}

/// The RPC client of one peer.
pub struct HttpNetwork {
    me: MemberId,
    target: MemberId,
    node: BasicNode,
    base: String,
    http: reqwest::Client,
    secret: HeaderValue,
    partition: Partition,
    retry_pause: Duration,
}

impl std::fmt::Debug for HttpNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpNetwork")
            .field("me", &self.me)
            .field("target", &self.target)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A transport failure, with enough context to read in a log line.
#[derive(Debug, thiserror::Error)]
enum RpcFailure {
    /// An injected [`Partition`] cuts this member off from the target.
    #[error("POST {url} to member {target}: cut off by an injected partition")]
    Partitioned { url: String, target: MemberId },
    /// The request did not complete.
    #[error("POST {url} to member {target}: {source}")]
    Send {
        url: String,
        target: MemberId,
        #[source]
        source: reqwest::Error,
    },
    /// The peer answered something other than a Raft result.
    #[error("POST {url} to member {target}: peer answered {status}: {message}")]
    Status {
        url: String,
        target: MemberId,
        status: StatusCode,
        message: String,
    },
    /// The answer could not be read as a Raft result.
    #[error("POST {url} to member {target}: unreadable answer: {message}")]
    Body {
        url: String,
        target: MemberId,
        message: String,
    },
}

impl HttpNetwork {
    /// POSTs `req` to `path` and decodes the peer's `Result<Resp, RaftError>`.
    /// `too_large` is what a 413 means for this RPC: openraft can split an
    /// append batch, nothing else.
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        action: RPCTypes,
        req: &Req,
        option: &RPCOption,
        too_large: Option<PayloadTooLarge>,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: StdError + DeserializeOwned,
    {
        let url = format!("{}{path}", self.base);
        if self.partition.cuts(self.target) {
            return Err(RPCError::Unreachable(Unreachable::new(
                &RpcFailure::Partitioned {
                    url,
                    target: self.target,
                },
            )));
        }
        let ttl = option.hard_ttl();
        let sent = self
            .http
            .post(&url)
            .header(SECRET_HEADER, self.secret.clone())
            .timeout(ttl)
            .json(req)
            .send()
            .await;
        let mut resp = match sent {
            Ok(resp) => resp,
            Err(source) => return Err(self.send_error(url, action, ttl, source)),
        };

        let status = resp.status();
        let body = match read_bounded(&mut resp).await {
            Ok(Some(body)) => body,
            Ok(None) => {
                return Err(RPCError::Network(NetworkError::new(&RpcFailure::Body {
                    url,
                    target: self.target,
                    message: format!("longer than {RAFT_RESPONSE_BYTES_MAX} bytes"),
                })))
            }
            Err(source) => return Err(self.send_error(url, action, ttl, source)),
        };

        if status == StatusCode::OK {
            let decoded: Result<Resp, RaftError<MemberId, E>> =
                serde_json::from_slice(&body).map_err(|e| {
                    RPCError::Network(NetworkError::new(&RpcFailure::Body {
                        url: url.clone(),
                        target: self.target,
                        message: e.to_string(),
                    }))
                })?;
            return decoded.map_err(|e| {
                RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e))
            });
        }

        let failure = RpcFailure::Status {
            url,
            target: self.target,
            status,
            message: error_message(&body),
        };
        // openraft logs every failed RPC itself; this adds the detail only.
        tracing::debug!(error = %failure, "raft rpc refused");
        Err(match status {
            // A peer that refuses our secret will keep refusing it until an
            // operator fixes the configuration: back off rather than hammer it.
            StatusCode::UNAUTHORIZED => RPCError::Unreachable(Unreachable::new(&failure)),
            StatusCode::PAYLOAD_TOO_LARGE => match too_large {
                Some(hint) => RPCError::PayloadTooLarge(hint),
                None => RPCError::Network(NetworkError::new(&failure)),
            },
            _ => RPCError::Network(NetworkError::new(&failure)),
        })
    }

    /// Classifies a reqwest failure: a peer we cannot connect to (or whose
    /// address cannot even form a URL) is unreachable, so openraft backs off;
    /// one that takes longer than the RPC's budget timed out; anything else
    /// broke mid-exchange and may be retried at once.
    fn send_error<E: StdError>(
        &self,
        url: String,
        action: RPCTypes,
        ttl: Duration,
        source: reqwest::Error,
    ) -> RPCError<MemberId, BasicNode, RaftError<MemberId, E>> {
        let unreachable = source.is_connect() || source.is_builder();
        let timed_out = source.is_timeout();
        let failure = RpcFailure::Send {
            url,
            target: self.target,
            source,
        };
        tracing::debug!(error = %failure, "raft rpc failed");
        if unreachable {
            RPCError::Unreachable(Unreachable::new(&failure))
        } else if timed_out {
            RPCError::Timeout(Timeout {
                action,
                id: self.me,
                target: self.target,
                timeout: ttl,
            })
        } else {
            RPCError::Network(NetworkError::new(&failure))
        }
    }
}

/// Reads a response body, refusing more than [`RAFT_RESPONSE_BYTES_MAX`]:
/// the bytes come from whatever answers at the peer's address. `None` when
/// the body is longer.
async fn read_bounded(resp: &mut reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > RAFT_RESPONSE_BYTES_MAX {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The message of an error answer: the `error` field of our own servers'
/// bodies, else a bounded, lossy excerpt of whatever came back.
fn error_message(body: &[u8]) -> String {
    const EXCERPT_BYTES: usize = 200;
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(parsed) => parsed.error,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(EXCERPT_BYTES)]).into_owned(),
    }
}

impl RaftNetwork<TypeConfig> for HttpNetwork {
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.retry_pause))
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<MemberId>, Infallible> {
        // Halving is openraft's own retry strategy for a batch that is too
        // large; a single entry cannot shrink, so then it is a plain failure.
        let n = rpc.entries.len() as u64;
        let too_large = (n > 1).then(|| PayloadTooLarge::new_entries_hint(n / 2));
        self.call(APPEND_PATH, RPCTypes::AppendEntries, &rpc, &option, too_large)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<MemberId>, InstallSnapshotError> {
        self.call(SNAPSHOT_PATH, RPCTypes::InstallSnapshot, &rpc, &option, None)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemberId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<MemberId>, Infallible> {
        self.call(VOTE_PATH, RPCTypes::Vote, &rpc, &option, None).await
    }
}
