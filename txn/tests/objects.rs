//! Where objects come from and where they may live: objects created inside a
//! transaction are written at its commit (RT1) and reachable through what
//! the transaction links them from; a client only touches objects of its own
//! heap's region, because it allocates new data blocks there and a data
//! pointer is an offset in the meta's region.

mod common;

use common::{Cluster, REGION_BYTES};
use fabric::{Client, GlobalAddr, LocalTransport, RegionSpec};
use txn::{Heap, HeapConfig, TxClient, TxConfig, TxError, TxObj};

#[tokio::test]
async fn a_transaction_that_only_creates_objects_commits() {
    // It used to panic in the commit (commit.rs indexed an empty write set).
    for rf in [1u16, 2] {
        let cluster = Cluster::new(rf).await;
        let mut c = cluster.client(1);
        // Warm up the allocator so that the measured commit allocates nothing.
        c.create(&0u64).await.unwrap();
        let mut tx = c.begin();
        let fresh = tx.create(&42u64).await.unwrap();
        let s0 = tx.client().fabric().stats();
        tx.commit().await.unwrap();
        let d = c.fabric().stats() - s0;
        let r = u64::from(rf);
        assert_eq!(
            (d.round_trips, d.writes, d.bytes_written, d.cas, d.reads),
            (1, 2 * r, (8 + 16) * r, 0, 0),
            "rf {rf}: RT1 only, data and meta on every replica"
        );
        assert_eq!(cluster.replicated_value(fresh).await, 42);
        assert_eq!(c.stats().commits, 1);
    }
}

#[tokio::test]
async fn created_objects_are_reached_through_what_links_them() {
    let cluster = Cluster::new(2).await;
    let root = cluster.accounts(&[0]).await[0];
    let mut a = cluster.client(1);
    a.run(async |tx| {
        let child = tx.create(&7u64).await?;
        tx.write(root, &child.meta().raw()).await
    })
    .await
    .unwrap();
    let mut b = cluster.client(2);
    let v = b
        .run(async |tx| {
            let child = TxObj::<u64>::at(GlobalAddr::from_raw(tx.read(root).await?));
            tx.read(child).await
        })
        .await
        .unwrap();
    assert_eq!(v, 7);
}

#[tokio::test]
async fn objects_of_another_region_are_refused() {
    // Two heaps in two regions. Before the check in tx.rs, a client of heap 1
    // writing an object of heap 2 allocated its new block in heap 1 and wrote
    // it at the same offset in region 2, over whatever lived there (here: the
    // object's own meta).
    let regions = [
        RegionSpec {
            id: 1,
            size: REGION_BYTES,
        },
        RegionSpec {
            id: 2,
            size: REGION_BYTES,
        },
    ];
    let (t, map) = LocalTransport::cluster(1, &regions).unwrap();
    let mut f = Client::new(map, t.into());
    let h1 = Heap::format(&mut f, 1, HeapConfig::default()).await.unwrap();
    let h2 = Heap::format(&mut f, 2, HeapConfig::default()).await.unwrap();
    let mut b = TxClient::new(f.fork(), h2, 2, TxConfig::default()).unwrap();
    let x = b.create(&7u64).await.unwrap();
    let y = b.create(&8u64).await.unwrap();

    let mut a = TxClient::new(f.fork(), h1, 1, TxConfig::default()).unwrap();
    for write in [false, true] {
        let e = a
            .run(async |tx| {
                let v = tx.read(x).await?;
                if write {
                    tx.write(x, &(v + 1)).await?;
                }
                Ok(())
            })
            .await
            .unwrap_err();
        assert!(matches!(e, TxError::BadObject(_)), "{e:?}");
    }
    let e = a.repair(x.raw(), txn::LockWord::locked(2, 1)).await.unwrap_err();
    assert!(matches!(e, TxError::BadObject(_)), "{e:?}");

    let got = b
        .run(async |tx| Ok((tx.read(x).await?, tx.read(y).await?)))
        .await
        .unwrap();
    assert_eq!(got, (7, 8), "heap 2 is intact");
}

#[tokio::test]
async fn a_partial_write_patches_the_transactions_copy_and_commits_it_whole() {
    let cluster = Cluster::new(2).await;
    let obj = cluster.accounts(&[0x1111_2222_3333_4444]).await[0];
    let mut c = cluster.client(1);
    c.run(async |tx| {
        // Not read yet: read, then patched; then patched again in place.
        tx.write_part(obj.raw(), 0, &[0xAA]).await?;
        tx.write_part(obj.raw(), 7, &[0xBB]).await
    })
    .await
    .unwrap();
    assert_eq!(cluster.replicated_value(obj).await, 0xBB11_2222_3333_44AA);
    // Past the object's end: refused, and nothing is written.
    let r = c.run(async |tx| tx.write_part(obj.raw(), 4, &[0; 8]).await).await;
    assert!(matches!(r, Err(TxError::BadObject(_))), "{r:?}");
    let r = c
        .run(async |tx| tx.write_part(obj.raw(), usize::MAX, &[0]).await)
        .await;
    assert!(matches!(r, Err(TxError::BadObject(_))), "{r:?}");
    assert_eq!(cluster.replicated_value(obj).await, 0xBB11_2222_3333_44AA);
}
