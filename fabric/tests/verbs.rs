//! Verb semantics, replica routing and counters, on every transport
//! (`local`, `shm`, `tcp`).

mod common;

use common::*;
use fabric::{Batch, FabricError, GlobalAddr, Outcome, Replica, Stats, VerbHandle};
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
    concurrent_faa_from_forks_is_atomic,
    flush_completes,
    prefetch_is_not_a_verb_and_ignores_bad_addresses,
);

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
            // Up to 100 verbs: a batch prefetches in groups of 16, two
            // groups ahead, with replicas' verbs mixed into one group.
            for _ in 0..rng.gen_range(1..=100) {
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

async fn prefetch_is_not_a_verb_and_ignores_bad_addresses(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    let a = big(64);
    write(&mut client, a, &[9; 32]).await;
    let before = client.stats();
    for (addr, len) in [
        (a, 32),
        (a, 1 << 20),
        (GlobalAddr::new(a.region(), (1 << 40) - 8), 64),
        (GlobalAddr::new(200, 0), 64),
    ] {
        client.prefetch(addr, len);
    }
    assert_eq!(
        client.stats(),
        before,
        "[{kind}] a prefetch costs no verb and no round trip"
    );
    assert_eq!(
        read(&mut client, a, 32).await,
        [9; 32],
        "[{kind}] and changes nothing"
    );
}

/// `populate` maps every page of an image into the creator and into an
/// attached client, as RDMA registration pins memory: what was written stays,
/// and verbs keep working.
#[tokio::test]
async fn populate_keeps_the_image_and_its_verbs() {
    let c = Cluster::build(Kind::Shm, 2).await;
    let mut client = c.client();
    let a = big(1000);
    write(&mut client, a, &[7; 24]).await;
    for node in &c.nodes {
        node.populate().unwrap();
    }
    let fabric::AnyTransport::Base(fabric::BaseTransport::Shm(shm)) = &c.transport else {
        panic!("an shm cluster has an shm transport");
    };
    shm.populate().unwrap();
    assert_eq!(
        read(&mut client, a, 24).await,
        [7; 24],
        "populate changes no byte"
    );
    write(&mut client, big(BIG_SIZE - 8), &[3; 8]).await;
    assert_eq!(read(&mut client, big(BIG_SIZE - 8), 8).await, [3; 8]);
}
