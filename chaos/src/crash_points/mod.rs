//! Crash-point exploration.
//!
//! A scenario is a transaction (or index operation) run by a victim client
//! on a fresh cluster. The explorer first runs it without faults to count its
//! verbs `V`, then once per position `k = 1..=V` in each mode:
//!
//! - **crash**: the victim crashes right after its k-th verb and never comes
//!   back;
//! - **pause**: the victim stops after its k-th verb, a survivor whose clock
//!   is past the victim's lease repairs whatever it left, then the victim
//!   wakes up and carries on (false suspicion).
//!
//! After each run a checker looks at DM directly. Every finding is a
//! [`Violation`]; a target that is meant to be crash-tolerant must have none.

pub mod btree;
pub mod dtx;
pub mod hash;
pub mod rtx;

use serde::Serialize;

/// How the victim is stopped at its k-th verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Crashes for good.
    Crash,
    /// Pauses past its lease, is repaired, then carries on.
    Pause,
}

impl Mode {
    /// The victim's faults: stop right after its `k`-th verb.
    pub fn plan(self, k: u64) -> fabric::FaultPlan {
        match self {
            Mode::Crash => fabric::FaultPlan {
                crash_after_verbs: Some(k),
                ..fabric::FaultPlan::default()
            },
            Mode::Pause => fabric::FaultPlan {
                pause_after_verbs: Some(k),
                ..fabric::FaultPlan::default()
            },
        }
    }
}

/// What to explore on an index target (`btree`, `hash`).
#[derive(Clone, Debug)]
pub struct IndexOptions {
    /// The variant.
    pub variant: index::Variant,
    /// Crash and/or pause.
    pub modes: Vec<Mode>,
}

/// Survivors run this far ahead of real time, so that every lease the victim
/// took has expired for them without anyone waiting.
pub const SURVIVOR_SKEW_MS: i64 = 10 * 60 * 1000;

/// A survivor's faults: only its clock, far enough ahead.
pub fn survivor_plan() -> fabric::FaultPlan {
    fabric::FaultPlan {
        clock_skew_ms: SURVIVOR_SKEW_MS,
        ..fabric::FaultPlan::default()
    }
}

/// Waits until the victim running as `task` has stopped at verb `k`: crashed
/// (its task is done and nothing of it matters: `None`), or paused (its task
/// is returned, to be resumed and awaited once the survivor is through).
pub async fn stop_victim<T: std::fmt::Debug>(
    mode: Mode,
    mut task: tokio::task::JoinHandle<T>,
    faults: &fabric::Faulty<fabric::BaseTransport>,
    k: u64,
) -> Result<Option<tokio::task::JoinHandle<T>>, String> {
    match mode {
        Mode::Crash => {
            let _ = task.await;
            Ok(None)
        }
        Mode::Pause => tokio::select! {
            () = faults.paused() => Ok(Some(task)),
            done = &mut task => Err(format!("victim finished ({done:?}) before reaching verb {k}")),
        },
    }
}

/// How long a dtx victim's lease lasts unless revoked: longer than any
/// exploration run, so that only [`fence_and_roll`] ends it.
const VICTIM_LEASE: std::time::Duration = std::time::Duration::from_secs(3600);

/// A lease for a dtx victim's fabric client: DTX's quarantine fences a
/// stopped victim by revoking it.
pub(crate) fn victim_mandate(map: &fabric::ClusterMap) -> std::sync::Arc<fabric::Mandate> {
    fabric::Mandate::new(map.clone(), std::time::Instant::now() + VICTIM_LEASE)
}

