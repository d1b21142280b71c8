//! The check after a run, by a fresh client: repair what dead clients left
//! (rtx: as the recovery module would: their locks, then their logs), the
//! index's structural checker (it reports any lock still held), every
//! acknowledged write against the index's contents (`history::check`), and
//! every backup against the primary, word for word where they must agree
//! (`txn::Heap::compare_replicas`), so that a backup left behind shows.

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;

use serde::Serialize;

use super::client::{connect, history_path, open};
use super::{RunError, RunSpec, REGION};
use crate::history::{check, Expectation, HistoryCheck, Write};
use index::ObjectSizes;
use workload::driver::IndexClient;
use workload::KeyMap;

/// Structural violations listed in full.
const VIOLATIONS_LISTED_MAX: usize = 20;

/// What the check found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckOutcome {
    /// Expired locks of dead clients the checker repaired first (rtx).
    pub repaired_locks: u64,
    /// Structural violations (a lock held is one), the first few listed.
    pub structure_violations: u64,
    /// The first structural violations.
    pub structure: Vec<String>,
    /// Of those, locks still held.
    pub locks_held: u64,
    /// Acknowledged writes against the index's contents.
    pub history: HistoryCheck,
    /// Every backup against the primary.
    pub replicas: ReplicaCheck,
}

/// Every backup of the index's region against its primary.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaCheck {
    /// Replicas of the region (1: nothing to compare).
    pub replicas: usize,
    /// Words compared, over all backups.
    pub words_compared: u64,
    /// Objects (rtx metas) whose pointer, and data, were compared.
    pub objects: u64,
    /// Words that differ where the replicas must agree.
    pub differences: u64,
    /// The first of them.
    pub listed: Vec<String>,
    /// Hash slots a dead writer left on the primary only (stopped between
    /// its primary CAS and its backups'), converged before the comparison
    /// as recovery would (`HashTable::converge_backups`).
    pub converged: u64,
}

impl CheckOutcome {
    /// Nothing wrong.
    pub fn is_ok(&self) -> bool {
        self.structure_violations == 0 && self.history.is_ok() && self.replicas.differences == 0
    }
}

/// Every write in the variant's history files.
pub fn read_history(spec: &RunSpec) -> Result<Vec<Write>, RunError> {
    let e = &spec.experiment;
    let mut writes = Vec::new();
    for c in 0..e.cluster.clients {
        for t in 0..e.cluster.threads_per_client {
            let path = history_path(&spec.out_dir, c, c * e.cluster.threads_per_client + t);
            let Ok(file) = std::fs::File::open(&path) else {
                continue; // a client killed before it created it wrote nothing
            };
            for line in std::io::BufReader::new(file).lines() {
                let line = line.map_err(|err| RunError::io(&path, err))?;
                // A killed client's last line may be cut short: never acknowledged.
                if let Ok(w) = serde_json::from_str::<Write>(&line) {
                    writes.push(w);
                }
            }
        }
    }
    Ok(writes)
}

/// Checks the index of `spec` as `owner`; `dead` are the global thread
/// indices of clients that did not finish, `dead_owners` their owner ids.
pub async fn check_index(
    spec: &RunSpec,
    owner: u16,
    dead: &HashSet<u32>,
    dead_owners: &[u16],
) -> Result<CheckOutcome, RunError> {
    let e = &spec.experiment;
    let mut index = open(spec, owner).await?;
    let repaired = index
        .repair_expired_locks()
        .await
        .map_err(RunError::index("cannot repair"))?;
    let (mut fabric, heap, converged) = settle_replicas(spec, owner, &mut index, dead_owners).await?;
    // One walk of the structure: it also names the objects the replicas
    // are compared by.
    type Checked = (Vec<String>, u64, BTreeMap<u64, u64>, ObjectSizes);
    let (violations, locks_held, present, sizes): Checked = match &mut index {
        IndexClient::BTree(t) => {
            let r = t.check().await.map_err(RunError::index("cannot check"))?;
            let sizes = ObjectSizes::new(t.objects_in(&r));
            (r.violations, r.locks_held, r.entries.into_iter().collect(), sizes)
        }
        IndexClient::Hash(t) => {
            let r = t.check().await.map_err(RunError::index("cannot check"))?;
            let entries = t
                .entries()
                .await
                .map_err(RunError::index("cannot list the table"))?;
            let objects = t
                .objects()
                .await
                .map_err(RunError::index("cannot list the table's objects"))?;
            (r.violations, r.locks_held, entries, ObjectSizes::new(objects))
        }
    };
    let replicas = compare_replicas(
        &mut fabric,
        &heap,
        &sizes,
        &|o| dead_owners.contains(&o),
        converged,
    )
    .await?;
    let writes = read_history(spec)?;
    let w = e.workload()?;
    let history = check(
        &present,
        &writes,
        &Expectation {
            keys: KeyMap::new(e.seed),
            records: w.keys,
            lanes: u64::from(e.cluster.clients * e.cluster.threads_per_client),
            dead_threads: dead.clone(),
        },
    );
    Ok(CheckOutcome {
        repaired_locks: repaired as u64,
        structure_violations: violations.len() as u64,
        locks_held,
        structure: violations.into_iter().take(VIOLATIONS_LISTED_MAX).collect(),
        history,
        replicas,
    })
}

