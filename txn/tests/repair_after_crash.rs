//! A client that dies in the middle of a commit is repaired online by the
//! next client that meets its locks (repair.rs): a log still INIT is aborted,
//! a DOING log is rolled forward, and a single-object commit without a log
//! (Opt1) is fenced by stealing its lock, copying the primary's value and
//! installing the copy. Crashes are placed exactly with
//! `FaultPlan::crash_after_verbs` (see `common::marks`); survivors run with a
//! skewed clock so the dead client's lease has expired for them at once.

mod common;

use common::{bump_all, crash_after, is_crash, marks, spread, spread_values, Cluster, SETUP_OWNER};
use txn::word::LogState;
use txn::{LockWord, RepairOutcome, TxObj};

const DEAD: u16 = 1;
const SURVIVOR: u16 = 2;

/// A cluster at replication `rf` with `n` accounts of 100, and owner
/// `DEAD`'s first `spread` over them cut after its `crash_at`-th verb.
async fn crashed(rf: u16, n: usize, crash_at: u64) -> (Cluster, Vec<TxObj<u64>>) {
    let cluster = Cluster::new(rf).await;
    let objs = cluster.accounts(&vec![100; n]).await;
    let (mut dead, faults) = cluster.faulty(DEAD, crash_after(crash_at));
    let e = spread(&mut dead, objs.clone()).await.unwrap_err();
    assert!(is_crash(&e), "{e:?}");
    assert_eq!(faults.verbs_issued(), crash_at);
    (cluster, objs)
}

/// Every object of `objs` is locked by `DEAD` with one lock word; returns it.
async fn held_by_dead(cluster: &Cluster, objs: &[TxObj<u64>]) -> LockWord {
    let lock = cluster.lock(objs[0]).await;
    assert!(lock.is_locked() && lock.owner() == DEAD, "{lock:?}");
    for &o in objs {
        assert_eq!(cluster.lock(o).await, lock);
    }
    lock
}

/// The survivor bumps every object; returns the values a fresh client reads
/// afterwards, having checked that nothing is locked and that every replica
/// agrees.
async fn survive(cluster: &Cluster, objs: &[TxObj<u64>]) -> Vec<u64> {
    let mut s = cluster.skewed(SURVIVOR);
    bump_all(&mut s, objs).await.unwrap();
    assert!(s.stats().repairs >= 1, "{:?}", s.stats());
    cluster.assert_unlocked(objs).await;
    for &o in objs {
        cluster.replicated_value(o).await;
    }
    cluster.read_all(SETUP_OWNER - 1, objs).await
}

fn bumped(v: &[u64]) -> Vec<u64> {
    v.iter().map(|x| x + 1).collect()
}

