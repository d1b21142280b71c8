//! The variant seam. The tree algorithm (`ops.rs`) reads and writes nodes
//! only through [`Store`] (lock-free reads) and [`NodeTxn`] (one
//! modification: lock or pre-lock the leaf, read parents for update, write
//! entries or whole nodes, create nodes, commit or roll back). Each variant
//! is one arm here and a module of its own (`optimal.rs`, `rtx.rs`,
//! `dtx.rs`); nothing else in the tree knows which variant it runs.

use std::collections::HashMap;
use std::sync::Arc;

use fabric::{Client, GlobalAddr};
use txn::dtx::DtxClient;
use txn::{Heap, HintCache, HintSlot, MetaHint, TxClient, TxConfig, META_BYTES};

use super::check::CheckReport;
use super::dtx::{self, DtxTxn};
use super::load::Placement;
use super::node::{Node, NodeRef, NODE_BYTES};
use super::optimal::{Optimal, OptimalTxn};
use super::rtx::{self, RtxTxn};
use super::{IndexError, Step, TreeInfo};

/// How a tree keeps its nodes consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Sherman's own locking; no fault tolerance.
    Optimal,
    /// Every node a TXObj, every insert an rTX.
    Rtx,
    /// Every node a DTX record, every insert a FORD-style DTX transaction
    /// (the baseline: recovery, not online repair).
    Dtx,
}

impl Variant {
    pub(crate) fn tag(self) -> u64 {
        match self {
            Variant::Optimal => 1,
            Variant::Rtx => 2,
            Variant::Dtx => 3,
        }
    }

    pub(crate) fn from_tag(tag: u64) -> Option<Variant> {
        match tag {
            1 => Some(Variant::Optimal),
            2 => Some(Variant::Rtx),
            3 => Some(Variant::Dtx),
            _ => None,
        }
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "optimal" => Ok(Variant::Optimal),
            "rtx" => Ok(Variant::Rtx),
            "dtx" => Ok(Variant::Dtx),
            other => Err(format!("unknown variant '{other}': expected optimal, rtx or dtx")),
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Variant::Optimal => "optimal",
            Variant::Rtx => "rtx",
            Variant::Dtx => "dtx",
        })
    }
}

/// A variant's client.
#[derive(Debug)]
pub enum Store {
    /// Optimal.
    Optimal(Optimal),
    /// rTX (boxed: a transaction client is several times larger).
    Rtx(Box<TxClient>),
    /// DTX (boxed, as rTX).
    Dtx(Box<DtxClient>),
}

impl Store {
    /// A new tree's client, running as `owner`, and its root node, written
    /// as `root`.
    pub(crate) async fn create(
        fabric: Client,
        heap: Heap,
        variant: Variant,
        owner: u16,
        root: &Node,
    ) -> Result<(Store, NodeRef), IndexError> {
        Ok(match variant {
            Variant::Optimal => {
                let (o, r) = Optimal::create(fabric, heap, owner, root).await?;
                (Store::Optimal(o), r)
            }
            Variant::Rtx => {
                let mut c = TxClient::new(fabric, heap, owner, TxConfig::default())?;
                let r = c.create(&root.encode()).await?.meta().raw();
                (Store::Rtx(Box::new(c)), r)
            }
            Variant::Dtx => {
                let mut c = DtxClient::new(fabric, heap, owner, TxConfig::default())?;
                let r = dtx::create_root(&mut c, root).await?;
                (Store::Dtx(Box::new(c)), r)
            }
        })
    }

    /// A client of the tree `info` describes, issuing no verb.
    pub(crate) fn attach(
        fabric: Client,
        heap: Heap,
        owner: u16,
        config: TxConfig,
        info: &TreeInfo,
    ) -> Result<Store, IndexError> {
        Ok(match info.variant {
            Variant::Optimal => Store::Optimal(Optimal::new(
                fabric,
                heap,
                owner,
                GlobalAddr::from_raw(info.lock_table),
            )),
            Variant::Rtx => Store::Rtx(Box::new(TxClient::new(fabric, heap, owner, config)?)),
            Variant::Dtx => Store::Dtx(Box::new(DtxClient::new(fabric, heap, owner, config)?)),
        })
    }

    /// The optimal variant's lock table (0 for the others).
    pub(crate) fn lock_table_raw(&self) -> u64 {
        match self {
            Store::Optimal(o) => o.lock_table().raw(),
            Store::Rtx(_) | Store::Dtx(_) => 0,
        }
    }

