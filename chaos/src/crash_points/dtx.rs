//! The DTX target: a victim runs a few DTX transactions (each increments a
//! set of counters, so a half-applied one shows as a wrong sum) and is
//! stopped after each of its verbs; recovery (`DtxClient::finish_owner_log`)
//! then finishes what it left.
//!
//! Three kinds of scenario, each swept over every verb of the stopped
//! party, at each record count and replication factor:
//!
//! - **owner**: the victim stops after its k-th verb: crashes, or pauses
//!   and is fenced (its lease revoked) before it resumes, so that the rest
//!   of the batch in flight lands and nothing after it does: DTX's
//!   quarantine, the assumption its recovery rests on. Then recovery.
//! - **recoverer**: the victim crashes after its k-th verb, a recoverer
//!   crashes after each of *its* verbs, and a second recoverer finishes
//!   both (the first one's log and the victim's, in either order).
//! - **dropped-connection**: the victim's connection drops after its k-th
//!   verb; it settles its own log before its next transaction and goes on.
//! - **promotion** (2 replicas or more): the victim crashes after its k-th
//!   verb, then the primary dies and a backup is promoted (a map without
//!   the old primary, the heap's primary-only words restored, as
//!   `cluster`'s promoter does). The new primary's DTX lock words are free,
//!   or stale: before the promotion every record's lock word on that
//!   backup is set to a word nobody holds, as a re-replication that copied
//!   the primary while those locks were held leaves them. Recovery takes
//!   again the locks of records the victim marked invisible
//!   (`DtxClient::relock_after_promotion`), finishes its log, and frees
//!   what is still held (`DtxClient::free_stale_locks`). Checked on the
//!   new map.
//!
//! Checks after recovery: every record free, visible, and the same on
//! every replica; the counters are those of a set of whole transactions
//! that holds every acknowledged one and only attempted ones; no log half
//! of a stopped party is left unfinished; a second recovery finds nothing
//! to do; a survivor can lock and write every record.

use fabric::le_word;
use std::sync::Arc;

use fabric::{Batch, Client, ClusterMap, FaultPlan, Replica};
use serde::Serialize;
use txn::dtx::log::{is_unfinished, DtxLog, HALF_BYTES};
use txn::dtx::record::{Record, Version};
use txn::dtx::DtxClient;
use txn::{Heap, HeapConfig, LockWord, OwnerId, TxConfig, TxError};

use super::{ExploreError, Mode, Report, ScenarioReport, Violation};

const REGION: u16 = 1;
const REGION_BYTES: u64 = 4 << 20;
const SETUP: OwnerId = 255;
const VICTIM: OwnerId = 1;
const RECOVERER: OwnerId = 2;
const SECOND: OwnerId = 3;
const SURVIVOR: OwnerId = 4;
/// Transactions the victim runs: enough for both log halves to be reused
/// and for a release to ride another transaction's batch.
const TXNS: u64 = 4;
/// Data bytes of a record: the counter, then bytes no write touches (an
/// undo image must restore them too).
const RECORD_BYTES: usize = 48;
/// A record's untouched data byte.
const FILL: u8 = 0xA5;
/// Attempts of a transaction of the explorer's clients before it gives up:
/// nothing runs beside them, so an abort means a lock nobody will free,
/// and a blocked survivor must be reported, not waited on for good.
const ATTEMPTS_MAX: u32 = 64;

/// The families of scenario (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The victim stops at each of its verbs.
    Owner,
    /// The victim crashes; a recoverer crashes at each of its verbs.
    Recoverer,
    /// The victim's connection drops at each of its verbs.
    DroppedConnection,
    /// The victim crashes at each of its verbs, then the primary dies and
    /// a backup is promoted.
    Promotion,
}

impl Kind {
    /// Every kind, in the order explored.
    pub const ALL: [Kind; 4] = [
        Kind::Owner,
        Kind::Recoverer,
        Kind::DroppedConnection,
        Kind::Promotion,
    ];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Owner => super::KIND_OWNER,
            Kind::Recoverer => "recoverer",
            Kind::DroppedConnection => "dropped-connection",
            Kind::Promotion => "promotion",
        }
    }
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Records per scenario (the largest transaction locks all of them).
    pub records: Vec<usize>,
    /// Replication factors.
    pub replicas: Vec<u16>,
    /// How the victim stops (owner kind).
    pub modes: Vec<Mode>,
    /// Kinds of scenario.
    pub kinds: Vec<Kind>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            records: vec![1, 2, 3, 8],
            replicas: vec![1, 2, 3],
            modes: vec![Mode::Crash, Mode::Pause],
            kinds: Kind::ALL.to_vec(),
        }
    }
}

