//! The `dtx` variant: the FORD-style baseline. Every node is a DTX record
//! (two header words, then the 1 KiB node in place), and every insert
//! (splits included, up to the root) is one DTX transaction: the leaf
//! locked and read in one round trip, parents locked the same way when a
//! split reaches them, the changed bytes written in place at commit behind
//! undo images on every replica, the release riding the next batch.
//!
//! Locking is no-wait: a leaf another writer holds makes this attempt back
//! off and try the lock again (it holds nothing else yet, so this is the
//! same as aborting and retrying); a parent found held aborts the attempt.
//! Nobody acts on another owner's lock, expired or not: a dead writer's
//! nodes stay locked until recovery rolls its log back
//! (`DtxClient::finish_owner_log`).

use std::collections::HashMap;

use fabric::{GlobalAddr, VERB_BYTES_MAX};
use txn::dtx::record::{self, Record, Version};
use txn::dtx::{DtxClient, DtxTx};
use txn::{AbortReason, Heap, LockWord, TxError};

use super::check::{read_heads, CheckReport};
use super::load::Placement;
use super::node::{Node, NodeRef, Torn, NODE_BYTES};
use super::{IndexError, Step};

/// Reads of a node that keep finding it invisible or torn before a lookup
/// gives up: a node is invisible for one commit round trip of its writer,
/// so only a writer stopped inside its commit (awaiting recovery) keeps it
/// so for long.
pub const INVISIBLE_ROUNDS_MAX: u32 = 100_000;
/// Tries of a contended leaf lock (with backoff, up to `backoff_max` each;
/// fewer if the client's `TxConfig::attempts_max` says so) before the
/// operation reports the leaf blocked.
pub const LOCK_TRIES_MAX: u32 = 10_000;

/// Bytes a node's record takes: header and node, 16-byte aligned.
pub(crate) const RECORD_BYTES: u64 = record::HEADER_BYTES + NODE_BYTES as u64;
const _: () = assert!(RECORD_BYTES % record::RECORD_ALIGN == 0);

pub(crate) fn record(r: NodeRef) -> Record {
    Record::new(GlobalAddr::from_raw(r), NODE_BYTES as u32)
}

fn step(e: TxError) -> Step {
    match e {
        TxError::Abort(_) => Step::Retry { invalidate: None },
        e => Step::Fail(IndexError::Tx(e)),
    }
}

/// A new tree's root record.
pub(crate) async fn create_root(c: &mut DtxClient, root: &Node) -> Result<NodeRef, IndexError> {
    Ok(c.create_raw(&root.encode()).await?.addr.raw())
}

