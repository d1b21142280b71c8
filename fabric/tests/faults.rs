//! Fault injection on every transport: crashes after N verbs and at named
//! points, fly WRITEs, clock skew and latency. What a faulty client did is
//! observed through a plain client of the same cluster.

mod common;

use std::time::Duration;

use common::*;
use fabric::{Batch, Client, FabricError, FaultPlan, FlyWrite, Outcome, Replica, VerbHandle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

on_every_transport!(
    crash_after_verbs_runs_exactly_the_first_k,
    crash_after_verbs_on_a_batch_boundary,
    crash_after_zero_verbs_runs_nothing,
    crash_after_verbs_counts_each_replica,
    an_armed_crash_fires_right_after_the_next_cas,
    an_armed_crash_waits_past_a_cas_that_failed,
    an_armed_hook_runs_once_after_the_next_batch_with_a_cas,
    named_crash_points,
    pause_stops_after_k_verbs_until_resumed,
    a_crash_in_a_paused_batch_fires_in_that_batch,
    fly_write_lands_after_later_batches,
    fly_write_with_zero_batches_lands_after_its_own_batch,
    fly_write_overwrites_a_later_write,
    fly_write_lands_after_a_crash,
    fly_write_from_an_old_epoch_is_fenced,
    clock_skew_shifts_now_ms,
    latency_does_not_change_results,
    no_faults_means_a_plain_client,
);

fn assert_crashed<T: std::fmt::Debug>(kind: Kind, what: &str, r: Result<T, FabricError>) -> String {
    match r {
        Err(FabricError::Crashed { reason }) => reason,
        other => panic!("[{kind}] {what}: expected Crashed, got {other:?}"),
    }
}

/// Writes `i` as one byte at `big(i)`, one WRITE verb per element of `is`.
fn push_writes(b: &mut Batch, is: impl IntoIterator<Item = u64>) {
    for i in is {
        b.write(big(i), &[i as u8 + 1]);
    }
}

async fn crash_after_verbs_runs_exactly_the_first_k(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        crash_after_verbs: Some(3),
        ..FaultPlan::default()
    });

    let mut b = Batch::new();
    push_writes(&mut b, 0..2);
    client.execute(&mut b).await.unwrap();
    assert_eq!(faults.crashed(), None, "[{kind}] two verbs in, not crashed yet");
    assert_eq!(faults.verbs_issued(), 2, "[{kind}]");
    client.crash_point("between batches").unwrap();

    b.clear();
    push_writes(&mut b, 2..5);
    let reason = assert_crashed(kind, "batch holding verb 3", client.execute(&mut b).await);
    assert!(
        reason.contains('3'),
        "[{kind}] reason names the verb count: {reason}"
    );
    assert_eq!(faults.crashed(), Some(reason), "[{kind}]");
    assert_eq!(
        faults.verbs_issued(),
        3,
        "[{kind}] exactly three verbs reached the nodes"
    );
    assert_eq!(
        read(&mut observer, big(0), 6).await,
        [1, 2, 3, 0, 0, 0],
        "[{kind}] the first three WRITEs landed, the rest did not"
    );
    assert_eq!(
        client.stats().round_trips,
        1,
        "[{kind}] the batch that ended in the crash is not counted"
    );

    // Dead for good: every batch, every crash point, every fork.
    b.clear();
    b.read(big(0), 1);
    assert_crashed(kind, "next batch", client.execute(&mut b).await);
    assert_crashed(
        kind,
        "crash point after the crash",
        client.crash_point("anything"),
    );
    let mut fork = client.fork();
    b.clear();
    push_writes(&mut b, 10..11);
    assert_crashed(kind, "fork of a crashed client", fork.execute(&mut b).await);
    assert_eq!(
        faults.verbs_issued(),
        3,
        "[{kind}] nothing issued after the crash"
    );
    assert_eq!(
        read(&mut observer, big(10), 1).await,
        [0],
        "[{kind}] fork's WRITE did not land"
    );
}

