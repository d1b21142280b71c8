//! The control plane as a process sees it: a list of members, any of which
//! may be down, tried in turn.

use std::future::Future;
use std::time::Duration;

use control_plane::api::{ClientError, ControlClient};
use control_plane::state::{Client, Command, Outcome, OwnerBlock, OWNER_ID_END};

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
    /// is the answer and is returned at once, except "no leader" (503) and
    /// "leader unreachable" (502), which move on; a member that is down or
    /// silent moves on too.
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
                    // 502: the member could not reach the leader it
                    // forwards to (one that just died: an election is due).
                    Ok(Err(e @ ClientError::Refused { .. }))
                        if e.status().is_some_and(|s| s.as_u16() != 503 && s.as_u16() != 502) =>
                    {
                        return Err(ClusterError::Refused {
                            what: what.to_owned(),
                            source: e,
                        })
                    }
                    Ok(Err(e)) => last = format!("{}: {}", c.endpoint(), chain(&e)),
                    Err(_) => last = format!("{}: no answer within {MEMBER_TIMEOUT:?}", c.endpoint()),
                }
                tracing::debug!(what, round, tried = %last, "no answer; trying the next member");
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

impl Members {
    /// Sends `command` to the members in turn ([`Members::call`]).
    pub async fn command(&self, what: &str, command: &Command) -> Result<Outcome, ClusterError> {
        self.call(what, |c| async move { c.command(command).await }).await
    }

    /// Registers client `name` for `owner_ids` owner ids with `lease`
    /// (`None`: the cluster's default). Returns its record and when the
    /// registration was sent: its lease certainly holds until then plus
    /// its length. The block is checked to be what was asked.
    pub async fn register_client(
        &self,
        name: &str,
        owner_ids: u16,
        lease: Option<std::time::Duration>,
    ) -> Result<(Client, std::time::Instant), ClusterError> {
        let register = Command::RegisterClient {
            name: name.to_owned(),
            owner_ids,
            lease_ms: lease.map_or(0, |l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
        };
        let sent = std::time::Instant::now();
        match self
            .command(&format!("registering client {name:?}"), &register)
            .await?
        {
            Outcome::Client(c) => match check_block(c.owners, owner_ids) {
                Ok(()) => Ok((c, sent)),
                Err(e) => {
                    // Nothing issued under the ids: give them back at once.
                    let leave = Command::DeregisterClient { id: c.id };
                    let _ = self.command("deregistering", &leave).await;
                    Err(e)
                }
            },
            other => Err(ClusterError::Map(format!(
                "unexpected answer to registration: {other:?}"
            ))),
        }
    }
}

/// An owner-id block the control plane handed out must be the size asked
/// for and lie in `1..OWNER_ID_END`, or the ids would collide or overflow.
fn check_block(b: OwnerBlock, asked: u16) -> Result<(), ClusterError> {
    let end = u32::from(b.first) + u32::from(b.count);
    if b.count != asked || b.first == 0 || end > u32::from(OWNER_ID_END) {
        return Err(ClusterError::Map(format!(
            "owner ids {}..{end} are not {asked} id(s) within 1..{OWNER_ID_END}",
            b.first
        )));
    }
    Ok(())
}

/// An error and its sources on one line (the control plane's one helper).
pub(crate) use control_plane::api::error_chain as chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_block_must_be_what_was_asked_within_the_ids() {
        let b = |first, count| OwnerBlock { first, count };
        assert!(check_block(b(2, 3), 3).is_ok());
        assert!(check_block(b(OWNER_ID_END - 3, 3), 3).is_ok());
        assert!(check_block(b(2, 2), 3).is_err(), "fewer than asked");
        assert!(check_block(b(0, 3), 3).is_err(), "owner id 0 is nobody");
        assert!(check_block(b(OWNER_ID_END - 2, 3), 3).is_err(), "past the end");
        assert!(check_block(b(u16::MAX, 3), 3).is_err(), "no overflow");
    }
}
