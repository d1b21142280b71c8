//! Waiting for a split to end.

use std::time::Duration;

/// Attempts spun (yielding) before a waiter starts sleeping between them.
const SPINS: u32 = 1_024;
/// Sleep between attempts after the spins: long enough not to burn a core
/// against a dead splitter (optimal), short next to a live split.
const BACKOFF: Duration = Duration::from_micros(100);

/// Waits before attempt `attempt` of something a split holds up.
pub(crate) async fn backoff(attempt: u32) {
    if attempt <= SPINS || tokio::runtime::Handle::try_current().is_err() {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(BACKOFF).await;
    }
}
