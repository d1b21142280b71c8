//! Verb accounting of single operations with every internal node cached,
//! against the rTX paper's Table 2 (an 8-byte insert into Sherman). The
//! numbers asserted here are the ones tabulated in `docs/btree.md`.
//!
//! One memory node (replication factor 1), so that a WRITE to `Replica::All`
//! counts once and every CAS is a primary CAS. The tree is built first (200
//! ascending keys: ten half-full leaves under a level-1 root), then warmed
//! with a lookup so the root is cached; every measured operation must hit
//! the cache and miss nothing, and the tree client's retry counter must not
//! move (a retry would add verbs).

mod common;

use common::tree;
use fabric::Stats;
use index::btree::node::NODE_BYTES;
use index::btree::{BTree, Variant, Written};
use txn::{TxStats, META_BYTES};

const KIB: u64 = NODE_BYTES as u64;
/// A leaf entry: key, value, check.
const ENTRY: u64 = 24;

/// Keys 10, 20, ..., 2000: ascending inserts leave the left half of every
/// split behind, so each leaf holds 20 of its 40 slots and has room.
async fn built(variant: Variant) -> BTree {
    let mut t = tree(variant, 1, 16 << 20).await;
    for k in (10..=2000).step_by(10) {
        assert_eq!(t.insert(k, k).await.unwrap(), Written::Inserted);
    }
    // Warm-up: the path to every leaf is the root alone; cache it.
    assert_eq!(t.get(1000).await.unwrap(), Some(1000));
    let root = t.node(t.root()).await.unwrap();
    assert_eq!(root.level, 1, "{variant}: a two-level tree");
    assert!(!t.cache().is_empty(), "{variant}: the root is cached");
    t
}

/// Counters before an operation.
struct Before {
    verbs: Stats,
    tx: TxStats,
    cache: (u64, u64),
    splits: u64,
    retries: u64,
}

/// What one operation cost.
#[derive(Debug)]
struct Cost {
    verbs: Stats,
    logged_commits: u64,
    commits: u64,
    aborts: u64,
    cache_hits: u64,
    cache_misses: u64,
    splits: u64,
    retries: u64,
}

fn before(t: &mut BTree) -> Before {
    Before {
        verbs: t.fabric().stats(),
        tx: t.tx_stats().unwrap_or_default(),
        cache: t.cache().counters(),
        splits: t.stats().splits,
        retries: t.stats().retries,
    }
}

fn cost(t: &mut BTree, b: &Before) -> Cost {
    let tx = t.tx_stats().unwrap_or_default();
    let (hits, misses) = t.cache().counters();
    Cost {
        verbs: t.fabric().stats() - b.verbs,
        logged_commits: tx.logged_commits - b.tx.logged_commits,
        commits: tx.commits - b.tx.commits,
        aborts: tx.aborts - b.tx.aborts,
        cache_hits: hits - b.cache.0,
        cache_misses: misses - b.cache.1,
        splits: t.stats().splits - b.splits,
        retries: t.stats().retries - b.retries,
    }
}

/// Every internal node on the way came from the cache, nothing was retried
/// and nothing split.
fn assert_cached_fast_path(c: &Cost, what: &str) {
    assert!(c.cache_hits >= 1, "{what}: the root came from the cache: {c:?}");
    assert_eq!(c.cache_misses, 0, "{what}: no internal node was read: {c:?}");
    assert_eq!(c.retries, 0, "{what}: no retry: {c:?}");
    assert_eq!(c.splits, 0, "{what}: the leaf had room: {c:?}");
    assert_eq!(
        c.verbs.faa + c.verbs.flushes + c.verbs.verb_errors,
        0,
        "{what}: {c:?}"
    );
}

