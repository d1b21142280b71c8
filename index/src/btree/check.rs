//! The structural checker: reads the whole tree level by level and reports
//! everything that is not a well-formed, quiescent B-link tree.
//!
//! Per level, the sibling chain must start at `KEY_MIN`, end at `KEY_MAX`
//! and be contiguous (each node's high fence is the next one's low fence).
//! Every node must be consistent (no torn read), at its level, with keys in
//! order inside its fences. Every internal node's children, in order, must
//! be exactly the next level's chain nodes, each with the fences its
//! separators give it: that is "every node referenced by its parent", and
//! with it every key reachable from the root. No lock may be held.

use std::collections::HashMap;

use fabric::GlobalAddr;

use super::node::{Node, NodeRef, KEY_MAX, KEY_MIN};
use super::{BTree, IndexError};

/// Nodes the checker visits at most: a bound on a corrupt chain that loops.
pub const CHECK_NODES_MAX: usize = 50_000_000;

/// What the checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Every entry, in key order.
    pub entries: Vec<(u64, u64)>,
    /// Nodes per level, leaves first.
    pub nodes_per_level: Vec<usize>,
    /// Everything wrong, in words.
    pub violations: Vec<String>,
    /// Locks found held (each also a violation).
    pub locks_held: u64,
    /// Every node of the tree, all levels.
    pub nodes: Vec<NodeRef>,
}

impl CheckReport {
    /// True when nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Nodes in all.
    pub fn nodes(&self) -> usize {
        self.nodes_per_level.iter().sum()
    }
}

impl BTree {
    /// Checks the whole tree (see the module doc). Run it when no client is
    /// writing; concurrent writes show up as violations.
    pub async fn check(&mut self) -> Result<CheckReport, IndexError> {
        let mut report = CheckReport::default();
        let root = self.store.read_node(self.root).await?;
        if root.fence_lo != KEY_MIN || root.fence_hi != KEY_MAX || root.sibling != 0 {
            report.violations.push(format!(
                "root covers [{}, {}) with sibling {:#x}",
                root.fence_lo, root.fence_hi, root.sibling
            ));
        }
        // The chain of each level, from the top.
        let mut chain: Vec<(NodeRef, Node)> = vec![(self.root, root)];
        let mut levels: Vec<Vec<(NodeRef, Node)>> = Vec::new();
        loop {
            let level = chain[0].1.level;
            check_chain(&chain, level, &mut report);
            if level == 0 {
                levels.push(chain);
                break;
            }
            let leftmost = chain[0].1.leftmost;
            let next = self.read_chain(leftmost, &mut report).await?;
            check_children(&chain, &next, &mut report);
            levels.push(chain);
            chain = next;
        }
        for l in levels.iter().rev() {
            report.nodes_per_level.push(l.len());
        }
        let leaves = levels.last().map(Vec::as_slice).unwrap_or_default();
        for (_, leaf) in leaves {
            report.entries.extend(leaf.sorted_entries());
        }
        for w in report.entries.windows(2) {
            if w[0].0 >= w[1].0 {
                report
                    .violations
                    .push(format!("key {} appears twice or out of order", w[1].0));
            }
        }
        let all: Vec<NodeRef> = levels.iter().flatten().map(|(r, _)| *r).collect();
        self.check_locks(&all, &mut report).await?;
        report.nodes = all;
        Ok(report)
    }

    /// The rtx objects the tree is made of now, each with the bytes of its
    /// data: every node reachable from the root (see
    /// [`crate::hash::HashTable::objects`] for why a checker wants them).
    /// Empty for an optimal tree (it has no objects). Run it quiescent, as
    /// [`BTree::check`].
    pub async fn objects(&mut self) -> Result<HashMap<GlobalAddr, u32>, IndexError> {
        let report = self.check().await?;
        Ok(self.objects_in(&report))
    }

    /// [`BTree::objects`] from a [`BTree::check`] already made.
    pub fn objects_in(&self, report: &CheckReport) -> HashMap<GlobalAddr, u32> {
        self.store.objects(&report.nodes)
    }

    /// After a promotion, once every DTX log is finished: frees every lock
    /// word still held on the new primary (a dtx tree's: stale words a
    /// re-replication copied; see `txn::dtx::DtxClient::free_stale_locks`).
    /// Returns the locks freed; 0 for the other variants. Only for a
    /// promoter, with nobody else acting on the region.
    pub async fn free_stale_locks(&mut self) -> Result<u32, IndexError> {
        if !self.store.locks_go_stale() {
            return Ok(0);
        }
        let refs = self.node_refs().await?;
        self.store.free_stale_locks(&refs).await
    }

    /// Meets every lock in the tree once: each lock whose lease has expired
    /// (by this client's clock) is repaired, as any client that touched that
    /// node would. rTX repairs on demand, so a node no client touches keeps
    /// a dead owner's lock until someone does; this is that someone (the
    /// recovery module's sweep, or a checker before `check`). Returns the
    /// locks repaired. The optimal variant has nothing to repair with.
    pub async fn repair_expired_locks(&mut self) -> Result<usize, IndexError> {
        if !self.store.repairs_online() {
            return Ok(0);
        }
        let refs = self.node_refs().await?;
        self.store.repair_expired(&refs).await
    }

