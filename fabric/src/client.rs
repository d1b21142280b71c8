//! The client: a cluster map, a transport and counters. Index and
//! transaction code talks to DM through nothing else.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::addr::{GlobalAddr, RegionId, Replica};
use crate::batch::Batch;
use crate::error::FabricError;
use crate::mandate::Mandate;
use crate::map::ClusterMap;
use crate::memory::PageAccess;
use crate::stats::Stats;
use crate::transport::{AnyTransport, Transport};

/// One task's handle on the fabric. Not shared between tasks: give each task
/// its own with [`Client::fork`] (forks share the transport and map, not the
/// counters).
#[derive(Debug)]
pub struct Client {
    map: Arc<ClusterMap>,
    /// The process's map and lease, when it follows a control plane.
    mandate: Option<Arc<Mandate>>,
    transport: AnyTransport,
    stats: Stats,
    /// A batch whose buffers outlive the operation that used them, so that
    /// each operation does not allocate its own ([`Client::take_batch`]).
    /// Boxed: clients are embedded in larger structures by value.
    spare: Box<Batch>,
    /// A batch found a node of the map this transport had not reached (an
    /// image not yet created when the map was taken): the next batch tries
    /// to reach the map's nodes again before it runs.
    relearn: bool,
}

/// Why [`Client::read_range`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The batch did not execute.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A memory node refused one of the READs.
    #[error("memory node refused a READ: {0}")]
    Verb(crate::verb::VerbError),
}

impl Client {
    /// Reads `len` bytes at `at` from `replica` (`All`: every replica of the
    /// region, primary first; otherwise one), in READs of at most
    /// [`VERB_BYTES_MAX`](crate::VERB_BYTES_MAX) bytes, one round trip
    /// each: for checkers and tools that take a region or a table whole.
    pub async fn read_range(
        &mut self,
        at: GlobalAddr,
        len: u64,
        replica: Replica,
    ) -> Result<Vec<Vec<u8>>, ReadError> {
        let copies = match replica {
            Replica::All => self.map.region(at.region()).map_or(1, |r| r.replicas.len()),
            _ => 1,
        };
        let mut out = vec![Vec::with_capacity(len as usize); copies];
        let mut batch = Batch::new();
        let mut done = 0;
        while done < len {
            let piece = (len - done).min(u64::from(crate::VERB_BYTES_MAX));
            batch.clear();
            let h = batch.on(replica).read(at.add(done), piece as u32);
            self.execute(&mut batch).await?;
            for (r, copy) in out.iter_mut().enumerate() {
                copy.extend_from_slice(batch.read_result_of(h, r).map_err(ReadError::Verb)?);
            }
            done += piece;
        }
        Ok(out)
    }

    /// A client that routes with `map` over `transport`.
    pub fn new(map: ClusterMap, transport: AnyTransport) -> Self {
        Client {
            map: Arc::new(map),
            mandate: None,
            transport,
            stats: Stats::default(),
            spare: Box::default(),
            relearn: false,
        }
    }

    /// A client under `mandate`: before each batch it takes the newest map
    /// installed there, and it issues no verb while the lease there is not
    /// certain ([`FabricError::LeaseUncertain`]). The transport stops
    /// reconnecting to a node the mandate's newer maps no longer route to
    /// ([`AnyTransport::follow`]).
    pub fn under(mandate: Arc<Mandate>, transport: AnyTransport) -> Self {
        transport.follow(&mandate);
        Client {
            map: mandate.map(),
            mandate: Some(mandate),
            transport,
            stats: Stats::default(),
            spare: Box::default(),
            // The transport is the process's, made when it connected: nodes
            // that joined the map since, while no client of it ran a batch
            // to see the new epoch, are taken on before the first batch
            // (else a process making a client per task never reaches them).
            relearn: true,
        }
    }

    /// Another client on the same transport, map and mandate, with its own
    /// counters.
    pub fn fork(&self) -> Client {
        Client {
            map: self.map.clone(),
            mandate: self.mandate.clone(),
            transport: self.transport.clone(),
            stats: Stats::default(),
            spare: Box::default(),
            relearn: false,
        }
    }

    /// An empty batch with the buffers of the last one given back, if any:
    /// give it back with [`Client::give_batch`] when done.
    pub fn take_batch(&mut self) -> Batch {
        let mut b = std::mem::take(&mut *self.spare);
        b.clear();
        b
    }

    /// Keeps `batch`'s buffers for the next [`Client::take_batch`].
    pub fn give_batch(&mut self, batch: Batch) {
        *self.spare = batch;
    }

    /// Executes `batch` in one round trip. On `Ok`, every verb has a
    /// completion (which may be a per-verb error); read them through the
    /// batch. An empty batch costs nothing and succeeds.
    pub async fn execute(&mut self, batch: &mut Batch) -> Result<(), FabricError> {
        self.execute_at(batch, None).await
    }

    /// [`Client::execute`], only if the map this client routes by is still
    /// at `epoch` (the one [`Client::epoch`] gave after an earlier batch):
    /// otherwise [`FabricError::MapMoved`] and no verb is issued. For a
    /// protocol step whose later batch must reach the replicas its earlier
    /// one did (a commit's backups, then its primary): a replica joining in
    /// between would miss the earlier one.
    pub async fn execute_pinned(
        &mut self,
        batch: &mut Batch,
        epoch: crate::Epoch,
    ) -> Result<(), FabricError> {
        self.execute_at(batch, Some(epoch)).await
    }

