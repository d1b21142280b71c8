//! The check after a run, by a fresh client: repair what dead clients left
//! (rtx: as the recovery module would), the index's structural checker (it
//! reports any lock still held), and every acknowledged write against the
//! index's contents (`history::check`).

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;

use serde::Serialize;

use super::client::{history_path, open};
use super::{RunError, RunSpec};
use crate::driver::IndexClient;
use crate::history::{check, Expectation, HistoryCheck, Write};
use crate::workload::KeyMap;

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
}

impl CheckOutcome {
    /// Nothing wrong.
    pub fn is_ok(&self) -> bool {
        self.structure_violations == 0 && self.history.is_ok()
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
/// indices of clients that did not finish.
pub async fn check_index(spec: &RunSpec, owner: u16, dead: &HashSet<u32>) -> Result<CheckOutcome, RunError> {
    let e = &spec.experiment;
    let mut index = open(spec, owner).await?;
    let err = |what: &str, x: index::IndexError| RunError::Index(format!("{what}: {x}"));
    let repaired = index
        .repair_expired_locks()
        .await
        .map_err(|x| err("cannot repair", x))?;
    let (violations, locks_held, present): (Vec<String>, u64, BTreeMap<u64, u64>) = match &mut index {
        IndexClient::BTree(t) => {
            let r = t.check().await.map_err(|x| err("cannot check", x))?;
            (r.violations, r.locks_held, r.entries.into_iter().collect())
        }
        IndexClient::Hash(t) => {
            let r = t.check().await.map_err(|x| err("cannot check", x))?;
            let entries = t.entries().await.map_err(|x| err("cannot list the table", x))?;
            (r.violations, r.locks_held, entries)
        }
    };
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
    })
}