/// Explores the DTX target.
pub async fn explore(options: &Options) -> Result<Report, ExploreError> {
    let mut report = Report {
        target: "dtx".into(),
        ..Report::default()
    };
    for &kind in &options.kinds {
        for &rf in &options.replicas {
            if kind == Kind::Promotion && rf < 2 {
                // Nothing to promote.
                continue;
            }
            for &n in &options.records {
                let scenario = format!("rf={rf} records={n}");
                let setup_err = |reason: String| ExploreError::Setup {
                    scenario: format!("{} {scenario}", kind.name()),
                    reason,
                };
                let verbs = victim_verbs(rf, n).await.map_err(setup_err)?;
                let mut found = Vec::new();
                let mut runs = 0u64;
                let mut violating_runs = 0u64;
                let mut tally = |mode: Mode, k: u64, stops: String, what: Vec<String>| {
                    runs += 1;
                    violating_runs += u64::from(!what.is_empty());
                    found.extend(what.into_iter().map(|what| Violation {
                        kind: kind.name().into(),
                        scenario: scenario.clone(),
                        mode,
                        k,
                        stops: stops.clone(),
                        what,
                    }));
                };
                for k in 1..=verbs {
                    match kind {
                        Kind::Owner => {
                            for &mode in &options.modes {
                                let what = owner_run(rf, n, mode, k).await.map_err(setup_err)?;
                                tally(mode, k, String::new(), what);
                            }
                        }
                        Kind::Recoverer => {
                            let rverbs = recoverer_verbs(rf, n, k).await.map_err(setup_err)?;
                            for j in 1..=rverbs {
                                let what = recoverer_run(rf, n, k, j).await.map_err(setup_err)?;
                                tally(
                                    Mode::Crash,
                                    k,
                                    format!("recoverer after verb {j} of {rverbs}"),
                                    what,
                                );
                            }
                        }
                        Kind::DroppedConnection => {
                            let what = dropped_run(rf, n, k).await.map_err(setup_err)?;
                            tally(Mode::Crash, k, String::new(), what);
                        }
                        Kind::Promotion => {
                            let what = promotion_run(rf, n, k).await.map_err(setup_err)?;
                            tally(Mode::Crash, k, "then the primary dies".into(), what);
                        }
                    }
                }
                tracing::info!(kind = kind.name(), %scenario, verbs, runs, violations = found.len(), "explored");
                report.add(
                    ScenarioReport {
                        kind: kind.name().into(),
                        scenario,
                        verbs,
                        crash_points: runs,
                        violating_runs,
                    },
                    found,
                );
            }
        }
    }
    Ok(report)
}

/// A fresh cluster of `rf` replicas with `n` records.
struct World {
    fabric: Client,
    heap: Heap,
    recs: Vec<Record>,
}

impl World {
    async fn new(rf: u16, n: usize) -> Result<World, String> {
        let (t, map) = fabric::LocalTransport::cluster(
            rf,
            &[fabric::RegionSpec {
                id: REGION,
                size: REGION_BYTES,
            }],
        )
        .map_err(|e| e.to_string())?;
        let mut fabric = Client::new(map, t.into());
        let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut setup =
            DtxClient::new(fabric.fork(), heap, SETUP, TxConfig::default()).map_err(|e| e.to_string())?;
        let mut recs = Vec::with_capacity(n);
        for i in 0..n {
            let mut data = [FILL; RECORD_BYTES];
            data[..8].copy_from_slice(&0u64.to_le_bytes());
            data[8] = i as u8;
            recs.push(setup.create_raw(&data).await.map_err(|e| e.to_string())?);
        }
        Ok(World { fabric, heap, recs })
    }

    /// A DTX client as `owner` with `plan`, under `mandate` if given.
    fn client(
        &self,
        owner: OwnerId,
        plan: FaultPlan,
        mandate: Option<Arc<fabric::Mandate>>,
    ) -> Result<(DtxClient, Arc<fabric::Faulty<fabric::BaseTransport>>), String> {
        let (t, faults) = self.fabric.transport().clone().with_faults(plan);
        let fabric = match mandate {
            Some(m) => Client::under(m, t),
            None => Client::new(self.fabric.map().clone(), t),
        };
        let config = TxConfig {
            attempts_max: ATTEMPTS_MAX,
            ..TxConfig::default()
        };
        let c = DtxClient::new(fabric, self.heap, owner, config).map_err(|e| e.to_string())?;
        Ok((c, faults))
    }

