//! A DTX client stopped after every one of its verbs, then recovered.
//!
//! The victim runs a few transactions (each increments a set of counters,
//! so a half-applied one shows as a wrong sum), and is stopped for good
//! after its k-th verb, for every k. Recovery by another client
//! (`finish_owner_log`) must then leave every record free, visible, at one
//! version and with the same data on every replica; every acknowledged
//! transaction applied, every other one applied whole or not at all; a
//! second recovery must find nothing to do; and a survivor must be able to
//! lock every record. The same for a recoverer stopped after each of its
//! own verbs and finished by a third client (adoption), and for a victim
//! whose connection drops once and who settles its own log.
//!
//! A stopped client is fail-stop here (`crash_after_verbs`): DTX assumes
//! that what a coordinator sent before its lease expired has landed by the
//! time recovery runs (the quarantine), which a pause followed by a resume
//! after recovery would break, by design.

mod common;

use common::{word, Cluster};
use fabric::{Batch, FaultPlan, Replica};
use txn::dtx::record::{Record, Version};
use txn::dtx::DtxClient;
use txn::TxError;

const VICTIM: u16 = 1;
const RECOVERER: u16 = 2;
const SECOND: u16 = 3;
const SURVIVOR: u16 = 4;
/// Transactions the victim runs.
const TXNS: u64 = 4;
/// Data bytes of a record: the counter, then bytes the counter's writes
/// leave alone (so an undo image restores more than was written).
const RECORD_BYTES: usize = 48;

/// The records transaction `t` increments.
fn touched(t: u64, n: usize) -> Vec<usize> {
    match (n, t % 3) {
        (1, _) => vec![0],
        (_, 2) => (0..n).collect(),
        _ => vec![t as usize % n, (t as usize + 1) % n],
    }
}

async fn records(cluster: &Cluster, n: usize) -> Vec<Record> {
    let mut c = cluster.dtx(common::SETUP_OWNER);
    let mut recs = Vec::new();
    for i in 0..n {
        let mut data = [0xA5u8; RECORD_BYTES];
        data[..8].copy_from_slice(&0u64.to_le_bytes());
        data[8] = i as u8;
        recs.push(c.create_raw(&data).await.unwrap());
    }
    recs
}

/// Increments the counters of `touched(t, n)` in one transaction.
async fn increment(c: &mut DtxClient, recs: &[Record], t: u64) -> Result<(), TxError> {
    let set: Vec<Record> = touched(t, recs.len()).into_iter().map(|i| recs[i]).collect();
    c.run(async |tx| {
        tx.lock_many(&set).await?;
        for &r in &set {
            let v = word(tx.read_for_update(r).await?, 0);
            tx.write_part(r, 0, &(v + 1).to_le_bytes()).await?;
        }
        Ok(())
    })
    .await
}

/// Runs the victim's transactions and its final release; returns how many
/// were acknowledged and how many were in doubt (cut off in their commit
/// batch), stopping at the first error unless `go_on`.
async fn run_victim(c: &mut DtxClient, recs: &[Record], go_on: bool) -> (Vec<u64>, Vec<u64>) {
    let (mut acked, mut doubt) = (Vec::new(), Vec::new());
    for t in 0..TXNS {
        match increment(c, recs, t).await {
            Ok(()) => acked.push(t),
            Err(e) => {
                if c.take_commit_in_doubt() {
                    doubt.push(t);
                }
                assert!(matches!(e, TxError::Fabric(_)), "{e}");
                if !go_on {
                    return (acked, doubt);
                }
            }
        }
    }
    let _ = c.release_pending().await;
    (acked, doubt)
}

