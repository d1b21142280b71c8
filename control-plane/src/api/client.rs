//! A typed client of the API, for `kintsugi ctl`, benchmarks, and compute
//! nodes that watch the map and renew leases.

use std::time::Duration;

use fabric::{ClusterMap, Epoch};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{
    AddMember, AdmissionView, CredentialRequest, InitRequest, IssuedCredential, LeaderMoved, MemberInfo,
    ReclaimReadiness, Renewed, Snapshot, StateDigest, Status, TransferLeader, RESTORE_PATH,
};
use crate::raft::MemberId;
use crate::reply::ErrorBody;
use crate::state::{AuditEntry, Client, ClientId, Command, IndexRecord, MemNode, MemNodeId, Outcome, Region};
use crate::tls::{ClientTls, TlsError};

/// Longest wait for a member to accept a connection: a host that is gone
/// (packets dropped, not refused) must not hold a caller that could try
/// another member for the operating system's minutes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest error message kept from a body that is not an [`ErrorBody`].
const EXCERPT_BYTES: usize = 300;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is not a usable base URL.
    #[error("bad endpoint {endpoint:?}: {why}")]
    Endpoint {
        /// What was given.
        endpoint: String,
        /// What is wrong with it.
        why: String,
    },
    /// The request did not complete (connection refused, timeout, ...).
    #[error("{method} {url} failed")]
    Http {
        /// The method.
        method: Method,
        /// The URL.
        url: String,
        /// reqwest's error.
        #[source]
        source: reqwest::Error,
    },
    /// The member answered with an error.
    #[error("{status}: {message}{}", leader.as_ref().map(|l| format!(" (leader: {l})")).unwrap_or_default())]
    Refused {
        /// The HTTP status.
        status: StatusCode,
        /// The `error` of its body.
        message: String,
        /// The leader's address, when the member named it.
        leader: Option<String>,
    },
    /// A success answer that does not decode.
    #[error("{url}: unexpected answer: {why}")]
    Decode {
        /// The URL.
        url: String,
        /// The decoding error.
        why: String,
    },
}

impl ClientError {
    /// True when the member was not reached at all (refused or timed-out
    /// connection): the request was never delivered, so another member may
    /// be asked the same, even a write.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Http { source, .. } if source.is_connect())
    }

    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client of one member's API. Writes sent to a follower are forwarded
/// by it; should a member answer 503 naming the leader, the call is retried
/// once there.
#[derive(Clone, Debug)]
pub struct ControlClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl ControlClient {
    /// A client of the member at `endpoint` (`http://host:port`,
    /// `https://host:port` or `host:port`), presenting `token` if given. An
    /// `https://` endpoint is checked against this process's CA
    /// ([`ClientTls::process_default`]).
    pub fn new(endpoint: &str, token: Option<String>) -> Result<Self, ClientError> {
        let tls = if endpoint.trim_start().starts_with("https://") {
            ClientTls::process_default().map_err(|e| ClientError::Endpoint {
                endpoint: endpoint.to_owned(),
                why: e.to_string(),
            })?
        } else {
            None
        };
        Self::with_tls(endpoint, token, tls.as_ref())
    }

