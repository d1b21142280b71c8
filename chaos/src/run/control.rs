//! The run's control plane: one `kintsugi control` member per variant's run.
//!
//! Design §3: owner ids are unique cluster-wide because the control plane
//! hands each client a block of them with a lease. So the loader, every
//! client process and the checker register and renew, each through
//! `cluster::Lease` (the client library's registration and lease keeping,
//! without its map); the memory nodes register too. When the schedule kills a client its lease lapses and the
//! leader expires it. The checker waits for that decision before it checks:
//! repairs go by the rTX leases of the locks, not by the control plane, but
//! owner ids may be freed only once the control plane has expired their
//! holder and what it left is repaired. Then the control plane forgets the
//! dead clients, which frees their owner ids.
//!
//! The data path of a run with client faults still takes its cluster map
//! from the memory nodes themselves (each describes its regions); the
//! control plane's region table is not used there. A run with memory-node
//! faults (`run::replica`) routes by the control plane's map instead.
//!
//! Every call to the member is bounded by [`CALL_TIMEOUT`], every wait by a
//! deadline: a member that accepts and never answers fails the run, it does
//! not hang it.

use std::future::Future;
use std::time::{Duration, Instant};

use control_plane::api::{ClientError, ControlClient};
use control_plane::state::{Client, ClientId, ClientState, Command, MemNodeId};
pub use harness::control::CALL_TIMEOUT;
use serde::Serialize;

use super::RunError;

/// Pause between polls of the member while waiting for a decision.
pub const POLL: Duration = Duration::from_millis(10);
/// How long the checker waits for the control plane to expire a dead
/// client, beyond its lease: the leader checks leases every 20 ms, so an
/// expiry later than this is a failure of the control plane.
pub const EXPIRY_SLACK: Duration = Duration::from_secs(10);

/// A refusal or failure of the control plane that is a message only (the
/// answers themselves were fine).
fn control(what: impl std::fmt::Display, e: impl std::fmt::Display) -> RunError {
    RunError::Control(format!("{what}: {e}"))
}

/// One call to the member, bounded by [`CALL_TIMEOUT`].
async fn call<T>(what: &str, f: impl Future<Output = Result<T, ClientError>>) -> Result<T, RunError> {
    Ok(harness::control::call(what, f).await?)
}

/// A client of the member at `endpoint`.
pub fn api(endpoint: &str, token: &str) -> Result<ControlClient, RunError> {
    ControlClient::new(endpoint, Some(token.to_owned())).map_err(|source| {
        RunError::from(harness::control::ControlError::Api {
            what: format!("cannot make a client of {endpoint}"),
            source,
        })
    })
}

/// Waits until `n` memory nodes are registered and active (they renewed).
pub async fn wait_memnodes(api: &ControlClient, n: usize) -> Result<(), RunError> {
    Ok(harness::control::await_memnodes(api, n, "memnode-*.log").await?)
}

