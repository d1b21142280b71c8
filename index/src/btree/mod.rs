//! A B-link tree on disaggregated memory, after Sherman.
//!
//! 1 KiB nodes (`node.rs`) with fence keys and sibling pointers; lock-free
//! lookups that detect torn reads; internal nodes cached at the client
//! (`cache.rs`); leaf updates written back as one entry and combined with
//! the unlock (optimal); splits that propagate to the root, whose ref never
//! changes (a root split moves its halves into two new children); range
//! scans along the sibling chain; a structural checker (`check.rs`).
//!
//! The algorithm (`ops.rs`) is written once against the seam in `seam.rs`;
//! the variants are `optimal` (`optimal.rs`), `rtx` (`rtx.rs`) and `dtx`
//! (`dtx.rs`, the FORD-style baseline).

mod cache;
mod check;
mod dtx;
mod load;
pub mod node;
mod ops;
pub use ops::Written;
mod optimal;
mod rtx;
mod seam;

use fabric::{Batch, Client, Replica};
use std::sync::Arc;

use txn::{Heap, HintCache, TxConfig};

pub use cache::{LeafHintTable, NodeCache};
pub use check::CheckReport;
pub use load::LoadReport;
pub use node::{NodeRef, KEY_MAX, KEY_MIN};
pub use seam::{Store, Variant};

use node::Node;

/// Heap root slots a tree uses: its root node, its variant, its lock table.
const ROOT_SLOT: usize = 0;
const VARIANT_SLOT: usize = 1;
const LOCK_TABLE_SLOT: usize = 2;

pub use crate::error::IndexError;

/// Control flow of one modification attempt.
#[derive(Debug)]
pub(crate) enum Step {
    /// Start over (after dropping a stale cached node, if any).
    Retry { invalidate: Option<NodeRef> },
    /// A lock is never released.
    Blocked(NodeRef),
    /// A real error.
    Fail(IndexError),
}

/// Attempts of one operation before it gives up.
pub const ATTEMPTS_MAX: u32 = 100_000;

/// Where a tree is: its root, its variant, its lock table (optimal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeInfo {
    /// The root node's ref.
    pub root: NodeRef,
    /// The variant.
    pub variant: Variant,
    /// The optimal variant's lock table (0 for rtx).
    pub lock_table: u64,
}

/// Counters of one tree client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TreeStats {
    /// Modification attempts that were retried.
    pub retries: u64,
    /// Splits performed (one per node split).
    pub splits: u64,
}

/// One client of a B+tree (one per thread or coroutine).
#[derive(Debug)]
pub struct BTree {
    pub(crate) store: Store,
    pub(crate) root: NodeRef,
    pub(crate) heap: Heap,
    pub(crate) cache: NodeCache,
    pub(crate) stats: TreeStats,
    pub(crate) attempts_max: u32,
}

impl BTree {
    /// Creates an empty tree of `variant` in `heap` (whose named roots 0..3
    /// it takes) and returns a client of it running as `owner`.
    pub async fn create(
        fabric: Client,
        heap: Heap,
        variant: Variant,
        owner: u16,
    ) -> Result<BTree, IndexError> {
        let root_node = Node::leaf(KEY_MIN, KEY_MAX);
        let (mut store, root) = Store::create(fabric, heap, variant, owner, &root_node).await?;
        let lock_table = store.lock_table_raw();
        if lock_table != 0 {
            set_root(store.fabric(), &heap, LOCK_TABLE_SLOT, lock_table).await?;
        }
        let mut tree = BTree::with_store(store, heap, root);
        set_root(tree.store.fabric(), &heap, VARIANT_SLOT, variant.tag()).await?;
        // The root slot last: a tree is there once it is.
        set_root(tree.store.fabric(), &heap, ROOT_SLOT, root).await?;
        Ok(tree)
    }

    /// Opens the tree in `heap` as `owner`.
    pub async fn open(fabric: Client, heap: Heap, owner: u16) -> Result<BTree, IndexError> {
        Self::open_with(fabric, heap, owner, TxConfig::default()).await
    }

    /// Opens the tree with an rTX configuration of its own (leases, retries;
    /// ignored by the optimal variant).
    pub async fn open_with(
        mut fabric: Client,
        heap: Heap,
        owner: u16,
        config: TxConfig,
    ) -> Result<BTree, IndexError> {
        let info = Self::read_info(&mut fabric, &heap).await?;
        Self::attach(fabric, heap, owner, config, info)
    }

    /// What a client must know to use the tree in `heap` (read from its roots).
    pub async fn read_info(fabric: &mut Client, heap: &Heap) -> Result<TreeInfo, IndexError> {
        let root = get_root(fabric, heap, ROOT_SLOT).await?;
        let tag = get_root(fabric, heap, VARIANT_SLOT).await?;
        let variant = Variant::from_tag(tag)
            .filter(|_| root != 0)
            .ok_or_else(|| IndexError::Layout(format!("region {} holds no B+tree", heap.region())))?;
        let lock_table = get_root(fabric, heap, LOCK_TABLE_SLOT).await?;
        Ok(TreeInfo {
            root,
            variant,
            lock_table,
        })
    }

