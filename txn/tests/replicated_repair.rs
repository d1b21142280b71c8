//! Replicated rTX under the interleavings an adversary picks: a repairer
//! that stalls after any of its verbs, a second repairer and a third client
//! that commit meanwhile, and an owner that wakes up after all of them
//! (issue 19, items 1–4). Each test sweeps the stalled party's pause point
//! over every verb of its operation rather than naming one, so that a change
//! in verb counts cannot turn it into a test of something else.
//!
//! The property checked throughout: **when a commit is acknowledged, every
//! replica holds its value**, and no later step of anyone rolls a replica
//! back behind an acknowledged commit.

mod common;

use std::time::Duration;

use common::{bump_all, marks, spread, Cluster, SKEW_MS};
use fabric::{Batch, FaultPlan, GlobalAddr, Replica};
use txn::word::LogState;
use txn::{DataPtr, TxConfig, TxError, TxObj};

/// Pause points swept for a repairer: past the last verb of any repair
/// below, so that the sweep ends with runs in which the repairer finished.
const REPAIR_VERBS_SWEPT: u64 = 16;

fn stalled(k: u64, skew_ms: i64) -> FaultPlan {
    FaultPlan {
        pause_after_verbs: Some(k),
        clock_skew_ms: skew_ms,
        ..FaultPlan::default()
    }
}

/// A configuration whose transactions give up quickly: a fenced owner that
/// meets its repairer's live lock stops after a few attempts instead of
/// backing off for seconds.
fn few_attempts() -> TxConfig {
    TxConfig {
        attempts_max: 3,
        backoff_min: Duration::from_micros(1),
        backoff_max: Duration::from_micros(10),
        ..TxConfig::default()
    }
}

/// Waits until the task paused at its pause point (`Some(task)`) or
/// finished first (`None`).
async fn paused_or_done<T>(
    faults: &fabric::Faulty<fabric::BaseTransport>,
    mut task: tokio::task::JoinHandle<T>,
) -> Option<tokio::task::JoinHandle<T>> {
    tokio::select! {
        () = faults.paused() => Some(task),
        _ = &mut task => None,
    }
}

/// Asserts that every replica of `obj` holds `value`.
async fn everywhere(cluster: &Cluster, obj: TxObj<u64>, value: u64, what: &str) {
    for i in 0..cluster.replicas() {
        assert_eq!(cluster.value_on(obj, i).await, value, "{what}: replica {i}");
    }
}

#[tokio::test]
async fn a_stalled_logless_repairer_never_rolls_a_backup_back() {
    // Issue 19, item 1. D dies holding X's lock without a log. R1 starts a
    // log-less repair and stalls after its k-th verb; R2 (clock further
    // ahead) steals from it, repairs and commits X + 1; T commits X + 1
    // again. Both are acknowledged. When R1 resumes, nothing it does may
    // move any replica of X away from T's value. Before the fix, R1's
    // "chase" CASed the backup from whatever it found (T's pointer) to R1's
    // stale copy, and later commits never noticed.
    for rf in [2u16, 3] {
        for k in 1..=REPAIR_VERBS_SWEPT {
            let what = format!("rf {rf}, R1 stalled after verb {k}");
            let cluster = Cluster::new(rf).await;
            let x = cluster.accounts(&[100]).await[0];
            let (mut d, _) = cluster.faulty(1, common::crash_after(marks(1, u64::from(rf), false).rt1));
            assert!(common::is_crash(&bump_all(&mut d, &[x]).await.unwrap_err()));
            let dead = cluster.lock(x).await;

            let (mut r1, f1) = cluster.faulty(2, stalled(k, SKEW_MS));
            let r1_task = tokio::spawn(async move { r1.repair(x.raw(), dead).await });
            let r1_task = paused_or_done(&f1, r1_task).await;

            let mut r2 = cluster.skewed_by(3, 2 * SKEW_MS);
            bump_all(&mut r2, &[x]).await.unwrap();
            let mut t = cluster.skewed_by(4, 2 * SKEW_MS);
            bump_all(&mut t, &[x]).await.unwrap();
            everywhere(&cluster, x, 102, &format!("{what}, before R1 resumes")).await;

            if let Some(task) = r1_task {
                f1.resume();
                // Whatever R1 reports, it must not have undone anything.
                let _ = task.await.unwrap();
            }
            everywhere(&cluster, x, 102, &format!("{what}, after R1 resumed")).await;
            cluster.assert_unlocked(&[x]).await;
            let mut later = cluster.client(5);
            bump_all(&mut later, &[x]).await.unwrap();
            everywhere(&cluster, x, 103, &format!("{what}, a later commit")).await;
        }
    }
}