    fn replicas(&self) -> usize {
        self.fabric.map().region(REGION).map_or(1, |r| r.replicas.len())
    }

    /// This world after its primary died and its first backup was
    /// promoted: a map of the next epoch without the old primary, and the
    /// heap's primary-only words (the chunk counter, rTX lock words)
    /// restored on the new one, as `cluster`'s promoter does after its
    /// fence.
    async fn promoted(&self) -> Result<World, String> {
        let map = self.fabric.map();
        let mut regions = map.regions().to_vec();
        let dead = regions
            .first()
            .and_then(|r| r.replicas.first())
            .map(|l| l.node)
            .ok_or("no primary to promote from")?;
        for r in &mut regions {
            r.replicas.retain(|l| l.node != dead);
        }
        let nodes = map.nodes().iter().filter(|n| n.id != dead).cloned().collect();
        let map = ClusterMap::new(map.epoch() + 1, nodes, regions).map_err(|e| e.to_string())?;
        let mut fabric = Client::new(map, self.fabric.transport().clone());
        let floor = LockWord::promotion_floor(txn::now_tick(&fabric));
        self.heap
            .restore_after_promotion(&mut fabric, floor)
            .await
            .map_err(|e| e.to_string())?;
        Ok(World {
            fabric,
            heap: self.heap,
            recs: self.recs.clone(),
        })
    }
}

/// The records transaction `t` increments.
fn touched(t: u64, n: usize) -> Vec<usize> {
    match (n, t % 3) {
        (1, _) => vec![0],
        (_, 2) => (0..n).collect(),
        _ => vec![t as usize % n, (t as usize + 1) % n],
    }
}

/// What the victim was told.
#[derive(Clone, Debug, Default)]
struct Outcome {
    acked: Vec<u64>,
    in_doubt: Vec<u64>,
    /// Errors other than the fabric's (a stopped victim sees only those).
    unexpected: Vec<String>,
}

/// Runs the victim's transactions and its final release, stopping at the
/// first error unless `go_on`.
async fn run_victim(mut c: DtxClient, recs: Vec<Record>, go_on: bool) -> Outcome {
    let mut out = Outcome::default();
    for t in 0..TXNS {
        let set: Vec<Record> = touched(t, recs.len()).into_iter().map(|i| recs[i]).collect();
        let result = c
            .run(async |tx| {
                tx.lock_many(&set).await?;
                for &r in &set {
                    let v = le_word(tx.read_for_update(r).await?, 0);
                    tx.write_part(r, 0, &(v + 1).to_le_bytes()).await?;
                }
                Ok(())
            })
            .await;
        match result {
            Ok(()) => out.acked.push(t),
            Err(e) => {
                if c.take_commit_in_doubt() {
                    out.in_doubt.push(t);
                }
                if !matches!(e, TxError::Fabric(_)) {
                    out.unexpected.push(format!("transaction {t}: {e}"));
                }
                if !go_on {
                    return out;
                }
            }
        }
    }
    if go_on {
        // A drop in the last release: settled by one more round.
        let _ = c.release_pending().await;
        if let Err(e) = c.settle().await {
            out.unexpected.push(format!("settling: {e}"));
        }
    }
    if let Err(e) = c.release_pending().await {
        if go_on || !matches!(e, TxError::Fabric(_)) {
            out.unexpected.push(format!("final release: {e}"));
        }
    }
    out
}

/// Verbs the victim issues when nothing goes wrong.
async fn victim_verbs(rf: u16, n: usize) -> Result<u64, String> {
    let w = World::new(rf, n).await?;
    let (c, faults) = w.client(VICTIM, FaultPlan::default(), None)?;
    let out = run_victim(c, w.recs.clone(), false).await;
    if out.acked.len() as u64 != TXNS || !out.unexpected.is_empty() {
        return Err(format!("the fault-free victim failed: {out:?}"));
    }
    Ok(faults.verbs_issued())
}

