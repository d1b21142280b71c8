//! Verb semantics, replica routing, counters, error completions and epoch
//! fencing, on every transport (`local`, `shm`, `tcp`).

mod common;

use common::*;
use fabric::{
    Batch, Client, Completion, FabricError, GlobalAddr, LocalTransport, Outcome, Replica, ShmTransport,
    Stats, TcpTransport, VerbError, VerbHandle, BATCH_BYTES_MAX, OFFSET_MAX, VERBS_PER_BATCH_MAX,
    VERB_BYTES_MAX,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

on_every_transport!(
    cas_returns_the_old_value_and_swaps_only_on_match,
    faa_returns_the_old_value_and_wraps,
    read_after_write_across_batches,
    read_after_write_in_one_batch,
    verbs_to_one_node_run_in_batch_order,
    random_batches_match_a_sequential_model,
    replica_all_and_backup_routing,
    counters_count_one_round_trip_per_batch,
    unknown_region_is_an_error_completion,
    out_of_bounds_is_an_error_completion,
    misaligned_atomics_are_error_completions,
    wrong_access_key_is_an_error_completion,
    an_error_flushes_later_verbs_to_that_node_only,
    oversized_verbs_and_batches_are_refused,
    read_byte_limit_is_per_node,
    node_keeps_serving_after_errors,
    stale_epoch_is_fenced,
    partly_stale_batch_names_the_stale_node,
    a_fresh_transport_learns_the_new_epoch,
    concurrent_faa_from_forks_is_atomic,
    flush_completes,
);

/// Runs a batch holding one verb and returns that verb's completion.
async fn single(client: &mut Client, push: impl FnOnce(&mut Batch) -> VerbHandle) -> Completion {
    let mut b = Batch::new();
    let h = push(&mut b);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.completions(h).len(), 1);
    b.completion(h)
}

fn replicas_of(replicas: u16) -> Vec<Replica> {
    (0..replicas)
        .map(|i| {
            if i == 0 {
                Replica::Primary
            } else {
                Replica::Backup((i - 1) as u8)
            }
        })
        .collect()
}

async fn cas_returns_the_old_value_and_swaps_only_on_match(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let a = big(8);
    write(&mut client, a, &10u64.to_le_bytes()).await;

    // Mismatch: returns the current value, changes nothing.
    let mut b = Batch::new();
    let h = b.cas(a, 11, 12);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.old_value(h),
        Ok(10),
        "[{kind}] failed CAS returns the old value"
    );
    assert_eq!(
        b.cas_succeeded(h),
        Ok(false),
        "[{kind}] CAS with wrong expect must fail"
    );
    assert_eq!(
        read_u64(&mut client, a).await,
        10,
        "[{kind}] failed CAS must not write"
    );

    // Match: returns the old value, swaps.
    b.clear();
    let h = b.cas(a, 10, 20);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.old_value(h),
        Ok(10),
        "[{kind}] successful CAS returns the old value"
    );
    assert_eq!(
        b.cas_succeeded(h),
        Ok(true),
        "[{kind}] CAS with right expect must succeed"
    );
    assert_eq!(
        read_u64(&mut client, a).await,
        20,
        "[{kind}] successful CAS writes new"
    );

    // Full 64-bit values survive, and expect == new is a successful no-op.
    b.clear();
    let h1 = b.cas(a, 20, u64::MAX);
    let h2 = b.cas(a, u64::MAX, u64::MAX);
    let h3 = b.cas(a, u64::MAX, 0x8000_0000_0000_0001);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.old_value(h1), Ok(20), "[{kind}]");
    assert_eq!(b.old_value(h2), Ok(u64::MAX), "[{kind}]");
    assert_eq!(b.cas_succeeded(h2), Ok(true), "[{kind}]");
    assert_eq!(b.old_value(h3), Ok(u64::MAX), "[{kind}]");
    assert_eq!(b.cas_succeeded(h3), Ok(true), "[{kind}]");
    assert_eq!(
        read_u64(&mut client, a).await,
        0x8000_0000_0000_0001,
        "[{kind}] high bit kept"
    );

    // Neighbouring words are untouched.
    assert_eq!(
        read_u64(&mut client, big(0)).await,
        0,
        "[{kind}] word before the CAS target"
    );
    assert_eq!(
        read_u64(&mut client, big(16)).await,
        0,
        "[{kind}] word after the CAS target"
    );
}

async fn faa_returns_the_old_value_and_wraps(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let a = big(64);

    let old = single(&mut client, |b| b.faa(a, 5)).await;
    assert_eq!(old, Ok(Outcome::Old(0)), "[{kind}] FAA on zeroed memory");
    let old = single(&mut client, |b| b.faa(a, 7)).await;
    assert_eq!(
        old,
        Ok(Outcome::Old(5)),
        "[{kind}] FAA returns the value before the add"
    );
    // Adding u64::MAX is subtracting one.
    let old = single(&mut client, |b| b.faa(a, u64::MAX)).await;
    assert_eq!(old, Ok(Outcome::Old(12)), "[{kind}]");
    assert_eq!(
        read_u64(&mut client, a).await,
        11,
        "[{kind}] FAA of u64::MAX decrements"
    );

    // Wrapping past u64::MAX.
    write(&mut client, a, &(u64::MAX - 1).to_le_bytes()).await;
    let old = single(&mut client, |b| b.faa(a, 3)).await;
    assert_eq!(old, Ok(Outcome::Old(u64::MAX - 1)), "[{kind}]");
    assert_eq!(read_u64(&mut client, a).await, 1, "[{kind}] FAA wraps around");

    // FAA of zero is an atomic read.
    let old = single(&mut client, |b| b.faa(a, 0)).await;
    assert_eq!(old, Ok(Outcome::Old(1)), "[{kind}] FAA 0 reads");
    assert_eq!(
        read_u64(&mut client, a).await,
        1,
        "[{kind}] FAA 0 changes nothing"
    );
}

