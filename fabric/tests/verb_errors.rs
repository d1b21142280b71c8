//! Error completions and limits, on every transport: a bad verb fails
//! alone (later verbs to its node are flushed), the node keeps serving.

mod common;

use common::*;
use fabric::{
    Batch, FabricError, GlobalAddr, Outcome, Replica, VerbError, VerbHandle, BATCH_BYTES_MAX, OFFSET_MAX,
    VERBS_PER_BATCH_MAX, VERB_BYTES_MAX,
};

on_every_transport!(
    unknown_region_is_an_error_completion,
    out_of_bounds_is_an_error_completion,
    misaligned_atomics_are_error_completions,
    wrong_access_key_is_an_error_completion,
    an_error_flushes_later_verbs_to_that_node_only,
    oversized_verbs_and_batches_are_refused,
    read_byte_limit_is_per_node,
    node_keeps_serving_after_errors,
);

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
