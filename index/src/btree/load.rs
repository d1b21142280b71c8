//! Bulk load: builds a tree from sorted entries bottom-up, writing nodes in
//! 1 MiB batches, for benchmarks that need millions of keys in seconds.
//!
//! Leaves are filled to `fill` of their 40 slots, internal nodes to `fill`
//! of their 61 children; each level's nodes sit back to back in chunks taken
//! at once. The top node is written over the (empty) root, whose ref never
//! changes. Loading is exclusive: no other client may use the tree meanwhile.

use fabric::{Batch, GlobalAddr, Replica, VERB_BYTES_MAX};

use super::node::{Node, NodeRef, INTERNAL_SLOTS, KEY_MAX, KEY_MIN, LEAF_SLOTS, NODE_BYTES};
use super::{BTree, IndexError};

/// Nodes written per round trip: one WRITE of `VERB_BYTES_MAX`, for the
/// largest node image (a dtx record: the node behind its two header words).
const NODES_PER_WRITE: usize =
    VERB_BYTES_MAX as usize / (NODE_BYTES + txn::dtx::record::HEADER_BYTES as usize);

/// What a bulk load built.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct LoadReport {
    /// Entries loaded.
    pub keys: u64,
    /// Nodes written (leaves and internal).
    pub nodes: u64,
    /// Levels of the tree (1 = a root leaf).
    pub levels: u8,
    /// DM bytes the nodes occupy (with their metas for rtx), per key.
    pub bytes_per_key: f64,
}

/// Where a level's nodes go (`Store::place`).
pub(crate) struct Placement {
    /// Node i's ref.
    pub refs: Vec<NodeRef>,
    /// Where node i's bytes go (the ref itself for optimal; the data block
    /// for rtx). Nodes of one placement lie back to back.
    pub data: Vec<GlobalAddr>,
}

impl BTree {
    /// Loads `entries` (strictly ascending keys, none reserved) into this
    /// empty tree. `progress` is called with the number of entries placed so
    /// far, about once per megabyte written.
    pub async fn bulk_load(
        &mut self,
        entries: &[(u64, u64)],
        fill: f64,
        mut progress: impl FnMut(u64),
    ) -> Result<LoadReport, IndexError> {
        let root = self.store.read_node(self.root).await?;
        if !root.is_leaf() || root.slots.iter().any(Option::is_some) {
            return Err(IndexError::Layout("bulk load needs an empty tree".into()));
        }
        if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(IndexError::Layout(
                "bulk load needs strictly ascending keys".into(),
            ));
        }
        if let Some(&(k, _)) = entries.iter().find(|(k, _)| *k == KEY_MIN || *k == KEY_MAX) {
            return Err(IndexError::ReservedKey(k));
        }
        let fill = fill.clamp(0.1, 1.0);
        let per_leaf = ((LEAF_SLOTS as f64 * fill) as usize).max(1);
        let per_internal = (((INTERNAL_SLOTS + 1) as f64 * fill) as usize).max(2);
        let mut report = LoadReport {
            keys: entries.len() as u64,
            levels: 1,
            ..LoadReport::default()
        };