async fn read_after_write_across_batches(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let mut model = vec![0u8; BIG_SIZE as usize];
    let mut rng = StdRng::seed_from_u64(0x5EED_0001);
    for i in 0..150 {
        let off = rng.gen_range(0..BIG_SIZE);
        let len = rng.gen_range(0..=(BIG_SIZE - off).min(300)) as usize;
        let mut data = vec![0u8; len];
        rng.fill(&mut data[..]);
        write(&mut client, big(off), &data).await;
        model[off as usize..off as usize + len].copy_from_slice(&data);

        let got = read(&mut client, big(off), len as u32).await;
        assert_eq!(
            got, data,
            "[{kind}] step {i}: READ of what was just written at {off}+{len}"
        );

        let roff = rng.gen_range(0..BIG_SIZE);
        let rlen = rng.gen_range(0..=(BIG_SIZE - roff).min(500)) as usize;
        let got = read(&mut client, big(roff), rlen as u32).await;
        assert_eq!(
            got,
            model[roff as usize..roff as usize + rlen],
            "[{kind}] step {i}: READ at {roff}+{rlen}"
        );
    }
    // The whole region, and the very last bytes of it.
    assert_eq!(
        read(&mut client, big(0), BIG_SIZE as u32).await,
        model,
        "[{kind}] whole region"
    );
    write(&mut client, big(BIG_SIZE - 3), b"end").await;
    assert_eq!(
        read(&mut client, big(BIG_SIZE - 5), 5).await[2..],
        *b"end",
        "[{kind}] region tail"
    );
    // Zero-length verbs are fine, even at the end of the region.
    assert!(
        read(&mut client, big(BIG_SIZE), 0).await.is_empty(),
        "[{kind}] empty READ at end"
    );
    write(&mut client, big(BIG_SIZE), &[]).await;
}

async fn read_after_write_in_one_batch(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    write(&mut client, big(0), &[0xAA; 24]).await;

    let mut b = Batch::new();
    let before = b.read(big(0), 24);
    let w1 = b.write(big(3), b"thirteen byte");
    let mid = b.read(big(0), 24);
    let w2 = b.write(big(13), b"XYZ");
    let after = b.read(big(1), 19);
    client.execute(&mut b).await.unwrap();

    assert_eq!(
        b.read_result(before).unwrap(),
        [0xAA; 24],
        "[{kind}] READ before the WRITE"
    );
    b.done(w1).unwrap();
    b.done(w2).unwrap();
    let mut expect = [0xAAu8; 24];
    expect[3..16].copy_from_slice(b"thirteen byte");
    assert_eq!(
        b.read_result(mid).unwrap(),
        expect,
        "[{kind}] READ after the first WRITE"
    );
    expect[13..16].copy_from_slice(b"XYZ");
    assert_eq!(
        b.read_result(after).unwrap(),
        &expect[1..20],
        "[{kind}] READ after both WRITEs"
    );
    assert_eq!(
        read(&mut client, big(0), 24).await,
        expect,
        "[{kind}] next batch sees both WRITEs"
    );
}

async fn verbs_to_one_node_run_in_batch_order(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let a = big(128);

    // A CAS chain: each CAS expects what the previous one installed.
    let mut b = Batch::new();
    let chain: Vec<VerbHandle> = (0..10u64).map(|i| b.cas(a, i, i + 1)).collect();
    let miss = b.cas(a, 3, 100);
    let faa = b.faa(a, 5);
    let w = b.write(a.add(8), &7u64.to_le_bytes());
    let cas_after_write = b.cas(a.add(8), 7, 8);
    let rd = b.read(a, 16);
    client.execute(&mut b).await.unwrap();

    for (i, h) in chain.iter().enumerate() {
        assert_eq!(b.old_value(*h), Ok(i as u64), "[{kind}] CAS {i} of the chain");
        assert_eq!(b.cas_succeeded(*h), Ok(true), "[{kind}] CAS {i} of the chain");
    }
    assert_eq!(
        b.old_value(miss),
        Ok(10),
        "[{kind}] CAS after the chain sees its end"
    );
    assert_eq!(b.cas_succeeded(miss), Ok(false), "[{kind}]");
    assert_eq!(b.old_value(faa), Ok(10), "[{kind}] FAA after the chain");
    b.done(w).unwrap();
    assert_eq!(
        b.old_value(cas_after_write),
        Ok(7),
        "[{kind}] CAS sees the WRITE before it"
    );
    let mut expect = 15u64.to_le_bytes().to_vec();
    expect.extend_from_slice(&8u64.to_le_bytes());
    assert_eq!(
        b.read_result(rd).unwrap(),
        expect,
        "[{kind}] final READ sees every verb before it"
    );
}

#[derive(Debug)]
enum Expect {
    Bytes(Vec<u8>),
    Done,
    Old(u64),
}

fn model_word(m: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(m[off as usize..off as usize + 8].try_into().unwrap())
}

