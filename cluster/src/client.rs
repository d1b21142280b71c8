//! [`Cluster`]: a process's membership of a kintsugi cluster.
//!
//! `connect` registers the process as a client (an id, a block of owner
//! ids, a lease), fetches the map, reaches every memory node of it (`shm`
//! when the nodes' endpoints are image paths, `tcp` otherwise), and starts
//! the [`Session`] that keeps the lease and follows the map. Every fabric
//! client the process makes routes through the one [`Mandate`]: it takes
//! each newer map before its next batch and issues no verb once the lease
//! is not certain.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::state::{self as cp, ClientState, Command, IndexKind, IndexVariant};
use fabric::{AnyTransport, ClusterMap, Mandate, ShmTransport, TcpTransport};
use txn::TxConfig;

use crate::members::Members;
use crate::owners::OwnerPool;
use crate::session::Session;
use crate::ClusterError;

/// How a process joins, and what its new indexes look like.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The name operators see (`ctl client list`).
    pub name: String,
    /// Owner ids to take: one per index handle open at a time.
    pub owner_ids: u16,
    /// The lease to hold; `None`: the cluster's default.
    pub lease: Option<Duration>,
    /// Replicas of a new index's region, primary included.
    pub replicas: u8,
    /// Bytes of a new index's region.
    pub index_bytes: u64,
    /// The variant of a new index.
    pub variant: IndexVariant,
    /// Keys a new hash table is sized for.
    pub hash_keys: u64,
    /// Create an index that does not exist when it is opened (otherwise
    /// opening it is an error: [`ClusterError::UnknownIndex`]).
    pub create_missing: bool,
    /// rTX settings of every handle.
    pub tx: TxConfig,
    /// Faults to inject into every verb of the process (chaos tests:
    /// [`Cluster::faults`] arms them). `None` in production.
    pub faults: Option<fabric::FaultPlan>,
    /// How long a batch waits for a memory node's answer before it fails
    /// as a lost connection (`fabric::transport::REQUEST_DEADLINE`).
    pub request_deadline: Duration,
    /// Memory-node endpoints reached through another address (an in-path
    /// proxy: chaos partitions of the data path, tests); empty in
    /// production ([`fabric::transport::TcpOptions::via`]).
    pub data_path_via: Vec<(String, String)>,
    /// What a memory node that speaks TLS (its endpoint `tls://...`) is
    /// checked against; `None`: the control plane's CA, if this process has
    /// one (`control_plane::tls::ClientTls::process_default`: a member's
    /// `[tls] ca`, or KINTSUGI_CA_FILE).
    pub data_tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            name: format!("pid-{}", std::process::id()),
            owner_ids: 8,
            lease: None,
            replicas: 3,
            index_bytes: 256 << 20,
            variant: IndexVariant::Rtx,
            hash_keys: 1 << 20,
            create_missing: true,
            tx: TxConfig::default(),
            faults: None,
            request_deadline: fabric::transport::REQUEST_DEADLINE,
            data_path_via: Vec::new(),
            data_tls: None,
        }
    }
}

/// A process's membership of a cluster: open indexes by name through it.
pub struct Cluster {
    pub(crate) members: Members,
    pub(crate) me: cp::Client,
    pub(crate) mandate: Arc<Mandate>,
    /// The reclaims this process follows (`txn::quiesce`): every rtx
    /// transaction client of an index it opens follows them.
    pub(crate) reclaims: Arc<txn::ReclaimView>,
    pub(crate) transport: AnyTransport,
    pub(crate) owners: Arc<OwnerPool>,
    pub(crate) options: ClusterOptions,
    faults: Option<Arc<fabric::Faulty<fabric::BaseTransport>>>,
    session: Mutex<Session>,
    /// The regions whose restore this process asked to claim (a promotion
    /// naming it restorer, a `ClaimRestore`), answered or not: a command
    /// whose answer was lost to a lead change may still commit.
    /// [`Cluster::release_restore_claims`] gives these back. Bounded by the
    /// regions of the cluster.
    pub(crate) restore_claims: Mutex<std::collections::BTreeSet<fabric::RegionId>>,
    closed: bool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("client", &self.me.id)
            .field("owners", &self.me.owners)
            .field("epoch", &self.mandate.epoch())
            .finish()
    }
}

