//! The tree algorithm, written once for every variant.
//!
//! A lookup follows cached internal nodes to a leaf and reads it without a
//! lock (moving right along siblings when a split moved its key). A write
//! locks (or pre-locks) the leaf through the seam, updates an entry in
//! place, fills a free slot, or splits: the new right node is created
//! first, then the left node is rewritten, then the separator goes into the
//! parent, which may split in turn up to the root. The root keeps its ref:
//! a root split moves both halves into new children.

use std::sync::Arc;

use super::cache::CachedNode;
use txn::HintSlot;

use super::node::{Node, NodeRef, KEY_MAX, KEY_MIN, LEVELS_MAX};
use super::seam::NodeTxn;
use super::{BTree, IndexError, Step};

/// What a write found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The key was not there; it is now.
    Inserted,
    /// The key was there; its value was replaced (or removed).
    Updated,
    /// Nothing written: the key was absent (update, delete) or present (insert).
    Unchanged,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Insert,
    Update,
    Upsert,
    Delete,
}

/// Where a descent ended.
struct Located {
    /// The refs from the root to the leaf (leaf last).
    path: Vec<NodeRef>,
    /// The leaf, if the descent had to read it (a root leaf).
    leaf: Option<Node>,
    /// The leaf's hint slot in its cached parent (rtx).
    hint: Option<LeafHint>,
}

/// The hint slot of child `index` of a cached level-1 node.
struct LeafHint {
    parent: Arc<CachedNode>,
    index: usize,
}

impl LeafHint {
    fn slot(&self) -> &HintSlot {
        self.parent
            .leaf_hint(self.index)
            .expect("a LeafHint is made only for a child with a hint slot")
    }
}

/// Steps of one descent before it is abandoned: a path is at most
/// LEVELS_MAX long, plus sibling moves.
const DESCENT_STEPS_MAX: u32 = 4 * LEVELS_MAX as u32 + 64;

impl BTree {
    fn check_key(key: u64) -> Result<(), IndexError> {
        if key == KEY_MIN || key == KEY_MAX {
            return Err(IndexError::ReservedKey(key));
        }
        Ok(())
    }