fn set_model_word(m: &mut [u8], off: u64, v: u64) {
    m[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
}

/// Seeded random batches of mixed verbs aimed at random replicas, checked
/// against a model that applies each node's verbs in batch order.
async fn random_batches_match_a_sequential_model(kind: Kind) {
    for replicas in [1u16, 2] {
        let c = Cluster::build(kind, replicas).await;
        let mut client = c.client();
        let mut model = vec![vec![0u8; BIG_SIZE as usize]; usize::from(replicas)];
        let mut rng = StdRng::seed_from_u64(0x5EED_0002 + u64::from(replicas));
        // Keep verbs in a small window so that they overlap often.
        const WINDOW: u64 = 256;
        let mut b = Batch::new();
        for round in 0..30 {
            b.clear();
            let mut expected: Vec<(VerbHandle, Vec<Expect>, String)> = Vec::new();
            for _ in 0..rng.gen_range(1..=40) {
                let (replica, targets): (Replica, Vec<usize>) = match rng.gen_range(0..replicas * 2) {
                    _ if replicas == 1 => (Replica::Primary, vec![0]),
                    0 => (Replica::Primary, vec![0]),
                    1 => (Replica::Backup(0), vec![1]),
                    _ => (Replica::All, vec![0, 1]),
                };
                let (h, exp, what) = match rng.gen_range(0..4) {
                    0 => {
                        let off = rng.gen_range(0..WINDOW);
                        let len = rng.gen_range(0..=40);
                        let h = b.on(replica).read(big(off), len);
                        let exp = targets
                            .iter()
                            .map(|&t| {
                                Expect::Bytes(
                                    model[t][off as usize..(off + u64::from(len)) as usize].to_vec(),
                                )
                            })
                            .collect();
                        (h, exp, format!("READ {off}+{len} on {replica:?}"))
                    }
                    1 => {
                        let off = rng.gen_range(0..WINDOW);
                        let mut data = vec![0u8; rng.gen_range(0..=40)];
                        rng.fill(&mut data[..]);
                        let h = b.on(replica).write(big(off), &data);
                        for &t in &targets {
                            model[t][off as usize..off as usize + data.len()].copy_from_slice(&data);
                        }
                        let what = format!("WRITE {off}+{} on {replica:?}", data.len());
                        (h, targets.iter().map(|_| Expect::Done).collect(), what)
                    }
                    2 => {
                        let off = rng.gen_range(0..WINDOW / 8) * 8;
                        // Half the time expect what the first target holds.
                        let expect = if rng.gen_bool(0.5) {
                            model_word(&model[targets[0]], off)
                        } else {
                            rng.gen_range(0..4)
                        };
                        let new = rng.gen();
                        let h = b.on(replica).cas(big(off), expect, new);
                        let mut exp = Vec::new();
                        for &t in &targets {
                            let old = model_word(&model[t], off);
                            if old == expect {
                                set_model_word(&mut model[t], off, new);
                            }
                            exp.push(Expect::Old(old));
                        }
                        (h, exp, format!("CAS {off} {expect}->{new} on {replica:?}"))
                    }
                    _ => {
                        let off = rng.gen_range(0..WINDOW / 8) * 8;
                        let add = rng.gen();
                        let h = b.on(replica).faa(big(off), add);
                        let mut exp = Vec::new();
                        for &t in &targets {
                            let old = model_word(&model[t], off);
                            set_model_word(&mut model[t], off, old.wrapping_add(add));
                            exp.push(Expect::Old(old));
                        }
                        (h, exp, format!("FAA {off} +{add} on {replica:?}"))
                    }
                };
                expected.push((h, exp, what));
            }
            client.execute(&mut b).await.unwrap();
            for (h, exp, what) in &expected {
                let got = b.completions(*h);
                assert_eq!(
                    got.len(),
                    exp.len(),
                    "[{kind}] {replicas} replicas, round {round}: {what}"
                );
                for (i, e) in exp.iter().enumerate() {
                    let ctx = format!("[{kind}] {replicas} replicas, round {round}: {what}, replica {i}");
                    match e {
                        Expect::Bytes(bytes) => assert_eq!(b.read_result_of(*h, i).unwrap(), bytes, "{ctx}"),
                        Expect::Done => assert_eq!(got[i], Ok(Outcome::Done), "{ctx}"),
                        Expect::Old(v) => assert_eq!(got[i], Ok(Outcome::Old(*v)), "{ctx}"),
                    }
                }
            }
        }
        for (t, replica) in replicas_of(replicas).into_iter().enumerate() {
            let got = read_on(&mut client, replica, big(0), WINDOW as u32 + 48).await;
            assert_eq!(
                got,
                model[t][..WINDOW as usize + 48],
                "[{kind}] final state of {replica:?}"
            );
        }
    }
}

async fn replica_all_and_backup_routing(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();

    // WRITE to All lands on both replicas.
    write_on(&mut client, Replica::All, big(0), b"on every replica").await;
    for r in [Replica::Primary, Replica::Backup(0)] {
        let got = read_on(&mut client, r, big(0), 16).await;
        assert_eq!(got, b"on every replica", "[{kind}] WRITE to All, read from {r:?}");
    }
    // WRITE to Backup(0) lands on the backup only.
    write_on(&mut client, Replica::Backup(0), big(32), b"backup only").await;
    assert_eq!(
        read_on(&mut client, Replica::Backup(0), big(32), 11).await,
        b"backup only",
        "[{kind}]"
    );
    assert_eq!(
        read_on(&mut client, Replica::Primary, big(32), 11).await,
        [0; 11],
        "[{kind}] WRITE to Backup(0) must not reach the primary"
    );
    // WRITE to Primary lands on the primary only.
    write_on(&mut client, Replica::Primary, big(64), b"primary only").await;
    assert_eq!(
        read_on(&mut client, Replica::Primary, big(64), 12).await,
        b"primary only",
        "[{kind}]"
    );
    assert_eq!(
        read_on(&mut client, Replica::Backup(0), big(64), 12).await,
        [0; 12],
        "[{kind}] WRITE to Primary must not reach the backup"
    );

    // READ from All: one completion per replica, primary first.
    let mut b = Batch::new();
    let h = b.on(Replica::All).read(big(32), 11);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.completions(h).len(), 2, "[{kind}]");
    assert_eq!(
        b.read_result_of(h, 0).unwrap(),
        [0; 11],
        "[{kind}] All READ, primary"
    );
    assert_eq!(
        b.read_result_of(h, 1).unwrap(),
        b"backup only",
        "[{kind}] All READ, backup"
    );

    // CAS and FAA on All: per-replica old values; success only if all swapped.
    write_on(&mut client, Replica::Primary, big(128), &1u64.to_le_bytes()).await;
    write_on(&mut client, Replica::Backup(0), big(128), &2u64.to_le_bytes()).await;
    b.clear();
    let cas = b.on(Replica::All).cas(big(128), 1, 50);
    let faa = b.on(Replica::All).faa(big(136), 3);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.completions(cas),
        [Ok(Outcome::Old(1)), Ok(Outcome::Old(2))],
        "[{kind}] All CAS per replica"
    );
    assert_eq!(
        b.cas_succeeded(cas),
        Ok(false),
        "[{kind}] All CAS failed on the backup"
    );
    assert_eq!(
        b.completions(faa),
        [Ok(Outcome::Old(0)), Ok(Outcome::Old(0))],
        "[{kind}]"
    );
    assert_eq!(
        read_u64_on(&mut client, Replica::Primary, big(128)).await,
        50,
        "[{kind}]"
    );
    assert_eq!(
        read_u64_on(&mut client, Replica::Backup(0), big(128)).await,
        2,
        "[{kind}]"
    );
    for r in [Replica::Primary, Replica::Backup(0)] {
        assert_eq!(
            read_u64_on(&mut client, r, big(136)).await,
            3,
            "[{kind}] All FAA on {r:?}"
        );
    }
    b.clear();
    let cas = b.on(Replica::Backup(0)).cas(big(128), 2, 50);
    let all = b.on(Replica::All).cas(big(128), 50, 60);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.cas_succeeded(cas), Ok(true), "[{kind}]");
    assert_eq!(
        b.cas_succeeded(all),
        Ok(true),
        "[{kind}] All CAS succeeds when every replica matches"
    );

    // Replicas that do not exist are a routing error: nothing is sent.
    let before = client.stats();
    b.clear();
    b.on(Replica::Backup(1)).read(big(0), 8);
    let r = client.execute(&mut b).await;
    assert!(
        matches!(
            r,
            Err(FabricError::NoSuchReplica {
                region: BIG,
                replica: Replica::Backup(1)
            })
        ),
        "[{kind}] Backup(1) of 2 replicas: {r:?}"
    );
    assert_eq!(
        client.stats(),
        before,
        "[{kind}] a routing error costs no round trip"
    );

    let single_replica = Cluster::build(kind, 1).await;
    let mut client = single_replica.client();
    b.clear();
    b.on(Replica::Backup(0)).write(big(0), b"x");
    let r = client.execute(&mut b).await;
    assert!(
        matches!(r, Err(FabricError::NoSuchReplica { .. })),
        "[{kind}] Backup(0) of 1 replica: {r:?}"
    );
    b.clear();
    let h = b.on(Replica::All).write(big(0), b"x");
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.completions(h).len(),
        1,
        "[{kind}] All on one replica is one verb"
    );
}