/// Reads a node without a lock: one round trip (the record, then its
/// version word again), again while it is invisible.
pub(crate) async fn read_node(c: &mut DtxClient, r: NodeRef) -> Result<Node, IndexError> {
    for round in 0..INVISIBLE_ROUNDS_MAX {
        match c.read_record(record(r)).await {
            Ok((_, bytes)) => match Node::decode(&bytes) {
                Ok(n) => return Ok(n),
                // Read at one visible version before and after: a torn
                // node there is corrupt, unless the record is being
                // created (never: creation precedes any reference).
                Err(Torn) => return Err(IndexError::Torn(r)),
            },
            Err(TxError::Abort(AbortReason::Locked)) => {
                if round % 64 == 63 {
                    tokio::time::sleep(std::time::Duration::from_micros(100)).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            Err(e) => return Err(IndexError::Tx(e)),
        }
    }
    // Invisible all along: its writer stopped inside its commit (until
    // recovery rolls its log) or never sent its release.
    Err(IndexError::Blocked(r))
}

/// `n` records for a bulk load, back to back in raw chunks (free, version
/// 0, written with the nodes: [`push_image`]).
pub(crate) async fn place(c: &mut DtxClient, heap: Heap, n: usize) -> Result<Placement, IndexError> {
    let bytes = n as u64 * RECORD_BYTES;
    let owner = c.owner();
    let first = heap
        .take_chunks(
            c.fabric(),
            owner,
            bytes.div_ceil(heap.chunk_bytes()),
            txn::ChunkKind::Raw,
        )
        .await?;
    let base = GlobalAddr::new(heap.region(), heap.chunk_offset(first));
    let data: Vec<GlobalAddr> = (0..n).map(|i| base.add(i as u64 * RECORD_BYTES)).collect();
    debug_assert!(RECORD_BYTES <= u64::from(VERB_BYTES_MAX));
    Ok(Placement {
        refs: data.iter().map(|a| a.raw()).collect(),
        data,
    })
}

/// A node's bytes as a bulk load writes them: a created record.
pub(crate) fn push_image(out: &mut Vec<u8>, node: &Node) {
    out.extend_from_slice(&record::created_header(0));
    out.extend_from_slice(&node.encode());
}

/// Where node `r`'s data is (in place, behind its header).
pub(crate) fn node_data_addr(r: NodeRef) -> GlobalAddr {
    record(r).data_addr()
}

/// The records `nodes` are, for the replica comparison: not compared yet
/// (DTX under memory-node faults is not built).
pub(crate) fn objects(_nodes: &[NodeRef]) -> HashMap<GlobalAddr, u32> {
    HashMap::new()
}

/// Every node among `nodes` locked or invisible is a violation.
pub(crate) async fn check_locks(
    c: &mut DtxClient,
    nodes: &[NodeRef],
    report: &mut CheckReport,
) -> Result<(), IndexError> {
    read_heads(c.fabric(), nodes, record::HEADER_BYTES as u32, |r, b| {
        let word = |at: usize| fabric::le_word(b, at);
        let lock = LockWord::from_raw(word(0));
        if word(0) != record::FREE {
            report.locks_held += 1;
            report.violations.push(format!("node {r:#x} is locked: {lock:?}"));
        }
        if let Version::Invisible(by) = Version::from_raw(word(8)) {
            report
                .violations
                .push(format!("node {r:#x} is invisible, written by {by:?}"));
        }
    })
    .await
}

/// A write in progress on a dtx tree: one DTX transaction.
#[derive(Debug)]
pub struct DtxTxn<'a> {
    tx: DtxTx<'a>,
}

impl<'a> DtxTxn<'a> {
    pub(crate) fn new(tx: DtxTx<'a>) -> Self {
        DtxTxn { tx }
    }

    /// Locks and reads the leaf in one round trip; a leaf held by another
    /// writer is tried again after a backoff (nothing else is held yet).
    pub(crate) async fn lock(&mut self, r: NodeRef) -> Result<Node, Step> {
        let tries = self.tx.client().config().attempts_max.clamp(1, LOCK_TRIES_MAX);
        for attempt in 1..=tries {
            match self.tx.read_for_update(record(r)).await {
                Ok(bytes) => {
                    return Node::decode(bytes).map_err(|Torn| {
                        Step::Fail(IndexError::Layout(format!("node {r:#x} is torn under its lock")))
                    });
                }
                Err(TxError::Abort(AbortReason::Locked)) => {}
                Err(e) => return Err(step(e)),
            }
            if self.tx.holds_locks() {
                return Err(Step::Retry { invalidate: None });
            }
            self.tx.back_off(attempt).await.map_err(step)?;
        }
        // Held all along: by a writer that died, until recovery rolls its
        // log (DTX has no online repair), or by a very slow one.
        Err(Step::Blocked(r))
    }

    /// Locks and reads a node the modification will change (no wait: held
    /// by another writer, the attempt aborts).
    pub(crate) async fn read_for_update(&mut self, r: NodeRef) -> Result<Node, Step> {
        let bytes = self.tx.read_for_update(record(r)).await.map_err(step)?;
        Node::decode(bytes)
            .map_err(|Torn| Step::Fail(IndexError::Layout(format!("node {r:#x} is torn under its lock"))))
    }

    /// Writes one entry in place at commit (the entry's bytes only).
    pub(crate) async fn write_entry(&mut self, r: NodeRef, node: &Node, slot: usize) -> Result<(), Step> {
        let entry = Node::entry_bytes(node.slots[slot], node.version);
        self.tx
            .write_part(record(r), Node::slot_range(slot).start, &entry)
            .await
            .map_err(step)?;
        if cfg!(debug_assertions) {
            let written = self.tx.read(record(r)).await.map_err(step)?;
            debug_assert_eq!(written, &node.encode()[..], "an entry update changes one slot");
        }
        Ok(())
    }

    /// Writes the whole node in place at commit.
    pub(crate) async fn write_node(&mut self, r: NodeRef, node: &Node) -> Result<(), Step> {
        self.tx.write(record(r), &node.encode()).await.map_err(step)
    }

    /// A new node's record, written with the commit.
    pub(crate) async fn create(&mut self, node: &Node) -> Result<NodeRef, Step> {
        Ok(self.tx.create_raw(&node.encode()).await.map_err(step)?.addr.raw())
    }

    pub(crate) async fn commit(self) -> Result<(), Step> {
        self.tx.commit().await.map_err(step)
    }

    pub(crate) async fn rollback(self) -> Result<(), IndexError> {
        self.tx.rollback();
        Ok(())
    }
}