impl Cluster {
    /// Joins the cluster whose control-plane members are at `endpoints`
    /// (`host:port`; one is enough, more survive a member's death) with
    /// bearer `token`, with default options.
    pub async fn connect<S: AsRef<str>>(endpoints: &[S], token: &str) -> Result<Cluster, ClusterError> {
        Self::connect_with(endpoints, token, ClusterOptions::default()).await
    }

    /// [`Cluster::connect`] with options.
    pub async fn connect_with<S: AsRef<str>>(
        endpoints: &[S],
        token: &str,
        options: ClusterOptions,
    ) -> Result<Cluster, ClusterError> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let members = Members::new(&endpoints, token)?;
        let (me, sent) = members
            .register_client(&options.name, options.owner_ids, options.lease)
            .await?;
        let joined = async {
            let map = members
                .call("fetching the map", |c| async move { c.map(None, None).await })
                .await?;
            // The memory nodes admit this client by it until it expires.
            let id = me.id;
            let credential = members
                .call("fetching this client's admission credential", |c| async move {
                    c.credential(Some(id)).await
                })
                .await?;
            let tls = match &options.data_tls {
                Some(config) => Some(config.clone()),
                None => control_plane::tls::ClientTls::process_default()
                    .map_err(|e| ClusterError::Map(format!("the CA for memory nodes that speak TLS: {e}")))?
                    .map(|t| t.data_path_config()),
            };
            let tcp = fabric::transport::TcpOptions {
                request_deadline: options.request_deadline,
                via: options.data_path_via.clone(),
                tls,
                ..fabric::transport::TcpOptions::with_credential(credential)
            };
            let mut transport = reach(&map, tcp).await?;
            let mut faults = None;
            if let Some(plan) = options.faults.clone() {
                let (t, f) = transport.with_faults(plan);
                transport = t;
                faults = Some(f);
            }
            let mandate = Mandate::new(map, sent + Duration::from_millis(me.lease_ms));
            let reclaims = txn::ReclaimView::new();
            crate::session::prime_reclaims(&members, (me.id, me.registered_at_ms), &reclaims).await?;
            let session = Session::start(
                endpoints.clone(),
                token.to_owned(),
                (me.id, me.registered_at_ms),
                mandate.clone(),
                reclaims.clone(),
                true,
                |_| {},
            )?;
            Ok::<_, ClusterError>((transport, faults, mandate, reclaims, session))
        };
        let (transport, faults, mandate, reclaims, session) = match joined.await {
            Ok(j) => j,
            Err(e) => {
                // Nothing issued under the ids yet: give them back at once.
                let leave = Command::DeregisterClient { id: me.id };
                let _ = members.command("deregistering", &leave).await;
                return Err(e);
            }
        };
        tracing::info!(client = me.id, owners = ?me.owners, epoch = mandate.epoch(), "joined the cluster");
        Ok(Cluster {
            members,
            owners: Arc::new(OwnerPool::new(me.owners.first, me.owners.count)),
            me,
            mandate,
            reclaims,
            transport,
            options,
            faults,
            session: Mutex::new(session),
            restore_claims: Mutex::default(),
            closed: false,
        })
    }

    /// This process's client id.
    pub fn id(&self) -> cp::ClientId {
        self.me.id
    }

    /// The owner ids this process holds: `first..first + count`.
    pub fn owner_ids(&self) -> cp::OwnerBlock {
        self.me.owners
    }

    /// The epoch of the map in force.
    pub fn epoch(&self) -> fabric::Epoch {
        self.mandate.epoch()
    }

    /// The lease this client holds (renewed every third of it).
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.me.lease_ms)
    }

    /// Whether this process's lease certainly holds now.
    pub fn lease_holds(&self) -> bool {
        self.mandate.holds()
    }

    /// The map in force.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.mandate.map()
    }

    /// A fabric client under this process's mandate.
    pub fn fabric(&self) -> fabric::Client {
        fabric::Client::under(self.mandate.clone(), self.transport.clone())
    }

    /// The fault injector of every verb, when connected with
    /// [`ClusterOptions::faults`].
    pub fn faults(&self) -> Option<&Arc<fabric::Faulty<fabric::BaseTransport>>> {
        self.faults.as_ref()
    }

    /// Why the lease was lost, if it was.
    pub fn lease_lost(&self) -> Option<String> {
        self.session.lock().unwrap_or_else(|p| p.into_inner()).lost()
    }

    /// The control plane's whole record (memory nodes, regions with the
    /// replicas being made, clients, indexes), from the first member that
    /// answers.
    pub async fn status(&self) -> Result<control_plane::api::Status, ClusterError> {
        self.members
            .call("reading the status", |c| async move { c.status().await })
            .await
    }

    /// The named indexes of the catalog.
    pub async fn indexes(&self) -> Result<Vec<cp::IndexRecord>, ClusterError> {
        self.members
            .call("listing indexes", |c| async move { c.indexes().await })
            .await
    }

    /// One of this process's owner ids, for as long as the guard lives.
    pub(crate) fn take_owner(&self) -> Result<crate::owners::Owner, ClusterError> {
        self.owners
            .take()
            .ok_or(ClusterError::OwnerIdsExhausted(self.me.owners.count))
    }

    /// Sends `command` to the control plane (forwarded to the leader).
    pub async fn command(&self, what: &str, command: &Command) -> Result<cp::Outcome, ClusterError> {
        self.members.command(what, command).await
    }

    /// Fences dead memory node `node` at `epoch` where this process maps
    /// its memory (shm, local): a client of this host still routing by a
    /// map older than `epoch` is refused by its image from then on, instead
    /// of reading what it held when it died. Returns the epoch now in force
    /// there (`None` over tcp, where a dead node's process answers nobody).
    pub fn fence_dead(&self, node: cp::MemNodeId, epoch: fabric::Epoch) -> Option<fabric::Epoch> {
        self.transport.fence_mapped(node, epoch)
    }

    /// The epochs of the maps this process installs, as they are: a
    /// watcher wakes on every change of the cluster's routing.
    pub fn epochs(&self) -> tokio::sync::watch::Receiver<fabric::Epoch> {
        self.session.lock().unwrap_or_else(|p| p.into_inner()).epochs()
    }

    /// Leaves the cluster: every handle must be dropped first (an open
    /// handle may be mid-commit). This process's logs are finished on
    /// every rtx index (a commit cut off by an error is rolled forward or
    /// back), then its owner ids are given back at once. Without `close`,
    /// dropping stops the lease; the control plane expires the client and
    /// the ids come back once another client has finished its logs
    /// ([`Cluster::reap_expired`]).
    pub async fn close(mut self) -> Result<(), ClusterError> {
        let open = self.owners.in_use();
        if open > 0 {
            return Err(ClusterError::Map(format!(
                "{open} index handle(s) still open: drop them before closing"
            )));
        }
        let ids = self.me.owners.ids();
        // Its own logs: every handle is dropped, nothing of it is in
        // flight, no quarantine to wait for.
        self.finish_logs(&ids, false, 0).await?;
        // What the handles' allocators held is not reclaimed: other live
        // clients may hold blocks of these ids' chunks, and only an
        // announced reclaim makes them give those up (`txn::quiesce`).
        let leave = Command::DeregisterClient { id: self.me.id };
        self.members.command("leaving the cluster", &leave).await?;
        self.closed = true;
        self.mandate.revoke();
        self.session.lock().unwrap_or_else(|p| p.into_inner()).stop();
        tracing::info!(client = self.me.id, "left the cluster");
        Ok(())
    }

    /// Finishes the logs of expired clients on every rtx index and then
    /// forgets them, which frees their owner ids (`kintsugi cluster
    /// reap`; the recovery coordinator does the same on its own). Returns
    /// the clients forgotten. A client still in its quarantine, or with a
    /// commit still running under a live lease, is left for a later call.
    pub async fn reap_expired(&self) -> Result<Vec<cp::ClientId>, ClusterError> {
        let clients = self
            .members
            .call("listing clients", |c| async move { c.clients().await })
            .await?;
        let mut forgotten = Vec::new();
        for c in clients {
            if self.forget_expired(&c).await?.is_some() {
                forgotten.push(c.id);
            }
        }
        Ok(forgotten)
    }

    /// Forgets expired client `c` once its quarantine is over and its logs
    /// are finished (finished again here: something it sent before it
    /// stopped may have landed since), after reclaiming the blocks of its
    /// owner ids that no object references (`Cluster::reclaim_owners`),
    /// which waits until every live client has quiesced to its expiry
    /// (`txn::quiesce`): only then are its ids another's. `Some` (what was
    /// reclaimed) once it is gone, whoever forgot it; `None` if it is live,
    /// quarantined, still committing, or a live client has not quiesced.
    pub async fn forget_expired(&self, c: &cp::Client) -> Result<Option<txn::Reclaimed>, ClusterError> {
        let ClientState::Expired { at_ms, seq } = c.state else {
            return Ok(None);
        };
        let now_ms = self.cluster_clock_ms().await?;
        if now_ms < at_ms.saturating_add(c.lease_ms) {
            return Ok(None); // quarantined: something it sent may still land
        }
        // Asked first: cheap, where finishing logs sweeps every lock. A
        // client's quiescence never goes back, and one registering later
        // learns of the announcement before it holds anything, so the
        // answer stays true.
        let id = c.id;
        let readiness = self
            .members
            .call("asking whether a reclaim may run", |m| async move {
                m.reclaim_readiness(id).await
            })
            .await?;
        if !readiness.unfenced.is_empty() {
            // Its logs are rolled only once nothing it sent can still run:
            // a late frame would undo the roll (`docs/txn.md` §8).
            tracing::debug!(
                client = id,
                seq,
                unfenced = ?readiness.unfenced,
                "an expired client's logs wait for every memory node to fence it"
            );
            return Ok(None);
        }
        if !readiness.waiting.is_empty() {
            // At debug: the coordinator asks again every pass.
            tracing::debug!(
                client = id,
                seq,
                waiting = ?readiness.waiting,
                "reclaim of an expired client's owner ids waits for live clients to quiesce"
            );
            return Ok(None);
        }
        let ids = c.owners.ids();
        let mut finish = ids.clone();
        finish.extend(readiness.finish_first.iter().flat_map(|b| b.ids()));
        // (Past the quarantine already.)
        if !self.finish_logs(&finish, true, 0).await? {
            return Ok(None);
        }
        // One reclaimer at a time writes the ids' runs: another reaper (the
        // coordinator, `ctl cluster reap`, an old leader's coordinator)
        // holding the claim is left to finish.
        let claim = Command::ClaimReclaim { id, by: self.me.id };
        match self
            .members
            .command(&format!("claiming client {id}'s reclaim"), &claim)
            .await
        {
            Ok(_) => {}
            Err(e) if e.refused_with(404) => return Ok(Some(txn::Reclaimed::default())), // forgotten meanwhile
            Err(e) if e.refused_with(409) => return Ok(None),
            Err(e) => return Err(e),
        }
        let reclaimed = self.reclaim_owners(&ids).await?;
        let forget = Command::ForgetClient {
            id: c.id,
            by: Some(self.me.id),
        };
        match self
            .members
            .command(&format!("forgetting client {}", c.id), &forget)
            .await
        {
            // Forgotten meanwhile by another reaper.
            Ok(_) => Ok(Some(reclaimed)),
            Err(e) if e.refused_with(404) => Ok(Some(reclaimed)),
            Err(e) if e.refused_with(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Leak repair for owner ids `ids` of an expired client whose logs are
    /// finished, once every live client has quiesced to its expiry
    /// ([`Cluster::forget_expired`] checks both): on every ready rtx index,
    /// the data blocks of their chunks that no object references are left
    /// for the next holder of each id (`txn::reclaim`). Returns the sum
    /// over indexes and ids. Idempotent; not to be run by two reapers at
    /// once (each rewrites the runs list whole).
    pub(crate) async fn reclaim_owners(&self, ids: &[u16]) -> Result<txn::Reclaimed, ClusterError> {
        let mut sum = txn::Reclaimed::default();
        for x in self
            .indexes()
            .await?
            .iter()
            .filter(|x| x.variant == IndexVariant::Rtx && x.state == cp::IndexState::Ready)
        {
            self.await_region(x, Instant::now() + crate::OPEN_TIMEOUT).await?;
            let mut fabric = self.fabric();
            let heap = txn::Heap::open(&mut fabric, x.region).await?;
            // One scan of the metas for all the ids.
            let r = heap.reclaim_all(&mut fabric, ids).await?;
            sum.data_chunks += r.data_chunks;
            sum.blocks_referenced += r.blocks_referenced;
            sum.blocks_free += r.blocks_free;
            sum.bytes_free += r.bytes_free;
            sum.runs += r.runs;
        }
        Ok(sum)
    }

    /// Finishes the last log of each owner id in `ids` on every ready rtx
    /// index, and the DTX logs of every ready dtx index once `dtx_from_ms`
    /// has passed on the cluster clock ([`Cluster::cluster_clock_ms`]): DTX writes in place, so a client's logs are
    /// rolled only after its quarantine (its lease, once expired, and one
    /// more), when nothing it sent can still land. `false` if an index is
    /// still committing under a live lease or a dtx index waits for its
    /// quarantine: call again. With
    /// `sweep`, then (hash tables) converges the slots a dead writer left
    /// on the primary only, and meets every lock of each index and repairs
    /// the expired ones: a dead client's log-less locks (a pre-lock, a steal)
    /// carry its owner id, and must be gone before that id is another's,
    /// or their next holder would take them for its own. A region that
    /// leaves the map under it (a catch-up, a promotion) is waited for and
    /// its index finished again (a few times, each wait up to
    /// `OPEN_TIMEOUT`).
    pub async fn finish_logs(
        &self,
        ids: &[u16],
        sweep: bool,
        dtx_from_ms: u64,
    ) -> Result<bool, ClusterError> {
        let indexes = self.indexes().await?;
        // A lost region's logs died with it: nothing is left to finish
        // there, and waiting for it would hold every roll back until an
        // operator drops it (design.md §1b: recovery is per region).
        let lost: Vec<fabric::RegionId> = self
            .members
            .call("listing regions", |c| async move { c.regions().await })
            .await?
            .into_iter()
            .filter(|r| r.lost.is_some())
            .map(|r| r.id)
            .collect();
        let owner = self.take_owner()?;
        let mut all = true;
        let clock_ms = if indexes.iter().any(|x| x.variant == IndexVariant::Dtx) {
            self.cluster_clock_ms().await?
        } else {
            0
        };
        for x in indexes.iter().filter(|x| {
            x.variant != IndexVariant::Optimal
                && x.state == cp::IndexState::Ready
                && !lost.contains(&x.region)
        }) {
            if x.variant == IndexVariant::Dtx && clock_ms < dtx_from_ms {
                all = false; // quarantined: a later pass
                continue;
            }
            let deadline = Instant::now() + crate::OPEN_TIMEOUT;
            for attempt in 1.. {
                // Our map may trail the control plane's (a region just
                // published again after a promotion).
                self.await_region(x, deadline).await?;
                let tried_at = self.mandate.epoch();
                match self.finish_logs_in(x, &owner, ids, sweep).await {
                    Ok(true) => break,
                    Ok(false) => {
                        all = false;
                        break;
                    }
                    // The region left the map meanwhile (a catch-up, a
                    // promotion): every step is safe to take again.
                    Err(e) if map_moved(&e) && attempt < MAP_MOVED_ATTEMPTS_MAX => {
                        tracing::debug!(index = %x.name, error = %e, "finishing logs again under a newer map");
                        // Until the map moves past the one refused: the
                        // watch may be passing over a dead member first.
                        let mut epochs = self.epochs();
                        let newer = epochs.wait_for(|&e| e > tried_at);
                        if tokio::time::timeout(MAP_MOVED_WAIT, newer).await.is_err() {
                            tokio::time::sleep(MAP_MOVED_PAUSE).await;
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(all)
    }

    /// [`Cluster::finish_logs`] on index `x`, as `owner`.
    async fn finish_logs_in(
        &self,
        x: &cp::IndexRecord,
        owner: &crate::owners::Owner,
        ids: &[u16],
        sweep: bool,
    ) -> Result<bool, ClusterError> {
        let mut fabric = self.fabric();
        let heap = txn::Heap::open(&mut fabric, x.region).await?;
        if x.variant == IndexVariant::Dtx {
            // The intents name every lock: the sweep below repairs nothing
            // on a dtx index (it only converges a hash table's backups).
            let mut dtx = txn::dtx::DtxClient::new(fabric, heap, owner.id(), self.options.tx.clone())?;
            // An earlier pass of this process, as the same owner id, may have
            // stopped inside a roll (a fabric error between its adoption and
            // its release): its log names the locks it adopted, which nobody
            // else finishes while this owner id is live.
            dtx.finish_owner_log(owner.id()).await?;
            for &id in ids {
                let done = dtx.finish_owner_log(id).await?;
                if done.logs > 0 {
                    tracing::info!(index = %x.name, owner = id, ?done, "DTX logs rolled");
                }
            }
            dtx.release_pending().await?;
        } else {
            let mut tx = txn::TxClient::new(fabric, heap, owner.id(), self.options.tx.clone())?;
            for &id in ids {
                if tx.finish_owner_log(id).await? == txn::RepairOutcome::Busy {
                    return Ok(false);
                }
            }
        }
        if sweep {
            let fabric = self.fabric();
            let repaired = match x.kind {
                IndexKind::Btree => {
                    index::btree::BTree::open_with(fabric, heap, owner.id(), self.options.tx.clone())
                        .await?
                        .repair_expired_locks()
                        .await?
                }
                IndexKind::Hash => {
                    let mut table =
                        index::hash::HashTable::open(fabric, heap, owner.id(), self.options.tx.clone())
                            .await?;
                    // A dead writer stopped between a slot's primary
                    // CAS and its backups' left them apart.
                    let converged = table.converge_backups().await?;
                    tracing::info!(index = %x.name, converged, "hash slots converged on the backups");
                    table.repair_expired_locks().await?
                }
            };
            tracing::info!(index = %x.name, repaired, "expired locks swept");
        }
        Ok(true)
    }

    /// Opens the B+tree named `name`, creating it (with this process's
    /// options: variant, replicas, size) if it does not exist.
    pub async fn btree(&self, name: &str) -> Result<crate::Tree, ClusterError> {
        let (handle, owner, record) = self.open(name, IndexKind::Btree).await?;
        match handle {
            crate::catalog::Opened::Tree(t) => Ok(crate::Tree::new(t, owner, self.retry(record.name))),
            crate::catalog::Opened::Table(_) => unreachable!("opened by kind"),
        }
    }

    /// Opens the hash table named `name`, creating it if it does not exist.
    pub async fn hash(&self, name: &str) -> Result<crate::Table, ClusterError> {
        let (handle, owner, record) = self.open(name, IndexKind::Hash).await?;
        match handle {
            crate::catalog::Opened::Table(t) => Ok(crate::Table::new(t, owner, self.retry(record.name))),
            crate::catalog::Opened::Tree(_) => unreachable!("opened by kind"),
        }
    }

    fn retry(&self, index: String) -> crate::handle::Retry {
        crate::handle::Retry::new(index, self.mandate.clone(), self.epochs())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.closed {
            // The lease lapses; the control plane expires this client and
            // another client reaps it (`reap_expired`).
            self.mandate.revoke();
            self.session.lock().unwrap_or_else(|p| p.into_inner()).stop();
        }
    }
}

/// Pause before finishing an index's logs again after the region left the
/// map under them (the map catches up within a round trip of the change).
const MAP_MOVED_PAUSE: Duration = Duration::from_millis(5);

/// Longest wait for a newer map after a step refused under an old one:
/// the map watch passes over a dead member in a tenth of a second; a map
/// that does not move within this was not the cause.
const MAP_MOVED_WAIT: Duration = Duration::from_secs(1);

/// Attempts at finishing one index's logs while its region moves: a few
/// map changes in a row, not a dead node (its eviction is recovery's next
/// step, which a coordinator waiting here would hold back).
const MAP_MOVED_ATTEMPTS_MAX: u32 = 8;

/// Whether `e` says the region moved under a step that is safe to take
/// again: it left the map (a catch-up or a promotion), the map is older
/// than a node's, or a replica went away. A lost connection is not: the
/// node may be dead, and the caller decides.
fn map_moved(e: &ClusterError) -> bool {
    use fabric::FabricError as F;
    matches!(
        e.fabric_cause(),
        Some(F::UnknownRegion { .. } | F::StaleEpoch { .. } | F::NoSuchReplica { .. })
    )
}

/// A transport to every node of `map`: their images if the endpoints are
/// paths (`shm`), else their tcp servers.
async fn reach(map: &ClusterMap, tcp: fabric::transport::TcpOptions) -> Result<AnyTransport, ClusterError> {
    if map.nodes().is_empty() {
        return Err(ClusterError::Map(
            "the cluster has no memory nodes yet: start some with `kintsugi memnode --control ...`".into(),
        ));
    }
    let shm = map.nodes().iter().filter(|n| n.endpoint.starts_with('/')).count();
    if shm == map.nodes().len() {
        Ok(ShmTransport::attach_map(map)?.into())
    } else if shm == 0 {
        Ok(TcpTransport::connect_map_with(map, tcp).await?.into())
    } else {
        Err(ClusterError::Map(format!(
            "{shm} of {} memory nodes advertise an image path and the others a tcp address: one cluster uses one transport",
            map.nodes().len()
        )))
    }
}

impl Cluster {
    /// The cluster clock (ms), as the first member that answers reads it:
    /// the clock an expired client's quarantine ends by (issue 46: one clock
    /// for the quarantine). A follower's reading trails the leader's, so a
    /// judgement by it only waits longer; this process's own clock is never
    /// used.
    pub async fn cluster_clock_ms(&self) -> Result<u64, ClusterError> {
        Ok(self.status().await?.clock_ms)
    }
}