async fn counters_count_one_round_trip_per_batch(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    assert_eq!(
        client.stats(),
        Stats::default(),
        "[{kind}] a new client has zero counters"
    );

    // An empty batch costs nothing.
    let mut b = Batch::new();
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        client.stats().round_trips,
        0,
        "[{kind}] empty batch = zero round trips"
    );

    b.read(big(0), 10);
    b.on(Replica::All).write(big(16), &[1; 7]);
    b.on(Replica::All).read(big(16), 7);
    b.cas(big(32), 0, 1);
    b.on(Replica::Backup(0)).faa(big(40), 1);
    b.on(Replica::All).cas(big(48), 0, 2);
    b.flush(big(0), 8);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.ops().len(),
        10,
        "[{kind}] All verbs expand to one op per replica"
    );
    let expect = Stats {
        round_trips: 1,
        reads: 3,
        writes: 2,
        cas: 3,
        faa: 1,
        flushes: 1,
        bytes_read: 10 + 2 * 7,
        bytes_written: 2 * 7,
        verb_errors: 0,
    };
    assert_eq!(client.stats(), expect, "[{kind}] one multi-node batch");
    assert_eq!(client.stats().verbs(), 10, "[{kind}]");

    // Re-executing a batch is another round trip; clearing it makes it empty.
    client.execute(&mut b).await.unwrap();
    assert_eq!(client.stats().round_trips, 2, "[{kind}]");
    b.clear();
    assert!(b.is_empty());
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        client.stats().round_trips,
        2,
        "[{kind}] cleared batch = zero round trips"
    );

    // Each batch is one round trip however many verbs it holds.
    let before = client.stats();
    for n in [1usize, 2, 64] {
        b.clear();
        for i in 0..n {
            b.faa(big(8 * (i as u64 % 16)), 1);
        }
        client.execute(&mut b).await.unwrap();
    }
    let delta = client.stats() - before;
    assert_eq!(delta.round_trips, 3, "[{kind}] three batches");
    assert_eq!(delta.faa, 67, "[{kind}]");
    assert_eq!(delta.verbs(), 67, "[{kind}]");

    // Error completions are counted; flushed verbs are errors too.
    let before = client.stats();
    b.clear();
    b.cas(big(4), 0, 1);
    b.read(big(0), 8);
    b.write(big(0), b"abc");
    b.on(Replica::Backup(0)).read(big(0), 8);
    client.execute(&mut b).await.unwrap();
    let delta = client.stats() - before;
    assert_eq!(delta.round_trips, 1, "[{kind}]");
    assert_eq!(
        delta.verb_errors, 3,
        "[{kind}] one misaligned CAS and two flushed verbs"
    );
    assert_eq!((delta.reads, delta.writes, delta.cas), (2, 1, 1), "[{kind}]");
    assert_eq!((delta.bytes_read, delta.bytes_written), (16, 3), "[{kind}]");

    // A batch the client cannot route costs nothing.
    let before = client.stats();
    b.clear();
    b.read(GlobalAddr::new(MISSING, 0), 8);
    let r = client.execute(&mut b).await;
    assert!(
        matches!(r, Err(FabricError::UnknownRegion { region: MISSING })),
        "[{kind}] {r:?}"
    );
    assert_eq!(
        client.stats(),
        before,
        "[{kind}] unroutable batch = zero round trips"
    );

    // Forks count separately.
    let mut fork = client.fork();
    assert_eq!(fork.stats(), Stats::default(), "[{kind}] a fork starts at zero");
    read(&mut fork, big(0), 3).await;
    assert_eq!(fork.stats().round_trips, 1, "[{kind}]");
    assert_eq!(fork.stats().bytes_read, 3, "[{kind}]");
    assert_eq!(
        client.stats(),
        before,
        "[{kind}] the fork's verbs are not the parent's"
    );
}

