//! A planned promotion (`kintsugi ctl region promote`): a backup becomes
//! the primary of a region while clients keep working, and nothing
//! acknowledged is lost.
//!
//! Lock words and the exact chunk counter live on the primary only
//! (`docs/txn.md` §8), so a promoted backup must have them rebuilt before
//! anyone uses it, and no verb of the old epoch may land meanwhile:
//!
//! 1. `promote_backup` commits: roles swap at a new epoch `E`, and the
//!    region leaves the clients' map (`restoring`).
//! 2. Wait until every replica's node reports fencing at `E` or later:
//!    from then on a batch of an older map is refused by each of them;
//!    then [`FENCE_SETTLE`] for the batches that passed the check just
//!    before (the residual risk: a client descheduled for longer than that
//!    between two verbs of one batch).
//! 3. On the new primary, routed by the full map: rebuild the chunk
//!    counter and every lock word, unlocked at a version floor above any
//!    the old primary held (`Heap::restore_after_promotion`); bring every
//!    backup's metas to the new primary's (`Heap::align_backups`: the
//!    demoted primary may miss a write cut off before its primary CAS),
//!    pass after pass until one finds nothing to align;
//!    then finish the last log of every owner id (a DOING commit is rolled
//!    forward, an INIT one aborted: its locks vanished with the rebuild).
//!    A region holding a dtx index has its DTX logs finished instead: for
//!    every owner id, the locks of its unfinished logs that guard a record
//!    it marked invisible are taken again on the new primary (DTX lock
//!    words live on the primary only), then every log is rolled back or
//!    forward (`txn::dtx`'s recovery), then any lock word still held is
//!    freed (a stale word a re-replication copied from a former primary).
//!    A DTX client's releases owed from before are void once another node
//!    is primary (`Release::primary`).
//! 4. `region_restored` commits: the region is back in the map at a newer
//!    epoch. Clients waiting in their handles' retry loop run their
//!    operation again (their own cut-off commits were finished in step 3).
//!
//! Every step is idempotent: a promoter that dies part-way leaves the
//! region out of the map, and running the promotion's steps 2–4 again
//! (`Cluster::finish_promotion`) completes it.

use std::time::{Duration, Instant};

use control_plane::state::{Command, IndexKind, IndexState, IndexVariant, MemNodeId, Outcome, OWNER_ID_END};
use fabric::{ClusterMap, Epoch, RegionId};
use txn::{Heap, LockWord, RepairOutcome, TxClient};

use crate::client::Cluster;
use crate::ClusterError;

/// Longest wait for every replica's node to fence at the promotion's epoch,
/// and for a commit under a live lease to finish.
pub const PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between looks while waiting.
const PROMOTE_POLL: Duration = Duration::from_millis(2);

/// How long after every node fenced before anything is rebuilt, and
/// between passes of aligning the backups. A node checks the epoch once
/// per batch, so a batch that passed the check just before the fence
/// still runs its verbs (an `shm` client runs them in its own process);
/// such a batch is a few microseconds long unless its process is
/// descheduled for longer than this between two verbs. The passes repeat
/// until one finds every backup equal to the primary.
pub const FENCE_SETTLE: Duration = Duration::from_millis(5);

/// Most passes of aligning the backups: the stale batches are the ones in
/// flight at the fence, so passes after the first find nothing.
const ALIGN_PASSES_MAX: u32 = 20;

/// What a promotion did and how long each step took.
#[derive(Clone, Debug)]
pub struct Promotion {
    /// The region.
    pub region: RegionId,
    /// Its new primary.
    pub primary: MemNodeId,
    /// The epoch the roles changed at.
    pub epoch: Epoch,
    /// The epoch the region was published at again.
    pub published_epoch: Epoch,
    /// When `promote_backup` was known committed.
    pub committed_at: Instant,
    /// From the commit until every replica's node fenced.
    pub fenced: Duration,
    /// From the commit until the new primary was rebuilt and every log finished.
    pub restored: Duration,
    /// From the commit until the region was back in the map.
    pub published: Duration,
    /// Lock words rebuilt.
    pub lock_words: u64,
}

