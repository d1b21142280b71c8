//! The `optimal` variant: Sherman's own concurrency control, no fault
//! tolerance (the paper's baseline).
//!
//! Nodes are 1 KiB blocks updated in place. Writers take a lock word hashed
//! from the node's address into a lock table (a CAS, batched with the READ
//! of the node), write back either one entry or the whole node, and release
//! the lock in the same batch as the write-back. A writer that dies holding
//! a lock blocks that node forever; one that dies between the writes of a
//! split leaves the tree half changed. That is what rTX is for.

use fabric::{Batch, Client, GlobalAddr, Replica};
use txn::Heap;

use super::check::CheckReport;
use super::load::Placement;
use super::node::{Node, NodeRef, Torn, NODE_BYTES};
use super::{IndexError, Step};

/// Lock words in the lock table (Sherman keeps 32,768 in NIC memory).
pub const LOCK_WORDS: u64 = 32_768;
/// Lock attempts while holding no other lock before a writer reports the
/// node blocked (its holder is presumably dead: optimal cannot know). With
/// the backoff below this is tens of seconds: a live holder descheduled on a
/// loaded machine must not be mistaken for a dead one.
pub const LOCK_ATTEMPTS_MAX: u32 = 200_000;
/// Attempts spun (yielding) before a waiter starts sleeping between them.
const LOCK_SPINS: u32 = 1_024;
/// Sleep between lock attempts after the spins: long enough not to burn a
/// core against a dead holder, short next to a descheduled live one.
const LOCK_BACKOFF: std::time::Duration = std::time::Duration::from_micros(100);
/// Lock attempts while holding other locks before a writer backs off and
/// restarts: two nodes can hash to one lock word, so waiting while holding
/// could deadlock.
const LOCK_ATTEMPTS_HOLDING_MAX: u32 = 64;
/// Reads of a node that keep coming back torn before giving up: a node is
/// torn only while a write to it is in flight.
pub const TORN_READS_MAX: u32 = 100_000;

/// One client of an optimal tree.
#[derive(Debug)]
pub struct Optimal {
    pub(crate) fabric: Client,
    heap: Heap,
    pub(crate) owner: u16,
    lock_table: GlobalAddr,
    next: u64,
    end: u64,
    lock_attempts_max: u32,
    /// The last write-back batch was cut off by a fabric error: some of
    /// it may have landed (`Store::take_commit_in_doubt`).
    pub(crate) commit_in_doubt: bool,
}

impl Optimal {
    pub(crate) fn new(fabric: Client, heap: Heap, owner: u16, lock_table: GlobalAddr) -> Self {
        Optimal {
            fabric,
            heap,
            owner,
            lock_table,
            next: 0,
            end: 0,
            lock_attempts_max: LOCK_ATTEMPTS_MAX,
            commit_in_doubt: false,
        }
    }

    /// Makes a writer give up on a held lock sooner (crash exploration).
    pub(crate) fn set_lock_attempts_max(&mut self, n: u32) {
        self.lock_attempts_max = n.max(1);
    }

    /// Chunks for the lock table: taken once when the tree is created.
    pub(crate) async fn make_lock_table(
        fabric: &mut Client,
        heap: &Heap,
        owner: u16,
    ) -> Result<GlobalAddr, IndexError> {
        let chunks = (LOCK_WORDS * 8).div_ceil(heap.chunk_bytes());
        let first = heap
            .take_chunks(fabric, owner, chunks, txn::ChunkKind::Raw)
            .await?;
        let base = GlobalAddr::new(heap.region(), heap.chunk_offset(first));
        // Fresh chunks may hold garbage from an earlier use of the region.
        let zeros = vec![0u8; (LOCK_WORDS * 8) as usize];
        let mut batch = Batch::new();
        for (i, piece) in zeros.chunks(1 << 20).enumerate() {
            batch
                .on(Replica::All)
                .write(base.add(i as u64 * (1 << 20)), piece);
        }
        fabric.execute(&mut batch).await?;
        Ok(base)
    }

    pub(crate) fn lock_addr(&self, r: NodeRef) -> GlobalAddr {
        // Nodes are 1 KiB aligned: drop the low bits before hashing.
        let h = (r >> 10).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17;
        self.lock_table.add((h % LOCK_WORDS) * 8)
    }

    fn lock_word(&self) -> u64 {
        u64::from(self.owner) + 1
    }

