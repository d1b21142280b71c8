//! The DTX client's protocol, one behaviour per test: transfers, reads
//! without locks, no-wait aborts, invisible records, the release that rides
//! the next batch, and what a DTX client never does (touch another owner's
//! lock, even an expired one). Round trips and verbs are asserted exactly
//! against the table in `txn/src/dtx/tx.rs`.

mod common;

use common::{pause_after, skew, word, Cluster, SKEW_MS};
use fabric::{Batch, Replica, Stats};
use txn::dtx::record::{Record, Version};
use txn::dtx::DtxClient;
use txn::{AbortReason, LockWord, TxError};

/// Accounts: 8-byte balances in DTX records, created by a setup client.
async fn accounts(cluster: &Cluster, values: &[u64]) -> Vec<Record> {
    let mut c = cluster.dtx(common::SETUP_OWNER);
    let mut recs = Vec::new();
    for v in values {
        recs.push(c.create_raw(&v.to_le_bytes()).await.unwrap());
    }
    recs
}

fn balance(bytes: &[u8]) -> u64 {
    word(bytes, 0)
}

/// Moves `amount` from `a` to `b` in one DTX transaction.
async fn transfer(c: &mut DtxClient, a: Record, b: Record, amount: u64) -> Result<(), TxError> {
    c.run(async |tx| {
        let from = balance(tx.read_for_update(a).await?);
        let to = balance(tx.read_for_update(b).await?);
        tx.write(a, &(from - amount).to_le_bytes()).await?;
        tx.write(b, &(to + amount).to_le_bytes()).await?;
        Ok(())
    })
    .await
}

/// The lock word (primary) and every replica's version word of `rec`.
async fn header(cluster: &Cluster, rec: Record) -> (u64, Vec<u64>) {
    let mut f = cluster.fabric.fork();
    let mut b = Batch::new();
    let l = b.read(rec.lock_addr(), 8);
    let v = b.on(Replica::All).read(rec.version_addr(), 8);
    f.execute(&mut b).await.unwrap();
    let versions = (0..cluster.replicas())
        .map(|i| word(b.read_result_of(v, i).unwrap(), 0))
        .collect();
    (word(b.read_result(l).unwrap(), 0), versions)
}

#[tokio::test]
async fn transfers_commit_and_conserve_the_total() {
    for replicas in [1, 2, 3] {
        let cluster = Cluster::new(replicas).await;
        let recs = accounts(&cluster, &[100, 100, 100]).await;
        let mut c = cluster.dtx(1);
        for i in 0..30u64 {
            let (a, b) = (recs[(i % 3) as usize], recs[((i + 1) % 3) as usize]);
            transfer(&mut c, a, b, i % 7).await.unwrap();
        }
        c.release_pending().await.unwrap();
        let mut total = 0;
        for &r in &recs {
            let (version, data) = c.read_record(r).await.unwrap();
            assert!(version > 0);
            total += balance(&data);
            let (lock, versions) = header(&cluster, r).await;
            assert_eq!(lock, 0, "released");
            assert!(
                versions.iter().all(|&v| v == version),
                "every replica at version {version}: {versions:?}"
            );
        }
        assert_eq!(total, 300);
        assert_eq!(c.stats().commits, 30);
        assert_eq!(c.stats().aborts, 0);
    }
}

#[tokio::test]
async fn the_release_rides_the_next_batch_or_a_flusher_sends_it() {
    let cluster = Cluster::new(2).await;
    let recs = accounts(&cluster, &[5, 6, 7]).await;
    let mut c = cluster.dtx(1);
    transfer(&mut c, recs[0], recs[1], 1).await.unwrap();
    // Committed, not yet released: nobody waited for it. The lock is held
    // on the primary and the version word is this transaction's lock word
    // (invisible) everywhere.
    let (lock, versions) = header(&cluster, recs[0]).await;
    let held = LockWord::from_raw(lock);
    assert!(held.is_locked() && held.owner() == 1);
    assert_eq!(versions, vec![lock, lock]);
    assert!(c.owes_releases());
    // The client's next batch carries it in front of its own verbs: per
    // record its version (2 replicas) and its lock; no round trip of its
    // own.
    let before = c.fabric().stats();
    let (_, data) = c.read_record(recs[2]).await.unwrap();
    let read = c.fabric().stats() - before;
    assert_eq!(balance(&data), 7);
    assert_eq!(
        (read.round_trips, read.reads, read.writes, read.bytes_written),
        (1, 2, 6, 48)
    );
    for &r in &recs[..2] {
        let (lock, versions) = header(&cluster, r).await;
        assert_eq!(lock, 0);
        assert_eq!(versions, vec![1, 1]);
    }
    // A client that yields before its next batch: the flusher sends the
    // release in a round trip of its own, counted as this client's once
    // reaped; the next batch carries nothing.
    transfer(&mut c, recs[1], recs[0], 1).await.unwrap();
    let before = c.fabric().stats();
    tokio::task::yield_now().await;
    assert_eq!(header(&cluster, recs[0]).await.0, 0, "released by the flusher");
    c.release_pending().await.unwrap();
    let flushed = c.fabric().stats() - before;
    assert_eq!(
        (flushed.round_trips, flushed.writes, flushed.bytes_written),
        (1, 6, 48)
    );
    assert!(!c.owes_releases());
    let before = c.fabric().stats();
    c.read_record(recs[2]).await.unwrap();
    assert_eq!((c.fabric().stats() - before).writes, 0);
    // Its own next transaction on those records never aborts on itself.
    transfer(&mut c, recs[0], recs[1], 1).await.unwrap();
    transfer(&mut c, recs[1], recs[0], 1).await.unwrap();
    assert_eq!(c.stats().aborts, 0);
}