    /// [`ControlClient::new`] trusting `tls` for an `https://` endpoint.
    pub fn with_tls(
        endpoint: &str,
        token: Option<String>,
        tls: Option<&ClientTls>,
    ) -> Result<Self, ClientError> {
        let bad = |why: &str| ClientError::Endpoint {
            endpoint: endpoint.to_owned(),
            why: why.to_owned(),
        };
        let trimmed = endpoint.trim().trim_end_matches('/');
        let base = if trimmed.contains("://") {
            trimmed.to_owned()
        } else {
            format!("http://{trimmed}")
        };
        let parsed = reqwest::Url::parse(&base).map_err(|e| bad(&e.to_string()))?;
        let builder = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT);
        let builder = match (parsed.scheme(), tls) {
            ("http", _) => builder,
            ("https", Some(tls)) => tls.apply(builder),
            ("https", None) => {
                return Err(bad(&TlsError::NoCa {
                    endpoint: endpoint.to_owned(),
                }
                .to_string()))
            }
            _ => return Err(bad("only http:// and https:// are served")),
        };
        if parsed.host_str().is_none() || parsed.path() != "/" {
            return Err(bad("expected http(s)://host:port with no path"));
        }
        let http = builder.build().map_err(|e| bad(&e.to_string()))?;
        Ok(ControlClient { http, base, token })
    }

    /// The base URL calls go to.
    pub fn endpoint(&self) -> &str {
        &self.base
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<Status, ClientError> {
        self.call(Method::GET, "/v1/status", None::<&()>, None).await
    }

    /// `GET /v1/map`: at once without `after_epoch`; else once the epoch
    /// exceeds it or `wait` passes (the member caps the wait), whichever is
    /// first. Compare the answer's epoch to know which.
    pub async fn map(
        &self,
        after_epoch: Option<Epoch>,
        wait: Option<Duration>,
    ) -> Result<ClusterMap, ClientError> {
        let mut path = String::from("/v1/map");
        let mut sep = '?';
        if let Some(e) = after_epoch {
            path.push_str(&format!("{sep}after_epoch={e}"));
            sep = '&';
        }
        if let Some(w) = wait {
            path.push_str(&format!("{sep}wait={}ms", w.as_millis()));
        }
        // The member waits up to its cap; give the request a little more.
        let timeout = wait.map(|w| w + Duration::from_secs(5));
        self.call(Method::GET, &path, None::<&()>, timeout).await
    }

    /// `GET /v1/memnodes`.
    pub async fn memnodes(&self) -> Result<Vec<MemNode>, ClientError> {
        self.call(Method::GET, "/v1/memnodes", None::<&()>, None).await
    }

    /// `GET /v1/regions`.
    pub async fn regions(&self) -> Result<Vec<Region>, ClientError> {
        self.call(Method::GET, "/v1/regions", None::<&()>, None).await
    }

    /// `GET /v1/clients`.
    pub async fn clients(&self) -> Result<Vec<Client>, ClientError> {
        self.call(Method::GET, "/v1/clients", None::<&()>, None).await
    }

    /// `GET /v1/indexes`.
    pub async fn indexes(&self) -> Result<Vec<IndexRecord>, ClientError> {
        self.call(Method::GET, "/v1/indexes", None::<&()>, None).await
    }

    /// `GET /v1/audit`: the newest `limit` entries, oldest first.
    pub async fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, ClientError> {
        self.call(
            Method::GET,
            &format!("/v1/audit?limit={limit}"),
            None::<&()>,
            None,
        )
        .await
    }

    /// `POST /v1/commands`.
    pub async fn command(&self, command: &Command) -> Result<Outcome, ClientError> {
        self.call(Method::POST, "/v1/commands", Some(command), None).await
    }

    /// `POST /v1/memnodes/{id}/renew`.
    pub async fn renew_memnode(&self, id: MemNodeId) -> Result<Renewed, ClientError> {
        self.call(
            Method::POST,
            &format!("/v1/memnodes/{id}/renew"),
            None::<&()>,
            None,
        )
        .await
    }

    /// `POST /v1/memnodes/{id}/renew?image=HEX`: refused when the node's
    /// record names another image.
    pub async fn renew_memnode_image(
        &self,
        id: MemNodeId,
        image: fabric::ImageId,
    ) -> Result<Renewed, ClientError> {
        self.call(
            Method::POST,
            &format!("/v1/memnodes/{id}/renew?image={image}"),
            None::<&()>,
            None,
        )
        .await
    }

    /// `POST /v1/clients/{id}/renew?quiesced=N&registered_at_ms=T`:
    /// `quiesced` is how far the client has quiesced (`txn::quiesce`), if
    /// it follows reclaims; `registered_at_ms`, when it registered: a
    /// record of that id registered at another time (put there by a
    /// restore) is not renewed.
    pub async fn renew_client(
        &self,
        id: ClientId,
        registered_at_ms: Option<u64>,
        quiesced: Option<u64>,
    ) -> Result<Renewed, ClientError> {
        let mut path = format!("/v1/clients/{id}/renew");
        let mut sep = '?';
        if let Some(q) = quiesced {
            path.push_str(&format!("{sep}quiesced={q}"));
            sep = '&';
        }
        if let Some(t) = registered_at_ms {
            path.push_str(&format!("{sep}registered_at_ms={t}"));
        }
        self.call(Method::POST, &path, None::<&()>, None).await
    }

    /// `GET /v1/clients/{id}/reclaim`: which live clients a reclaim of
    /// expired client `id`'s owner ids still waits for.
    pub async fn reclaim_readiness(&self, id: ClientId) -> Result<ReclaimReadiness, ClientError> {
        self.call(
            Method::GET,
            &format!("/v1/clients/{id}/reclaim"),
            None::<&()>,
            None,
        )
        .await
    }

    /// `GET /v1/admission`: the admission key and the client fence (what a
    /// memory node admits by).
    pub async fn admission(&self) -> Result<AdmissionView, ClientError> {
        self.call(Method::GET, "/v1/admission", None::<&()>, None).await
    }

    /// `POST /v1/admission`: a credential for live client `client`, or for
    /// a service (`None`, operators' tokens only).
    pub async fn credential(&self, client: Option<ClientId>) -> Result<fabric::Credential, ClientError> {
        let issued: IssuedCredential = self
            .call(
                Method::POST,
                "/v1/admission",
                Some(&CredentialRequest { client }),
                None,
            )
            .await?;
        fabric::Credential::from_hex(&issued.credential).map_err(|e| ClientError::Decode {
            url: "/v1/admission".into(),
            why: e.to_string(),
        })
    }

    /// `POST /v1/init`.
    pub async fn init(&self, members: Vec<MemberInfo>) -> Result<Status, ClientError> {
        self.call(Method::POST, "/v1/init", Some(&InitRequest { members }), None)
            .await
    }

    /// `POST /v1/members`: waits until the member has caught up (and, for a
    /// voter, joined the majority).
    pub async fn add_member(
        &self,
        id: MemberId,
        addr: &str,
        voter: bool,
    ) -> Result<Vec<MemberInfo>, ClientError> {
        let body = AddMember {
            id,
            addr: addr.to_owned(),
            voter,
        };
        self.call(Method::POST, "/v1/members", Some(&body), None).await
    }

    /// `DELETE /v1/members/{id}`.
    pub async fn remove_member(&self, id: MemberId) -> Result<Vec<MemberInfo>, ClientError> {
        self.call(Method::DELETE, &format!("/v1/members/{id}"), None::<&()>, None)
            .await
    }

    /// `GET /v1/snapshot`: the leader's whole state.
    pub async fn snapshot(&self) -> Result<Snapshot, ClientError> {
        self.call(Method::GET, "/v1/snapshot", None::<&()>, None).await
    }

    /// `POST /v1/snapshot/restore`: `snapshot`'s state becomes this new,
    /// empty cluster's.
    pub async fn restore(&self, snapshot: &Snapshot) -> Result<Outcome, ClientError> {
        self.call(Method::POST, RESTORE_PATH, Some(snapshot), None).await
    }

    /// `GET /v1/check`: this member's applied index and state digest.
    pub async fn check(&self) -> Result<StateDigest, ClientError> {
        self.call(Method::GET, "/v1/check", None::<&()>, None).await
    }

    /// `POST /v1/leader`: moves the leadership to voter `to`.
    pub async fn transfer_leader(&self, to: MemberId) -> Result<LeaderMoved, ClientError> {
        self.call(Method::POST, "/v1/leader", Some(&TransferLeader { to }), None)
            .await
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<T, ClientError> {
        match self
            .call_at(&self.base, method.clone(), path, body, timeout)
            .await
        {
            Err(ClientError::Refused {
                status: StatusCode::SERVICE_UNAVAILABLE,
                leader: Some(leader),
                ..
            }) => {
                // The leader is named by its `host:port`; it speaks what
                // this member speaks.
                let scheme = self.base.split_once("://").map_or("http", |(s, _)| s);
                let base = format!("{scheme}://{leader}");
                self.call_at(&base, method, path, body, timeout).await
            }
            other => other,
        }
    }

    async fn call_at<B: Serialize, T: DeserializeOwned>(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<T, ClientError> {
        let url = format!("{base}{path}");
        let mut req = self.http.request(method.clone(), &url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let http_err = |source| ClientError::Http {
            method: method.clone(),
            url: url.clone(),
            source,
        };
        let resp = req.send().await.map_err(http_err)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(http_err)?;
        if !status.is_success() {
            let (message, leader) = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => (e.error, e.leader),
                Err(_) => (
                    String::from_utf8_lossy(&bytes[..bytes.len().min(EXCERPT_BYTES)]).into_owned(),
                    None,
                ),
            };
            return Err(ClientError::Refused {
                status,
                message,
                leader,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            url,
            why: e.to_string(),
        })
    }
}
