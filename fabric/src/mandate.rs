//! A process's mandate to issue verbs: the one map every fabric client of
//! the process routes by, and the instant until which the process's lease
//! certainly holds.
//!
//! Whoever follows the control plane installs each newer map here, and
//! whoever keeps the lease extends it; every [`Client`](crate::Client)
//! made under the mandate takes the newest map before its next batch (one
//! atomic load when nothing changed) and issues no verb once the lease is
//! not certain. That is the rule that makes owner ids safe to hand out
//! again: a client that cannot prove its lease holds (it could not renew,
//! or it was paused past it) stops before the control plane may expire it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::addr::{Epoch, NodeId};
use crate::map::{ClusterMap, MapError};

/// `Mandate::until_ns` of a revoked lease.
const REVOKED: u64 = u64::MAX;

/// The map and lease of one process, shared by its clients.
#[derive(Debug)]
pub struct Mandate {
    map: RwLock<Arc<ClusterMap>>,
    /// The installed map's epoch, read on every batch without the lock.
    epoch: AtomicU64,
    base: Instant,
    /// Nanoseconds after `base` until which the lease certainly holds;
    /// 0: not (yet, or any more); [`REVOKED`]: never again. One word, so
    /// that a batch's check is one load and an extension cannot race a
    /// revocation.
    until_ns: AtomicU64,
    /// Wakes [`Mandate::held_within`] on every extension and revocation.
    changed: Notify,
    /// Wakes [`Mandate::stops_routing_to`] on every newer map.
    installed: Notify,
}

impl Mandate {
    /// A mandate routing by `map` whose lease holds until `until`.
    pub fn new(map: ClusterMap, until: Instant) -> Arc<Mandate> {
        let m = Mandate {
            epoch: AtomicU64::new(map.epoch()),
            map: RwLock::new(Arc::new(map)),
            base: Instant::now(),
            until_ns: AtomicU64::new(0),
            changed: Notify::new(),
            installed: Notify::new(),
        };
        m.extend(until);
        Arc::new(m)
    }

    /// Installs a newer map for every client of the process. A map at the
    /// installed epoch is ignored (`Ok(false)`); an older one is refused:
    /// epochs never go backwards, and a client that routed by an older map
    /// would be fenced by every node anyway.
    pub fn install(&self, map: ClusterMap) -> Result<bool, MapError> {
        let mut current = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.epoch() < current.epoch() {
            return Err(MapError(format!(
                "a map at epoch {} is older than the one in use (epoch {}): refused",
                map.epoch(),
                current.epoch()
            )));
        }
        if map.epoch() == current.epoch() {
            return Ok(false);
        }
        let epoch = map.epoch();
        *current = Arc::new(map);
        self.epoch.store(epoch, Ordering::Release);
        drop(current);
        self.installed.notify_waiters();
        Ok(true)
    }

    /// Resolves once a map newer than `after` is installed that routes no
    /// verb to `node` (recovery evicted it from every region it held): a
    /// transport trying to reach a dead node stops then, and the batch's
    /// caller routes again by the new map instead of waiting out the
    /// attempts.
    pub async fn stops_routing_to(&self, node: NodeId, after: Epoch) {
        loop {
            let installed = self.installed.notified();
            tokio::pin!(installed);
            installed.as_mut().enable();
            // The epoch first: a transport arms this for every batch it
            // waits on, and until a newer map is in, no map need be read.
            if self.epoch() > after && !self.map().routes_to(node) {
                return;
            }
            installed.await;
        }
    }

    /// The map in force.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The epoch of the map in force.
    pub fn epoch(&self) -> Epoch {
        self.epoch.load(Ordering::Acquire)
    }

    /// The lease certainly holds until `until` (a renewal sent at `s` and
    /// granted for `l` gives `s + l`). Never shortens it, and never brings
    /// back a revoked one.
    pub fn extend(&self, until: Instant) {
        let ns = u64::try_from(until.saturating_duration_since(self.base).as_nanos())
            .unwrap_or(u64::MAX)
            .min(REVOKED - 1);
        let _ = self
            .until_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now != REVOKED && ns > now).then_some(ns)
            });
        self.changed.notify_waiters();
    }

    /// The lease is lost (the control plane refused it, or the process is
    /// closing): no verb is issued under this mandate again, whatever
    /// renewal arrives late.
    pub fn revoke(&self) {
        self.until_ns.store(REVOKED, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Whether the lease certainly holds now.
    pub fn holds(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let until = self.until_ns.load(Ordering::Acquire);
        now < until && until != REVOKED
    }

    /// Waits, at most `within`, until the lease certainly holds again (a
    /// renewal that was late arrives); false if it does not by then or is
    /// revoked. A lease that lapsed only because the control plane was
    /// briefly without a leader comes back this way.
    pub async fn held_within(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before the check, so an extension between the
            // check and the wait is not missed.
            let changed = self.changed.notified();
            if self.holds() {
                return true;
            }
            if self.until_ns.load(Ordering::Acquire) == REVOKED {
                return false;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.holds();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::map::{NodeInfo, RegionInfo, ReplicaLoc};

    fn map(epoch: Epoch) -> ClusterMap {
        let nodes = vec![NodeInfo {
            id: 1,
            endpoint: "n1".into(),
        }];
        let regions = vec![RegionInfo {
            id: 1,
            size: 4096,
            replicas: vec![ReplicaLoc { node: 1, key: 9 }],
        }];
        ClusterMap::new(epoch, nodes, regions).unwrap()
    }

    #[test]
    fn maps_only_move_forward() {
        let m = Mandate::new(map(3), Instant::now() + Duration::from_secs(60));
        assert_eq!(m.install(map(3)), Ok(false));
        assert_eq!(m.install(map(5)), Ok(true));
        assert_eq!(m.epoch(), 5);
        let err = m.install(map(4)).unwrap_err();
        assert!(err.0.contains("older"), "{err}");
        assert_eq!(m.map().epoch(), 5);
    }

    #[test]
    fn the_lease_holds_until_its_latest_extension_or_a_revocation() {
        let now = Instant::now();
        let m = Mandate::new(map(1), now);
        assert!(!m.holds(), "a lease that ends now does not hold");
        m.extend(now + Duration::from_secs(3600));
        assert!(m.holds());
        m.extend(now);
        assert!(m.holds(), "an older renewal never shortens it");
        m.revoke();
        assert!(!m.holds());
        m.extend(now + Duration::from_secs(7200));
        assert!(
            !m.holds(),
            "a renewal arriving after a revocation does not bring it back"
        );
    }

    #[tokio::test]
    async fn a_lapsed_lease_is_waited_for_until_extended_or_revoked() {
        let now = Instant::now();
        let m = Mandate::new(map(1), now);
        assert!(!m.held_within(Duration::ZERO).await, "lapsed, nothing extends it");
        let waiting = {
            let m = m.clone();
            tokio::spawn(async move { m.held_within(Duration::from_secs(3600)).await })
        };
        tokio::task::yield_now().await;
        m.extend(now + Duration::from_secs(3600));
        assert!(waiting.await.unwrap(), "an extension ends the wait");
        let lapsed = Mandate::new(map(1), now);
        let waiting = {
            let m = lapsed.clone();
            tokio::spawn(async move { m.held_within(Duration::from_secs(3600)).await })
        };
        lapsed.revoke();
        assert!(!waiting.await.unwrap(), "a revocation ends the wait");
    }
}