impl Cluster {
    /// Makes `node`, a backup of `region`, its primary while clients keep
    /// working (see the module docs). Refused for a region holding an
    /// `optimal` index (its locks live on the primary only and nothing can
    /// rebuild them), or both an rtx and a dtx index (their logs share each
    /// owner id's slot, and a promotion finishes the slot by one protocol).
    pub async fn promote(&self, region: RegionId, node: MemNodeId) -> Result<Promotion, ClusterError> {
        let indexes = self.indexes().await?;
        if let Some(x) = indexes
            .iter()
            .find(|x| x.region == region && x.variant == IndexVariant::Optimal)
        {
            return Err(ClusterError::Map(format!(
                "region {region} holds the optimal index {:?}: its locks live on the primary only, so a \
                 promotion would lose them; only rtx indexes can be promoted",
                x.name
            )));
        }
        let holds = |v: IndexVariant| indexes.iter().any(|x| x.region == region && x.variant == v);
        if holds(IndexVariant::Dtx) && holds(IndexVariant::Rtx) {
            return Err(ClusterError::Map(format!(
                "region {region} holds both rtx and dtx indexes: their logs share each owner id's slot, and a \
                 promotion finishes a slot by one protocol; keep them in separate regions"
            )));
        }
        let promote = Command::PromoteBackup {
            region,
            node,
            restorer: Some(self.me.id),
        };
        self.asked_to_restore(region);
        let r = match self
            .members
            .command(&format!("promoting node {node} in region {region}"), &promote)
            .await?
        {
            Outcome::Region(r) => r,
            other => {
                return Err(ClusterError::Map(format!(
                    "unexpected answer to the promotion: {other:?}"
                )))
            }
        };
        let committed_at = Instant::now();
        tracing::info!(
            region,
            primary = node,
            epoch = r.epoch,
            "promotion committed; restoring"
        );
        self.restore_promoted(region, committed_at, true).await
    }

    /// Steps 2–4 of a promotion of `region` (see the module docs): what a
    /// promotion left part-way needs. Durations count from this call.
    pub async fn finish_promotion(&self, region: RegionId) -> Result<Promotion, ClusterError> {
        let start = Instant::now();
        let restoring = self.restoring(region).await?;
        self.restore_promoted(region, start, restoring).await
    }

