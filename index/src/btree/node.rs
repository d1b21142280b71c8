//! The 1 KiB B-link tree node, shared by every variant.
//!
//! ```text
//! word 0   version      bumped by every whole-node write
//! word 1   info         level: 8 (0 = leaf) | count: 16 (internal entries) << 8
//! word 2   fence_lo     smallest key the node covers (inclusive)
//! word 3   fence_hi     first key it no longer covers (exclusive; KEY_MAX = unbounded)
//! word 4   sibling      right sibling's node ref, 0 = none
//! word 5   leftmost     internal: child covering [fence_lo, first key)
//! word 6   (reserved, 0)
//! word 7   check        leaf: hash of words 0..7; internal: hash of every other word
//! bytes 64..1024:
//!   leaf      40 entries of 24 bytes: key, value, check = h(key, value, version);
//!             key 0 = empty (value 0, and the check of (0, 0, version) too);
//!             unsorted (sorted on split)
//!   internal  60 entries of 16 bytes: key, child; sorted; `count` used
//! ```
//!
//! Readers take no lock, so a node can be read while it is being written.
//! Sherman detects that with front/rear versions, which assume a reader
//! never overtakes a writer inside the range; here every piece a reader
//! relies on carries a check instead. A torn entry, or an entry left over
//! from an earlier incarnation of the node (its check names an older
//! `version`), fails verification and the reader reads again. The chance
//! that a torn read verifies is that of a 64-bit hash collision.
//!
//! Empty slots carry a check too. A split rewrites the left node in place,
//! keeping the lower half of the entries and emptying the slots of the
//! upper half (moved to the new right node). A reader that read the old
//! header and first slots before that rewrite and the emptied slots after
//! it must not see a consistent node: with unchecked all-zero empty slots
//! it did, with the old fences and sibling but without the moved entries,
//! so `get` said "absent" and `scan` skipped them (found by the concurrent
//! model test, `tests/concurrent_model.rs`; the mix is `tests/torn_reads.rs`).

use crate::mix::fmix;
use fabric::le_word;
use fabric::GlobalAddr;

/// Bytes of a node.
pub const NODE_BYTES: usize = 1024;
const HEADER_BYTES: usize = 64;
const LEAF_ENTRY_BYTES: usize = 24;
const INTERNAL_ENTRY_BYTES: usize = 16;
/// Entries of a leaf.
pub const LEAF_SLOTS: usize = (NODE_BYTES - HEADER_BYTES) / LEAF_ENTRY_BYTES;
/// Entries of an internal node (besides the leftmost child).
pub const INTERNAL_SLOTS: usize = (NODE_BYTES - HEADER_BYTES) / INTERNAL_ENTRY_BYTES;
/// Keys must be below this; it marks an unbounded upper fence.
pub const KEY_MAX: u64 = u64::MAX;
/// Keys must be above this; an empty leaf slot has key 0 and value 0.
pub const KEY_MIN: u64 = 0;
/// Deepest tree the code accepts (the root's level + 1). A tree of 40-key
/// leaves and 60-way internal nodes holds more than 2^64 keys well before.
pub const LEVELS_MAX: u8 = 16;

const _: () = assert!(LEAF_SLOTS == 40 && INTERNAL_SLOTS == 60);

/// Where a node lives: a `GlobalAddr` (the node itself for `optimal`, its
/// TXObj meta for `rtx`) as a raw word; 0 = none.
pub type NodeRef = u64;

/// A decoded node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Bumped by every whole-node write.
    pub version: u64,
    /// 0 for leaves.
    pub level: u8,
    /// Smallest key covered.
    pub fence_lo: u64,
    /// First key not covered (`KEY_MAX`: unbounded).
    pub fence_hi: u64,
    /// Right sibling, 0 = none.
    pub sibling: NodeRef,
    /// Internal: child of keys below the first entry.
    pub leftmost: NodeRef,
    /// Leaf: slot -> (key, value), `None` = empty. Internal: unused.
    pub slots: Vec<Option<(u64, u64)>>,
    /// Internal: (separator key, child), sorted. Leaf: unused.
    pub children: Vec<(u64, NodeRef)>,
}

/// Why bytes are not a consistent node (torn, or not a node at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torn;

/// The check of a leaf entry (of an empty slot: of key 0, value 0); never
/// 0, so that an all-zero slot is never valid.
pub fn entry_check(key: u64, value: u64, version: u64) -> u64 {
    let h = fmix(key ^ fmix(value ^ fmix(version ^ 0x6b69_6e74_7375_6769)));
    if h == 0 {
        1
    } else {
        h
    }
}

