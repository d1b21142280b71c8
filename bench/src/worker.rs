//! One client's loop: read-modify-write transactions on `write_set` distinct
//! objects drawn at random, until a deadline, counting what happened.
//!
//! Each transaction reads every object it picked (meta, then data) and writes
//! it back with its first 8 bytes, a little-endian counter, incremented; so
//! after a run the counters add up to committed transactions x write set
//! (see `check`). `write_set` 1 commits without a log (Opt1); more log.
//!
//! Reading the clock costs tens of nanoseconds, a few percent of a local
//! transaction, so the `txn` bench times (and checks its deadline on) only
//! every [`SAMPLE_EVERY`]-th transaction; `lease` checks every one, its
//! transactions being far longer under contention.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::error::Context;
use fabric::Stats;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::SeedableRng;
use txn::{RawObj, TxClient, TxError, TxStats};

use crate::probe;

/// Transactions between two timed ones in `bench txn`.
pub const SAMPLE_EVERY: u64 = 16;
/// Untimed transactions each client runs before the clock starts.
pub const WARMUP_TXNS: u64 = 32;

/// What one client did between its start and its deadline.
#[derive(Debug)]
pub struct ClientRun {
    /// Transactions that ended (committed or gave up).
    pub txns: u64,
    /// Transactions that committed.
    pub commits: u64,
    /// Transactions that `TxClient::run` gave up on (`TooManyAborts`).
    pub gave_up: u64,
    /// Attempts of all transactions (commits + aborted attempts).
    pub attempts: u64,
    /// Transactions during which the client met at least one lock whose
    /// lease had expired by its clock.
    pub expired_txns: u64,
    /// The client's transaction counters over the run.
    pub tx: TxStats,
    /// The client's fabric counters over the run.
    pub fabric: Stats,
    /// Commit latency (a transaction from its first attempt to its commit)
    /// in nanoseconds, of the timed transactions.
    pub latency: Histogram<u64>,
    /// From the common start to the end of the client's last transaction.
    pub elapsed: Duration,
    /// Commits including the warm-up: what the client added to the counters.
    pub committed_total: u64,
    /// After the run: how far the lease the client would take ends past
    /// its clock plus the configured lease, in lease ticks (1/256 ms; see
    /// `probe`); merged: the most.
    pub lease_lead_ticks: Option<i64>,
}

impl ClientRun {
    /// Aborted attempts: of committed transactions (all attempts but the
    /// last) and of those given up (all attempts).
    pub fn aborts(&self) -> u64 {
        self.attempts - self.commits
    }

    /// Every client's run added up; the elapsed time is the longest one's.
    pub fn merge(runs: Vec<ClientRun>) -> crate::Result<ClientRun> {
        let mut all = ClientRun {
            txns: 0,
            commits: 0,
            gave_up: 0,
            attempts: 0,
            expired_txns: 0,
            tx: TxStats::default(),
            fabric: Stats::default(),
            latency: histogram()?,
            elapsed: Duration::ZERO,
            committed_total: 0,
            lease_lead_ticks: None,
        };
        for r in runs {
            all.txns += r.txns;
            all.commits += r.commits;
            all.gave_up += r.gave_up;
            all.attempts += r.attempts;
            all.expired_txns += r.expired_txns;
            all.tx += r.tx;
            all.fabric += r.fabric;
            all.latency
                .add(&r.latency)
                .context("cannot merge latency histograms")?;
            all.elapsed = all.elapsed.max(r.elapsed);
            all.committed_total += r.committed_total;
            all.lease_lead_ticks = all.lease_lead_ticks.max(r.lease_lead_ticks);
        }
        Ok(all)
    }

    /// Per second of the longest client's run.
    pub fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Per commit (0 without commits).
    pub fn per_commit(&self, n: u64) -> f64 {
        per(n, self.commits)
    }

    /// A latency percentile in microseconds.
    pub fn percentile_us(&self, q: f64) -> f64 {
        percentile_us(&self.latency, q)
    }
}

/// `n` per `of` (0 when `of` is 0: nothing to divide among).
pub fn per(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 / of as f64
    }
}

/// Percentile `q` of a [`histogram`] in microseconds.
pub fn percentile_us(latency: &Histogram<u64>, q: f64) -> f64 {
    latency.value_at_quantile(q) as f64 / 1e3
}

/// Latencies in nanoseconds, 1 ns to 1 min, 3 significant digits.
pub fn histogram() -> crate::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).context("cannot create a latency histogram")
}

/// How one transaction ended.
struct Outcome {
    committed: bool,
    attempts: u32,
    expired: bool,
}

