//! Bank transfers between 32 accounts on 8 concurrent clients (a
//! multi-threaded runtime). Some clients are killed at a random verb
//! (`FaultPlan::crash_after_verbs` from a seeded RNG) and stop for good,
//! leaving their locks and logs behind; some are stopped at a random verb
//! (`pause_after_verbs`) and resumed once the others have committed a while
//! in their place. The survivors repair what they meet and carry on. The
//! total never changes, every audit in between sees it whole, and at the end
//! no lock is held and every replica agrees.
//!
//! Killed and paused clients run on real time, so their leases end ~8.1 ms
//! after they took them. Half the survivors run a minute ahead
//! (`clock_skew_ms`): to them, those leases have expired at once, and so has
//! every lease of the live survivors on real time, which they therefore also
//! suspect, falsely, and "repair" while those are committing. The other
//! survivors see leases expire in real time.
//!
//! Every choice is drawn from seeded RNGs; which transaction meets which
//! lock depends on thread scheduling, and the checks hold whatever it is.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{Cluster, SKEW_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use txn::{TxClient, TxError, TxObj, TxStats};

const ACCOUNTS: usize = 32;
const START: u64 = 1_000;
const TOTAL: u64 = ACCOUNTS as u64 * START;
/// Survivors, owners 1..=SURVIVORS; the even ones run a minute ahead.
const SURVIVORS: u16 = 4;
/// Lanes of clients killed one after the other (each with a new owner id).
const DYING_LANES: u16 = 3;
const DEATHS_PER_LANE: u16 = 6;
/// Clients paused one after the other (each with a new owner id).
const PAUSES: u16 = 6;
/// A paused client is resumed once the survivors committed this many more
/// transactions.
const PAUSE_PROGRESS: u64 = 100;
/// Transactions each survivor runs at least (and more until every paused
/// client has been resumed and finished).
const OPS: usize = 4_000;
/// A survivor audits every account (one read-only transaction) this often.
const AUDIT_EVERY: usize = 200;

/// One random transaction that keeps the total: a transfer between two
/// accounts (a 2-object log), a split of one account's money over two
/// others (a 3-object log), or a rewrite of one account with its own value
/// (a single-object commit without a log).
async fn step(c: &mut TxClient, accounts: &[TxObj<u64>], rng: &mut StdRng) -> Result<(), TxError> {
    let picked = rand::seq::index::sample(rng, ACCOUNTS, 3);
    let (a, b, d) = (
        accounts[picked.index(0)],
        accounts[picked.index(1)],
        accounts[picked.index(2)],
    );
    let amount = rng.gen_range(1..=50u64);
    match rng.gen_range(0..10) {
        0 => {
            c.run(async move |tx| {
                let v = tx.read(a).await?;
                tx.write(a, &v).await
            })
            .await
        }
        1 | 2 => {
            c.run(async move |tx| {
                let va = tx.read(a).await?;
                let vb = tx.read(b).await?;
                let vd = tx.read(d).await?;
                let m = amount.min(va / 2);
                tx.write(a, &(va - 2 * m)).await?;
                tx.write(b, &(vb + m)).await?;
                tx.write(d, &(vd + m)).await
            })
            .await
        }
        _ => {
            c.run(async move |tx| {
                let va = tx.read(a).await?;
                let vb = tx.read(b).await?;
                let m = amount.min(va);
                tx.write(a, &(va - m)).await?;
                tx.write(b, &(vb + m)).await
            })
            .await
        }
    }
}

async fn audit(c: &mut TxClient, accounts: &[TxObj<u64>]) -> u64 {
    let accounts = accounts.to_vec();
    c.run(async move |tx| {
        let mut sum = 0;
        for &a in &accounts {
            sum += tx.read(a).await?;
        }
        Ok(sum)
    })
    .await
    .unwrap()
}