#[tokio::test]
async fn an_opt1_owner_acknowledges_only_what_every_replica_holds() {
    // Issue 19, item 2. O holds X's lock for a single-object commit and is
    // suspected; R repairs it log-less and stalls after its k-th verb; O
    // wakes and finishes; then R dies. If O's commit was acknowledged, every
    // replica must hold its value at that moment: a primary failure then
    // must not lose it. Before the fix, O ignored a failed backup CAS and
    // took its commit point on the primary with the backup holding R's copy
    // of the old value.
    for rf in [2u16, 3] {
        let m = marks(1, u64::from(rf), false);
        for k in 1..=REPAIR_VERBS_SWEPT {
            let what = format!("rf {rf}, R stalled after verb {k}");
            let cluster = Cluster::new(rf).await;
            let x = cluster.accounts(&[100]).await[0];
            let (mut o, fo) = cluster.faulty_with(1, common::pause_after(m.rt1), few_attempts());
            let o_task = tokio::spawn(async move { bump_all(&mut o, &[x]).await });
            fo.paused().await;
            let held = cluster.lock(x).await;
            assert_eq!(held.owner(), 1, "{what}: O holds the lock");

            let (mut r, fr) = cluster.faulty(2, stalled(k, SKEW_MS));
            let r_task = tokio::spawn(async move { r.repair(x.raw(), held).await });
            let r_task = paused_or_done(&fr, r_task).await;

            fo.resume();
            let acknowledged = o_task.await.unwrap().is_ok();
            if acknowledged {
                everywhere(&cluster, x, 101, &format!("{what}, O acknowledged")).await;
            }
            // R dies where it stalled.
            if let Some(task) = r_task {
                task.abort();
                let _ = task.await;
            }
            let mut third = cluster.skewed_by(3, 2 * SKEW_MS);
            bump_all(&mut third, &[x]).await.unwrap();
            let expected = if acknowledged { 102 } else { 101 };
            everywhere(&cluster, x, expected, &format!("{what}, after a third client")).await;
            cluster.assert_unlocked(&[x]).await;
        }
    }
}

/// Installs on `obj` of `owner`'s log-free object `y` a run of single-object
/// commits, `count` of them, as fast as the client goes.
async fn bump_times(c: &mut txn::TxClient, obj: TxObj<u64>, count: u64) {
    for _ in 0..count {
        bump_all(c, &[obj]).await.unwrap();
    }
}

#[tokio::test]
async fn a_stalled_takeover_cannot_install_a_pair_that_came_round_again() {
    // Issue 19, item 3. O's logged commit of {x, y} is taken over at DOING
    // by R, who stalls right after its take-over CAS. O finishes the install
    // itself; its DOING -> DONE CAS fails (the header is R's). O then
    // commits y 65,535 more times: with y's replaced blocks reused at once,
    // y's pointer comes back to the (16-bit version, block) pair of the
    // log's old pointer, and R's stale CAS from it would roll y back one
    // acknowledged commit. The paper reuses a block only once its rTX is
    // done: O must not free the blocks of a log it has not seen DONE.
    for rf in [1u16, 2] {
        let what = format!("rf {rf}");
        let m = marks(2, u64::from(rf), true);
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let y = objs[1];
        let (mut o, fo) = cluster.faulty(1, common::pause_after(m.rt3));
        let o_task = {
            let objs = objs.clone();
            tokio::spawn(async move {
                spread(&mut o, objs).await?;
                Ok::<_, TxError>(o)
            })
        };
        fo.paused().await;
        assert_eq!(cluster.log_state(1).await.0, LogState::Doing);
        let held = cluster.lock(y).await;

        // R: READ the log slot, CAS the header on every replica: stop there.
        let (mut r, fr) = cluster.faulty(2, stalled(1 + u64::from(rf), SKEW_MS));
        let r_task = tokio::spawn(async move { r.repair(y.raw(), held).await });
        fr.paused().await;
        let headers = cluster.log_headers(1).await;
        assert!(
            headers.iter().all(|h| h.state() == LogState::Doing),
            "{what}: R took the log over: {headers:?}"
        );

        fo.resume();
        let mut o = o_task.await.unwrap().unwrap();
        assert_eq!(cluster.read_all(9, &objs).await, vec![90, 110], "{what}");
        bump_times(&mut o, y, 65_535).await;
        let expected = 110 + 65_535;
        assert_eq!(cluster.value(y).await, expected, "{what}");

        fr.resume();
        r_task.await.unwrap().unwrap();
        assert_eq!(
            cluster.read_all(9, &objs).await,
            vec![90, expected],
            "{what}: the stalled take-over rolled y back"
        );
        for &obj in &objs {
            cluster.replicated_value(obj).await;
        }
        assert_eq!(cluster.log_state(1).await.0, LogState::Done, "{what}");
        // The owner's next logged commit settles the log it was kept from.
        spread(&mut o, objs.clone()).await.unwrap();
        assert_eq!(
            cluster.read_all(9, &objs).await,
            vec![80, expected + 10],
            "{what}"
        );
    }
}