async fn owner_run(rf: u16, n: usize, mode: Mode, k: u64) -> Result<Vec<String>, String> {
    let w = World::new(rf, n).await?;
    let mandate = super::victim_mandate(w.fabric.map());
    let (c, faults) = w.client(VICTIM, mode.plan(k), Some(mandate.clone()))?;
    // The victim runs in this task (no spawn): polled by the select below
    // until it pauses, then to its end.
    let victim = run_victim(c, w.recs.clone(), false);
    tokio::pin!(victim);
    let out = match mode {
        Mode::Crash => victim.await,
        Mode::Pause => {
            tokio::select! {
                () = faults.paused() => {}
                done = &mut victim => return Err(format!("the victim finished ({done:?}) before verb {k}")),
            }
            // The quarantine: fenced first, so that only the rest of the
            // batch in flight lands when it resumes.
            mandate.revoke();
            faults.resume();
            victim.await
        }
    };
    let mut found = recover(&w, &[VICTIM]).await?;
    found.extend(check(&w, &out, &[VICTIM]).await?);
    Ok(found)
}

/// Verbs a recoverer issues finishing a victim stopped after verb `k`.
async fn recoverer_verbs(rf: u16, n: usize, k: u64) -> Result<u64, String> {
    let w = World::new(rf, n).await?;
    let (c, _) = w.client(VICTIM, Mode::Crash.plan(k), None)?;
    run_victim(c, w.recs.clone(), false).await;
    let (mut r, faults) = w.client(RECOVERER, FaultPlan::default(), None)?;
    r.finish_owner_log(VICTIM).await.map_err(|e| e.to_string())?;
    Ok(faults.verbs_issued())
}

async fn recoverer_run(rf: u16, n: usize, k: u64, j: u64) -> Result<Vec<String>, String> {
    let w = World::new(rf, n).await?;
    let (c, _) = w.client(VICTIM, Mode::Crash.plan(k), None)?;
    let out = run_victim(c, w.recs.clone(), false).await;
    let (mut first, _) = w.client(RECOVERER, Mode::Crash.plan(j), None)?;
    let _ = first.finish_owner_log(VICTIM).await;
    // Either order: the dead recoverer's log first, or the victim's (whose
    // records the dead recoverer holds are then left to its recovery).
    let order = if j % 2 == 0 {
        [RECOVERER, VICTIM]
    } else {
        [VICTIM, RECOVERER]
    };
    let mut found = recover(&w, &order).await?;
    found.extend(check(&w, &out, &order).await?);
    Ok(found)
}

async fn dropped_run(rf: u16, n: usize, k: u64) -> Result<Vec<String>, String> {
    let w = World::new(rf, n).await?;
    let plan = FaultPlan {
        drop_after_verbs: Some(k),
        ..FaultPlan::default()
    };
    let (c, _) = w.client(VICTIM, plan, None)?;
    let out = run_victim(c, w.recs.clone(), true).await;
    // (The victim's own halves stay as its last transactions left them: an
    // owner does not mark its released logs.)
    check(&w, &out, &[]).await
}

async fn promotion_run(rf: u16, n: usize, k: u64) -> Result<Vec<String>, String> {
    let w = World::new(rf, n).await?;
    let (c, _) = w.client(VICTIM, Mode::Crash.plan(k), None)?;
    let out = run_victim(c, w.recs.clone(), false).await;
    // What a re-replication copy taken while the locks were held leaves on
    // the backup about to be promoted.
    let stale = LockWord::locked(SETUP, 1).raw().to_le_bytes();
    let mut b = Batch::new();
    for r in &w.recs {
        b.on(Replica::Backup(0)).write(r.lock_addr(), &stale);
    }
    w.fabric.fork().execute(&mut b).await.map_err(|e| e.to_string())?;
    let p = w.promoted().await?;
    let (mut r, _) = p.client(RECOVERER, FaultPlan::default(), None)?;
    if let Err(e) = r.relock_after_promotion(VICTIM).await {
        return Ok(vec![format!("taking the victim's locks again: {e}")]);
    }
    let mut found = recover(&p, &[VICTIM]).await?;
    if let Err(e) = r.free_stale_locks(&p.recs).await {
        found.push(format!("freeing stale locks: {e}"));
    }
    found.extend(check(&p, &out, &[VICTIM]).await?);
    Ok(found)
}

/// Recovery by [`SECOND`] of `owners`' logs, in order, then a second pass
/// that must find nothing to do.
async fn recover(w: &World, owners: &[OwnerId]) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let (mut r, _) = w.client(SECOND, FaultPlan::default(), None)?;
    for &o in owners {
        if let Err(e) = r.finish_owner_log(o).await {
            found.push(format!("recovery of owner {o}: {e}"));
            return Ok(found);
        }
    }
    if let Err(e) = r.release_pending().await {
        found.push(format!("the recoverer's release: {e}"));
    }
    for &o in owners {
        match r.finish_owner_log(o).await {
            Ok(again) if again.rolled_back + again.rolled_forward + again.released > 0 => {
                found.push(format!("a second recovery of owner {o} found work: {again:?}"));
            }
            Ok(_) => {}
            Err(e) => found.push(format!("second recovery of owner {o}: {e}")),
        }
    }
    Ok(found)
}

