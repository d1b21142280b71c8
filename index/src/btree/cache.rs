//! The client's cache of internal nodes. With every internal node cached, a
//! lookup is one leaf read. Entries go stale when nodes split; a leaf whose
//! fences do not cover the key (or a parent that no longer covers a split)
//! tells the client to drop the path and read it again.
//!
//! A cached level-1 node (whose children are leaves) of an rtx tree also
//! keeps a **leaf hint** per child: the meta hint (`txn::hint`) of that leaf
//! as this client last saw it. An rtx leaf moves with every copy-on-write,
//! so a lookup needs its hint to read it in one round trip; the
//! process-wide hint cache has one slot per leaf, touched so rarely at 10M
//! keys that it is a miss in the CPU cache every time, and a dependent one:
//! the block's address comes out of it. A hint kept beside the child entry
//! the descent has just searched costs no miss (its lines are prefetched
//! while the binary search runs). It is per client, so it goes stale when
//! another client moves the leaf: the read then fails its validation by
//! the hint rule, which is what makes any hint safe, and costs a round trip
//! more. The hint cache stays the authority for writers.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use txn::HintSlot;

use super::node::{Node, NodeRef};

/// Internal nodes one client caches before it starts over. 1 KiB each: the
/// default holds every internal node of a tree of about a billion keys.
pub const CACHE_NODES_MAX: usize = 1 << 20;

/// A cached internal node, with its leaves' hints when it keeps them (see
/// the module docs).
#[derive(Debug)]
pub struct CachedNode {
    node: Node,
    /// Per child in [`Node::child_index_for`] order. Empty when the node
    /// keeps no leaf hints.
    leaf_hints: Box<[HintSlot]>,
}

impl CachedNode {
    /// Caches `node`; with `leaf_hints`, a level-1 node keeps its leaves'.
    pub fn new(node: Node, leaf_hints: bool) -> CachedNode {
        let n = if leaf_hints && node.level == 1 {
            node.children.len() + 1
        } else {
            0
        };
        CachedNode {
            node,
            leaf_hints: (0..n).map(|_| HintSlot::default()).collect(),
        }
    }

    /// Starts loading the leaf hints into the CPU cache, so that reading
    /// one after the binary search for the child costs no miss of its own.
    pub fn prefetch_leaf_hints(&self) {
        fabric::prefetch_local(&self.leaf_hints);
    }

    /// The hint slot of the leaf at child index `i`, if the node keeps them.
    pub fn leaf_hint(&self, i: usize) -> Option<&HintSlot> {
        self.leaf_hints.get(i)
    }
}

impl Deref for CachedNode {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

/// Internal nodes by ref.
#[derive(Debug, Default)]
pub struct NodeCache {
    nodes: HashMap<NodeRef, Arc<CachedNode>>,
    hits: u64,
    misses: u64,
}

impl NodeCache {
    /// A cached internal node.
    pub fn get(&mut self, r: NodeRef) -> Option<Arc<CachedNode>> {
        let n = self.nodes.get(&r).cloned();
        if n.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        n
    }

    /// Caches an internal node (leaves are never cached).
    pub fn put(&mut self, r: NodeRef, node: Arc<CachedNode>) {
        debug_assert!(!node.is_leaf());
        if self.nodes.len() >= CACHE_NODES_MAX {
            self.nodes.clear();
        }
        self.nodes.insert(r, node);
    }

    /// Drops a node.
    pub fn invalidate(&mut self, r: NodeRef) {
        self.nodes.remove(&r);
    }

    /// (hits, misses) so far.
    pub fn counters(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// Nodes cached.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::node::{KEY_MAX, KEY_MIN};
    use txn::{DataPtr, MetaHint};

    #[test]
    fn only_level_one_nodes_of_hinting_trees_keep_leaf_hints() {
        let parent = Node::internal(1, KEY_MIN, KEY_MAX, 0x10, vec![(100, 0x20), (200, 0x30)]);
        let cached = CachedNode::new(parent.clone(), true);
        for key in [1, 150, 250] {
            let i = cached.child_index_for(key);
            let slot = cached.leaf_hint(i).expect("a hint per child");
            assert_eq!(slot.get(), None, "no hint yet");
            slot.put(MetaHint {
                version: i as u64 + 7,
                dptr: DataPtr::new(1, 4096 * (i as u64 + 1)),
            });
        }
        assert_eq!(cached.leaf_hint(2).and_then(HintSlot::get).map(|h| h.version), Some(9));
        assert!(cached.leaf_hint(3).is_none());
        cached.prefetch_leaf_hints();
        assert!(CachedNode::new(parent, false).leaf_hint(0).is_none(), "optimal keeps none");
        let upper = Node::internal(2, KEY_MIN, KEY_MAX, 0x10, vec![(100, 0x20)]);
        assert!(CachedNode::new(upper, true).leaf_hint(0).is_none(), "children are not leaves");
    }
}
