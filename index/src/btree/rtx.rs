//! The `rtx` variant: every node is a TXObj, and every insert (splits
//! included, up to the root) is one repairable transaction. The leaf is
//! pre-locked during execution (Opt2), as the paper does for Sherman, so
//! concurrent writers of one leaf wait instead of aborting at commit.

use fabric::{Batch, GlobalAddr};
use txn::{DataPtr, RawObj, Tx, TxClient, TxError};

use super::node::{Node, NodeRef, Torn, NODE_BYTES};
use super::{IndexError, Step};

/// Reads of a node that keep coming back torn (or whose pointer keeps
/// moving) before giving up. A committed node block is never written again
/// until it is freed and reused, and `read_node` validates the pointer, so
/// a torn block under an unchanged pointer is a corrupt node.
pub const TORN_READS_MAX: u32 = 100_000;

fn obj(r: NodeRef) -> RawObj {
    RawObj {
        meta: GlobalAddr::from_raw(r),
        len: NODE_BYTES as u32,
    }
}

fn step(e: TxError) -> Step {
    match e {
        TxError::Abort(_) => Step::Retry { invalidate: None },
        e => Step::Fail(IndexError::Tx(e)),
    }
}

/// Reads a node without a transaction: its data pointer, then its block
/// and the pointer again in one batch (two round trips, READ 8 + 1 KiB +
/// 8), again while the pointer moved or the block reads torn.
///
/// The second pointer READ validates the block READ before it (verbs to one
/// memory node run in order). Without it, a commit between the two round
/// trips moved the pointer and freed the old block, which the committer's
/// next transaction may have filled with data it never committed (or with
/// another node): the reader returned it as this node. Found by the
/// concurrent model test (`tests/concurrent_model.rs`, scans missing keys);
/// made deterministic in `tests/torn_reads.rs`. An unchanged pointer
/// (pointers carry a version, bumped by every install) means the block was
/// this node's committed data throughout: blocks are freed only after the
/// pointer has left them.
pub(crate) async fn read_node(c: &mut TxClient, r: NodeRef) -> Result<Node, IndexError> {
    let mut batch = Batch::new();
    let meta = GlobalAddr::from_raw(r);
    let dptr_addr = meta.add(txn::DPTR_OFFSET);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let h = batch.read(dptr_addr, 8);
    c.fabric().execute(&mut batch).await?;
    let mut dptr = word(batch.read_result(h).map_err(IndexError::Verb)?);
    for _ in 0..TORN_READS_MAX {
        batch.clear();
        let block = GlobalAddr::new(meta.region(), DataPtr::from_raw(dptr).offset());
        let h = batch.read(block, NODE_BYTES as u32);
        let again = batch.read(dptr_addr, 8);
        c.fabric().execute(&mut batch).await?;
        let now = word(batch.read_result(again).map_err(IndexError::Verb)?);
        if now == dptr {
            match Node::decode(batch.read_result(h).map_err(IndexError::Verb)?) {
                Ok(n) => return Ok(n),
                Err(Torn) => tokio::task::yield_now().await,
            }
        }
        // Moved: read the block it points to now (one round trip more).
        dptr = now;
    }
    Err(IndexError::Torn(r))
}

/// A write in progress on an rtx tree: one rTX.
#[derive(Debug)]
pub struct RtxTxn<'a> {
    tx: Tx<'a>,
}

impl<'a> RtxTxn<'a> {
    pub(crate) fn new(tx: Tx<'a>) -> Self {
        RtxTxn { tx }
    }

    async fn read(&mut self, r: NodeRef) -> Result<Node, Step> {
        let bytes = self.tx.read_raw(obj(r)).await.map_err(step)?;
        // A torn node inside a transaction: the pointer it followed was
        // stale, so validation would fail anyway. Abort now.
        Node::decode(bytes).map_err(|Torn| Step::Retry { invalidate: None })
    }

    /// Reads the leaf and pre-locks it (meta, then lock + data in one batch).
    pub(crate) async fn lock(&mut self, r: NodeRef) -> Result<Node, Step> {
        let bytes = self.tx.read_locked(obj(r)).await.map_err(step)?;
        // Read under the lock, a torn node means a corrupt pointer: retry
        // (the attempt is rolled back, releasing the lock).
        Node::decode(bytes).map_err(|Torn| Step::Retry { invalidate: None })
    }

    /// Reads a node the transaction may write (validated at commit).
    pub(crate) async fn read_for_update(&mut self, r: NodeRef) -> Result<Node, Step> {
        self.read(r).await
    }

    /// Records a whole-node write (copy-on-write: entry updates too).
    pub(crate) async fn write_node(&mut self, r: NodeRef, node: &Node) -> Result<(), Step> {
        self.tx.write_raw(obj(r), &node.encode()).await.map_err(step)
    }

    /// A new node, written at commit.
    pub(crate) async fn create(&mut self, node: &Node) -> Result<NodeRef, Step> {
        let o = self.tx.create(&node.encode()).await.map_err(step)?;
        Ok(o.meta().raw())
    }

    pub(crate) async fn commit(self) -> Result<(), Step> {
        self.tx.commit().await.map_err(step)
    }

    pub(crate) async fn rollback(self) -> Result<(), IndexError> {
        self.tx.rollback().await.map_err(IndexError::Tx)
    }
}