/// A client that goes idle right after a commit keeps nothing locked or
/// invisible: its release lands without any further call of its own.
#[tokio::test]
async fn an_idle_client_blocks_no_reader() {
    let cluster = Cluster::new(1).await;
    let recs = accounts(&cluster, &[5, 6]).await;
    let mut writer = cluster.dtx(1);
    transfer(&mut writer, recs[0], recs[1], 1).await.unwrap();
    let mut reader = cluster.dtx(2);
    // The reader finds the record invisible at first and reads it again,
    // yielding, which lets the writer's background release run.
    let (version, data) = reader.read_record(recs[0]).await.unwrap();
    assert_eq!((version, balance(&data)), (1, 4));
    drop(writer);
}

#[tokio::test]
async fn a_record_held_by_another_transaction_aborts_without_waiting() {
    let cluster = Cluster::new(1).await;
    let recs = accounts(&cluster, &[10, 10]).await;
    let mut holder = cluster.dtx(1);
    let mut other = cluster.dtx(2);
    let mut tx = holder.begin();
    tx.read_for_update(recs[0]).await.unwrap();
    let mut attempt = other.begin();
    let err = attempt.read_for_update(recs[0]).await.unwrap_err();
    assert!(matches!(err, TxError::Abort(AbortReason::Locked)), "{err}");
    attempt.rollback();
    // The holder's lock is live: not expired, not touched.
    assert_eq!(other.stats().expired_seen, 0);
    tx.write(recs[0], &11u64.to_le_bytes()).await.unwrap();
    tx.commit().await.unwrap();
    holder.release_pending().await.unwrap();
    transfer(&mut other, recs[0], recs[1], 1).await.unwrap();
    other.release_pending().await.unwrap();
    assert_eq!(balance(&other.read_record(recs[0]).await.unwrap().1), 10);
}

#[tokio::test]
async fn an_expired_lock_is_counted_and_never_touched() {
    let cluster = Cluster::new(1).await;
    let recs = accounts(&cluster, &[10]).await;
    let mut holder = cluster.dtx(1);
    let mut tx = holder.begin();
    tx.read_for_update(recs[0]).await.unwrap();
    let (lock, _) = header(&cluster, recs[0]).await;
    // The holder stops (its transaction is left open). A client whose clock
    // runs a minute ahead sees the lease long expired, and still waits for
    // recovery: DTX has no online repair.
    let (mut late, _) = cluster.dtx_faulty(2, skew(SKEW_MS));
    let mut attempt = late.begin();
    let err = attempt.read_for_update(recs[0]).await.unwrap_err();
    assert!(matches!(err, TxError::Abort(AbortReason::Locked)));
    attempt.rollback();
    assert_eq!(late.stats().expired_seen, 1);
    assert_eq!(header(&cluster, recs[0]).await.0, lock, "untouched");
    drop(tx);
}

#[tokio::test]
async fn a_read_of_a_record_being_written_waits_then_aborts() {
    let cluster = Cluster::new(1).await;
    let recs = accounts(&cluster, &[10]).await;
    // The writer's verbs: its undo area's chunk (taken at its first lock),
    // then the lock batch (log WRITE, CAS, READ), then the commit batch
    // (undo image, invisible mark, data, COMMITTED). A probe client counts
    // the first two; the writer pauses right after its invisible mark.
    let first_lock_verbs = {
        let mut probe = cluster.dtx(3);
        let before = probe.fabric().stats();
        let mut tx = probe.begin();
        tx.read_for_update(recs[0]).await.unwrap();
        tx.rollback();
        let verbs = (probe.fabric().stats() - before).verbs();
        probe.release_pending().await.unwrap();
        verbs
    };
    let (mut writer, faults) = cluster.dtx_faulty(1, pause_after(first_lock_verbs + 2));
    let rec = recs[0];
    let task = tokio::spawn(async move {
        let r = writer
            .run(async move |tx| {
                let b = balance(tx.read_for_update(rec).await?);
                tx.write(rec, &(b + 1).to_le_bytes()).await
            })
            .await;
        (r, writer)
    });
    faults.paused().await;
    let (_, versions) = header(&cluster, recs[0]).await;
    assert!(matches!(Version::from_raw(versions[0]), Version::Invisible(_)));
    let mut reader = cluster.dtx(2);
    let err = reader.read_record(recs[0]).await.unwrap_err();
    assert!(matches!(err, TxError::Abort(AbortReason::Locked)), "{err}");
    assert_eq!(
        reader.stats().invisible_waits,
        u64::from(txn::dtx::INVISIBLE_READS_MAX)
    );
    faults.resume();
    let (r, mut writer) = task.await.unwrap();
    r.unwrap();
    writer.release_pending().await.unwrap();
    assert_eq!(
        reader.read_record(recs[0]).await.unwrap(),
        (1, 11u64.to_le_bytes().to_vec())
    );
}