    /// Every node reachable from the root, level by level (each level's
    /// chain read whole).
    async fn node_refs(&mut self) -> Result<Vec<NodeRef>, IndexError> {
        let mut refs = Vec::new();
        let mut scratch = CheckReport::default();
        let mut r = self.root;
        loop {
            let chain = self.read_chain(r, &mut scratch).await?;
            refs.extend(chain.iter().map(|(r, _)| *r));
            match chain.first() {
                Some((_, n)) if !n.is_leaf() => r = n.leftmost,
                _ => break,
            }
        }
        Ok(refs)
    }

    async fn read_chain(
        &mut self,
        first: NodeRef,
        report: &mut CheckReport,
    ) -> Result<Vec<(NodeRef, Node)>, IndexError> {
        let mut chain = Vec::new();
        let mut r = first;
        while r != 0 {
            if chain.len() >= CHECK_NODES_MAX {
                report
                    .violations
                    .push("sibling chain longer than the checker's bound (a loop?)".into());
                break;
            }
            let node = self.store.read_node(r).await?;
            let next = node.sibling;
            chain.push((r, node));
            r = next;
        }
        Ok(chain)
    }

    async fn check_locks(&mut self, nodes: &[NodeRef], report: &mut CheckReport) -> Result<(), IndexError> {
        self.store.check_locks(nodes, report).await
    }
}

/// Reads the first `bytes` of every node among `nodes` (its lock word,
/// and for dtx its version word), 1,024 nodes per round trip, and hands
/// each to `each`: the variants' lock checks.
pub(crate) async fn read_heads(
    fabric: &mut fabric::Client,
    nodes: &[NodeRef],
    bytes: u32,
    mut each: impl FnMut(NodeRef, &[u8]),
) -> Result<(), IndexError> {
    let mut batch = fabric::Batch::new();
    for chunk in nodes.chunks(1024) {
        batch.clear();
        let handles: Vec<_> = chunk
            .iter()
            .map(|&r| batch.read(GlobalAddr::from_raw(r), bytes))
            .collect();
        fabric.execute(&mut batch).await?;
        for (&r, h) in chunk.iter().zip(handles) {
            each(r, batch.read_result(h).map_err(IndexError::Verb)?);
        }
    }
    Ok(())
}

fn check_chain(chain: &[(NodeRef, Node)], level: u8, report: &mut CheckReport) {
    if chain[0].1.fence_lo != KEY_MIN {
        report.violations.push(format!(
            "level {level} starts at {} instead of the minimum",
            chain[0].1.fence_lo
        ));
    }
    if let Some((r, last)) = chain.last() {
        if last.fence_hi != KEY_MAX {
            report.violations.push(format!(
                "level {level} ends at {r:#x} with fence {} instead of the maximum",
                last.fence_hi
            ));
        }
    }
    for w in chain.windows(2) {
        if w[0].1.fence_hi != w[1].1.fence_lo {
            report.violations.push(format!(
                "level {level}: {:#x} ends at {} but its sibling {:#x} starts at {}",
                w[0].0, w[0].1.fence_hi, w[1].0, w[1].1.fence_lo
            ));
        }
    }
    for (r, n) in chain {
        if n.level != level {
            report.violations.push(format!(
                "node {r:#x} has level {} on level {level}'s chain",
                n.level
            ));
        }
        if n.fence_lo >= n.fence_hi {
            report.violations.push(format!(
                "node {r:#x} has empty fences [{}, {})",
                n.fence_lo, n.fence_hi
            ));
        }
        let keys = n.keys();
        if keys.iter().any(|&k| !n.covers(k)) {
            report.violations.push(format!(
                "node {r:#x} holds keys outside [{}, {})",
                n.fence_lo, n.fence_hi
            ));
        }
        if !n.is_leaf() && keys.windows(2).any(|w| w[0] >= w[1]) {
            report
                .violations
                .push(format!("internal node {r:#x} has unsorted separators"));
        }
        if !n.is_leaf() && keys.first() == Some(&n.fence_lo) {
            report.violations.push(format!(
                "internal node {r:#x} has a separator equal to its low fence"
            ));
        }
    }
}

/// The children of `parents`, in order, must be exactly `children` with the
/// fences their separators give them.
fn check_children(parents: &[(NodeRef, Node)], children: &[(NodeRef, Node)], report: &mut CheckReport) {
    let mut expected: Vec<(NodeRef, u64, u64)> = Vec::new();
    for (_, p) in parents {
        let mut lo = p.fence_lo;
        let mut child = p.leftmost;
        for &(k, c) in &p.children {
            expected.push((child, lo, k));
            lo = k;
            child = c;
        }
        expected.push((child, lo, p.fence_hi));
    }
    if expected.len() != children.len() {
        report.violations.push(format!(
            "level {}: parents reference {} children but the chain holds {} nodes (a split not linked into its parent?)",
            children.first().map_or(0, |c| c.1.level),
            expected.len(),
            children.len()
        ));
    }
    for ((r, n), &(er, lo, hi)) in children.iter().zip(&expected) {
        if *r != er {
            report.violations.push(format!(
                "chain node {r:#x} is not the child {er:#x} its parent names there"
            ));
            break;
        }
        if n.fence_lo != lo || n.fence_hi != hi {
            report.violations.push(format!(
                "node {r:#x} covers [{}, {}) but its parent gives it [{lo}, {hi})",
                n.fence_lo, n.fence_hi
            ));
        }
    }
}
