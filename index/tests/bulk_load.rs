//! Bulk load builds a valid tree that the normal operations then extend.

use fabric::{Client, LocalTransport, RegionSpec};
use index::btree::{BTree, Variant};
use txn::{Heap, HeapConfig};

async fn load(variant: Variant, keys: u64, fill: f64) {
    let (t, map) = LocalTransport::cluster(
        1,
        &[RegionSpec {
            id: 1,
            size: 64 << 20,
        }],
    )
    .unwrap();
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, 1, HeapConfig::default()).await.unwrap();
    let mut tree = BTree::create(fabric, heap, variant, 1).await.unwrap();
    let entries: Vec<(u64, u64)> = (1..=keys).map(|i| (i * 10, i)).collect();
    let mut last = 0;
    let report = tree.bulk_load(&entries, fill, |n| last = n).await.unwrap();
    assert_eq!(last, keys, "{variant}: progress reached the end");
    assert_eq!(report.keys, keys);
    let check = tree.check().await.unwrap();
    assert!(
        check.is_ok(),
        "{variant} {keys}: {:#?}",
        &check.violations[..check.violations.len().min(5)]
    );
    assert_eq!(check.entries, entries, "{variant} {keys}");
    assert_eq!(check.nodes() as u64, report.nodes);
    assert_eq!(check.nodes_per_level.len() as u8, report.levels);
    // The loaded tree takes ordinary writes, splits included.
    for i in 0..2_000 {
        tree.insert(i * 10 + 5, 7).await.unwrap();
    }
    assert_eq!(tree.get(15).await.unwrap(), Some(7));
    assert_eq!(tree.get(10).await.unwrap(), Some(1));
    let check = tree.check().await.unwrap();
    assert!(
        check.is_ok(),
        "{variant} after inserts: {:#?}",
        &check.violations[..check.violations.len().min(5)]
    );
}

#[tokio::test]
async fn bulk_loads_are_valid_trees() {
    for variant in [Variant::Optimal, Variant::Rtx, Variant::Dtx] {
        for (keys, fill) in [(1, 0.8), (40, 1.0), (41, 1.0), (5_000, 0.7), (60_000, 0.9)] {
            load(variant, keys, fill).await;
        }
    }
}
