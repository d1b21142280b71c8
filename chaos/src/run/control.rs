//! The run's control plane: one `kintsugi control` member per variant's run.
//!
//! Design §3: owner ids are unique cluster-wide because the control plane
//! hands each client a block of them with a lease. So the loader, every
//! client process and the checker register and renew; the memory nodes
//! register too. When the schedule kills a client its lease lapses and the
//! leader expires it. The checker waits for that decision before it checks:
//! repairs go by the rTX leases of the locks, not by the control plane, but
//! owner ids may be freed only once the control plane has expired their
//! holder and what it left is repaired. Then the control plane forgets the
//! dead clients, which frees their owner ids.
//!
//! The data path still takes its cluster map from the memory nodes
//! themselves (each describes its regions); the control plane's region
//! table is not used by a run.
//!
//! Every call to the member is bounded by [`CALL_TIMEOUT`], every wait by a
//! deadline: a member that accepts and never answers fails the run, it does
//! not hang it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use control_plane::api::{keep_lease_with, ClientError, ControlClient, Leaseholder};
use control_plane::state::{
    Client, ClientId, ClientState, Command, MemNodeId, Outcome, OwnerBlock, OWNER_ID_END,
};
pub use harness::control::CALL_TIMEOUT;
use serde::Serialize;
use tokio::sync::oneshot;

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
    match call(&format!("cannot register {name}"), api.command(&command)).await? {
        Outcome::Client(c) => {
            check_block(c.owners, owner_ids).map_err(|e| control(format!("registering {name}"), e))?;
            Ok(c)
        }
        other => Err(control(
            format!("registering {name}"),
            format!("unexpected answer {other:?}"),
        )),
    }
}

/// An owner-id block the control plane handed out must be the size asked
/// for and lie in `1..OWNER_ID_END`, or the ids would collide or overflow.
fn check_block(b: OwnerBlock, asked: u16) -> Result<(), String> {
    let end = u32::from(b.first) + u32::from(b.count);
    if b.count != asked || b.first == 0 || end > u32::from(OWNER_ID_END) {
        return Err(format!(
            "owner ids {}..{end} are not {asked} id(s) within 1..{OWNER_ID_END}",
            b.first
        ));
    }
    Ok(())
}

/// Registers `name` for `owner_ids` owner ids with the member at
/// `endpoint` and keeps its lease ([`LeaseKeeper`], `on_lost` as there).
/// For callers outside any runtime (the runner, a client process).
pub fn lease(
    endpoint: &str,
    token: &str,
    name: &str,
    owner_ids: u16,
    lease: Duration,
    on_lost: impl FnOnce(&str) + Send + 'static,
) -> Result<(OwnerBlock, LeaseKeeper), RunError> {
    let rt = super::runtime()?;
    let api = self::api(endpoint, token)?;
    let sent = Instant::now();
    let me = rt.block_on(register(&api, name, owner_ids, lease))?;
    let keeper = LeaseKeeper::start(endpoint, token, me.id, &me.name, sent + lease, on_lost)?;
    Ok((me.owners, keeper))
}

/// Until when a lease certainly holds, shared between the thread that
/// renews it and the threads that act under it.
#[derive(Clone, Debug)]
pub struct Validity {
    base: Instant,
    /// Nanoseconds after `base`.
    until_ns: Arc<AtomicU64>,
}

impl Validity {
    fn new(until: Instant) -> Validity {
        let v = Validity {
            base: Instant::now(),
            until_ns: Arc::new(AtomicU64::new(0)),
        };
        v.extend(until);
        v
    }

    fn extend(&self, until: Instant) {
        let ns = u64::try_from(until.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.until_ns.fetch_max(ns, Ordering::Release);
    }

    /// Whether the lease certainly holds now. Once it does not, the holder
    /// must not act under its owner ids: the control plane may have expired
    /// it and handed them to another.
    pub fn holds(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        now < self.until_ns.load(Ordering::Acquire)
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
    validity: Validity,
}

impl LeaseKeeper {
    /// Starts renewing the lease of client `id` (`name`), which holds until
    /// `until` so far, at the member at `endpoint`. If the control plane
    /// refuses a renewal (it expired the client), `on_lost` is called with
    /// the reason: the client must stop using its owner ids.
    pub fn start(
        endpoint: &str,
        token: &str,
        id: ClientId,
        name: &str,
        until: Instant,
        on_lost: impl FnOnce(&str) + Send + 'static,
    ) -> Result<LeaseKeeper, RunError> {
        let api = self::api(endpoint, token)?;
        let validity = Validity::new(until);
        let renewed = validity.clone();
        let name = name.to_owned();
        let (tx, rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("lease-{id}"))
            .spawn(move || {
                let lost = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt
                        .block_on(keep_lease_with(
                            &[api],
                            Leaseholder::Client(id),
                            async {
                                let _ = rx.await;
                            },
                            |sent, lease| renewed.extend(sent + lease),
                        ))
                        .map_err(|e| format!("{name}: {e}")),
                    Err(e) => Err(format!("cannot start the lease's runtime: {e}")),
                };
                if let Err(why) = &lost {
                    on_lost(why);
                }
                lost
            })
            .map_err(|source| RunError::Io {
                what: "cannot start the lease thread".into(),
                source,
            })?;
        Ok(LeaseKeeper {
            stop: Some(tx),
            thread: Some(thread),
            validity,
        })
    }

    /// Until when the lease certainly holds, for the threads acting under it.
    pub fn validity(&self) -> Validity {
        self.validity.clone()
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
            let forget = Command::ForgetClient { id: c.id };
            // Owner ids stay quarantined for a lease after the expiry: a
            // refusal for that is waited out, within EXPIRY_SLACK.
            let deadline = Instant::now() + EXPIRY_SLACK + Duration::from_millis(c.lease_ms);
            loop {
                match harness::control::call(&format!("cannot forget {}", c.name), api.command(&forget)).await
                {
                    Ok(_) => break,
                    Err(harness::control::ControlError::Api {
                        source: ClientError::Refused { message, .. },
                        ..
                    }) if message.contains("quarantined") && Instant::now() < deadline => {
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
    fn an_owner_block_must_be_what_was_asked_within_the_ids() {
        let b = |first, count| OwnerBlock { first, count };
        assert!(check_block(b(2, 3), 3).is_ok());
        assert!(check_block(b(OWNER_ID_END - 3, 3), 3).is_ok());
        assert!(check_block(b(2, 2), 3).is_err(), "fewer than asked");
        assert!(check_block(b(0, 3), 3).is_err(), "owner id 0 is nobody");
        assert!(check_block(b(OWNER_ID_END - 2, 3), 3).is_err(), "past the end");
        assert!(check_block(b(u16::MAX, 3), 3).is_err(), "no overflow");
    }

    #[test]
    fn a_validity_holds_until_its_latest_extension() {
        let now = Instant::now();
        let v = Validity::new(now + Duration::from_secs(3600));
        assert!(v.holds());
        v.extend(now); // an older renewal never shortens it
        assert!(v.holds());
        let lapsed = Validity::new(now);
        assert!(!lapsed.holds());
        lapsed.extend(now + Duration::from_secs(3600));
        assert!(lapsed.holds());
    }

    #[test]
    fn client_names_round_trip() {
        assert_eq!(client_number(&client_name(7)), Some(7));
        assert_eq!(client_number("loader"), None);
        assert_eq!(client_number("client-x"), None);
    }
}