async fn unknown_region_is_an_error_completion(kind: Kind) {
    for replicas in [1u16, 2] {
        let c = Cluster::build(kind, replicas).await;
        let mut client = c.client_with_map(map_with_missing_region(&c.map));
        write_u64_all(&mut client, big(0), 1).await;

        let mut b = Batch::new();
        let bad = b.read(GlobalAddr::new(MISSING, 0), 8);
        let w = b.write(big(0), &2u64.to_le_bytes());
        let other = b.on(Replica::All).faa(big(8), 1);
        client.execute(&mut b).await.unwrap();
        assert_eq!(
            b.completion(bad),
            Err(VerbError::UnknownRegion { region: MISSING }),
            "[{kind}] {replicas} replicas: verb to a region the node does not hold"
        );
        assert_eq!(
            b.done(w),
            Err(VerbError::Flushed),
            "[{kind}] later verb to the same node"
        );
        assert_eq!(
            b.completions(other)[0],
            Err(VerbError::Flushed),
            "[{kind}] All verb, primary"
        );
        if replicas == 2 {
            assert_eq!(
                b.completions(other)[1],
                Ok(Outcome::Old(0)),
                "[{kind}] All verb, other node runs"
            );
        }
        assert_eq!(
            read_u64(&mut client, big(0)).await,
            1,
            "[{kind}] flushed WRITE had no effect"
        );
        assert_eq!(
            read_u64(&mut client, big(8)).await,
            0,
            "[{kind}] flushed FAA had no effect"
        );
        if replicas == 2 {
            assert_eq!(
                read_u64_on(&mut client, Replica::Backup(0), big(8)).await,
                1,
                "[{kind}]"
            );
            let r = single(&mut client, |b| {
                b.on(Replica::Backup(0)).read(GlobalAddr::new(MISSING, 8), 8)
            })
            .await;
            assert_eq!(
                r,
                Err(VerbError::UnknownRegion { region: MISSING }),
                "[{kind}] on the backup"
            );
        }
    }
}

async fn out_of_bounds_is_an_error_completion(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let oob = |offset, len| {
        Err(VerbError::OutOfBounds {
            offset,
            len,
            size: SMALL_SIZE,
        })
    };

    let r = single(&mut client, |b| b.read(small(60), 5)).await;
    assert_eq!(r, oob(60, 5), "[{kind}] READ one byte past the end");
    let r = single(&mut client, |b| b.write(small(SMALL_SIZE), b"x")).await;
    assert_eq!(r, oob(SMALL_SIZE, 1), "[{kind}] WRITE at the end");
    let r = single(&mut client, |b| b.write(small(1), &[7; SMALL_SIZE as usize])).await;
    assert_eq!(
        r,
        oob(1, SMALL_SIZE),
        "[{kind}] WRITE as long as the region, shifted"
    );
    let r = single(&mut client, |b| b.cas(small(SMALL_SIZE), 0, 1)).await;
    assert_eq!(r, oob(SMALL_SIZE, 8), "[{kind}] CAS past the end");
    let r = single(&mut client, |b| b.faa(small(SMALL_SIZE + 8), 1)).await;
    assert_eq!(r, oob(SMALL_SIZE + 8, 8), "[{kind}] FAA past the end");
    let r = single(&mut client, |b| b.flush(small(8), SMALL_SIZE as u32)).await;
    assert_eq!(r, oob(8, SMALL_SIZE), "[{kind}] FLUSH past the end");
    let r = single(&mut client, |b| b.read(small(OFFSET_MAX), 8)).await;
    assert_eq!(r, oob(OFFSET_MAX, 8), "[{kind}] the largest offset");
    // The same offsets are fine in the big region (bounds are per region).
    let r = single(&mut client, |b| b.read(big(60), 5)).await;
    assert!(r.is_ok(), "[{kind}] in bounds in the big region: {r:?}");

    // Nothing was written; the exact extremes are in bounds.
    assert_eq!(
        read(&mut client, small(0), SMALL_SIZE as u32).await,
        [0; SMALL_SIZE as usize],
        "[{kind}]"
    );
    let r = single(&mut client, |b| b.faa(small(SMALL_SIZE - 8), 1)).await;
    assert_eq!(r, Ok(Outcome::Old(0)), "[{kind}] FAA on the last word");
    let r = single(&mut client, |b| b.write(small(SMALL_SIZE - 1), b"z")).await;
    assert_eq!(r, Ok(Outcome::Done), "[{kind}] WRITE of the last byte");
    assert_eq!(
        read(&mut client, small(SMALL_SIZE - 8), 8).await,
        [1, 0, 0, 0, 0, 0, 0, b'z'],
        "[{kind}]"
    );
}

async fn misaligned_atomics_are_error_completions(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let pattern: Vec<u8> = (1..=32).collect();
    write(&mut client, big(0), &pattern).await;

    for off in [1u64, 4, 7, 12, 23] {
        let r = single(&mut client, |b| b.cas(big(off), 0, 1)).await;
        assert_eq!(
            r,
            Err(VerbError::Misaligned { offset: off }),
            "[{kind}] CAS at {off}"
        );
        let expect = u64::from_le_bytes(pattern[off as usize..off as usize + 8].try_into().unwrap());
        let r = single(&mut client, |b| b.cas(big(off), expect, 1)).await;
        assert_eq!(
            r,
            Err(VerbError::Misaligned { offset: off }),
            "[{kind}] CAS at {off}, matching"
        );
        let r = single(&mut client, |b| b.faa(big(off), 1)).await;
        assert_eq!(
            r,
            Err(VerbError::Misaligned { offset: off }),
            "[{kind}] FAA at {off}"
        );
    }
    assert_eq!(
        read(&mut client, big(0), 32).await,
        pattern,
        "[{kind}] misaligned atomics wrote nothing"
    );
    // READ and WRITE have no alignment requirement.
    let r = single(&mut client, |b| b.read(big(3), 8)).await;
    assert!(r.is_ok(), "[{kind}] unaligned READ: {r:?}");
}

