//! Opt2 (rTX §4.5): an index may pre-lock an object during execution
//! (`Tx::lock_now`, Sherman's leaf updates) or skip concurrency control on an
//! object and keep only the lease check (`Tx::check_lease`, RACE inserts).
//!
//! A pre-lock is taken without a log, so its lock word matches no log slot:
//! if its holder dies, it is repaired log-less. A logged commit re-locks its
//! pre-locked objects under the lock word its log names, in RT1 after the log
//! WRITE, so no lock is visible before its log (commit.rs).

mod common;

use common::{marks, Cluster, SETUP_OWNER};
use fabric::FaultPlan;
use txn::word::LogState;
use txn::{AbortReason, LockWord, TxError};

const A: u16 = 1;
const B: u16 = 2;

#[tokio::test]
async fn a_pre_lock_holds_off_other_writers_until_commit() {
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let (x, y) = (objs[0], objs[1]);
    let mut a = cluster.client(A);
    let mut tx = a.begin();
    tx.lock_now(x.raw()).await.unwrap();
    let pre = cluster.lock(x).await;
    assert!(pre.is_locked() && pre.owner() == A);
    let slot = cluster.log(A).await.unwrap();
    assert_eq!(slot.header.state(), LogState::Empty, "a pre-lock writes no log");
    assert_ne!(slot.checksum, pre);

    // Another writer meets a live lock and aborts (its run would retry).
    let mut b = cluster.client(B);
    let mut other = b.begin();
    let e = other.read(x).await.unwrap_err();
    assert!(matches!(e, TxError::Abort(AbortReason::Locked)), "{e:?}");
    other.rollback().await.unwrap();

    // Reading a pre-locked object in its own transaction costs nothing more.
    let s0 = tx.client().fabric().stats();
    assert_eq!(tx.read(x).await.unwrap(), 100);
    assert_eq!(tx.client().fabric().stats(), s0);

    let vy = tx.read(y).await.unwrap();
    tx.write(x, &90).await.unwrap();
    tx.write(y, &(vy + 10)).await.unwrap();
    tx.commit().await.unwrap();
    cluster.assert_unlocked(&objs).await;
    assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, vec![90, 110]);
    let (state, checksum) = cluster.log_state(A).await;
    assert_eq!(state, LogState::Done);
    assert_ne!(checksum, pre, "the commit locked under a new, logged word");
    assert_eq!(cluster.lock(x).await, LockWord::unlocked(1));
}

#[tokio::test]
async fn a_logged_commit_re_locks_pre_locks_under_its_logged_word() {
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let (x, y) = (objs[0], objs[1]);
        // A's verbs: lock_now(X) = READ meta, READ data, CAS; READ Y's meta
        // and data; then the commit of a fresh client (marks), whose
        // execution reads are the four above.
        let rt1 = marks(2, u64::from(rf), true).rt1 + 1;
        let (mut a, fa) = cluster.faulty(
            A,
            FaultPlan {
                pause_after_verbs: Some(rt1),
                ..FaultPlan::default()
            },
        );
        let task = tokio::spawn(async move {
            let mut tx = a.begin();
            tx.lock_now(x.raw()).await?;
            let vy = tx.read(y).await?;
            tx.write(x, &90).await?;
            tx.write(y, &(vy + 10)).await?;
            tx.commit().await
        });
        fa.paused().await;
        let (state, checksum) = cluster.log_state(A).await;
        assert_eq!(state, LogState::Init);
        assert_eq!(
            cluster.lock(x).await,
            checksum,
            "rf {rf}: the pre-lock now carries the logged word"
        );
        assert_eq!(cluster.lock(y).await, checksum);
        fa.resume();
        task.await.unwrap().unwrap();
        cluster.assert_unlocked(&objs).await;
        assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, vec![90, 110]);
    }
}

#[tokio::test]
async fn a_single_pre_locked_object_commits_under_its_pre_lock() {
    // Opt1 with a pre-lock: RT1 only WRITEs the data (the lock is held),
    // RT4 CASes the pointer and releases.
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100]).await;
    let x = objs[0];
    let mut a = cluster.client(A);
    // Warm up A's allocator so the measured commit allocates nothing.
    common::bump_all(&mut a, &objs).await.unwrap();
    let mut tx = a.begin();
    let s0 = tx.client().fabric().stats();
    tx.lock_now(x.raw()).await.unwrap();
    let s1 = tx.client().fabric().stats();
    let d = s1 - s0;
    assert_eq!(
        (d.round_trips, d.reads, d.cas, d.bytes_read),
        (3, 2, 1, 24),
        "READ meta, READ data, CAS"
    );
    tx.write(x, &7).await.unwrap();
    tx.commit().await.unwrap();
    let d = a.fabric().stats() - s1;
    // Pre-locked and nothing else read: the block WRITE, the pointer CAS and
    // the release go in one batch.
    assert_eq!((d.round_trips, d.writes, d.cas, d.reads), (1, 1, 2, 0), "{d:?}");
    assert_eq!(cluster.lock(x).await, LockWord::unlocked(2));
    assert_eq!(cluster.value(x).await, 7);
}