        // Leaves.
        let groups: Vec<&[(u64, u64)]> = entries.chunks(per_leaf).collect();
        if groups.len() <= 1 {
            let mut leaf = Node::leaf(KEY_MIN, KEY_MAX);
            for (i, e) in entries.iter().enumerate() {
                leaf.slots[i] = Some(*e);
            }
            self.write_root(&leaf).await?;
            report.nodes = 1;
            report.bytes_per_key = self.node_bytes() as f64 / entries.len().max(1) as f64;
            progress(entries.len() as u64);
            return Ok(report);
        }
        let mut level: Vec<(u64, NodeRef)> = Vec::with_capacity(groups.len());
        let place = self.place(groups.len()).await?;
        let mut nodes = Vec::with_capacity(NODES_PER_WRITE);
        let mut loaded = 0u64;
        for (i, g) in groups.iter().enumerate() {
            let lo = if i == 0 { KEY_MIN } else { g[0].0 };
            let hi = groups.get(i + 1).map_or(KEY_MAX, |n| n[0].0);
            let mut leaf = Node::leaf(lo, hi);
            leaf.sibling = place.refs.get(i + 1).copied().unwrap_or(0);
            for (s, e) in g.iter().enumerate() {
                leaf.slots[s] = Some(*e);
            }
            nodes.push(leaf);
            level.push((lo, place.refs[i]));
            loaded += g.len() as u64;
            if nodes.len() == NODES_PER_WRITE || i + 1 == groups.len() {
                self.write_run(&place, i + 1 - nodes.len(), &nodes).await?;
                nodes.clear();
                progress(loaded);
            }
        }
        report.nodes += groups.len() as u64;

        // Internal levels, until the root can take the rest.
        let mut height = 1u8;
        while level.len() > INTERNAL_SLOTS + 1 {
            let parents: Vec<&[(u64, NodeRef)]> = level.chunks(per_internal).collect();
            let place = self.place(parents.len()).await?;
            let mut next = Vec::with_capacity(parents.len());
            for (i, g) in parents.iter().enumerate() {
                let lo = g[0].0;
                let hi = parents.get(i + 1).map_or(KEY_MAX, |n| n[0].0);
                let mut n = Node::internal(height, lo, hi, g[0].1, g[1..].to_vec());
                n.sibling = place.refs.get(i + 1).copied().unwrap_or(0);
                nodes.push(n);
                next.push((lo, place.refs[i]));
                if nodes.len() == NODES_PER_WRITE || i + 1 == parents.len() {
                    self.write_run(&place, i + 1 - nodes.len(), &nodes).await?;
                    nodes.clear();
                }
            }
            report.nodes += parents.len() as u64;
            level = next;
            height += 1;
        }
        let root = Node::internal(height, KEY_MIN, KEY_MAX, level[0].1, level[1..].to_vec());
        self.write_root(&root).await?;
        report.nodes += 1;
        report.levels = height + 1;
        report.bytes_per_key = (report.nodes * self.node_bytes()) as f64 / report.keys as f64;
        self.cache = Default::default();
        Ok(report)
    }

    /// Bytes one node costs in DM (its meta included for rtx).
    fn node_bytes(&self) -> u64 {
        self.store.node_bytes()
    }

    /// Takes chunks for `n` nodes of one level and lays them out back to
    /// back (`Store::place`).
    async fn place(&mut self, n: usize) -> Result<Placement, IndexError> {
        // Chunks are multiples of 4 KiB: node-sized blocks lie back to back
        // across them, none straddling two.
        const _: () = assert!(4096 % NODE_BYTES == 0, "chunks are multiples of 4 KiB");
        let heap = self.heap;
        self.store.place(heap, n).await
    }

    /// Writes `nodes`, which are nodes `first..` of `place`, contiguous.
    async fn write_run(&mut self, place: &Placement, first: usize, nodes: &[Node]) -> Result<(), IndexError> {
        let mut bytes = Vec::with_capacity(nodes.len() * NODE_BYTES);
        for n in nodes {
            self.store.push_node_image(&mut bytes, n);
        }
        let mut batch = Batch::new();
        let h = batch.on(Replica::All).write(place.data[first], &bytes);
        self.store.fabric().execute(&mut batch).await?;
        batch.done(h).map_err(IndexError::Verb)
    }

    /// Writes `node` over the root's current bytes (exclusive loading only).
    async fn write_root(&mut self, node: &Node) -> Result<(), IndexError> {
        let at = self.store.node_data_addr(self.root).await?;
        let mut batch = Batch::new();
        let h = batch.on(Replica::All).write(at, &node.encode());
        self.store.fabric().execute(&mut batch).await?;
        batch.done(h).map_err(IndexError::Verb)
    }
}
