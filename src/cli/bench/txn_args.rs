//! The command line of `kintsugi bench txn` and its validation into a [`TxnPlan`].

use std::time::Duration;

use anyhow::bail;

use super::common::{check_threads, check_write_set, CommonArgs};
use crate::cli::units::parse_duration;
use bench::txn_plan::TxnPlan;

/// Arguments of `kintsugi bench txn`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What runs:
  A fresh cluster (--transport, --replicas) with an rTX heap and --objects objects of --object-bytes,
  created one round trip each. Then --threads OS threads, each with its own TxClient (its own owner id,
  log slot and allocator) on a current-thread runtime, run read-modify-write transactions for
  --duration: each picks --write-set distinct objects at random (seeded by --seed), reads each (meta,
  then data) and writes it back with its counter incremented, through TxClient::run, which retries
  aborts with backoff. --write-set 1 commits without a log (Opt1); more objects write a log first.

What it reports:
  commits/s, aborted attempts/s, repairs/s (other owners' transactions this bench's clients repaired;
  with every client alive and no clock skew there should be none), commit latency p50/p99 (first
  attempt to commit, retries included), and per commit: round trips, verbs and bytes read/written from
  the clients' fabric counters (aborted attempts' work included: that is what a commit costs).
  Afterwards the counters are read back: they must add up to commits x write set, with no lock left.

Latency:
  Reading the clock costs tens of nanoseconds, a few percent of a local transaction, so only every
  16th transaction is timed. Each client runs 32 untimed transactions first.

Examples:
  kintsugi bench txn
  kintsugi bench txn --write-set 4 --threads 2 --duration 10s
  kintsugi bench txn --objects 100 --threads 8 --write-set 2     (contention)
  kintsugi bench txn --transport shm --replicas 2 --object-bytes 1KiB --json")]
pub struct TxnArgs {
    /// Objects in the heap; transactions pick theirs uniformly at random.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub objects: usize,
    /// Distinct objects each transaction reads and writes (1 = Opt1, no log).
    #[arg(long, value_name = "W", default_value_t = 1)]
    pub write_set: usize,
    /// Client threads, each a TxClient with its own owner id.
    #[arg(long, value_name = "T", default_value_t = 2)]
    pub threads: usize,
    /// How long the clients run transactions (e.g. 5s, 200ms).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl TxnArgs {
    pub fn validate(self) -> anyhow::Result<TxnPlan> {
        let common = self.common.validate()?;
        check_threads(self.threads)?;
        check_write_set("--write-set", self.write_set, self.objects)?;
        if self.duration.is_zero() {
            bail!("--duration must be longer than zero");
        }
        Ok(TxnPlan {
            objects: self.objects,
            write_set: self.write_set,
            threads: self.threads,
            duration: self.duration,
            common,
        })
    }
}
