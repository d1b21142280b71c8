//! What operators do to the state as a whole: planned maintenance of a
//! memory node, restoring a saved state into a new cluster, the digest
//! that lets members compare their states (`ctl check`), and the dry run
//! that lets a member refuse a command without proposing it.

use std::collections::VecDeque;

use fabric::Epoch;
use serde::{Deserialize, Serialize};

use super::{
    Command, CommandError, ControlState, MemNodeId, MemNodeState, Outcome, Request, Response, RestoreSummary,
};

/// How far a restore moves the map epoch past the snapshot's: more
/// routing changes than an old cluster makes between a backup and its
/// loss (each is an operator's or recovery's action), so that memory nodes
/// that followed it on accept the restored map.
pub const RESTORE_EPOCH_JUMP: Epoch = 1 << 20;

/// A digest of a state: equal states have equal digests on every member
/// (the state holds only ordered maps, so its JSON is canonical).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StateHash(#[serde(with = "hex128")] pub u128);

impl std::fmt::Display for StateHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The digest of `state`: xxh3-128 of its JSON.
pub fn state_hash(state: &ControlState) -> StateHash {
    // Serialising plain data into a Vec cannot fail: every map key is a
    // number or a string.
    let json = serde_json::to_vec(state).unwrap_or_default();
    StateHash(xxhash_rust::xxh3::xxh3_128(&json))
}

mod hex128 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let text = String::deserialize(d)?;
        u128::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
    }
}

/// A whole state inside a command. [`Command`] is an internally tagged
/// enum, which serde buffers before it decodes a variant, and buffered maps
/// lose the number type of their keys (memory nodes by id would not decode);
/// so the state travels as one JSON string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedState(pub Box<ControlState>);

impl Serialize for SavedState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let json = serde_json::to_string(&*self.0).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&json)
    }
}

impl<'de> Deserialize<'de> for SavedState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let json = String::deserialize(d)?;
        serde_json::from_str(&json)
            .map(|s| SavedState(Box::new(s)))
            .map_err(serde::de::Error::custom)
    }
}

impl ControlState {
    /// What applying `req` to this state would answer, leaving the state
    /// as it is: a member answers a refusal from it without proposing the
    /// command, so that a caller retrying a refused command does not grow
    /// the log with one refusal after another. The request is the one
    /// that would be proposed (its time and nonce included), so a command
    /// that depends on the time is judged at the same time.
    ///
    /// It runs the command on a copy of the tables without the audit trail
    /// (up to [`AUDIT_ENTRIES_MAX`](super::AUDIT_ENTRIES_MAX) entries, most
    /// of a state's size), which no command reads.
    pub fn dry_run(&self, req: &Request) -> Response {
        let mut scratch = ControlState {
            epoch: self.epoch,
            memnodes: self.memnodes.clone(),
            regions: self.regions.clone(),
            clients: self.clients.clone(),
            indexes: self.indexes.clone(),
            reclaim_seq: self.reclaim_seq,
            reclaimers: self.reclaimers.clone(),
            clock_ms: self.clock_ms.max(req.clock()),
            audit: VecDeque::new(),
            next_memnode: self.next_memnode,
            next_region: self.next_region,
            next_client: self.next_client,
        };
        scratch.execute(req)
    }

    /// True while the state holds nothing a restore would overwrite: no
    /// memory node, region or index (clients without memory do not count).
    pub fn is_empty(&self) -> bool {
        self.memnodes.is_empty() && self.regions.is_empty() && self.indexes.is_empty()
    }

    pub(super) fn set_maintenance(&mut self, id: MemNodeId, on: bool) -> Response {
        let n = self
            .memnodes
            .get_mut(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        if n.state == MemNodeState::Dead {
            return Err(CommandError::Conflict(format!(
                "memory node {id} was declared dead; maintenance is for nodes that will come back"
            )));
        }
        if !on {
            n.maintenance = false;
            return Ok(Outcome::MemNode(n.clone()));
        }
        // Checked whole before anything moves.
        for r in self.regions.values().filter(|r| r.on(id)) {
            if r.primary() == id && r.replicas.len() > 1 {
                return Err(CommandError::Conflict(format!(
                    "memory node {id} holds the primary of region {}: move it first (`kintsugi ctl region \
                     promote {} NODE`; `ctl memnode maintenance {id} on` does so itself)",
                    r.id, r.id
                )));
            }
            if r.being_restored() {
                return Err(CommandError::Conflict(format!(
                    "region {} is being restored; put node {id} in maintenance once it is published",
                    r.id
                )));
            }
        }
        let epoch = self.next_epoch();
        let mut freed = 0u64;
        for r in self.regions.values_mut().filter(|r| r.on(id)) {
            let held = r.replicas.len() + r.syncing.len();
            // A sole copy (its primary) stays: there is nothing to serve
            // in its place.
            let primary = r.primary();
            r.replicas.retain(|l| l.node != id || l.node == primary);
            r.syncing.retain(|l| l.node != id);
            if r.replicas.len() + r.syncing.len() < held {
                r.pending.retain(|&n| n != id);
                r.forget_generations();
                r.epoch = epoch;
                freed += r.size_bytes;
            }
        }
        self.charge(id, -i128::from(freed));
        let n = self
            .memnodes
            .get_mut(&id)
            .ok_or(CommandError::UnknownMemNode { id })?;
        n.maintenance = true;
        Ok(Outcome::MemNode(n.clone()))
    }

    pub(super) fn restore(&mut self, saved: &ControlState) -> Response {
        if !self.is_empty() {
            return Err(CommandError::Conflict(format!(
                "this cluster already holds {} memory nodes, {} regions and {} indexes: a snapshot is \
                 restored only into a new cluster",
                self.memnodes.len(),
                self.regions.len(),
                self.indexes.len()
            )));
        }
        saved
            .check()
            .map_err(|why| CommandError::Invalid(format!("the snapshot's state is inconsistent: {why}")))?;
        // The snapshot's history goes on; what this cluster did before (its
        // formation) is dropped with the rest of its empty state.
        let clock_ms = self.clock_ms;
        *self = saved.clone();
        // The clock never goes back, whatever the snapshot's reached.
        self.clock_ms = self.clock_ms.max(clock_ms);
        // Memory nodes may have followed the old cluster past the saved
        // epoch, and they refuse maps older than what they fence at: the
        // restored map starts far beyond anything the old one reached.
        self.epoch = saved.epoch.saturating_add(RESTORE_EPOCH_JUMP - 1);
        // Every holder proves its replica before the region serves again
        // (`Region::unverified`): the snapshot's roles may be stale.
        for r in self.regions.values_mut().filter(|r| r.lost.is_none()) {
            r.unverified = r.replicas.iter().chain(&r.syncing).map(|l| l.node).collect();
            r.proofs.clear();
        }
        Ok(Outcome::Restored(RestoreSummary {
            // `apply` bumps the epoch after this (a restore alters routing).
            epoch: self.epoch + 1,
            memnodes: self.memnodes.len(),
            regions: self.regions.len(),
            clients: self.clients.len(),
            indexes: self.indexes.len(),
        }))
    }
}

impl Command {
    /// The command as the audit trail keeps it: a restore without the
    /// state it brought (the trail would otherwise hold a copy of the
    /// whole state, and every later snapshot a copy of that).
    pub fn for_audit(&self) -> Command {
        match self {
            Command::Restore { .. } => Command::Restore {
                state: SavedState::default(),
            },
            other => other.clone(),
        }
    }
}
