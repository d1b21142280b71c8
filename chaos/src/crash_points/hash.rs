//! The RACE hash target: a victim inserts a key into a subtable with room,
//! updates a key, deletes a key, or inserts a key whose two combined buckets
//! are full, so that it splits the subtable; it is stopped after each of its
//! verbs in turn.
//!
//! Subtables are tiny (one bucket group: 21 slots) so that a few dozen keys
//! fill one. After the stop a survivor (clock past the victim's leases)
//! reads every preloaded key and inserts fresh ones into the same subtable,
//! meeting whatever the victim left there (for rtx, a split it must repair),
//! until it has split a subtable itself: only a split takes the directory's
//! lock, so only a split meets one the victim left there through the common
//! path. Then the checker sweeps expired locks (`repair_expired_locks`, as
//! the btree target does), runs the table's structural `check()` (which also
//! finds held locks) and verifies that every acknowledged key is present with its
//! value, and that the victim's key holds its old value, its new one, or is
//! absent, as the operation allows (an insert: absent or new; an update: old
//! or new; a delete: old or absent), and exactly the new state if the victim
//! was acknowledged (pause mode). No key may hold a value nobody wrote, and
//! a survivor blocked by a lock the victim never releases is a violation.
//! The `optimal` variant is expected to show violations.
//!
//! The `dtx` variant has no online repair: its victim runs under a lease
//! (`fabric::Mandate`); a paused victim is fenced (the lease revoked) and
//! resumed, so that the rest of the batch in flight lands before anyone
//! acts on what it left (DTX's quarantine), and recovery
//! (`finish_owner_log`) runs before the survivor, as the btree target does.

use std::collections::BTreeMap;

use fabric::{AnyTransport, Client, ClusterMap, FaultPlan};
use index::hash::{HashConfig, HashTable, TableInfo};
use index::Variant;
use txn::{Heap, HeapConfig, TxConfig};

pub use super::IndexOptions as Options;
use super::{
    one_region_cluster, read_region, restore, stop_victim, survivor_plan, ExploreError, Mode, Report,
};

const REGION: u16 = 1;
const REGION_BYTES: u64 = 1 << 20;
const SETUP: u16 = 1;
const VICTIM: u16 = 2;
const SURVIVOR: u16 = 3;
const CHECKER: u16 = 4;
/// The owner id that rolls a dtx victim's log.
const RECOVERER: u16 = 5;
/// One bucket group (three buckets, 21 slots) per subtable, so that a few
/// dozen keys fill one; a directory deep enough never to be full here.
const CONFIG: HashConfig = HashConfig {
    groups: 1,
    dir_depth: 6,
};
/// How hard a survivor tries before it counts as blocked: enough for any
/// repair, far from forever, and below the hash table's spin phase so that
/// a blocked survivor gives up without sleeping.
const SURVIVOR_ATTEMPTS: u32 = 1_000;
/// Keys preloaded for the scenarios without a split: well below a
/// subtable's 21 slots.
const PRELOAD: u64 = 8;
/// The key the victim inserts when it does not split (never preloaded).
const FRESH_KEY: u64 = 1_000;
/// The first fresh key the survivor inserts (never preloaded, never the
/// victim's; those are below).
const SURVIVOR_KEY_FIRST: u64 = 2_001;
/// Most keys the survivor inserts: it stops after its first split, which
/// two 21-slot subtables make sure of well before this.
const SURVIVOR_INSERTS_MAX: usize = 100;
/// Inserts the setup may make while looking for the one that splits.
const FILL_MAX: u64 = 1_000;

/// The victim's operation and the table it meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Insert a fresh key into a subtable with room.
    Insert,
    /// Update a preloaded key.
    Update,
    /// Delete a preloaded key.
    Delete,
    /// Insert a fresh key whose two combined buckets are full: it splits
    /// the subtable.
    InsertSplit,
}

impl Scenario {
    /// Every scenario, in the order explored.
    pub const ALL: [Scenario; 4] = [
        Scenario::Insert,
        Scenario::Update,
        Scenario::Delete,
        Scenario::InsertSplit,
    ];

