//! Concurrent inserts that split nodes at every level, and scans that run
//! across leaves while those splits happen, for both variants.
//!
//! Clients are tasks of a multi-threaded runtime, each with its own `BTree`
//! (own fabric client, own owner id) attached to one tree. Every client's
//! key order comes from a seeded RNG; interleavings vary from run to run,
//! and what is asserted holds in all of them. No sleep synchronises
//! anything: readers stop when the writers say they are done.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{attach, check_ok, tree, value_of, CREATOR};
use index::btree::node::{INTERNAL_SLOTS, LEAF_SLOTS};
use index::btree::{BTree, Variant, Written};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Inserts `keys` in order; every insert must find its key new.
async fn insert_all(mut t: BTree, keys: Vec<u64>) -> BTree {
    let variant = t.variant();
    for k in keys {
        assert_eq!(
            t.insert(k, value_of(k)).await.unwrap(),
            Written::Inserted,
            "{variant}: insert {k}"
        );
    }
    t
}

/// Six writers at once, about 72,000 keys in all. Four of them insert ascending
/// runs in ranges of their own, which splits a leaf every 20 keys and
/// leaves half-full nodes behind (deep trees fastest); two insert shuffled
/// keys interleaved with everyone's (splits all over the key space, and
/// contention on the same leaves as the ascending writers). Leaves hold
/// 40 entries and internal nodes 61 children, so the tree needs a split of
/// the root at level 0, 1 and 2 and many splits below: root level >= 3.
async fn splits_at_every_level(variant: Variant) {
    const RUN: u64 = 16_000;
    const ASCENDING: u64 = 4;
    const SHUFFLED_EACH: u64 = 4_000;
    let mut creator = tree(variant, 1, 64 << 20).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let mut tasks = Vec::new();
    let mut all = Vec::new();
    // Ascending writer w: keys 8 * (w * RUN + i) + 8, i in 0..RUN.
    for w in 0..ASCENDING {
        let keys: Vec<u64> = (0..RUN).map(|i| 8 * (w * RUN + i) + 8).collect();
        all.extend(&keys);
        let t = attach(&mut creator, CREATOR + 1 + w as u16);
        tasks.push(tokio::spawn(insert_all(t, keys)));
    }
    // Shuffled writer s: keys 8 * j + 1 + s over the whole span.
    for s in 0..2 {
        let span = ASCENDING * RUN;
        let mut keys: Vec<u64> = (0..SHUFFLED_EACH)
            .map(|_| rng.gen_range(0..span))
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .map(|j| 8 * j + 1 + s)
            .collect();
        keys.shuffle(&mut rng);
        all.extend(&keys);
        let t = attach(&mut creator, CREATOR + 1 + (ASCENDING + s) as u16);
        tasks.push(tokio::spawn(insert_all(t, keys)));
    }
    let mut splits = 0;
    let mut retries = 0;
    for task in tasks {
        let t = task.await.unwrap();
        splits += t.stats().splits;
        retries += t.stats().retries;
    }
    let report = check_ok(&mut creator, "after concurrent splits").await;
    all.sort_unstable();
    let want: Vec<(u64, u64)> = all.iter().map(|&k| (k, value_of(k))).collect();
    assert_eq!(report.entries.len(), want.len(), "{variant}: every key present");
    assert_eq!(report.entries, want, "{variant}: every key with its value");
    let levels = &report.nodes_per_level;
    eprintln!("{variant}: nodes per level {levels:?}, {splits} splits, {retries} retries");
    assert!(levels.len() >= 4, "{variant}: root level >= 3: {levels:?}");
    // Every level below the root has split (a level of one node has not).
    assert!(
        levels[..levels.len() - 1].iter().all(|&n| n >= 2),
        "{variant}: every level below the root split: {levels:?}"
    );
    assert_eq!(levels.last(), Some(&1), "{variant}: one root");
    // Every split made one node, except that a root split made two (the
    // root keeps its ref and both halves move down), and there is one root
    // split per level above the leaves: no split was lost or done twice.
    let nodes: usize = levels.iter().sum();
    assert_eq!(
        splits as usize + levels.len() - 1,
        nodes - 1,
        "{variant}: {splits} splits for {levels:?}"
    );
    assert!(levels[0] * LEAF_SLOTS >= all.len());
    assert!(levels[1] * (INTERNAL_SLOTS + 1) >= levels[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimal_concurrent_inserts_split_every_level() {
    splits_at_every_level(Variant::Optimal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rtx_concurrent_inserts_split_every_level() {
    splits_at_every_level(Variant::Rtx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dtx_concurrent_inserts_split_every_level() {
    splits_at_every_level(Variant::Dtx).await;
}

/// Writers' progress: writer `w` inserts its keys in the order `order[w]`
/// and has had the first `acked[w]` of them acknowledged; `pos[k]` is the
/// place of key `k` in its writer's order.
struct Progress {
    order: Vec<Vec<u64>>,
    pos: Vec<u32>,
    acked: Vec<AtomicUsize>,
    writers_done: AtomicUsize,
}

/// Counts a writer as done when it returns or panics, so that the scanners
/// stop (and the test fails with the writer's panic instead of hanging).
struct Done(Arc<Progress>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.writers_done.fetch_add(1, Ordering::AcqRel);
    }
}

const WRITERS: u64 = 2;
const WRITER_KEYS: u64 = 12_000;
/// More scanners than the machine may have cores: a scan preempted in the
/// middle of a node read is the case that matters.
const SCANNERS: u64 = 4;
const BATCH: u64 = 64;

/// Writer `w`'s keys are `k` with `k % WRITERS == w`, `k` in
/// `WRITERS..WRITERS * (WRITER_KEYS + 1)`.
fn writer_key(w: u64, i: u64) -> u64 {
    (i + 1) * WRITERS + w
}

/// The insertion orders: writer 0 goes up in batches of `BATCH` shuffled
/// within the batch (splits at the frontier, where the tree grows); writer
/// 1 in a random order (splits of leaves all over the key space, and blocks
/// freed from one leaf reused for another).
fn progress() -> Progress {
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let mut order = Vec::new();
    let mut ascending: Vec<u64> = (0..WRITER_KEYS).map(|i| writer_key(0, i)).collect();
    for batch in ascending.chunks_mut(BATCH as usize) {
        batch.shuffle(&mut rng);
    }
    order.push(ascending);
    let mut random: Vec<u64> = (0..WRITER_KEYS).map(|i| writer_key(1, i)).collect();
    random.shuffle(&mut rng);
    order.push(random);
    let mut pos = vec![u32::MAX; writer_key(0, WRITER_KEYS) as usize];
    for keys in &order {
        for (i, &k) in keys.iter().enumerate() {
            pos[k as usize] = i as u32;
        }
    }
    Progress {
        order,
        pos,
        acked: (0..WRITERS).map(|_| AtomicUsize::new(0)).collect(),
        writers_done: AtomicUsize::new(0),
    }
}

/// Inserts writer `w`'s keys in its order, publishing each acknowledgement.
async fn ordered_writer(mut t: BTree, w: usize, p: Arc<Progress>) -> BTree {
    let _done = Done(p.clone());
    for (i, &k) in p.order[w].iter().enumerate() {
        assert_eq!(t.insert(k, value_of(k)).await.unwrap(), Written::Inserted);
        p.acked[w].store(i + 1, Ordering::Release);
    }
    t
}

/// Scans 1..=100 entries, from anywhere or from just behind writer 0's
/// frontier, until the writers are done (and at least `min_scans` times).
/// Every scan must be sorted, start at or after its key, hold no key twice,
/// give every key its value, and miss no key that was acknowledged before
/// the scan started.
async fn scanner(mut t: BTree, r: u64, p: Arc<Progress>, min_scans: usize) -> (BTree, usize) {
    let variant = t.variant();
    let mut rng = rand::rngs::StdRng::seed_from_u64(41 + r);
    let (mut scans, mut checked) = (0, 0);
    let end = p.pos.len() as u64;
    while scans < min_scans || p.writers_done.load(Ordering::Acquire) < WRITERS as usize {
        // Which keys were acknowledged before the scan started.
        let acked: Vec<usize> = p.acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
        let from = if rng.gen_bool(0.5) {
            rng.gen_range(1..end)
        } else {
            let frontier = acked[0].checked_sub(1).map_or(1, |i| p.order[0][i]);
            frontier.saturating_sub(rng.gen_range(0..400)).max(1)
        };
        let n = rng.gen_range(1..=100usize);
        let got = t.scan(from, n).await.unwrap();
        scans += 1;
        let at = format!("{variant} scanner {r} scan {scans}: scan({from}, {n})");
        assert!(got.len() <= n, "{at}: {} entries", got.len());
        assert!(
            got.windows(2).all(|p| p[0].0 < p[1].0),
            "{at}: unsorted or duplicated: {got:?}"
        );
        for &(k, v) in &got {
            assert!(k >= from, "{at}: key {k} below the start");
            assert!((WRITERS..end).contains(&k), "{at}: key {k} nobody wrote");
            assert_eq!(v, value_of(k), "{at}: key {k} with another key's value");
        }
        // The range the scan vouches for: up to its last key if it is
        // full, else to the end of the tree.
        let upper = if got.len() == n {
            got.last().map_or(end, |&(k, _)| k + 1)
        } else {
            end
        };
        for k in from.max(WRITERS)..upper.min(end) {
            if (p.pos[k as usize] as usize) < acked[(k % WRITERS) as usize] {
                assert!(
                    got.binary_search_by_key(&k, |&(k, _)| k).is_ok(),
                    "{at}: key {k}, acknowledged before the scan, is missing from {got:?}"
                );
                checked += 1;
            }
        }
        // Verbs complete inline (local transport): give the runtime a
        // point at which to stop this task if the test is failing.
        tokio::task::yield_now().await;
    }
    assert!(
        checked > 0,
        "{variant} scanner {r}: the scans vouched for some keys"
    );
    (t, scans)
}

async fn scans_during_splits(variant: Variant) {
    let mut creator = tree(variant, 1, 64 << 20).await;
    let p = Arc::new(progress());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let t = attach(&mut creator, CREATOR + 1 + w as u16);
        writers.push(tokio::spawn(ordered_writer(t, w as usize, p.clone())));
    }
    let mut scanners = Vec::new();
    for r in 0..SCANNERS {
        let t = attach(&mut creator, CREATOR + 1 + (WRITERS + r) as u16);
        scanners.push(tokio::spawn(scanner(t, r, p.clone(), 200)));
    }
    let mut splits = 0;
    for w in writers {
        splits += w.await.unwrap().stats().splits;
    }
    let mut scans = 0;
    for s in scanners {
        scans += s.await.unwrap().1;
    }
    let report = check_ok(&mut creator, "after scans during splits").await;
    let want: Vec<(u64, u64)> = (0..WRITERS)
        .flat_map(|w| (0..WRITER_KEYS).map(move |i| writer_key(w, i)))
        .map(|k| (k, value_of(k)))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    assert_eq!(report.entries, want, "{variant}: every key present");
    assert!(splits > 500, "{variant}: the writers split leaves ({splits})");
    eprintln!(
        "{variant}: {scans} scans, {splits} splits, levels {:?}",
        report.nodes_per_level
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 6)]
async fn optimal_scans_during_splits_miss_nothing_acknowledged() {
    scans_during_splits(Variant::Optimal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 6)]
async fn rtx_scans_during_splits_miss_nothing_acknowledged() {
    scans_during_splits(Variant::Rtx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 6)]
async fn dtx_scans_during_splits_miss_nothing_acknowledged() {
    scans_during_splits(Variant::Dtx).await;
}