    /// Descends to the leaf that should hold `key`: the refs from the root
    /// to the leaf (leaf last), and the leaf itself if the descent had to
    /// read it (a root leaf).
    async fn locate(&mut self, key: u64) -> Result<Located, IndexError> {
        'restart: for _ in 0..self.attempts_max {
            let mut path = Vec::with_capacity(8);
            let mut r = self.root;
            for _ in 0..DESCENT_STEPS_MAX {
                let node = match self.cache.get(r) {
                    Some(n) => n,
                    None => {
                        let n = self.store.read_node(r).await?;
                        if n.is_leaf() {
                            if !n.covers(key) && r == self.root {
                                continue 'restart;
                            }
                            path.push(r);
                            return Ok(Located {
                                path,
                                leaf: Some(n),
                                hint: None,
                            });
                        }
                        self.cache.put(r, n)
                    }
                };
                // Loads while the binary search below runs.
                node.prefetch_leaf_hints();
                if !node.covers(key) {
                    if key >= node.fence_hi && node.sibling != 0 {
                        // A split moved the key right: follow the B-link.
                        self.cache.invalidate(r);
                        r = node.sibling;
                        continue;
                    }
                    self.cache.invalidate(r);
                    for p in &path {
                        self.cache.invalidate(*p);
                    }
                    continue 'restart;
                }
                path.push(r);
                let i = node.child_index_for(key);
                let child = node.child_at(i);
                if node.level == 1 {
                    path.push(child);
                    let hint = node.leaf_hint(i).map(|_| LeafHint {
                        parent: node.clone(),
                        index: i,
                    });
                    if let Some(h) = &hint {
                        self.store.prefetch_leaf(child, h.slot().get());
                    }
                    return Ok(Located {
                        path,
                        leaf: None,
                        hint,
                    });
                }
                r = child;
            }
            self.stats.retries += 1;
        }
        Err(IndexError::TooManyAttempts(self.attempts_max))
    }

    /// Reads the leaf for `key` without a lock, moving right as needed.
    async fn read_leaf(&mut self, key: u64) -> Result<Node, IndexError> {
        for _ in 0..self.attempts_max {
            let Located { path, leaf, hint } = self.locate(key).await?;
            let mut r = *path.last().expect("a path ends at a leaf");
            let mut node = match leaf {
                Some(n) => n,
                None => {
                    self.store
                        .read_leaf_hinted(r, hint.as_ref().map(LeafHint::slot))
                        .await?
                }
            };
            let mut moves = 0;
            while key >= node.fence_hi && node.sibling != 0 && moves < DESCENT_STEPS_MAX {
                r = node.sibling;
                node = self.store.read_node(r).await?;
                moves += 1;
            }
            if node.covers(key) && node.is_leaf() {
                return Ok(node);
            }
            // The cached path led left of the key's leaf: drop it.
            for p in &path {
                self.cache.invalidate(*p);
            }
            self.stats.retries += 1;
        }
        Err(IndexError::TooManyAttempts(self.attempts_max))
    }

    /// The value of `key`.
    pub async fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        Self::check_key(key)?;
        let leaf = self.read_leaf(key).await?;
        Ok(leaf.find(key).and_then(|i| leaf.slots[i]).map(|(_, v)| v))
    }

    /// Up to `count` entries with keys at or above `from`, in key order.
    pub async fn scan(&mut self, from: u64, count: usize) -> Result<Vec<(u64, u64)>, IndexError> {
        let from = from.max(KEY_MIN + 1);
        let mut out = Vec::with_capacity(count);
        if count == 0 || from == KEY_MAX {
            return Ok(out);
        }
        let mut node = self.read_leaf(from).await?;
        loop {
            for (k, v) in node.sorted_entries() {
                if k >= from && out.len() < count {
                    out.push((k, v));
                }
            }
            if out.len() >= count || node.sibling == 0 {
                return Ok(out);
            }
            let next = self.store.read_node(node.sibling).await?;
            // A split between the two reads moved entries into a new node
            // between them; its entries are above every key read so far, so
            // reading on from the sibling we found misses nothing only if
            // its low fence is where this node ended.
            if next.fence_lo != node.fence_hi {
                let resume = out.last().map_or(from, |&(k, _)| k + 1);
                node = self.read_leaf(resume.max(node.fence_hi)).await?;
                continue;
            }
            node = next;
        }
    }

    /// Inserts `key` if absent.
    pub async fn insert(&mut self, key: u64, value: u64) -> Result<Written, IndexError> {
        self.write(key, value, Mode::Insert).await
    }

    /// Replaces `key`'s value if present.
    pub async fn update(&mut self, key: u64, value: u64) -> Result<Written, IndexError> {
        self.write(key, value, Mode::Update).await
    }

    /// Inserts or replaces.
    pub async fn upsert(&mut self, key: u64, value: u64) -> Result<Written, IndexError> {
        self.write(key, value, Mode::Upsert).await
    }

    /// Removes `key` if present. Leaves are never merged (as in Sherman).
    pub async fn delete(&mut self, key: u64) -> Result<Written, IndexError> {
        self.write(key, 0, Mode::Delete).await
    }

    async fn write(&mut self, key: u64, value: u64, mode: Mode) -> Result<Written, IndexError> {
        Self::check_key(key)?;
        for attempt in 0..self.attempts_max {
            let located = self.locate(key).await?;
            let Located { path, hint, .. } = &located;
            let root = self.root;
            let mut t = self.store.begin();
            let mut splits = 0;
            let step = match modify(&mut t, root, &located, key, value, mode, &mut splits).await {
                Ok(written) => match t.commit().await {
                    Ok(()) => {
                        self.stats.splits += splits;
                        if let (Some(h), Written::Inserted | Written::Updated) = (hint, written) {
                            // The leaf's block moved (copy-on-write).
                            let leaf = *path.last().expect("a path ends at a leaf");
                            self.store.refresh_leaf_hint(leaf, h.slot());
                        }
                        return Ok(written);
                    }
                    // The transaction layer judged the batch that failed
                    // (one refused whole after the commit point is in doubt
                    // too).
                    Err(Step::Fail(e)) if self.store.take_commit_in_doubt() => {
                        return Err(IndexError::in_doubt_after_commit(e));
                    }
                    Err(step) => step,
                },
                Err(step) => {
                    t.rollback().await?;
                    step
                }
            };
            match step {
                Step::Retry { invalidate } => {
                    if let Some(r) = invalidate {
                        self.cache.invalidate(r);
                    }
                    for p in path {
                        self.cache.invalidate(*p);
                    }
                }
                Step::Blocked(r) => return Err(IndexError::Blocked(r)),
                Step::Fail(e) => return Err(e),
            }
            self.stats.retries += 1;
            if attempt % 8 == 7 {
                tokio::task::yield_now().await;
            }
        }
        Err(IndexError::TooManyAttempts(self.attempts_max))
    }
}