fn hash_words(words: impl Iterator<Item = u64>) -> u64 {
    words.fold(0x2545_f491_4f6c_dd1d, |h, w| fmix(h ^ w))
}

impl Node {
    /// An empty leaf covering `[lo, hi)`.
    pub fn leaf(lo: u64, hi: u64) -> Node {
        Node {
            version: 1,
            level: 0,
            fence_lo: lo,
            fence_hi: hi,
            sibling: 0,
            leftmost: 0,
            slots: vec![None; LEAF_SLOTS],
            children: Vec::new(),
        }
    }

    /// An internal node at `level` covering `[lo, hi)`.
    pub fn internal(level: u8, lo: u64, hi: u64, leftmost: NodeRef, children: Vec<(u64, NodeRef)>) -> Node {
        debug_assert!(level > 0 && children.len() <= INTERNAL_SLOTS);
        Node {
            version: 1,
            level,
            fence_lo: lo,
            fence_hi: hi,
            sibling: 0,
            leftmost,
            slots: Vec::new(),
            children,
        }
    }

    /// True for leaves.
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// True when `key` is in `[fence_lo, fence_hi)`.
    pub fn covers(&self, key: u64) -> bool {
        key >= self.fence_lo && key < self.fence_hi
    }

    fn info(&self) -> u64 {
        u64::from(self.level) | ((self.children.len() as u64) << 8)
    }

    /// Encodes the whole node.
    pub fn encode(&self) -> [u8; NODE_BYTES] {
        let mut b = [0u8; NODE_BYTES];
        let header = [
            self.version,
            self.info(),
            self.fence_lo,
            self.fence_hi,
            self.sibling,
            self.leftmost,
            0,
        ];
        for (i, w) in header.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        if self.is_leaf() {
            for (i, slot) in self.slots.iter().enumerate() {
                b[Self::slot_range(i)].copy_from_slice(&Self::entry_bytes(*slot, self.version));
            }
            let check = hash_words(header.iter().copied());
            b[56..64].copy_from_slice(&check.to_le_bytes());
        } else {
            for (i, (k, c)) in self.children.iter().enumerate() {
                let at = HEADER_BYTES + i * INTERNAL_ENTRY_BYTES;
                b[at..at + 8].copy_from_slice(&k.to_le_bytes());
                b[at + 8..at + 16].copy_from_slice(&c.to_le_bytes());
            }
            let check = Self::internal_check(&b);
            b[56..64].copy_from_slice(&check.to_le_bytes());
        }
        b
    }

    fn internal_check(b: &[u8]) -> u64 {
        hash_words((0..NODE_BYTES / 8).filter(|&i| i != 7).map(|i| le_word(b, i * 8)))
    }

    /// Byte range of leaf slot `i` within the node.
    pub fn slot_range(i: usize) -> std::ops::Range<usize> {
        let at = HEADER_BYTES + i * LEAF_ENTRY_BYTES;
        at..at + LEAF_ENTRY_BYTES
    }

    /// The 24 bytes of a leaf slot, as written in place by an entry update.
    /// An empty slot is key 0, value 0 and their check under `version`
    /// (see the module doc: an unchecked empty slot let a torn read pass).
    pub fn entry_bytes(slot: Option<(u64, u64)>, version: u64) -> [u8; LEAF_ENTRY_BYTES] {
        let (k, v) = slot.unwrap_or((KEY_MIN, 0));
        let mut e = [0u8; LEAF_ENTRY_BYTES];
        e[..8].copy_from_slice(&k.to_le_bytes());
        e[8..16].copy_from_slice(&v.to_le_bytes());
        e[16..].copy_from_slice(&entry_check(k, v, version).to_le_bytes());
        e
    }