    /// Transaction counters (not for optimal).
    pub(crate) fn tx_stats(&self) -> Option<txn::TxStats> {
        match self {
            Store::Optimal(_) => None,
            Store::Rtx(c) => Some(c.stats()),
            Store::Dtx(c) => Some(c.stats()),
        }
    }

    /// The rTX client (rtx only).
    pub(crate) fn tx_client(&mut self) -> Option<&mut TxClient> {
        match self {
            Store::Rtx(c) => Some(c),
            Store::Optimal(_) | Store::Dtx(_) => None,
        }
    }

    /// rtx's meta hints.
    pub(crate) fn hints(&self) -> Option<&Arc<HintCache>> {
        match self {
            Store::Rtx(c) => Some(c.hints()),
            Store::Optimal(_) | Store::Dtx(_) => None,
        }
    }

    /// Shares rtx's meta hints with other clients of the process.
    pub(crate) fn share_hints(&mut self, hints: Arc<HintCache>) {
        if let Store::Rtx(c) = self {
            c.share_hints(hints);
        }
    }

    /// Follows a process's reclaims (rtx: nodes are transactional objects,
    /// whose blocks a reclaim hands out).
    pub(crate) fn follow_reclaims(&mut self, view: Arc<txn::ReclaimView>) {
        if let Store::Rtx(c) = self {
            c.follow_reclaims(view);
        }
    }

    /// Bounds the variant's own waits on a held lock.
    pub(crate) fn set_attempts_max(&mut self, attempts: u32) {
        if let Store::Optimal(o) = self {
            o.set_lock_attempts_max(attempts);
        }
    }

    /// Sends what the client owes (dtx: its last write's release).
    pub(crate) async fn flush(&mut self) -> Result<(), IndexError> {
        match self {
            Store::Optimal(_) | Store::Rtx(_) => Ok(()),
            Store::Dtx(c) => Ok(c.release_pending().await?),
        }
    }

    /// Bytes one node costs in DM.
    pub(crate) fn node_bytes(&self) -> u64 {
        match self {
            Store::Optimal(_) => NODE_BYTES as u64,
            Store::Rtx(_) => NODE_BYTES as u64 + META_BYTES,
            Store::Dtx(_) => dtx::RECORD_BYTES,
        }
    }

    /// Takes chunks for `n` nodes of one level of a bulk load and lays them
    /// out back to back.
    pub(crate) async fn place(&mut self, heap: Heap, n: usize) -> Result<Placement, IndexError> {
        match self {
            Store::Optimal(o) => o.place(n).await,
            Store::Rtx(c) => rtx::place(c, heap, n).await,
            Store::Dtx(c) => dtx::place(c, heap, n).await,
        }
    }

    /// Appends what a bulk load writes at a node's [`Placement::data`].
    pub(crate) fn push_node_image(&self, out: &mut Vec<u8>, node: &Node) {
        match self {
            Store::Optimal(_) | Store::Rtx(_) => out.extend_from_slice(&node.encode()),
            Store::Dtx(_) => dtx::push_image(out, node),
        }
    }

    /// Where node `r`'s bytes are now (exclusive bulk loading only).
    pub(crate) async fn node_data_addr(&mut self, r: NodeRef) -> Result<GlobalAddr, IndexError> {
        match self {
            Store::Optimal(_) => Ok(GlobalAddr::from_raw(r)),
            Store::Rtx(c) => rtx::node_data_addr(c, r).await,
            Store::Dtx(_) => Ok(dtx::node_data_addr(r)),
        }
    }

    /// The objects `nodes` are, with their data bytes, for the replica
    /// comparison (`txn::replicas`); none for optimal.
    pub(crate) fn objects(&self, nodes: &[NodeRef]) -> HashMap<GlobalAddr, u32> {
        match self {
            Store::Optimal(_) => HashMap::new(),
            Store::Rtx(_) => rtx::objects(nodes),
            Store::Dtx(_) => dtx::objects(nodes),
        }
    }

