//! The client's cache of internal nodes. With every internal node cached, a
//! lookup is one leaf read. Entries go stale when nodes split; a leaf whose
//! fences do not cover the key (or a parent that no longer covers a split)
//! tells the client to drop the path and read it again.
//!
//! A cached level-1 node (whose children are leaves) of an rtx tree also
//! keeps a **block guess** per child: the offset where that leaf's block was
//! last read. An rtx leaf moves with every copy-on-write, so where its block
//! is comes from the meta hint cache (`txn::hint`), a lookup that misses the
//! CPU cache at 10M keys (one hint line per leaf, touched far more rarely
//! than the parents). Prefetching the guessed block before that lookup lets
//! the two misses overlap instead of running one after the other. A guess is
//! only ever a prefetch address: a stale one wastes a prefetch, nothing
//! else, so guesses need no validation and may be torn or raced freely.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::node::{Node, NodeRef};

/// Internal nodes one client caches before it starts over. 1 KiB each: the
/// default holds every internal node of a tree of about a billion keys.
pub const CACHE_NODES_MAX: usize = 1 << 20;

/// A cached internal node, with its children's block guesses when it has
/// any (see the module docs).
#[derive(Debug)]
pub struct CachedNode {
    node: Node,
    /// Per child in [`Node::child_index_for`] order; 0 = no guess (no block
    /// lives at offset 0). Empty when the node keeps no guesses.
    guesses: Box<[AtomicU64]>,
}

impl CachedNode {
    /// Caches `node`; `guesses` makes a level-1 node keep block guesses.
    pub fn new(node: Node, guesses: bool) -> CachedNode {
        let n = if guesses && node.level == 1 {
            node.children.len() + 1
        } else {
            0
        };
        CachedNode {
            node,
            guesses: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Starts loading the guesses into the CPU cache, so that reading one
    /// after the binary search for the child costs no miss of its own.
    pub fn prefetch_guesses(&self) {
        fabric::prefetch_local(&self.guesses);
    }

    /// Where the leaf at child index `i` was last read, if known.
    pub fn guess(&self, i: usize) -> Option<&AtomicU64> {
        self.guesses.get(i)
    }
}

impl Deref for CachedNode {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

/// Reads a block guess (0 = none).
pub fn guessed(g: &AtomicU64) -> u64 {
    g.load(Ordering::Relaxed)
}

/// Records where a leaf's block was read.
pub fn set_guess(g: &AtomicU64, offset: u64) {
    if g.load(Ordering::Relaxed) != offset {
        g.store(offset, Ordering::Relaxed);
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

    #[test]
    fn only_level_one_nodes_of_guessing_trees_keep_guesses() {
        let parent = Node::internal(1, KEY_MIN, KEY_MAX, 0x10, vec![(100, 0x20), (200, 0x30)]);
        let cached = CachedNode::new(parent.clone(), true);
        for key in [1, 150, 250] {
            let i = cached.child_index_for(key);
            let g = cached.guess(i).expect("a guess per child");
            assert_eq!(guessed(g), 0, "no guess yet");
            set_guess(g, 4096 * (i as u64 + 1));
        }
        assert_eq!(guessed(cached.guess(0).unwrap()), 4096);
        assert_eq!(guessed(cached.guess(2).unwrap()), 3 * 4096);
        assert!(cached.guess(3).is_none());
        cached.prefetch_guesses();
        assert!(
            CachedNode::new(parent, false).guess(0).is_none(),
            "optimal keeps none"
        );
        let upper = Node::internal(2, KEY_MIN, KEY_MAX, 0x10, vec![(100, 0x20)]);
        assert!(
            CachedNode::new(upper, true).guess(0).is_none(),
            "children are not leaves"
        );
    }
}