/// Optimal: Sherman's own protocol. A write is one round trip of CAS(lock)
/// + READ(leaf, 1 KiB), then one round trip of WRITE(the 24-byte entry) +
/// WRITE(8-byte unlock). A lookup is one READ of the leaf.
#[tokio::test]
async fn optimal_verbs_match_table_2() {
    let mut t = built(Variant::Optimal).await;

    // One insert of a new 8-byte key into a leaf with room.
    let b = before(&mut t);
    assert_eq!(t.insert(15, 150).await.unwrap(), Written::Inserted);
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "optimal insert");
    let v = c.verbs;
    assert_eq!(v.round_trips, 2, "insert: lock+read, then write+unlock: {v:?}");
    assert_eq!((v.reads, v.bytes_read), (1, KIB), "insert READ = 1 KiB: {v:?}");
    assert_eq!(v.writes, 2, "insert: the entry and the unlock: {v:?}");
    assert_eq!(
        v.bytes_written,
        ENTRY + 8,
        "insert WRITE = 24 B entry + 8 B unlock: {v:?}"
    );
    assert!(v.bytes_written <= KIB + 8, "Table 2: WRITE <= 1K + 8");
    assert_eq!(v.cas, 1, "insert #CAS = 1 (8 B): {v:?}");

    // One update of an existing key: the same verbs.
    let b = before(&mut t);
    assert_eq!(t.update(20, 201).await.unwrap(), Written::Updated);
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "optimal update");
    let v = c.verbs;
    assert_eq!(v.round_trips, 2, "{v:?}");
    assert_eq!((v.reads, v.bytes_read), (1, KIB), "{v:?}");
    assert_eq!((v.writes, v.bytes_written), (2, ENTRY + 8), "{v:?}");
    assert_eq!(v.cas, 1, "{v:?}");

    // One delete: the same again (the entry is written as zeros).
    let b = before(&mut t);
    assert_eq!(t.delete(30).await.unwrap(), Written::Updated);
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "optimal delete");
    let v = c.verbs;
    assert_eq!(
        (v.round_trips, v.bytes_read, v.bytes_written, v.cas),
        (2, KIB, ENTRY + 8, 1),
        "{v:?}"
    );

    // One lookup: one READ of the leaf.
    let b = before(&mut t);
    assert_eq!(t.get(20).await.unwrap(), Some(201));
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "optimal get");
    let v = c.verbs;
    assert_eq!((v.round_trips, v.reads, v.bytes_read), (1, 1, KIB), "get: {v:?}");
    assert_eq!((v.writes, v.cas), (0, 0), "get: {v:?}");

    // A write that finds nothing to do still locks the leaf and releases it
    // (the unlock alone).
    let b = before(&mut t);
    assert_eq!(t.insert(20, 1).await.unwrap(), Written::Unchanged);
    let v = cost(&mut t, &b).verbs;
    assert_eq!(
        (v.round_trips, v.bytes_read, v.bytes_written, v.cas),
        (2, KIB, 8, 1),
        "{v:?}"
    );

    // A scan of 30 entries from key 10: the first leaf holds 20 of them,
    // its sibling the rest. One READ per leaf.
    let b = before(&mut t);
    let got = t.scan(10, 30).await.unwrap();
    assert_eq!(got.len(), 30);
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "optimal scan");
    let v = c.verbs;
    assert_eq!(
        (v.round_trips, v.reads, v.bytes_read),
        (2, 2, 2 * KIB),
        "scan: {v:?}"
    );
}

