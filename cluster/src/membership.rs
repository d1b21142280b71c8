//! A process that survives losing its lease.
//!
//! A client whose lease is lost (the process was paused past it, cut off
//! from every member, or the control plane expired it) issues no verb any
//! more: its owner ids may already be another's. A long-running process
//! (the RESP gateway, `kintsugi cluster ycsb`, a service on this library)
//! does not stay such a zombie: it joins again as a new client, with new
//! owner ids, and recovery rolls the old client's logs and frees its ids
//! as for any dead client (the recovery coordinator does the same for
//! itself). The old client is dropped, not closed: closing finishes logs,
//! which a client without a lease must not write.
//!
//! [`Membership`] holds the client in force. [`Membership::lost`] resolves
//! once its lease is gone; [`Membership::rejoin`] joins again, with backoff,
//! for up to a time; [`Membership::keep`] does both for the process's life.
//! Whoever holds index handles reopens them under the new client
//! ([`Membership::next_after`]). Operations issued meanwhile fail with a
//! retryable error (`FabricError::LeaseUncertain`, `ClusterError::LeaseLost`).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::{Cluster, ClusterError, ClusterOptions};

/// How often [`Membership::lost`] looks at the lease: the session renews it
/// every third of a lease, so a tenth of the shortest default lease finds a
/// loss well within the next renewal.
pub const LEASE_WATCH: Duration = Duration::from_millis(100);

/// The longest pause between attempts at joining again: a control plane
/// back after an outage is found within this, without hammering it meanwhile.
pub const REJOIN_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How long a process tries to join again before it gives up, by default:
/// longer than a control-plane member's restart or an election under load,
/// short enough that a control plane gone for good ends the process (its
/// supervisor restarts it) instead of leaving it logging for ever.
pub const REJOIN_TIMEOUT: Duration = Duration::from_secs(120);

/// How a membership joins again: what [`Cluster::connect_with`] was given,
/// and for how long each time it is tried.
#[derive(Clone, Debug)]
struct Joining {
    endpoints: Vec<String>,
    token: String,
    options: ClusterOptions,
    timeout: Duration,
}

/// The cluster client this process holds now, replaced by a new one when
/// its lease is lost. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Membership {
    current: watch::Sender<Arc<Cluster>>,
    /// `None`: made of a client ([`Membership::of`]) that cannot join again.
    joining: Option<Joining>,
    /// Set once joining again was given up: why.
    ended: OnceLock<String>,
}