    /// Frees the stale lock words among `refs` after a promotion (dtx: see
    /// `DtxClient::free_stale_locks`); returns how many. Nothing for the
    /// other variants: rtx's lock words are rebuilt with the metas, and an
    /// optimal index is never promoted.
    pub(crate) async fn free_stale_locks(&mut self, refs: &[NodeRef]) -> Result<u32, IndexError> {
        match self {
            Store::Optimal(_) | Store::Rtx(_) => Ok(0),
            Store::Dtx(c) => {
                let records: Vec<_> = refs.iter().map(|&r| dtx::record(r)).collect();
                Ok(c.free_stale_locks(&records).await?)
            }
        }
    }

    /// Whether a re-replication's copy can leave this variant's lock words
    /// stale on a backup that a promotion then makes primary (dtx: its lock
    /// words live in the records, which nothing rebuilds; rtx's are rebuilt
    /// with the metas, and an optimal index is never promoted).
    pub(crate) fn locks_go_stale(&self) -> bool {
        matches!(self, Store::Dtx(_))
    }

    /// Whether this variant repairs expired locks online (rtx).
    pub(crate) fn repairs_online(&self) -> bool {
        matches!(self, Store::Rtx(_))
    }

    /// Repairs the expired locks among `refs`; returns how many.
    pub(crate) async fn repair_expired(&mut self, refs: &[NodeRef]) -> Result<usize, IndexError> {
        match self {
            // DTX has no online repair: recovery rolls dead owners' logs.
            Store::Optimal(_) | Store::Dtx(_) => Ok(0),
            Store::Rtx(c) => rtx::repair_expired(c, refs).await,
        }
    }

    /// Reports every lock held (the checker runs quiescent).
    pub(crate) async fn check_locks(
        &mut self,
        nodes: &[NodeRef],
        report: &mut CheckReport,
    ) -> Result<(), IndexError> {
        match self {
            Store::Optimal(o) => o.check_locks(report).await,
            Store::Rtx(c) => rtx::check_locks(c, nodes, report).await,
            Store::Dtx(c) => dtx::check_locks(c, nodes, report).await,
        }
    }

    /// Which variant.
    pub fn variant(&self) -> Variant {
        match self {
            Store::Optimal(_) => Variant::Optimal,
            Store::Rtx(_) => Variant::Rtx,
            Store::Dtx(_) => Variant::Dtx,
        }
    }

    /// The owner id the client runs as.
    pub fn owner(&self) -> u16 {
        match self {
            Store::Optimal(o) => o.owner,
            Store::Rtx(c) => c.owner(),
            Store::Dtx(c) => c.owner(),
        }
    }

    /// Reads a node without locking it.
    pub(crate) async fn read_node(&mut self, r: NodeRef) -> Result<Node, IndexError> {
        self.read_leaf_hinted(r, None).await
    }

    /// Reads a leaf without locking it, with `hint` (its hint slot in the
    /// cached parent, `cache.rs`) as the first place to look and kept up
    /// to date.
    pub(crate) async fn read_leaf_hinted(
        &mut self,
        r: NodeRef,
        hint: Option<&HintSlot>,
    ) -> Result<Node, IndexError> {
        match self {
            Store::Optimal(o) => o.read_node(r).await,
            Store::Rtx(c) => rtx::read_node(c, r, hint).await,
            Store::Dtx(c) => dtx::read_node(c, r).await,
        }
    }

    /// Whether the last commit was cut off once it may have taken effect
    /// (and forgets it): rtx, at or after its commit point
    /// ([`TxClient::take_commit_in_doubt`]); optimal, inside its one
    /// write-back batch.
    pub(crate) fn take_commit_in_doubt(&mut self) -> bool {
        match self {
            Store::Optimal(o) => std::mem::take(&mut o.commit_in_doubt),
            Store::Rtx(c) => c.take_commit_in_doubt(),
            Store::Dtx(c) => c.take_commit_in_doubt(),
        }
    }

    /// Whether cached parents keep their leaves' hints (see [`super::BTree`]).
    pub(crate) fn keeps_leaf_hints(&self) -> bool {
        matches!(self, Store::Rtx(_))
    }

    /// Points leaf `r`'s hint slot where this client's commit just moved
    /// the block: the commit put the meta hint, so reading it costs no miss.
    pub(crate) fn refresh_leaf_hint(&self, r: NodeRef, slot: &HintSlot) {
        if let Store::Rtx(c) = self {
            if let Some(h) = c.hints().get(GlobalAddr::from_raw(r)) {
                slot.put(h);
            }
        }
    }

