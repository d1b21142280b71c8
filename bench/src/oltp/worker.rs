//! One client's loop: transactions from its stream until a deadline, each
//! run to its commit by the engine's `run` (which retries aborts with
//! backoff), counted per transaction type.
//!
//! Every transaction is timed (a SmallBank or TATP transaction takes
//! microseconds, the two clock reads tens of nanoseconds), and the client's
//! fabric counters are read around it, so that round trips and verbs are
//! attributed to its type. A DTX transaction's release rides the client's
//! next batch, so it is paid by the next transaction, whatever its type
//! (or by the flusher, whose verbs join the counters when it is reaped).

use std::cell::Cell;
use std::time::{Duration, Instant};

use fabric::Stats;
use hdrhistogram::Histogram;
use serde::Serialize;
use txn::{AbortReason, TxError, TxStats};

use super::engine::Engine;
use super::{OltpWorkload, Tables};
use crate::error::Context;
use crate::worker::histogram;

/// Untimed transactions each client runs before the clock starts (their
/// effects count for the check all the same).
pub const WARMUP_TXNS: u64 = 64;

/// Aborted attempts by why they aborted.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Aborts {
    /// A record was locked by another transaction (DTX's no-wait lock,
    /// rTX's locked meta).
    pub locked: u64,
    /// A record changed since it was read (rTX's read-set check during
    /// the body).
    pub changed: u64,
    /// rTX aborted to repair an expired lock.
    pub repaired: u64,
    /// Any other reason during the body.
    pub other: u64,
    /// At commit: validation or locking at commit time found a conflict
    /// (the reason is not visible outside the engine).
    pub at_commit: u64,
}

impl Aborts {
    /// Every aborted attempt.
    pub fn total(&self) -> u64 {
        self.locked + self.changed + self.repaired + self.other + self.at_commit
    }

    fn add(&mut self, o: &Aborts) {
        self.locked += o.locked;
        self.changed += o.changed;
        self.repaired += o.repaired;
        self.other += o.other;
        self.at_commit += o.at_commit;
    }
}

/// What the transactions of one type did.
#[derive(Debug)]
pub struct KindRun {
    /// Transactions that ended (committed or gave up).
    pub txns: u64,
    /// Transactions that committed (declined ones included).
    pub commits: u64,
    /// Committed transactions the workload's rules turned down.
    pub declined: u64,
    /// Transactions `run` gave up on (too many aborts in a row).
    pub gave_up: u64,
    /// Aborted attempts, by reason.
    pub aborts: Aborts,
    /// Round trips and verbs the client spent on them, aborted attempts
    /// included.
    pub fabric: Stats,
    /// First attempt to commit, in nanoseconds, of committed ones.
    pub latency: Histogram<u64>,
}

impl KindRun {
    fn new() -> crate::Result<KindRun> {
        Ok(KindRun {
            txns: 0,
            commits: 0,
            declined: 0,
            gave_up: 0,
            aborts: Aborts::default(),
            fabric: Stats::default(),
            latency: histogram()?,
        })
    }

    fn add(&mut self, o: &KindRun) -> crate::Result<()> {
        self.txns += o.txns;
        self.commits += o.commits;
        self.declined += o.declined;
        self.gave_up += o.gave_up;
        self.aborts.add(&o.aborts);
        self.fabric += o.fabric;
        self.latency
            .add(&o.latency)
            .context("cannot merge latency histograms")
    }

    /// Per commit (0 without commits).
    pub fn per_commit(&self, n: u64) -> f64 {
        crate::worker::per(n, self.commits)
    }

    /// A latency percentile in microseconds.
    pub fn percentile_us(&self, q: f64) -> f64 {
        crate::worker::percentile_us(&self.latency, q)
    }
}

/// What one client (or, merged, every client) did.
#[derive(Debug)]
pub struct OltpRun {
    /// Per transaction type, by `OltpWorkload::kind`.
    pub kinds: Vec<KindRun>,
    /// Every type added up.
    pub all: KindRun,
    /// The engine's counters over the timed run.
    pub tx: TxStats,
    /// From the common start to the end of the longest client's last
    /// transaction.
    pub elapsed: Duration,
    /// The committed transactions' effect on the conserved quantity,
    /// warm-up included.
    pub effect: i64,
}

impl OltpRun {
    fn new(kinds: usize) -> crate::Result<OltpRun> {
        Ok(OltpRun {
            kinds: (0..kinds).map(|_| KindRun::new()).collect::<crate::Result<_>>()?,
            all: KindRun::new()?,
            tx: TxStats::default(),
            elapsed: Duration::ZERO,
            effect: 0,
        })
    }

    /// Every client's run added up; the elapsed time is the longest one's.
    pub fn merge(kinds: usize, runs: Vec<OltpRun>) -> crate::Result<OltpRun> {
        let mut all = OltpRun::new(kinds)?;
        for r in runs {
            for (a, k) in all.kinds.iter_mut().zip(&r.kinds) {
                a.add(k)?;
            }
            all.all.add(&r.all)?;
            all.tx += r.tx;
            all.elapsed = all.elapsed.max(r.elapsed);
            all.effect = all.effect.wrapping_add(r.effect);
        }
        Ok(all)
    }