/// DTX's quarantine, then recovery, for an index victim stopped under
/// `mandate`: the lease is revoked first, then a paused victim (`task`) is
/// resumed, so that the rest of its batch in flight lands and nothing after
/// it; then `recoverer` rolls `victim`'s logs, before anyone else goes on.
/// Returns what a resumed victim answered (`None`: it had crashed, or it
/// was fenced or left in doubt); a panic or a failed roll goes to `found`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fence_and_roll(
    mandate: &fabric::Mandate,
    task: Option<tokio::task::JoinHandle<Result<bool, index::IndexError>>>,
    faults: &fabric::Faulty<fabric::BaseTransport>,
    map: &fabric::ClusterMap,
    transport: &fabric::AnyTransport,
    heap: txn::Heap,
    (victim, recoverer): (txn::OwnerId, txn::OwnerId),
    found: &mut Vec<String>,
) -> Result<Option<bool>, String> {
    mandate.revoke();
    let mut answered = None;
    if let Some(task) = task {
        faults.resume();
        match task.await {
            Ok(Ok(done)) => answered = Some(done),
            Ok(Err(_)) => {} // fenced: LeaseUncertain, or in doubt
            Err(e) => found.push(format!("victim task panicked: {e}")),
        }
    }
    let mut r = txn::dtx::DtxClient::new(
        fabric::Client::new(map.clone(), transport.clone()),
        heap,
        recoverer,
        txn::TxConfig::default(),
    )
    .map_err(|e| e.to_string())?;
    if let Err(e) = r.finish_owner_log(victim).await {
        found.push(format!("recovery of the victim's logs failed: {e}"));
    }
    Ok(answered)
}

/// Reads all `bytes` of `region` (its primary), for a scenario's base image.
pub(crate) async fn read_region(
    fabric: &mut fabric::Client,
    region: u16,
    bytes: u64,
) -> Result<Vec<u8>, String> {
    let mut copies = fabric
        .read_range(
            fabric::GlobalAddr::new(region, 0),
            bytes,
            fabric::Replica::Primary,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(copies.remove(0))
}

/// A one-node in-process cluster of one region: what every index target
/// explores on.
pub(crate) fn one_region_cluster(
    region: u16,
    bytes: u64,
) -> Result<(fabric::LocalTransport, fabric::ClusterMap), String> {
    fabric::LocalTransport::cluster(
        1,
        &[fabric::RegionSpec {
            id: region,
            size: bytes,
        }],
    )
    .map_err(|e| e.to_string())
}

/// A fresh one-region cluster holding a copy of `image` (a base read with
/// [`read_region`]), and the heap in it.
pub(crate) async fn restore(
    region: u16,
    image: &[u8],
) -> Result<(fabric::ClusterMap, fabric::AnyTransport, txn::Heap), String> {
    let (t, map) = one_region_cluster(region, image.len() as u64)?;
    let base: fabric::AnyTransport = t.into();
    let mut fabric = fabric::Client::new(map.clone(), base.clone());
    write_region(&mut fabric, region, image).await?;
    let heap = txn::Heap::open(&mut fabric, region)
        .await
        .map_err(|e| e.to_string())?;
    Ok((map, base, heap))
}

/// Writes `image` over `region` on every replica (a fresh copy of a base).
pub(crate) async fn write_region(
    fabric: &mut fabric::Client,
    region: u16,
    image: &[u8],
) -> Result<(), String> {
    let mut batch = fabric::Batch::new();
    for (i, piece) in image.chunks(fabric::VERB_BYTES_MAX as usize).enumerate() {
        batch.clear();
        let at = fabric::GlobalAddr::new(region, i as u64 * u64::from(fabric::VERB_BYTES_MAX));
        let h = batch.on(fabric::Replica::All).write(at, piece);
        fabric.execute(&mut batch).await.map_err(|e| e.to_string())?;
        batch.done(h).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One thing a checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The kind of scenario (`owner`, `repairer`, ...).
    pub kind: String,
    /// The scenario, e.g. `rf=2 objects=3`.
    pub scenario: String,
    /// How the victim was stopped.
    pub mode: Mode,
    /// The victim's verb position.
    pub k: u64,
    /// Where every party was stopped and in which order they went on, when
    /// more than the victim was (empty otherwise).
    pub stops: String,
    /// What was wrong.
    pub what: String,
}

/// The kind of the scenarios every index target explores: the victim
/// (the owner of the operation) stopped at each of its verbs.
pub const KIND_OWNER: &str = "owner";

/// The exploration of one scenario.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScenarioReport {
    /// The kind of scenario (`owner`, `repairer`, ...).
    pub kind: String,
    /// The scenario, e.g. `rf=2 objects=3`.
    pub scenario: String,
    /// Verbs of the victim's operation when nothing goes wrong.
    pub verbs: u64,
    /// Runs made (positions × modes).
    pub crash_points: u64,
    /// Runs with at least one violation.
    pub violating_runs: u64,
}

/// The runs of one kind of scenario, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindReport {
    /// The kind.
    pub kind: String,
    /// Scenarios of that kind.
    pub scenarios: u64,
    /// Runs made.
    pub runs: u64,
    /// Runs with at least one violation.
    pub violating_runs: u64,
}

