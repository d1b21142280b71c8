//! Client configuration of rTX.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a client runs transactions. Durations are written like `100us`,
/// `8ms` in TOML (humantime).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TxConfig {
    /// Estimated time of one locked object's share of a commit (`OP_TIME`):
    /// a lease is `now + n * op_time + drift` for `n` locked objects.
    #[serde(with = "humantime_serde")]
    pub op_time: Duration,
    /// Slack for unsynchronised clocks and delayed verbs (`DRIFT`).
    #[serde(with = "humantime_serde")]
    pub drift: Duration,
    /// Opt1: commit a single-object write set without a log.
    pub opt1: bool,
    /// Attempts of one transaction before giving up with `TooManyAborts`.
    pub attempts_max: u32,
    /// Backoff after an abort starts here and doubles per attempt...
    #[serde(with = "humantime_serde")]
    pub backoff_min: Duration,
    /// ...up to this.
    #[serde(with = "humantime_serde")]
    pub backoff_max: Duration,
    /// Repair other owners' expired locks (the point of rTX). Off only to
    /// show what it buys: a chaos campaign run with it off must fail, its
    /// clients blocked behind locks nobody releases, as optimal's are.
    pub repair: bool,
}

impl Default for TxConfig {
    fn default() -> Self {
        TxConfig {
            op_time: Duration::from_micros(100),
            drift: fabric::deadline::CLOCK_DRIFT_MAX,
            opt1: true,
            attempts_max: 10_000,
            backoff_min: Duration::from_micros(2),
            backoff_max: Duration::from_millis(1),
            repair: true,
        }
    }
}

impl TxConfig {
    /// The lease length for a commit that locks `objects` objects,
    /// `objects * op_time + drift`, in lease ticks (1/256 ms, rounded up;
    /// see [`crate::lease`]).
    pub fn lease_ticks(&self, objects: usize) -> u64 {
        let t = self.op_time * objects as u32 + self.drift;
        crate::lease::ticks_from_duration(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_paper_and_parse_from_toml() {
        let c = TxConfig::default();
        assert_eq!(c.lease_ticks(1), 2074, "100us + 8ms = 2073.6 ticks, rounded up");
        assert_eq!(c.lease_ticks(80), 16 * 256, "8ms + 8ms");
        let parsed: TxConfig = toml::from_str("op_time = \"250us\"\ndrift = \"5ms\"").unwrap();
        assert_eq!(parsed.op_time, Duration::from_micros(250));
        assert_eq!(parsed.drift, Duration::from_millis(5));
        assert!(parsed.opt1);
        assert!(toml::from_str::<TxConfig>("drift = \"soon\"").is_err());
        assert!(toml::from_str::<TxConfig>("drfit = \"1ms\"").is_err());
    }
}