/// Makes the replicas comparable: finishes the logs of the dead (rtx, dtx) and
/// converges a hash table's backup slots (how many: the last value).
/// Returns a fabric client and the heap to compare them with.
async fn settle_replicas(
    spec: &RunSpec,
    owner: u16,
    index: &mut IndexClient,
    dead_owners: &[u16],
) -> Result<(fabric::Client, txn::Heap, u64), RunError> {
    let mut fabric = connect(&spec.endpoint, spec.data_credential()?).await?;
    let heap = txn::Heap::open(&mut fabric, REGION)
        .await
        .map_err(RunError::index("cannot open the heap"))?;
    if spec.variant == index::Variant::Dtx {
        // Every client process is gone by now (reaped): nothing of theirs
        // is in flight, whatever their quarantine says.
        let mut recovery = txn::dtx::DtxClient::new(fabric.fork(), heap, owner, txn::TxConfig::default())
            .map_err(RunError::index(format!("cannot act as owner {owner}")))?;
        for &dead in dead_owners {
            recovery
                .finish_owner_log(dead)
                .await
                .map_err(RunError::index(format!(
                    "cannot roll the DTX logs of owner {dead}"
                )))?;
        }
        recovery
            .release_pending()
            .await
            .map_err(RunError::index("cannot release"))?;
    }
    if spec.variant == index::Variant::Rtx {
        let mut recovery = txn::TxClient::new(fabric.fork(), heap, owner, txn::TxConfig::default())
            .map_err(RunError::index(format!("cannot act as owner {owner}")))?;
        for &dead in dead_owners {
            recovery
                .finish_owner_log(dead)
                .await
                .map_err(RunError::index(format!("cannot finish the log of owner {dead}")))?;
        }
    }
    let converged = match index {
        IndexClient::Hash(t) => t
            .converge_backups()
            .await
            .map_err(RunError::index("cannot converge the hash slots"))?,
        IndexClient::BTree(_) => 0,
    };
    Ok((fabric, heap, converged))
}

/// Every backup of `heap` against its primary (`txn::Heap::compare_replicas`),
/// each object's data for its `sizes`, a chunk taken on some replicas only
/// allowed of `half_taken_ok` owners; `converged` is what was converged
/// before (reported).
pub async fn compare_replicas(
    fabric: &mut fabric::Client,
    heap: &txn::Heap,
    sizes: &ObjectSizes,
    half_taken_ok: &dyn Fn(u16) -> bool,
    converged: u64,
) -> Result<ReplicaCheck, RunError> {
    let report = heap
        .compare_replicas(fabric, &|meta| sizes.of(meta), half_taken_ok)
        .await
        .map_err(RunError::index("cannot compare the replicas"))?;
    Ok(ReplicaCheck {
        replicas: report.replicas,
        words_compared: report.words_compared,
        objects: report.objects,
        differences: report.differences,
        listed: report
            .listed
            .iter()
            .take(VIOLATIONS_LISTED_MAX)
            .map(ToString::to_string)
            .collect(),
        converged,
    })
}
