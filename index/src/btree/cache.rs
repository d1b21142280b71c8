//! The client's cache of internal nodes. With every internal node cached, a
//! lookup is one leaf read. Entries go stale when nodes split; a leaf whose
//! fences do not cover the key (or a parent that no longer covers a split)
//! tells the client to drop the path and read it again.
//!
//! A cached level-1 node (whose children are leaves) of an rtx tree also
//! has a **leaf hint** per child: the meta hint (`txn::hint`) of that leaf.
//! An rtx leaf moves with every copy-on-write, so reading or locking it in
//! one round trip needs its hint; the process-wide hint cache has one slot
//! per leaf, touched so rarely at 10M keys that it is a miss in the CPU
//! cache every time, and a dependent one: the block's address comes out of
//! it. Hints kept with the child entries the descent has just searched
//! cost no miss (their lines are prefetched while the binary search runs).
//!
//! The hints of one parent are shared by every client of the process that
//! caches the same copy of it ([`LeafHintTable`]), as Sherman shares its
//! index cache per compute node: one client's commit or read is the
//! others' hint. A copy is the same when its children are: a slot is only
//! ever shared between copies that agree on which leaf it is for, because
//! a hint is only safe for the object it was read from. A hint goes stale
//! when a client of another process moves the leaf (or between two copies
//! of a parent that differ); using it then fails validation by the hint
//! rule, which is what makes any hint safe, and costs a round trip more.

use std::collections::HashMap;
use std::iter;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use txn::HintSlot;

use super::node::{Node, NodeRef};

/// Internal nodes one client caches before it starts over. 1 KiB each: the
/// default holds every internal node of a tree of about a billion keys.
pub const CACHE_NODES_MAX: usize = 1 << 20;

/// Parents whose leaf hints a [`LeafHintTable`] keeps before it starts
/// over: as many as a client caches nodes.
pub const LEAF_HINT_PARENTS_MAX: usize = CACHE_NODES_MAX;

/// The hint slots of one copy of a level-1 node's leaves, in
/// [`Node::child_index_for`] order. One allocation, so that the lookup path
/// reaches a slot from the cached node in one step.
type LeafHints = Arc<[HintSlot]>;

/// A table entry: the leaves a parent's slots are for, and the slots.
type KeptHints = (Box<[NodeRef]>, LeafHints);

/// A level-1 node's leaves, in [`Node::child_index_for`] order.
fn leaves_of(node: &Node) -> impl Iterator<Item = NodeRef> + '_ {
    iter::once(node.leftmost).chain(node.children.iter().map(|&(_, c)| c))
}

/// The leaf hints of the level-1 nodes a process's clients cache, by
/// parent; shared by those clients ([`super::BTree::share_leaf_hints`]).
#[derive(Debug, Default)]
pub struct LeafHintTable {
    /// Per parent: which leaf each slot is for, and the slots.
    by_parent: Mutex<HashMap<NodeRef, KeptHints>>,
}

impl LeafHintTable {
    /// The hint slots for level-1 node `r` as `node` has it: those already kept
    /// for a copy with the same leaves, or fresh (empty) ones. Called when
    /// a client caches the node, not on the lookup path.
    fn for_node(&self, r: NodeRef, node: &Node) -> LeafHints {
        debug_assert_eq!(node.level, 1);
        let mut map = self.by_parent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((leaves, slots)) = map.get(&r) {
            if leaves.iter().copied().eq(leaves_of(node)) {
                return slots.clone();
            }
        }
        if map.len() >= LEAF_HINT_PARENTS_MAX {
            map.clear();
        }
        let leaves: Box<[NodeRef]> = leaves_of(node).collect();
        let slots: LeafHints = leaves.iter().map(|_| HintSlot::default()).collect();
        map.insert(r, (leaves, slots.clone()));
        slots
    }
}

/// A cached internal node, with its leaves' hints when it keeps them (see
/// the module docs).
#[derive(Debug)]
pub struct CachedNode {
    node: Node,
    leaf_hints: Option<LeafHints>,
}

impl CachedNode {
    /// Starts loading the leaf hints into the CPU cache, so that reading
    /// one after the binary search for the child costs no miss of its own.
    pub fn prefetch_leaf_hints(&self) {
        if let Some(h) = &self.leaf_hints {
            fabric::prefetch_local(h);
        }
    }

