//! The command line of `kintsugi bench lease` and its validation into a [`LeasePlan`].

use std::time::Duration;

use anyhow::bail;

use super::common::{check_threads, check_write_set, CommonArgs};
use crate::cli::units::parse_duration;
use bench::txn_plan::LeasePlan;

/// Arguments of `kintsugi bench lease`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What it measures (rTX paper, section 6.4 and Figure 18):
  Every client is alive, so every lock a transaction finds held with an expired lease is a false
  expiry: the lease was shorter than its live holder took, measured by the finder's clock. The bench
  counts, per cell, the transactions (TxClient::run calls, retries included) that met at least one
  such lock, over the transactions run: the false-expiry rate. It also counts the expired locks met
  and the repairs they led to.

Cells:
  One per --locks value (objects written per transaction) x --drift value x lease regulation:
    with     lease = now + n x --op-time + drift   (the TxConfig default rule, n = locks)
    without  lease = now + drift                    (a fixed lease: op_time set to zero)
  Each cell gets a fresh cluster with --objects objects (high contention by default, as the paper's
  100) and runs --threads clients for --duration. Each client's clock is off by a seeded random whole
  number of milliseconds in +/- --clock-skew (fault injection), emulating loosely synchronised hosts.
  Use more threads than cores (default 8): a holder preempted mid-commit is the live-but-slow client
  leases must tolerate. Results depend on the machine; that is the point.

Output:
  Two tables, with and without regulation: rows are lock counts, columns are drifts, entries are the
  false-expiry rate. Then one line per cell with its lease, transactions, commits/s, expired locks met
  and repairs, and the lease lead: after the cell, how far past its clock + lease the next lease a
  client takes ends. Leases count 1/256 ms ticks; TxClient takes each of an owner's leases at least
  one tick after the previous one and at most 1 ms (txn::LEAD_TICKS_MAX) ahead of its clock, waiting
  for its clock beyond (waits): clients taking lock words faster than 256,000/s run up to 1 ms ahead.
  After each cell the object counters are checked (commits x locks, no lock left held).

Examples:
  kintsugi bench lease
  kintsugi bench lease --drift 1ms,8ms --locks 1,40 --threads 16 --duration 2s
  kintsugi bench lease --clock-skew 0ms --json")]
pub struct LeaseArgs {
    /// Drifts to try, comma-separated (e.g. 1ms,5ms,8ms,10ms).
    #[arg(long, value_name = "LIST", default_value = "1ms,5ms,8ms,10ms", value_parser = parse_drifts)]
    pub drift: DurationList,
    /// Objects written (locked) per transaction, comma-separated. The paper's largest, 80, does not fit
    /// one rTX log here (at most 63 entries, txn::log::LOG_ENTRIES_MAX), hence 63.
    #[arg(long, value_name = "LIST", default_value = "1,20,63", value_parser = parse_counts)]
    pub locks: CountList,
    /// Client threads, each a TxClient with its own owner id and clock skew.
    #[arg(long, value_name = "T", default_value_t = 8)]
    pub threads: usize,
    /// How long each cell runs (e.g. 1s, 200ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Objects in the heap (100 = the paper's high-contention setup).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub objects: usize,
    /// Each client's clock is skewed by a random whole number of ms in +/- this.
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = parse_duration)]
    pub clock_skew: Duration,
    /// OP_TIME of the regulated leases (the TxConfig default is 100us).
    #[arg(long, value_name = "DURATION", default_value = "100us", value_parser = parse_duration)]
    pub op_time: Duration,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `--drift`: durations in the order given.
#[derive(Clone, Debug)]
pub struct DurationList(pub Vec<Duration>);

/// `--locks`: counts in the order given.
#[derive(Clone, Debug)]
pub struct CountList(pub Vec<usize>);

fn parse_drifts(s: &str) -> Result<DurationList, String> {
    let items = split_list(s)?;
    let mut out = Vec::new();
    for item in items {
        let d = parse_duration(item)?;
        if d.is_zero() {
            return Err(format!("drift '{item}' must be longer than zero"));
        }
        out.push(d);
    }
    Ok(DurationList(out))
}

fn parse_counts(s: &str) -> Result<CountList, String> {
    let items = split_list(s)?;
    let mut out = Vec::new();
    for item in items {
        let n = item
            .parse::<usize>()
            .map_err(|_| format!("'{item}' is not a number of objects"))?;
        out.push(n);
    }
    Ok(CountList(out))
}

/// Splits a comma-separated list; refuses empty items.
fn split_list(s: &str) -> Result<Vec<&str>, String> {
    let items: Vec<&str> = s.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err(format!("'{s}' is not a comma-separated list (an item is empty)"));
    }
    Ok(items)
}

impl LeaseArgs {
    pub fn validate(self) -> anyhow::Result<LeasePlan> {
        let common = self.common.validate()?;
        check_threads(self.threads)?;
        for &n in &self.locks.0 {
            check_write_set("--locks", n, self.objects)?;
        }
        if self.duration.is_zero() {
            bail!("--duration must be longer than zero");
        }
        if self.clock_skew.subsec_nanos() % 1_000_000 != 0 {
            bail!(
                "--clock-skew must be whole milliseconds (clocks are skewed in ms), got {}",
                humantime::format_duration(self.clock_skew)
            );
        }
        let clock_skew_ms = i64::try_from(self.clock_skew.as_millis())
            .ok()
            .filter(|&ms| ms <= 3_600_000)
            .ok_or_else(|| anyhow::anyhow!("--clock-skew must be at most 1h"))?;
        if self.op_time.is_zero() {
            bail!("--op-time must be longer than zero (zero is the 'without regulation' half of every cell)");
        }
        Ok(LeasePlan {
            drifts: self.drift.0,
            locks: self.locks.0,
            threads: self.threads,
            duration: self.duration,
            objects: self.objects,
            clock_skew_ms,
            op_time: self.op_time,
            common,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_refuse_garbage() {
        let d = parse_drifts("1ms, 5ms,8ms").unwrap().0;
        assert_eq!(d, [1, 5, 8].map(Duration::from_millis));
        assert!(parse_drifts("1ms,,5ms").is_err());
        assert!(parse_drifts("0ms").is_err());
        assert!(parse_drifts("soon").is_err());
        assert_eq!(parse_counts("1,20,80").unwrap().0, [1, 20, 80]);
        assert!(parse_counts("1,x").is_err());
        assert!(parse_counts("").is_err());
    }
}
