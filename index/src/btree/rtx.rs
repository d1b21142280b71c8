//! The `rtx` variant: every node is a TXObj, and every insert (splits
//! included, up to the root) is one repairable transaction. The leaf is
//! pre-locked during execution (Opt2), as the paper does for Sherman, so
//! concurrent writers of one leaf wait instead of aborting at commit.

use std::collections::HashMap;

use fabric::{Batch, GlobalAddr, Replica, VERB_BYTES_MAX};
use txn::{DataPtr, Heap, HintSlot, LockWord, MetaHint, RawObj, Tx, TxClient, TxError, META_BYTES};

use super::check::{read_heads, CheckReport};
use super::load::Placement;
use super::node::{Node, NodeRef, Torn, NODE_BYTES};
use super::{IndexError, Step};

/// Reads of a node that keep coming back torn (or whose pointer keeps
/// moving) before giving up. A committed node block is never written again
/// until it is freed and reused, and `read_node` validates it by the meta
/// read after it, so a torn block that validates is a corrupt node.
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

/// What a lock-free read knows of a node's meta before it reads the block.
#[derive(Clone, Copy)]
struct Known {
    dptr: DataPtr,
    /// The version seen unlocked with `dptr`, if it was.
    hint: Option<MetaHint>,
    /// `dptr` was read by this call, a round trip ago.
    fresh: bool,
}

impl Known {
    fn read(lock: LockWord, dptr: DataPtr) -> Known {
        Known {
            dptr,
            hint: MetaHint::from_meta(lock, dptr),
            fresh: true,
        }
    }

    /// Did the meta read after the block prove the block committed data?
    fn validated_by(self, lock: LockWord, dptr: DataPtr) -> bool {
        match self.hint {
            // The hint rule (`txn::hint`): any age.
            Some(h) if h.validates(lock, dptr) => true,
            // A pointer alone, unchanged across one round trip: its 16-bit
            // version cannot wrap that fast.
            _ => self.fresh && dptr == self.dptr,
        }
    }
}

fn meta_words(b: &[u8]) -> (LockWord, DataPtr) {
    (
        LockWord::from_raw(fabric::le_word(b, 0)),
        DataPtr::from_raw(fabric::le_word(b, 8)),
    )
}

/// Reads a node without a transaction: its block, then its meta again in
/// the same batch (verbs to one memory node run in order), again while
/// the meta does not validate the block or the block reads torn.
///
/// Where the block is comes from the client's meta hint (`txn::hint`): with
/// one that is still current, a lookup is one round trip, READ 1 KiB + 16;
/// without one, or with a stale one, the meta is read first (one round trip
/// more) and the block is validated by its pointer being unchanged a round
/// trip later. Every meta read unlocked becomes the hint.
///
/// Why validate after the READ at all: without it, a commit moved the
/// pointer and freed the old block, which the committer's next transaction
/// may have filled with data it never committed (or with another node), and
/// the reader returned it as this node. Found by the concurrent model test
/// (`tests/concurrent_model.rs`, scans missing keys); made deterministic in
/// `tests/torn_reads.rs`. Blocks are freed only after the pointer has left
/// them.
///
/// `local`, when given, is the node's hint slot in its cached parent
/// (`cache.rs`): a hint there is used before the process-wide one (it is
/// validated the same way), and the slot gets what this read saw.
pub(crate) async fn read_node(
    c: &mut TxClient,
    r: NodeRef,
    local: Option<&HintSlot>,
) -> Result<Node, IndexError> {
    let mut batch = c.fabric().take_batch();
    let read = read_node_with(c, &mut batch, r, local).await;
    c.fabric().give_batch(batch);
    read
}

