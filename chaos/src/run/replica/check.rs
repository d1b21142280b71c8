//! The end of a local-cluster run: every key read back, the history's
//! linearizability, the structure, the replicas word for word.

use std::path::Path;

use cluster::load::Handle;
use cluster::Cluster;
use index::ObjectSizes;
use serde::Serialize;

use super::INDEX;
use crate::linearizability::{self, Event};
use crate::run::check::{compare_replicas, ReplicaCheck};
use crate::run::workers::WorkersSpec;
use crate::run::RunError;

/// The final check.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaRunCheck {
    /// Errors that reached the application (a task stopped early).
    pub errors: Vec<String>,
    /// Errors of clients a partition cut off from the control plane for a
    /// third of their lease or more (a renewal's budget): their lease may
    /// lapse, and then they had to stop (not a failure).
    pub lease_lost: Vec<String>,
    /// Writes cut off at their commit point, outcome unknown to the
    /// client (`info` in the history; not a failure: the checker lets each
    /// have happened or not).
    pub in_doubt: u64,
    /// Keys in the workload's key space (each read back at the end).
    pub keys: u64,
    /// Keys whose history holds up until the final read and not with it:
    /// an acknowledged write lost (or a value nobody wrote found).
    pub lost: u64,
    /// Keys whose history, final reads included, has no linearization
    /// (`lost` among them).
    pub non_linearizable: u64,
    /// The linearizability check of the whole history, per key.
    pub linearizability: linearizability::Report,
    /// Structural violations of the index.
    pub structure_violations: u64,
    /// The first of them.
    pub structure: Vec<String>,
    /// Every backup against the primary, after re-replication.
    pub replicas: ReplicaCheck,
}

impl ReplicaRunCheck {
    /// Nothing wrong.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
            && self.lost == 0
            && self.non_linearizable == 0
            && self.linearizability.unknown_keys == 0
            && self.linearizability.disagreement_count == 0
            && self.structure_violations == 0
            && self.replicas.differences == 0
    }
}

/// The final check (module docs, step 4). `history` ends with the final
/// reads, which start at `before_final`.
pub(super) async fn check(
    cluster: &Cluster,
    spec: &WorkersSpec,
    history: &[Event],
    before_final: usize,
    errors: Vec<String>,
    region: fabric::RegionId,
) -> Result<ReplicaRunCheck, RunError> {
    let absent = |_| None;
    let full = linearizability::check(history, &absent)
        .map_err(|e| RunError::Process(format!("the history is malformed: {e}")))?;
    // A key whose history holds up until the final read, and not with it,
    // lost an acknowledged write (or gained one nobody made): counted
    // apart from keys that went wrong while the clients ran.
    let ran = linearizability::check(&history[..before_final], &absent)
        .map_err(|e| RunError::Process(format!("the history is malformed: {e}")))?;
    let lost = full
        .non_linearizable_keys
        .saturating_sub(ran.non_linearizable_keys) as u64;
    let (structure, sizes) = match Handle::open(cluster, INDEX, spec.kind)
        .await
        .map_err(RunError::index("cannot open the index"))?
    {
        // A write cut off past its commit point (in doubt) may have left
        // its locks, long expired: repaired first, as any client meeting
        // them would, so that only locks nobody can repair count.
        Handle::Tree(mut t) => {
            t.inner()
                .repair_expired_locks()
                .await
                .map_err(RunError::index("cannot repair expired locks"))?;
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            let objects = t.inner().objects_in(&r);
            (r.violations, ObjectSizes::new(objects))
        }
        Handle::Table(mut t) => {
            t.inner()
                .repair_expired_locks()
                .await
                .map_err(RunError::index("cannot repair expired locks"))?;
            let r = t.inner().check().await.map_err(RunError::index("cannot check"))?;
            let objects = t
                .inner()
                .objects()
                .await
                .map_err(RunError::index("cannot list the hash table's objects"))?;
            (r.violations, ObjectSizes::new(objects))
        }
    };
    let mut fabric = cluster.fabric();
    let heap = txn::Heap::open(&mut fabric, region)
        .await
        .map_err(RunError::index("cannot open the heap"))?;
    // Any owner may have been cut off by the dead node while taking a chunk.
    let replicas = compare_replicas(&mut fabric, &heap, &sizes, &|_| true, 0).await?;
    Ok(ReplicaRunCheck {
        errors,
        lease_lost: Vec::new(),
        in_doubt: 0,
        keys: spec.keys,
        lost,
        non_linearizable: full.non_linearizable_keys as u64,
        linearizability: full,
        structure_violations: structure.len() as u64,
        structure: structure.into_iter().take(10).collect(),
        replicas,
    })
}

/// `history.jsonl`: every event, one JSON line each, the final reads last.
pub(super) fn write_history(history: &[Event], out: &Path) -> Result<(), RunError> {
    let path = out.join("history.jsonl");
    let io = |e| RunError::io(&path, e);
    let w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    linearizability::write_jsonl(w, history).map_err(io)
}
