//! Keeping a lease alive: what a memory node or a compute node runs beside
//! its work.

use std::future::Future;
use std::time::Duration;

use super::{ClientError, ControlClient};
use crate::state::{ClientId, MemNodeId};

/// Pause after a failed renewal before the next try: short against any
/// lease (at least 1 ms), long enough not to hammer a member that is
/// electing a leader.
pub const RENEW_RETRY: Duration = Duration::from_millis(50);

/// Whose lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaseholder {
    /// A memory node.
    MemNode(MemNodeId),
    /// A client.
    Client(ClientId),
}

/// Why a lease can no longer be kept.
#[derive(Debug, thiserror::Error)]
#[error("the control plane refuses to renew the lease of {holder:?}: {source}")]
pub struct LeaseLost {
    /// Whose lease.
    pub holder: Leaseholder,
    /// The refusal: unknown, declared dead, or expired.
    #[source]
    pub source: ClientError,
}

/// Renews `holder`'s lease every third of its length until `stop`
/// resolves (`Ok`) or the control plane refuses it (`Err`: the holder is
/// unknown, dead or expired, and must register again).
///
/// Failures to reach a leader (elections, a member down) are retried every
/// [`RENEW_RETRY`]; a lease may lapse meanwhile, which the leader then
/// judges, and a later renewal brings a suspect memory node back.
pub async fn keep_lease(
    client: &ControlClient,
    holder: Leaseholder,
    stop: impl Future<Output = ()>,
) -> Result<(), LeaseLost> {
    tokio::pin!(stop);
    let mut failing = false;
    loop {
        let renewed = match holder {
            Leaseholder::MemNode(id) => client.renew_memnode(id).await,
            Leaseholder::Client(id) => client.renew_client(id).await,
        };
        let pause = match renewed {
            Ok(r) => {
                if std::mem::take(&mut failing) {
                    tracing::info!(?holder, "lease renewed again");
                }
                Duration::from_millis(r.lease_ms / 3).max(Duration::from_millis(1))
            }
            Err(e @ ClientError::Refused { status, .. })
                if status.as_u16() == 404 || status.as_u16() == 409 =>
            {
                return Err(LeaseLost { holder, source: e });
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(?holder, error = %e, "lease renewal failed; retrying");
                }
                RENEW_RETRY
            }
        };
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
