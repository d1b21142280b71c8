//! A client process's standing with the control plane, kept on a thread of
//! its own: its lease (renewed every third of it, rotated over members,
//! each renewal bounded) and its map (long-polled and installed in the
//! process's [`Mandate`], which every fabric client of the process reads
//! before each batch).
//!
//! Each renewal also reports how far the process's transaction clients
//! have quiesced and takes in which owner ids are announced for reclaim
//! (`txn::quiesce`, through the process's [`ReclaimView`]).
//!
//! A thread, not a task on the caller's runtime: a client whose verbs
//! complete inline (`shm`) may never yield, and a renewal that waits for
//! it would let the lease lapse.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use control_plane::api::{keep_lease_with, Leaseholder, Quiescence, Renewed};
use control_plane::state::ClientId;
use fabric::{Epoch, Mandate};
use tokio::sync::{oneshot, watch};
use txn::{Announced, OwnerRange, ReclaimView};

use crate::members::{chain, Members};
use crate::placement::{RETRY_PAUSE, WATCH_WAIT};
use crate::ClusterError;

/// The lease and map keeper of one process.
pub(crate) struct Session {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    lost: Arc<Mutex<Option<String>>>,
    epochs: watch::Receiver<Epoch>,
}

impl Session {
    /// Starts keeping client `id`'s lease and, with `follow_map`, following
    /// the map into `mandate`, through the members at `endpoints`, and
    /// reporting and updating `reclaims`. `on_lost` hears why, if the lease
    /// is lost.
    pub(crate) fn start(
        endpoints: Vec<String>,
        token: String,
        (id, registered_at_ms): (ClientId, u64),
        mandate: Arc<Mandate>,
        reclaims: Arc<ReclaimView>,
        follow_map: bool,
        on_lost: impl FnOnce(&str) + Send + 'static,
    ) -> Result<Session, ClusterError> {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (epoch_tx, epochs) = watch::channel(mandate.epoch());
        let lost = Arc::new(Mutex::new(None));
        let lost_by_thread = lost.clone();
        let thread = std::thread::Builder::new()
            .name(format!("kintsugi-session-{id}"))
            .spawn(move || {
                let why = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt.block_on(keep(
                        endpoints,
                        token,
                        (id, registered_at_ms),
                        (&mandate, &Reclaims(reclaims)),
                        follow_map,
                        epoch_tx,
                        stop_rx,
                    )),
                    Err(e) => Some(format!("cannot start the session's runtime: {e}")),
                };
                if let Some(why) = why {
                    mandate.revoke();
                    tracing::error!(client = id, reason = %why, "lease lost: this process issues no more verbs");
                    *lost_by_thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                    on_lost(&why);
                }
            })
            .map_err(|source| ClusterError::Io {
                what: "cannot start the session thread".into(),
                source,
            })?;
        Ok(Session {
            stop: Some(stop_tx),
            thread: Some(thread),
            lost,
            epochs,
        })
    }

    /// Why the lease was lost, if it was.
    pub(crate) fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Epochs as they are installed.
    pub(crate) fn epochs(&self) -> watch::Receiver<Epoch> {
        self.epochs.clone()
    }

    /// Stops renewing and following (the lease then lapses, unless the
    /// client is removed first).
    pub(crate) fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Renews client `id`'s lease once, now, to learn which owner ids are
/// announced for reclaim before any transaction client of the process
/// exists: one made later dooms them at its first allocation
/// (`txn::quiesce`). A reclaim that checked the live clients before this
/// one registered does not wait for it, so it must know.
pub(crate) async fn prime_reclaims(
    members: &Members,
    (id, registered_at_ms): (ClientId, u64),
    view: &Arc<ReclaimView>,
) -> Result<(), ClusterError> {
    let renewed = members
        .call("learning the reclaims under way", |c| async move {
            c.renew_client(id, Some(registered_at_ms), Some(0)).await
        })
        .await?;
    Reclaims(view.clone()).heard(&renewed);
    Ok(())
}

/// The process's reclaim view, as the lease keeper reports it.
struct Reclaims(Arc<ReclaimView>);

impl Quiescence for Reclaims {
    fn quiesced(&self) -> u64 {
        self.0.quiesced()
    }

    fn heard(&self, renewed: &Renewed) {
        let announced: Vec<Announced> = renewed
            .announced
            .iter()
            .map(|a| Announced {
                owners: OwnerRange {
                    first: a.owners.first,
                    count: a.owners.count,
                },
                seq: a.seq,
            })
            .collect();
        self.0.update(renewed.reclaim_seq, &announced);
    }
}

/// Runs until stopped (`None`) or the lease is lost (`Some(why)`).
async fn keep(
    endpoints: Vec<String>,
    token: String,
    (id, registered_at_ms): (ClientId, u64),
    (mandate, reclaims): (&Mandate, &Reclaims),
    follow_map: bool,
    epochs: watch::Sender<Epoch>,
    stop: oneshot::Receiver<()>,
) -> Option<String> {
    // Made on this thread's runtime: pooled connections progress only
    // while the runtime that made them is driven.
    let members = match Members::new(&endpoints, &token) {
        Ok(m) => m,
        Err(e) => return Some(e.to_string()),
    };
    let lease = keep_lease_with(
        members.clients(),
        Leaseholder::Client { id, registered_at_ms },
        Some(reclaims),
        async {
            let _ = stop.await;
        },
        |sent, lease| mandate.extend(sent + lease),
    );
    let follow = async {
        if follow_map {
            match follow(&members, mandate, &epochs).await {}
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        kept = lease => kept.err().map(|e| chain(&e)),
        () = follow => None,
    }
}

/// Long-polls the map and installs every newer one. A member serving an
/// older map than the one installed is refused by the mandate (epochs
/// never go backwards) and logged, and the next member is asked.
async fn follow(
    members: &Members,
    mandate: &Mandate,
    epochs: &watch::Sender<Epoch>,
) -> std::convert::Infallible {
    let mut at = 0usize;
    loop {
        let member = &members.clients()[at % members.clients().len()];
        match member.map(Some(mandate.epoch()), Some(WATCH_WAIT)).await {
            Ok(map) => match mandate.install(map) {
                Ok(true) => {
                    let epoch = mandate.epoch();
                    tracing::debug!(epoch, "map installed");
                    epochs.send_replace(epoch);
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(member = member.endpoint(), error = %e, "map refused; asking the next member");
                    at += 1;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            },
            Err(e) => {
                tracing::warn!(member = member.endpoint(), error = %chain(&e), "cannot watch the map; trying the next member");
                at += 1;
                tokio::time::sleep(RETRY_PAUSE.min(Duration::from_millis(100))).await;
            }
        }
    }
}