async fn crash_after_verbs_on_a_batch_boundary(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        crash_after_verbs: Some(4),
        ..FaultPlan::default()
    });
    let mut b = Batch::new();
    push_writes(&mut b, 0..2);
    client.execute(&mut b).await.unwrap();
    b.clear();
    push_writes(&mut b, 2..4);
    // The batch ends with the 4th verb: it runs whole, then the client dies
    // before it learns the outcome.
    assert_crashed(kind, "batch ending at verb 4", client.execute(&mut b).await);
    assert_eq!(faults.verbs_issued(), 4, "[{kind}]");
    assert_eq!(
        read(&mut observer, big(0), 5).await,
        [1, 2, 3, 4, 0],
        "[{kind}] all four landed"
    );
    b.clear();
    push_writes(&mut b, 4..5);
    assert_crashed(kind, "after the crash", client.execute(&mut b).await);
    assert_eq!(read(&mut observer, big(4), 1).await, [0], "[{kind}]");
}

async fn an_armed_crash_fires_right_after_the_next_cas(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan::default());
    let mut b = Batch::new();
    b.cas(big(0), 0, 7);
    client.execute(&mut b).await.unwrap();
    faults.arm_crash_after_next_cas();
    // WRITE, CAS, WRITE: the first two run, then the client dies.
    b.clear();
    b.write(big(8), &[1]);
    b.cas(big(16), 0, 9);
    b.write(big(24), &[1]);
    let reason = assert_crashed(kind, "batch holding the CAS", client.execute(&mut b).await);
    assert!(reason.contains('3'), "[{kind}] the 3rd verb overall: {reason}");
    assert_eq!(faults.verbs_issued(), 3, "[{kind}]");
    assert_first_bytes(
        kind,
        &mut observer,
        &[
            (0, 7, "the CAS before arming ran"),
            (8, 1, "the WRITE before the CAS ran"),
            (16, 9, "the CAS ran: a lock taken"),
            (24, 0, "nothing after it"),
        ],
    )
    .await;
}

/// Asserts the byte at `big(i)` for each `(i, byte, why)`.
async fn assert_first_bytes(kind: Kind, observer: &mut Client, expected: &[(u64, u8, &str)]) {
    for &(i, byte, why) in expected {
        assert_eq!(
            read(observer, big(i), 1).await,
            [byte],
            "[{kind}] big({i}): {why}"
        );
    }
}

/// A CAS that loses (a lock another client holds) takes nothing, so the
/// client must not die there: it would die holding nothing, and a chaos run
/// would find nothing to repair.
async fn an_armed_crash_waits_past_a_cas_that_failed(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan::default());
    let mut b = Batch::new();
    b.cas(big(0), 0, 7);
    client.execute(&mut b).await.unwrap();
    faults.arm_crash_after_next_cas();
    // A batch whose only CAS fails runs whole; the client lives.
    b.clear();
    let lost = b.cas(big(0), 0, 8);
    b.write(big(8), &[1]);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.old_value(lost), Ok(7), "[{kind}] the lock was taken");
    assert_eq!(faults.crashed(), None, "[{kind}] a failed CAS does not kill");
    // Failed CAS, WRITE, swapping CAS, WRITE: the first three run.
    b.clear();
    b.cas(big(0), 0, 8);
    b.write(big(16), &[1]);
    b.cas(big(24), 0, 9);
    b.write(big(32), &[1]);
    let reason = assert_crashed(
        kind,
        "batch holding a CAS that swaps",
        client.execute(&mut b).await,
    );
    assert!(
        reason.contains("after verb 6"),
        "[{kind}] the 6th verb overall: {reason}"
    );
    assert_eq!(faults.verbs_issued(), 6, "[{kind}]");
    assert_first_bytes(
        kind,
        &mut observer,
        &[
            (0, 7, "never swapped"),
            (16, 1, "the WRITE between the CASes ran"),
            (24, 9, "the lock taken"),
            (32, 0, "nothing after it"),
        ],
    )
    .await;
}

async fn an_armed_hook_runs_once_after_the_next_batch_with_a_cas(kind: Kind) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan::default());
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    faults.arm_after_next_cas(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let mut b = Batch::new();
    b.write(big(0), &[1]);
    b.cas(big(8), 1, 2);
    client.execute(&mut b).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0, "[{kind}] no CAS has swapped yet");
    b.clear();
    b.cas(big(8), 0, 5);
    b.write(big(16), &[2]);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "[{kind}] after the batch with the CAS"
    );
    assert_eq!(
        read(&mut observer, big(16), 1).await,
        [2],
        "[{kind}] the batch ran whole"
    );
    b.clear();
    b.cas(big(8), 5, 6);
    client.execute(&mut b).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "[{kind}] once");
    assert_eq!(faults.crashed(), None, "[{kind}] the client lives on");
}

