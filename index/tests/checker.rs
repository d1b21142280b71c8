//! The checker can fail: trees corrupted on purpose, with raw fabric writes
//! that bypass the tree's locks and transactions, must be reported, and
//! the same trees with the corruption undone must pass again (so the
//! violation is the corruption's, not the tree's). Also
//! `repair_expired_locks`: an rtx lock left by a dead owner is reported,
//! then repaired.

mod common;

use common::{
    check_ok, level_chain, node_block, overwrite_node, read_word, tree, value_of, write_raw, VARIANTS,
};
use fabric::GlobalAddr;
use index::btree::node::Node;
use index::btree::{BTree, IndexError, NodeRef, Variant, Written};
use txn::LockWord;

/// A tree of three levels (about 3,000 keys in ascending order).
async fn three_levels(variant: Variant) -> BTree {
    let mut t = tree(variant, 1, 16 << 20).await;
    for k in 1..=3_000u64 {
        assert_eq!(t.insert(k * 4, value_of(k * 4)).await.unwrap(), Written::Inserted);
    }
    let report = check_ok(&mut t, "before any corruption").await;
    assert_eq!(
        report.nodes_per_level.len(),
        3,
        "{variant}: {:?}",
        report.nodes_per_level
    );
    assert!(report.nodes_per_level[1] >= 2);
    t
}

/// Writes `bad` over node `r`, checks that the checker reports a violation
/// containing `expect`, restores the node and checks that it passes again.
async fn assert_reported(t: &mut BTree, r: NodeRef, good: &Node, bad: &Node, expect: &str, what: &str) {
    let variant = t.variant();
    overwrite_node(t, r, bad).await;
    let report = t.check().await.unwrap();
    assert!(!report.is_ok(), "{variant}: {what} went unnoticed");
    assert!(
        report.violations.iter().any(|v| v.contains(expect)),
        "{variant}: {what}: no violation mentions '{expect}': {:#?}",
        report.violations
    );
    overwrite_node(t, r, good).await;
    check_ok(t, &format!("{what}, undone")).await;
}

#[tokio::test]
async fn a_broken_sibling_fence_is_reported() {
    for variant in VARIANTS {
        let mut t = three_levels(variant).await;
        let leaves = level_chain(&mut t, 0).await;
        let (r, good) = leaves[leaves.len() / 2].clone();
        // The leaf claims one key more than its sibling leaves it.
        let mut bad = good.clone();
        bad.fence_hi += 1;
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "but its sibling",
            "a leaf's high fence past its sibling's",
        )
        .await;
        // The same on an internal level.
        let inner = level_chain(&mut t, 1).await;
        let (r, good) = inner[0].clone();
        let mut bad = good.clone();
        bad.fence_hi -= 1;
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "but its sibling",
            "an internal fence short of its sibling",
        )
        .await;
    }
}

#[tokio::test]
async fn a_lost_sibling_pointer_and_an_unlinked_split_are_reported() {
    for variant in VARIANTS {
        let mut t = three_levels(variant).await;
        let leaves = level_chain(&mut t, 0).await;
        // A leaf whose sibling pointer skips a node: the level's chain ends
        // early or skips a node its parent names.
        let (r, good) = leaves[3].clone();
        let mut bad = good.clone();
        bad.sibling = leaves[5].0;
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "but its sibling",
            "a sibling pointer skipping a leaf",
        )
        .await;
        // A parent that lost a separator: the right half of a split that was
        // never linked into its parent (what a writer that died between the
        // two writes of a Sherman split leaves behind).
        let inner = level_chain(&mut t, 1).await;
        let (r, good) = inner[1].clone();
        let mut bad = good.clone();
        bad.children.remove(2);
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "not linked into its parent",
            "a separator lost",
        )
        .await;
    }
}

#[tokio::test]
async fn misplaced_keys_are_reported() {
    for variant in VARIANTS {
        let mut t = three_levels(variant).await;
        let leaves = level_chain(&mut t, 0).await;
        let (r, good) = leaves[4].clone();
        let (_, next) = &leaves[5];
        // A key that belongs to the next leaf.
        let mut bad = good.clone();
        let free = bad.free_slot().expect("ascending leaves are half full");
        bad.slots[free] = Some((next.fence_lo + 4, 1));
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "holds keys outside",
            "a key in the wrong leaf",
        )
        .await;
        // The same key twice (in two leaves): the other copy is outside its
        // leaf's fences, and the entries come out of order.
        let mut bad = good.clone();
        let (k, v) = next.sorted_entries()[0];
        bad.slots[free] = Some((k, v));
        let report = {
            overwrite_node(&mut t, r, &bad).await;
            let report = t.check().await.unwrap();
            overwrite_node(&mut t, r, &good).await;
            report
        };
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.contains(&format!("key {k} appears twice"))),
            "{variant}: {:#?}",
            report.violations
        );
        // Separators out of order in an internal node.
        let inner = level_chain(&mut t, 1).await;
        let (r, good) = inner[0].clone();
        let mut bad = good.clone();
        bad.children.swap(1, 2);
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "unsorted separators",
            "unsorted separators",
        )
        .await;
        // A node at the wrong level.
        let (r, good) = level_chain(&mut t, 1).await[1].clone();
        let mut bad = good.clone();
        bad.level = 2;
        assert_reported(
            &mut t,
            r,
            &good,
            &bad,
            "has level 2 on level 1",
            "a node at the wrong level",
        )
        .await;
        check_ok(&mut t, "every corruption undone").await;
    }
}