/// One client and its random choices.
pub struct Worker<'a> {
    client: TxClient,
    objects: &'a [RawObj],
    write_set: usize,
    rng: StdRng,
    picked: Vec<RawObj>,
    committed_total: u64,
}

impl<'a> Worker<'a> {
    /// A worker running `client`'s transactions, each on `write_set` objects
    /// drawn from `objects`, its choices seeded by `seed`.
    pub fn new(client: TxClient, objects: &'a [RawObj], write_set: usize, seed: u64) -> Self {
        Worker {
            client,
            objects,
            write_set,
            rng: StdRng::seed_from_u64(seed),
            picked: Vec::with_capacity(write_set),
            committed_total: 0,
        }
    }

    /// Runs one transaction to its end.
    async fn one(&mut self) -> crate::Result<Outcome> {
        self.picked.clear();
        let n = self.objects.len();
        for i in rand::seq::index::sample(&mut self.rng, n, self.write_set) {
            self.picked.push(self.objects[i]);
        }
        let expired_before = self.client.stats().expired_seen;
        let attempts = Cell::new(0u32);
        let picked = &self.picked;
        let result = self
            .client
            .run(async |tx| {
                attempts.set(attempts.get() + 1);
                for &obj in picked {
                    let mut value = tx.read_raw(obj).await?.to_vec();
                    increment(&mut value);
                    tx.write_raw(obj, &value).await?;
                }
                Ok(())
            })
            .await;
        let committed = match result {
            Ok(()) => true,
            Err(TxError::TooManyAborts { .. }) => false,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("a transaction of owner {} failed", self.client.owner()))
            }
        };
        self.committed_total += u64::from(committed);
        Ok(Outcome {
            committed,
            attempts: attempts.get(),
            expired: self.client.stats().expired_seen > expired_before,
        })
    }

    /// Untimed transactions, to fault pages in and fill the allocator.
    pub async fn warm_up(&mut self, txns: u64) -> crate::Result<()> {
        for _ in 0..txns {
            self.one().await?;
        }
        Ok(())
    }

    /// Transactions until `deadline`, every `every`-th one timed.
    pub async fn run(mut self, start: Instant, deadline: Instant, every: u64) -> crate::Result<ClientRun> {
        let tx_before = self.client.stats();
        let fabric_before = self.client.fabric().stats();
        let mut run = ClientRun::merge(Vec::new())?;
        let count = |run: &mut ClientRun, o: &Outcome| {
            run.txns += 1;
            run.commits += u64::from(o.committed);
            run.gave_up += u64::from(!o.committed);
            run.attempts += u64::from(o.attempts);
            run.expired_txns += u64::from(o.expired);
        };
        loop {
            for _ in 1..every {
                let o = self.one().await?;
                count(&mut run, &o);
            }
            let t0 = Instant::now();
            let o = self.one().await?;
            let t1 = Instant::now();
            count(&mut run, &o);
            if o.committed {
                let ns = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
                run.latency.saturating_record(ns.max(1));
            }
            if t1 >= deadline {
                run.elapsed = t1 - start;
                break;
            }
        }
        run.tx = diff(self.client.stats(), tx_before);
        run.fabric = self.client.fabric().stats() - fabric_before;
        run.committed_total = self.committed_total;
        run.lease_lead_ticks =
            probe::lease_lead_ticks(&mut self.client, self.objects[0], self.write_set).await?;
        Ok(run)
    }
}

/// Adds one to the little-endian counter in the first 8 bytes.
fn increment(value: &mut [u8]) {
    let next = counter(value).wrapping_add(1);
    if let Some(word) = value.get_mut(..8) {
        word.copy_from_slice(&next.to_le_bytes());
    }
}

/// The counter of an object's bytes.
pub fn counter(value: &[u8]) -> u64 {
    fabric::le_word(value, 0)
}

/// `TxStats` has no `Sub`: the counters this bench reports, accumulated
/// between two snapshots (any other counter is left as of `after`).
fn diff(after: TxStats, before: TxStats) -> TxStats {
    let mut d = after;
    d.commits -= before.commits;
    d.aborts -= before.aborts;
    d.repairs -= before.repairs;
    d.logged_commits -= before.logged_commits;
    d.expired_seen -= before.expired_seen;
    d.lease_waits -= before.lease_waits;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_little_endian_words() {
        let mut v = vec![0u8; 16];
        v[..8].copy_from_slice(&41u64.to_le_bytes());
        increment(&mut v);
        assert_eq!(counter(&v), 42);
        assert_eq!(&v[8..], &[0; 8]);
        let mut max = u64::MAX.to_le_bytes().to_vec();
        increment(&mut max);
        assert_eq!(counter(&max), 0);
    }
}