    /// Per second of the longest client's run.
    pub fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// How one transaction ended.
struct Ended {
    kind: usize,
    committed: bool,
    declined: bool,
    aborts: Aborts,
    fabric: Stats,
    nanos: u64,
}

/// One client of benchmark `W` on engine `E`.
pub struct Worker<'a, W: OltpWorkload, E: Engine> {
    bench: &'a W,
    client: E,
    tables: &'a Tables<E::Rec>,
    gen: W::Gen,
    effect: i64,
}

impl<'a, W: OltpWorkload, E: Engine> Worker<'a, W, E> {
    /// A worker running `client`'s transactions from stream `stream`.
    pub fn new(bench: &'a W, client: E, tables: &'a Tables<E::Rec>, stream: u64) -> Self {
        Worker {
            bench,
            client,
            tables,
            gen: bench.generator(stream),
            effect: 0,
        }
    }

    /// The next transaction, run to its end.
    async fn one(&mut self) -> crate::Result<Ended> {
        let Some(txn) = self.gen.next() else {
            crate::bail!("the {} stream ended", W::NAME);
        };
        let kind = W::kind(&txn);
        let attempts = Cell::new(0u64);
        let body_aborts = Cell::new(Aborts::default());
        let (bench, tables) = (self.bench, self.tables);
        let fabric_before = self.client.fabric_stats();
        let t0 = Instant::now();
        let result = self
            .client
            .run(async |tx| {
                attempts.set(attempts.get() + 1);
                let r = bench.execute(tx, tables, txn).await;
                if let Err(TxError::Abort(reason)) = &r {
                    let mut a = body_aborts.get();
                    match reason {
                        AbortReason::Locked => a.locked += 1,
                        AbortReason::Changed => a.changed += 1,
                        AbortReason::Repaired => a.repaired += 1,
                        _ => a.other += 1,
                    }
                    body_aborts.set(a);
                }
                r
            })
            .await;
        let nanos = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let fabric = self.client.fabric_stats() - fabric_before;
        let (committed, outcome) = match result {
            Ok(o) => (true, o),
            Err(TxError::TooManyAborts { .. }) => (false, Default::default()),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "a {} {} of owner {} failed",
                        W::NAME,
                        W::KINDS[kind],
                        self.client.owner()
                    )
                })
            }
        };
        self.effect = self.effect.wrapping_add(outcome.effect);
        let mut aborts = body_aborts.get();
        let aborted = attempts.get() - u64::from(committed);
        aborts.at_commit = aborted.saturating_sub(aborts.total());
        Ok(Ended {
            kind,
            committed,
            declined: outcome.declined,
            aborts,
            fabric,
            nanos,
        })
    }

    /// Untimed transactions, to fault pages in and warm the allocators;
    /// then what the client owes is sent: the thread blocks at the start
    /// gate next, where its runtime (and a DTX client's flusher) does not
    /// run, and the other clients, still warming up, would find its last
    /// records locked until every thread got there.
    pub async fn warm_up(&mut self, txns: u64) -> crate::Result<()> {
        for _ in 0..txns {
            self.one().await?;
        }
        self.client
            .quiesce()
            .await
            .with_context(|| format!("owner {} cannot send its release", self.client.owner()))
    }

    /// Transactions until `deadline`; then what the client owes is sent.
    pub async fn run(mut self, start: Instant, deadline: Instant) -> crate::Result<OltpRun> {
        let tx_before = self.client.tx_stats();
        let mut run = OltpRun::new(W::KINDS.len())?;
        loop {
            let e = self.one().await?;
            let k = &mut run.kinds[e.kind];
            k.txns += 1;
            k.commits += u64::from(e.committed);
            k.declined += u64::from(e.committed && e.declined);
            k.gave_up += u64::from(!e.committed);
            k.aborts.add(&e.aborts);
            k.fabric += e.fabric;
            if e.committed {
                k.latency.saturating_record(e.nanos.max(1));
            }
            let now = Instant::now();
            if now >= deadline {
                run.elapsed = now - start;
                break;
            }
        }
        // An idle DTX client must not keep its last transaction's records
        // locked and invisible for the check (or the other clients).
        self.client
            .quiesce()
            .await
            .with_context(|| format!("owner {} cannot send its last release", self.client.owner()))?;
        for k in &run.kinds {
            run.all.add(k)?;
        }
        run.tx = diff(self.client.tx_stats(), tx_before);
        run.effect = self.effect;
        Ok(run)
    }
}

/// `TxStats` has no `Sub`: the counters this bench reports, between two
/// snapshots (any other counter is left as of `after`).
fn diff(after: TxStats, before: TxStats) -> TxStats {
    let mut d = after;
    d.commits -= before.commits;
    d.aborts -= before.aborts;
    d.repairs -= before.repairs;
    d.logged_commits -= before.logged_commits;
    d.expired_seen -= before.expired_seen;
    d.lease_waits -= before.lease_waits;
    d.invisible_waits -= before.invisible_waits;
    d
}
