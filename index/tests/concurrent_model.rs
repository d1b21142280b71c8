//! Random operations from several clients at once, against
//! `std::collections::BTreeMap` as the model, for both variants.
//!
//! - Disjoint keys: each client owns the keys `k` with `k % CLIENTS == id`
//!   (so every leaf is shared and contended, but every key has one writer),
//!   keeps its own model and checks every result of its own keys against it
//!   while the others run; at the end the union of the models must be
//!   exactly what the checker reads, with no violation.
//! - Overlapping keys: every client upserts the same keys with values that
//!   name the key, the client and a sequence number; every read must return
//!   a value written to that key, and at the end each key holds the last
//!   value one of the clients wrote to it.
//!
//! Clients are tasks of a multi-threaded runtime, each with its own
//! `BTree` (own fabric client, own owner id) attached to one tree. Half of
//! them share one cache of meta hints (rtx), as the clients of one process
//! do; the others keep their own, which other clients' commits make stale.
//! Interleavings vary from run to run; what is asserted holds in all of
//! them. Every client's operations come from a seeded RNG.

mod common;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::{attach, check_ok, tree, CREATOR, VARIANTS};
use index::btree::{BTree, Variant, Written};
use rand::{Rng, SeedableRng};
use txn::HintCache;

const CLIENTS: u64 = 4;

/// Client `id` of `creator`'s tree; the even ones share `shared` hints and
/// the creator's leaf hints (rtx), so that shared slots are raced.
fn client(creator: &mut BTree, id: u64, shared: &Arc<HintCache>) -> BTree {
    let mut t = attach(creator, CREATOR + 1 + id as u16);
    if id % 2 == 0 {
        t.share_hints(shared.clone());
        if let Some(table) = creator.leaf_hints() {
            t.share_leaf_hints(table.clone());
        }
    }
    t
}

/// One client's share of the disjoint-keys workload; returns its model.
async fn disjoint_client(
    mut t: BTree,
    id: u64,
    seed: u64,
    ops: usize,
    keys_each: u64,
) -> (BTreeMap<u64, u64>, BTree) {
    let variant = t.variant();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (id << 32));
    let mut model = BTreeMap::new();
    let own = |k: u64| k % CLIENTS == id;
    for i in 0..ops {
        let key = rng.gen_range(0..keys_each) * CLIENTS + id + CLIENTS;
        debug_assert!(own(key));
        let value: u64 = rng.gen();
        let at = format!("{variant} client {id} op {i} key {key}");
        match rng.gen_range(0..16) {
            0..=4 => {
                let had = model.insert(key, value).is_some();
                let want = if had { Written::Updated } else { Written::Inserted };
                assert_eq!(t.upsert(key, value).await.unwrap(), want, "{at}: upsert");
            }
            5..=6 => {
                let want = match model.entry(key) {
                    Entry::Occupied(_) => Written::Unchanged,
                    Entry::Vacant(e) => {
                        e.insert(value);
                        Written::Inserted
                    }
                };
                assert_eq!(t.insert(key, value).await.unwrap(), want, "{at}: insert");
            }
            7 => {
                let want = match model.get_mut(&key) {
                    Some(v) => {
                        *v = value;
                        Written::Updated
                    }
                    None => Written::Unchanged,
                };
                assert_eq!(t.update(key, value).await.unwrap(), want, "{at}: update");
            }
            8..=9 => {
                let want = if model.remove(&key).is_some() {
                    Written::Updated
                } else {
                    Written::Unchanged
                };
                assert_eq!(t.delete(key).await.unwrap(), want, "{at}: delete");
            }
            10..=11 => {
                // A scan sees every client's keys; this client's own keys
                // in the range it covered must be exactly its model's.
                let n = rng.gen_range(1..=100);
                let got = t.scan(key, n).await.unwrap();
                assert!(got.len() <= n, "{at}: scan of {n} returned {}", got.len());
                assert!(
                    got.windows(2).all(|w| w[0].0 < w[1].0),
                    "{at}: scan not sorted: {got:?}"
                );
                assert!(got.iter().all(|&(k, _)| k >= key), "{at}: scan below its start");
                let upper = if got.len() == n {
                    got.last().map_or(u64::MAX, |&(k, _)| k)
                } else {
                    u64::MAX - 1
                };
                let mine: Vec<(u64, u64)> = got.iter().copied().filter(|&(k, _)| own(k)).collect();
                let want: Vec<(u64, u64)> = model.range(key..=upper).map(|(k, v)| (*k, *v)).collect();
                assert_eq!(mine, want, "{at}: scan({key}, {n}) up to {upper}");
            }
            _ => assert_eq!(t.get(key).await.unwrap(), model.get(&key).copied(), "{at}: get"),
        }
    }
    (model, t)
}