#[tokio::test]
async fn read_only_transactions_validate_without_locks() {
    let cluster = Cluster::new(2).await;
    let recs = accounts(&cluster, &[1, 2, 3]).await;
    let mut c = cluster.dtx(1);
    // One record: one round trip (READ it, READ its version), no validation.
    let before = c.fabric().stats();
    let v = c
        .run(async |tx| Ok(balance(tx.read(recs[0]).await?)))
        .await
        .unwrap();
    let one = c.fabric().stats() - before;
    assert_eq!(v, 1);
    assert_eq!(
        (one.round_trips, one.reads, one.bytes_read, one.writes, one.cas),
        (1, 2, 16 + 8 + 8, 0, 0)
    );
    // Three records: three reads, then one round trip validating them all.
    let before = c.fabric().stats();
    let sum = c
        .run(async |tx| {
            let mut sum = 0;
            for &r in &recs {
                sum += balance(tx.read(r).await?);
            }
            Ok(sum)
        })
        .await
        .unwrap();
    let three: Stats = c.fabric().stats() - before;
    assert_eq!(sum, 6);
    assert_eq!(
        (three.round_trips, three.reads, three.writes, three.cas),
        (4, 3 * 2 + 3, 0, 0)
    );
    // A read-only transaction whose record changed between read and
    // validation aborts `Changed`.
    let mut other = cluster.dtx(2);
    let mut tx = c.begin();
    tx.read(recs[0]).await.unwrap();
    tx.read(recs[1]).await.unwrap();
    transfer(&mut other, recs[0], recs[2], 1).await.unwrap();
    other.release_pending().await.unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, TxError::Abort(AbortReason::Changed)), "{err}");
}

/// The cost of one update of a 1 KiB record (a B+tree leaf), the first
/// transaction's undo area already taken: lock batch, then commit batch;
/// the release rides the next batch.
#[tokio::test]
async fn an_update_of_a_1k_record_is_two_round_trips() {
    for r in [1u64, 2, 3] {
        let cluster = Cluster::new(r as u16).await;
        let mut setup = cluster.dtx(common::SETUP_OWNER);
        let rec = setup.create_raw(&[7u8; 1024]).await.unwrap();
        let mut c = cluster.dtx(1);
        let update = async |c: &mut DtxClient, byte: u8| {
            c.run(async |tx| {
                tx.read_for_update(rec).await?;
                // One entry of a leaf: 24 bytes in place.
                tx.write_part(rec, 100, &[byte; 24]).await
            })
            .await
            .unwrap();
        };
        update(&mut c, 1).await; // takes the undo area
        c.release_pending().await.unwrap();
        // (Each update's release is in flight when the next begins; it is
        // counted once reaped, not in the update that follows.)
        let before = c.fabric().stats();
        update(&mut c, 2).await;
        let cost = c.fabric().stats() - before;
        // Lock batch: log (7 words, every replica), CAS, READ 1,040 bytes.
        // Commit batch: undo image (8 + 1,024), invisible mark (8), the
        // entry (24), COMMITTED (8), each on every replica.
        assert_eq!(cost.round_trips, 2, "r = {r}");
        assert_eq!(cost.cas, 1);
        assert_eq!((cost.reads, cost.bytes_read), (1, 1040));
        assert_eq!(cost.writes, r + 4 * r);
        assert_eq!(cost.bytes_written, r * 56 + r * (1032 + 8 + 24 + 8));
        // The release: version (every replica) + lock, in the background.
        let before = c.fabric().stats();
        c.release_pending().await.unwrap();
        let release = c.fabric().stats() - before;
        assert_eq!(
            (release.round_trips, release.writes, release.bytes_written),
            (1, r + 1, 8 * (r + 1))
        );
        let (lock, versions) = header(&cluster, rec).await;
        assert_eq!(lock, 0);
        assert_eq!(versions, vec![2; r as usize]);
        let (_, data) = c.read_record(rec).await.unwrap();
        assert_eq!(&data[100..124], &[2u8; 24]);
        assert_eq!(&data[..100], &[7u8; 100][..]);
    }
}