    /// The hint slot of the leaf at child index `i`, if the node keeps them.
    pub fn leaf_hint(&self, i: usize) -> Option<&HintSlot> {
        self.leaf_hints.as_ref()?.get(i)
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
    /// Where level-1 nodes get their leaf hints (rtx); none: no hints.
    leaf_hints: Option<Arc<LeafHintTable>>,
    hits: u64,
    misses: u64,
}

impl NodeCache {
    /// A cache whose level-1 nodes keep leaf hints, in a table of its own
    /// until shared ([`NodeCache::share_leaf_hints`]).
    pub fn with_leaf_hints() -> NodeCache {
        NodeCache {
            leaf_hints: Some(Arc::default()),
            ..NodeCache::default()
        }
    }

    /// Takes level-1 nodes' leaf hints from `table` from now on (if this
    /// cache keeps leaf hints), dropping what is cached.
    pub fn share_leaf_hints(&mut self, table: Arc<LeafHintTable>) {
        if self.leaf_hints.is_some() {
            self.nodes.clear();
            self.leaf_hints = Some(table);
        }
    }

    /// The table level-1 nodes take their leaf hints from, if they keep any.
    pub fn leaf_hints(&self) -> Option<&Arc<LeafHintTable>> {
        self.leaf_hints.as_ref()
    }

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

    /// Caches internal node `node` (leaves are never cached) as `r`.
    pub fn put(&mut self, r: NodeRef, node: Node) -> Arc<CachedNode> {
        debug_assert!(!node.is_leaf());
        if self.nodes.len() >= CACHE_NODES_MAX {
            self.nodes.clear();
        }
        let leaf_hints = match &self.leaf_hints {
            Some(table) if node.level == 1 => Some(table.for_node(r, &node)),
            _ => None,
        };
        let cached = Arc::new(CachedNode { node, leaf_hints });
        self.nodes.insert(r, cached.clone());
        cached
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

    fn hint(version: u64) -> MetaHint {
        MetaHint {
            version,
            dptr: DataPtr::new(1, 4096 * version),
        }
    }

    #[test]
    fn level_one_nodes_share_leaf_hints_only_between_copies_with_the_same_leaves() {
        let parent = Node::internal(1, KEY_MIN, KEY_MAX, 0x10, vec![(100, 0x20), (200, 0x30)]);
        let table = Arc::new(LeafHintTable::default());
        let (mut a, mut b) = (NodeCache::with_leaf_hints(), NodeCache::with_leaf_hints());
        a.share_leaf_hints(table.clone());
        b.share_leaf_hints(table.clone());
        let in_a = a.put(0x100, parent.clone());
        let in_b = b.put(0x100, parent.clone());
        let i = in_a.child_index_for(150);
        assert_eq!(in_a.leaf_hint(i).and_then(HintSlot::get), None, "no hint yet");
        in_a.leaf_hint(i).expect("a hint per leaf").put(hint(7));
        assert_eq!(
            in_b.leaf_hint(i).and_then(HintSlot::get),
            Some(hint(7)),
            "one client's hint is the other's"
        );
        assert!(in_a.leaf_hint(3).is_none());
        in_a.prefetch_leaf_hints();

        // A copy after a split has other leaves at the same positions: it
        // gets slots of its own.
        let split = Node::internal(
            1,
            KEY_MIN,
            KEY_MAX,
            0x10,
            vec![(100, 0x20), (150, 0x40), (200, 0x30)],
        );
        let in_c = a.put(0x100, split);
        assert_eq!(in_c.leaf_hint(i).and_then(HintSlot::get), None);
        assert_eq!(
            in_b.leaf_hint(i).and_then(HintSlot::get),
            Some(hint(7)),
            "the old copy keeps its own"
        );

        assert!(
            NodeCache::default().put(0x100, parent).leaf_hint(0).is_none(),
            "optimal keeps none"
        );
        let upper = Node::internal(2, KEY_MIN, KEY_MAX, 0x10, vec![(100, 0x20)]);
        assert!(
            a.put(0x200, upper).leaf_hint(0).is_none(),
            "children are not leaves"
        );
    }
}
