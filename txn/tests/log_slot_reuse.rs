//! The checksum rule (rTX §4.4, "Reuse ID and log buffer"): an owner
//! rewrites its one log slot for every logged transaction, so a repairer
//! that saw lock word L1 of an earlier transaction T1 may read the slot after
//! a later T2 of the same owner rewrote it. The slot's checksum (the lock
//! word its transaction locked with) then differs from L1, and the repair
//! must not act on T2's log: not abort it, not roll it forward, not touch its
//! locks or objects. It answers `Retry`.
//!
//! The repairer's clock is skewed so that T2's leases look expired to it:
//! had it taken T2's log for T1's, it would have acted on it (the last test
//! shows that it does when it presents T2's own lock word).

mod common;

use common::{marks, spread, spread_values, Cluster, SETUP_OWNER};
use fabric::FaultPlan;
use txn::word::LogState;
use txn::{DataPtr, LockWord, RepairOutcome, TxObj};

const OWNER: u16 = 1;
const REPAIRER: u16 = 2;

/// Everything a repair could change: every meta on every replica and the
/// owner's log slot.
async fn snapshot(cluster: &Cluster, objs: &[TxObj<u64>]) -> (Vec<(LockWord, DataPtr)>, txn::log::Log) {
    let mut metas = Vec::new();
    for &o in objs {
        for i in 0..cluster.replicas() {
            metas.push(cluster.meta_on(o, i).await);
        }
    }
    (metas, cluster.log(OWNER).await.unwrap())
}

/// Verbs of `OWNER`'s second `spread` over `n` objects at the end of RT1 and
/// of RT3 (it allocates nothing: the first one's freed blocks are reused),
/// counted from the client's creation, after a first `spread` over `n`.
fn second_marks(n: u64, rf: u64) -> (u64, u64) {
    let m = marks(n, rf, true);
    let chunk = common::first_chunk_verbs(rf);
    (m.end + m.rt1 - chunk, m.end + m.rt3 - chunk)
}

/// T1 = `spread` over `t1`, committed; T2 = `spread` over `t2`, paused
/// after its verb `pause_at` (or run to the end when `None`). Returns T1's
/// lock word and the paused task's fault handle.
async fn two_transactions(
    cluster: &Cluster,
    t1: &[TxObj<u64>],
    t2: &[TxObj<u64>],
    pause_at: Option<u64>,
) -> (LockWord, Option<common::Paused>) {
    let plan = FaultPlan {
        pause_after_verbs: pause_at,
        ..FaultPlan::default()
    };
    let (mut a, faults) = cluster.faulty(OWNER, plan);
    spread(&mut a, t1.to_vec()).await.unwrap();
    let (state, l1) = cluster.log_state(OWNER).await;
    assert_eq!(state, LogState::Done);
    let t2 = t2.to_vec();
    let task = tokio::spawn(async move { spread(&mut a, t2).await });
    match pause_at {
        Some(_) => {
            faults.paused().await;
            (l1, Some(common::Paused { faults, task }))
        }
        None => {
            task.await.unwrap().unwrap();
            (l1, None)
        }
    }
}

#[tokio::test]
async fn a_stale_lock_word_does_not_repair_a_finished_reuse_of_the_slot() {
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let (l1, _) = two_transactions(&cluster, &objs, &objs, None).await;
        let (state, l2) = cluster.log_state(OWNER).await;
        assert_eq!(state, LogState::Done);
        assert_ne!(l1, l2, "each transaction of an owner locks with a new word");
        assert!(
            l2.lease_tick() > l1.lease_tick(),
            "leases of one owner strictly increase"
        );

        let before = snapshot(&cluster, &objs).await;
        let mut r = cluster.skewed(REPAIRER);
        for &o in &objs {
            assert_eq!(
                r.repair(o.raw(), l1).await.unwrap(),
                RepairOutcome::Retry,
                "rf {rf}"
            );
        }
        assert_eq!(
            snapshot(&cluster, &objs).await,
            before,
            "rf {rf}: nothing changed"
        );
    }
}

#[tokio::test]
async fn a_stale_lock_word_leaves_a_doing_reuse_alone() {
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let (_, rt3) = second_marks(2, u64::from(rf));
        let (l1, paused) = two_transactions(&cluster, &objs, &objs, Some(rt3)).await;
        let (state, l2) = cluster.log_state(OWNER).await;
        assert_eq!(state, LogState::Doing, "T2 is committing");
        assert_eq!(cluster.lock(objs[0]).await, l2);

        let before = snapshot(&cluster, &objs).await;
        let mut r = cluster.skewed(REPAIRER);
        for &o in &objs {
            assert_eq!(
                r.repair(o.raw(), l1).await.unwrap(),
                RepairOutcome::Retry,
                "rf {rf}"
            );
        }
        assert_eq!(
            snapshot(&cluster, &objs).await,
            before,
            "rf {rf}: T2 was not rolled forward"
        );

        paused.unwrap().finish().await;
        cluster.assert_unlocked(&objs).await;
        let twice = spread_values(&spread_values(&[100, 100]));
        assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, twice);
    }
}