/// The checks of the module docs; `stopped`: the owners whose log halves
/// recovery must have left finished.
async fn check(w: &World, out: &Outcome, stopped: &[OwnerId]) -> Result<Vec<String>, String> {
    let mut found: Vec<String> = out.unexpected.clone();
    let mut f = w.fabric.fork();
    let n = w.recs.len();
    let mut counters = Vec::with_capacity(n);
    let mut b = Batch::new();
    for (i, &r) in w.recs.iter().enumerate() {
        b.clear();
        let h = b.on(Replica::All).read(r.addr, r.bytes() as u32);
        f.execute(&mut b).await.map_err(|e| e.to_string())?;
        let primary = b.read_result_of(h, 0).map_err(|e| e.to_string())?.to_vec();
        if le_word(&primary, 0) != 0 {
            found.push(format!("record {i} still locked: {:#x}", le_word(&primary, 0)));
        }
        if !matches!(Version::from_raw(le_word(&primary, 8)), Version::Visible(_)) {
            found.push(format!("record {i} left invisible: {:#x}", le_word(&primary, 8)));
        }
        for rep in 1..w.replicas() {
            let copy = b.read_result_of(h, rep).map_err(|e| e.to_string())?;
            if copy[8..] != primary[8..] {
                found.push(format!("record {i} differs on replica {rep}"));
            }
        }
        let mut untouched = [FILL; RECORD_BYTES];
        untouched[8] = i as u8;
        if primary[24..] != untouched[8..] {
            found.push(format!("record {i}'s untouched bytes changed"));
        }
        counters.push(le_word(&primary, 16));
    }
    let explained = (0u32..1 << TXNS).any(|mask| {
        let applied: Vec<u64> = (0..TXNS).filter(|t| mask & (1 << t) != 0).collect();
        let mut expect = vec![0u64; n];
        for &t in &applied {
            for i in touched(t, n) {
                expect[i] += 1;
            }
        }
        out.acked.iter().all(|t| applied.contains(t))
            && applied
                .iter()
                .all(|t| out.acked.contains(t) || out.in_doubt.contains(t))
            && expect == counters
    });
    if !explained {
        found.push(format!(
            "counters {counters:?} are no set of whole transactions holding every acknowledged one \
             (acknowledged {:?}, in doubt {:?})",
            out.acked, out.in_doubt
        ));
    }
    for &o in stopped {
        let slot = w.heap.log_slot(o).map_err(|e| e.to_string())?;
        b.clear();
        let h = b.on(Replica::All).read(slot, txn::log::LOG_SLOT_BYTES as u32);
        f.execute(&mut b).await.map_err(|e| e.to_string())?;
        for rep in 0..w.replicas() {
            let bytes = b.read_result_of(h, rep).map_err(|e| e.to_string())?;
            for (half, piece) in bytes.chunks(HALF_BYTES as usize).enumerate() {
                if let Some(log) = DtxLog::decode(piece) {
                    if is_unfinished(log.header.state()) {
                        found.push(format!(
                            "owner {o}'s log half {half} on replica {rep} is left {:?}",
                            log.header.state()
                        ));
                    }
                }
            }
        }
    }
    found.extend(survivor_writes(w).await);
    Ok(found)
}

/// A survivor locks and writes every record twice: nothing left blocks it.
async fn survivor_writes(w: &World) -> Vec<String> {
    let Ok((mut s, _)) = w.client(SURVIVOR, FaultPlan::default(), None) else {
        return vec!["no survivor client".into()];
    };
    let set = w.recs.clone();
    for t in 0..2 {
        let r = s
            .run(async |tx| {
                tx.lock_many(&set).await?;
                for &r in &set {
                    let v = le_word(tx.read_for_update(r).await?, 0);
                    tx.write_part(r, 0, &v.to_le_bytes()).await?;
                }
                Ok(())
            })
            .await;
        if let Err(e) = r {
            return vec![format!("the survivor's transaction {t}: {e}")];
        }
    }
    match s.release_pending().await {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!("the survivor's release: {e}")],
    }
}