/// rtx: every write is one rTX. With the leaf pre-locked (Opt2) and one
/// object written (Opt1: no log), an insert is five round trips: READ meta
/// (16 B), READ data (1 KiB), CAS pre-lock, WRITE the new 1 KiB data block,
/// then CAS the data pointer + CAS release in one batch. A lookup reads the
/// 8-byte data pointer, then the node and the pointer again in one batch.
#[tokio::test]
async fn rtx_verbs_match_table_2() {
    let mut t = built(Variant::Rtx).await;

    for (what, key, expect) in [
        ("insert", 15, Written::Inserted),
        ("update", 20, Written::Updated),
        ("delete", 30, Written::Updated),
    ] {
        let b = before(&mut t);
        let got = match what {
            "insert" => t.insert(key, 150).await.unwrap(),
            "update" => t.update(key, 201).await.unwrap(),
            _ => t.delete(key).await.unwrap(),
        };
        assert_eq!(got, expect, "rtx {what}");
        let c = cost(&mut t, &b);
        assert_cached_fast_path(&c, &format!("rtx {what}"));
        let v = c.verbs;
        assert_eq!(
            (c.commits, c.aborts, c.logged_commits),
            (1, 0, 0),
            "rtx {what}: one commit, no log (one node changed): {c:?}"
        );
        assert_eq!(
            v.round_trips, 2,
            "rtx {what}: pre-lock + pointer + data; write + install in one batch: {v:?}"
        );
        assert_eq!(v.reads, 2, "rtx {what}: the pointer and the data: {v:?}");
        assert_eq!(
            v.bytes_read,
            KIB + 8,
            "rtx {what}: READ = 1K + 8 (within Table 2's 1K + 16): {v:?}"
        );
        assert_eq!(
            (v.writes, v.bytes_written),
            (1, KIB),
            "rtx {what}: WRITE = the new 1 KiB data block, no log: {v:?}"
        );
        assert_eq!(
            v.cas, 3,
            "rtx {what}: #CAS = 3 x 8 (pre-lock, pointer, release): {v:?}"
        );
    }

    // One lookup: the node's block where the hint says, and the meta after
    // it (to validate the block: see `rtx::read_node`).
    let b = before(&mut t);
    assert_eq!(t.get(20).await.unwrap(), Some(201));
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "rtx get");
    let v = c.verbs;
    assert_eq!(
        (v.round_trips, v.reads, v.bytes_read),
        (1, 2, KIB + META_BYTES),
        "rtx get: {v:?}"
    );
    assert_eq!((v.writes, v.cas, c.commits), (0, 0, 0), "rtx get: {v:?}");

    // A scan over two leaves: two validated node reads.
    let b = before(&mut t);
    let got = t.scan(10, 30).await.unwrap();
    assert_eq!(got.len(), 30);
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "rtx scan");
    let v = c.verbs;
    assert_eq!(
        (v.round_trips, v.reads, v.bytes_read),
        (2, 4, 2 * (KIB + META_BYTES)),
        "rtx scan: {v:?}"
    );

    // A write that finds nothing to do (the key is there) still commits the
    // pre-locked leaf, unchanged: the same verbs as a real insert (a
    // rollback would save the WRITE and a round trip; see docs/btree.md).
    let b = before(&mut t);
    assert_eq!(t.insert(20, 1).await.unwrap(), Written::Unchanged);
    let c = cost(&mut t, &b);
    let v = c.verbs;
    assert_eq!(
        (v.round_trips, v.bytes_read, v.bytes_written, v.cas, c.commits),
        (2, KIB + 8, KIB, 3, 1),
        "rtx unchanged insert: {v:?}"
    );
}

/// The uncommon case of Table 2 (n > 1 updated nodes): an insert that
/// splits a leaf under a root with room changes three nodes (the leaf, a new
/// right leaf, the parent). Optimal locks two (leaf and parent) and writes
/// three whole nodes with the unlocks; rtx writes a log.
#[tokio::test]
async fn a_leaf_split_updates_three_nodes() {
    for variant in common::VARIANTS {
        let mut t = built(variant).await;
        // Fill the leaf of 10..=200 (20 keys) up to 40, then split it.
        for k in 1..=20 {
            assert_eq!(t.insert(k * 10 + 1, k).await.unwrap(), Written::Inserted);
        }
        let b = before(&mut t);
        assert_eq!(t.insert(105, 1).await.unwrap(), Written::Inserted);
        let c = cost(&mut t, &b);
        assert_eq!((c.splits, c.retries), (1, 0), "{variant}: one leaf split: {c:?}");
        let v = c.verbs;
        match variant {
            Variant::Optimal => {
                // lock+read leaf; lock+read parent; write right, left,
                // parent, unlock x2 (node allocation needs no round trip:
                // the client's chunk has room).
                assert_eq!(v.round_trips, 3, "{v:?}");
                assert_eq!((v.reads, v.bytes_read), (2, 2 * KIB), "{v:?}");
                assert_eq!((v.writes, v.bytes_written), (5, 3 * KIB + 16), "{v:?}");
                assert_eq!(v.cas, 2, "{v:?}");
            }
            Variant::Rtx => {
                // pre-lock + pointer + data of the leaf in one batch (its
                // hint is current: this client wrote it last); meta, then
                // data of the parent;
                // RT1: WRITE two new data blocks, the new leaf's block and
                // meta, the log (3 words + 4 per written object: 88 B), CAS
                // the parent's lock and re-lock the leaf under the logged
                // lock word; RT3: CAS log INIT -> DOING; RT4: CAS two data
                // pointers, two releases, log DOING -> DONE.
                assert_eq!(
                    (c.commits, c.aborts, c.logged_commits),
                    (1, 0, 1),
                    "a split logs: {c:?}"
                );
                assert_eq!(v.round_trips, 6, "{v:?}");
                assert_eq!((v.reads, v.bytes_read), (4, 2 * KIB + 8 + META_BYTES), "{v:?}");
                let log = 8 * (3 + 4 * 2);
                assert_eq!(
                    (v.writes, v.bytes_written),
                    (5, 3 * KIB + META_BYTES + log),
                    "{v:?}"
                );
                assert_eq!(v.cas, 9, "{v:?}");
            }
            Variant::Dtx => {
                // The previous insert's release rides the first batch
                // (version + lock, 16 B). Lock + read the leaf, the log
                // naming it (7 words); lock + read the parent, the log
                // naming both (11 words); commit: the new leaf's record
                // (16 + 1 KiB), per locked node its undo image (8 + 1 KiB),
                // invisible mark (8) and the whole node in place, COMMITTED
                // (8). This insert's own release rides the next operation.
                assert_eq!((c.commits, c.aborts, c.logged_commits), (1, 0, 1), "{c:?}");
                assert_eq!(v.round_trips, 3, "{v:?}");
                assert_eq!((v.reads, v.bytes_read), (2, 2 * (KIB + 16)), "{v:?}");
                let release = 16;
                let logs = 8 * 7 + 8 * 11;
                let commit = (16 + KIB) + 2 * ((8 + KIB) + 8 + KIB) + 8;
                assert_eq!(
                    (v.writes, v.bytes_written),
                    (2 + 2 + 8, release + logs + commit),
                    "{v:?}"
                );
                assert_eq!(v.cas, 2, "{v:?}");
            }
        }
        let report = common::check_ok(&mut t, "after the split").await;
        assert_eq!(report.entries.len(), 200 + 20 + 1);
    }
}