#[tokio::test]
async fn a_stale_lock_word_does_not_abort_an_init_reuse() {
    for rf in [1u16, 2] {
        // T2 on the same objects (locked by T2), and on other objects (T1's
        // objects are free).
        for same in [true, false] {
            let cluster = Cluster::new(rf).await;
            let objs = cluster.accounts(&[100, 100, 100]).await;
            let t1 = &objs[..2];
            let t2 = if same { &objs[..2] } else { &objs[1..] };
            let (rt1, _) = second_marks(2, u64::from(rf));
            let (l1, paused) = two_transactions(&cluster, t1, t2, Some(rt1)).await;
            let (state, l2) = cluster.log_state(OWNER).await;
            assert_eq!(state, LogState::Init, "T2 has locked and not committed");
            assert_eq!(cluster.lock(t2[0]).await, l2);

            let before = snapshot(&cluster, &objs).await;
            let mut r = cluster.skewed(REPAIRER);
            for &o in t1 {
                assert_eq!(r.repair(o.raw(), l1).await.unwrap(), RepairOutcome::Retry);
            }
            assert_eq!(
                snapshot(&cluster, &objs).await,
                before,
                "rf {rf}, same objects {same}: T2's log is still INIT and its locks are T2's"
            );

            paused.unwrap().finish().await;
            cluster.assert_unlocked(&objs).await;
            let after = cluster.read_all(SETUP_OWNER - 1, &objs).await;
            let mut expected = vec![100, 100, 100];
            let t1_after = spread_values(&expected[..2]);
            expected[..2].copy_from_slice(&t1_after);
            let range = if same { 0..2 } else { 1..3 };
            let t2_after = spread_values(&expected[range.clone()]);
            expected[range].copy_from_slice(&t2_after);
            assert_eq!(after, expected, "rf {rf}, same objects {same}: T2 committed");
        }
    }
}

#[tokio::test]
async fn the_current_lock_word_does_repair_the_same_log() {
    // The contrast: presented with T2's own lock word, the same skewed
    // repairer aborts T2's INIT log and releases its locks, and T2, resumed,
    // finds its log aborted and retries.
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let (rt1, _) = second_marks(2, 1);
    let (_, paused) = two_transactions(&cluster, &objs, &objs, Some(rt1)).await;
    let (_, l2) = cluster.log_state(OWNER).await;
    let mut r = cluster.skewed(REPAIRER);
    assert_eq!(
        r.repair(objs[0].raw(), l2).await.unwrap(),
        RepairOutcome::Repaired
    );
    assert_eq!(cluster.log_state(OWNER).await, (LogState::Done, l2));
    cluster.assert_unlocked(&objs).await;
    paused.unwrap().finish().await;
    let twice = spread_values(&spread_values(&[100, 100]));
    assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, twice);
}

#[tokio::test]
async fn a_stale_doing_header_does_not_take_over_a_reused_slot() {
    // The header CAS by which a repairer takes a DOING log over compares the
    // header word only. R reads T1's log (DOING, expired for R) and is
    // paused; A finishes T1, runs T2 on the slot, reaches DOING, installs
    // T2's first pointer and dies. Had T2's DOING word been T1's (same
    // lease: two commits of one owner within a millisecond), R's take-over
    // would have succeeded on T2's log, rolled T1's entries (no-ops) and
    // marked T2's log DONE with T2 half installed. Commit leases of an owner
    // now strictly increase, so the CAS fails and T2 is rolled forward.
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100, 100, 100]).await;
    let m = marks(2, 1, true);
    // T2 takes no chunk (T1's freed blocks): its first pointer CAS is at
    // `first_ptr` less those of its own verbs.
    let t2_first_ptr = m.first_ptr - common::first_chunk_verbs(1);
    let (mut a, fa) = cluster.faulty(
        OWNER,
        FaultPlan {
            pause_after_verbs: Some(m.rt3),
            crash_after_verbs: Some(m.end + t2_first_ptr),
            ..FaultPlan::default()
        },
    );
    let a_task = {
        let objs = objs.clone();
        tokio::spawn(async move {
            spread(&mut a, objs[..2].to_vec()).await?;
            spread(&mut a, objs[1..].to_vec()).await
        })
    };
    fa.paused().await;
    let (state, l1) = cluster.log_state(OWNER).await;
    assert_eq!(state, LogState::Doing);

    let (mut r, fr) = cluster.faulty(
        REPAIRER,
        FaultPlan {
            pause_after_verbs: Some(1),
            clock_skew_ms: common::SKEW_MS,
            ..FaultPlan::default()
        },
    );
    let x = objs[0];
    let r_task = tokio::spawn(async move { r.repair(x.raw(), l1).await });
    fr.paused().await;

    fa.resume();
    assert!(common::is_crash(&a_task.await.unwrap().unwrap_err()));
    let (state, l2) = cluster.log_state(OWNER).await;
    assert_eq!(state, LogState::Doing, "T2 is committing, its owner dead");
    assert_ne!(l2, l1);

    fr.resume();
    assert_eq!(r_task.await.unwrap().unwrap(), RepairOutcome::Retry);
    assert_eq!(
        cluster.log_state(OWNER).await,
        (LogState::Doing, l2),
        "T2's log untouched"
    );

    let mut c = cluster.skewed(3);
    common::bump_all(&mut c, &objs).await.unwrap();
    cluster.assert_unlocked(&objs).await;
    assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, vec![91, 101, 111]);
}