#[tokio::test]
async fn rollback_releases_pre_locks_unchanged() {
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let mut a = cluster.client(A);
    let mut tx = a.begin();
    tx.lock_now(objs[0].raw()).await.unwrap();
    tx.lock_now(objs[1].raw()).await.unwrap();
    tx.write(objs[1], &5).await.unwrap();
    assert!(cluster.lock(objs[1]).await.is_locked());
    tx.rollback().await.unwrap();
    for &o in &objs {
        assert_eq!(
            cluster.lock(o).await,
            LockWord::unlocked(0),
            "released at the version seen"
        );
    }
    // Same through `run`, with a body that fails with a non-abort error.
    let e = a
        .run(async |tx| {
            tx.lock_now(objs[0].raw()).await?;
            Err::<(), _>(TxError::BadObject("the body gave up".into()))
        })
        .await
        .unwrap_err();
    assert!(matches!(e, TxError::BadObject(_)));
    cluster.assert_unlocked(&objs).await;
    assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, vec![100, 100]);
}

#[tokio::test]
async fn an_expired_pre_lock_is_repaired_log_less_and_its_commit_aborts() {
    for logged in [false, true] {
        let cluster = Cluster::new(1).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let (x, y) = (objs[0], objs[1]);
        let mut a = cluster.client(A);
        let mut tx = a.begin();
        tx.lock_now(x.raw()).await.unwrap();
        let pre = cluster.lock(x).await;
        tx.write(x, &0).await.unwrap();
        if logged {
            tx.write(y, &0).await.unwrap();
        }

        // B thinks A is dead: it steals X's pre-lock, copies and installs X,
        // and commits on top.
        let mut b = cluster.skewed(B);
        common::bump_all(&mut b, &[x]).await.unwrap();
        assert_eq!(b.stats().repairs, 1);
        assert_eq!(
            cluster.lock(x).await,
            LockWord::unlocked(LockWord::version_floor(pre) + 1)
        );

        let e = tx.commit().await.unwrap_err();
        let expected = if logged {
            AbortReason::Changed
        } else {
            AbortReason::Repaired
        };
        assert!(
            matches!(e, TxError::Abort(r) if r == expected),
            "logged {logged}: {e:?}"
        );
        cluster.assert_unlocked(&objs).await;
        assert_eq!(
            cluster.read_all(SETUP_OWNER - 1, &objs).await,
            vec![101, 100],
            "logged {logged}"
        );
    }
}

#[tokio::test]
async fn check_lease_passes_a_free_object_in_one_read() {
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100]).await;
    let mut a = cluster.client(A);
    let mut tx = a.begin();
    let s0 = tx.client().fabric().stats();
    tx.check_lease(objs[0].raw()).await.unwrap();
    let d = tx.client().fabric().stats() - s0;
    assert_eq!(
        (d.round_trips, d.reads, d.bytes_read),
        (1, 1, 8),
        "READ the lock word"
    );
    let s1 = tx.client().fabric().stats();
    tx.commit().await.unwrap();
    assert_eq!(
        a.fabric().stats(),
        s1,
        "the object joined neither the read nor the write set"
    );
}

#[tokio::test]
async fn check_lease_on_a_live_lock_aborts() {
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100]).await;
    let mut a = cluster.client(A);
    let mut holder = a.begin();
    holder.lock_now(objs[0].raw()).await.unwrap();
    let mut b = cluster.client(B);
    let mut tx = b.begin();
    let e = tx.check_lease(objs[0].raw()).await.unwrap_err();
    assert!(matches!(e, TxError::Abort(AbortReason::Locked)), "{e:?}");
    assert!(
        cluster.lock(objs[0]).await.is_locked(),
        "a live lock is left alone"
    );
    holder.rollback().await.unwrap();
}

#[tokio::test]
async fn check_lease_on_an_expired_lock_repairs_it() {
    // Log-less (a pre-lock whose holder stalled) and logged (a transfer
    // dead in DOING: rolled forward).
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let mut a = cluster.client(A);
    let mut holder = a.begin();
    holder.lock_now(objs[0].raw()).await.unwrap();
    let mut b = cluster.skewed(B);
    let mut tx = b.begin();
    tx.check_lease(objs[0].raw()).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!cluster.lock(objs[0]).await.is_locked());
    assert_eq!(b.stats().repairs, 1);
    drop(holder);

    let (mut dead, _) = cluster.faulty(3, common::crash_after(marks(2, 1, true).rt3));
    assert!(common::is_crash(
        &common::spread(&mut dead, objs.clone()).await.unwrap_err()
    ));
    assert!(cluster.lock(objs[1]).await.is_locked());
    let mut tx = b.begin();
    tx.check_lease(objs[1].raw()).await.unwrap();
    tx.commit().await.unwrap();
    cluster.assert_unlocked(&objs).await;
    assert_eq!(cluster.read_all(SETUP_OWNER - 1, &objs).await, vec![90, 110]);
}