async fn crash_after_zero_verbs_runs_nothing(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        crash_after_verbs: Some(0),
        ..FaultPlan::default()
    });
    // Crash points before the first batch are still fine.
    client.crash_point("start").unwrap();
    let mut b = Batch::new();
    b.on(Replica::All).write(big(0), b"never");
    b.faa(big(8), 1);
    assert_crashed(kind, "first batch", client.execute(&mut b).await);
    assert_eq!(faults.verbs_issued(), 0, "[{kind}]");
    for r in [Replica::Primary, Replica::Backup(0)] {
        assert_eq!(
            read_on(&mut observer, r, big(0), 16).await,
            [0; 16],
            "[{kind}] {r:?} untouched"
        );
    }
}

async fn crash_after_verbs_counts_each_replica(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        crash_after_verbs: Some(1),
        ..FaultPlan::default()
    });
    let mut b = Batch::new();
    b.on(Replica::All).write(big(0), b"half");
    assert_crashed(kind, "All WRITE", client.execute(&mut b).await);
    assert_eq!(faults.verbs_issued(), 1, "[{kind}]");
    assert_eq!(
        read_on(&mut observer, Replica::Primary, big(0), 4).await,
        b"half",
        "[{kind}] the primary's copy (verb 1) landed"
    );
    assert_eq!(
        read_on(&mut observer, Replica::Backup(0), big(0), 4).await,
        [0; 4],
        "[{kind}] the backup's copy (verb 2) did not"
    );
}

async fn named_crash_points(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        crash_points: vec!["after-lock".into(), "before-commit".into()],
        ..FaultPlan::default()
    });

    client.crash_point("before-lock").unwrap();
    let mut b = Batch::new();
    b.faa(big(0), 1);
    client.execute(&mut b).await.unwrap();
    client.crash_point("after-lock-and-more").unwrap();
    client.crash_point("AFTER-LOCK").unwrap();
    assert_eq!(faults.crashed(), None, "[{kind}] only exact names crash");

    let reason = assert_crashed(kind, "named point", client.crash_point("after-lock"));
    assert!(
        reason.contains("after-lock"),
        "[{kind}] reason names the point: {reason}"
    );
    assert_eq!(faults.crashed(), Some(reason), "[{kind}]");
    // Every later point, listed or not, and every batch fail.
    assert_crashed(
        kind,
        "unlisted point after the crash",
        client.crash_point("before-lock"),
    );
    assert_crashed(kind, "other listed point", client.crash_point("before-commit"));
    b.clear();
    b.faa(big(0), 1);
    assert_crashed(kind, "batch after the crash", client.execute(&mut b).await);
    assert_crashed(kind, "fork after the crash", client.fork().crash_point("x"));
    assert_eq!(faults.verbs_issued(), 1, "[{kind}]");
    assert_eq!(
        read_u64(&mut observer, big(0)).await,
        1,
        "[{kind}] only the pre-crash FAA ran"
    );
}

async fn fly_write_lands_after_later_batches(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        fly_write: Some(FlyWrite {
            nth_write: 2,
            after_batches: 2,
        }),
        ..FaultPlan::default()
    });
    write(&mut client, big(0), &1u64.to_le_bytes()).await;
    assert!(
        !faults.write_in_flight(),
        "[{kind}] the first WRITE is not the flying one"
    );
    assert_eq!(read_u64(&mut observer, big(0)).await, 1, "[{kind}]");

    // The 2nd WRITE is reported done, but a READ behind it sees the old value.
    let mut b = Batch::new();
    let w = b.write(big(0), &2u64.to_le_bytes());
    let r = b.read(big(0), 8);
    let faa = b.faa(big(8), 1);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.completion(w),
        Ok(Outcome::Done),
        "[{kind}] the flying WRITE reports done"
    );
    assert_eq!(
        b.read_result(r).unwrap(),
        1u64.to_le_bytes(),
        "[{kind}] READ in the same batch"
    );
    assert_eq!(b.old_value(faa), Ok(0), "[{kind}] other verbs of the batch ran");
    assert!(faults.write_in_flight(), "[{kind}]");
    assert_eq!(
        read_u64(&mut observer, big(0)).await,
        1,
        "[{kind}] not landed after its batch"
    );

    // One further batch: still flying.
    assert_eq!(
        read_u64(&mut client, big(0)).await,
        1,
        "[{kind}] READ one batch later"
    );
    assert!(faults.write_in_flight(), "[{kind}]");
    assert_eq!(read_u64(&mut observer, big(0)).await, 1, "[{kind}]");
    // The second further batch runs, then the WRITE lands.
    assert_eq!(
        read_u64(&mut client, big(0)).await,
        1,
        "[{kind}] READ in the landing batch"
    );
    assert!(
        !faults.write_in_flight(),
        "[{kind}] landed after two further batches"
    );
    assert_eq!(
        read_u64(&mut observer, big(0)).await,
        2,
        "[{kind}] observer sees it"
    );
    assert_eq!(
        read_u64(&mut client, big(0)).await,
        2,
        "[{kind}] the client sees it"
    );

    // Later WRITEs are not delayed.
    write(&mut client, big(0), &3u64.to_le_bytes()).await;
    assert_eq!(read_u64(&mut observer, big(0)).await, 3, "[{kind}]");
    // landing with nothing in flight is a no-op
    faults.land_flying_write().await.unwrap();
    assert_eq!(read_u64(&mut observer, big(0)).await, 3, "[{kind}]");
}