/// The result of exploring a target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The target, e.g. `rtx`.
    pub target: String,
    /// Runs made in all.
    pub crash_points: u64,
    /// Violations found in all.
    pub violations: u64,
    /// Per kind of scenario, in the order first explored.
    pub kinds: Vec<KindReport>,
    /// Per scenario.
    pub scenarios: Vec<ScenarioReport>,
    /// Every violation (the first few hundred).
    pub details: Vec<Violation>,
}

/// Most violations kept in a report's details; the count stays exact.
pub const DETAILS_MAX: usize = 200;

impl Report {
    /// Adds one scenario's runs.
    pub fn add(&mut self, scenario: ScenarioReport, violations: Vec<Violation>) {
        self.crash_points += scenario.crash_points;
        self.violations += violations.len() as u64;
        let at = match self.kinds.iter().position(|k| k.kind == scenario.kind) {
            Some(at) => at,
            None => {
                self.kinds.push(KindReport {
                    kind: scenario.kind.clone(),
                    ..KindReport::default()
                });
                self.kinds.len() - 1
            }
        };
        let kind = &mut self.kinds[at];
        kind.scenarios += 1;
        kind.runs += scenario.crash_points;
        kind.violating_runs += scenario.violating_runs;
        let room = DETAILS_MAX.saturating_sub(self.details.len());
        self.details.extend(violations.into_iter().take(room));
        self.scenarios.push(scenario);
    }
}

/// Why exploration itself failed (as opposed to finding violations).
#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    /// Building a cluster or running the fault-free operation failed.
    #[error("setting up scenario {scenario}: {reason}")]
    Setup {
        /// The scenario.
        scenario: String,
        /// What failed.
        reason: String,
    },
}

impl Report {
    /// Explores one scenario: `run_once(mode, k)` for every mode and every
    /// verb position `k` of a victim whose fault-free run takes `verbs`
    /// verbs; each returns what its checker found wrong.
    pub(crate) async fn explore_scenario(
        &mut self,
        scenario: &str,
        verbs: u64,
        modes: &[Mode],
        mut run_once: impl AsyncFnMut(Mode, u64) -> Result<Vec<String>, String>,
    ) -> Result<(), ExploreError> {
        let mut violations = Vec::new();
        let (mut runs, mut violating_runs) = (0, 0);
        for &mode in modes {
            for k in 1..=verbs {
                let found = run_once(mode, k).await.map_err(|reason| ExploreError::Setup {
                    scenario: scenario.to_string(),
                    reason,
                })?;
                runs += 1;
                if !found.is_empty() {
                    violating_runs += 1;
                }
                violations.extend(found.into_iter().map(|what| Violation {
                    kind: KIND_OWNER.to_string(),
                    scenario: scenario.to_string(),
                    mode,
                    k,
                    stops: String::new(),
                    what,
                }));
            }
        }
        tracing::info!(%scenario, verbs, runs, violations = violations.len(), "explored");
        self.add(
            ScenarioReport {
                kind: KIND_OWNER.to_string(),
                scenario: scenario.to_string(),
                verbs,
                crash_points: runs,
                violating_runs,
            },
            violations,
        );
        Ok(())
    }
}
