//! Bounded calls and polls of `bench control`'s set-up and measurements.

use std::time::Instant;

pub use harness::control::{CALL_TIMEOUT, POLL};

/// One API call of the setup, bounded by [`CALL_TIMEOUT`].
pub async fn call<T, E>(f: impl std::future::Future<Output = Result<T, E>>) -> crate::Result<T>
where
    crate::BenchError: From<E>,
{
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => Ok(r?),
        Err(_) => crate::bail!("no answer within {CALL_TIMEOUT:?}"),
    }
}

/// Polls `check` every [`POLL`] until it answers true; its errors count as
/// "not yet" until `deadline`, after which the last one is returned.
pub async fn wait_until<F, Fut>(deadline: Instant, what: &str, mut check: F) -> crate::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<bool>>,
{
    loop {
        let last = match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            Err(e) => Some(e),
        };
        if Instant::now() >= deadline {
            let e = last.unwrap_or_else(|| crate::msg!("still not the case"));
            return Err(e.context(format!("timed out waiting for {what}")));
        }
        tokio::time::sleep(POLL).await;
    }
}