    /// A fresh 1 KiB node block.
    pub(crate) async fn alloc(&mut self) -> Result<NodeRef, IndexError> {
        if self.next + NODE_BYTES as u64 > self.end {
            let c = self
                .heap
                .take_chunks(&mut self.fabric, self.owner, 1, txn::ChunkKind::Raw)
                .await?;
            self.next = self.heap.chunk_offset(c);
            self.end = self.next + self.heap.chunk_bytes();
        }
        let at = self.next;
        self.next += NODE_BYTES as u64;
        Ok(GlobalAddr::new(self.heap.region(), at).raw())
    }

    /// Reads a node without a lock (one round trip), again while torn.
    pub(crate) async fn read_node(&mut self, r: NodeRef) -> Result<Node, IndexError> {
        let mut batch = self.fabric.take_batch();
        let read = self.read_node_with(&mut batch, r).await;
        self.fabric.give_batch(batch);
        read
    }

    async fn read_node_with(&mut self, batch: &mut Batch, r: NodeRef) -> Result<Node, IndexError> {
        for _ in 0..TORN_READS_MAX {
            batch.clear();
            let h = batch.read(GlobalAddr::from_raw(r), NODE_BYTES as u32);
            self.fabric.execute(batch).await?;
            match Node::decode(batch.read_result(h).map_err(IndexError::Verb)?) {
                Ok(n) => return Ok(n),
                Err(Torn) => tokio::task::yield_now().await,
            }
        }
        Err(IndexError::Torn(r))
    }

    /// The lock table's address (for the checker).
    pub(crate) fn lock_table(&self) -> GlobalAddr {
        self.lock_table
    }

    /// A new tree's client and root leaf: the lock table taken, the root
    /// written on every replica.
    pub(crate) async fn create(
        mut fabric: Client,
        heap: Heap,
        owner: u16,
        root: &Node,
    ) -> Result<(Optimal, NodeRef), IndexError> {
        let lock_table = Optimal::make_lock_table(&mut fabric, &heap, owner).await?;
        let mut o = Optimal::new(fabric, heap, owner, lock_table);
        let r = o.alloc().await?;
        let mut batch = Batch::new();
        let h = batch
            .on(Replica::All)
            .write(GlobalAddr::from_raw(r), &root.encode());
        o.fabric.execute(&mut batch).await?;
        batch.done(h).map_err(IndexError::Verb)?;
        Ok((o, r))
    }

    /// `n` nodes back to back in raw chunks (bulk load): a node's ref is
    /// its block.
    pub(crate) async fn place(&mut self, n: usize) -> Result<Placement, IndexError> {
        let bytes = n as u64 * NODE_BYTES as u64;
        let first = self
            .heap
            .take_chunks(
                &mut self.fabric,
                self.owner,
                bytes.div_ceil(self.heap.chunk_bytes()),
                txn::ChunkKind::Raw,
            )
            .await?;
        let base = GlobalAddr::new(self.heap.region(), self.heap.chunk_offset(first));
        let data: Vec<GlobalAddr> = (0..n).map(|i| base.add((i * NODE_BYTES) as u64)).collect();
        Ok(Placement {
            refs: data.iter().map(|a| a.raw()).collect(),
            data,
        })
    }

    /// Every held word of the lock table is a violation (the checker runs
    /// quiescent).
    pub(crate) async fn check_locks(&mut self, report: &mut CheckReport) -> Result<(), IndexError> {
        let table = self.lock_table;
        let words_per_read = 1 << 17;
        let mut first = 0;
        let mut batch = Batch::new();
        while first < LOCK_WORDS {
            let n = (LOCK_WORDS - first).min(words_per_read);
            batch.clear();
            let h = batch.read(table.add(first * 8), (n * 8) as u32);
            self.fabric.execute(&mut batch).await?;
            let bytes = batch.read_result(h).map_err(IndexError::Verb)?;
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                let holder = fabric::le_word(w, 0);
                if holder != 0 {
                    report.locks_held += 1;
                    report.violations.push(format!(
                        "lock word {} is held by owner id {} (word value {holder})",
                        first + i as u64,
                        holder - 1
                    ));
                }
            }
            first += n;
        }
        Ok(())
    }
}

/// A write in progress on an optimal tree: locks held, writes buffered.
#[derive(Debug)]
pub struct OptimalTxn<'a> {
    o: &'a mut Optimal,
    held: Vec<GlobalAddr>,
    writes: Vec<(GlobalAddr, Vec<u8>)>,
    batch: Batch,
}

