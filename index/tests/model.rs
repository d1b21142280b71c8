//! Random operations against `std::collections::BTreeMap` as the model.

use std::collections::BTreeMap;

use fabric::{Client, LocalTransport, RegionSpec};
use index::btree::{BTree, Variant};
use rand::{Rng, SeedableRng};
use txn::{Heap, HeapConfig};

async fn tree(variant: Variant, replicas: u16) -> BTree {
    let (t, map) = LocalTransport::cluster(
        replicas,
        &[RegionSpec {
            id: 1,
            size: 64 << 20,
        }],
    )
    .unwrap();
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, 1, HeapConfig::default()).await.unwrap();
    BTree::create(fabric, heap, variant, 1).await.unwrap()
}

async fn random_ops(variant: Variant, seed: u64, ops: usize, key_space: u64) {
    let mut t = tree(variant, 1).await;
    let mut model = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in 0..ops {
        let key = rng.gen_range(1..key_space);
        let value: u64 = rng.gen();
        match rng.gen_range(0..10) {
            0..=3 => {
                let got = t.upsert(key, value).await.unwrap();
                let had = model.insert(key, value).is_some();
                assert_eq!(
                    got == index::btree::Written::Updated,
                    had,
                    "{variant} op {i} upsert {key}"
                );
            }
            4 => {
                t.insert(key, value).await.unwrap();
                model.entry(key).or_insert(value);
            }
            5 => {
                t.update(key, value).await.unwrap();
                if let Some(v) = model.get_mut(&key) {
                    *v = value;
                }
            }
            6 => {
                t.delete(key).await.unwrap();
                model.remove(&key);
            }
            7 => {
                let n = rng.gen_range(1..100);
                let got = t.scan(key, n).await.unwrap();
                let want: Vec<(u64, u64)> = model.range(key..).take(n).map(|(k, v)| (*k, *v)).collect();
                assert_eq!(got, want, "{variant} op {i} scan {key} {n}");
            }
            _ => assert_eq!(
                t.get(key).await.unwrap(),
                model.get(&key).copied(),
                "{variant} op {i} get {key}"
            ),
        }
    }
    let report = t.check().await.unwrap();
    assert!(report.is_ok(), "{variant}: {:#?}", report.violations);
    let want: Vec<(u64, u64)> = model.into_iter().collect();
    assert_eq!(
        report.entries, want,
        "{variant}: the checker sees exactly the model"
    );
    assert!(
        report.nodes_per_level.len() >= 3,
        "{variant}: splits reached internal levels: {:?}",
        report.nodes_per_level
    );
}

#[tokio::test]
async fn optimal_matches_the_model() {
    random_ops(Variant::Optimal, 1, 30_000, 20_000).await;
}

#[tokio::test]
async fn rtx_matches_the_model() {
    random_ops(Variant::Rtx, 1, 30_000, 20_000).await;
}

#[tokio::test]
async fn dtx_matches_the_model() {
    random_ops(Variant::Dtx, 1, 30_000, 20_000).await;
}