async fn read_node_with(
    c: &mut TxClient,
    batch: &mut Batch,
    r: NodeRef,
    local: Option<&HintSlot>,
) -> Result<Node, IndexError> {
    let meta = GlobalAddr::from_raw(r);
    let local_hint = local.and_then(HintSlot::get);
    let cached = local_hint.or_else(|| c.hints().get(meta));
    let mut known = match cached {
        Some(h) => Known {
            dptr: h.dptr,
            hint: Some(h),
            fresh: false,
        },
        None => {
            let h = batch.read(meta, META_BYTES as u32);
            c.fabric().execute(batch).await?;
            let (lock, dptr) = meta_words(batch.read_result(h).map_err(IndexError::Verb)?);
            Known::read(lock, dptr)
        }
    };
    for _ in 0..TORN_READS_MAX {
        batch.clear();
        let block = GlobalAddr::new(meta.region(), known.dptr.offset());
        let h = batch.read(block, NODE_BYTES as u32);
        let again = batch.read(meta, META_BYTES as u32);
        c.fabric().execute(batch).await?;
        let (lock, dptr) = meta_words(batch.read_result(again).map_err(IndexError::Verb)?);
        if known.validated_by(lock, dptr) {
            match Node::decode(batch.read_result(h).map_err(IndexError::Verb)?) {
                Ok(n) => {
                    let seen = MetaHint::from_meta(lock, dptr);
                    if let Some(h) = seen.filter(|&h| Some(h) != cached) {
                        c.hints().put(meta, h);
                    }
                    if let (Some(slot), Some(h)) = (local, seen.filter(|&h| Some(h) != local_hint)) {
                        slot.put(h);
                    }
                    return Ok(n);
                }
                Err(Torn) => tokio::task::yield_now().await,
            }
        }
        // Moved (or the hint is stale): read the block it points to now.
        known = Known::read(lock, dptr);
    }
    Err(IndexError::Torn(r))
}

/// `n` nodes for a bulk load: data blocks back to back in slabs of
/// node-sized blocks (a reclaim reads each chunk as a slab of its own),
/// metas in a run of their own, written at once (unlocked, version 0).
pub(crate) async fn place(c: &mut TxClient, heap: Heap, n: usize) -> Result<Placement, IndexError> {
    let owner = c.owner();
    let chunks = |bytes: u64| bytes.div_ceil(heap.chunk_bytes());
    let fabric = c.fabric();
    let first = heap
        .take_chunks(
            fabric,
            owner,
            chunks(n as u64 * NODE_BYTES as u64),
            txn::ChunkKind::Data {
                block_bytes: NODE_BYTES as u64,
            },
        )
        .await?;
    let data_base = GlobalAddr::new(heap.region(), heap.chunk_offset(first));
    let data: Vec<GlobalAddr> = (0..n).map(|i| data_base.add((i * NODE_BYTES) as u64)).collect();
    let first = heap
        .take_chunks(
            fabric,
            owner,
            chunks(n as u64 * META_BYTES),
            txn::ChunkKind::Metas,
        )
        .await?;
    let meta_base = GlobalAddr::new(heap.region(), heap.chunk_offset(first));
    let refs: Vec<NodeRef> = (0..n)
        .map(|i| meta_base.add(i as u64 * META_BYTES).raw())
        .collect();
    let per_write = VERB_BYTES_MAX as usize / META_BYTES as usize;
    let mut batch = Batch::new();
    for (run, addrs) in data.chunks(per_write).enumerate() {
        let mut bytes = Vec::with_capacity(addrs.len() * META_BYTES as usize);
        for a in addrs {
            bytes.extend_from_slice(&0u64.to_le_bytes());
            bytes.extend_from_slice(&DataPtr::new(0, a.offset()).raw().to_le_bytes());
        }
        batch.clear();
        let h = batch
            .on(Replica::All)
            .write(meta_base.add((run * per_write) as u64 * META_BYTES), &bytes);
        fabric.execute(&mut batch).await?;
        batch.done(h).map_err(IndexError::Verb)?;
    }
    Ok(Placement { refs, data })
}