    /// The scenario's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Insert => "insert, no split",
            Scenario::Update => "update",
            Scenario::Delete => "delete",
            Scenario::InsertSplit => "insert that splits",
        }
    }

    /// Whether the victim's fault-free operation must split a subtable.
    fn splits(self) -> bool {
        self == Scenario::InsertSplit
    }
}

/// The victim's operation.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { key: u64, value: u64 },
    Update { key: u64, old: u64, value: u64 },
    Delete { key: u64, old: u64 },
}

impl Op {
    fn key(self) -> u64 {
        match self {
            Op::Insert { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    /// What the key may hold while the operation is unacknowledged (`None`:
    /// absent): before or after it, nothing else.
    fn allowed(self) -> Vec<Option<u64>> {
        match self {
            Op::Insert { value, .. } => vec![None, Some(value)],
            Op::Update { old, value, .. } => vec![Some(old), Some(value)],
            Op::Delete { old, .. } => vec![Some(old), None],
        }
    }

    /// What the key must hold once the operation is acknowledged.
    fn after(self) -> Option<u64> {
        match self {
            Op::Insert { value, .. } | Op::Update { value, .. } => Some(value),
            Op::Delete { .. } => None,
        }
    }

    /// Runs it; every one of the scenarios' operations must answer `true`
    /// (the insert's key is fresh, the update's and delete's present).
    async fn run(self, t: &mut HashTable) -> Result<bool, index::IndexError> {
        match self {
            Op::Insert { key, value } => t.insert(key, value).await,
            Op::Update { key, value, .. } => t.update(key, value).await,
            Op::Delete { key, .. } => t.delete(key).await,
        }
    }
}

/// A base table: its memory image, what it holds and what the victim does.
struct Base {
    image: Vec<u8>,
    info: TableInfo,
    /// Preloaded keys (with `value_of(key, SETUP)`).
    keys: Vec<u64>,
    op: Op,
    /// Verbs the victim issues attaching, before its operation: its fault
    /// positions count from there.
    attach_verbs: u64,
}

/// What the victim's operation does when nothing goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DryRun {
    /// Verbs of the operation.
    pub verbs: u64,
    /// Splits it made.
    pub splits: u64,
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

/// A fresh table with keys `1..=n` inserted by the setup client.
async fn filled(variant: Variant, n: u64) -> Result<(Client, HashTable), String> {
    let (t, map) = one_region_cluster(REGION, REGION_BYTES)?;
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, REGION, heap_config())
        .await
        .map_err(|e| e.to_string())?;
    let mut table = HashTable::create(fabric.fork(), heap, variant, SETUP, CONFIG)
        .await
        .map_err(|e| e.to_string())?;
    for key in 1..=n {
        if !table
            .insert(key, value_of(key, SETUP))
            .await
            .map_err(|e| e.to_string())?
        {
            return Err(format!("setup insert of fresh key {key} answered present"));
        }
    }
    if table.stats().splits != 0 {
        return Err(format!(
            "the setup's {n} inserts split the subtable: no scenario starts from one"
        ));
    }
    Ok((fabric, table))
}

/// The first `n` such that inserting key `n` into a table holding `1..n`
/// splits the (only) subtable.
async fn first_splitting_key(variant: Variant) -> Result<u64, String> {
    let (_, mut table) = filled(variant, 0).await?;
    for key in 1..=FILL_MAX {
        table
            .insert(key, value_of(key, SETUP))
            .await
            .map_err(|e| e.to_string())?;
        if table.stats().splits > 0 {
            return Ok(key);
        }
    }
    Err(format!("no insert split the subtable within {FILL_MAX} keys"))
}

async fn base(variant: Variant, scenario: Scenario) -> Result<Base, String> {
    let (preload, op) = match scenario {
        Scenario::Insert => (
            PRELOAD,
            Op::Insert {
                key: FRESH_KEY,
                value: value_of(FRESH_KEY, VICTIM),
            },
        ),
        Scenario::Update => (
            PRELOAD,
            Op::Update {
                key: 1,
                old: value_of(1, SETUP),
                value: value_of(1, VICTIM),
            },
        ),
        Scenario::Delete => (
            PRELOAD,
            Op::Delete {
                key: 1,
                old: value_of(1, SETUP),
            },
        ),
        Scenario::InsertSplit => {
            // Found on a scratch table, then rebuilt up to just before it:
            // one client's inserts are deterministic.
            let key = first_splitting_key(variant).await?;
            (
                key - 1,
                Op::Insert {
                    key,
                    value: value_of(key, VICTIM),
                },
            )
        }
    };
    let (mut fabric, table) = filled(variant, preload).await?;
    let image = read_region(&mut fabric, REGION, REGION_BYTES).await?;
    Ok(Base {
        image,
        info: table.info(),
        keys: (1..=preload).collect(),
        op,
        attach_verbs: 0,
    })
}

async fn client(
    map: &ClusterMap,
    base: &AnyTransport,
    heap: Heap,
    info: TableInfo,
    owner: u16,
    plan: FaultPlan,
) -> Result<(HashTable, std::sync::Arc<fabric::Faulty<fabric::BaseTransport>>), String> {
    client_under(map, base, heap, info, owner, plan, None).await
}

/// [`client`], its fabric under `mandate` if given (a dtx victim's lease).
async fn client_under(
    map: &ClusterMap,
    base: &AnyTransport,
    heap: Heap,
    info: TableInfo,
    owner: u16,
    plan: FaultPlan,
    mandate: Option<std::sync::Arc<fabric::Mandate>>,
) -> Result<(HashTable, std::sync::Arc<fabric::Faulty<fabric::BaseTransport>>), String> {
    let (t, faults) = base.clone().with_faults(plan);
    let config = TxConfig {
        attempts_max: SURVIVOR_ATTEMPTS,
        ..TxConfig::default()
    };
    let fabric = match mandate {
        Some(m) => Client::under(m, t),
        None => Client::new(map.clone(), t),
    };
    let mut table = HashTable::attach(fabric, heap, owner, config, info)
        .await
        .map_err(|e| format!("attaching owner {owner}: {e}"))?;
    table.set_attempts_max(SURVIVOR_ATTEMPTS);
    Ok((table, faults))
}

/// Runs `scenario`'s victim operation once without faults: its verbs and
/// whether it split. Exploration refuses a scenario whose split does not
/// happen as intended.
pub async fn dry_run(variant: Variant, scenario: Scenario) -> Result<DryRun, ExploreError> {
    let mut base = base(variant, scenario)
        .await
        .map_err(|reason| setup_error(scenario, reason))?;
    fault_free(&mut base)
        .await
        .map_err(|reason| setup_error(scenario, reason))
}

fn setup_error(scenario: Scenario, reason: String) -> ExploreError {
    ExploreError::Setup {
        scenario: scenario.name().to_string(),
        reason,
    }
}

/// Runs the victim's operation on a copy of `base` without faults; records
/// how many verbs attaching takes.
async fn fault_free(base: &mut Base) -> Result<DryRun, String> {
    let (map, t, heap) = restore(REGION, &base.image).await?;
    let (mut victim, faults) = client(&map, &t, heap, base.info, VICTIM, FaultPlan::default()).await?;
    base.attach_verbs = faults.verbs_issued();
    let answered = base
        .op
        .run(&mut victim)
        .await
        .map_err(|e| format!("fault-free {:?} failed: {e}", base.op))?;
    if !answered {
        return Err(format!("fault-free {:?} answered false", base.op));
    }
    Ok(DryRun {
        verbs: faults.verbs_issued() - base.attach_verbs,
        splits: victim.stats().splits,
    })
}

/// Explores the hash target for one variant.
pub async fn explore(options: &Options) -> Result<Report, ExploreError> {
    let mut report = Report {
        target: format!("hash/{}", options.variant),
        ..Report::default()
    };
    for scenario in Scenario::ALL {
        let setup_err = |reason: String| setup_error(scenario, reason);
        let mut base = base(options.variant, scenario).await.map_err(setup_err)?;
        let dry = fault_free(&mut base).await.map_err(setup_err)?;
        if (dry.splits > 0) != scenario.splits() {
            return Err(setup_err(format!(
                "the fault-free operation made {} splits, the scenario needs {}",
                dry.splits,
                if scenario.splits() { "one" } else { "none" }
            )));
        }
        report
            .explore_scenario(scenario.name(), dry.verbs, &options.modes, async |mode, k| {
                run_once(&base, mode, k).await
            })
            .await?;
    }
    Ok(report)
}

/// What the checker expects of each key.
#[derive(Debug, Default)]
struct Expected {
    /// Keys that must hold exactly this (`None`: absent) ...
    exact: BTreeMap<u64, Option<u64>>,
    /// ... or one of these.
    either: BTreeMap<u64, Vec<Option<u64>>>,
}

impl Expected {
    fn allows(&self, key: u64, found: Option<u64>) -> bool {
        match (self.exact.get(&key), self.either.get(&key)) {
            (Some(&want), _) => found == want,
            (None, Some(states)) => states.contains(&found),
            (None, None) => found.is_none(),
        }
    }

    fn describe(&self, key: u64) -> String {
        match (self.exact.get(&key), self.either.get(&key)) {
            (Some(&want), _) => show(want),
            (None, Some(states)) => states.iter().map(|&s| show(s)).collect::<Vec<_>>().join(" or "),
            (None, None) => "absent".to_string(),
        }
    }

    fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.exact.keys().chain(self.either.keys()).copied()
    }
}

fn show(found: Option<u64>) -> String {
    found.map_or("absent".to_string(), |v| format!("{v:#x}"))
}

async fn run_once(base: &Base, mode: Mode, k: u64) -> Result<Vec<String>, String> {
    let (map, t, heap) = restore(REGION, &base.image).await?;
    let plan = mode.plan(base.attach_verbs + k);
    let mandate = (base.info.variant == Variant::Dtx).then(|| super::victim_mandate(&map));
    let (mut victim, faults) = client_under(&map, &t, heap, base.info, VICTIM, plan, mandate.clone()).await?;
    if faults.verbs_issued() != base.attach_verbs {
        return Err(format!(
            "the victim attached in {} verbs, {} without faults",
            faults.verbs_issued(),
            base.attach_verbs
        ));
    }
    // Attached before the victim runs: its cached directory may go stale.
    let (mut survivor, _) = client(&map, &t, heap, base.info, SURVIVOR, survivor_plan()).await?;
    let op = base.op;
    let victim_task = tokio::spawn(async move { op.run(&mut victim).await });
    let mut victim_task = stop_victim(mode, victim_task, &faults, k).await?;

    let mut found = Vec::new();
    let mut expected = Expected::default();
    for &key in &base.keys {
        expected.exact.insert(key, Some(value_of(key, SETUP)));
    }
    expected.exact.remove(&op.key());
    expected.either.insert(op.key(), op.allowed());

    if let Some(mandate) = &mandate {
        let task = victim_task.take();
        match super::fence_and_roll(
            mandate,
            task,
            &faults,
            &map,
            &t,
            heap,
            (VICTIM, RECOVERER),
            &mut found,
        )
        .await?
        {
            Some(true) => {
                expected.either.remove(&op.key());
                expected.exact.insert(op.key(), op.after());
            }
            Some(false) => found.push(format!("victim's {op:?} answered false after waking")),
            None => {}
        }
    }

    // The survivor reads every key the victim's subtable held (and the
    // victim's), then inserts next to them.
    let mut wrong_reads = Vec::new();
    for key in base.keys.iter().copied().chain([op.key()]) {
        match survivor.get(key).await {
            Ok(v) if expected.allows(key, v) => {}
            Ok(v) => wrong_reads.push(format!(
                "key {key} as {}, expected {}",
                show(v),
                expected.describe(key)
            )),
            Err(e) => wrong_reads.push(format!("key {key}: get failed: {e}")),
        }
    }
    if let Some(first) = wrong_reads.first() {
        found.push(format!(
            "survivor read {} keys wrong, first {first}",
            wrong_reads.len()
        ));
    }
    // Fresh keys until the survivor has split a subtable itself: a split
    // is the one operation that takes the directory's lock, so it meets
    // (and repairs) a directory lock the victim left behind, which reads
    // and slot writes never look at.
    for key in (SURVIVOR_KEY_FIRST..).take(SURVIVOR_INSERTS_MAX) {
        let value = value_of(key, SURVIVOR);
        match survivor.insert(key, value).await {
            Ok(true) => {
                expected.exact.insert(key, Some(value));
            }
            Ok(false) => {
                found.push(format!("survivor's insert of fresh key {key} answered present"));
                expected.either.insert(key, vec![None, Some(value)]);
            }
            Err(e) => {
                found.push(format!("survivor's insert of {key} failed: {e}"));
                expected.either.insert(key, vec![None, Some(value)]);
                break;
            }
        }
        if survivor.stats().splits > 0 {
            break;
        }
    }
    if survivor.stats().splits == 0 && found.is_empty() {
        return Err(format!(
            "the survivor inserted {SURVIVOR_INSERTS_MAX} keys without a split: subtables are larger than this target assumes"
        ));
    }

    if let Some(task) = victim_task {
        faults.resume();
        match task.await {
            Ok(Ok(true)) => {
                expected.either.remove(&op.key());
                expected.exact.insert(op.key(), op.after());
            }
            Ok(Ok(false)) => found.push(format!("victim's {op:?} answered false after waking")),
            Ok(Err(e)) => found.push(format!("victim failed after waking: {e}")),
            Err(e) => found.push(format!("victim task panicked: {e}")),
        }
    }

    found.extend(check(&map, &t, heap, base.info, &expected, op.key()).await?);
    Ok(found)
}

/// The checker: a fresh client reads the whole table.
async fn check(
    map: &ClusterMap,
    t: &AnyTransport,
    heap: Heap,
    info: TableInfo,
    expected: &Expected,
    victim_key: u64,
) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let (mut checker, _) = client(map, t, heap, info, CHECKER, survivor_plan()).await?;
    // rTX repairs on demand: a lock the survivor did not meet may still be
    // the victim's. The checker meets every lock once, as any later client
    // (or the recovery module) would, then checks (as the btree target does).
    if let Err(e) = checker.repair_expired_locks().await {
        found.push(format!("sweeping expired locks failed: {e}"));
    }
    match checker.check().await {
        Ok(report) => found.extend(report.violations.iter().map(|v| format!("check: {v}"))),
        Err(e) => {
            found.push(format!("check failed: {e}"));
            return Ok(found);
        }
    }
    let entries = match checker.entries().await {
        Ok(entries) => entries,
        Err(e) => {
            found.push(format!("reading the entries failed: {e}"));
            return Ok(found);
        }
    };
    let holds = entries.get(&victim_key).copied();
    if !expected.allows(victim_key, holds) {
        found.push(format!(
            "victim key {victim_key} holds {}, expected {}",
            show(holds),
            expected.describe(victim_key)
        ));
    }
    let wrong: Vec<String> = expected
        .keys()
        .filter(|&key| key != victim_key && !expected.allows(key, entries.get(&key).copied()))
        .map(|key| {
            format!(
                "key {key} holds {}, expected {}",
                show(entries.get(&key).copied()),
                expected.describe(key)
            )
        })
        .collect();
    if let Some(first) = wrong.first() {
        found.push(format!("{} keys missing or wrong, first {first}", wrong.len()));
    }
    let foreign: Vec<String> = entries
        .iter()
        .filter(|(key, _)| !expected.exact.contains_key(key) && !expected.either.contains_key(key))
        .map(|(key, value)| format!("{key} = {value:#x}"))
        .collect();
    if let Some(first) = foreign.first() {
        found.push(format!(
            "{} keys present that nobody wrote, first {first}",
            foreign.len()
        ));
    }
    Ok(found)
}
