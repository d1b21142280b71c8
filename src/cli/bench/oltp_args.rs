//! The command lines of `kintsugi bench smallbank` and `kintsugi bench
//! tatp`, validated into an [`OltpPlan`].

use std::time::Duration;

use anyhow::bail;
use fabric::REPLICAS_MAX;
use harness::TransportKind;
use index::btree::Variant;

use super::common::{check_threads, INLINE_TRANSPORTS};
use crate::cli::units::parse_duration;
use bench::common::dedup;
use bench::oltp::plan::{OltpPlan, Which, ROUNDS_MAX, UNITS_MAX};

/// What `bench smallbank` runs and checks.
macro_rules! smallbank_help {
    () => {
        "\
SmallBank (FORD's and Motor's mix): Amalgamate 15%, Balance 15% (read-only), DepositChecking 15%,
SendPayment 25%, TransactSavings 15%, WriteCheck 15%. Each account a transaction names is drawn
from the hottest 4% of the accounts with probability 90%, else from all (FORD's TX_HOT rule).
Afterwards every record is read back: no lock left, every row names its account, and the balances
add up to what was loaded plus what the committed transactions deposited and withdrew. A mismatch
fails the bench (non-zero exit).

Examples:
  kintsugi bench smallbank
  kintsugi bench smallbank --variant dtx --accounts 1000 --threads 4   (contention)
  kintsugi bench smallbank --rounds 3 --duration 3s --json"
    };
}

/// What `bench tatp` runs and checks.
macro_rules! tatp_help {
    () => {
        "\
TATP: GetSubscriberData 35%, GetNewDestination 10%, GetAccessData 35% (these three read-only),
UpdateSubscriberData 2%, UpdateLocation 14%, InsertCallForwarding 2%, DeleteCallForwarding 2%;
subscribers by TATP's non-uniform rule. CallForwarding rows live in pre-allocated slots with a
valid flag that inserts set and deletes clear. Afterwards every record is read back: no lock left,
every row valid (its subscriber id, type and slot match, its flag is 0 or 1), and the valid
CallForwarding rows are those loaded plus committed inserts minus committed deletes. A mismatch
fails the bench (non-zero exit).

Examples:
  kintsugi bench tatp
  kintsugi bench tatp --subscribers 100000 --rounds 3 --json"
    };
}

/// What runs, for both benchmarks' help (a macro: `concat!` takes
/// literals only).
macro_rules! what_runs {
    () => {
        "\n\nWhat runs:
Per round and variant: a fresh cluster (--transport, --replicas) with an rTX heap, every table row
created as one record (an rTX object for rtx, a DTX record for dtx) in its own round trip and kept
in an array by row (there is no index under the tables). Then --threads OS threads, each one client
(its own owner id) on a current-thread runtime, run the benchmark's transaction mix for --duration
after 64 untimed transactions each; aborts are retried with backoff by the engine's run (DTX's
no-wait locks abort on any held lock). With --rounds N each variant runs N times, the order of the
variants reversed in even rounds; the table shows each variant's median round and the rtx/dtx ratio
is the median of the rounds' ratios. docs/oltp.md describes the workloads and the checks.

What it reports, per variant and transaction type:
  commits/s, aborted attempts (by reason: locked, changed, repaired, other, at commit), declined
  transactions (the workload's rules said no: they commit without writing), latency p50/p99 (first
  attempt to commit), round trips and verbs per commit (aborted attempts included; a DTX release
  rides the client's next batch, so it is paid by the next transaction whatever its type)."
    };
}

/// Arguments both benchmarks share.
#[derive(clap::Args, Debug)]
pub struct OltpCommonArgs {
    /// Variants, comma-separated: rtx, dtx (optimal has no transactions).
    #[arg(long, value_delimiter = ',', default_values = ["rtx", "dtx"])]
    pub variant: Vec<Variant>,
    /// Times every variant runs (1..=100), alternating the order; the ratio is the rounds' median.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Client threads, each a client with its own owner id.
    #[arg(long, value_name = "T", default_value_t = 2)]
    pub threads: usize,
    /// How long the clients run, per variant and round (e.g. 5s, 200ms).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Where the memory lives: local (in-process memory nodes) or shm (images under /dev/shm).
    #[arg(long, value_enum, default_value_t = TransportKind::Local)]
    pub transport: TransportKind,
    /// Replicas of the region (1 = primary only).
    #[arg(long, value_name = "R", default_value_t = 1)]
    pub replicas: usize,
    /// Seed of the population and the transaction streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

impl OltpCommonArgs {
    fn validate(self, which: Which) -> anyhow::Result<OltpPlan> {
        if self.variant.is_empty() {
            bail!("--variant needs at least one of rtx, dtx");
        }
        if self.variant.contains(&Variant::Optimal) {
            bail!("--variant optimal: optimal has no transactions; SmallBank and TATP run on rtx and dtx");
        }
        if !(1..=ROUNDS_MAX).contains(&self.rounds) {
            bail!("--rounds must be between 1 and {ROUNDS_MAX}");
        }
        check_threads(self.threads)?;
        if self.duration.is_zero() {
            bail!("--duration must be longer than zero");
        }
        if self.replicas == 0 || self.replicas > REPLICAS_MAX {
            bail!(
                "--replicas must be between 1 and {REPLICAS_MAX}, got {}",
                self.replicas
            );
        }
        Ok(OltpPlan {
            which,
            variants: dedup(self.variant),
            rounds: self.rounds,
            threads: self.threads,
            duration: self.duration,
            transport: self
                .transport
                .require("bench smallbank and bench tatp", INLINE_TRANSPORTS)?,
            replicas: self.replicas as u16,
            seed: self.seed,
            json: self.json,
        })
    }
}

/// Checks an --accounts or --subscribers count.
fn check_units(flag: &str, n: u64, min: u64) -> anyhow::Result<()> {
    if !(min..=UNITS_MAX).contains(&n) {
        bail!("{flag} must be between {min} and {UNITS_MAX}, got {n}");
    }
    Ok(())
}

/// Arguments of `kintsugi bench smallbank`.
#[derive(clap::Args, Debug)]
#[command(after_help = concat!(smallbank_help!(), what_runs!()))]
pub struct SmallBankArgs {
    /// Customers, each with a savings and a checking record (FORD runs 100,000; the default loads
    /// in about a second on a 2-core VM).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub accounts: u64,
    #[command(flatten)]
    pub common: OltpCommonArgs,
}

impl SmallBankArgs {
    pub fn validate(self) -> anyhow::Result<OltpPlan> {
        check_units("--accounts", self.accounts, workload::smallbank::ACCOUNTS_MIN)?;
        self.common.validate(Which::SmallBank {
            accounts: self.accounts,
        })
    }
}

/// Arguments of `kintsugi bench tatp`.
#[derive(clap::Args, Debug)]
#[command(after_help = concat!(tatp_help!(), what_runs!()))]
pub struct TatpArgs {
    /// Subscribers, 22 records each (every slot pre-allocated; FORD runs 1M rows of Subscriber; the
    /// default loads in a few seconds on a 2-core VM).
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub subscribers: u64,
    #[command(flatten)]
    pub common: OltpCommonArgs,
}

impl TatpArgs {
    pub fn validate(self) -> anyhow::Result<OltpPlan> {
        check_units("--subscribers", self.subscribers, workload::tatp::SUBSCRIBERS_MIN)?;
        self.common.validate(Which::Tatp {
            subscribers: self.subscribers,
        })
    }
}