/// Meta hints (`txn::hint`), the three cases: a client that never saw the
/// leaf reads its meta first (one round trip more); a client whose hint
/// another client made stale pays one round trip more and still reads the
/// committed value; clients sharing one cache keep each other's hints
/// current.
#[tokio::test]
async fn rtx_hints_cold_stale_and_shared() {
    let mut t = built(Variant::Rtx).await;
    let mut cold = common::attach(&mut t, 2);
    // Warm the path (the root) and take a data chunk (the first commit's
    // allocation costs round trips of its own) without touching the leaf of
    // 20: the leaf of 1000 is another one.
    assert_eq!(cold.update(1000, 1000).await.unwrap(), Written::Updated);

    // Cold: meta; block + meta.
    let b = before(&mut cold);
    assert_eq!(cold.get(20).await.unwrap(), Some(20));
    let v = cost(&mut cold, &b).verbs;
    assert_eq!(
        (v.round_trips, v.reads, v.bytes_read),
        (2, 3, KIB + 2 * META_BYTES),
        "cold get: {v:?}"
    );
    // Now warm: block + meta.
    let b = before(&mut cold);
    assert_eq!(cold.get(20).await.unwrap(), Some(20));
    let v = cost(&mut cold, &b).verbs;
    assert_eq!(
        (v.round_trips, v.bytes_read),
        (1, KIB + META_BYTES),
        "warm get: {v:?}"
    );

    // `t` commits the leaf: `cold`'s hint is stale. The stale read does not
    // validate (the version moved) and is read again where the meta points.
    assert_eq!(t.update(20, 21).await.unwrap(), Written::Updated);
    let b = before(&mut cold);
    assert_eq!(cold.get(20).await.unwrap(), Some(21));
    let v = cost(&mut cold, &b).verbs;
    assert_eq!(
        (v.round_trips, v.bytes_read),
        (2, 2 * (KIB + META_BYTES)),
        "stale get: {v:?}"
    );

    // A stale hint on the write path: the pre-lock CAS misses, the pointer
    // read behind it makes a fresh pair, the second CAS wins.
    assert_eq!(t.update(20, 22).await.unwrap(), Written::Updated);
    let b = before(&mut cold);
    assert_eq!(cold.update(20, 23).await.unwrap(), Written::Updated);
    let c = cost(&mut cold, &b);
    assert_eq!(c.verbs.round_trips, 3, "stale update: {c:?}");
    assert_eq!((c.commits, c.aborts), (1, 0), "stale update: {c:?}");
    assert_eq!(cold.tx_stats().unwrap().stale_hints, 1);
    assert_eq!(t.get(20).await.unwrap(), Some(23));

    // Shared: `t` and a client sharing its cache; each one's commit is the
    // other's hint.
    let mut shared = common::attach(&mut t, 3);
    shared.share_hints(t.hints().expect("rtx has hints").clone());
    shared.share_leaf_hints(t.leaf_hints().expect("rtx has leaf hints").clone());
    assert_eq!(shared.get(1000).await.unwrap(), Some(1000));
    let b = before(&mut shared);
    assert_eq!(shared.get(20).await.unwrap(), Some(23));
    let v = cost(&mut shared, &b).verbs;
    assert_eq!(v.round_trips, 1, "a hint from t's read: {v:?}");
    assert_eq!(shared.update(20, 24).await.unwrap(), Written::Updated);
    let b = before(&mut t);
    assert_eq!(t.update(20, 25).await.unwrap(), Written::Updated);
    let v = cost(&mut t, &b).verbs;
    assert_eq!(v.round_trips, 2, "a hint from shared's commit: {v:?}");
    assert_eq!(t.tx_stats().unwrap().stale_hints, 0);

    // A lookup looks first at the hint its cached parent keeps
    // (`cache.rs`), shared by `t` and `shared`: `t`'s commit is `shared`'s.
    let b = before(&mut shared);
    assert_eq!(shared.get(20).await.unwrap(), Some(25));
    let v = cost(&mut shared, &b).verbs;
    assert_eq!(v.round_trips, 1, "a leaf hint from t's commit: {v:?}");
    common::check_ok(&mut t, "after the hint cases").await;
}

