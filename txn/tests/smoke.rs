//! A transfer between two accounts commits and reads back: the smallest
//! end-to-end use of the transaction layer.

use fabric::{Client, LocalTransport, RegionSpec};
use txn::{Heap, HeapConfig, TxClient, TxConfig};

#[tokio::test]
async fn transfer_commits_and_reads_back() {
    let (t, map) = LocalTransport::cluster(2, &[RegionSpec { id: 1, size: 4 << 20 }]).unwrap();
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, 1, HeapConfig::default()).await.unwrap();
    let mut c = TxClient::new(fabric.fork(), heap, 1, TxConfig::default()).unwrap();
    let a = c.create(&100u64).await.unwrap();
    let b = c.create(&0u64).await.unwrap();
    c.run(async |tx| {
        let x = tx.read(a).await?;
        let y = tx.read(b).await?;
        tx.write(a, &(x - 30)).await?;
        tx.write(b, &(y + 30)).await
    })
    .await
    .unwrap();
    let single = c
        .run(async |tx| {
            let x = tx.read(a).await?;
            tx.write(a, &(x + 1)).await?;
            Ok(x)
        })
        .await
        .unwrap();
    assert_eq!(single, 70);
    let (x, y) = c
        .run(async |tx| Ok((tx.read(a).await?, tx.read(b).await?)))
        .await
        .unwrap();
    assert_eq!((x, y), (71, 30));
    assert_eq!(c.stats().commits, 3);
    assert_eq!(c.stats().logged_commits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_run_on_spawned_tasks() {
    let (t, map) = LocalTransport::cluster(1, &[RegionSpec { id: 1, size: 4 << 20 }]).unwrap();
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, 1, HeapConfig::default()).await.unwrap();
    let mut setup = TxClient::new(fabric.fork(), heap, 1, TxConfig::default()).unwrap();
    let counter = setup.create(&0u64).await.unwrap();
    let tasks: Vec<_> = (2..6u16)
        .map(|owner| {
            let mut c = TxClient::new(fabric.fork(), heap, owner, TxConfig::default()).unwrap();
            tokio::spawn(async move {
                for _ in 0..200 {
                    c.run(async move |tx| {
                        let v = tx.read(counter).await?;
                        tx.write(counter, &(v + 1)).await
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let v = setup.run(async |tx| tx.read(counter).await).await.unwrap();
    assert_eq!(v, 800);
}