#[tokio::test]
async fn a_held_lock_is_reported() {
    for variant in VARIANTS {
        let mut t = three_levels(variant).await;
        let leaves = level_chain(&mut t, 0).await;
        let (leaf, _) = leaves[7];
        let (word, held, expect) = match variant {
            // Optimal: a lock word of its lock table left set, as by a
            // writer that died holding it.
            Variant::Optimal => {
                let word = GlobalAddr::from_raw(t.info().lock_table).add(8 * 1234);
                (word, 9 + 1, "lock word 1234 is held by owner id 9")
            }
            // rtx: the node's TXObj lock word, held by owner 9 with a lease
            // that has not expired. dtx: the record's lock word, the same.
            Variant::Rtx | Variant::Dtx => {
                let lease = txn::now_tick(t.fabric()) + 3_600_000 * txn::TICKS_PER_MS;
                (
                    GlobalAddr::from_raw(leaf),
                    LockWord::locked(9, lease).raw(),
                    "is locked",
                )
            }
        };
        let before = read_word(&mut t, word).await;
        assert!(!LockWord::from_raw(before).is_locked());
        write_raw(&mut t, word, &held.to_le_bytes()).await;
        let report = t.check().await.unwrap();
        assert!(
            report.violations.iter().any(|v| v.contains(expect)),
            "{variant}: a held lock went unnoticed: {:#?}",
            report.violations
        );
        assert_eq!(report.locks_held, 1, "{variant}: counted as a held lock");
        // Nobody repairs a live lease (and optimal cannot repair at all).
        assert_eq!(t.repair_expired_locks().await.unwrap(), 0, "{variant}");
        assert!(!t.check().await.unwrap().is_ok(), "{variant}: still held");
        write_raw(&mut t, word, &before.to_le_bytes()).await;
        check_ok(&mut t, "the lock released").await;
    }
}

/// rtx: a leaf lock of a dead owner (no log: a single-object commit that
/// died between its pre-lock and its pointer CAS) with an expired lease is
/// a violation until `repair_expired_locks` meets it; then the tree checks
/// clean and the leaf takes writes again.
#[tokio::test]
async fn an_expired_rtx_lock_is_repaired() {
    let mut t = three_levels(Variant::Rtx).await;
    let leaves = level_chain(&mut t, 0).await;
    let (leaf, node) = leaves[7].clone();
    let meta = GlobalAddr::from_raw(leaf);
    let before = LockWord::from_raw(read_word(&mut t, meta).await);
    write_raw(&mut t, meta, &LockWord::locked(9, 1).raw().to_le_bytes()).await;
    let report = t.check().await.unwrap();
    assert!(
        report.violations.iter().any(|v| v.contains("is locked")),
        "{:#?}",
        report.violations
    );
    assert_eq!(t.repair_expired_locks().await.unwrap(), 1);
    let after = LockWord::from_raw(read_word(&mut t, meta).await);
    assert!(
        !after.is_locked() && after.version() > before.version(),
        "{before:?} -> {after:?}"
    );
    let report = check_ok(&mut t, "after the repair").await;
    assert_eq!(report.entries.len(), 3_000);
    let key = node.sorted_entries()[0].0 + 1;
    assert_eq!(t.insert(key, 1).await.unwrap(), Written::Inserted);
    assert_eq!(t.get(key).await.unwrap(), Some(1));
    check_ok(&mut t, "after a write to the repaired leaf").await;
}

/// A node that no longer decodes (garbage over its block) is not silently
/// skipped: reading it keeps finding it torn and the checker fails.
#[tokio::test]
async fn a_garbage_node_fails_the_check() {
    for variant in VARIANTS {
        let mut t = three_levels(variant).await;
        let (leaf, _) = level_chain(&mut t, 0).await[2].clone();
        let at = node_block(&mut t, leaf).await;
        write_raw(&mut t, at.add(200), &[0xA5; 16]).await;
        match t.check().await {
            Err(IndexError::Torn(r)) => assert_eq!(r, leaf, "{variant}"),
            other => panic!("{variant}: a garbage leaf passed: {other:?}"),
        }
    }
}