/// Waits until the control plane has expired every client named in
/// `dead`, each within its lease plus [`EXPIRY_SLACK`] of `since`.
/// Returns the clients as they are then.
pub async fn wait_expired(
    api: &ControlClient,
    dead: &[String],
    lease: Duration,
    since: Instant,
) -> Result<Vec<Client>, RunError> {
    let deadline = since + lease + EXPIRY_SLACK;
    loop {
        let clients = call("cannot list clients", api.clients()).await?;
        let pending: Vec<&str> = dead
            .iter()
            .filter(|n| {
                !clients
                    .iter()
                    .any(|c| &c.name == *n && matches!(c.state, ClientState::Expired { .. }))
            })
            .map(String::as_str)
            .collect();
        if pending.is_empty() {
            return Ok(clients);
        }
        if Instant::now() >= deadline {
            return Err(control(
                "leases",
                format!(
                    "the dead client(s) {pending:?} were not expired within their lease and {EXPIRY_SLACK:?}"
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Forgets the expired clients named in `dead` (recovery's last step, once
/// what they left is repaired), freeing their owner ids. Returns the ids
/// forgotten.
pub async fn forget_dead(
    api: &ControlClient,
    clients: &[Client],
    dead: &[String],
) -> Result<Vec<ClientId>, RunError> {
    let mut forgotten = Vec::new();
    for c in clients {
        if dead.contains(&c.name) && matches!(c.state, ClientState::Expired { .. }) {
            let forget = Command::ForgetClient { id: c.id, by: None };
            // Owner ids stay quarantined for a lease after the expiry, and
            // while recovery's coordinator holds the claim on the client's
            // reclaim (it forgets it itself): refusals for those are waited
            // out, within EXPIRY_SLACK; gone meanwhile is forgotten.
            let deadline = Instant::now() + EXPIRY_SLACK + Duration::from_millis(c.lease_ms);
            loop {
                match harness::control::call(&format!("cannot forget {}", c.name), api.command(&forget)).await
                {
                    Ok(_) => break,
                    Err(harness::control::ControlError::Api {
                        source: ClientError::Refused { status, .. },
                        ..
                    }) if status.as_u16() == 404 => break,
                    Err(harness::control::ControlError::Api {
                        source: ClientError::Refused { message, .. },
                        ..
                    }) if (message.contains("quarantined") || message.contains("may still be writing"))
                        && Instant::now() < deadline =>
                    {
                        tokio::time::sleep(POLL).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            forgotten.push(c.id);
        }
    }
    Ok(forgotten)
}

/// What the control plane held and decided in one variant's run.
#[derive(Clone, Debug, Serialize)]
pub struct ControlOutcome {
    /// The member's address.
    pub endpoint: String,
    /// The memory nodes it knew at the end.
    pub memory_nodes: Vec<MemNodeSeen>,
    /// The clients it leased owner ids to.
    pub clients: Vec<LeaseSeen>,
}

/// A memory node as the control plane saw it.
#[derive(Clone, Debug, Serialize)]
pub struct MemNodeSeen {
    /// Its control-plane id.
    pub id: MemNodeId,
    /// Where clients reach it.
    pub endpoint: String,
    /// Its state (`active`, `suspect`, ...).
    pub state: String,
}

/// A client's lease as the control plane saw it.
#[derive(Clone, Debug, Serialize)]
pub struct LeaseSeen {
    /// Its registered name.
    pub name: String,
    /// The run's client process number (`None`: the loader or the checker).
    pub client: Option<u32>,
    /// First owner id of its block.
    pub owner_first: u16,
    /// Owner ids in its block.
    pub owner_count: u16,
    /// `live` or `expired` when the checker looked.
    pub state: String,
    /// For a client that died in the run: from its death (as the runner
    /// saw it) to the control plane's decision.
    pub expired_after_death_ms: Option<u64>,
    /// Forgotten once its logs were rolled: its owner ids are free again.
    pub forgotten: bool,
}

impl LeaseSeen {
    /// `first..end` of its owner ids.
    pub fn owners(&self) -> String {
        format!(
            "{}..{}",
            self.owner_first,
            u32::from(self.owner_first) + u32::from(self.owner_count)
        )
    }
}

/// The name a client process registers under.
pub fn client_name(client: u32) -> String {
    format!("client-{client}")
}

/// The number of the client process named `name`, if it is one.
pub fn client_number(name: &str) -> Option<u32> {
    name.strip_prefix("client-")?.parse().ok()
}

/// Gathers the outcome. `died_ms[c]`: when the runner saw client `c` die.
pub async fn outcome(
    api: &ControlClient,
    clients: &[Client],
    forgotten: &[ClientId],
    died_ms: &[Option<u64>],
) -> Result<ControlOutcome, RunError> {
    let nodes = call("cannot list memory nodes", api.memnodes()).await?;
    let memory_nodes = nodes
        .into_iter()
        .map(|m| MemNodeSeen {
            id: m.id,
            endpoint: m.endpoint,
            state: format!("{:?}", m.state).to_lowercase(),
        })
        .collect();
    let clients = clients
        .iter()
        .map(|c| {
            let number = client_number(&c.name);
            let (state, expired_at) = match c.state {
                ClientState::Live => ("live".to_owned(), None),
                ClientState::Expired { at_ms, .. } => ("expired".to_owned(), Some(at_ms)),
            };
            let died = number.and_then(|n| died_ms.get(n as usize).copied().flatten());
            LeaseSeen {
                name: c.name.clone(),
                client: number,
                owner_first: c.owners.first,
                owner_count: c.owners.count,
                state,
                expired_after_death_ms: died.zip(expired_at).map(|(d, x)| x.saturating_sub(d)),
                forgotten: forgotten.contains(&c.id),
            }
        })
        .collect();
    Ok(ControlOutcome {
        endpoint: api.endpoint().to_owned(),
        memory_nodes,
        clients,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names_round_trip() {
        assert_eq!(client_number(&client_name(7)), Some(7));
        assert_eq!(client_number("loader"), None);
        assert_eq!(client_number("client-x"), None);
    }
}
