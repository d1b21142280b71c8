//! A lease on its own: registration for a block of owner ids, and the
//! lease kept on a thread of its own, for a tool that routes by a map of
//! its own (a `chaos run`, whose memory nodes hold the regions of their
//! flags). [`Cluster`](crate::Cluster) is this plus the map, the
//! transports and the indexes.

use std::sync::Arc;
use std::time::Duration;

use control_plane::state::{self as cp, OwnerBlock};
use fabric::{ClusterMap, Mandate};

use crate::members::Members;
use crate::session::Session;
use crate::ClusterError;

/// A registered client's owner ids and the lease it keeps on them.
pub struct Lease {
    me: cp::Client,
    mandate: Arc<Mandate>,
    reclaims: Arc<txn::ReclaimView>,
    session: Session,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("client", &self.me.id)
            .field("owners", &self.me.owners)
            .finish()
    }
}

impl Lease {
    /// Registers `name` for `owner_ids` owner ids with `lease` (`None`: the
    /// cluster's default) at the members at `endpoints`, and keeps the
    /// lease until [`Lease::stop`] or drop. `on_lost` hears why if the
    /// control plane refuses a renewal (the ids may be another's: stop
    /// using them). For callers outside any runtime.
    pub fn take(
        endpoints: &[String],
        token: &str,
        name: &str,
        owner_ids: u16,
        lease: Option<Duration>,
        on_lost: impl FnOnce(&str) + Send + 'static,
    ) -> Result<Lease, ClusterError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| ClusterError::Io {
                what: "cannot start a runtime to register".into(),
                source,
            })?;
        let members = Members::new(endpoints, token)?;
        let (me, sent) = rt.block_on(members.register_client(name, owner_ids, lease))?;
        let reclaims = txn::ReclaimView::new();
        rt.block_on(crate::session::prime_reclaims(
            &members,
            (me.id, me.registered_at_ms),
            &reclaims,
        ))?;
        let empty =
            ClusterMap::new(0, Vec::new(), Vec::new()).map_err(|e| ClusterError::Map(e.to_string()))?;
        let mandate = Mandate::new(empty, sent + Duration::from_millis(me.lease_ms));
        let session = Session::start(
            endpoints.to_vec(),
            token.to_owned(),
            (me.id, me.registered_at_ms),
            mandate.clone(),
            reclaims.clone(),
            false,
            on_lost,
        )?;
        Ok(Lease {
            me,
            mandate,
            reclaims,
            session,
        })
    }

    /// The client's record as registered (id, owner ids, lease length).
    pub fn client(&self) -> &cp::Client {
        &self.me
    }

    /// The owner ids held.
    pub fn owners(&self) -> OwnerBlock {
        self.me.owners
    }

    /// Whether the lease certainly holds now: once it does not, the holder
    /// must not act under its owner ids.
    pub fn holds(&self) -> bool {
        self.mandate.holds()
    }

    /// The reclaims the transaction clients acting under this lease must
    /// follow (`TxClient::follow_reclaims`), or a reclaim of a dead
    /// client's owner ids may hand out a block one of them holds.
    pub fn reclaims(&self) -> Arc<txn::ReclaimView> {
        self.reclaims.clone()
    }

    /// A shared handle on [`Lease::holds`] for the threads acting under it.
    pub fn validity(&self) -> Arc<Mandate> {
        self.mandate.clone()
    }

    /// Stops renewing. `Err` if the lease was lost meanwhile.
    pub fn stop(mut self) -> Result<(), ClusterError> {
        self.session.stop();
        match self.session.lost() {
            Some(why) => Err(ClusterError::LeaseLost(why)),
            None => Ok(()),
        }
    }
}