impl<'a> OptimalTxn<'a> {
    pub(crate) fn new(o: &'a mut Optimal) -> Self {
        OptimalTxn {
            o,
            held: Vec::new(),
            writes: Vec::new(),
            batch: Batch::new(),
        }
    }

    /// Locks `r` (CAS on its lock word, batched with the READ of the node)
    /// and returns the node as it is under the lock.
    pub(crate) async fn lock(&mut self, r: NodeRef) -> Result<Node, Step> {
        let lock = self.o.lock_addr(r);
        if self.held.contains(&lock) {
            return self.o.read_node(r).await.map_err(Step::Fail);
        }
        let limit = if self.held.is_empty() {
            self.o.lock_attempts_max
        } else {
            LOCK_ATTEMPTS_HOLDING_MAX
        };
        for attempt in 0..limit {
            self.batch.clear();
            let c = self.batch.cas(lock, 0, self.o.lock_word());
            let h = self.batch.read(GlobalAddr::from_raw(r), NODE_BYTES as u32);
            self.o
                .fabric
                .execute(&mut self.batch)
                .await
                .map_err(|e| Step::Fail(e.into()))?;
            if self
                .batch
                .old_value(c)
                .map_err(|e| Step::Fail(IndexError::Verb(e)))?
                == 0
            {
                self.held.push(lock);
                return match Node::decode(
                    self.batch
                        .read_result(h)
                        .map_err(|e| Step::Fail(IndexError::Verb(e)))?,
                ) {
                    Ok(n) => Ok(n),
                    // A write under a colliding lock word's holder may be in
                    // flight only if the lock table hashed two nodes
                    // together; read again under our lock.
                    Err(Torn) => self.o.read_node(r).await.map_err(Step::Fail),
                };
            }
            if attempt >= LOCK_SPINS && tokio::runtime::Handle::try_current().is_ok() {
                tokio::time::sleep(LOCK_BACKOFF).await;
            } else if attempt % 16 == 15 {
                tokio::task::yield_now().await;
            }
        }
        if self.held.is_empty() {
            Err(Step::Blocked(r))
        } else {
            Err(Step::Retry { invalidate: None })
        }
    }

    /// Buffers the in-place write of one leaf entry.
    pub(crate) fn write_entry(&mut self, r: NodeRef, node: &Node, slot: usize) {
        let bytes = Node::entry_bytes(node.slots[slot], node.version);
        self.writes.push((
            super::node::slot_addr(GlobalAddr::from_raw(r), slot),
            bytes.to_vec(),
        ));
    }

    /// Buffers a whole-node write.
    pub(crate) fn write_node(&mut self, r: NodeRef, node: &Node) {
        self.writes
            .push((GlobalAddr::from_raw(r), node.encode().to_vec()));
    }

    /// A new node, written at commit before the nodes that point to it.
    pub(crate) async fn create(&mut self, node: &Node) -> Result<NodeRef, Step> {
        let r = self.o.alloc().await.map_err(Step::Fail)?;
        // New nodes go first: nothing may point at a node not yet written.
        self.writes
            .insert(0, (GlobalAddr::from_raw(r), node.encode().to_vec()));
        Ok(r)
    }

    /// Writes everything back and releases every lock, in one batch.
    pub(crate) async fn commit(mut self) -> Result<(), Step> {
        self.batch.clear();
        for (at, bytes) in &self.writes {
            self.batch.on(Replica::All).write(*at, bytes);
        }
        for lock in &self.held {
            self.batch.write(*lock, &0u64.to_le_bytes());
        }
        if self.batch.is_empty() {
            return Ok(());
        }
        let sent = self.o.fabric.execute(&mut self.batch).await;
        self.o.commit_in_doubt = sent.as_ref().is_err_and(|e| !e.sent_nothing());
        sent.map_err(|e| Step::Fail(e.into()))?;
        match self.batch.first_error() {
            Some(e) => Err(Step::Fail(IndexError::Verb(e))),
            None => Ok(()),
        }
    }

    /// Releases every lock, writing nothing.
    pub(crate) async fn rollback(mut self) -> Result<(), IndexError> {
        if self.held.is_empty() {
            return Ok(());
        }
        self.batch.clear();
        for lock in &self.held {
            self.batch.write(*lock, &0u64.to_le_bytes());
        }
        self.o.fabric.execute(&mut self.batch).await?;
        Ok(())
    }
}