    /// Decodes and verifies a node read without a lock.
    pub fn decode(b: &[u8]) -> Result<Node, Torn> {
        if b.len() != NODE_BYTES {
            return Err(Torn);
        }
        let version = le_word(b, 0);
        let info = le_word(b, 8);
        let level = (info & 0xFF) as u8;
        let count = ((info >> 8) & 0xFFFF) as usize;
        if level >= LEVELS_MAX || info >> 24 != 0 {
            return Err(Torn);
        }
        let mut node = Node {
            version,
            level,
            fence_lo: le_word(b, 16),
            fence_hi: le_word(b, 24),
            sibling: le_word(b, 32),
            leftmost: le_word(b, 40),
            slots: Vec::new(),
            children: Vec::new(),
        };
        if level == 0 {
            if count != 0 || hash_words((0..7).map(|i| le_word(b, i * 8))) != le_word(b, 56) {
                return Err(Torn);
            }
            node.slots.reserve(LEAF_SLOTS);
            for i in 0..LEAF_SLOTS {
                let at = HEADER_BYTES / 8 + i * 3;
                let (k, v, c) = (
                    le_word(b, at * 8),
                    le_word(b, (at + 1) * 8),
                    le_word(b, (at + 2) * 8),
                );
                // Every slot, empty ones included, must carry the check of
                // this node version.
                if c != entry_check(k, v, version) {
                    return Err(Torn);
                }
                if k == KEY_MIN {
                    if v != 0 {
                        return Err(Torn);
                    }
                    node.slots.push(None);
                } else {
                    node.slots.push(Some((k, v)));
                }
            }
        } else {
            if count > INTERNAL_SLOTS || Self::internal_check(b) != le_word(b, 56) {
                return Err(Torn);
            }
            node.children = (0..count)
                .map(|i| {
                    let at = HEADER_BYTES / 8 + i * 2;
                    (le_word(b, at * 8), le_word(b, (at + 1) * 8))
                })
                .collect();
        }
        Ok(node)
    }

    /// Internal: the child whose range holds `key`.
    pub fn child_for(&self, key: u64) -> NodeRef {
        self.child_at(self.child_index_for(key))
    }

    /// Internal: which child covers `key`: 0 for `leftmost`, `i + 1` for
    /// `children[i]`.
    pub fn child_index_for(&self, key: u64) -> usize {
        debug_assert!(!self.is_leaf());
        self.children.partition_point(|&(k, _)| k <= key)
    }

    /// Internal: the child at a [`Node::child_index_for`] index.
    pub fn child_at(&self, i: usize) -> NodeRef {
        match i.checked_sub(1) {
            None => self.leftmost,
            Some(i) => self.children[i].1,
        }
    }

    /// Leaf: the slot holding `key`.
    pub fn find(&self, key: u64) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| matches!(s, Some((k, _)) if *k == key))
    }

    /// Leaf: a free slot.
    pub fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(Option::is_none)
    }

    /// Leaf: its entries sorted by key.
    pub fn sorted_entries(&self) -> Vec<(u64, u64)> {
        let mut e: Vec<(u64, u64)> = self.slots.iter().flatten().copied().collect();
        e.sort_unstable();
        e
    }

    /// Keys held (leaf) or separators (internal), for checking.
    pub fn keys(&self) -> Vec<u64> {
        if self.is_leaf() {
            self.sorted_entries().into_iter().map(|(k, _)| k).collect()
        } else {
            self.children.iter().map(|&(k, _)| k).collect()
        }
    }

    /// Splits a full leaf that must also take `(key, value)`: this node
    /// keeps the lower half, the returned node gets the upper half; the
    /// separator is the returned node's `fence_lo`. The caller sets the
    /// sibling pointers (the new node's ref is not known yet).
    pub fn split_leaf_with(&mut self, key: u64, value: u64) -> Node {
        let mut all = self.sorted_entries();
        let at = all.partition_point(|&(k, _)| k < key);
        all.insert(at, (key, value));
        let right_entries = all.split_off(all.len() / 2);
        let sep = right_entries[0].0;
        let mut right = Node::leaf(sep, self.fence_hi);
        right.sibling = self.sibling;
        for (i, e) in right_entries.into_iter().enumerate() {
            right.slots[i] = Some(e);
        }
        self.fence_hi = sep;
        self.version += 1;
        self.slots = vec![None; LEAF_SLOTS];
        for (i, e) in all.into_iter().enumerate() {
            self.slots[i] = Some(e);
        }
        right
    }

    /// Internal: inserts separator `key` -> `child`. `false` if full.
    pub fn insert_child(&mut self, key: u64, child: NodeRef) -> bool {
        if self.children.len() >= INTERNAL_SLOTS {
            return false;
        }
        let at = self.children.partition_point(|&(k, _)| k < key);
        self.children.insert(at, (key, child));
        self.version += 1;
        true
    }

    /// Splits a full internal node that must also take `key -> child`. This
    /// node keeps the lower half; the middle separator moves up (returned
    /// with the new node, whose leftmost child it was).
    pub fn split_internal_with(&mut self, key: u64, child: NodeRef) -> (u64, Node) {
        let mut all = std::mem::take(&mut self.children);
        let at = all.partition_point(|&(k, _)| k < key);
        all.insert(at, (key, child));
        let mid = all.len() / 2;
        let mut right_children = all.split_off(mid);
        let (sep, right_leftmost) = right_children.remove(0);
        let mut right = Node::internal(self.level, sep, self.fence_hi, right_leftmost, right_children);
        right.sibling = self.sibling;
        self.children = all;
        self.fence_hi = sep;
        self.version += 1;
        (sep, right)
    }
}

