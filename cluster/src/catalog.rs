//! Opening a named index: find it in the control plane's catalog, or
//! create it (place its region, wait until every replica is allocated,
//! format the heap, build the empty index, say it is ready), or wait for
//! whoever is creating it, or take the creation over from a creator that
//! expired.

use std::time::{Duration, Instant};

use control_plane::state::{
    ClientState, Command, IndexKind, IndexRecord, IndexState, IndexVariant, Outcome, OWNER_ID_END,
};
use index::btree::BTree;
use index::hash::{HashConfig, HashTable};
use index::Variant;
use txn::{Heap, HeapConfig};

use crate::client::Cluster;
use crate::owners::Owner;
use crate::ClusterError;

/// Longest wait for an index to become usable: its region allocated on
/// every replica and formatted by its creator.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Pause between looks at the catalog while waiting.
pub const OPEN_POLL: Duration = Duration::from_millis(20);

/// Heap chunk size of every named index: the txn default.
pub use txn::CHUNK_BYTES;

/// An opened index of either kind.
pub(crate) enum Opened {
    Tree(BTree),
    Table(HashTable),
}

fn variant(v: IndexVariant) -> Variant {
    match v {
        IndexVariant::Optimal => Variant::Optimal,
        IndexVariant::Rtx => Variant::Rtx,
        IndexVariant::Dtx => Variant::Dtx,
    }
}

