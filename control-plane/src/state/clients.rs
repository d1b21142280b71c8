//! Clients: registration with a block of owner ids, expiry, the
//! quarantine an expired client's ids wait out on the cluster clock, and
//! the claim on its reclaim, until it is forgotten.

use super::{
    check_name, Client, ClientId, ClientState, CommandError, ControlState, MemNodeState, Outcome, OwnerBlock,
    Response, LEASE_MS_MAX, LEASE_MS_MIN, OWNER_IDS_PER_CLIENT_MAX, OWNER_ID_END,
};

impl ControlState {
    pub(super) fn register_client(
        &mut self,
        name: &str,
        owner_ids: u16,
        lease_ms: u64,
        at_ms: u64,
    ) -> Response {
        check_name("client name", name)?;
        if owner_ids == 0 || owner_ids > OWNER_IDS_PER_CLIENT_MAX {
            return Err(CommandError::Invalid(format!(
                "a client takes 1 to {OWNER_IDS_PER_CLIENT_MAX} owner ids, not {owner_ids}"
            )));
        }
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(CommandError::Invalid(format!(
                "a lease lasts {LEASE_MS_MIN} to {LEASE_MS_MAX} ms, not {lease_ms}"
            )));
        }
        let owners = self.free_owner_block(owner_ids).ok_or_else(|| {
            CommandError::Full(format!(
                "no {owner_ids} consecutive free owner ids below {OWNER_ID_END}"
            ))
        })?;
        let id = self.next_client;
        self.next_client += 1;
        let client = Client {
            id,
            name: name.to_owned(),
            lease_ms,
            owners,
            registered_at_ms: at_ms,
            state: ClientState::Live,
        };
        self.clients.insert(id, client.clone());
        Ok(Outcome::Client(client))
    }

    /// The lowest free run of `count` owner ids (first fit).
    fn free_owner_block(&self, count: u16) -> Option<OwnerBlock> {
        let mut taken: Vec<OwnerBlock> = self.clients.values().map(|c| c.owners).collect();
        taken.sort_by_key(|b| b.first);
        let mut first = 1u16;
        for b in taken {
            if b.first >= first + count {
                break;
            }
            first = first.max(b.end());
        }
        (u32::from(first) + u32::from(count) <= u32::from(OWNER_ID_END))
            .then_some(OwnerBlock { first, count })
    }

    /// Client `id`'s lease lapsed: expired, stamped on the cluster clock
    /// (as its forgetting will be judged), a reclaim event.
    pub(super) fn expire_client(&mut self, id: ClientId) -> Response {
        let c = self
            .clients
            .get_mut(&id)
            .ok_or(CommandError::UnknownClient { id })?;
        if let ClientState::Expired { at_ms, .. } = c.state {
            return Err(CommandError::Conflict(format!(
                "client {id} already expired at {at_ms} ms"
            )));
        }
        self.reclaim_seq += 1;
        c.state = ClientState::Expired {
            at_ms: self.clock_ms,
            seq: self.reclaim_seq,
        };
        Ok(Outcome::Client(c.clone()))
    }

    /// Frees an expired client's owner ids. Not before a lease length has
    /// passed since the expiry (the quarantine): the client stopped issuing
    /// verbs when its lease stopped being certain, before the expiry, and a
    /// batch it sent just before that has a whole lease to land. Its logs
    /// must be DONE by then: whoever forgets it rolls them first.
    pub(super) fn forget_client(&mut self, id: ClientId, by: Option<ClientId>, at_ms: u64) -> Response {
        let c = self.clients.get(&id).ok_or(CommandError::UnknownClient { id })?;
        if let Some(holder) = self.reclaimers.get(&id).copied().filter(|&h| Some(h) != by) {
            if self.may_still_write(holder, at_ms) {
                return Err(CommandError::Conflict(format!(
                    "client {id}'s reclaim is claimed by client {holder}, which may still be writing it"
                )));
            }
        }
        match c.state {
            ClientState::Live => Err(CommandError::Conflict(format!(
                "client {id} is live: expire it (and let recovery roll its logs) first"
            ))),
            ClientState::Expired { at_ms: expired, .. } if at_ms < expired.saturating_add(c.lease_ms) => {
                Err(CommandError::Conflict(format!(
                    "client {id} expired at {expired} ms; its owner ids stay quarantined until {} ms (a lease \
                     after the expiry), so that nothing it sent before it stopped can land on their next holder",
                    expired.saturating_add(c.lease_ms)
                )))
            }
            ClientState::Expired { seq, .. } => {
                self.fenced_everywhere(id, seq)?;
                self.clients.remove(&id);
                self.reclaimers.remove(&id);
                self.reclaim_seq += 1;
                Ok(Outcome::Removed)
            }
        }
    }

    /// Client `id`'s reclaim claimed for `by` (module docs of `txn::reclaim`).
    pub(super) fn claim_reclaim(&mut self, id: ClientId, by: ClientId, at_ms: u64) -> Response {
        let c = self.clients.get(&id).ok_or(CommandError::UnknownClient { id })?;
        let ClientState::Expired {
            at_ms: expired, seq, ..
        } = c.state
        else {
            return Err(CommandError::Conflict(format!(
                "client {id} is live: only an expired client's blocks are reclaimed"
            )));
        };
        self.fenced_everywhere(id, seq)?;
        if at_ms < expired.saturating_add(c.lease_ms) {
            return Err(CommandError::Conflict(format!(
                "client {id} is quarantined until {} ms: its blocks are reclaimed after",
                expired.saturating_add(c.lease_ms)
            )));
        }
        if !self.clients.contains_key(&by) {
            return Err(CommandError::UnknownClient { id: by });
        }
        if let Some(holder) = self.reclaimers.get(&id).copied().filter(|&h| h != by) {
            if self.may_still_write(holder, at_ms) {
                return Err(CommandError::Conflict(format!(
                    "client {id}'s reclaim is claimed by client {holder}"
                )));
            }
        }
        self.reclaimers.insert(id, by);
        Ok(Outcome::Client(c.clone()))
    }

    /// The fence the memory nodes follow: who is live, and from which id on
    /// clients registered after it (`fabric::admission`).
    pub fn fence_view(&self) -> fabric::FenceView {
        fabric::FenceView {
            seq: self.reclaim_seq,
            next_client: self.next_client,
            live: self
                .clients
                .values()
                .filter(|c| c.state == ClientState::Live)
                .map(|c| c.id)
                .collect(),
        }
    }

    /// Memory nodes not declared dead that do not yet follow a fence at or
    /// past reclaim sequence `seq` (`MemNodeFence`).
    pub fn unfenced(&self, seq: u64) -> Vec<super::MemNodeId> {
        self.memnodes
            .values()
            .filter(|n| n.state != MemNodeState::Dead && n.fence_seq < seq)
            .map(|n| n.id)
            .collect()
    }

    /// Refuses unless every memory node not declared dead follows a fence
    /// in which client `id`, expired at reclaim sequence `seq`, is refused:
    /// then nothing it sent, however late it arrives, runs a verb, and its
    /// ids and blocks may go to an heir (`docs/txn.md` §8).
    fn fenced_everywhere(&self, id: ClientId, seq: u64) -> Result<(), CommandError> {
        let behind: Vec<String> = self.unfenced(seq).iter().map(ToString::to_string).collect();
        if behind.is_empty() {
            return Ok(());
        }
        Err(CommandError::Conflict(format!(
            "client {id}'s fence (sequence {seq}) is not yet followed by memory node(s) {}: its ids and \
             blocks go to nobody until every live node refuses it",
            behind.join(", ")
        )))
    }

    /// Whether a verb of client `holder` may still land at `at_ms`: it is
    /// live, or expired and in its quarantine.
    fn may_still_write(&self, holder: ClientId, at_ms: u64) -> bool {
        self.clients.get(&holder).is_some_and(|h| match h.state {
            ClientState::Live => true,
            ClientState::Expired { at_ms: expired, .. } => at_ms < expired.saturating_add(h.lease_ms),
        })
    }
}
