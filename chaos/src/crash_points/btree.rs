//! The B+tree target: a victim inserts one key into a tree shaped so that
//! the insert writes one entry, splits a leaf, or splits a leaf and the
//! (internal) root; it is stopped after each of its verbs in turn.
//!
//! After the stop a survivor (clock past the victim's leases) inserts keys
//! next to the victim's, through the same leaf and parent. Then the checker
//! runs the tree's structural `check()` and verifies that every key
//! acknowledged before (the base tree's, the survivor's) is present with its
//! value, and that the victim's key is present with the victim's value or
//! absent — present if the victim's insert was acknowledged (pause mode).
//! A survivor blocked forever by a lock the victim never releases is a
//! violation too. The `optimal` variant is expected to show violations.
//!
//! The `dtx` variant has no online repair: its victim runs under a lease
//! (`fabric::Mandate`); a paused victim is fenced (the lease revoked) and
//! resumed, so that the rest of its batch in flight lands and nothing after
//! it does (DTX's quarantine), and recovery (`finish_owner_log`) runs before
//! the survivor.

use fabric::{AnyTransport, Client, ClusterMap, FaultPlan};
use index::btree::node::{INTERNAL_SLOTS, LEAF_SLOTS};
use index::btree::{BTree, TreeInfo, Variant, Written};
use txn::{Heap, HeapConfig, TxConfig};

pub use super::IndexOptions as Options;
use super::{
    one_region_cluster, read_region, restore, stop_victim, survivor_plan, ExploreError, Mode, Report,
};

const REGION: u16 = 1;
const REGION_BYTES: u64 = 8 << 20;
const SETUP: u16 = 1;
const VICTIM: u16 = 2;
const SURVIVOR: u16 = 3;
const CHECKER: u16 = 4;
/// The owner id that rolls a dtx victim's log.
const RECOVERER: u16 = 5;
/// Keys of the base trees are multiples of this, so that a victim key and
/// survivor keys fit between them.
const STEP: u64 = 1000;
/// How hard a survivor tries before it counts as blocked: enough for any
/// repair, far from forever, and below the optimal variant's spin phase so
/// that a blocked survivor gives up without sleeping.
const SURVIVOR_ATTEMPTS: u32 = 1_000;
/// Keys the survivor inserts next to the victim's.
const SURVIVOR_KEYS: u64 = 3;
/// Ascending inserts a base tree may take to reach its shape.
const SETUP_KEYS_MAX: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// The victim's key fits a leaf with room: one entry written.
    Entry,
    /// The victim's key overflows a leaf whose parent has room.
    LeafSplit,
    /// The victim's key overflows a leaf whose parent, the root, is full.
    LeafAndRootSplit,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Entry => "insert into a leaf with room",
            Shape::LeafSplit => "insert splitting a leaf",
            Shape::LeafAndRootSplit => "insert splitting a leaf and the internal root",
        }
    }
}

/// A base tree: its memory image and what it holds.
struct Base {
    image: Vec<u8>,
    info: TreeInfo,
    keys: Vec<u64>,
    victim_key: u64,
}

fn value_of(key: u64, who: u16) -> u64 {
    key.wrapping_mul(31) ^ u64::from(who) << 56
}

fn heap_config() -> HeapConfig {
    HeapConfig {
        owner_slots: 8,
        chunk_bytes: 16 * 1024,
    }
}

/// Grows a tree by ascending inserts until it has `shape`'s precondition.
async fn base(variant: Variant, shape: Shape) -> Result<Base, String> {
    let (t, map) = one_region_cluster(REGION, REGION_BYTES)?;
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, REGION, heap_config())
        .await
        .map_err(|e| e.to_string())?;
    let mut tree = BTree::create(fabric.fork(), heap, variant, SETUP)
        .await
        .map_err(|e| e.to_string())?;
    let mut keys = Vec::new();
    let mut next = STEP;
    loop {
        if keys.len() as u64 >= SETUP_KEYS_MAX {
            return Err(format!("no {shape:?} shape after {SETUP_KEYS_MAX} inserts"));
        }
        tree.insert(next, value_of(next, SETUP))
            .await
            .map_err(|e| e.to_string())?;
        keys.push(next);
        next += STEP;
        let root = tree.node(tree.root()).await.map_err(|e| e.to_string())?;
        if root.level != 1 {
            continue;
        }
        let (_, last_child) = *root.children.last().unwrap_or(&(0, root.leftmost));
        let last = tree.node(last_child).await.map_err(|e| e.to_string())?;
        let last_full = last.slots.iter().flatten().count() == LEAF_SLOTS;
        let victim_key = match shape {
            // The leftmost leaf keeps half a leaf once the root split off.
            Shape::Entry if last_full && root.children.len() < INTERNAL_SLOTS => keys[1] + STEP / 2,
            Shape::LeafSplit if last_full && root.children.len() < INTERNAL_SLOTS => next,
            Shape::LeafAndRootSplit if last_full && root.children.len() == INTERNAL_SLOTS => next,
            _ => continue,
        };
        let image = read_region(&mut fabric, REGION, REGION_BYTES).await?;
        return Ok(Base {
            image,
            info: tree.info(),
            keys,
            victim_key,
        });
    }
}

fn client(
    map: &ClusterMap,
    base: &AnyTransport,
    heap: Heap,
    info: TreeInfo,
    owner: u16,
    plan: FaultPlan,
) -> Result<(BTree, std::sync::Arc<fabric::Faulty<fabric::BaseTransport>>), String> {
    client_under(map, base, heap, info, owner, plan, None)
}