async fn disjoint(variant: Variant, seed: u64) {
    let mut creator = tree(variant, 1, 64 << 20).await;
    let shared = Arc::new(HintCache::default());
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let t = client(&mut creator, id, &shared);
        tasks.push(tokio::spawn(disjoint_client(t, id, seed, 6_000, 1_500)));
    }
    let mut union = BTreeMap::new();
    let mut retries = 0;
    let mut splits = 0;
    for task in tasks {
        let (model, t) = task.await.unwrap();
        retries += t.stats().retries;
        splits += t.stats().splits;
        union.extend(model);
    }
    let report = check_ok(&mut creator, "after the disjoint clients").await;
    let want: Vec<(u64, u64)> = union.into_iter().collect();
    assert_eq!(report.entries.len(), want.len(), "{variant}: entries");
    assert_eq!(
        report.entries, want,
        "{variant}: the tree holds exactly the union of the models"
    );
    assert!(
        report.nodes_per_level.len() >= 2 && splits > 0,
        "{variant}: the clients split nodes: {:?}",
        report.nodes_per_level
    );
    eprintln!(
        "{variant} disjoint: levels {:?}, {splits} splits, {retries} retries",
        report.nodes_per_level
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimal_disjoint_keys_match_the_models() {
    disjoint(Variant::Optimal, 11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rtx_disjoint_keys_match_the_models() {
    disjoint(Variant::Rtx, 11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dtx_disjoint_keys_match_the_models() {
    disjoint(Variant::Dtx, 11).await;
}

/// The value client `id` writes to `key` as its `seq`-th write of it.
fn tagged(key: u64, id: u64, seq: u64) -> u64 {
    (key << 32) | (id << 24) | seq
}

/// One client upserting (and reading) shared keys; returns, per key, the
/// last value it wrote there.
async fn overlapping_client(
    mut t: BTree,
    id: u64,
    seed: u64,
    ops: usize,
    keys: u64,
) -> (HashMap<u64, u64>, BTree) {
    let variant = t.variant();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (id << 32));
    let mut last: HashMap<u64, u64> = HashMap::new();
    let mut seq: HashMap<u64, u64> = HashMap::new();
    for i in 0..ops {
        let key = rng.gen_range(1..=keys);
        let at = format!("{variant} client {id} op {i} key {key}");
        if rng.gen_range(0..4) == 0 {
            if let Some(v) = t.get(key).await.unwrap() {
                assert_eq!(v >> 32, key, "{at}: get returned another key's value {v:#x}");
                let (writer, n) = ((v >> 24) & 0xFF, v & 0xFF_FFFF);
                assert!(writer < CLIENTS, "{at}: no client {writer} ({v:#x})");
                if writer == id {
                    // Its own writes to this key are ordered: it reads the
                    // last of them or someone else's.
                    assert_eq!(Some(&v), last.get(&key), "{at}: reads its own last write ({n})");
                }
            } else {
                assert!(!last.contains_key(&key), "{at}: a written key vanished");
            }
            continue;
        }
        let s = seq.entry(key).or_insert(0);
        *s += 1;
        let v = tagged(key, id, *s);
        let w = t.upsert(key, v).await.unwrap();
        if last.contains_key(&key) {
            assert_eq!(w, Written::Updated, "{at}: upsert of a key this client wrote");
        }
        last.insert(key, v);
    }
    (last, t)
}

async fn overlapping(variant: Variant, seed: u64) {
    let keys = 3_000;
    let mut creator = tree(variant, 1, 64 << 20).await;
    let shared = Arc::new(HintCache::default());
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let t = client(&mut creator, id, &shared);
        tasks.push(tokio::spawn(overlapping_client(t, id, seed, 6_000, keys)));
    }
    let mut lasts = Vec::new();
    for task in tasks {
        lasts.push(task.await.unwrap().0);
    }
    let report = check_ok(&mut creator, "after the overlapping clients").await;
    let written: std::collections::BTreeSet<u64> = lasts.iter().flat_map(|l| l.keys().copied()).collect();
    let found: Vec<u64> = report.entries.iter().map(|&(k, _)| k).collect();
    assert_eq!(
        found,
        written.into_iter().collect::<Vec<_>>(),
        "{variant}: exactly the written keys"
    );
    for &(k, v) in &report.entries {
        let writer = (v >> 24) & 0xFF;
        assert_eq!(v >> 32, k, "{variant}: key {k} holds another key's value {v:#x}");
        assert!(writer < CLIENTS, "{variant}: key {k}: no client {writer}");
        // Linearizable upserts: the final value is the last write of the
        // client that wrote last.
        assert_eq!(
            lasts[writer as usize].get(&k),
            Some(&v),
            "{variant}: key {k} holds {v:#x}, not the last value client {writer} wrote"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimal_overlapping_upserts_keep_a_written_value() {
    overlapping(Variant::Optimal, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rtx_overlapping_upserts_keep_a_written_value() {
    overlapping(Variant::Rtx, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dtx_overlapping_upserts_keep_a_written_value() {
    overlapping(Variant::Dtx, 12).await;
}

/// The single-threaded model test with both variants in one tree client
/// each, interleaved on one thread: every operation alternates between two
/// clients of one tree, so each sees the other's splits only through DM
/// (its cached internal nodes go stale and are refreshed by fences).
#[tokio::test]
async fn two_clients_on_one_thread_see_each_others_splits() {
    for variant in VARIANTS {
        let mut a = tree(variant, 1, 64 << 20).await;
        let mut b = attach(&mut a, CREATOR + 1);
        let mut model = BTreeMap::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        for i in 0..20_000 {
            let t = if i % 2 == 0 { &mut a } else { &mut b };
            let key = rng.gen_range(1..30_000);
            if rng.gen_range(0..3) == 0 {
                assert_eq!(
                    t.get(key).await.unwrap(),
                    model.get(&key).copied(),
                    "{variant} op {i}"
                );
            } else {
                let value: u64 = rng.gen();
                t.upsert(key, value).await.unwrap();
                model.insert(key, value);
            }
        }
        let report = check_ok(&mut a, "after two interleaved clients").await;
        assert_eq!(report.entries, model.into_iter().collect::<Vec<_>>(), "{variant}");
        assert!(
            report.nodes_per_level.len() >= 3,
            "{variant}: {:?}",
            report.nodes_per_level
        );
    }
}