/// Where node `r`'s data block is now (its meta's pointer).
pub(crate) async fn node_data_addr(c: &mut TxClient, r: NodeRef) -> Result<GlobalAddr, IndexError> {
    let mut batch = Batch::new();
    let h = batch.read(GlobalAddr::from_raw(r).add(txn::DPTR_OFFSET), 8);
    c.fabric().execute(&mut batch).await?;
    let b = batch.read_result(h).map_err(IndexError::Verb)?;
    let dptr = DataPtr::from_raw(fabric::le_word(b, 0));
    Ok(GlobalAddr::new(GlobalAddr::from_raw(r).region(), dptr.offset()))
}

/// The tree's nodes as rTX objects (for the replica comparison).
pub(crate) fn objects(nodes: &[NodeRef]) -> HashMap<GlobalAddr, u32> {
    nodes
        .iter()
        .map(|&r| (GlobalAddr::from_raw(r), NODE_BYTES as u32))
        .collect()
}

/// Repairs every lock among `refs` whose lease expired by `c`'s clock.
pub(crate) async fn repair_expired(c: &mut TxClient, refs: &[NodeRef]) -> Result<usize, IndexError> {
    let mut repaired = 0;
    let mut batch = Batch::new();
    for &r in refs {
        batch.clear();
        let h = batch.read(GlobalAddr::from_raw(r), 8);
        c.fabric().execute(&mut batch).await?;
        let b = batch.read_result(h).map_err(IndexError::Verb)?;
        let lock = LockWord::from_raw(fabric::le_word(b, 0));
        if lock.is_expired(c.now_tick()) && c.repair(obj(r), lock).await? == txn::RepairOutcome::Repaired {
            repaired += 1;
        }
    }
    Ok(repaired)
}

/// Every node among `nodes` whose lock is held is a violation.
pub(crate) async fn check_locks(
    c: &mut TxClient,
    nodes: &[NodeRef],
    report: &mut CheckReport,
) -> Result<(), IndexError> {
    read_heads(c.fabric(), nodes, 8, |r, b| {
        let lock = LockWord::from_raw(fabric::le_word(b, 0));
        if lock.is_locked() {
            report.locks_held += 1;
            report.violations.push(format!("node {r:#x} is locked: {lock:?}"));
        }
    })
    .await
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

    /// Reads the leaf and pre-locks it: lock + data in one batch, with
    /// `hint` (the leaf's hint in its cached parent) or the client's hint
    /// cache saying where the data is; without either, the meta first.
    pub(crate) async fn lock(&mut self, r: NodeRef, hint: Option<MetaHint>) -> Result<Node, Step> {
        let bytes = self.tx.read_locked_hinted(obj(r), hint).await.map_err(step)?;
        // Read under the lock, a torn node means a corrupt pointer: retry
        // (the attempt is rolled back, releasing the lock).
        Node::decode(bytes).map_err(|Torn| Step::Retry { invalidate: None })
    }

    /// Reads a node the transaction may write (validated at commit).
    pub(crate) async fn read_for_update(&mut self, r: NodeRef) -> Result<Node, Step> {
        self.read(r).await
    }

    /// Records a whole-node write (copy-on-write).
    pub(crate) async fn write_node(&mut self, r: NodeRef, node: &Node) -> Result<(), Step> {
        self.tx.write_raw(obj(r), &node.encode()).await.map_err(step)
    }

    /// Records an entry update, still copy-on-write of the whole node: the
    /// block as read under the lock with slot `slot` replaced, which is
    /// what `node.encode()` gives (an entry update keeps the node version
    /// its checks are keyed by) at one entry check instead of every slot's.
    pub(crate) async fn write_entry(&mut self, r: NodeRef, node: &Node, slot: usize) -> Result<(), Step> {
        let entry = Node::entry_bytes(node.slots[slot], node.version);
        let o = obj(r);
        self.tx
            .write_part(o, Node::slot_range(slot).start, &entry)
            .await
            .map_err(step)?;
        if cfg!(debug_assertions) {
            let written = self.tx.read_raw(o).await.map_err(step)?;
            debug_assert_eq!(written, &node.encode()[..], "an entry update changes one slot");
        }
        Ok(())
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
