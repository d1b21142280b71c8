//! The run's control plane: one `kintsugi control` member per variant's run.
//!
//! Design §3: owner ids are unique cluster-wide because the control plane
//! hands each client a block of them with a lease. So the loader, every
//! client process and the checker register and renew; the memory nodes
//! register too. When the schedule kills a client its lease lapses and the
//! leader expires it; the checker waits for that decision, rolls what the
//! dead client left in the index (as the recovery module does, acting on
//! the control plane's decisions), and then forgets it, which frees its
//! owner ids.
//!
//! The data path still takes its cluster map from the memory nodes
//! themselves (each describes its regions); the control plane's region
//! table is not used by a run.

use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use control_plane::api::{keep_lease, ControlClient, Leaseholder, MemberInfo};
use control_plane::state::{Client, ClientId, ClientState, Command, MemNodeId, MemNodeState, Outcome};
use serde::Serialize;
use tokio::sync::oneshot;

use super::RunError;

/// How long the member may take to elect itself after `init`, and the
/// memory nodes to register and renew once: well under a second on an
/// idle machine, seconds on a loaded one.
pub const FORM_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between polls of the member while waiting for a decision.
pub const POLL: Duration = Duration::from_millis(10);
/// How long the checker waits for the control plane to expire a dead
/// client, beyond its lease: the leader checks leases every 20 ms, so an
/// expiry later than this is a failure of the control plane.
pub const EXPIRY_SLACK: Duration = Duration::from_secs(10);

fn control(what: impl std::fmt::Display, e: impl std::fmt::Display) -> RunError {
    RunError::Control(format!("{what}: {e}"))
}

/// Milliseconds since the Unix epoch (the control plane's clock unit).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A client of the member at `endpoint`.
pub fn api(endpoint: &str, token: &str) -> Result<ControlClient, RunError> {
    ControlClient::new(endpoint, Some(token.to_owned())).map_err(|e| control(endpoint, e))
}

/// Forms a one-member cluster of the member at `addr` (`host:port`) that
/// `api` reaches, and waits until it leads.
pub async fn form(api: &ControlClient, addr: &str) -> Result<(), RunError> {
    api.init(vec![MemberInfo {
        id: 1,
        addr: addr.to_owned(),
        voter: true,
    }])
    .await
    .map_err(|e| control("cannot form the one-member cluster", e))?;
    let deadline = Instant::now() + FORM_TIMEOUT;
    loop {
        let s = api.status().await.map_err(|e| control("status", e))?;
        if s.leader == Some(s.member) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(control("status", format!("no leader within {FORM_TIMEOUT:?}")));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `n` memory nodes are registered and active (they renewed).
pub async fn wait_memnodes(api: &ControlClient, n: usize) -> Result<(), RunError> {
    let deadline = Instant::now() + FORM_TIMEOUT;
    loop {
        let nodes = api
            .memnodes()
            .await
            .map_err(|e| control("cannot list memory nodes", e))?;
        let active = nodes.iter().filter(|m| m.state == MemNodeState::Active).count();
        if active >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(control(
                "memory nodes",
                format!("{active} of {n} registered and active after {FORM_TIMEOUT:?} (see memnode-*.log)"),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Registers a client named `name` with `owner_ids` owner ids and `lease`.
pub async fn register(
    api: &ControlClient,
    name: &str,
    owner_ids: u16,
    lease: Duration,
) -> Result<Client, RunError> {
    let command = Command::RegisterClient {
        name: name.to_owned(),
        owner_ids,
        lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
    };
    match api.command(&command).await {
        Ok(Outcome::Client(c)) => Ok(c),
        Ok(other) => Err(control(
            format!("registering {name}"),
            format!("unexpected answer {other:?}"),
        )),
        Err(e) => Err(control(format!("cannot register {name}"), e)),
    }
}

/// Renews a client's lease on a thread of its own, with a control-plane
/// client of its own, so that a client whose work never yields (shm verbs
/// complete inline) still renews in time. (A `ControlClient` made on
/// another runtime would share that runtime's pooled connections, which
/// only make progress while that runtime is driven.)
pub struct LeaseKeeper {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl LeaseKeeper {
    /// Starts renewing `id`'s lease at the member at `endpoint`. If the
    /// control plane refuses a renewal (it expired the client), `on_lost`
    /// is called with the reason: the client must stop using its owner ids.
    pub fn start(
        endpoint: &str,
        token: &str,
        id: ClientId,
        on_lost: impl FnOnce(&str) + Send + 'static,
    ) -> Result<LeaseKeeper, RunError> {
        let api = self::api(endpoint, token)?;
        let (tx, rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("lease-{id}"))
            .spawn(move || {
                let lost = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt
                        .block_on(keep_lease(&[api], Leaseholder::Client(id), async {
                            let _ = rx.await;
                        }))
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(format!("cannot start the lease's runtime: {e}")),
                };
                if let Err(why) = &lost {
                    on_lost(why);
                }
                lost
            })
            .map_err(|e| control("cannot start the lease thread", e))?;
        Ok(LeaseKeeper {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// Stops renewing. `Err` if the lease was lost meanwhile.
    pub fn stop(mut self) -> Result<(), RunError> {
        self.halt()
    }

    fn halt(&mut self) -> Result<(), RunError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(why))) => Err(control("lease lost", why)),
            Some(Err(_)) => Err(control("lease", "its thread panicked")),
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        let _ = self.halt();
    }
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
        let clients = api
            .clients()
            .await
            .map_err(|e| control("cannot list clients", e))?;
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

/// Forgets every expired client (recovery's last step, once their logs
/// are rolled), freeing their owner ids. Returns the ids forgotten.
pub async fn forget_expired(api: &ControlClient, clients: &[Client]) -> Result<Vec<ClientId>, RunError> {
    let mut forgotten = Vec::new();
    for c in clients {
        if matches!(c.state, ClientState::Expired { .. }) {
            api.command(&Command::ForgetClient { id: c.id })
                .await
                .map_err(|e| control(format!("cannot forget client {}", c.name), e))?;
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
        format!("{}..{}", self.owner_first, self.owner_first + self.owner_count)
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
    let nodes = api
        .memnodes()
        .await
        .map_err(|e| control("cannot list memory nodes", e))?;
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
                ClientState::Expired { at_ms } => ("expired".to_owned(), Some(at_ms)),
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
