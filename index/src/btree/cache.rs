//! The client's cache of internal nodes. With every internal node cached, a
//! lookup is one leaf read. Entries go stale when nodes split; a leaf whose
//! fences do not cover the key (or a parent that no longer covers a split)
//! tells the client to drop the path and read it again.

use std::collections::HashMap;
use std::sync::Arc;

use super::node::{Node, NodeRef};

/// Internal nodes one client caches before it starts over. 1 KiB each: the
/// default holds every internal node of a tree of about a billion keys.
pub const CACHE_NODES_MAX: usize = 1 << 20;

/// Internal nodes by ref.
#[derive(Debug, Default)]
pub struct NodeCache {
    nodes: HashMap<NodeRef, Arc<Node>>,
    hits: u64,
    misses: u64,
}

impl NodeCache {
    /// A cached internal node.
    pub fn get(&mut self, r: NodeRef) -> Option<Arc<Node>> {
        let n = self.nodes.get(&r).cloned();
        if n.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        n
    }

    /// Caches an internal node (leaves are never cached).
    pub fn put(&mut self, r: NodeRef, node: Arc<Node>) {
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
