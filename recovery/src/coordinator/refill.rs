//! The steps that make a replica: a spare placed (`add_backup`), the
//! region copied behind its own fence under a proven leadership
//! (`fence_copy`, [`RecoveryOptions::leader_proof`](super::RecoveryOptions)),
//! the copy joined (`join_backup`), and the joined replica caught up and
//! published. The copying itself is [`crate::copy`].

use std::time::Instant;

use control_plane::state::{candidates, Command, MemNode, MemNodeId, Region};
use fabric::RegionId;

use super::{Coordinator, Step};
use crate::copy;
use crate::RecoveryError;

impl Coordinator {
    pub(super) async fn catch_up(
        &mut self,
        region: RegionId,
        node: MemNodeId,
        generation: u64,
    ) -> Result<Step, RecoveryError> {
        let start = Instant::now();
        self.cluster.claim_and_fence(region).await?;
        tokio::time::sleep(cluster::FENCE_SETTLE).await;
        let mut fabric = self.cluster.full_fabric().await?;
        self.still_leads(region).await?;
        let copied = self
            .copies
            .remove(&(region, node))
            .filter(|(g, _)| *g == generation)
            .map(|(_, c)| c);
        let done = copy::catch_up(&mut fabric, region, node, copied.as_ref()).await?;
        // A writer cut off by the death that called for this replica may
        // have left a hash slot on some replicas only.
        let converged = self.cluster.converge_hash(region, &mut fabric).await?;
        let publish = Command::RegionRestored { region };
        self.cluster
            .command(&format!("publishing region {region}"), &publish)
            .await?;
        let what = format!(
            "node {node}'s replica of region {region} caught up: {} of {} chunks written again, {converged} hash word(s) converged; {} ms out of the map{}",
            done.chunks_written,
            done.chunks,
            start.elapsed().as_millis(),
            if copied.is_some() { "" } else { " (compared whole: the copy was another coordinator's)" }
        );
        Ok(self.took(Step::CaughtUp, u64::from(region), &what))
    }

    pub(super) async fn rereplicate(
        &mut self,
        r: &Region,
        memnodes: &mut [MemNode],
    ) -> Result<Option<Step>, RecoveryError> {
        // A copied replica joins; an allocated one is copied.
        for l in &r.syncing {
            if r.pending.contains(&l.node) {
                continue; // its node has not allocated it yet
            }
            let generation = r.generation_of(l.node);
            if self
                .copies
                .get(&(r.id, l.node))
                .is_some_and(|(g, _)| *g == generation)
            {
                let join = Command::JoinBackup {
                    region: r.id,
                    node: l.node,
                };
                let joined = self
                    .cluster
                    .command(&format!("joining node {} to region {}", l.node, r.id), &join)
                    .await?;
                // The join hands the replica out again: the copy is the
                // one the catch-up of that generation compares against.
                if let (control_plane::state::Outcome::Region(x), Some((g, _))) =
                    (joined, self.copies.get_mut(&(r.id, l.node)))
                {
                    *g = x.generation_of(l.node);
                }
                let what = format!("node {}'s copy of region {} joined", l.node, r.id);
                return Ok(Some(self.took(Step::Joined, u64::from(r.id), &what)));
            }
            // Fenced, then the map, then the proof of leadership, in that
            // order (design.md §1b): an earlier copier's WRITEs are refused
            // from the fence on, and this one's map predates any later
            // leader's fence, which refuses them in turn.
            let epoch = self.cluster.fence_copy(r.id, l.node).await?;
            let mut fabric = self.cluster.full_fabric_since(epoch).await?;
            self.still_leads(r.id).await?;
            let mut shown = 0;
            let copied = copy::copy_replica(&mut fabric, r.id, l.node, &mut |done, total| {
                // Progress in tenths, for an operator tailing the log.
                let tenth = done * 10 / total.max(1);
                if tenth > shown {
                    shown = tenth;
                    tracing::info!(region = r.id, node = l.node, done, total, "copying a new replica");
                }
            })
            .await?;
            let what = format!(
                "region {} copied to node {}: {} bytes in {} ms ({:.2} GiB/s)",
                r.id,
                l.node,
                copied.bytes,
                copied.elapsed.as_millis(),
                copied.rate_bytes_per_s() / f64::from(1u32 << 30)
            );
            self.copies.insert((r.id, l.node), (generation, copied));
            return Ok(Some(self.took(Step::Copied, u64::from(r.id), &what)));
        }
        if r.replicas.len() + r.syncing.len() >= r.replication_target() {
            return Ok(None);
        }
        let holders: Vec<MemNodeId> = r.replicas.iter().chain(&r.syncing).map(|l| l.node).collect();
        let Some(&spare) = candidates(memnodes.iter(), r.size_bytes, &holders).first() else {
            return Ok(None); // no room anywhere: it stays short until a node joins
        };
        let add = Command::AddBackup {
            region: r.id,
            node: spare,
        };
        self.cluster
            .command(
                &format!("placing a new replica of region {} on node {}", r.id, spare),
                &add,
            )
            .await?;
        // The next region's placement, in this pass, sees the room taken.
        if let Some(n) = memnodes.iter_mut().find(|n| n.id == spare) {
            n.allocated_bytes = n.allocated_bytes.saturating_add(r.size_bytes);
        }
        let what = format!(
            "region {} has {} of {} replicas: a new one placed on node {}",
            r.id,
            r.replicas.len(),
            r.replication_target(),
            spare
        );
        Ok(Some(self.took(Step::AddedBackup, u64::from(r.id), &what)))
    }

    /// Fails unless the member this coordinator runs in proves, now, that
    /// it leads ([`RecoveryOptions::leader_proof`]).
    async fn still_leads(&self, region: RegionId) -> Result<(), RecoveryError> {
        match &self.options.leader_proof {
            Some(prove) if !prove().await => Err(RecoveryError::NotLeading { region }),
            _ => Ok(()),
        }
    }
}