async fn fly_write_with_zero_batches_lands_after_its_own_batch(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        fly_write: Some(FlyWrite {
            nth_write: 1,
            after_batches: 0,
        }),
        ..FaultPlan::default()
    });
    let mut b = Batch::new();
    b.write(big(0), b"late");
    let r = b.read(big(0), 4);
    let w2 = b.write(big(8), b"second");
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.read_result(r).unwrap(),
        [0; 4],
        "[{kind}] later verbs of its batch pass it"
    );
    assert_eq!(b.completion(w2), Ok(Outcome::Done), "[{kind}]");
    assert!(
        !faults.write_in_flight(),
        "[{kind}] landed at the end of its own batch"
    );
    assert_eq!(read(&mut observer, big(0), 4).await, b"late", "[{kind}]");
    assert_eq!(read(&mut observer, big(8), 6).await, b"second", "[{kind}]");
}

async fn fly_write_overwrites_a_later_write(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut observer = c.client();
    let (mut client, _faults) = c.faulty_client(FaultPlan {
        fly_write: Some(FlyWrite {
            nth_write: 2,
            after_batches: 1,
        }),
        ..FaultPlan::default()
    });
    // An All WRITE is one WRITE per replica: the 2nd is the backup's copy.
    write_u64_all(&mut client, big(0), 1).await;
    assert_eq!(
        read_u64_on(&mut observer, Replica::Primary, big(0)).await,
        1,
        "[{kind}]"
    );
    assert_eq!(
        read_u64_on(&mut observer, Replica::Backup(0), big(0)).await,
        0,
        "[{kind}] backup copy flies"
    );
    // A newer WRITE to the same word runs first; the old one lands after it.
    write_u64_all(&mut client, big(0), 2).await;
    assert_eq!(
        read_u64_on(&mut observer, Replica::Primary, big(0)).await,
        2,
        "[{kind}]"
    );
    assert_eq!(
        read_u64_on(&mut observer, Replica::Backup(0), big(0)).await,
        1,
        "[{kind}] the delayed WRITE landed over the newer one"
    );
}

async fn fly_write_lands_after_a_crash(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        fly_write: Some(FlyWrite {
            nth_write: 1,
            after_batches: 100,
        }),
        crash_points: vec!["boom".into()],
        ..FaultPlan::default()
    });
    // The flying WRITE alone in its batch.
    write(&mut client, big(16), b"in the network").await;
    assert!(faults.write_in_flight(), "[{kind}]");
    assert_crashed(kind, "crash point", client.crash_point("boom"));
    let mut b = Batch::new();
    b.read(big(16), 14);
    assert_crashed(kind, "batch after the crash", client.execute(&mut b).await);
    assert!(
        faults.write_in_flight(),
        "[{kind}] a crash does not drop the flying WRITE"
    );
    assert_eq!(
        read(&mut observer, big(16), 14).await,
        [0; 14],
        "[{kind}] not landed yet"
    );

    faults.land_flying_write().await.unwrap();
    assert!(!faults.write_in_flight(), "[{kind}]");
    assert_eq!(
        read(&mut observer, big(16), 14).await,
        b"in the network",
        "[{kind}] landed after the crash"
    );
    assert!(faults.crashed().is_some(), "[{kind}] still crashed");
}