/// dtx: FORD's protocol on a 1 KiB record (two header words, the node in
/// place). A write is one round trip of WRITE(log: 7 words) + CAS(lock) +
/// READ(record, 1K + 16), then one of WRITE(undo image: version + node,
/// 8 + 1K) + WRITE(invisible mark, 8) + WRITE(the 24-byte entry in place)
/// + WRITE(COMMITTED, 8); its release (version + lock, 2 x 8) rides the
/// next batch, which here is the next operation's first. A lookup is one
/// round trip: the record, then its version word again.
#[tokio::test]
async fn dtx_verbs_match_table_2() {
    let mut t = built(Variant::Dtx).await;
    for (i, (what, key, expect)) in [
        ("insert", 15, Written::Inserted),
        ("update", 20, Written::Updated),
        ("delete", 30, Written::Updated),
    ]
    .into_iter()
    .enumerate()
    {
        let b = before(&mut t);
        let got = match what {
            "insert" => t.insert(key, 150).await.unwrap(),
            "update" => t.update(key, 201).await.unwrap(),
            _ => t.delete(key).await.unwrap(),
        };
        assert_eq!(got, expect, "dtx {what}");
        let c = cost(&mut t, &b);
        assert_cached_fast_path(&c, &format!("dtx {what}"));
        let v = c.verbs;
        assert_eq!(
            (c.commits, c.aborts, c.logged_commits),
            (1, 0, 1),
            "dtx {what}: {c:?}"
        );
        assert_eq!(v.round_trips, 2, "dtx {what}: lock + read, then commit: {v:?}");
        assert_eq!(
            (v.reads, v.bytes_read),
            (1, KIB + 16),
            "dtx {what}: READ = 1K + 16: {v:?}"
        );
        assert_eq!(v.cas, 1, "dtx {what}: #CAS = 1 x 8 (the lock): {v:?}");
        // The previous write's release (2 writes, 16 B; the warm-up lookup
        // carried the build's last one), the log, the undo image, the
        // invisible mark, the entry, COMMITTED.
        let release = if i == 0 { (0, 0) } else { (2, 16) };
        assert_eq!(
            (v.writes, v.bytes_written),
            (release.0 + 5, release.1 + 56 + (8 + KIB) + 8 + ENTRY + 8),
            "dtx {what}: {v:?}"
        );
    }

    // One lookup: the record and its version word again, one round trip
    // (carrying the last write's release).
    let b = before(&mut t);
    assert_eq!(t.get(20).await.unwrap(), Some(201));
    let c = cost(&mut t, &b);
    assert_cached_fast_path(&c, "dtx get");
    let v = c.verbs;
    assert_eq!(
        (v.round_trips, v.reads, v.bytes_read),
        (1, 2, KIB + 16 + 8),
        "dtx get: {v:?}"
    );
    assert_eq!(
        (v.writes, v.bytes_written, v.cas, c.commits),
        (2, 16, 0, 0),
        "dtx get: {v:?}"
    );
    let b = before(&mut t);
    assert_eq!(t.get(20).await.unwrap(), Some(201));
    let v = cost(&mut t, &b).verbs;
    assert_eq!(
        (v.round_trips, v.reads, v.writes),
        (1, 2, 0),
        "dtx get, nothing owed: {v:?}"
    );
}