async fn wrong_access_key_is_an_error_completion(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut good = c.client();
    write_u64_all(&mut good, big(0), 42).await;
    let mut bad = c.client_with_map(map_with_wrong_key(&c.map, BIG));

    for replica in [Replica::Primary, Replica::Backup(0)] {
        let r = single(&mut bad, |b| b.on(replica).read(big(0), 8)).await;
        assert_eq!(
            r,
            Err(VerbError::BadKey),
            "[{kind}] READ with a wrong key on {replica:?}"
        );
        let r = single(&mut bad, |b| b.on(replica).write(big(0), &[0xFF; 8])).await;
        assert_eq!(
            r,
            Err(VerbError::BadKey),
            "[{kind}] WRITE with a wrong key on {replica:?}"
        );
        let r = single(&mut bad, |b| b.on(replica).cas(big(0), 42, 1)).await;
        assert_eq!(
            r,
            Err(VerbError::BadKey),
            "[{kind}] CAS with a wrong key on {replica:?}"
        );
        let r = single(&mut bad, |b| b.on(replica).faa(big(0), 1)).await;
        assert_eq!(
            r,
            Err(VerbError::BadKey),
            "[{kind}] FAA with a wrong key on {replica:?}"
        );
    }
    for replica in [Replica::Primary, Replica::Backup(0)] {
        assert_eq!(
            read_u64_on(&mut good, replica, big(0)).await,
            42,
            "[{kind}] wrong key wrote nothing"
        );
    }
    // The other region's key is still right in that map.
    let r = single(&mut bad, |b| b.write(small(0), b"ok")).await;
    assert_eq!(r, Ok(Outcome::Done), "[{kind}] region with the right key");
    assert_eq!(read(&mut good, small(0), 2).await, b"ok", "[{kind}]");
}

async fn an_error_flushes_later_verbs_to_that_node_only(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    write_u64_all(&mut client, big(8), 100).await;

    let mut b = Batch::new();
    let w_before = b.write(big(0), b"ran");
    let bad = b.cas(big(3), 0, 1);
    let w_after = b.write(big(8), &5u64.to_le_bytes());
    let r_after = b.read(big(0), 3);
    let faa_after = b.faa(big(16), 1);
    let backup_w = b.on(Replica::Backup(0)).write(big(8), &6u64.to_le_bytes());
    let backup_faa = b.on(Replica::Backup(0)).faa(big(16), 2);
    let all = b.on(Replica::All).read(big(8), 8);
    client.execute(&mut b).await.unwrap();

    assert_eq!(
        b.completion(w_before),
        Ok(Outcome::Done),
        "[{kind}] verb before the error ran"
    );
    assert_eq!(
        b.completion(bad),
        Err(VerbError::Misaligned { offset: 3 }),
        "[{kind}]"
    );
    for (h, what) in [(w_after, "WRITE"), (r_after, "READ"), (faa_after, "FAA")] {
        assert_eq!(
            b.completion(h),
            Err(VerbError::Flushed),
            "[{kind}] {what} after the error"
        );
    }
    assert_eq!(
        b.completion(backup_w),
        Ok(Outcome::Done),
        "[{kind}] other node keeps running"
    );
    assert_eq!(
        b.completion(backup_faa),
        Ok(Outcome::Old(0)),
        "[{kind}] other node keeps running"
    );
    assert_eq!(
        b.completions(all)[0],
        Err(VerbError::Flushed),
        "[{kind}] All READ, failed node"
    );
    assert_eq!(
        b.read_result_of(all, 1).unwrap(),
        6u64.to_le_bytes(),
        "[{kind}] All READ, other node"
    );

    assert_eq!(
        read(&mut client, big(0), 3).await,
        b"ran",
        "[{kind}] pre-error WRITE landed"
    );
    assert_eq!(
        read_u64(&mut client, big(8)).await,
        100,
        "[{kind}] flushed WRITE did not land"
    );
    assert_eq!(
        read_u64(&mut client, big(16)).await,
        0,
        "[{kind}] flushed FAA did not run"
    );
    assert_eq!(
        read_u64_on(&mut client, Replica::Backup(0), big(16)).await,
        2,
        "[{kind}]"
    );

    // The flush lasts for one batch only.
    let r = single(&mut client, |b| b.faa(big(16), 1)).await;
    assert_eq!(r, Ok(Outcome::Old(0)), "[{kind}] the next batch runs normally");
}

async fn oversized_verbs_and_batches_are_refused(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();

    // A single READ longer than the per-verb limit is an error completion.
    let r = single(&mut client, |b| b.read(big(0), VERB_BYTES_MAX + 1)).await;
    assert_eq!(
        r,
        Err(VerbError::TooLarge {
            len: u64::from(VERB_BYTES_MAX) + 1
        }),
        "[{kind}]"
    );

    // READs summing past the batch byte limit: the one crossing it fails.
    let mut b = Batch::new();
    let n = (BATCH_BYTES_MAX / BIG_SIZE) as usize;
    let hs: Vec<VerbHandle> = (0..=n).map(|_| b.read(big(0), BIG_SIZE as u32)).collect();
    client.execute(&mut b).await.unwrap();
    for h in &hs[..n] {
        b.done(*h)
            .unwrap_or_else(|e| panic!("[{kind}] READs within the batch byte limit: {e}"));
    }
    assert!(
        matches!(b.completion(hs[n]), Err(VerbError::TooLarge { .. })),
        "[{kind}] READ past the batch byte limit: {:?}",
        b.completion(hs[n])
    );

    // Too much WRITE data or too many verbs: refused before anything is sent.
    let before = client.stats();
    b.clear();
    b.write(big(0), &vec![0; BATCH_BYTES_MAX as usize + 1]);
    let r = client.execute(&mut b).await;
    assert!(
        matches!(r, Err(FabricError::BatchTooLarge { .. })),
        "[{kind}] {r:?}"
    );
    b.clear();
    for _ in 0..=VERBS_PER_BATCH_MAX {
        b.faa(big(0), 1);
    }
    let r = client.execute(&mut b).await;
    assert!(
        matches!(r, Err(FabricError::BatchTooLarge { .. })),
        "[{kind}] {r:?}"
    );
    // The limit counts verbs after All expansion.
    b.clear();
    for _ in 0..VERBS_PER_BATCH_MAX / 2 + 1 {
        b.on(Replica::All).faa(big(0), 1);
    }
    let r = client.execute(&mut b).await;
    assert!(
        matches!(r, Err(FabricError::BatchTooLarge { .. })),
        "[{kind}] All expansion: {r:?}"
    );
    assert_eq!(
        client.stats(),
        before,
        "[{kind}] refused batches cost no round trip"
    );
    assert_eq!(
        read_u64(&mut client, big(0)).await,
        0,
        "[{kind}] refused batches ran nothing"
    );

    // Exactly at the limits is fine.
    b.clear();
    for _ in 0..VERBS_PER_BATCH_MAX / 2 {
        b.on(Replica::All).faa(big(0), 1);
    }
    client.execute(&mut b).await.unwrap();
    for r in [Replica::Primary, Replica::Backup(0)] {
        let v = read_u64_on(&mut client, r, big(0)).await;
        assert_eq!(
            v,
            VERBS_PER_BATCH_MAX as u64 / 2,
            "[{kind}] a full batch on {r:?}"
        );
    }
}