/// A delayed WRITE carries the epoch it was issued at: if the nodes moved to
/// a newer epoch meanwhile, it is fenced when it arrives. That is no error of
/// the batch it happens to land behind, which ran normally.
async fn fly_write_from_an_old_epoch_is_fenced(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let (mut client, faults) = c.faulty_client(FaultPlan {
        fly_write: Some(FlyWrite {
            nth_write: 1,
            after_batches: 1,
        }),
        ..FaultPlan::default()
    });
    write(&mut client, big(0), b"stale").await;
    assert!(faults.write_in_flight(), "[{kind}]");
    c.node(1).advance_epoch(2);
    client.set_map(c.map.with_epoch(2));

    let mut b = Batch::new();
    let faa = b.faa(big(8), 1);
    let r = client.execute(&mut b).await;
    assert!(
        r.is_ok(),
        "[{kind}] the landing batch ran and must report so: {r:?}"
    );
    assert_eq!(b.old_value(faa), Ok(0), "[{kind}]");
    assert!(
        !faults.write_in_flight(),
        "[{kind}] the WRITE arrived (and was refused)"
    );
    let mut observer = c.client_with_map(c.map.with_epoch(2));
    assert_eq!(
        read(&mut observer, big(0), 5).await,
        [0; 5],
        "[{kind}] the fenced WRITE did not land"
    );
    assert_eq!(
        read_u64(&mut observer, big(8)).await,
        1,
        "[{kind}] the FAA ran exactly once"
    );
}

async fn clock_skew_shifts_now_ms(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let plain = c.client();
    for skew in [3_600_000i64, -3_600_000, 1, 0] {
        let (skewed, _) = c.faulty_client(FaultPlan {
            clock_skew_ms: skew,
            ..FaultPlan::default()
        });
        let fork = skewed.fork();
        let lo = plain.now_ms().saturating_add_signed(skew);
        let s = skewed.now_ms();
        let f = fork.now_ms();
        let hi = plain.now_ms().saturating_add_signed(skew);
        assert!(
            lo <= s && s <= hi,
            "[{kind}] skew {skew}: {s} not in [{lo}, {hi}]"
        );
        assert!(
            lo <= f && f <= hi,
            "[{kind}] skew {skew}: fork's clock {f} not in [{lo}, {hi}]"
        );
        // The microsecond clock carries the same skew (still whole ms).
        let lo_us = plain.now_us().saturating_add_signed(skew * 1000);
        let s_us = skewed.now_us();
        let hi_us = plain.now_us().saturating_add_signed(skew * 1000);
        assert!(
            lo_us <= s_us && s_us <= hi_us,
            "[{kind}] skew {skew}: {s_us} us not in [{lo_us}, {hi_us}]"
        );
        assert!(
            s_us / 1000 >= lo && s_us / 1000 <= skewed.now_ms(),
            "[{kind}] skew {skew}: us vs ms"
        );
    }
}

/// A seeded mix of verbs through a client with per-round-trip latency gives
/// the same results as through a plain client on an identical cluster.
async fn latency_does_not_change_results(kind: Kind) {
    async fn run(client: &mut Client, seed: u64) -> Vec<String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut log = Vec::new();
        let mut b = Batch::new();
        for _ in 0..10 {
            b.clear();
            let mut hs: Vec<VerbHandle> = Vec::new();
            for _ in 0..rng.gen_range(1..8) {
                let off = rng.gen_range(0..32u64) * 8;
                let replica = if rng.gen_bool(0.5) {
                    Replica::All
                } else {
                    Replica::Primary
                };
                hs.push(match rng.gen_range(0..4) {
                    0 => b.on(replica).read(big(off), rng.gen_range(0..24)),
                    1 => b
                        .on(replica)
                        .write(big(off + rng.gen_range(0..8)), &rng.gen::<[u8; 5]>()),
                    2 => b.on(replica).cas(big(off), rng.gen_range(0..2), rng.gen()),
                    _ => b.on(replica).faa(big(off), rng.gen()),
                });
            }
            client.execute(&mut b).await.unwrap();
            for h in hs {
                for (i, c) in b.completions(h).iter().enumerate() {
                    log.push(match c {
                        Ok(Outcome::Read(_)) => format!("{:?}", b.read_result_of(h, i).unwrap()),
                        other => format!("{other:?}"),
                    });
                }
            }
        }
        log.push(format!("{:?}", read(client, big(0), 300).await));
        log
    }

    let seed = 0x5EED_0003;
    let plain_cluster = Cluster::build(kind, 2).await;
    let expected = run(&mut plain_cluster.client(), seed).await;
    let slow_cluster = Cluster::build(kind, 2).await;
    let (mut slow, _) = slow_cluster.faulty_client(FaultPlan {
        latency_per_round_trip: Duration::from_millis(1),
        ..FaultPlan::default()
    });
    let got = run(&mut slow, seed).await;
    assert_eq!(got, expected, "[{kind}] latency changed the results");
    assert_eq!(
        slow.stats().round_trips,
        11,
        "[{kind}] latency adds no round trips"
    );
}

