//! The control plane as a process sees it: a list of members, any of which
//! may be down, tried in turn.

use std::future::Future;
use std::time::Duration;

use control_plane::api::{ClientError, ControlClient};

use crate::ClusterError;

/// Longest wait for one member's answer to one request: a member that
/// accepts the connection and never answers must not hold the caller.
pub const MEMBER_TIMEOUT: Duration = Duration::from_secs(5);

/// Rounds over the whole member list before a request fails: enough to
/// ride out one election (hundreds of ms) with the pause between rounds.
pub const ROUNDS_MAX: u32 = 20;

/// Pause between rounds over the members.
pub const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// The members of one control plane, with one token.
#[derive(Clone, Debug)]
pub struct Members {
    clients: Vec<ControlClient>,
}

impl Members {
    /// Clients of each of `endpoints` (`host:port`) presenting `token`.
    pub fn new(endpoints: &[String], token: &str) -> Result<Members, ClusterError> {
        if endpoints.is_empty() {
            return Err(ClusterError::Unreachable {
                tried: "no member".into(),
                last: "give at least one control-plane endpoint".into(),
            });
        }
        let clients = endpoints
            .iter()
            .map(|e| {
                ControlClient::new(e, Some(token.to_owned())).map_err(|source| ClusterError::Refused {
                    what: format!("control-plane endpoint {e:?}"),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Members { clients })
    }

    /// The member clients, for `keep_lease`.
    pub fn clients(&self) -> &[ControlClient] {
        &self.clients
    }

    /// Asks `f` of each member in turn until one answers. A refusal (4xx)
    /// is the answer and is returned at once, except "no leader" (503),
    /// which moves on; a member that is down or silent moves on too.
    pub async fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, ClusterError>
    where
        F: Fn(ControlClient) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut last = String::new();
        for round in 0..ROUNDS_MAX {
            for c in &self.clients {
                match tokio::time::timeout(MEMBER_TIMEOUT, f(c.clone())).await {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e @ ClientError::Refused { .. }))
                        if e.status().is_some_and(|s| s.as_u16() != 503) =>
                    {
                        return Err(ClusterError::Refused {
                            what: what.to_owned(),
                            source: e,
                        })
                    }
                    Ok(Err(e)) => last = format!("{}: {}", c.endpoint(), chain(&e)),
                    Err(_) => last = format!("{}: no answer within {MEMBER_TIMEOUT:?}", c.endpoint()),
                }
            }
            if round + 1 < ROUNDS_MAX {
                tokio::time::sleep(ROUND_PAUSE).await;
            }
        }
        Err(ClusterError::Unreachable {
            tried: self
                .clients
                .iter()
                .map(ControlClient::endpoint)
                .collect::<Vec<_>>()
                .join(", "),
            last: format!("{what}: {last}"),
        })
    }
}

/// An error with its causes, `: `-separated (reqwest's say why a request
/// failed only in their sources).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