/// Checks DM after recovery: every record free, visible, equal on every
/// replica; counters consistent with whole transactions, all acknowledged
/// ones among them.
async fn check(cluster: &Cluster, recs: &[Record], acked: &[u64], doubt: &[u64], what: &str) {
    let n = recs.len();
    let mut f = cluster.fabric.fork();
    let mut counters = Vec::new();
    for (i, &r) in recs.iter().enumerate() {
        let mut b = Batch::new();
        let h = b.on(Replica::All).read(r.addr, r.bytes() as u32);
        f.execute(&mut b).await.unwrap();
        let primary = b.read_result_of(h, 0).unwrap().to_vec();
        assert_eq!(word(&primary, 0), 0, "{what}: record {i} still locked");
        assert!(
            matches!(Version::from_raw(word(&primary, 8)), Version::Visible(_)),
            "{what}: record {i} left invisible"
        );
        for rep in 1..cluster.replicas() {
            let copy = b.read_result_of(h, rep).unwrap();
            assert_eq!(
                &copy[8..],
                &primary[8..],
                "{what}: record {i} differs on replica {rep}"
            );
        }
        let mut untouched = [0xA5u8; RECORD_BYTES];
        untouched[8] = i as u8;
        assert_eq!(
            &primary[24..],
            &untouched[8..],
            "{what}: record {i}'s other bytes"
        );
        counters.push(word(&primary, 16));
    }
    // Which transactions applied: some subset of the attempted ones that
    // includes every acknowledged one, each whole (a search over at most
    // 2^TXNS subsets).
    let attempted: Vec<u64> = acked.iter().chain(doubt).copied().collect();
    let explained = (0u32..1 << TXNS).any(|mask| {
        let applied: Vec<u64> = (0..TXNS).filter(|t| mask & (1 << t) != 0).collect();
        if acked.iter().any(|t| !applied.contains(t)) {
            return false;
        }
        // A transaction cut off before its commit batch never applies.
        let mut expect = vec![0u64; n];
        for &t in &applied {
            for i in touched(t, n) {
                expect[i] += 1;
            }
        }
        applied.iter().all(|t| attempted.contains(t)) && expect == counters
    });
    assert!(
        explained,
        "{what}: counters {counters:?}, acked {acked:?}, in doubt {doubt:?}"
    );
}