/// The address of leaf slot `i` of the node at `addr` (optimal variant's
/// in-place entry writes).
pub fn slot_addr(addr: GlobalAddr, i: usize) -> GlobalAddr {
    addr.add(Node::slot_range(i).start as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_round_trips_and_layout_is_bit_exact() {
        let mut n = Node::leaf(10, 1000);
        n.sibling = 0xAB;
        n.slots[0] = Some((42, 7));
        n.slots[39] = Some((999, 1));
        let b = n.encode();
        assert_eq!(le_word(&b, 0), 1);
        assert_eq!(le_word(&b, 8), 0, "leaf, no count");
        assert_eq!(
            (le_word(&b, 16), le_word(&b, 24), le_word(&b, 32)),
            (10, 1000, 0xAB)
        );
        assert_eq!(
            (le_word(&b, 64), le_word(&b, 72), le_word(&b, 80)),
            (42, 7, entry_check(42, 7, 1))
        );
        assert_eq!(
            (le_word(&b, 88), le_word(&b, 96), le_word(&b, 104)),
            (0, 0, entry_check(0, 0, 1)),
            "an empty slot is key 0, value 0 and their check"
        );
        assert_eq!(Node::decode(&b), Ok(n));
    }

    #[test]
    fn internal_round_trips() {
        let n = Node::internal(2, 0, KEY_MAX, 5, vec![(10, 6), (20, 7)]);
        let b = n.encode();
        assert_eq!(le_word(&b, 8), 2 | (2 << 8));
        assert_eq!(Node::decode(&b), Ok(n.clone()));
        assert_eq!(
            (n.child_for(3), n.child_for(10), n.child_for(19), n.child_for(25)),
            (5, 6, 6, 7)
        );
    }

    #[test]
    fn torn_reads_are_detected() {
        let mut old = Node::leaf(0, KEY_MAX);
        old.slots[3] = Some((5, 50));
        let mut new = old.clone();
        new.slots[3] = Some((5, 51));
        let (a, b) = (old.encode(), new.encode());
        // Key and value of the new entry, check of the old one.
        let mut torn = a;
        torn[Node::slot_range(3)][..16].copy_from_slice(&b[Node::slot_range(3)][..16]);
        assert_eq!(Node::decode(&torn), Err(Torn));
        // An entry written under an older node version is stale after a split.
        let mut split = old.clone();
        split.version += 1;
        let mut stale = split.encode();
        stale[Node::slot_range(3)].copy_from_slice(&a[Node::slot_range(3)]);
        assert_eq!(Node::decode(&stale), Err(Torn));
        // A header half-written.
        let mut header = a;
        header[24..32].copy_from_slice(&7u64.to_le_bytes());
        assert_eq!(Node::decode(&header), Err(Torn));
        let mut internal = Node::internal(1, 0, KEY_MAX, 1, vec![(9, 2)]).encode();
        internal[72] ^= 1;
        assert_eq!(Node::decode(&internal), Err(Torn));
    }

    #[test]
    fn splits_keep_order_and_fences() {
        let mut n = Node::leaf(0, KEY_MAX);
        for i in 0..LEAF_SLOTS as u64 {
            n.slots[i as usize] = Some((100 + 2 * i, i));
        }
        let right = n.split_leaf_with(101, 9);
        assert_eq!(n.fence_hi, right.fence_lo);
        assert!(n.keys().iter().all(|&k| k < right.fence_lo));
        assert!(right.keys().iter().all(|&k| k >= right.fence_lo));
        assert_eq!(n.keys().len() + right.keys().len(), LEAF_SLOTS + 1);
        assert!(n.keys().contains(&101));

        let children: Vec<(u64, NodeRef)> = (0..INTERNAL_SLOTS as u64)
            .map(|i| (10 * (i + 1), i + 100))
            .collect();
        let mut p = Node::internal(1, 0, KEY_MAX, 99, children);
        let (sep, r) = p.split_internal_with(15, 7);
        assert_eq!((p.fence_hi, r.fence_lo), (sep, sep));
        assert!(p.children.iter().all(|&(k, _)| k < sep));
        assert!(r.children.iter().all(|&(k, _)| k > sep));
        assert_eq!(p.children.len() + r.children.len() + 1, INTERNAL_SLOTS + 1);
    }
}