fn client_under(
    map: &ClusterMap,
    base: &AnyTransport,
    heap: Heap,
    info: TreeInfo,
    owner: u16,
    plan: FaultPlan,
    mandate: Option<std::sync::Arc<fabric::Mandate>>,
) -> Result<(BTree, std::sync::Arc<fabric::Faulty<fabric::BaseTransport>>), String> {
    let (t, faults) = base.clone().with_faults(plan);
    let config = TxConfig {
        attempts_max: SURVIVOR_ATTEMPTS,
        ..TxConfig::default()
    };
    let fabric = match mandate {
        Some(m) => Client::under(m, t),
        None => Client::new(map.clone(), t),
    };
    let mut tree = BTree::attach(fabric, heap, owner, config, info).map_err(|e| e.to_string())?;
    tree.set_attempts_max(SURVIVOR_ATTEMPTS);
    Ok((tree, faults))
}

/// Explores the B+tree target for one variant.
pub async fn explore(options: &Options) -> Result<Report, ExploreError> {
    let mut report = Report {
        target: format!("btree/{}", options.variant),
        ..Report::default()
    };
    for shape in [Shape::Entry, Shape::LeafSplit, Shape::LeafAndRootSplit] {
        let scenario = shape.name().to_string();
        let setup_err = |reason: String| ExploreError::Setup {
            scenario: scenario.clone(),
            reason,
        };
        let base = base(options.variant, shape).await.map_err(setup_err)?;
        let verbs = fault_free_verbs(&base).await.map_err(setup_err)?;
        report
            .explore_scenario(&scenario, verbs, &options.modes, async |mode, k| {
                run_once(&base, mode, k).await
            })
            .await?;
    }
    Ok(report)
}

async fn fault_free_verbs(base: &Base) -> Result<u64, String> {
    let (map, t, heap) = restore(REGION, &base.image).await?;
    let (mut victim, faults) = client(&map, &t, heap, base.info, VICTIM, FaultPlan::default())?;
    victim
        .insert(base.victim_key, value_of(base.victim_key, VICTIM))
        .await
        .map_err(|e| format!("fault-free insert failed: {e}"))?;
    Ok(faults.verbs_issued())
}

async fn run_once(base: &Base, mode: Mode, k: u64) -> Result<Vec<String>, String> {
    let (map, t, heap) = restore(REGION, &base.image).await?;
    let plan = mode.plan(k);
    let dtx = base.info.variant == Variant::Dtx;
    let mandate = dtx.then(|| super::victim_mandate(&map));
    let (mut victim, faults) = client_under(&map, &t, heap, base.info, VICTIM, plan, mandate.clone())?;
    let (mut survivor, _) = client(&map, &t, heap, base.info, SURVIVOR, survivor_plan())?;
    let key = base.victim_key;
    let mut found = Vec::new();
    let victim_task = tokio::spawn(async move {
        victim
            .insert(key, value_of(key, VICTIM))
            .await
            .map(|w| w == Written::Inserted)
    });
    let mut victim_task = stop_victim(mode, victim_task, &faults, k).await?;
    let mut victim_acknowledged = false;
    if let Some(mandate) = &mandate {
        let task = victim_task.take();
        let answered = super::fence_and_roll(
            mandate,
            task,
            &faults,
            &map,
            &t,
            heap,
            (VICTIM, RECOVERER),
            &mut found,
        )
        .await?;
        victim_acknowledged = answered == Some(true);
    }

    let mut acknowledged: Vec<(u64, u64)> = base.keys.iter().map(|&k| (k, value_of(k, SETUP))).collect();
    for i in 1..=SURVIVOR_KEYS {
        let k = key + i;
        match survivor.insert(k, value_of(k, SURVIVOR)).await {
            Ok(_) => acknowledged.push((k, value_of(k, SURVIVOR))),
            Err(e) => {
                found.push(format!("survivor's insert of {k} failed: {e}"));
                break;
            }
        }
    }

    if let Some(task) = victim_task {
        faults.resume();
        match task.await {
            Ok(Ok(inserted)) => victim_acknowledged = inserted,
            Ok(Err(e)) => found.push(format!("victim failed after waking: {e}")),
            Err(e) => found.push(format!("victim task panicked: {e}")),
        }
    }

    // rTX repairs on demand: a node the survivor did not touch may still
    // hold the victim's lock. A sweeper meets every lock once, as any later
    // client (or the recovery module) would, and then the tree is checked.
    let (mut sweeper, _) = client(&map, &t, heap, base.info, CHECKER, survivor_plan())?;
    if let Err(e) = sweeper.repair_expired_locks().await {
        found.push(format!("sweeping expired locks failed: {e}"));
    }
    let report = sweeper.check().await.map_err(|e| e.to_string())?;
    found.extend(report.violations.iter().map(|v| format!("check: {v}")));
    let entries: std::collections::BTreeMap<u64, u64> = report.entries.iter().copied().collect();
    let missing: Vec<u64> = acknowledged
        .iter()
        .filter(|(k, v)| entries.get(k) != Some(v))
        .map(|&(k, _)| k)
        .collect();
    if !missing.is_empty() {
        found.push(format!(
            "{} acknowledged keys missing or wrong, first {}",
            missing.len(),
            missing[0]
        ));
    }
    match entries.get(&key) {
        Some(&v) if v != value_of(key, VICTIM) => {
            found.push(format!("victim key {key} holds a foreign value"))
        }
        None if victim_acknowledged => {
            found.push(format!("victim key {key} was acknowledged but is missing"))
        }
        _ => {}
    }
    Ok(found)
}
