//! A client that is only slow, not dead, is repaired as if dead by a client
//! whose clock says its lease expired; when it wakes, its own CASes must fail
//! harmlessly (rTX §4.1, "false release"). The slow client is stopped with
//! `FaultPlan::pause_after_verbs` at chosen points of its commit, the
//! suspicious one runs with a skewed clock, and the paused one is resumed
//! after the other committed on top. Every transaction must happen exactly
//! once, all or nothing, and no lock may be left.
//!
//! Also here: the two double faults found while writing these tests (an
//! owner's late lock CAS after its log was aborted and finished; a repairer
//! that is itself suspected in the middle of a log-less repair).

mod common;

use common::{bump_all, marks, spread, spread_values, Cluster, SETUP_OWNER, SKEW_MS};
use fabric::FaultPlan;
use txn::word::LogState;
use txn::{LockWord, RepairOutcome, TxObj};

const SLOW: u16 = 1;
const SUSPICIOUS: u16 = 2;

fn pause(at: u64) -> FaultPlan {
    FaultPlan {
        pause_after_verbs: Some(at),
        ..FaultPlan::default()
    }
}

/// `SLOW` runs `spread` over `n` accounts of 100 and is paused after its
/// `at`-th verb; `SUSPICIOUS` (skewed) bumps every account; then `SLOW`
/// resumes and finishes. Returns the cluster, the accounts and `SLOW`'s
/// aborted attempts.
async fn suspected(rf: u16, n: usize, at: u64) -> (Cluster, Vec<TxObj<u64>>, u64) {
    let cluster = Cluster::new(rf).await;
    let objs = cluster.accounts(&vec![100; n]).await;
    let (mut slow, faults) = cluster.faulty(SLOW, pause(at));
    let task = {
        let objs = objs.clone();
        tokio::spawn(async move { spread(&mut slow, objs).await.map(|()| slow.stats()) })
    };
    faults.paused().await;

    let mut other = cluster.skewed(SUSPICIOUS);
    bump_all(&mut other, &objs).await.unwrap();
    assert!(
        other.stats().repairs >= 1,
        "the slow client was suspected: {:?}",
        other.stats()
    );

    faults.resume();
    let stats = task.await.unwrap().unwrap();
    (cluster, objs, stats.aborts)
}

#[tokio::test]
async fn a_slow_logged_owner_wakes_up_harmlessly() {
    for rf in [1u16, 2] {
        for n in [2usize, 3] {
            let m = marks(n as u64, u64::from(rf), true);
            // (pause point, attempts the slow owner loses)
            let points = [
                // Log written, first lock taken: the suspicious client
                // aborts the log; the slow owner's remaining lock CASes land
                // after that, and its commit then finds its log aborted.
                (m.first_lock, 1),
                // Every lock held, log INIT: aborted.
                (m.rt1, 1),
                // Log DOING: the suspicious client rolls it forward; the
                // owner's own install then fails CAS by CAS, harmlessly.
                (m.rt3, 0),
                // One pointer installed: same.
                (m.first_ptr, 0),
            ];
            for (at, lost) in points {
                let (cluster, objs, aborts) = suspected(rf, n, at).await;
                let what = format!("rf {rf}, n {n}, paused after verb {at}");
                cluster.assert_unlocked(&objs).await;
                for &o in &objs {
                    cluster.replicated_value(o).await;
                }
                let after = cluster.read_all(SETUP_OWNER - 1, &objs).await;
                // Both transactions happened exactly once.
                let expected: Vec<u64> = spread_values(&vec![100; n]).iter().map(|v| v + 1).collect();
                assert_eq!(after, expected, "{what}");
                assert_eq!(aborts, lost, "{what}");
                assert_eq!(cluster.log_state(SLOW).await.0, LogState::Done, "{what}");
            }
        }
    }
}

#[tokio::test]
async fn a_slow_single_object_owner_is_fenced_and_retries() {
    for rf in [1u16, 2] {
        let m = marks(1, u64::from(rf), false);
        // Locked; replicated, also with the backup's pointer moved.
        let points: &[u64] = if rf == 1 { &[m.rt1] } else { &[m.rt1, m.first_ptr] };
        for &at in points {
            let (cluster, objs, aborts) = suspected(rf, 1, at).await;
            cluster.assert_unlocked(&objs).await;
            assert_eq!(
                cluster.replicated_value(objs[0]).await,
                111,
                "rf {rf}, paused after {at}"
            );
            assert_eq!(aborts, 1, "the fenced attempt aborted, the retry committed");
        }
    }
}

