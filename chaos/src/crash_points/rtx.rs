//! The rTX target: a victim transaction reads `n` objects and rewrites all
//! of them; it is stopped after each of its verbs in turn.
//!
//! After the stop a survivor (its clock far enough ahead that every lease of
//! the victim has expired) reads all `n` objects in one transaction, which
//! must see either all old or all new values, and rewrites them; it must
//! commit. In pause mode the victim then wakes and must finish too. Finally
//! a checker reads DM directly: no lock word is locked, every replica points
//! at the same data with the same contents, and all objects carry the value
//! of the same transaction.

use bytemuck::{Pod, Zeroable};
use fabric::{AnyTransport, Batch, Client, FaultPlan, LocalTransport, RegionSpec, Replica};
use txn::{DataPtr, Heap, HeapConfig, LockWord, TxClient, TxConfig, TxError, TxObj};

use super::{stop_victim, survivor_plan, ExploreError, Mode, Report};

const REGION: u16 = 1;
const REGION_BYTES: u64 = 2 << 20;
const VICTIM: u16 = 2;
const SURVIVOR: u16 = 3;
/// Attempts before a transaction of the exploration gives up: far more than
/// any run needs (a handful), few enough that a livelock shows as a failure.
const ATTEMPTS_MAX: u32 = 200;

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Write-set sizes.
    pub objects: Vec<usize>,
    /// Replication factors.
    pub replicas: Vec<u16>,
    /// Crash and/or pause.
    pub modes: Vec<Mode>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            objects: vec![1, 2, 3, 8],
            replicas: vec![1, 2],
            modes: vec![Mode::Crash, Mode::Pause],
        }
    }
}

/// One object's data: which transaction wrote it, with a check word that
/// makes torn or misplaced data visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Cell {
    generation: u64,
    index: u64,
    check: u64,
}

impl Cell {
    fn new(generation: u64, index: usize) -> Self {
        let index = index as u64;
        Cell {
            generation,
            index,
            check: Self::check_of(generation, index),
        }
    }

    fn check_of(generation: u64, index: u64) -> u64 {
        (generation.wrapping_mul(0x9E37_79B9_7F4A_7C15)) ^ index ^ 0x6b69_6e74_7375_6769
    }

    fn is_sound(&self, index: usize) -> bool {
        self.index == index as u64 && self.check == Self::check_of(self.generation, self.index)
    }
}

/// The generations the victim and the survivor write.
const OLD: u64 = 0;
const VICTIM_GEN: u64 = 1;
const SURVIVOR_GEN: u64 = 2;

struct World {
    map: fabric::ClusterMap,
    base: AnyTransport,
    heap: Heap,
    objs: Vec<TxObj<Cell>>,
}

fn config() -> TxConfig {
    TxConfig {
        attempts_max: ATTEMPTS_MAX,
        ..TxConfig::default()
    }
}