    /// Starts loading leaf `r`'s meta and the block `hint` points at into
    /// the CPU cache as soon as the descent knows them, so that their misses
    /// overlap with the work before the batch that reads them (the leaf's
    /// lookup or lock batch); a stale hint wastes the block's prefetch.
    pub(crate) fn prefetch_leaf(&self, r: NodeRef, hint: Option<MetaHint>) {
        if let Store::Rtx(c) = self {
            let meta = GlobalAddr::from_raw(r);
            c.fabric_ref().prefetch(meta, META_BYTES as u32);
            if let Some(h) = hint {
                c.fabric_ref()
                    .prefetch(GlobalAddr::new(meta.region(), h.dptr.offset()), NODE_BYTES as u32);
            }
        }
    }

    /// Starts a modification.
    pub(crate) fn begin(&mut self) -> NodeTxn<'_> {
        match self {
            Store::Optimal(o) => NodeTxn::Optimal(OptimalTxn::new(o)),
            Store::Rtx(c) => NodeTxn::Rtx(RtxTxn::new(c.begin())),
            Store::Dtx(c) => NodeTxn::Dtx(DtxTxn::new(c.begin())),
        }
    }

    /// The fabric client (for counters).
    pub fn fabric(&mut self) -> &mut fabric::Client {
        match self {
            Store::Optimal(o) => &mut o.fabric,
            Store::Rtx(c) => c.fabric(),
            Store::Dtx(c) => c.fabric(),
        }
    }
}

/// One modification of the tree.
pub(crate) enum NodeTxn<'a> {
    Optimal(OptimalTxn<'a>),
    Rtx(RtxTxn<'a>),
    Dtx(DtxTxn<'a>),
}

impl NodeTxn<'_> {
    /// Locks (optimal) or pre-locks (rtx) a leaf and returns it. `hint`
    /// is the leaf's hint from its cached parent, if any (rtx).
    pub async fn lock_leaf(&mut self, r: NodeRef, hint: Option<MetaHint>) -> Result<Node, Step> {
        match self {
            NodeTxn::Optimal(t) => t.lock(r).await,
            NodeTxn::Rtx(t) => t.lock(r, hint).await,
            NodeTxn::Dtx(t) => t.lock(r).await,
        }
    }

    /// Reads an inner node this modification will change.
    pub async fn read_for_update(&mut self, r: NodeRef) -> Result<Node, Step> {
        match self {
            NodeTxn::Optimal(t) => t.lock(r).await,
            NodeTxn::Rtx(t) => t.read_for_update(r).await,
            NodeTxn::Dtx(t) => t.read_for_update(r).await,
        }
    }

    /// Writes back one leaf entry (optimal writes just the entry; rtx
    /// copies the node with the entry patched in).
    pub async fn write_entry(&mut self, r: NodeRef, node: &Node, slot: usize) -> Result<(), Step> {
        match self {
            NodeTxn::Optimal(t) => {
                t.write_entry(r, node, slot);
                Ok(())
            }
            NodeTxn::Rtx(t) => t.write_entry(r, node, slot).await,
            NodeTxn::Dtx(t) => t.write_entry(r, node, slot).await,
        }
    }

    /// Writes back a whole node.
    pub async fn write_node(&mut self, r: NodeRef, node: &Node) -> Result<(), Step> {
        match self {
            NodeTxn::Optimal(t) => {
                t.write_node(r, node);
                Ok(())
            }
            NodeTxn::Rtx(t) => t.write_node(r, node).await,
            NodeTxn::Dtx(t) => t.write_node(r, node).await,
        }
    }

    /// Creates a node.
    pub async fn create(&mut self, node: &Node) -> Result<NodeRef, Step> {
        match self {
            NodeTxn::Optimal(t) => t.create(node).await,
            NodeTxn::Rtx(t) => t.create(node).await,
            NodeTxn::Dtx(t) => t.create(node).await,
        }
    }

    /// Makes the modification visible and releases what it holds.
    pub async fn commit(self) -> Result<(), Step> {
        match self {
            NodeTxn::Optimal(t) => t.commit().await,
            NodeTxn::Rtx(t) => t.commit().await,
            NodeTxn::Dtx(t) => t.commit().await,
        }
    }

    /// Abandons the modification.
    pub async fn rollback(self) -> Result<(), IndexError> {
        match self {
            NodeTxn::Optimal(t) => t.rollback().await,
            NodeTxn::Rtx(t) => t.rollback().await,
            NodeTxn::Dtx(t) => t.rollback().await,
        }
    }
}