/// The READ byte budget of a batch bounds what one memory node produces for
/// it: a batch may read up to the limit from each node it touches, the same
/// on every transport.
async fn read_byte_limit_is_per_node(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    let per_node = (BATCH_BYTES_MAX / BIG_SIZE) as usize;
    let mut b = Batch::new();
    let hs: Vec<VerbHandle> = (0..per_node)
        .map(|_| b.on(Replica::All).read(big(0), BIG_SIZE as u32))
        .collect();
    client.execute(&mut b).await.unwrap();
    for (i, h) in hs.iter().enumerate() {
        assert_eq!(
            b.done(*h),
            Ok(()),
            "[{kind}] All READ {i}: each node is within its limit"
        );
    }
    assert_eq!(client.stats().bytes_read, 2 * BATCH_BYTES_MAX, "[{kind}]");
    // One more READ on each node crosses that node's limit.
    let extra = b.on(Replica::Backup(0)).read(big(0), 8);
    let primary = b.read(big(0), 8);
    client.execute(&mut b).await.unwrap();
    assert!(
        matches!(b.completion(extra), Err(VerbError::TooLarge { .. })),
        "[{kind}] {:?}",
        b.completion(extra)
    );
    assert!(
        matches!(b.completion(primary), Err(VerbError::TooLarge { .. })),
        "[{kind}] the primary is past its limit too: {:?}",
        b.completion(primary)
    );
}

async fn node_keeps_serving_after_errors(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let mut bad_key = c.client_with_map(map_with_wrong_key(&c.map, BIG));
    let mut bad_region = c.client_with_map(map_with_missing_region(&c.map));
    for i in 0..20u64 {
        let r = single(&mut client, |b| b.cas(big(5), 0, 1)).await;
        assert!(r.is_err(), "[{kind}]");
        let r = single(&mut client, |b| b.read(small(SMALL_SIZE), 1)).await;
        assert!(r.is_err(), "[{kind}]");
        let r = single(&mut bad_key, |b| b.faa(big(0), 1)).await;
        assert_eq!(r, Err(VerbError::BadKey), "[{kind}]");
        let r = single(&mut bad_region, |b| b.faa(GlobalAddr::new(MISSING, 0), 1)).await;
        assert!(r.is_err(), "[{kind}]");
        let r = single(&mut client, |b| b.faa(big(0), 1)).await;
        assert_eq!(
            r,
            Ok(Outcome::Old(i)),
            "[{kind}] round {i}: a good verb after bad ones"
        );
    }
}

async fn stale_epoch_is_fenced(kind: Kind) {
    for replicas in [1u16, 2] {
        let c = Cluster::build(kind, replicas).await;
        let reps = replicas_of(replicas);
        let mut old = c.client();
        assert_eq!(old.map().epoch(), 1, "[{kind}] fresh nodes are at epoch 1");
        write_u64_all(&mut old, big(0), 111).await;
        write_u64_all(&mut old, big(8), 5).await;

        for n in &c.nodes {
            assert_eq!(n.advance_epoch(5), 5, "[{kind}]");
            assert_eq!(n.advance_epoch(3), 5, "[{kind}] the epoch never goes back");
            assert_eq!(n.epoch(), 5, "[{kind}]");
        }

        let before = old.stats();
        let mut b = Batch::new();
        b.on(Replica::All).write(big(0), &222u64.to_le_bytes());
        b.on(Replica::All).faa(big(8), 1);
        b.on(Replica::All).cas(big(16), 0, 9);
        match old.execute(&mut b).await {
            Err(FabricError::StaleEpoch {
                node,
                client_epoch,
                node_epoch,
            }) => {
                assert!((1..=replicas).contains(&node), "[{kind}] stale node {node}");
                assert_eq!((client_epoch, node_epoch), (1, 5), "[{kind}]");
            }
            other => panic!("[{kind}] {replicas} replicas: expected StaleEpoch, got {other:?}"),
        }
        assert_eq!(
            (old.stats() - before).round_trips,
            1,
            "[{kind}] a fenced batch is still a round trip"
        );

        // Nothing of the fenced batch ran, on any replica.
        let mut fresh = c.client_with_map(c.map.with_epoch(5));
        for &r in &reps {
            assert_eq!(
                read_u64_on(&mut fresh, r, big(0)).await,
                111,
                "[{kind}] fenced WRITE on {r:?}"
            );
            assert_eq!(
                read_u64_on(&mut fresh, r, big(8)).await,
                5,
                "[{kind}] fenced FAA on {r:?}"
            );
            assert_eq!(
                read_u64_on(&mut fresh, r, big(16)).await,
                0,
                "[{kind}] fenced CAS on {r:?}"
            );
        }
        // The client at the new epoch works.
        write_u64_all(&mut fresh, big(0), 333).await;
        for &r in &reps {
            assert_eq!(
                read_u64_on(&mut fresh, r, big(0)).await,
                333,
                "[{kind}] new-epoch WRITE"
            );
        }
        // The old client stays fenced, even for a READ, until it takes the new map.
        let mut b = Batch::new();
        b.read(big(0), 8);
        let r = old.execute(&mut b).await;
        assert!(
            matches!(r, Err(FabricError::StaleEpoch { .. })),
            "[{kind}] stale READ: {r:?}"
        );
        old.set_map(c.map.with_epoch(5));
        assert_eq!(read_u64(&mut old, big(0)).await, 333, "[{kind}] refreshed client");
        // A map ahead of the node is accepted.
        let mut ahead = c.client_with_map(c.map.with_epoch(9));
        assert_eq!(
            read_u64(&mut ahead, big(0)).await,
            333,
            "[{kind}] client ahead of the node"
        );
    }
}