async fn world(replicas: u16, n: usize) -> Result<World, String> {
    let (t, map) = LocalTransport::cluster(
        replicas,
        &[RegionSpec {
            id: REGION,
            size: REGION_BYTES,
        }],
    )
    .map_err(|e| e.to_string())?;
    let base: AnyTransport = t.into();
    let mut fabric = Client::new(map.clone(), base.clone());
    let heap_config = HeapConfig {
        owner_slots: 8,
        chunk_bytes: 16 * 1024,
    };
    let heap = Heap::format(&mut fabric, REGION, heap_config)
        .await
        .map_err(|e| e.to_string())?;
    let mut setup = TxClient::new(fabric, heap, 1, config()).map_err(|e| e.to_string())?;
    let mut objs = Vec::with_capacity(n);
    for i in 0..n {
        objs.push(
            setup
                .create(&Cell::new(OLD, i))
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(World {
        map,
        base,
        heap,
        objs,
    })
}

impl World {
    fn client(
        &self,
        owner: u16,
        plan: FaultPlan,
    ) -> Result<(TxClient, std::sync::Arc<fabric::Faulty<fabric::BaseTransport>>), String> {
        let (t, faults) = self.base.clone().with_faults(plan);
        let c = TxClient::new(Client::new(self.map.clone(), t), self.heap, owner, config())
            .map_err(|e| e.to_string())?;
        Ok((c, faults))
    }
}

/// Reads every object and rewrites it with `generation`; returns the
/// generations read by the attempt that committed.
async fn rewrite_all(c: &mut TxClient, objs: Vec<TxObj<Cell>>, generation: u64) -> Result<Vec<u64>, TxError> {
    c.run(async move |tx| {
        let mut seen = Vec::with_capacity(objs.len());
        for (i, &o) in objs.iter().enumerate() {
            let cell = tx.read(o).await?;
            // A torn or misplaced read inside an attempt is what validation
            // exists to catch; record it and let commit decide.
            seen.push(if cell.is_sound(i) {
                cell.generation
            } else {
                u64::MAX
            });
        }
        for (i, &o) in objs.iter().enumerate() {
            tx.write(o, &Cell::new(generation, i)).await?;
        }
        Ok(seen)
    })
    .await
}

/// Explores the rTX target.
pub async fn explore(options: &Options) -> Result<Report, ExploreError> {
    let mut report = Report {
        target: "rtx".into(),
        ..Report::default()
    };
    for &replicas in &options.replicas {
        for &n in &options.objects {
            let scenario = format!("rf={replicas} objects={n}");
            let setup_err = |reason: String| ExploreError::Setup {
                scenario: scenario.clone(),
                reason,
            };
            let verbs = fault_free_verbs(replicas, n).await.map_err(setup_err)?;
            report
                .explore_scenario(&scenario, verbs, &options.modes, async |mode, k| {
                    run_once(replicas, n, mode, k).await
                })
                .await?;
        }
    }
    Ok(report)
}

/// Verbs of the victim's transaction when nothing goes wrong.
async fn fault_free_verbs(replicas: u16, n: usize) -> Result<u64, String> {
    let w = world(replicas, n).await?;
    let (mut victim, faults) = w.client(VICTIM, FaultPlan::default())?;
    rewrite_all(&mut victim, w.objs.clone(), VICTIM_GEN)
        .await
        .map_err(|e| format!("fault-free run failed: {e}"))?;
    Ok(faults.verbs_issued())
}

/// One run: stop the victim at verb `k`, let a survivor through, check.
async fn run_once(replicas: u16, n: usize, mode: Mode, k: u64) -> Result<Vec<String>, String> {
    let w = world(replicas, n).await?;
    let plan = mode.plan(k);
    let (mut victim, faults) = w.client(VICTIM, plan)?;
    let (mut survivor, _) = w.client(SURVIVOR, survivor_plan())?;
    let mut found = Vec::new();

    let objs = w.objs.clone();
    let victim_task = tokio::spawn(async move { rewrite_all(&mut victim, objs, VICTIM_GEN).await });
    let victim_task = stop_victim(mode, victim_task, &faults, k).await?;

    match rewrite_all(&mut survivor, w.objs.clone(), SURVIVOR_GEN).await {
        Ok(seen) => {
            let first = seen[0];
            if seen.iter().any(|&g| g != first) || !(first == OLD || first == VICTIM_GEN) {
                found.push(format!("survivor read a mix of generations {seen:?}"));
            }
        }
        Err(e) => found.push(format!("survivor could not commit: {e}")),
    }

    let mut finals = vec![SURVIVOR_GEN];
    if let Some(task) = victim_task {
        faults.resume();
        match task.await {
            Ok(Ok(_)) => finals.push(VICTIM_GEN),
            Ok(Err(e)) => found.push(format!("victim failed after waking: {e}")),
            Err(e) => found.push(format!("victim task panicked: {e}")),
        }
    }
    found.extend(check(&w, &finals).await?);
    Ok(found)
}

/// Reads DM directly: locks, replica agreement, data soundness, and that all
/// objects hold one generation out of `allowed`.
async fn check(w: &World, allowed: &[u64]) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let mut fabric = Client::new(w.map.clone(), w.base.clone());
    let replicas = w.map.region(REGION).map_or(1, |r| r.replicas.len());
    let mut generations = Vec::new();
    let mut batch = Batch::new();
    for (i, o) in w.objs.iter().enumerate() {
        batch.clear();
        let h = batch.on(Replica::All).read(o.meta(), 16);
        fabric.execute(&mut batch).await.map_err(|e| e.to_string())?;
        let metas: Vec<(LockWord, DataPtr)> = (0..replicas)
            .map(|r| {
                let b = batch.read_result_of(h, r).map_err(|e| e.to_string())?;
                let w = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
                Ok((LockWord::from_raw(w(0)), DataPtr::from_raw(w(8))))
            })
            .collect::<Result<_, String>>()?;
        let (lock, dptr) = metas[0];
        if lock.is_locked() {
            found.push(format!("object {i} is still locked: {lock:?}"));
        }
        for (r, &(_, other)) in metas.iter().enumerate().skip(1) {
            if other != dptr {
                found.push(format!(
                    "object {i}: replica {r} points at {other:?}, the primary at {dptr:?}"
                ));
            }
        }
        batch.clear();
        let d = batch.on(Replica::All).read(
            fabric::GlobalAddr::new(REGION, dptr.offset()),
            std::mem::size_of::<Cell>() as u32,
        );
        fabric.execute(&mut batch).await.map_err(|e| e.to_string())?;
        let primary: Cell = bytemuck::pod_read_unaligned(batch.read_result(d).map_err(|e| e.to_string())?);
        for r in 1..replicas {
            let copy: Cell =
                bytemuck::pod_read_unaligned(batch.read_result_of(d, r).map_err(|e| e.to_string())?);
            if copy != primary {
                found.push(format!(
                    "object {i}: replica {r} holds {copy:?}, the primary {primary:?}"
                ));
            }
        }
        if !primary.is_sound(i) {
            found.push(format!("object {i} holds unsound data {primary:?}"));
        }
        generations.push(primary.generation);
    }
    let first = generations[0];
    if generations.iter().any(|&g| g != first) {
        found.push(format!("objects hold a mix of generations {generations:?}"));
    } else if !allowed.contains(&first) {
        found.push(format!(
            "objects hold generation {first}, expected one of {allowed:?}"
        ));
    }
    Ok(found)
}