    /// Steps 2–4, or what another promoter (the recovery coordinator, which
    /// finishes any promotion it sees) made of them: two promoters of one
    /// region race harmlessly, every step being idempotent, and the one
    /// that fails and finds the region published reports it done, if the
    /// region was being restored when this promoter began (`was_restoring`:
    /// a `finish_promotion` of a region never promoted fails).
    async fn restore_promoted(
        &self,
        region: RegionId,
        start: Instant,
        was_restoring: bool,
    ) -> Result<Promotion, ClusterError> {
        match self.restore_promoted_here(region, start).await {
            Ok(p) => Ok(p),
            // Still ours to restore: no other promoter will publish it, and
            // waiting for one would only hold the caller (the recovery
            // coordinator retries the step after its backoff).
            Err(e) if was_restoring && self.restore_claimed_by_me(region).await => Err(e),
            Err(e) if was_restoring => {
                // Any step may fail once another promoter claimed the
                // restore or published (a stale epoch, the region no longer
                // being restored, a refused `region_restored`); the region
                // in the map says it was published, once the member asked
                // has applied it and the other promoter is done.
                // A claim given back (its holder stepped down: a deposed
                // coordinator) or lapsed with its holder leaves nobody to
                // publish: the step fails at once and is tried again, when
                // the claim is this process's to take.
                let deadline = Instant::now() + PROMOTE_TIMEOUT;
                let published = loop {
                    let Ok(status) = self.status().await else {
                        return Err(e);
                    };
                    let r = status.regions.iter().find(|r| r.id == region).cloned();
                    let unclaimed = r.as_ref().is_some_and(|r| {
                        r.restorer.is_none_or(|holder| {
                            !status
                                .clients
                                .iter()
                                .any(|c| c.id == holder && c.state == control_plane::state::ClientState::Live)
                        })
                    });
                    if r.as_ref().is_some_and(|r| r.usable()) || unclaimed || Instant::now() >= deadline {
                        break r;
                    }
                    tokio::time::sleep(PROMOTE_POLL).await;
                };
                match published {
                    Some(r) if r.usable() => {
                        tracing::info!(region, error = %e, "the promotion was finished by another promoter");
                        let took = start.elapsed();
                        Ok(Promotion {
                            region,
                            primary: r.primary(),
                            epoch: r.epoch,
                            published_epoch: r.epoch,
                            committed_at: start,
                            fenced: took,
                            restored: took,
                            published: took,
                            lock_words: 0,
                        })
                    }
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn restore_promoted_here(
        &self,
        region: RegionId,
        start: Instant,
    ) -> Result<Promotion, ClusterError> {
        if !self.lease_holds() {
            return Err(ClusterError::LeaseLost(
                "the promoter's lease is not certain".into(),
            ));
        }
        let (epoch, primary) = self.claim_and_fence(region).await?;
        let fenced = start.elapsed();
        tokio::time::sleep(FENCE_SETTLE).await;
        let mut fabric = self.full_fabric_since(epoch).await?;
        let mut lock_words = 0;
        // A region without a heap (made by `ctl region create`, or an
        // index's whose creation never formatted it) has no primary-only
        // words of ours. A formatted index's region must open on its new
        // primary: one that does not holds no proven copy, and publishing
        // it would serve nothing for everything (design.md §1b).
        let opened = Heap::open(&mut fabric, region).await;
        // A read that did not complete (the new primary's own lease lapsed
        // for a moment, a connection lost) says nothing about what the
        // region holds: the step fails and is tried again, and is never
        // taken for "no heap here".
        if let Err(txn::TxError::Fabric(e)) = &opened {
            return Err(ClusterError::Map(format!(
                "cannot read region {region}'s heap header on its new primary (node {primary}): {e}"
            )));
        }
        if let Err(e) = &opened {
            if let Some(index) = self.formatted_index_in(region).await? {
                return Err(ClusterError::Map(format!(
                    "region {region}'s new primary (node {primary}) holds no heap that opens ({e}), though index \
                     {index:?} was formatted there: refusing to publish a copy that is not the index"
                )));
            }
        }
        if let Ok(heap) = opened {
            let floor = LockWord::promotion_floor(txn::now_tick(&fabric));
            lock_words = heap.restore_after_promotion(&mut fabric, floor).await?.lock_words;
            let mut passes = 0;
            loop {
                passes += 1;
                let differed = heap.align_backups(&mut fabric).await?;
                tracing::debug!(region, passes, differed, "backups aligned");
                if differed == 0 {
                    break;
                }
                if passes >= ALIGN_PASSES_MAX {
                    return Err(ClusterError::Map(format!(
                        "region {region}'s backups still differ from the new primary after {passes} passes: \
                         something writes to the fenced region"
                    )));
                }
                tokio::time::sleep(FENCE_SETTLE).await;
            }
            let owner = self.take_owner()?;
            if self.holds_dtx(region).await? {
                self.finish_dtx_logs(region, heap, owner.id(), &fabric).await?;
                if self.holds_hash(region).await? {
                    self.converge_hash_as(heap, owner.id(), &mut fabric).await?;
                }
                return self
                    .publish_restored(region, start, epoch, primary, fenced, lock_words)
                    .await;
            }
            let mut tx = TxClient::new(fabric, heap, owner.id(), self.options.tx.clone())?;
            let open = txn::log::unfinished(&heap, tx.fabric(), 1..OWNER_ID_END).await?;
            for id in open {
                let deadline = Instant::now() + PROMOTE_TIMEOUT;
                while tx.finish_owner_log(id).await? == RepairOutcome::Busy {
                    if Instant::now() >= deadline {
                        return Err(ClusterError::Timeout {
                            what: format!("owner {id}'s commit in region {region} to finish"),
                            after: humantime::format_duration(PROMOTE_TIMEOUT).to_string(),
                        });
                    }
                    tokio::time::sleep(PROMOTE_POLL).await;
                }
            }
            if self.holds_hash(region).await? {
                self.converge_hash_as(heap, owner.id(), tx.fabric()).await?;
            }
        }
        self.publish_restored(region, start, epoch, primary, fenced, lock_words)
            .await
    }

    /// Step 3 for a region holding a dtx index: every owner id's DTX locks
    /// taken again where recovery needs them, then every owner id's logs
    /// finished (see the module docs), as `owner`.
    async fn finish_dtx_logs(
        &self,
        region: RegionId,
        heap: Heap,
        owner: txn::OwnerId,
        fabric: &fabric::Client,
    ) -> Result<(), ClusterError> {
        let mut dtx = txn::dtx::DtxClient::new(fabric.fork(), heap, owner, self.options.tx.clone())?;
        // What an earlier promoter of this process, as the same owner id,
        // left adopted (see `Cluster::finish_logs`).
        dtx.finish_owner_log(owner).await?;
        let mut relocked = 0;
        for id in (1..OWNER_ID_END).filter(|&id| id != owner) {
            relocked += dtx.relock_after_promotion(id).await?;
        }
        let mut finished = txn::dtx::Finished::default();
        for id in (1..OWNER_ID_END).filter(|&id| id != owner) {
            finished += dtx.finish_owner_log(id).await?;
        }
        dtx.release_pending().await?;
        // Every log is finished and nobody else acts on the region: a lock
        // word still held is a stale one a re-replication copied.
        let mut freed = 0;
        for x in self.indexes().await?.into_iter().filter(|x| x.region == region) {
            freed += match (x.kind, x.variant) {
                (IndexKind::Btree, IndexVariant::Dtx) => {
                    index::btree::BTree::open_with(fabric.fork(), heap, owner, self.options.tx.clone())
                        .await?
                        .free_stale_locks()
                        .await?
                }
                (IndexKind::Hash, IndexVariant::Dtx) => {
                    index::hash::HashTable::open(fabric.fork(), heap, owner, self.options.tx.clone())
                        .await?
                        .free_stale_locks()
                        .await?
                }
                _ => 0,
            };
        }
        tracing::info!(
            region,
            relocked,
            ?finished,
            freed,
            "DTX logs finished after the promotion"
        );
        Ok(())
    }

    /// Step 4: publishes the restored region.
    async fn publish_restored(
        &self,
        region: RegionId,
        start: Instant,
        epoch: Epoch,
        primary: MemNodeId,
        fenced: Duration,
        lock_words: u64,
    ) -> Result<Promotion, ClusterError> {
        let restored = start.elapsed();
        let publish = Command::RegionRestored { region };
        let published_epoch = match self
            .members
            .command(&format!("publishing region {region}"), &publish)
            .await
        {
            Ok(Outcome::Region(r)) => r.epoch,
            Ok(other) => return Err(ClusterError::Map(format!("unexpected answer: {other:?}"))),
            Err(e) => return Err(e),
        };
        tracing::info!(
            region,
            primary,
            published_epoch,
            lock_words,
            "region restored and published"
        );
        Ok(Promotion {
            region,
            primary,
            epoch,
            published_epoch,
            committed_at: start,
            fenced,
            restored,
            published: start.elapsed(),
            lock_words,
        })
    }

    /// If `region` holds an rtx hash table: brings every backup's slots to
    /// the primary's (`HashTable::converge_backups`) through `fabric` (the
    /// full map: the region may be out of the clients'). RACE slots are
    /// CASed on the primary, then on the backups, so a writer cut off
    /// between the two (its primary or a backup died) left them apart.
    /// Returns the words moved.
    pub async fn converge_hash(
        &self,
        region: RegionId,
        fabric: &mut fabric::Client,
    ) -> Result<u64, ClusterError> {
        if !self.holds_hash(region).await? {
            return Ok(0);
        }
        let heap = Heap::open(fabric, region).await?;
        let owner = self.take_owner()?;
        self.converge_hash_as(heap, owner.id(), fabric).await
    }

    /// Whether `region` holds a hash table whose slots reach the backups
    /// (rtx, dtx; optimal's are primary-only).
    async fn holds_hash(&self, region: RegionId) -> Result<bool, ClusterError> {
        Ok(self
            .indexes()
            .await?
            .into_iter()
            .any(|x| x.region == region && x.kind == IndexKind::Hash && x.variant != IndexVariant::Optimal))
    }

    /// The name of the formatted (ready) index `region` holds, if any.
    async fn formatted_index_in(&self, region: RegionId) -> Result<Option<String>, ClusterError> {
        Ok(self
            .indexes()
            .await?
            .into_iter()
            .find(|x| x.region == region && x.state == IndexState::Ready)
            .map(|x| x.name))
    }

    /// Whether `region` holds a dtx index.
    async fn holds_dtx(&self, region: RegionId) -> Result<bool, ClusterError> {
        Ok(self
            .indexes()
            .await?
            .into_iter()
            .any(|x| x.region == region && x.variant == IndexVariant::Dtx))
    }

    /// [`Cluster::converge_hash`] of the table in `heap`, as `owner` (a
    /// promotion's, which holds one already: `ctl region promote` connects
    /// with one).
    async fn converge_hash_as(
        &self,
        heap: Heap,
        owner: txn::OwnerId,
        fabric: &mut fabric::Client,
    ) -> Result<u64, ClusterError> {
        let region = heap.region();
        let mut table =
            index::hash::HashTable::open(fabric.fork(), heap, owner, self.options.tx.clone()).await?;
        let moved = table.converge_backups().await?;
        tracing::debug!(region, moved, "hash slots converged on the backups");
        Ok(moved)
    }

    /// Claims the restore of `region` for this process
    /// (`Command::ClaimRestore`, at a new epoch), then waits until every
    /// replica's node fences at that epoch: from then on no verb of an
    /// earlier claimant lands (a promoter that published nothing yet, a
    /// coordinator of a leader that lost office), so two restorers never
    /// write the region at once, nor one after the other published it.
    /// Refused while another live client holds the claim. Returns the
    /// epoch and the primary.
    pub async fn claim_and_fence(&self, region: RegionId) -> Result<(Epoch, MemNodeId), ClusterError> {
        let claim = Command::ClaimRestore {
            region,
            client: self.me.id,
        };
        self.asked_to_restore(region);
        let claimed = self
            .members
            .command(&format!("claiming the restore of region {region}"), &claim)
            .await?;
        // The member a status is read from may not have applied the claim
        // yet: its older epoch would pass for fenced.
        let at_least = match claimed {
            Outcome::Region(r) => r.epoch,
            _ => 0,
        };
        self.await_fenced(region, at_least).await
    }

    /// Gives back every restore claim this process holds
    /// (`Command::ReleaseRestore`): what a recovery coordinator does when
    /// its member loses the lead, before it leaves. Leaving waits for
    /// regions out of the map to come back, which a claim it keeps would
    /// stop the new leader's coordinator from doing until this process
    /// expires. Returns the regions given back; a claim that moved on
    /// meanwhile (expired, published) is not an error.
    ///
    /// Given back: every claim this process asked for, answered or not
    /// (only its own requests name it restorer), not the claims a status
    /// read shows. A deposed coordinator's last claim may have been
    /// committed by the new leader after its answer was lost, and the
    /// member it reads a status from (its own, a follower now) may not
    /// have applied it yet: kept, it held the region out of the map for
    /// `OPEN_TIMEOUT` while this process left (the chaos_run kill-primary
    /// dtx CI failure). The release itself is ordered after the claim in
    /// the leader's log, so it finds it if it was committed.
    pub async fn release_restore_claims(&self) -> Result<Vec<RegionId>, ClusterError> {
        let regions = self
            .restore_claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut given = Vec::new();
        for region in regions {
            let release = Command::ReleaseRestore {
                region,
                client: self.me.id,
            };
            match self
                .members
                .command(&format!("giving back the restore of region {region}"), &release)
                .await
            {
                Ok(_) => given.push(region),
                // Not held (never granted, published, lapsed) or gone.
                Err(e) if e.refused_with(409) || e.refused_with(404) => {}
                Err(e) => return Err(e),
            }
            self.restore_claims
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&region);
        }
        Ok(given)
    }

    /// Notes that this process is about to ask for `region`'s restore
    /// claim (`Cluster::restore_claims`).
    fn asked_to_restore(&self, region: RegionId) {
        self.restore_claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(region);
    }

    /// Starts a copy into `node`'s replica of `region` being made: a new
    /// epoch (`FenceCopy`), then waits until every node holding the region
    /// (the replica being made included) fences at it. Returns the epoch: a
    /// copy made with a map of that epoch or later is the only one whose
    /// WRITEs the nodes still take; any earlier copier's are refused as
    /// stale.
    pub async fn fence_copy(&self, region: RegionId, node: MemNodeId) -> Result<Epoch, ClusterError> {
        let fence = Command::FenceCopy { region, node };
        let fenced = self
            .members
            .command(
                &format!("fencing region {region} for a copy into node {node}"),
                &fence,
            )
            .await?;
        let Outcome::Region(r) = fenced else {
            return Err(ClusterError::Map(format!(
                "unexpected answer to fencing region {region}: {fenced:?}"
            )));
        };
        let deadline = Instant::now() + PROMOTE_TIMEOUT;
        loop {
            let status = self.status().await?;
            let behind = behind(&status, r.replicas.iter().chain(&r.syncing), r.epoch);
            if behind.is_empty() {
                return Ok(r.epoch);
            }
            dead_among(&status, region, &behind)?;
            if Instant::now() >= deadline {
                return Err(ClusterError::Timeout {
                    what: format!(
                        "memory node(s) {behind:?} to fence at epoch {} for a copy",
                        r.epoch
                    ),
                    after: humantime::format_duration(PROMOTE_TIMEOUT).to_string(),
                });
            }
            tokio::time::sleep(PROMOTE_POLL).await;
        }
    }

    /// Whether `region` is being restored under this process's claim, as
    /// a member sees it now (false if none answers).
    async fn restore_claimed_by_me(&self, region: RegionId) -> bool {
        self.status().await.is_ok_and(|s| {
            s.regions
                .iter()
                .any(|r| r.id == region && r.being_restored() && r.restorer == Some(self.me.id))
        })
    }

    async fn restoring(&self, region: RegionId) -> Result<bool, ClusterError> {
        Ok(self
            .status()
            .await?
            .regions
            .iter()
            .any(|r| r.id == region && r.being_restored()))
    }

    /// Waits until every node holding `region` fences at the region's
    /// epoch, as a member that has applied epoch `at_least` sees it; the
    /// region must be out of the clients' map (being restored
    /// after a promotion, or catching a new replica up). Returns that
    /// epoch and the primary.
    async fn await_fenced(
        &self,
        region: RegionId,
        at_least: Epoch,
    ) -> Result<(Epoch, MemNodeId), ClusterError> {
        let deadline = Instant::now() + PROMOTE_TIMEOUT;
        loop {
            let status = self.status().await?;
            let r = status
                .regions
                .iter()
                .find(|r| r.id == region)
                .ok_or_else(|| ClusterError::Map(format!("no region {region}")))?;
            if r.epoch < at_least {
                // A member behind the claim answered.
                if Instant::now() >= deadline {
                    return Err(ClusterError::Timeout {
                        what: format!("a member to apply the claim of region {region} at epoch {at_least}"),
                        after: humantime::format_duration(PROMOTE_TIMEOUT).to_string(),
                    });
                }
                tokio::time::sleep(PROMOTE_POLL).await;
                continue;
            }
            if !r.being_restored() {
                return Err(ClusterError::NotRestoring(region));
            }
            let behind = behind(&status, r.replicas.iter(), r.epoch);
            if behind.is_empty() {
                return Ok((r.epoch, r.primary()));
            }
            dead_among(&status, region, &behind)?;
            if Instant::now() >= deadline {
                return Err(ClusterError::Timeout {
                    what: format!("memory node(s) {behind:?} to fence at epoch {}", r.epoch),
                    after: humantime::format_duration(PROMOTE_TIMEOUT).to_string(),
                });
            }
            tokio::time::sleep(PROMOTE_POLL).await;
        }
    }

    /// A fabric client routing by the full map (every region, the ones
    /// out of the clients' map included, with the replicas being made
    /// listed after the others), outside the process's mandate: what
    /// recovery restores and copies regions with.
    pub async fn full_fabric(&self) -> Result<fabric::Client, ClusterError> {
        let map = self.full_map().await?;
        self.transport.learn(&map)?;
        Ok(fabric::Client::new(map, self.transport.clone()))
    }

    /// [`Cluster::full_fabric`] over a map of `epoch` or later: the member
    /// that answers may be a follower that has not applied the promotion
    /// yet, and the fenced nodes refuse an older map.
    pub async fn full_fabric_since(&self, epoch: Epoch) -> Result<fabric::Client, ClusterError> {
        let deadline = Instant::now() + PROMOTE_TIMEOUT;
        loop {
            let map = self.full_map().await?;
            if map.epoch() >= epoch {
                self.transport.learn(&map)?;
                return Ok(fabric::Client::new(map, self.transport.clone()));
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::Timeout {
                    what: format!("a map of epoch {epoch} (the members answer {})", map.epoch()),
                    after: humantime::format_duration(PROMOTE_TIMEOUT).to_string(),
                });
            }
            tokio::time::sleep(PROMOTE_POLL).await;
        }
    }

    /// Every node and region, the ones being restored included.
    async fn full_map(&self) -> Result<ClusterMap, ClusterError> {
        let status = self.status().await?;
        control_plane::state::map_of(status.epoch, status.memnodes.iter(), status.regions.iter(), true)
            .map_err(|e| ClusterError::Map(e.to_string()))
    }
}

/// Fails a fence wait at once when one of the nodes it waits for, `behind`,
/// is declared dead: a dead node never reports an epoch again, so the wait
/// would last its whole timeout for nothing (a node the restored map of a
/// snapshot names and that never came back, a death during a copy). The
/// step fails and is tried again after recovery's backoff, once the node
/// is evicted.
fn dead_among(
    status: &control_plane::api::Status,
    region: RegionId,
    behind: &[MemNodeId],
) -> Result<(), ClusterError> {
    let dead: Vec<MemNodeId> = behind
        .iter()
        .copied()
        .filter(|&id| {
            status
                .memnodes
                .iter()
                .any(|n| n.id == id && n.state == control_plane::state::MemNodeState::Dead)
        })
        .collect();
    if dead.is_empty() {
        return Ok(());
    }
    Err(ClusterError::Map(format!(
        "memory node(s) {dead:?} holding region {region} are dead and will never fence: the region's \
         dead replicas are evicted first"
    )))
}

/// The nodes of `holders` that `status` does not show fencing at `epoch`
/// yet (a node it does not list is behind).
fn behind<'a>(
    status: &control_plane::api::Status,
    holders: impl Iterator<Item = &'a fabric::ReplicaLoc>,
    epoch: Epoch,
) -> Vec<MemNodeId> {
    holders
        .filter(|l| status.memnodes.iter().all(|n| n.id != l.node || n.epoch < epoch))
        .map(|l| l.node)
        .collect()
}