    /// The epoch of the map the last batch was routed by (and the next is,
    /// unless a newer map arrives first).
    pub fn epoch(&self) -> crate::Epoch {
        self.map.epoch()
    }

    async fn execute_at(
        &mut self,
        batch: &mut Batch,
        pinned: Option<crate::Epoch>,
    ) -> Result<(), FabricError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(m) = &self.mandate {
            if !m.holds() {
                return Err(FabricError::LeaseUncertain);
            }
            if m.epoch() != self.map.epoch() {
                self.map = m.map();
                // A node the new map names for the first time is reached
                // now; one that cannot be stays unknown, and only the
                // batches aimed at it fail.
                if let Err(e) = self.transport.learn(&self.map) {
                    tracing::warn!(error = %e, "cannot reach every node of the new map");
                }
            }
        }
        if std::mem::take(&mut self.relearn) {
            if let Err(e) = self.transport.learn(&self.map) {
                tracing::warn!(error = %e, "cannot reach every node of the map");
            }
        }
        if let Some(pinned) = pinned.filter(|&p| p != self.map.epoch()) {
            return Err(FabricError::MapMoved {
                pinned,
                now: self.map.epoch(),
            });
        }
        batch.route(&self.map)?;
        let epoch = self.map.epoch();
        let (ops, payload, out) = batch.parts();
        let verbs = ops.len();
        let result = match self.transport.execute_now(epoch, ops, payload, out) {
            Some(done) => done,
            None => self.transport.execute(epoch, ops, payload, out).await,
        };
        // A batch that ends in `Crashed` is not counted: a crashed client
        // sends nothing more, and the verbs that ran before the crash fired
        // are counted exactly by the fault handle. A batch refused for a
        // stale epoch or lost with its connection did cost a round trip.
        if !matches!(result, Err(FabricError::Crashed { .. })) {
            self.stats.record(batch.ops());
        }
        // This batch may have run in part, so it is not retried; the next
        // one tries the node again.
        self.relearn |= matches!(result, Err(FabricError::UnknownNode { .. }));
        result?;
        let out = &batch.out;
        assert_eq!(
            out.len(),
            verbs,
            "transport broke the one-completion-per-op contract"
        );
        self.stats.verb_errors += out.as_slice().iter().filter(|c| c.is_err()).count() as u64;
        Ok(())
    }

    /// Hints that `len` bytes at `addr` (on the region's primary) will be
    /// read soon, so that their cache misses overlap with what the caller
    /// does until then. Only memory this process maps (`local`, `shm`) can
    /// be prefetched; elsewhere, and for an address the map does not know,
    /// it does nothing. Not a verb: it is not counted, changes nothing a
    /// verb can observe, and needs no round trip.
    pub fn prefetch(&self, addr: GlobalAddr, len: u32) {
        let Ok(replicas) = self.map.route(addr.region(), Replica::Primary) else {
            return;
        };
        if let Some(primary) = replicas.first() {
            self.transport
                .prefetch(primary.node, addr.region(), addr.offset(), u64::from(len));
        }
    }

    /// Maps every page of `region` on the nodes of `replica` into this
    /// process now, where it maps that memory (`local`, `shm`; elsewhere
    /// nothing happens). For a bulk copy, whose first touch of each page
    /// would otherwise take a page fault between its verbs: populating a
    /// range costs a fraction of faulting it in page by page, and the copy
    /// then runs at memory speed. Not a verb: nothing a verb can observe
    /// changes, and nothing is counted. Runs off the async workers.
    /// `access`: what this process will do through those pages.
    pub async fn populate(
        &self,
        region: RegionId,
        replica: Replica,
        access: PageAccess,
    ) -> Result<(), FabricError> {
        let nodes: Vec<_> = self.map.route(region, replica)?.iter().map(|l| l.node).collect();
        for node in nodes {
            let transport = self.transport.clone();
            tokio::task::spawn_blocking(move || transport.populate(node, region, access))
                .await
                .map_err(|e| FabricError::Populate {
                    node,
                    region,
                    reason: format!("the populating thread failed: {e}"),
                })??;
        }
        Ok(())
    }

    /// Counters since this client was made.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Adds what a fork of this client issued on its behalf (a batch sent
    /// in the background) to this client's counters, so that they count
    /// every verb of its work.
    pub fn absorb_stats(&mut self, fork: Stats) {
        self.stats += fork;
    }

    /// The map verbs are routed with.
    pub fn map(&self) -> &ClusterMap {
        &self.map
    }

    /// Routes with a newer map from now on (after a `StaleEpoch`).
    pub fn set_map(&mut self, map: ClusterMap) {
        self.map = Arc::new(map);
    }

    /// The transport.
    pub fn transport(&self) -> &AnyTransport {
        &self.transport
    }

    /// A named point in protocol code where fault injection may crash this
    /// client. Protocol code calls it between steps and propagates the error.
    pub fn crash_point(&self, name: &str) -> Result<(), FabricError> {
        self.transport.crash_point(name)
    }

    /// This client's wall clock in milliseconds since the Unix epoch, with
    /// any injected skew. Leases are compared across clients in this unit.
    pub fn now_ms(&self) -> u64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        real.saturating_add_signed(self.transport.clock_skew_ms())
    }

    /// This client's wall clock in microseconds since the Unix epoch, with
    /// any injected skew (which stays whole milliseconds). For protocols
    /// that need time finer than a millisecond (rTX leases are in 1/256 ms).
    pub fn now_us(&self) -> u64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        real.saturating_add_signed(self.transport.clock_skew_ms().saturating_mul(1000))
    }
}