impl Cluster {
    pub(crate) async fn open(
        &self,
        name: &str,
        kind: IndexKind,
    ) -> Result<(Opened, Owner, IndexRecord), ClusterError> {
        let owner = self.take_owner()?;
        let deadline = Instant::now() + OPEN_TIMEOUT;
        loop {
            let indexes = self.indexes().await?;
            let record = match indexes.into_iter().find(|x| x.name == name) {
                None if !self.options.create_missing => {
                    return Err(ClusterError::UnknownIndex(name.to_owned()))
                }
                None => match self.create(name, kind).await? {
                    Some(r) => r,
                    None => continue, // created by another meanwhile
                },
                Some(x) => x,
            };
            if record.kind != kind {
                return Err(ClusterError::WrongKind {
                    name: name.to_owned(),
                    found: record.kind.to_string(),
                    asked: kind.to_string(),
                });
            }
            // A node whose renewal came late refuses a batch whole, before
            // any verb (a node just placed does until its first grant):
            // attaching or formatting is taken again from the start.
            let lapsed = |e: &ClusterError| e.node_lease_lapsed() && Instant::now() < deadline;
            match record.state {
                IndexState::Ready => match self.attach(&record, &owner).await {
                    Ok(opened) => return Ok((self.following_reclaims(opened), owner, record)),
                    Err(e) if lapsed(&e) => tracing::debug!(index = name, error = %e, "attaching again"),
                    // This process's own renewal came late (no leader for a
                    // moment): nothing was issued. Attached again once a
                    // renewal lands, as an operation is (`handle::Retry`);
                    // a lease lost for good ends it.
                    Err(e)
                        if matches!(e.fabric_cause(), Some(fabric::FabricError::LeaseUncertain))
                            && self.mandate.held_within(OPEN_TIMEOUT).await =>
                    {
                        tracing::debug!(index = name, error = %e, "attaching again once the lease held")
                    }
                    Err(e) => return Err(e),
                },
                IndexState::Creating { client } if client == self.me.id => {
                    match self.build(&record, &owner, deadline).await {
                        Ok(opened) => return Ok((self.following_reclaims(opened), owner, record)),
                        Err(e) if lapsed(&e) => tracing::debug!(index = name, error = %e, "formatting again"),
                        Err(e) => return Err(e),
                    }
                }
                IndexState::Creating { client } => {
                    if !self.is_live(client).await? {
                        let claim = Command::ClaimIndex {
                            name: name.to_owned(),
                            client: self.me.id,
                        };
                        // A refusal means someone else claimed it first.
                        let _ = self
                            .members
                            .command(&format!("claiming index {name:?}"), &claim)
                            .await;
                        continue;
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::Timeout {
                    what: format!("index {name:?} is still being created by another client"),
                    after: humantime::format_duration(OPEN_TIMEOUT).to_string(),
                });
            }
            tokio::time::sleep(OPEN_POLL).await;
        }
    }

    /// Places the index's region. `None` if another client created the
    /// name first.
    async fn create(&self, name: &str, kind: IndexKind) -> Result<Option<IndexRecord>, ClusterError> {
        let create = Command::CreateIndex {
            name: name.to_owned(),
            kind,
            variant: self.options.variant,
            size_bytes: self.options.index_bytes,
            replicas: self.options.replicas,
            client: self.me.id,
        };
        match self
            .members
            .command(&format!("creating index {name:?}"), &create)
            .await
        {
            Ok(Outcome::Index(x)) => {
                tracing::info!(
                    index = name,
                    region = x.region,
                    "index placed; formatting it once its region is allocated"
                );
                Ok(Some(x))
            }
            Ok(other) => Err(ClusterError::Map(format!(
                "unexpected answer to index creation: {other:?}"
            ))),
            Err(ClusterError::Refused { source, .. })
                if source.status().is_some_and(|s| s.as_u16() == 409)
                    && source.to_string().contains("exists") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Formats the heap and builds the empty index, then marks it ready.
    /// Formatting starts from nothing, so a creation taken over from an
    /// expired creator starts over cleanly.
    async fn build(&self, x: &IndexRecord, owner: &Owner, deadline: Instant) -> Result<Opened, ClusterError> {
        self.await_region(x, deadline).await?;
        let mut fabric = self.fabric();
        let config = HeapConfig {
            owner_slots: OWNER_ID_END,
            chunk_bytes: CHUNK_BYTES,
        };
        let heap = Heap::format(&mut fabric, x.region, config).await?;
        let opened = match x.kind {
            IndexKind::Btree => {
                Opened::Tree(BTree::create(fabric, heap, variant(x.variant), owner.id()).await?)
            }
            IndexKind::Hash => Opened::Table(
                HashTable::create(
                    fabric,
                    heap,
                    variant(x.variant),
                    owner.id(),
                    HashConfig::for_keys(self.options.hash_keys),
                )
                .await?,
            ),
        };
        let ready = Command::IndexReady {
            name: x.name.clone(),
            client: self.me.id,
        };
        self.members
            .command(&format!("marking index {:?} ready", x.name), &ready)
            .await?;
        tracing::info!(index = %x.name, kind = %x.kind, variant = %x.variant, region = x.region, "index created");
        Ok(opened)
    }

    /// `opened`, its transaction client following this process's reclaims
    /// (`txn::quiesce`). A hash table's heap is never reclaimed (its
    /// subtables are retired, `Heap::mark_retiring`), so its client need
    /// not, and must not give up blocks no reclaim would find.
    fn following_reclaims(&self, mut opened: Opened) -> Opened {
        if let Opened::Tree(tree) = &mut opened {
            tree.follow_reclaims(self.reclaims.clone());
        }
        opened
    }

    async fn attach(&self, x: &IndexRecord, owner: &Owner) -> Result<Opened, ClusterError> {
        self.await_region(x, Instant::now() + OPEN_TIMEOUT).await?;
        let mut fabric = self.fabric();
        let heap = Heap::open(&mut fabric, x.region).await?;
        Ok(match x.kind {
            IndexKind::Btree => {
                Opened::Tree(BTree::open_with(fabric, heap, owner.id(), self.options.tx.clone()).await?)
            }
            IndexKind::Hash => {
                Opened::Table(HashTable::open(fabric, heap, owner.id(), self.options.tx.clone()).await?)
            }
        })
    }

    /// Waits until the region is in the clients' map (allocated on every
    /// replica, and not out of it while recovery restores it or catches a
    /// new replica up) and this process routes by a map that has it.
    /// Allocated is not enough: a step taken during a catch-up meets a map
    /// without the region, and a caller that retries a few times (closing
    /// a client, finishing logs) gives up long before a catch-up ends.
    pub(crate) async fn await_region(&self, x: &IndexRecord, deadline: Instant) -> Result<(), ClusterError> {
        let mut epochs = self.epochs();
        loop {
            let regions = self
                .members
                .call("listing regions", |c| async move { c.regions().await })
                .await?;
            // The index record came from a member that had applied its
            // creation; the member answering now may lag behind it and not
            // know the region yet (seen under load). Missing until the
            // deadline, the region does not exist.
            let Some(region) = regions.iter().find(|r| r.id == x.region) else {
                if Instant::now() >= deadline {
                    return Err(ClusterError::Map(format!(
                        "index {:?} names region {}, which does not exist",
                        x.name, x.region
                    )));
                }
                tokio::time::sleep(OPEN_POLL).await;
                continue;
            };
            if region.usable() && self.mandate.epoch() >= region.epoch {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let what = if region.ready() {
                    format!(
                        "region {} of index {:?} is out of the map while recovery restores it or catches a replica up (see `kintsugi ctl regions` and the control plane's log)",
                        x.region, x.name
                    )
                } else {
                    format!(
                        "region {} of index {:?} is not allocated on memory node(s) {:?} (see their logs)",
                        x.region, x.name, region.pending
                    )
                };
                return Err(ClusterError::Timeout {
                    what,
                    after: humantime::format_duration(OPEN_TIMEOUT).to_string(),
                });
            }
            if self.mandate.epoch() < region.epoch {
                let _ = tokio::time::timeout(OPEN_POLL * 10, epochs.wait_for(|&e| e >= region.epoch)).await;
            } else {
                tokio::time::sleep(OPEN_POLL).await;
            }
        }
    }

    async fn is_live(&self, client: control_plane::state::ClientId) -> Result<bool, ClusterError> {
        let clients = self
            .members
            .call("listing clients", |c| async move { c.clients().await })
            .await?;
        Ok(clients
            .iter()
            .any(|c| c.id == client && c.state == ClientState::Live))
    }
}
