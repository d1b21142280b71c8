//! The `rtx` variant: every node is a TXObj, and every insert (splits
//! included, up to the root) is one repairable transaction. The leaf is
//! pre-locked during execution (Opt2), as the paper does for Sherman, so
//! concurrent writers of one leaf wait instead of aborting at commit.

use fabric::{Batch, GlobalAddr};
use txn::{DataPtr, RawObj, Tx, TxClient, TxError};

use super::node::{Node, NodeRef, Torn, NODE_BYTES};
use super::{IndexError, Step};

/// Reads of a node that keep coming back torn before giving up. A
/// committed node block is never written again until it is freed and
/// reused, so a torn read means the reader held a stale pointer.
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

/// Reads a node without a transaction: its meta, then its data (two round
/// trips), again while torn.
pub(crate) async fn read_node(c: &mut TxClient, r: NodeRef) -> Result<Node, IndexError> {
    let mut batch = Batch::new();
    let meta = GlobalAddr::from_raw(r);
    for _ in 0..TORN_READS_MAX {
        batch.clear();
        let h = batch.read(meta.add(txn::DPTR_OFFSET), 8);
        c.fabric().execute(&mut batch).await?;
        let dptr = batch.read_result(h).map_err(IndexError::Verb)?;
        let dptr = DataPtr::from_raw(u64::from_le_bytes(dptr.try_into().unwrap_or_default()));
        batch.clear();
        let h = batch.read(GlobalAddr::new(meta.region(), dptr.offset()), NODE_BYTES as u32);
        c.fabric().execute(&mut batch).await?;
        match Node::decode(batch.read_result(h).map_err(IndexError::Verb)?) {
            Ok(n) => return Ok(n),
            Err(Torn) => tokio::task::yield_now().await,
        }
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

    /// Reads the leaf and pre-locks it.
    pub(crate) async fn lock(&mut self, r: NodeRef) -> Result<Node, Step> {
        let node = self.read(r).await?;
        self.tx.lock_now(obj(r)).await.map_err(step)?;
        Ok(node)
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
