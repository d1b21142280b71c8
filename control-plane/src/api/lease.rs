//! Keeping a lease alive: what a memory node or a compute node runs beside
//! its work.

use std::future::Future;
use std::time::{Duration, Instant};

use super::{ClientError, ControlClient, Renewed};
use crate::state::{ClientId, MemNodeId};

/// Pause after a failed renewal before the next try: short against any
/// lease (at least 1 ms), long enough not to hammer a member that is
/// electing a leader.
pub const RENEW_RETRY: Duration = Duration::from_millis(50);

/// Longest wait for one renewal before the lease is known (a third of it
/// afterwards): a member that accepts the connection and never answers
/// must not hold the holder past its lease.
pub const RENEW_TIMEOUT_INITIAL: Duration = Duration::from_millis(500);

/// Whose lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaseholder {
    /// A memory node.
    MemNode(MemNodeId),
    /// A memory node serving from a given image: a renewal names it, so
    /// that a record that names another image (the node was replaced, or
    /// a restore put an older record there) is not renewed by it.
    MemNodeImage {
        /// Its id.
        id: MemNodeId,
        /// The image it serves from.
        image: fabric::ImageId,
    },
    /// A client, as registered: a renewal names its registration, so that
    /// a record a restore put under the same id is not renewed by it.
    Client {
        /// Its id.
        id: ClientId,
        /// When it registered (its record's `registered_at_ms`).
        registered_at_ms: u64,
    },
}

/// A client's side of reclaims (`txn::quiesce`, implemented by the cluster
/// crate): what it reports with each renewal and what it hears back.
pub trait Quiescence: Send + Sync {
    /// How far the client has quiesced, for the next renewal.
    fn quiesced(&self) -> u64;
    /// What a granted renewal announced.
    fn heard(&self, renewed: &Renewed);
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

/// Renews `holder`'s lease every third of its length, through `members`
/// (any of the control plane's members; one is enough, more survive a
/// member's death), until `stop` resolves (`Ok`) or the control plane
/// refuses it (`Err`: the holder is unknown, dead or expired, and must
/// register again).
///
/// Each renewal waits at most a third of the lease ([`RENEW_TIMEOUT_INITIAL`]
/// before the first answer). A failure (a member down or cut off, an
/// election, a timeout) moves on to the next member after [`RENEW_RETRY`];
/// a lease may lapse meanwhile, which the leader then judges, and a later
/// renewal brings a suspect memory node back.
///
/// # Panics
/// If `members` is empty.
pub async fn keep_lease(
    members: &[ControlClient],
    holder: Leaseholder,
    stop: impl Future<Output = ()>,
) -> Result<(), LeaseLost> {
    keep_lease_with(members, holder, None, stop, |_, _| {}).await
}

/// [`keep_lease`], reporting a client's `quiescence` with each renewal and
/// handing it what the renewal announced, and calling `on_renewed(sent, lease)` after each renewal the
/// control plane granted, with the instant the request was sent and the
/// lease length. The holder's lease is then certainly valid until
/// `sent + lease` (the leader counts from when it heard the renewal,
/// later than `sent`): a holder that must never act on a lapsed lease
/// stops acting at that instant unless a later renewal extends it, even
/// while it cannot reach the control plane to hear that it expired.
///
/// # Panics
/// If `members` is empty.
pub async fn keep_lease_with(
    members: &[ControlClient],
    holder: Leaseholder,
    quiescence: Option<&dyn Quiescence>,
    stop: impl Future<Output = ()>,
    mut on_renewed: impl FnMut(Instant, Duration),
) -> Result<(), LeaseLost> {
    assert!(!members.is_empty(), "keep_lease needs at least one member");
    tokio::pin!(stop);
    let mut failing = false;
    let mut at = 0;
    let mut budget = RENEW_TIMEOUT_INITIAL;
    loop {
        let client = &members[at % members.len()];
        let sent = Instant::now();
        let renewal = async {
            match holder {
                Leaseholder::MemNode(id) => client.renew_memnode(id).await,
                Leaseholder::MemNodeImage { id, image } => client.renew_memnode_image(id, image).await,
                Leaseholder::Client { id, registered_at_ms } => {
                    client
                        .renew_client(id, Some(registered_at_ms), quiescence.map(|q| q.quiesced()))
                        .await
                }
            }
        };
        let renewed = tokio::time::timeout(budget, renewal).await;
        let pause = match renewed {
            Ok(Ok(r)) => {
                on_renewed(sent, Duration::from_millis(r.lease_ms));
                if let Some(q) = quiescence {
                    q.heard(&r);
                }
                if std::mem::take(&mut failing) {
                    tracing::info!(?holder, endpoint = client.endpoint(), "lease renewed again");
                }
                let third = Duration::from_millis(r.lease_ms / 3).max(Duration::from_millis(1));
                budget = third.max(RENEW_RETRY);
                third
            }
            Ok(Err(e @ ClientError::Refused { status, .. }))
                if status.as_u16() == 404 || status.as_u16() == 409 =>
            {
                return Err(LeaseLost { holder, source: e });
            }
            failed => {
                if !std::mem::replace(&mut failing, true) {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {}", humantime::format_duration(budget)),
                    };
                    tracing::warn!(?holder, endpoint = client.endpoint(), error = %why, "lease renewal failed; retrying");
                }
                at += 1;
                RENEW_RETRY
            }
        };
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
