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

/// Attempts an operation spends waiting at least `wait` on a split that
/// never ends (a dead optimal splitter): for [`HashTable::set_attempts_max`]
/// when a client must give up on a blocked subtable within a deadline.
///
/// [`HashTable::set_attempts_max`]: super::HashTable::set_attempts_max
pub fn attempts_waiting(wait: Duration) -> u32 {
    let sleeps = wait.as_nanos().div_ceil(BACKOFF.as_nanos());
    SPINS.saturating_add(u32::try_from(sleeps).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_waiting_counts_spins_then_sleeps() {
        assert_eq!(attempts_waiting(Duration::ZERO), SPINS);
        assert_eq!(attempts_waiting(Duration::from_millis(1)), SPINS + 10);
        assert_eq!(attempts_waiting(Duration::from_secs(u64::MAX)), u32::MAX);
    }
}