async fn run(rf: u16, seed: u64) {
    let cluster = Arc::new(Cluster::new(rf).await);
    let accounts = cluster.accounts(&[START; ACCOUNTS]).await;
    let start = Arc::new(tokio::sync::Barrier::new(usize::from(
        SURVIVORS + DYING_LANES + 1,
    )));
    let progress = Arc::new(AtomicU64::new(0));
    let pauses_done = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();

    for owner in 1..=SURVIVORS {
        let skew = if owner % 2 == 0 { SKEW_MS } else { 0 };
        let what = format!("rf {rf}, seed {seed}, survivor {owner}, skew {skew}");
        let (mut c, _) = cluster.faulty(owner, common::skew(skew));
        let (accounts, start) = (accounts.clone(), start.clone());
        let (progress, pauses_done) = (progress.clone(), pauses_done.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ (u64::from(owner) << 32));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut i = 0;
            while i < OPS || !pauses_done.load(Ordering::Acquire) {
                i += 1;
                // Let the other clients of this worker thread in between
                // transactions (within one, only other threads interleave).
                tokio::task::yield_now().await;
                if let Err(e) = step(&mut c, &accounts, &mut rng).await {
                    panic!("{what}: {e:?}");
                }
                progress.fetch_add(1, Ordering::Release);
                if i % AUDIT_EVERY == 0 {
                    assert_eq!(audit(&mut c, &accounts).await, TOTAL, "{what}: audit after {i}");
                }
            }
            c.stats()
        }));
    }

    for lane in 0..DYING_LANES {
        let (cluster, accounts, start) = (cluster.clone(), accounts.clone(), start.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ (u64::from(100 + lane) << 32));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut stats = TxStats::default();
            for death in 0..DEATHS_PER_LANE {
                let owner = 10 + 10 * lane + death;
                let at = rng.gen_range(10..400);
                let (mut c, faults) = cluster.faulty(owner, common::crash_after(at));
                loop {
                    tokio::task::yield_now().await;
                    if let Err(e) = step(&mut c, &accounts, &mut rng).await {
                        assert!(common::is_crash(&e), "rf {rf}, seed {seed}, owner {owner}: {e:?}");
                        assert_eq!(faults.verbs_issued(), at);
                        break;
                    }
                }
                stats += c.stats();
            }
            stats
        }));
    }

    {
        let (cluster, accounts, start) = (cluster.clone(), accounts.clone(), start.clone());
        let (progress, pauses_done) = (progress.clone(), pauses_done.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ (200 << 32));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut stats = TxStats::default();
            for k in 0..PAUSES {
                let owner = 50 + k;
                let what = format!("rf {rf}, seed {seed}, paused owner {owner}");
                let (mut c, faults) = cluster.faulty(owner, common::pause_after(rng.gen_range(5..200)));
                let resumed = Arc::new(AtomicBool::new(false));
                let worker = {
                    let (accounts, resumed) = (accounts.clone(), resumed.clone());
                    let mut rng = StdRng::seed_from_u64(rng.gen());
                    tokio::spawn(async move {
                        let mut after = 0;
                        while after < 5 {
                            tokio::task::yield_now().await;
                            if let Err(e) = step(&mut c, &accounts, &mut rng).await {
                                panic!("{what}: {e:?}");
                            }
                            if resumed.load(Ordering::Acquire) {
                                after += 1;
                            }
                        }
                        c.stats()
                    })
                };
                faults.paused().await;
                let seen = progress.load(Ordering::Acquire);
                while progress.load(Ordering::Acquire) < seen + PAUSE_PROGRESS {
                    tokio::task::yield_now().await;
                }
                resumed.store(true, Ordering::Release);
                faults.resume();
                stats += worker.await.unwrap();
            }
            pauses_done.store(true, Ordering::Release);
            stats
        }));
    }

    let mut stats = TxStats::default();
    for t in tasks {
        stats += t.await.unwrap();
    }

    // A fresh client (skewed, so that any lease left by the dead has
    // expired for it) reads every account in one transaction, repairing
    // whatever the dead left that no survivor met.
    let mut last = cluster.skewed(9);
    assert_eq!(audit(&mut last, &accounts).await, TOTAL, "rf {rf}, seed {seed}");
    cluster.assert_unlocked(&accounts).await;
    let mut sum = 0;
    for &a in &accounts {
        sum += cluster.replicated_value(a).await;
    }
    assert_eq!(sum, TOTAL);
    stats += last.stats();
    eprintln!("rf {rf}, seed {seed}: {stats:?}");
    assert!(stats.commits >= u64::from(SURVIVORS) * OPS as u64, "{stats:?}");
    assert!(
        stats.repairs > 0,
        "rf {rf}, seed {seed}: nothing was repaired: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_keep_the_total_without_replication() {
    for seed in 1..=4 {
        run(1, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_keep_the_total_with_a_backup() {
    for seed in 5..=8 {
        run(2, seed).await;
    }
}