/// One attempt at a write, through the seam, on the leaf `located` found.
async fn modify(
    t: &mut NodeTxn<'_>,
    root: NodeRef,
    located: &Located,
    key: u64,
    value: u64,
    mode: Mode,
    splits: &mut u64,
) -> Result<Written, Step> {
    let path = &located.path;
    let leaf_ref = *path.last().expect("a path ends at a leaf");
    let leaf_hint = located.hint.as_ref().and_then(|h| h.slot().get());
    let mut leaf = t.lock_leaf(leaf_ref, leaf_hint).await?;
    if !leaf.is_leaf() || !leaf.covers(key) {
        // The cached path is stale (the leaf split, or the root grew).
        return Err(Step::Retry {
            invalidate: path.iter().rev().nth(1).copied(),
        });
    }
    match (leaf.find(key), mode) {
        (Some(_), Mode::Insert) | (None, Mode::Update | Mode::Delete) => Ok(Written::Unchanged),
        (Some(i), _) => {
            leaf.slots[i] = if mode == Mode::Delete {
                None
            } else {
                Some((key, value))
            };
            t.write_entry(leaf_ref, &leaf, i).await?;
            Ok(Written::Updated)
        }
        (None, _) => {
            if let Some(i) = leaf.free_slot() {
                leaf.slots[i] = Some((key, value));
                t.write_entry(leaf_ref, &leaf, i).await?;
            } else {
                let right = leaf.split_leaf_with(key, value);
                split(t, root, path, path.len() - 1, leaf, right, splits).await?;
            }
            Ok(Written::Inserted)
        }
    }
}

/// Installs the split of `path[at]` into `left` (rewritten in place) and
/// `right` (new), and the separator into the parent, recursively.
#[allow(clippy::too_many_arguments)]
async fn split(
    t: &mut NodeTxn<'_>,
    root: NodeRef,
    path: &[NodeRef],
    at: usize,
    mut left: Node,
    mut right: Node,
    splits: &mut u64,
) -> Result<(), Step> {
    *splits += 1;
    let node_ref = path[at];
    if node_ref == root {
        // The root keeps its ref: both halves move into new children.
        let level = left.level;
        if level + 1 >= LEVELS_MAX {
            return Err(Step::Fail(IndexError::Layout("tree too deep".into())));
        }
        let right_ref = t.create(&right).await?;
        left.sibling = right_ref;
        let left_ref = t.create(&left).await?;
        let mut new_root = Node::internal(
            level + 1,
            KEY_MIN,
            KEY_MAX,
            left_ref,
            vec![(right.fence_lo, right_ref)],
        );
        new_root.version = left.version + 1;
        return t.write_node(root, &new_root).await;
    }
    let sep = right.fence_lo;
    let right_ref = t.create(&right).await?;
    left.sibling = right_ref;
    t.write_node(node_ref, &left).await?;
    let parent_ref = path[at - 1];
    let mut parent = t.read_for_update(parent_ref).await?;
    if parent.is_leaf() || parent.level != left.level + 1 || !parent.covers(sep) {
        return Err(Step::Retry {
            invalidate: Some(parent_ref),
        });
    }
    if parent.insert_child(sep, right_ref) {
        return t.write_node(parent_ref, &parent).await;
    }
    let (_, parent_right) = parent.split_internal_with(sep, right_ref);
    right = parent_right;
    Box::pin(split(t, root, path, at - 1, parent, right, splits)).await
}
