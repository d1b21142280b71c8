//! Lock-free reads of a node that is being rewritten must come out torn
//! (and be read again), never as a consistent-looking node that lacks
//! entries. Deterministic: the images a reader can see are built byte by
//! byte from the node before and after the write.
//!
//! A write is a front-to-back copy and so is a read, but either can be
//! delayed between any two words: a reader can read the header and the
//! first slots before a split's rewrite of the left node starts and the
//! remaining slots after it ends. Those remaining slots are the ones the
//! split emptied (their entries moved to the new right node), so if empty
//! slots were unchecked the reader would see the old node, with its old
//! fences and sibling, minus the moved entries: `get` would say "absent"
//! and `scan` would skip them (as the concurrent model test caught).

mod common;

use fabric::FaultPlan;
use index::btree::node::{Node, LEAF_SLOTS, NODE_BYTES};
use index::btree::{Variant, Written, KEY_MAX};

fn full_leaf() -> Node {
    let mut n = Node::leaf(100, KEY_MAX);
    n.version = 7;
    n.sibling = 0x1_0000;
    for i in 0..LEAF_SLOTS {
        n.slots[i] = Some((1_000 + 10 * i as u64, i as u64));
    }
    n
}

/// Every mix of a prefix of `a` and the rest of `b` (cut at each 8-byte
/// word) decodes as `a`, as `b`, or not at all.
fn assert_mixes_are_detected(a: &Node, b: &Node, what: &str) {
    let (x, y) = (a.encode(), b.encode());
    for cut in (0..=NODE_BYTES).step_by(8) {
        let mut mix = [0u8; NODE_BYTES];
        mix[..cut].copy_from_slice(&x[..cut]);
        mix[cut..].copy_from_slice(&y[cut..]);
        if let Ok(n) = Node::decode(&mix) {
            assert!(
                n == *a || n == *b,
                "{what}: the first {cut} bytes of one node and the rest of the other decode as \
                 a third node with {} entries, fences [{}, {})",
                n.sorted_entries().len(),
                n.fence_lo,
                n.fence_hi
            );
        }
    }
}

#[test]
fn a_reader_overtaken_by_a_leaf_split_sees_a_torn_node() {
    let old = full_leaf();
    let mut left = old.clone();
    let right = left.split_leaf_with(1_005, 99);
    left.sibling = 0x2_0000;
    assert!(right.sorted_entries().len() >= LEAF_SLOTS / 2);
    // Old header and leading slots, then the split's emptied slots.
    assert_mixes_are_detected(&old, &left, "old then new");
    // And the other way round (a reader behind the writer).
    assert_mixes_are_detected(&left, &old, "new then old");
}

#[test]
fn a_reader_of_a_deleted_entry_sees_it_or_not() {
    let old = full_leaf();
    let mut new = old.clone();
    new.slots[39] = None;
    assert_mixes_are_detected(&old, &new, "delete");
    assert_mixes_are_detected(&new, &old, "insert into a free slot");
}

#[test]
fn empty_slots_are_bound_to_the_node_version() {
    // An empty slot of version 7 is not an empty slot of version 8.
    let a = Node::leaf(1, KEY_MAX);
    let mut b = a.clone();
    b.version += 1;
    let (x, y) = (a.encode(), b.encode());
    let mut mix = y;
    mix[64..].copy_from_slice(&x[64..]);
    assert!(
        Node::decode(&mix).is_err(),
        "a header of one version over slots of another"
    );
    // All-zero bytes are not a node (nor an empty slot of any version).
    let mut zeroed = y;
    zeroed[Node::slot_range(3)].fill(0);
    assert!(Node::decode(&zeroed).is_err(), "an all-zero slot is torn");
}

/// rtx: a lock-free read takes a node's data pointer in one round trip and
/// its block in the next. A commit in between moves the pointer and frees
/// the old block, which the committer's next transaction may take for new
/// data that is never committed. The reader must not return that.
///
/// Deterministic: the reader is paused right after it read the pointer
/// (fault injection); a writer then commits an insert into that leaf (the
/// old block is freed) and dies in its next insert into the same leaf right
/// after writing the new copy into the freed block, before its pointer CAS
/// (its commit point). The reader then reads on. Before `read_node`
/// validated the pointer, it returned the dead writer's uncommitted key.
#[tokio::test]
async fn rtx_readers_never_see_a_reused_block() {
    let (key_a, key_new) = (1_005, 1_007);
    // Dry run (the same steps without faults: allocation and verbs are
    // deterministic): the verbs of the reader's warm-up, and of the
    // writer up to its second insert's data WRITE (the verbs after it are
    // the pointer CAS and the release).
    let (warm_up, crash_after) = {
        let mut t = built_rtx().await;
        let (mut r, r_faults) = common::attach_faulty(&mut t, 2, FaultPlan::default());
        assert_eq!(r.get(1_000).await.unwrap(), Some(1_000));
        let (mut w, faults) = common::attach_faulty(&mut t, 3, FaultPlan::default());
        w.insert(key_a, 1).await.unwrap();
        w.insert(key_new, 2).await.unwrap();
        (r_faults.verbs_issued(), faults.verbs_issued() - 2)
    };

    let mut t = built_rtx().await;
    let plan = FaultPlan {
        pause_after_verbs: Some(warm_up + 1),
        ..FaultPlan::default()
    };
    let (mut r, r_faults) = common::attach_faulty(&mut t, 2, plan);
    // Warm-up: the root is cached, the leaf is read.
    assert_eq!(r.get(1_000).await.unwrap(), Some(1_000));
    assert_eq!(r_faults.verbs_issued(), warm_up);
    // The measured lookup pauses after its first verb: the leaf's pointer.
    let reader = tokio::spawn(async move {
        let got = r.get(key_new).await.unwrap();
        (got, r)
    });
    r_faults.paused().await;

    let plan = FaultPlan {
        crash_after_verbs: Some(crash_after),
        ..FaultPlan::default()
    };
    let (mut w, w_faults) = common::attach_faulty(&mut t, 3, plan);
    assert_eq!(w.insert(key_a, 1).await.unwrap(), Written::Inserted);
    assert!(
        w.insert(key_new, 2).await.is_err(),
        "the writer dies before its commit point"
    );
    assert!(w_faults.crashed().is_some());

    r_faults.resume();
    let (got, _r) = reader.await.unwrap();
    assert_eq!(got, None, "the reader returned a value that was never committed");

    // The dead writer's pre-lock is repaired (by a client whose clock says
    // its lease expired) and the key was never there.
    let skewed = FaultPlan {
        clock_skew_ms: 60_000,
        ..FaultPlan::default()
    };
    let (mut fixer, _) = common::attach_faulty(&mut t, 4, skewed);
    assert_eq!(fixer.repair_expired_locks().await.unwrap(), 1);
    assert_eq!(t.get(key_new).await.unwrap(), None);
    assert_eq!(t.get(key_a).await.unwrap(), Some(1));
    common::check_ok(&mut t, "after the repair").await;
}

/// Keys 10, 20, ..., 2000 in an rtx tree: ten half-full leaves, root level 1.
async fn built_rtx() -> index::btree::BTree {
    let mut t = common::tree(Variant::Rtx, 1, 16 << 20).await;
    for k in (10..=2000).step_by(10) {
        t.insert(k, k).await.unwrap();
    }
    t
}
