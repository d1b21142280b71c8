//! Helpers shared by the B+tree integration tests: an in-process cluster
//! with a formatted heap and a tree in it, more clients of that tree, raw
//! access to node bytes (outside the tree's code, to corrupt them on
//! purpose), and the checker's verdict as an assertion.

#![allow(dead_code)]

use std::sync::Arc;

use fabric::{
    BaseTransport, Batch, Client, FaultPlan, Faulty, GlobalAddr, LocalTransport, RegionSpec, Replica,
};
use index::btree::node::{Node, NODE_BYTES};
use index::btree::{BTree, CheckReport, NodeRef, Variant};
use txn::{DataPtr, Heap, HeapConfig, TxConfig};

/// The region every test heap lives in.
pub const REGION: u16 = 1;
/// The owner id of the client that creates a tree (and checks it at the
/// end); workers get ids from 2 up.
pub const CREATOR: u16 = 1;
/// Every variant, for tests that run each.
pub const VARIANTS: [Variant; 3] = [Variant::Optimal, Variant::Rtx, Variant::Dtx];

/// An empty tree of `variant` in a fresh one-region cluster of `replicas`
/// memory nodes, `region_bytes` per node, run as [`CREATOR`].
pub async fn tree(variant: Variant, replicas: u16, region_bytes: u64) -> BTree {
    let (t, map) = LocalTransport::cluster(
        replicas,
        &[RegionSpec {
            id: REGION,
            size: region_bytes,
        }],
    )
    .unwrap();
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
        .await
        .unwrap();
    BTree::create(fabric, heap, variant, CREATOR).await.unwrap()
}

/// Another client of `tree`'s tree, as `owner`, on a fork of its fabric
/// client (same memory, counters of its own). Issues no verb.
pub fn attach(tree: &mut BTree, owner: u16) -> BTree {
    let info = tree.info();
    let heap = tree.heap();
    let fabric = tree.fabric().fork();
    BTree::attach(fabric, heap, owner, TxConfig::default(), info).unwrap()
}

/// Another client of `tree`'s tree, as `owner`, whose fabric runs `plan`
/// (pause, crash, clock skew), and the handle on its faults.
pub fn attach_faulty(tree: &mut BTree, owner: u16, plan: FaultPlan) -> (BTree, Arc<Faulty<BaseTransport>>) {
    let info = tree.info();
    let heap = tree.heap();
    let base = tree.fabric();
    let (t, faults) = base.transport().clone().with_faults(plan);
    let fabric = Client::new(base.map().clone(), t);
    (
        BTree::attach(fabric, heap, owner, TxConfig::default(), info).unwrap(),
        faults,
    )
}

/// Runs the checker and fails the test on any violation; returns the report.
pub async fn check_ok(tree: &mut BTree, what: &str) -> CheckReport {
    let report = tree.check().await.unwrap();
    assert!(
        report.is_ok(),
        "{what} ({}): the checker found {} violation(s): {:#?}",
        tree.variant(),
        report.violations.len(),
        &report.violations[..report.violations.len().min(20)]
    );
    report
}

/// The address of the 1 KiB block a node's bytes are in now: the ref itself
/// (optimal), or where its TXObj's data pointer points (rtx), or behind its
/// record's header (dtx).
pub async fn node_block(tree: &mut BTree, r: NodeRef) -> GlobalAddr {
    let addr = GlobalAddr::from_raw(r);
    match tree.variant() {
        Variant::Optimal => addr,
        Variant::Rtx => {
            let word = read_word(tree, addr.add(txn::DPTR_OFFSET)).await;
            GlobalAddr::new(addr.region(), DataPtr::from_raw(word).offset())
        }
        Variant::Dtx => txn::dtx::record::Record::new(addr, NODE_BYTES as u32).data_addr(),
    }
}

/// Overwrites a node's bytes in place with `node`, encoded (so it decodes
/// as consistent: the corruption is structural, not a torn read), on every
/// replica, bypassing the tree's locks and transactions.
pub async fn overwrite_node(tree: &mut BTree, r: NodeRef, node: &Node) {
    let at = node_block(tree, r).await;
    let bytes = node.encode();
    assert_eq!(bytes.len(), NODE_BYTES);
    write_raw(tree, at, &bytes).await;
}

/// Writes raw bytes on every replica.
pub async fn write_raw(tree: &mut BTree, at: GlobalAddr, bytes: &[u8]) {
    let mut batch = Batch::new();
    let h = batch.on(Replica::All).write(at, bytes);
    tree.fabric().execute(&mut batch).await.unwrap();
    batch.done(h).unwrap();
}

/// Reads one word from the primary.
pub async fn read_word(tree: &mut BTree, at: GlobalAddr) -> u64 {
    let mut batch = Batch::new();
    let h = batch.read(at, 8);
    tree.fabric().execute(&mut batch).await.unwrap();
    u64::from_le_bytes(batch.read_result(h).unwrap().try_into().unwrap())
}

/// The refs of every node of one level, left to right, by following the
/// sibling chain from the leftmost node of that level.
pub async fn level_chain(tree: &mut BTree, level: u8) -> Vec<(NodeRef, Node)> {
    let mut r = tree.root();
    let mut node = tree.node(r).await.unwrap();
    assert!(node.level >= level, "the tree has no level {level}");
    while node.level > level {
        r = node.leftmost;
        node = tree.node(r).await.unwrap();
    }
    let mut chain = vec![(r, node.clone())];
    while node.sibling != 0 {
        r = node.sibling;
        node = tree.node(r).await.unwrap();
        chain.push((r, node.clone()));
    }
    chain
}

/// A value derived from its key, so that a reader can tell a value that
/// belongs to another key (a misdirected or torn read) from a right one.
pub fn value_of(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED
}