async fn no_faults_means_a_plain_client(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let (mut client, faults) = c.faulty_client(FaultPlan::default());
    let mut b = Batch::new();
    for i in 0..50u64 {
        b.clear();
        b.on(Replica::All).write(big(8 * i), &i.to_le_bytes());
        b.faa(big(8 * i), 1);
        client.execute(&mut b).await.unwrap();
        client.crash_point("anywhere").unwrap();
    }
    assert_eq!(faults.verbs_issued(), 150, "[{kind}]");
    assert_eq!(faults.crashed(), None, "[{kind}]");
    assert!(!faults.write_in_flight(), "[{kind}]");
    let mut observer = c.client();
    assert_eq!(read_u64(&mut observer, big(8 * 49)).await, 50, "[{kind}]");
    assert_eq!(
        read_u64_on(&mut observer, Replica::Backup(0), big(8 * 49)).await,
        49,
        "[{kind}]"
    );
    // with_faults on a faulty transport replaces the plan, keeping the base.
    let (t, f2) = client.transport().clone().with_faults(FaultPlan {
        crash_points: vec!["x".into()],
        ..FaultPlan::default()
    });
    let mut again = Client::new(c.map.clone(), t);
    assert_eq!(
        read_u64(&mut again, big(0)).await,
        1,
        "[{kind}] re-wrapped transport reaches the nodes"
    );
    assert_crashed(kind, "new plan's crash point", again.crash_point("x"));
    assert!(
        f2.crashed().is_some() && faults.crashed().is_none(),
        "[{kind}] separate fault state"
    );
}

async fn pause_stops_after_k_verbs_until_resumed(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        pause_after_verbs: Some(2),
        ..FaultPlan::default()
    });
    let paused_client = tokio::spawn(async move {
        let mut b = Batch::new();
        push_writes(&mut b, 0..4);
        client.execute(&mut b).await.unwrap();
        b.clear();
        push_writes(&mut b, 4..5);
        client.execute(&mut b).await.unwrap();
        client.stats().round_trips
    });
    faults.paused().await;
    assert_eq!(
        read(&mut observer, big(0), 5).await,
        [1, 2, 0, 0, 0],
        "[{kind}] two verbs ran before the pause"
    );
    faults.resume();
    assert_eq!(
        paused_client.await.unwrap(),
        2,
        "[{kind}] a paused batch is still one round trip"
    );
    assert_eq!(
        read(&mut observer, big(0), 5).await,
        [1, 2, 3, 4, 5],
        "[{kind}] the client carried on after the resume"
    );
    assert_eq!(faults.crashed(), None, "[{kind}]");
}

async fn a_crash_in_a_paused_batch_fires_in_that_batch(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut observer = c.client();
    let (mut client, faults) = c.faulty_client(FaultPlan {
        pause_after_verbs: Some(2),
        crash_after_verbs: Some(3),
        ..FaultPlan::default()
    });
    let paused_client = tokio::spawn(async move {
        let mut b = Batch::new();
        push_writes(&mut b, 0..5);
        client.execute(&mut b).await
    });
    faults.paused().await;
    assert_eq!(read(&mut observer, big(0), 5).await, [1, 2, 0, 0, 0], "[{kind}]");
    faults.resume();
    assert_crashed(kind, "the batch holding verb 3", paused_client.await.unwrap());
    assert_eq!(faults.verbs_issued(), 3, "[{kind}]");
    assert_eq!(
        read(&mut observer, big(0), 5).await,
        [1, 2, 3, 0, 0],
        "[{kind}] verbs after the crash point did not run"
    );
}