/// Writes `ptr` over `obj`'s data pointer on replica `i` (0 = primary),
/// outside any protocol: the broken invariant a test needs to show that a
/// commit notices one.
async fn overwrite_pointer(cluster: &Cluster, obj: TxObj<u64>, i: usize, ptr: DataPtr) {
    let mut f = cluster.fabric.fork();
    let mut b = Batch::new();
    let to = if i == 0 {
        Replica::Primary
    } else {
        Replica::Backup(i as u8 - 1)
    };
    let at = GlobalAddr::new(obj.meta().region(), obj.meta().offset() + 8);
    let h = b.on(to).write(at, &ptr.raw().to_le_bytes());
    f.execute(&mut b).await.unwrap();
    b.done(h).unwrap();
}

#[tokio::test]
async fn a_logged_commit_whose_pointer_cas_fails_is_never_acknowledged() {
    // Issue 19, item 4. O's logged commit reaches DOING; then one replica of
    // x's data pointer is moved by something outside the protocol (what
    // items 1–3 did by accident). O still owns its log, so nobody could
    // legitimately have moved a pointer it holds locked: the commit must
    // fail loudly, not report success with the replicas disagreeing.
    for rf in [1u16, 2] {
        for replica in 0..usize::from(rf) {
            let what = format!("rf {rf}, replica {replica} moved");
            let m = marks(2, u64::from(rf), true);
            let cluster = Cluster::new(rf).await;
            let objs = cluster.accounts(&[100, 100]).await;
            let x = objs[0];
            let (mut o, fo) = cluster.faulty(1, common::pause_after(m.rt3));
            let o_task = {
                let objs = objs.clone();
                tokio::spawn(async move {
                    let r = spread(&mut o, objs).await;
                    (r, o.stats())
                })
            };
            fo.paused().await;
            let (_, p) = cluster.meta_on(x, replica).await;
            overwrite_pointer(
                &cluster,
                x,
                replica,
                DataPtr::new(p.ptr_version().wrapping_add(7), p.offset()),
            )
            .await;
            fo.resume();
            let (result, stats) = o_task.await.unwrap();
            match result {
                Err(TxError::Invariant(why)) => assert!(why.contains("pointer"), "{what}: {why}"),
                other => panic!("{what}: a broken pointer CAS was answered with {other:?}"),
            }
            assert_eq!(stats.invariant_violations, 1, "{what}");
        }
    }
}

/// Asserts that `owner`'s log header is the same word on every replica.
async fn headers_agree(cluster: &Cluster, owner: u16, what: &str) {
    let headers = cluster.log_headers(owner).await;
    assert!(
        headers.iter().all(|h| *h == headers[0]),
        "{what}: log headers differ across replicas: {headers:?}"
    );
}