/// A survivor locks and writes every record (nothing left blocks it).
async fn survivor_writes(cluster: &Cluster, recs: &[Record]) {
    let mut s = cluster.dtx(SURVIVOR);
    for t in 0..2 {
        let set = recs.to_vec();
        s.run(async |tx| {
            tx.lock_many(&set).await?;
            for &r in &set {
                let v = word(tx.read_for_update(r).await?, 0);
                tx.write_part(r, 0, &v.to_le_bytes()).await?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("survivor transaction {t}: {e}"));
    }
    s.release_pending().await.unwrap();
}

/// Verbs the victim issues on a run without faults.
async fn victim_verbs(rf: u16, n: usize) -> u64 {
    let cluster = Cluster::new(rf).await;
    let recs = records(&cluster, n).await;
    let (mut c, faults) = cluster.dtx_faulty(VICTIM, FaultPlan::default());
    let (acked, _) = run_victim(&mut c, &recs, false).await;
    assert_eq!(acked.len() as u64, TXNS);
    faults.verbs_issued()
}

#[tokio::test]
async fn a_victim_stopped_after_any_verb_is_rolled_back_or_forward() {
    for (rf, n) in [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3), (2, 8)] {
        let total = victim_verbs(rf, n).await;
        for k in 1..=total {
            let what = format!("rf {rf}, {n} records, stopped after verb {k} of {total}");
            let cluster = Cluster::new(rf).await;
            let recs = records(&cluster, n).await;
            let (mut victim, _) = cluster.dtx_faulty(VICTIM, common::crash_after(k));
            let (acked, doubt) = run_victim(&mut victim, &recs, false).await;
            let mut r = cluster.dtx(RECOVERER);
            r.finish_owner_log(VICTIM)
                .await
                .unwrap_or_else(|e| panic!("{what}: recovery: {e}"));
            r.release_pending().await.unwrap();
            check(&cluster, &recs, &acked, &doubt, &what).await;
            let again = r.finish_owner_log(VICTIM).await.unwrap();
            assert_eq!(
                (again.rolled_back, again.rolled_forward, again.released),
                (0, 0, 0),
                "{what}: a second recovery found work"
            );
            survivor_writes(&cluster, &recs).await;
        }
    }
}

/// Verbs a recoverer issues finishing the victim stopped after verb `k`.
async fn recoverer_verbs(rf: u16, n: usize, k: u64) -> u64 {
    let cluster = Cluster::new(rf).await;
    let recs = records(&cluster, n).await;
    let (mut victim, _) = cluster.dtx_faulty(VICTIM, common::crash_after(k));
    run_victim(&mut victim, &recs, false).await;
    let (mut r, faults) = cluster.dtx_faulty(RECOVERER, FaultPlan::default());
    r.finish_owner_log(VICTIM).await.unwrap();
    faults.verbs_issued()
}

#[tokio::test]
async fn a_recoverer_stopped_after_any_verb_is_finished_by_the_next() {
    for (rf, n) in [(1, 2), (2, 2), (3, 3)] {
        let total = victim_verbs(rf, n).await;
        // Victims stopped inside each of their batches of the second
        // transaction and the release of the last: a spread of states
        // (locking, committed on some replicas, committed unreleased).
        let stops: Vec<u64> = (1..=total).step_by(3).collect();
        for &k in &stops {
            let rtotal = recoverer_verbs(rf, n, k).await;
            for j in 1..=rtotal {
                let what =
                    format!("rf {rf}, {n} records, victim after verb {k}, recoverer after {j} of {rtotal}");
                let cluster = Cluster::new(rf).await;
                let recs = records(&cluster, n).await;
                let (mut victim, _) = cluster.dtx_faulty(VICTIM, common::crash_after(k));
                let (acked, doubt) = run_victim(&mut victim, &recs, false).await;
                let (mut first, _) = cluster.dtx_faulty(RECOVERER, common::crash_after(j));
                let _ = first.finish_owner_log(VICTIM).await;
                // Either order: the recoverer's log first, or the victim's
                // (whose records the dead recoverer holds are then left to
                // the recoverer's recovery).
                let mut second = cluster.dtx(SECOND);
                let order = if j % 2 == 0 {
                    [RECOVERER, VICTIM]
                } else {
                    [VICTIM, RECOVERER]
                };
                for owner in order {
                    second
                        .finish_owner_log(owner)
                        .await
                        .unwrap_or_else(|e| panic!("{what}: recovering owner {owner}: {e}"));
                }
                second.release_pending().await.unwrap();
                check(&cluster, &recs, &acked, &doubt, &what).await;
                survivor_writes(&cluster, &recs).await;
            }
        }
    }
}

#[tokio::test]
async fn a_victim_whose_connection_drops_settles_its_own_log_and_goes_on() {
    for (rf, n) in [(1, 2), (2, 3), (3, 2)] {
        let total = victim_verbs(rf, n).await;
        for k in 1..=total {
            let what = format!("rf {rf}, {n} records, connection dropped after verb {k} of {total}");
            let cluster = Cluster::new(rf).await;
            let recs = records(&cluster, n).await;
            let plan = FaultPlan {
                drop_after_verbs: Some(k),
                ..FaultPlan::default()
            };
            let (mut victim, _) = cluster.dtx_faulty(VICTIM, plan);
            let (acked, doubt) = run_victim(&mut victim, &recs, true).await;
            // Its own next batch settled whatever the drop left; a failed
            // final release is settled by one more call.
            victim.settle().await.unwrap();
            victim.release_pending().await.unwrap();
            check(&cluster, &recs, &acked, &doubt, &what).await;
            survivor_writes(&cluster, &recs).await;
        }
    }
}
