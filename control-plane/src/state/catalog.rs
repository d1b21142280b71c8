//! Named indexes and region readiness: what a client needs to find an
//! index by name and to know its region is allocated everywhere.
//!
//! An index is created in three committed steps, so that nothing is ever
//! half made: `create_index` places its region (every replica pending) and
//! records it as being created by one live client; each node reports its
//! replica allocated (`replica_ready`); the creator formats the region and
//! says `index_ready`. Until then every other client waits; if the creator
//! stops being live first, another `claim_index`es it and formats it again
//! from the start (nobody else has used the region).

use super::{
    check_name, ClientId, ClientState, CommandError, ControlState, IndexKind, IndexRecord, IndexState,
    IndexVariant, MemNodeId, Outcome, Request, Response,
};
use fabric::RegionId;

/// Named indexes a cluster holds: each is a region, and a node holds at
/// most `fabric::image::REGIONS_PER_NODE_MAX` of those.
pub const INDEXES_MAX: usize = 1024;

impl ControlState {
    pub(super) fn memnode_epoch(&mut self, id: MemNodeId, epoch: fabric::Epoch) -> Response {
        if epoch > self.epoch {
            return Err(CommandError::Invalid(format!(
                "memory node {id} reports epoch {epoch}, beyond the map's {}",
                self.epoch
            )));
        }
        let n = self
            .memnodes
            .get_mut(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        n.epoch = n.epoch.max(epoch);
        Ok(Outcome::MemNode(n.clone()))
    }

    pub(super) fn memnode_fence(&mut self, id: MemNodeId, seq: u64) -> Response {
        if seq > self.reclaim_seq {
            return Err(CommandError::Invalid(format!(
                "memory node {id} reports fence {seq}, beyond the cluster's {}",
                self.reclaim_seq
            )));
        }
        let n = self
            .memnodes
            .get_mut(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        n.fence_seq = n.fence_seq.max(seq);
        Ok(Outcome::MemNode(n.clone()))
    }

    pub(super) fn region_restored(&mut self, region: RegionId) -> Response {
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        if !r.restoring && r.catching_up.is_none() {
            return Err(CommandError::Conflict(format!(
                "region {region} is not being restored"
            )));
        }
        r.restoring = false;
        r.catching_up = None;
        r.restorer = None;
        r.epoch = epoch;
        Ok(Outcome::Region(r.clone()))
    }

    pub(super) fn replica_ready(&mut self, region: RegionId, node: MemNodeId) -> Response {
        let epoch = self.next_epoch();
        let r = self.region_mut(region)?;
        if !r.on(node) {
            return Err(CommandError::Conflict(format!(
                "memory node {node} holds no replica of region {region}"
            )));
        }
        // Readiness changes the clients' map: a region joins it once every
        // replica is allocated.
        r.epoch = epoch;
        // Reported twice (a node that restarted, a retried report): fine.
        r.pending.retain(|&n| n != node);
        Ok(Outcome::Region(r.clone()))
    }

    #[allow(clippy::too_many_arguments)] // the fields of one command
    pub(super) fn create_index(
        &mut self,
        name: &str,
        kind: IndexKind,
        variant: IndexVariant,
        size_bytes: u64,
        replicas: u8,
        client: ClientId,
        req: &Request,
    ) -> Response {
        check_name("index name", name)?;
        if let Some(x) = self.indexes.get(name) {
            return Err(CommandError::Conflict(format!(
                "index {name:?} exists (a {} {} in region {}); open it",
                x.variant, x.kind, x.region
            )));
        }
        if self.indexes.len() >= INDEXES_MAX {
            return Err(CommandError::Full(format!(
                "a cluster holds {INDEXES_MAX} indexes at most"
            )));
        }
        self.live_client(client)?;
        let region = self.place_region(size_bytes, replicas, req.nonce)?;
        let record = IndexRecord {
            name: name.to_owned(),
            kind,
            variant,
            region: region.id,
            state: IndexState::Creating { client },
            created_at_ms: req.at_ms,
        };
        self.indexes.insert(name.to_owned(), record.clone());
        Ok(Outcome::Index(record))
    }

    pub(super) fn claim_index(&mut self, name: &str, client: ClientId) -> Response {
        self.live_client(client)?;
        let creator_live =
            |s: &ControlState, c: ClientId| s.clients.get(&c).is_some_and(|c| c.state == ClientState::Live);
        let x = self.index(name)?;
        match x.state {
            IndexState::Ready => Err(CommandError::Conflict(format!(
                "index {name:?} is ready: open it"
            ))),
            IndexState::Creating { client: c } if c != client && creator_live(self, c) => {
                Err(CommandError::Conflict(format!(
                    "index {name:?} is being created by live client {c}; wait for it"
                )))
            }
            IndexState::Creating { .. } => {
                let x = self.index_mut(name)?;
                x.state = IndexState::Creating { client };
                Ok(Outcome::Index(x.clone()))
            }
        }
    }

    pub(super) fn index_ready(&mut self, name: &str, client: ClientId) -> Response {
        let x = self.index(name)?;
        let region = x.region;
        match x.state {
            IndexState::Ready => {
                return Err(CommandError::Conflict(format!("index {name:?} is ready already")))
            }
            IndexState::Creating { client: c } if c != client => {
                return Err(CommandError::Conflict(format!(
                    "index {name:?} is being created by client {c}, not {client}"
                )))
            }
            IndexState::Creating { .. } => {}
        }
        if self.regions.get(&region).is_none_or(|r| !r.ready()) {
            return Err(CommandError::Conflict(format!(
                "region {region} of index {name:?} is not allocated on every replica yet"
            )));
        }
        let x = self.index_mut(name)?;
        x.state = IndexState::Ready;
        Ok(Outcome::Index(x.clone()))
    }

    fn index(&self, name: &str) -> Result<&IndexRecord, CommandError> {
        self.indexes.get(name).ok_or_else(|| CommandError::UnknownIndex {
            name: name.to_owned(),
        })
    }

    fn index_mut(&mut self, name: &str) -> Result<&mut IndexRecord, CommandError> {
        self.indexes
            .get_mut(name)
            .ok_or_else(|| CommandError::UnknownIndex {
                name: name.to_owned(),
            })
    }

    fn live_client(&self, id: ClientId) -> Result<(), CommandError> {
        match self.clients.get(&id) {
            None => Err(CommandError::UnknownClient { id }),
            Some(c) if c.state != ClientState::Live => Err(CommandError::Conflict(format!(
                "client {id} has expired; register again"
            ))),
            Some(_) => Ok(()),
        }
    }
}