#[tokio::test]
async fn log_headers_end_the_same_on_every_replica() {
    // A header CAS goes to every replica; the primary decides. When the
    // replicas end in different states (the owner stopped after its
    // INIT -> DOING reached the primary only; or an owner's INIT -> DOING
    // and a repairer's INIT -> ABORT each won on some replica), a promoted
    // backup would read a decision the primary never made. Whoever's CAS
    // finds them split brings the backups to the primary's header.
    for rf in [2u16, 3] {
        let m = marks(2, u64::from(rf), true);
        // RT3's CAS on the primary only (its first verb).
        let rt3_primary = m.rt1 + 1;
        for crash in [true, false] {
            let what = format!(
                "rf {rf}, owner {} after its primary's INIT -> DOING",
                if crash { "dies" } else { "pauses" }
            );
            let cluster = Cluster::new(rf).await;
            let objs = cluster.accounts(&[100, 100]).await;
            let plan = if crash {
                common::crash_after(rt3_primary)
            } else {
                common::pause_after(rt3_primary)
            };
            let (mut o, fo) = cluster.faulty(1, plan);
            let o_task = {
                let objs = objs.clone();
                tokio::spawn(async move { spread(&mut o, objs).await })
            };
            let o_task = paused_or_done(&fo, o_task).await;
            assert_eq!(o_task.is_some(), !crash, "{what}");
            let mut survivor = cluster.skewed(2);
            bump_all(&mut survivor, &objs).await.unwrap();
            if let Some(task) = o_task {
                fo.resume();
                task.await.unwrap().unwrap();
            } else {
                // What recovery does for a dead client's owner ids.
                let mut recovery = cluster.skewed(3);
                recovery.finish_owner_log(1).await.unwrap();
            }
            headers_agree(&cluster, 1, &what).await;
            assert_eq!(cluster.log_state(1).await.0, LogState::Done, "{what}");
            for &obj in &objs {
                cluster.replicated_value(obj).await;
            }
            assert_eq!(cluster.read_all(9, &objs).await, vec![91, 111], "{what}");
        }

        // The race: R's INIT -> ABORT reaches the primary, and R stalls
        // before it reaches the backups; O's INIT -> DOING then loses on
        // the primary and wins on every backup.
        let what = format!("rf {rf}, INIT -> DOING against INIT -> ABORT");
        let cluster = Cluster::new(rf).await;
        let objs = cluster.accounts(&[100, 100]).await;
        let (mut o, fo) = cluster.faulty(1, common::pause_after(m.rt1));
        let o_task = {
            let objs = objs.clone();
            tokio::spawn(async move {
                spread(&mut o, objs).await?;
                Ok::<_, TxError>(o.stats())
            })
        };
        fo.paused().await;
        let held = cluster.lock(objs[0]).await;
        // R: READ the slot, CAS INIT -> ABORT on the primary; stop.
        let (mut r, fr) = cluster.faulty(2, stalled(2, SKEW_MS));
        let x = objs[0];
        let r_task = tokio::spawn(async move { r.repair(x.raw(), held).await });
        fr.paused().await;
        fo.resume();
        let stats = o_task.await.unwrap().unwrap();
        assert_eq!(
            stats.aborts, 1,
            "{what}: O's log was aborted, its retry committed"
        );
        fr.resume();
        r_task.await.unwrap().unwrap();
        headers_agree(&cluster, 1, &what).await;
        assert_eq!(cluster.read_all(9, &objs).await, vec![90, 110], "{what}");
    }
}

/// Pause points swept for the repairer of an Opt1 commit whose backup took
/// the owner's pointer: past its fence of the primary and its install on
/// the backup.
const FENCE_VERBS_SWEPT: u64 = 32;

#[tokio::test]
async fn an_opt1_commit_fenced_after_its_backups_took_it_is_in_doubt_not_retried() {
    // Issue 46, path 5 (docs/txn.md §8, "Opt1 in doubt"). O's single-object
    // commit installed its pointer on the backup (its first round trip)
    // and paused; R, suspecting it, repairs log-less and stalls after its
    // k-th verb. Where R has fenced the primary (its copy of the old value
    // installed there) and the backup still holds O's pointer, a promotion
    // of the backup would keep O's write: O must report the outcome
    // unknown. Before, O took the fence for "did not happen" and ran the
    // write again (the gateway applied an INCR twice).
    let rf = 2u16;
    let m = marks(1, u64::from(rf), false);
    let mut windows = 0;
    for k in 1..=FENCE_VERBS_SWEPT {
        let what = format!("R stalled after verb {k}");
        let cluster = Cluster::new(rf).await;
        let x = cluster.accounts(&[100]).await[0];
        let old = cluster.meta_on(x, 0).await.1;
        let (mut o, fo) = cluster.faulty_with(1, common::pause_after(m.first_ptr), few_attempts());
        let o_task = tokio::spawn(async move {
            let r = bump_all(&mut o, &[x]).await;
            (r, o.take_commit_in_doubt(), o.stats().commits)
        });
        fo.paused().await;
        let ours = cluster.meta_on(x, 1).await.1;
        assert_ne!(ours, old, "{what}: O's pointer is on the backup");
        let held = cluster.lock(x).await;
        let (mut r, fr) = cluster.faulty(2, stalled(k, SKEW_MS));
        let r_task = tokio::spawn(async move { r.repair(x.raw(), held).await });
        let r_task = paused_or_done(&fr, r_task).await;
        let primary = cluster.meta_on(x, 0).await.1;
        let window = primary != old && primary != ours && cluster.meta_on(x, 1).await.1 == ours;

        fo.resume();
        let (result, in_doubt, commits) = o_task.await.unwrap();
        if window {
            windows += 1;
            assert!(
                matches!(result, Err(TxError::InDoubt(_))),
                "{what}: fenced with its pointer on the backup, O reported {result:?}"
            );
            assert!(in_doubt, "{what}: the client says the commit is in doubt");
            assert_eq!(commits, 0, "{what}: not run again");
        } else {
            assert!(
                !matches!(result, Err(TxError::InDoubt(_))),
                "{what}: in doubt though no backup held its pointer when fenced"
            );
        }
        if let Some(task) = r_task {
            task.abort();
            let _ = task.await;
        }
    }
    assert!(
        windows > 0,
        "the sweep reaches R's fence before its backup install"
    );
}