#[tokio::test]
async fn a_log_left_init_is_aborted_and_the_survivor_commits() {
    for rf in [1u16, 2] {
        for n in [2usize, 3] {
            let m = marks(n as u64, u64::from(rf), true);
            // Every lock held, and only the first one.
            for (crash_at, locked) in [(m.rt1, n), (m.first_lock, 1)] {
                let (cluster, objs) = crashed(rf, n, crash_at).await;
                let lock = held_by_dead(&cluster, &objs[..locked]).await;
                cluster.assert_unlocked(&objs[locked..]).await;
                assert_eq!(cluster.log_state(DEAD).await, (LogState::Init, lock));
                let after = survive(&cluster, &objs).await;
                assert_eq!(
                    after,
                    bumped(&vec![100; n]),
                    "rf {rf}, n {n}: the dead transaction did not happen"
                );
                let headers = cluster.log_headers(DEAD).await;
                assert!(headers.iter().all(|h| h.state() == LogState::Done), "{headers:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_doing_log_is_rolled_forward_on_every_object() {
    for rf in [1u16, 2] {
        for n in [2usize, 3] {
            let m = marks(n as u64, u64::from(rf), true);
            // Just DOING; and with the first pointer already installed.
            for crash_at in [m.rt3, m.first_ptr] {
                let (cluster, objs) = crashed(rf, n, crash_at).await;
                let lock = held_by_dead(&cluster, &objs).await;
                assert_eq!(cluster.log_state(DEAD).await.0, LogState::Doing);
                assert_eq!(cluster.log_state(DEAD).await.1, lock);
                let after = survive(&cluster, &objs).await;
                assert_eq!(
                    after,
                    bumped(&spread_values(&vec![100; n])),
                    "rf {rf}, n {n}, crash at {crash_at}: the dead transaction committed"
                );
                let headers = cluster.log_headers(DEAD).await;
                assert!(headers.iter().all(|h| h.state() == LogState::Done), "{headers:?}");
            }
        }
    }
}

#[tokio::test]
async fn roll_forward_installs_the_logged_pointers_and_bumps_versions_once() {
    let (cluster, objs) = crashed(1, 2, marks(2, 1, true).rt3).await;
    let lock = held_by_dead(&cluster, &objs).await;
    let log = cluster.log(DEAD).await.unwrap();
    let mut s = cluster.skewed(SURVIVOR);
    assert_eq!(
        s.repair(objs[1].raw(), lock).await.unwrap(),
        RepairOutcome::Repaired
    );
    for (e, &o) in log.entries.iter().zip(&objs) {
        assert_eq!(e.meta, o.meta());
        let (l, p) = cluster.meta(o).await;
        assert_eq!(l, LockWord::unlocked(e.old_version + 1));
        assert_eq!(p, e.new);
    }
    assert_eq!(cluster.read_all(3, &objs).await, vec![90, 110]);
    // A second repair of the same lock finds nothing to do.
    assert_eq!(s.repair(objs[0].raw(), lock).await.unwrap(), RepairOutcome::Retry);
    assert_eq!(cluster.read_all(3, &objs).await, vec![90, 110]);
}

#[tokio::test]
async fn a_single_object_commit_without_log_is_fenced_by_steal_copy_install() {
    for rf in [1u16, 2] {
        let m = marks(1, u64::from(rf), false);
        // Locked; and, replicated, with the backup's pointer already moved to
        // the dead owner's uncommitted block.
        let points: &[u64] = if rf == 1 { &[m.rt1] } else { &[m.rt1, m.first_ptr] };
        for &crash_at in points {
            let (cluster, objs) = crashed(rf, 1, crash_at).await;
            let x = objs[0];
            let lock = held_by_dead(&cluster, &objs).await;
            let (_, before) = cluster.meta(x).await;
            if crash_at == m.first_ptr {
                assert_eq!(cluster.value_on(x, 1).await, 110, "the backup is ahead");
            }
            // No log: the dead owner's slot never held one.
            assert!(cluster.log(DEAD).await.is_none_or(|l| l.checksum != lock));

            let mut s = cluster.skewed(SURVIVOR);
            assert_eq!(s.repair(x.raw(), lock).await.unwrap(), RepairOutcome::Repaired);
            let (l, p) = cluster.meta(x).await;
            assert_eq!(
                l,
                LockWord::unlocked(LockWord::version_floor(lock)),
                "released at the floor"
            );
            assert_eq!(
                p.ptr_version(),
                before.ptr_version() + 1,
                "a copy under the next version"
            );
            assert_ne!(p.offset(), before.offset(), "a fresh block");
            assert_eq!(
                cluster.replicated_value(x).await,
                100,
                "the uncommitted value is gone everywhere"
            );
            for i in 1..cluster.replicas() {
                assert_eq!(cluster.meta_on(x, i).await.1, p, "backup {i} points at the copy");
            }

            bump_all(&mut s, &objs).await.unwrap();
            assert_eq!(cluster.replicated_value(x).await, 101);
            assert_eq!(
                cluster.lock(x).await,
                LockWord::unlocked(LockWord::version_floor(lock) + 1)
            );
        }
    }
}

#[tokio::test]
async fn a_single_object_commit_that_landed_keeps_its_value() {
    // Dead after the primary's pointer CAS (the commit point) but before the
    // release in the same batch: committed, still locked. The repair copies
    // the committed value.
    for rf in [1u16, 2] {
        let m = marks(1, u64::from(rf), false);
        let (cluster, objs) = crashed(rf, 1, m.end - 1).await;
        held_by_dead(&cluster, &objs).await;
        let after = survive(&cluster, &objs).await;
        assert_eq!(after, vec![111], "rf {rf}");
    }
}

#[tokio::test]
async fn the_survivor_repairs_through_run_without_help() {
    // The same as the cases above, seen from `TxClient::run` alone: a
    // survivor's ordinary transaction meets the dead locks, repairs, retries
    // and commits; the total of a transfer is unchanged either way.
    for rf in [1u16, 2] {
        let m = marks(2, u64::from(rf), true);
        for crash_at in m.alloc..=m.end {
            let (cluster, objs) = crashed(rf, 2, crash_at).await;
            let after = survive_or_plain(&cluster, &objs).await;
            assert_eq!(
                after.iter().sum::<u64>(),
                202,
                "rf {rf}, crash at {crash_at}: {after:?}"
            );
            assert!(
                after == [101, 101] || after == [91, 111],
                "rf {rf}, crash at {crash_at}: all old or all new, got {after:?}"
            );
        }
    }
}

/// Like `survive`, without requiring a repair (a crash before any lock or
/// after every release leaves nothing to repair).
async fn survive_or_plain(cluster: &Cluster, objs: &[TxObj<u64>]) -> Vec<u64> {
    let mut s = cluster.skewed(SURVIVOR);
    bump_all(&mut s, objs).await.unwrap();
    cluster.assert_unlocked(objs).await;
    for &o in objs {
        cluster.replicated_value(o).await;
    }
    cluster.read_all(SETUP_OWNER - 1, objs).await
}

/// The survivor's cost of one `repair` call, its allocator warmed up.
async fn repair_cost(cluster: &Cluster, obj: TxObj<u64>, lock: LockWord) -> fabric::Stats {
    let mut s = cluster.skewed(SURVIVOR);
    s.create(&0u64).await.unwrap();
    let s0 = s.fabric().stats();
    assert_eq!(s.repair(obj.raw(), lock).await.unwrap(), RepairOutcome::Repaired);
    s.fabric().stats() - s0
}

#[tokio::test]
async fn repairs_cost_what_docs_txn_md_says() {
    // (round trips, READs, READ bytes, WRITEs, WRITE bytes, CAS) of one
    // repair call, quoted in docs/txn.md ("Cost of a repair").
    let cost = |d: fabric::Stats| {
        (
            d.round_trips,
            d.reads,
            d.bytes_read,
            d.writes,
            d.bytes_written,
            d.cas,
        )
    };
    const SLOT: u64 = txn::log::LOG_SLOT_BYTES;
    for rf in [1u64, 2] {
        let n = 2u64;
        let m = marks(n, rf, true);
        // Abort an INIT log: READ slot, CAS INIT->ABORT (every replica), READ
        // slot, CAS the releases + ABORT->DONE (every replica).
        let (cluster, objs) = crashed(rf as u16, 2, m.rt1).await;
        let lock = held_by_dead(&cluster, &objs).await;
        let d = repair_cost(&cluster, objs[0], lock).await;
        assert_eq!(cost(d), (4, 2, 2 * SLOT, 0, 0, rf + n + rf), "abort, rf {rf}");

        // Roll a DOING log forward: READ slot, CAS DOING -> own DOING, then
        // (replicated: the pointers on every replica, then) the pointers,
        // releases and DOING -> DONE.
        let (cluster, objs) = crashed(rf as u16, 2, m.rt3).await;
        let lock = held_by_dead(&cluster, &objs).await;
        let d = repair_cost(&cluster, objs[0], lock).await;
        let expected = if rf == 1 {
            (3, 1, SLOT, 0, 0, 1 + n + n + 1)
        } else {
            (4, 1, SLOT, 0, 0, rf + rf * n + n + rf)
        };
        assert_eq!(cost(d), expected, "roll forward, rf {rf}");

        // Log-less: READ slot (no matching log), CAS steal, READ the pointer
        // on every replica + the lock, READ the data + the lock again, WRITE
        // the copy on every replica + CAS the primary's pointer (the fence),
        // CAS the backups' pointers (replicated only), CAS the release.
        let (cluster, objs) = crashed(rf as u16, 1, marks(1, rf, false).rt1).await;
        let lock = held_by_dead(&cluster, &objs).await;
        let d = repair_cost(&cluster, objs[0], lock).await;
        assert_eq!(
            cost(d),
            (
                if rf == 1 { 6 } else { 7 },
                1 + rf + 1 + 1 + 1,
                SLOT + 8 * rf + 8 + 8 + 8,
                rf,
                8 * rf,
                1 + (rf - 1) + 1 + 1
            ),
            "log-less, rf {rf}"
        );
    }
}
