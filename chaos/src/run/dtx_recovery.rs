//! DTX's recovery inside `chaos run`: the run's index is not in the
//! control plane's catalog, so no recovery coordinator knows of it; this
//! task on the runner does for a dtx variant what the coordinator does for
//! a dtx index (`Cluster::finish_logs`). It watches the control plane for
//! the run's clients it expires and, once a client's quarantine is over
//! (its expiry and one more client lease: DTX writes in place, so nothing
//! the client sent may still land when its logs are rolled), rolls the DTX
//! logs of every owner id the client held. Until then the survivors wait
//! on its locks: the shape of the paper's Figure 14 for DTX.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use control_plane::api::ControlClient;
use control_plane::state::ClientState;
use serde::Serialize;

use super::client::connect;
use super::control::{self, POLL};
use super::{unix_ms, RunError, RunSpec, REGION};

/// One client's DTX logs rolled.
#[derive(Clone, Debug, Serialize)]
pub struct Rolled {
    /// The client (process number).
    pub client: u32,
    /// When the control plane expired it, in ms after the run's start.
    pub expired_at_ms: f64,
    /// When its logs were rolled (done), in ms after the run's start.
    pub rolled_at_ms: f64,
    /// Records put back from undo images.
    pub rolled_back: u32,
    /// Records made visible at their new version.
    pub rolled_forward: u32,
    /// Locks freed.
    pub released: u32,
}

/// The recoverer, running on a thread of its own (the runner's thread
/// waits on the clients' lines meanwhile, outside any runtime).
pub struct Recoverer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<Rolled>, RunError>>,
}

impl Recoverer {
    /// Starts watching for the clients of `spec`'s run the control plane
    /// (`member`: its address and token) expires, acting as owner id
    /// `owner` (leased for it); `t0_unix_ms`: the run's start, for the
    /// times reported.
    pub fn start(
        member: (&str, &str),
        spec: &RunSpec,
        owner: u16,
        t0_unix_ms: u64,
        credential: Option<fabric::Credential>,
    ) -> Result<Recoverer, RunError> {
        // A client of its own: one made on the runner's runtime keeps its
        // connections there, and that runtime is not driven meanwhile.
        let api = control::api(member.0, member.1)?;
        let stop = Arc::new(AtomicBool::new(false));
        let endpoint = spec.endpoint.clone();
        let rt = super::runtime()?;
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dtx-recovery".into())
            .spawn(move || rt.block_on(watch(api, endpoint, credential, owner, t0_unix_ms, flag)))
            .map_err(|source| RunError::Io {
                what: "cannot start the DTX recoverer's thread".into(),
                source,
            })?;
        Ok(Recoverer { stop, thread })
    }

    /// Stops watching; returns what was rolled.
    pub fn finish(self) -> Result<Vec<Rolled>, RunError> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| RunError::Process("the DTX recoverer's thread panicked".into()))?
    }
}

async fn watch(
    api: ControlClient,
    endpoint: super::Endpoint,
    credential: Option<fabric::Credential>,
    owner: u16,
    t0_unix_ms: u64,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Rolled>, RunError> {
    let mut fabric = connect(&endpoint, credential).await?;
    let heap = txn::Heap::open(&mut fabric, REGION)
        .await
        .map_err(super::RunError::index("cannot open the heap"))?;
    let mut dtx = txn::dtx::DtxClient::new(fabric, heap, owner, txn::TxConfig::default())
        .map_err(super::RunError::index(format!("cannot act as owner {owner}")))?;
    let since = |ms: u64| ms.saturating_sub(t0_unix_ms) as f64;
    let mut rolled: Vec<Rolled> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        // The clients and the cluster clock their quarantines end by.
        let (clients, clock_ms) = match api.status().await {
            Ok(s) => (s.clients, s.clock_ms),
            // A member busy or restarting: look again.
            Err(_) => {
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        for c in clients {
            let (Some(n), ClientState::Expired { at_ms, .. }) = (control::client_number(&c.name), c.state)
            else {
                continue;
            };
            if rolled.iter().any(|r| r.client == n) || clock_ms < at_ms.saturating_add(c.lease_ms) {
                continue;
            }
            let mut sum = txn::dtx::Finished::default();
            for id in c.owners.ids() {
                sum += dtx
                    .finish_owner_log(id)
                    .await
                    .map_err(super::RunError::index(format!(
                        "cannot roll the DTX logs of owner {id}"
                    )))?;
            }
            dtx.release_pending()
                .await
                .map_err(super::RunError::index("cannot release"))?;
            tracing::info!(client = n, ?sum, "DTX logs rolled");
            rolled.push(Rolled {
                client: n,
                // On the cluster clock, which trails the wall clock by the
                // time no member led: a timeline position, not a judgement.
                expired_at_ms: since(at_ms),
                rolled_at_ms: since(unix_ms()),
                rolled_back: sum.rolled_back,
                rolled_forward: sum.rolled_forward,
                released: sum.released,
            });
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(rolled)
}
