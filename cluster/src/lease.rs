//! A lease on its own: registration for a block of owner ids, and the
//! lease kept on a thread of its own, for a tool that routes by a map of
//! its own (a `chaos run`, whose memory nodes hold the regions of their
//! flags). [`Cluster`](crate::Cluster) is this plus the map, the
//! transports and the indexes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use control_plane::state::{self as cp, Command, Outcome, OwnerBlock, OWNER_ID_END};
use fabric::{ClusterMap, Mandate};

use crate::members::Members;
use crate::session::Session;
use crate::ClusterError;

/// A registered client's owner ids and the lease it keeps on them.
pub struct Lease {
    me: cp::Client,
    mandate: Arc<Mandate>,
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
        let register = Command::RegisterClient {
            name: name.to_owned(),
            owner_ids,
            lease_ms: lease.map_or(0, |l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
        };
        let sent = Instant::now();
        let me = match rt.block_on(members.call(&format!("registering client {name:?}"), |c| {
            let r = register.clone();
            async move { c.command(&r).await }
        }))? {
            Outcome::Client(c) => c,
            other => {
                return Err(ClusterError::Map(format!(
                    "unexpected answer to registration: {other:?}"
                )))
            }
        };
        check_block(me.owners, owner_ids)?;
        let empty =
            ClusterMap::new(0, Vec::new(), Vec::new()).map_err(|e| ClusterError::Map(e.to_string()))?;
        let mandate = Mandate::new(empty, sent + Duration::from_millis(me.lease_ms));
        let session = Session::start(
            endpoints.to_vec(),
            token.to_owned(),
            me.id,
            mandate.clone(),
            false,
            on_lost,
        )?;
        Ok(Lease { me, mandate, session })
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