impl Membership {
    /// Joins the cluster ([`Cluster::connect_with`]) as a process that will
    /// join again, with the same options, whenever its lease is lost, trying
    /// for up to `rejoin_timeout` each time ([`REJOIN_TIMEOUT`] is the
    /// default). The options' fault injector belongs to the first client
    /// only.
    pub async fn join<S: AsRef<str>>(
        endpoints: &[S],
        token: &str,
        options: ClusterOptions,
        rejoin_timeout: Duration,
    ) -> Result<Membership, ClusterError> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let client = Cluster::connect_with(&endpoints, token, options.clone()).await?;
        Ok(Membership {
            current: watch::Sender::new(Arc::new(client)),
            joining: Some(Joining {
                endpoints,
                token: token.to_owned(),
                options: ClusterOptions {
                    faults: None,
                    ..options
                },
                timeout: rejoin_timeout,
            }),
            ended: OnceLock::new(),
        })
    }

    /// A membership of `client` alone, which never joins again: its lease
    /// lost, whoever waits for a new client learns that there is none.
    pub fn of(client: Arc<Cluster>) -> Membership {
        Membership {
            current: watch::Sender::new(client),
            joining: None,
            ended: OnceLock::new(),
        }
    }

    /// The client in force.
    pub fn current(&self) -> Arc<Cluster> {
        self.current.borrow().clone()
    }

    /// Every change of the client in force.
    pub fn changes(&self) -> watch::Receiver<Arc<Cluster>> {
        self.current.subscribe()
    }

    /// Why joining again was given up, once it was.
    pub fn ended(&self) -> Option<&str> {
        self.ended.get().map(String::as_str)
    }

    /// Resolves with why once the lease of the client in force is lost, or
    /// has not been certain for two lease lengths (a control plane that
    /// does not answer, a pause): by then the control plane has expired it,
    /// or will before any renewal of it could be believed.
    pub async fn lost(&self) -> String {
        let mut uncertain_since: Option<Instant> = None;
        loop {
            let c = self.current();
            if let Some(why) = c.lease_lost() {
                return why;
            }
            if c.lease_holds() {
                uncertain_since = None;
            } else {
                let since = *uncertain_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= c.lease() * 2 {
                    return format!("not renewed for {:?}", since.elapsed());
                }
            }
            drop(c);
            tokio::time::sleep(LEASE_WATCH).await;
        }
    }

    /// Joins again as a new client after the lease was lost (`why`), trying
    /// with backoff for up to the rejoin timeout; once joined, runs `ready` on the new
    /// client (opening what the process serves from, say), which is tried
    /// again with the join if it fails. Then the new client is the one in
    /// force, and the old one is dropped (its ids are recovery's).
    ///
    /// Gives up with [`ClusterError::LeaseLost`], naming the last failure,
    /// once the rejoin timeout has passed; from then on [`Membership::ended`] says why
    /// and [`Membership::next_after`] fails.
    pub async fn rejoin_with<T>(
        &self,
        why: &str,
        mut ready: impl AsyncFnMut(&Cluster) -> Result<T, ClusterError>,
    ) -> Result<(Arc<Cluster>, T), ClusterError> {
        let Some(joining) = &self.joining else {
            return Err(self.end(format!("{why}; this process does not join again")));
        };
        let timeout = joining.timeout;
        let since = Instant::now();
        let mut pause = LEASE_WATCH;
        loop {
            let attempt = async {
                let c = Cluster::connect_with(&joining.endpoints, &joining.token, joining.options.clone())
                    .await?;
                let made = ready(&c).await?;
                Ok::<_, ClusterError>((c, made))
            };
            match attempt.await {
                Ok((client, made)) => {
                    let client = Arc::new(client);
                    let old = self.current.send_replace(client.clone());
                    tracing::info!(
                        client = client.id(),
                        old = old.id(),
                        "joined the cluster again as a new client"
                    );
                    // Not closed: its lease is gone, and closing writes logs.
                    drop(old);
                    return Ok((client, made));
                }
                Err(e) if since.elapsed() >= timeout => {
                    return Err(self.end(format!(
                        "{why}, and could not join again within {}: {e}",
                        humantime::format_duration(timeout)
                    )));
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?pause, "cannot join the cluster again yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(REJOIN_BACKOFF_MAX);
                }
            }
        }
    }

    /// [`Membership::rejoin_with`] with nothing to make ready.
    pub async fn rejoin(&self, why: &str) -> Result<Arc<Cluster>, ClusterError> {
        Ok(self.rejoin_with(why, async |_| Ok(())).await?.0)
    }

    /// For the process's life: waits until the lease is lost, joins again,
    /// and again. Returns only when joining again was given up (after the
    /// rejoin timeout), with why. `joined` hears of each new client.
    pub async fn keep(&self, mut joined: impl FnMut(&Cluster)) -> ClusterError {
        loop {
            let why = self.lost().await;
            tracing::warn!(%why, client = self.current().id(), "the cluster lease was lost: joining again as a new client");
            match self.rejoin(&why).await {
                Ok(c) => joined(&c),
                Err(e) => return e,
            }
        }
    }

    /// The first client in force other than `old`, once there is one: what
    /// a holder of handles opened under `old` reopens them under, after an
    /// operation failed because `old`'s lease was lost. Fails at once for a
    /// membership that does not join again, once joining again was given
    /// up, or when no [`Membership::keep`] (or other caller of
    /// [`Membership::rejoin`]) made a new client within the time one would
    /// take: two leases to find the loss, the rejoin timeout, a map's wait.
    pub async fn next_after(&self, old: &Arc<Cluster>) -> Result<Arc<Cluster>, ClusterError> {
        let Some(joining) = &self.joining else {
            return Err(ClusterError::LeaseLost(
                "this process's client does not join again".into(),
            ));
        };
        let wait_max = old.lease() * 2 + joining.timeout + crate::MAP_WAIT;
        let mut changes = self.changes();
        let waited = tokio::time::timeout(
            wait_max,
            changes.wait_for(|c| !Arc::ptr_eq(c, old) || self.ended.get().is_some()),
        )
        .await;
        match waited {
            Ok(Ok(c)) if !Arc::ptr_eq(&*c, old) => Ok(c.clone()),
            Ok(_) => Err(ClusterError::LeaseLost(
                self.ended().unwrap_or("the membership ended").to_owned(),
            )),
            Err(_) => Err(ClusterError::LeaseLost(format!(
                "no new client joined within {}",
                humantime::format_duration(wait_max)
            ))),
        }
    }

    /// Records that joining again is over (`why`), wakes whoever waits for a
    /// new client, and returns the error to report.
    fn end(&self, why: String) -> ClusterError {
        let _ = self.ended.set(why.clone());
        self.current.send_modify(|_| {});
        ClusterError::LeaseLost(why)
    }

    /// Leaves the cluster with the client in force ([`Cluster::close`]);
    /// every handle must be dropped first, and nothing else may hold it.
    pub async fn close(self) -> Result<(), ClusterError> {
        let client = self.current();
        drop(self.current);
        match Arc::into_inner(client) {
            Some(c) => c.close().await,
            None => Err(ClusterError::Map(
                "the cluster client is still shared: drop every clone before closing".into(),
            )),
        }
    }
}
