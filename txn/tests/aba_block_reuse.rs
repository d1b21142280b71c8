//! ABA on a reused data block (rTX §4.4, "Data pointer reuse"). A client's
//! allocator hands out again the blocks its commits freed (alloc.rs), so an
//! object's data pointer can return to a block it left. The lock version (in
//! the unlocked lock word) and the pointer version (in the data pointer's high
//! bits) both move on every commit, so neither validation nor an idempotent
//! pointer CAS can mistake the returned block for the old state.

mod common;

use common::{bump_all, marks, spread, Cluster, SETUP_OWNER, SKEW_MS};
use fabric::FaultPlan;
use txn::word::LogState;
use txn::{AbortReason, LockWord, RepairOutcome, TxError};

const READER: u16 = 1;
const WRITER: u16 = 2;

/// X goes P0 -> P1 -> P0: the writer's first commit frees P0 (the block X
/// was created in) and takes a fresh P1; its second takes P0 back from its
/// free list. Returns the cluster, X and Y, X's meta as first seen, and
/// checks the round trip through P0.
async fn x_back_at_its_first_block(cluster: &Cluster, x: txn::TxObj<u64>) -> (LockWord, txn::DataPtr) {
    let (v0, p0) = cluster.meta(x).await;
    let mut w = cluster.client(WRITER);
    bump_all(&mut w, &[x]).await.unwrap();
    let (_, p1) = cluster.meta(x).await;
    assert_ne!(p1.offset(), p0.offset());
    bump_all(&mut w, &[x]).await.unwrap();
    let (v2, p2) = cluster.meta(x).await;
    assert_eq!(p2.offset(), p0.offset(), "the block was reused");
    assert_eq!(
        p2.ptr_version(),
        p0.ptr_version() + 2,
        "under a pointer version two commits later"
    );
    assert_eq!(v2, LockWord::unlocked(v0.version() + 2));
    assert_eq!(
        cluster.block_on(p0.offset(), 0).await,
        102,
        "P0 now holds the new value"
    );
    (v0, p0)
}

#[tokio::test]
async fn a_reader_of_a_block_that_came_back_aborts() {
    for rf in [1u16, 2] {
        // What the reader does with X after reading it: validate it only
        // (writing Y), write it, or only read.
        for case in ["validate", "write", "read-only"] {
            let cluster = Cluster::new(rf).await;
            let objs = cluster.accounts(&[100, 0]).await;
            let (x, y) = (objs[0], objs[1]);
            let mut r = cluster.client(READER);
            let mut tx = r.begin();
            assert_eq!(tx.read(x).await.unwrap(), 100);

            x_back_at_its_first_block(&cluster, x).await;

            match case {
                "validate" => tx.write(y, &100).await.unwrap(),
                "write" => tx.write(x, &110).await.unwrap(),
                _ => {}
            }
            let e = tx.commit().await.unwrap_err();
            assert!(
                matches!(e, TxError::Abort(AbortReason::Changed)),
                "rf {rf}, {case}: {e:?}"
            );
            cluster.assert_unlocked(&objs).await;
            assert_eq!(
                cluster.read_all(SETUP_OWNER - 1, &objs).await,
                vec![102, 0],
                "rf {rf}, {case}"
            );
        }
    }
}

#[tokio::test]
async fn a_stale_pointer_cas_on_a_block_that_came_back_fails() {
    // A repairer whose roll-forward is delayed must not install its logged
    // pointer after the object's block came back: the raw offsets match,
    // only the pointer version tells the states apart.
    //
    // D's transfer between Y and X (X written last, so its old block is the
    // first D reuses) is paused in DOING. R1 takes the commit over (log ->
    // its own DOING) and is paused before its pointer CASes. R2, whose clock
    // is further ahead, takes it over from R1 and finishes it. D wakes up
    // and finds its commit taken over (its DONE CAS fails), so it parks the
    // replaced blocks; its next logged commit finds the log DONE, frees
    // them, and, writing X first, puts X back in P0. Then R1 wakes up with
    // CAS (P0 -> logged new): the log is DONE but R1 does not know, and only
    // the pointer version stops it.
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[100, 100]).await;
    let (y, x) = (objs[0], objs[1]);
    let (_, p0) = cluster.meta(x).await;

    let rt3 = marks(2, 1, true).rt3;
    let (mut d, fd) = cluster.faulty(
        1,
        FaultPlan {
            pause_after_verbs: Some(rt3),
            ..FaultPlan::default()
        },
    );
    let d_task = tokio::spawn(async move {
        spread(&mut d, vec![y, x]).await?;
        Ok::<_, TxError>(d)
    });
    fd.paused().await;
    let lock = cluster.lock(x).await;
    let log = cluster.log(1).await.unwrap();
    assert_eq!(log.header.state(), LogState::Doing);
    assert_eq!(log.entries[1].old, p0);

    // R1: READ the log, CAS its header to R1's DOING; paused there.
    let (mut r1, f1) = cluster.faulty(
        2,
        FaultPlan {
            pause_after_verbs: Some(2),
            clock_skew_ms: SKEW_MS,
            ..FaultPlan::default()
        },
    );
    let r1_task = tokio::spawn(async move { r1.repair(x.raw(), lock).await });
    f1.paused().await;

    let mut r2 = cluster.skewed_by(3, 2 * SKEW_MS);
    assert_eq!(r2.repair(x.raw(), lock).await.unwrap(), RepairOutcome::Repaired);
    assert_eq!(cluster.read_all(4, &[y, x]).await, vec![90, 110]);

    fd.resume();
    let mut d = d_task.await.unwrap().unwrap();
    assert!(d.log_open(), "D's DONE CAS found R2's work: its blocks wait");
    spread(&mut d, vec![x, y]).await.unwrap();
    assert!(!d.log_open());
    let (v, p) = cluster.meta(x).await;
    assert_eq!(p.offset(), p0.offset(), "X is back in its first block");
    assert_ne!(p, p0, "under another pointer version");

    f1.resume();
    r1_task.await.unwrap().unwrap();
    assert_eq!(cluster.meta(x).await, (v, p), "R1's late CASes all failed");
    assert_eq!(cluster.read_all(4, &[y, x]).await, vec![100, 100]);
}