async fn partly_stale_batch_names_the_stale_node(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    c.node(2).advance_epoch(2);

    // Batches that touch only the primary still run.
    let r = single(&mut client, |b| b.faa(big(0), 1)).await;
    assert_eq!(r, Ok(Outcome::Old(0)), "[{kind}] node 1 is not fenced");
    // Batches that touch the backup are fenced by it.
    for replica in [Replica::Backup(0), Replica::All] {
        let mut b = Batch::new();
        b.on(replica).write(big(8), b"fenced");
        let r = client.execute(&mut b).await;
        assert!(
            matches!(
                r,
                Err(FabricError::StaleEpoch {
                    node: 2,
                    client_epoch: 1,
                    node_epoch: 2
                })
            ),
            "[{kind}] {replica:?}: {r:?}"
        );
    }
    let mut fresh = c.client_with_map(c.map.with_epoch(2));
    let got = read_on(&mut fresh, Replica::Backup(0), big(8), 6).await;
    assert_eq!(got, [0; 6], "[{kind}] the stale node ran nothing");
}

async fn a_fresh_transport_learns_the_new_epoch(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    for n in &c.nodes {
        n.advance_epoch(7);
    }
    let endpoints: Vec<String> = c.map.nodes().iter().map(|n| n.endpoint.clone()).collect();
    let (transport, map): (fabric::AnyTransport, _) = match kind {
        Kind::Local => {
            for n in &c.nodes {
                assert_eq!(n.descriptor().epoch, 7, "[{kind}]");
            }
            (LocalTransport::new(c.nodes.clone()).into(), c.map.with_epoch(7))
        }
        Kind::Shm => {
            let paths: Vec<std::path::PathBuf> = endpoints.iter().map(Into::into).collect();
            let (t, map) = ShmTransport::attach(&paths).unwrap();
            assert_eq!(
                t.node(2).unwrap().epoch(),
                7,
                "[{kind}] the attached image shows the epoch"
            );
            (t.into(), map)
        }
        Kind::Tcp => {
            let (t, map) = TcpTransport::discover(&endpoints).await.unwrap();
            // connect_map reaches the same nodes from a map alone.
            let again = TcpTransport::connect_map(&map).await.unwrap();
            let mut other = Client::new(map.clone(), again.into());
            write_u64_all(&mut other, big(0), 1).await;
            (t.into(), map)
        }
    };
    assert_eq!(
        map.epoch(),
        7,
        "[{kind}] a transport built now gets the nodes' epoch"
    );
    assert_eq!(
        map.regions(),
        c.map.regions(),
        "[{kind}] same regions, keys and replica order"
    );
    let mut client = Client::new(map, transport);
    let mut b = Batch::new();
    let h = b.on(Replica::All).faa(big(24), 1);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.completions(h),
        [Ok(Outcome::Old(0)), Ok(Outcome::Old(0))],
        "[{kind}]"
    );
}

async fn concurrent_faa_from_forks_is_atomic(kind: Kind) {
    const TASKS: u64 = 4;
    const PER_TASK: u64 = 50;
    let c = Cluster::build(kind, 1).await;
    let client = c.client();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mut fork = client.fork();
        tasks.push(tokio::spawn(async move {
            let mut olds = Vec::new();
            let mut b = Batch::new();
            for _ in 0..PER_TASK {
                b.clear();
                let h = b.faa(big(0), 1);
                b.write(big(8 + 8 * (olds.len() as u64 % 8)), b"x");
                fork.execute(&mut b).await.unwrap();
                olds.push(b.old_value(h).unwrap());
            }
            (olds, fork.stats())
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let (olds, stats) = t.await.unwrap();
        assert_eq!(
            stats.round_trips, PER_TASK,
            "[{kind}] each fork counts its own round trips"
        );
        all.extend(olds);
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..TASKS * PER_TASK).collect::<Vec<_>>(),
        "[{kind}] every FAA saw a distinct value"
    );
    let mut client = client;
    assert_eq!(read_u64(&mut client, big(0)).await, TASKS * PER_TASK, "[{kind}]");
}

async fn flush_completes(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    let mut b = Batch::new();
    b.on(Replica::All).write(big(100), b"durable?");
    let f = b.on(Replica::All).flush(big(100), 8);
    let whole = b.flush(big(0), BIG_SIZE as u32);
    let empty = b.flush(big(BIG_SIZE), 0);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.completions(f),
        [Ok(Outcome::Done), Ok(Outcome::Done)],
        "[{kind}]"
    );
    assert_eq!(
        b.completion(whole),
        Ok(Outcome::Done),
        "[{kind}] FLUSH of a whole region"
    );
    assert_eq!(
        b.completion(empty),
        Ok(Outcome::Done),
        "[{kind}] empty FLUSH at the end"
    );
    assert_eq!(client.stats().flushes, 4, "[{kind}]");
}