#[tokio::test]
async fn a_late_lock_after_an_aborted_and_finished_log_is_released() {
    // The slow owner is paused between its first and second lock CAS of RT1
    // and dies at its next round trip. Meanwhile its log was aborted and
    // finished (DONE) by a suspicious client, so the second lock CAS lands
    // after DONE: the lock names a finished log. Before the fix in
    // repair.rs, repair answered "Retry" to it forever and the object stayed
    // locked for good.
    for rf in [1u16, 2] {
        let m = marks(2, u64::from(rf), true);
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let (x, y) = (objs[0], objs[1]);
        let (mut slow, faults) = cluster.faulty(
            SLOW,
            FaultPlan {
                pause_after_verbs: Some(m.first_lock),
                crash_after_verbs: Some(m.rt1),
                ..FaultPlan::default()
            },
        );
        let task = {
            let objs = objs.clone();
            tokio::spawn(async move { spread(&mut slow, objs).await })
        };
        faults.paused().await;
        let mut other = cluster.skewed(SUSPICIOUS);
        bump_all(&mut other, &[x]).await.unwrap();
        let (state, checksum) = cluster.log_state(SLOW).await;
        assert_eq!(state, LogState::Done);
        faults.resume();
        assert!(common::is_crash(&task.await.unwrap().unwrap_err()));

        let late = cluster.lock(y).await;
        assert_eq!(late, checksum, "rf {rf}: the late lock CAS landed after DONE");
        let mut third = cluster.skewed(3);
        assert_eq!(
            third.repair(y.raw(), late).await.unwrap(),
            RepairOutcome::Repaired
        );
        assert_eq!(
            cluster.lock(y).await,
            LockWord::unlocked(0),
            "back to the version logged"
        );
        bump_all(&mut third, &objs).await.unwrap();
        cluster.assert_unlocked(&objs).await;
        assert_eq!(cluster.read_all(4, &objs).await, vec![102, 101], "rf {rf}");
    }
}

#[tokio::test]
async fn a_suspected_repairer_does_not_undo_a_later_commit() {
    // D dies holding X's lock without a log. R1 steals it (log-less repair)
    // and is paused right after the steal. R2, whose clock is further ahead,
    // suspects R1, steals X from it, repairs and commits X + 1. T then moves
    // 10 from X to Y and is paused in DOING, holding both locks. When R1
    // wakes, it must not CAS X's pointer: before the fix in repair.rs it
    // copied X as of R2's commit and installed the copy, so T's pointer CAS
    // on X failed while Y's landed (X lost 10 of nothing: the total grew).
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let x = objs[0];

        let (mut d, _) = cluster.faulty(1, common::crash_after(marks(1, u64::from(rf), false).rt1));
        assert!(common::is_crash(&bump_all(&mut d, &[x]).await.unwrap_err()));
        let dead = cluster.lock(x).await;

        // R1's verbs: READ D's log slot, CAS the steal.
        let (mut r1, f1) = cluster.faulty(
            2,
            FaultPlan {
                pause_after_verbs: Some(2),
                clock_skew_ms: SKEW_MS,
                ..FaultPlan::default()
            },
        );
        let r1_task = tokio::spawn(async move { r1.repair(x.raw(), dead).await });
        f1.paused().await;
        assert_eq!(cluster.lock(x).await.owner(), 2, "R1 holds the stolen lock");

        let mut r2 = cluster.skewed_by(3, 2 * SKEW_MS);
        bump_all(&mut r2, &[x]).await.unwrap();

        let (mut t, ft) = cluster.faulty(
            4,
            FaultPlan {
                pause_after_verbs: Some(marks(2, u64::from(rf), true).rt3),
                clock_skew_ms: SKEW_MS,
                ..FaultPlan::default()
            },
        );
        let t_task = {
            let objs = objs.clone();
            tokio::spawn(async move { spread(&mut t, objs).await })
        };
        ft.paused().await;
        assert_eq!(cluster.log_state(4).await.0, LogState::Doing);
        let (_, p_before) = cluster.meta(x).await;

        f1.resume();
        assert_eq!(r1_task.await.unwrap().unwrap(), RepairOutcome::Retry, "rf {rf}");
        assert_eq!(
            cluster.meta(x).await.1,
            p_before,
            "rf {rf}: R1 left X's pointer alone"
        );

        ft.resume();
        t_task.await.unwrap().unwrap();
        cluster.assert_unlocked(&objs).await;
        for &o in &objs {
            cluster.replicated_value(o).await;
        }
        assert_eq!(cluster.read_all(5, &objs).await, vec![91, 110], "rf {rf}");
    }
}