    /// A client of a tree whose info is known, issuing no verb.
    pub fn attach(
        fabric: Client,
        heap: Heap,
        owner: u16,
        config: TxConfig,
        info: TreeInfo,
    ) -> Result<BTree, IndexError> {
        let store = Store::attach(fabric, heap, owner, config, &info)?;
        Ok(BTree::with_store(store, heap, info.root))
    }

    /// This tree's info, for [`BTree::attach`].
    pub fn info(&self) -> TreeInfo {
        TreeInfo {
            root: self.root,
            variant: self.variant(),
            lock_table: self.store.lock_table_raw(),
        }
    }

    fn with_store(store: Store, heap: Heap, root: NodeRef) -> BTree {
        // Only where a leaf's block moves (rtx: copy-on-write) do cached
        // parents keep their leaves' hints; an optimal leaf is its block.
        let cache = if store.keeps_leaf_hints() {
            NodeCache::with_leaf_hints()
        } else {
            NodeCache::default()
        };
        BTree {
            store,
            root,
            heap,
            cache,
            stats: TreeStats::default(),
            attempts_max: ATTEMPTS_MAX,
        }
    }

    /// Reads one node without a lock (for tools that inspect the shape).
    pub async fn node(&mut self, r: NodeRef) -> Result<node::Node, IndexError> {
        self.store.read_node(r).await
    }

    /// The variant.
    pub fn variant(&self) -> Variant {
        self.store.variant()
    }

    /// The owner id this client runs as.
    pub fn owner(&self) -> u16 {
        self.store.owner()
    }

    /// The heap the tree lives in.
    pub fn heap(&self) -> Heap {
        self.heap
    }

    /// The root's ref (fixed for the tree's life).
    pub fn root(&self) -> NodeRef {
        self.root
    }

    /// Counters.
    pub fn stats(&self) -> TreeStats {
        self.stats
    }

    /// rTX counters (rtx variant).
    pub fn tx_stats(&self) -> Option<txn::TxStats> {
        self.store.tx_stats()
    }

    /// The rTX client the tree's writes run on (rtx only): transactions
    /// over other objects of the same heap run on it too, under the same
    /// owner id and log slot.
    pub fn tx_client(&mut self) -> Option<&mut txn::TxClient> {
        self.store.tx_client()
    }

    /// The fabric client (for its counters).
    pub fn fabric(&mut self) -> &mut Client {
        self.store.fabric()
    }

    /// The internal-node cache.
    pub fn cache(&self) -> &NodeCache {
        &self.cache
    }

    /// The rtx variant's meta hints (`txn::hint`): where each node's block
    /// was last seen, which makes a lookup one round trip. `None` for
    /// optimal.
    pub fn hints(&self) -> Option<&Arc<HintCache>> {
        self.store.hints()
    }

    /// Shares `hints` with the other clients of this process (rtx; optimal
    /// has none): a node one client committed or read is then one round
    /// trip for all of them.
    pub fn share_hints(&mut self, hints: Arc<HintCache>) {
        self.store.share_hints(hints);
    }

    /// Follows the reclaims of `view` (`txn::quiesce`; rtx: its nodes are
    /// transactional objects, whose blocks a reclaim hands out).
    pub fn follow_reclaims(&mut self, view: Arc<txn::ReclaimView>) {
        self.store.follow_reclaims(view);
    }

    /// Shares the leaf hints of cached level-1 nodes (`cache.rs`) with the
    /// other clients of this process that were given `table` (rtx; optimal
    /// keeps none). Drops this client's cached nodes.
    pub fn share_leaf_hints(&mut self, table: Arc<LeafHintTable>) {
        self.cache.share_leaf_hints(table);
    }

    /// The table this client's cached level-1 nodes take their leaf hints
    /// from (rtx), to share with [`BTree::share_leaf_hints`].
    pub fn leaf_hints(&self) -> Option<&Arc<LeafHintTable>> {
        self.cache.leaf_hints()
    }

    /// Sends what this client still owes and waits for it to land: for dtx,
    /// the release of its last write (which otherwise rides its next
    /// operation, or a background flusher that needs its runtime alive).
    /// Call it before dropping a client; nothing to do for optimal and rtx.
    pub async fn flush(&mut self) -> Result<(), IndexError> {
        self.store.flush().await
    }

    /// Bounds retries and lock waits (crash exploration makes blocked
    /// writers give up quickly).
    pub fn set_attempts_max(&mut self, attempts: u32) {
        self.attempts_max = attempts.max(1);
        self.store.set_attempts_max(attempts);
    }
}

async fn set_root(fabric: &mut Client, heap: &Heap, slot: usize, value: u64) -> Result<(), IndexError> {
    let mut batch = Batch::new();
    let h = batch
        .on(Replica::All)
        .write(heap.root(slot), &value.to_le_bytes());
    fabric.execute(&mut batch).await?;
    batch.done(h).map_err(IndexError::Verb)
}

async fn get_root(fabric: &mut Client, heap: &Heap, slot: usize) -> Result<u64, IndexError> {
    let mut batch = Batch::new();
    let h = batch.read(heap.root(slot), 8);
    fabric.execute(&mut batch).await?;
    let b = batch.read_result(h).map_err(IndexError::Verb)?;
    Ok(fabric::le_word(b, 0))
}
