//! `kintsugi bench rehash`: per variant, a fresh memory node and a RACE
//! hash table bulk-loaded (and filled until it splits), then one client
//! grows it (every subtable split once) while others insert, and the whole
//! table is checked.
//!
//! Owner ids: [`LOADER`] creates, loads and finally checks the table;
//! `GROWER` grows it; the fill clients follow, then the inserters. Keys
//! are `KeyMap` records: `0..keys` loaded, then one shared counter hands out
//! fresh records to every fill client and inserter, so no key is inserted
//! twice and the expected count is exact.
//!
//! With `--kill-grower` the grower's transport carries an injected crash at
//! the split's midway point (`index::hash::CRASH_SPLIT_MIDWAY`, optimal;
//! `txn::CRASH_AT_COMMIT_POINT`, rtx; `txn::dtx::CRASH_BEFORE_COMMIT`,
//! dtx): from there it issues no verb, as a killed process would, and its
//! locks stay behind. A dtx grower's log is rolled back by a recovery
//! client `--recover-after` the kill (nobody else acts on a DTX lock), as
//! the recovery module does once the dead client's quarantine is over.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::error::Context;
use fabric::{BaseTransport, Client, FaultPlan, Faulty};
use index::hash::layout::{Geometry, KV_BYTES};
use index::hash::{attempts_waiting, HashLoadReport, HashStats, HashTable, TableInfo, CRASH_SPLIT_MIDWAY};
use index::{IndexError, Variant};
use indicatif::{ProgressBar, ProgressStyle};
use txn::{Heap, TxConfig};
use workload::KeyMap;

use crate::common::load_bar;
use crate::format::thousands;
use crate::rehash_plan::{FillArg, Plan, DIR_HEADROOM};
use crate::rehash_report::RehashReport;
use crate::rehash_report::{self, Row};
use crate::threads::{on_threads, runtime};
use harness::{Memory, MemorySpec};

use harness::layout::{CHUNK_BYTES, FIRST_WORKER, LOADER};
/// The owner id that grows the table.
const GROWER: u16 = FIRST_WORKER;
/// The first fill client; the inserters follow the fill clients.
const FIRST_FILLER: u16 = FIRST_WORKER + 1;
// The recoverer of a dtx grower takes the last owner id (`Plan::clients`).
/// Inserts between two updates of the fill's progress bar.
const PROGRESS_EVERY: u64 = 1024;

/// Phases of the timed part, as the inserters count their ops.
const BEFORE: u8 = 0;
const DURING: u8 = 1;
const AFTER: u8 = 2;

/// Runs every variant of `plan` for its rounds, progress on stderr; the
/// report says whether the end-of-run checks passed ([`RehashReport::failure`]).
pub fn run(plan: &Plan) -> crate::Result<RehashReport> {
    let mut rows = Vec::with_capacity(plan.variants.len() * plan.rounds);
    for round in 1..=plan.rounds {
        // Even rounds reverse the order, so that a drift of the machine's
        // speed falls on every variant.
        let mut order = plan.variants.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for variant in order {
            if plan.rounds > 1 {
                eprintln!("bench rehash: round {round} of {}: {variant}", plan.rounds);
            }
            let mut row = run_variant(variant, plan)
                .with_context(|| format!("bench rehash: variant {variant}, round {round}"))?;
            row.round = round;
            rows.push(row);
        }
    }
    Ok(RehashReport { rows })
}

/// One variant: memory, load, fill, the timed grow, the check.
fn run_variant(variant: Variant, plan: &Plan) -> crate::Result<Row> {
    let limit = key_limit(plan);
    let memory = Memory::start(&MemorySpec {
        populate: true,
        ..MemorySpec::single(plan.transport, region_bytes(plan, limit))
    })?;
    let rt = runtime()?;
    let (mut loader, load) = rt.block_on(load(&memory, variant, plan))?;
    if load.depth + DIR_HEADROOM > plan.config.dir_depth {
        crate::bail!(
            "the bulk load built subtables of depth {}, which leaves no room for a split and the grow under \
             directory depth {}: give a deeper --dir-depth",
            load.depth,
            plan.config.dir_depth
        );
    }
    let heap = loader.heap();
    let info = loader.info();
    let keys = KeyMap::new(plan.seed);
    let next = AtomicU64::new(plan.keys);
    let table = Table {
        memory: &memory,
        heap,
        info,
        plan,
        keys,
        next: &next,
        limit,
    };

    let fill = match plan.fill {
        FillArg::Split => fill(&table)?,
        FillArg::Load => Fill::default(),
    };
    let subtables = load.subtables + fill.splits;
    let filled = plan.keys + fill.inserted;
    let load_factor = filled as f64 / (subtables * plan.slots_per_subtable()) as f64;
    let with = if plan.threads == 0 {
        "alone".to_owned()
    } else {
        format!(
            "with {} inserting client(s), {} before and after",
            plan.threads,
            humantime::format_duration(plan.phase)
        )
    };
    eprintln!(
        "bench rehash: {variant}: {} keys in {} subtables ({:.1}% of the slots); growing {with} ...",
        thousands(filled as f64),
        thousands(subtables as f64),
        load_factor * 100.0,
    );

    let timed = grow_while_inserting(&table)?;
    match &timed.grow.killed {
        None => eprintln!(
            "bench rehash: {variant}: grew in {:.1} ms ({} splits); checking the table ...",
            timed.grow.time().as_secs_f64() * 1e3,
            timed.grow.splits
        ),
        Some(why) => eprintln!(
            "bench rehash: {variant}: the grower was killed {:.1} ms into the grow ({why}); {} of {} inserter(s) \
             gave up blocked, {} repair(s); checking the table ...",
            timed.grow.time().as_secs_f64() * 1e3,
            timed.inserts.blocked,
            plan.threads,
            timed.inserts.repairs,
        ),
    }
    let mut sweep_repairs = 0;
    if plan.kill_grower {
        let repaired = rt
            .block_on(loader.repair_expired_locks())
            .context("cannot repair the dead grower's locks")?;
        eprintln!("bench rehash: {variant}: the sweep before the check repaired {repaired} expired lock(s)");
        sweep_repairs = repaired as u64;
    }
    let check = rt.block_on(loader.check()).context("cannot check the table")?;
    let expected = filled + timed.inserts.inserted;
    let mut row = Row::new(
        variant,
        plan,
        &rehash_report::Loaded {
            load,
            fill_inserted: fill.inserted,
            fill_splits: fill.splits,
            subtables,
            load_factor,
            limit_reached: fill.limit_reached || timed.inserts.limit_reached,
            duplicates: fill.duplicates + timed.inserts.duplicates,
        },
        &timed.grow,
        &timed.inserts,
        &check,
        expected,
    );
    row.sweep_repairs = sweep_repairs;
    Ok(row)
}

/// Records the run may hold in all: about a quarter of what the directory's
/// subtables can name, so that inserts never take a subtable past the
/// directory's depth; at least the loaded keys.
fn key_limit(plan: &Plan) -> u64 {
    let capacity = plan.slots_per_subtable() << plan.config.dir_depth;
    (capacity / 4).max(plan.keys)
}

/// Region bytes: every subtable the directory can name twice (an rtx split
/// writes both halves out of place; a subtable takes whole chunks), a few
/// directory copies per client (rtx rewrites it out of place), a KV block
/// per key the run may hold, chunks for every client, and slack. Memory is
/// only committed where it is touched, so this costs address space.
fn region_bytes(plan: &Plan, limit: u64) -> u64 {
    let g = Geometry {
        groups: plan.config.groups,
    };
    let subtable = g.subtable_bytes().next_multiple_of(CHUNK_BYTES) + txn::META_BYTES;
    let subtables = 2 * (subtable << plan.config.dir_depth);
    let clients = plan.clients() as u64;
    let dir = (8u64 << plan.config.dir_depth).next_multiple_of(CHUNK_BYTES);
    let dirs = 4 * (clients + 1) * dir;
    let kvs = limit * u64::from(KV_BYTES) * 11 / 10;
    let bytes = subtables + dirs + kvs + clients * 64 * CHUNK_BYTES + (256 << 20);
    bytes.next_multiple_of(4096)
}

/// Formats the heap, creates the table and bulk-loads `plan.keys` keys,
/// with a progress bar. Returns the loader's client of the table.
async fn load(memory: &Memory, variant: Variant, plan: &Plan) -> crate::Result<(HashTable, HashLoadReport)> {
    let mut fabric = memory.client().await?;
    let owner_slots = u16::try_from(plan.clients() + 1)
        .ok()
        .filter(|&s| s <= txn::word::OWNER_MAX)
        .context("too many clients for the owner ids")?;
    let heap = harness::layout::format_heap(&mut fabric, owner_slots)
        .await
        .context("cannot format the heap")?;
    let map = KeyMap::new(plan.seed);
    let entries: Vec<(u64, u64)> = map.keys(0..plan.keys).map(|k| (k, map.load_value(k))).collect();
    let bar = load_bar(plan.keys, format!("loading {variant}"));
    let started = Instant::now();
    let mut table = HashTable::create(fabric, heap, variant, LOADER, plan.config)
        .await
        .context("cannot create the table")?;
    let report = table
        .bulk_load(&entries, |n| bar.set_position(n))
        .await
        .context("cannot bulk-load the table")?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "bench rehash: {variant}: loaded {} keys in {secs:.1} s: {} subtables of depth {} (directory depth {}), \
         {:.1}% of the slots, {:.1} DM bytes per key",
        thousands(report.keys as f64),
        report.subtables,
        report.depth,
        plan.config.dir_depth,
        report.load_factor * 100.0,
        report.bytes_per_key,
    );
    if report.keys != plan.keys {
        crate::bail!("loaded {} keys of {}", report.keys, plan.keys);
    }
    Ok((table, report))
}

/// What the fill inserted.
#[derive(Clone, Copy, Debug, Default)]
struct Fill {
    inserted: u64,
    duplicates: u64,
    splits: u64,
    limit_reached: bool,
}

/// The loaded table the fill and the timed part work on.
#[derive(Clone, Copy)]
struct Table<'a> {
    memory: &'a Memory,
    heap: Heap,
    info: TableInfo,
    plan: &'a Plan,
    keys: KeyMap,
    /// The next fresh key index, shared by every inserting client.
    next: &'a AtomicU64,
    /// Key indices end here (the run's key limit).
    limit: u64,
}

/// Inserts fresh keys on `plan.fill_threads` clients until one of them
/// splits a subtable (or the key limit is reached).
fn fill(t: &Table<'_>) -> crate::Result<Fill> {
    let Table {
        memory,
        heap,
        info,
        plan,
        keys,
        next,
        limit,
    } = *t;
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{prefix} {spinner} {pos} keys inserted ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_prefix(format!("filling {} until a subtable splits", info.variant));
    bar.enable_steady_tick(Duration::from_millis(200));
    let split_seen = AtomicBool::new(false);
    let limit_hit = AtomicBool::new(false);
    let started = Instant::now();
    let fills = on_threads("rehash-fill", plan.fill_threads, |t, gate| {
        let setup = (|| {
            let rt = runtime()?;
            let owner = FIRST_FILLER + t as u16;
            let table = rt.block_on(attach(memory, heap, owner, info, plan))?;
            Ok::<_, crate::BenchError>((rt, table))
        })();
        gate.wait();
        let (rt, mut table) = setup?;
        rt.block_on(async {
            let mut out = Fill::default();
            while !split_seen.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= limit {
                    limit_hit.store(true, Ordering::Relaxed);
                    break;
                }
                let key = keys.key(i);
                if table.insert(key, keys.load_value(key)).await? {
                    out.inserted += 1;
                } else {
                    out.duplicates += 1;
                }
                if table.stats().splits > 0 {
                    split_seen.store(true, Ordering::Relaxed);
                }
                if (out.inserted + out.duplicates) % PROGRESS_EVERY == 0 {
                    bar.inc(PROGRESS_EVERY);
                }
            }
            out.splits = table.stats().splits;
            Ok::<_, crate::BenchError>(out)
        })
    })?;
    bar.finish_and_clear();
    let mut total = Fill::default();
    for f in fills {
        total.inserted += f.inserted;
        total.duplicates += f.duplicates;
        total.splits += f.splits;
    }
    total.limit_reached = limit_hit.load(Ordering::Relaxed);
    eprintln!(
        "bench rehash: {}: filled with {} more keys in {:.1} s until {} split(s){}",
        info.variant,
        thousands(total.inserted as f64),
        started.elapsed().as_secs_f64(),
        total.splits,
        if total.limit_reached {
            " (stopped at the key limit before any split)"
        } else {
            ""
        }
    );
    Ok(total)
}

/// The grower's measurements.
#[derive(Clone, Debug, Default)]
pub struct Grow {
    /// When the grow started and ended, from when the inserters started.
    pub start: Duration,
    /// When the grow ended (or the grower died), from when the inserters
    /// started.
    pub end: Duration,
    /// When the inserters were told to stop.
    pub stop: Duration,
    /// Splits the grower made.
    pub splits: u64,
    /// The grower's verbs during the grow.
    pub fabric: fabric::Stats,
    /// The grower's table counters after the grow.
    pub stats: HashStats,
    /// rtx: the grower's aborted attempts and repairs.
    pub aborts: u64,
    /// rtx: the grower's repairs of other owners' transactions.
    pub repairs: u64,
    /// Why the grower died, when it was killed (`--kill-grower`); `end` is
    /// then when it died.
    pub killed: Option<String>,
    /// dtx: when recovery rolled the dead grower's log, from when the
    /// inserters started.
    pub rolled: Option<Duration>,
}

impl Grow {
    /// Wall time of the grow, from its start to its end (or the grower's
    /// death).
    pub fn time(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }
}

/// The inserters' measurements, summed.
#[derive(Clone, Debug, Default)]
pub struct Inserts {
    /// Completed inserts.
    pub inserted: u64,
    /// Inserts of a fresh key that found it present (a bug if any).
    pub duplicates: u64,
    /// Completed per phase (before, during, after the grow).
    pub per_phase: [u64; 3],
    /// Completed per timeline bucket, from when the inserters started.
    pub timeline: Vec<u64>,
    /// Splits the inserters made (a full subtable an insert met).
    pub splits: u64,
    /// Writes whose CAS overlapped a split and had to be settled after it.
    pub settled: u64,
    /// Whether an inserter stopped at the key limit.
    pub limit_reached: bool,
    /// Inserters that gave up on a subtable a dead grower left locked.
    pub blocked: u64,
    /// rtx: locks of others the inserters repaired.
    pub repairs: u64,
}

impl Inserts {
    fn merge(&mut self, o: &Inserts) {
        self.inserted += o.inserted;
        self.duplicates += o.duplicates;
        for (a, b) in self.per_phase.iter_mut().zip(o.per_phase) {
            *a += b;
        }
        if self.timeline.len() < o.timeline.len() {
            self.timeline.resize(o.timeline.len(), 0);
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            *a += b;
        }
        self.splits += o.splits;
        self.settled += o.settled;
        self.limit_reached |= o.limit_reached;
        self.blocked += o.blocked;
        self.repairs += o.repairs;
    }
}

/// What the timed part measured.
struct Timed {
    grow: Grow,
    inserts: Inserts,
}

/// What one thread of the timed part returns.
enum Role {
    Grower(Grow),
    Inserter(Inserts),
}

/// State the timed part's threads share.
struct Shared {
    /// The phase the grow is in.
    phase: AtomicU8,
    /// Set when the inserters must stop.
    stop: AtomicBool,
    /// When the inserters started: the timeline's origin.
    t0: OnceLock<Instant>,
}

/// Sets `stop` when dropped, so that inserters end whatever the grower did.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Thread 0 grows the table; threads 1.. insert fresh keys until it says stop.
fn grow_while_inserting(t: &Table<'_>) -> crate::Result<Timed> {
    let Table {
        memory,
        heap,
        info,
        plan,
        keys,
        next,
        limit,
    } = *t;
    let shared = Shared {
        phase: AtomicU8::new(BEFORE),
        stop: AtomicBool::new(false),
        t0: OnceLock::new(),
    };
    // Without inserters there is nothing to watch before and after.
    let phase = if plan.threads == 0 {
        Duration::ZERO
    } else {
        plan.phase
    };
    let first_inserter = FIRST_FILLER + plan.fill_threads as u16;
    let recoverer = first_inserter + plan.threads as u16;
    let roles = on_threads("rehash", 1 + plan.threads, |t, gate| {
        let owner = if t == 0 {
            GROWER
        } else {
            first_inserter + (t - 1) as u16
        };
        let kill = t == 0 && plan.kill_grower;
        let setup = (|| {
            let rt = runtime()?;
            let (table, faults) = rt.block_on(attach_faulty(memory, heap, owner, info, plan, kill))?;
            // Connected ahead: on shm a client maps the whole image as it
            // attaches, which takes a while.
            let recovery = if kill && info.variant == Variant::Dtx {
                Some(rt.block_on(Recovery::connect(memory, heap, recoverer, plan.recover_after))?)
            } else {
                None
            };
            Ok::<_, crate::BenchError>((rt, table, faults, recovery))
        })();
        gate.wait();
        let t0 = *shared.t0.get_or_init(Instant::now);
        if t == 0 {
            // However the grower ends, the inserters stop.
            let _stop = StopOnDrop(&shared.stop);
            let (rt, table, faults, recovery) = setup?;
            let grower = Grower {
                shared: &shared,
                t0,
                phase,
                kill,
            };
            return grower.run(&rt, table, faults, recovery).map(Role::Grower);
        }
        let (rt, table, _, _) = setup?;
        let inserter = Inserter {
            shared: &shared,
            t0,
            plan,
            owner,
            keys,
            next,
            limit,
        };
        inserter.run(&rt, table).map(Role::Inserter)
    })?;
    let mut grow = None;
    let mut inserts = Inserts::default();
    for role in roles {
        match role {
            Role::Grower(g) => grow = Some(g),
            Role::Inserter(i) => inserts.merge(&i),
        }
    }
    let grow = grow.context("the grower returned nothing")?;
    Ok(Timed { grow, inserts })
}

/// The grower's part: a quiet phase, the grow, another quiet phase.
struct Grower<'a> {
    shared: &'a Shared,
    t0: Instant,
    phase: Duration,
    /// Killed midway through its first split.
    kill: bool,
}

/// The recovery of a killed dtx grower: a DTX client of its own rolls the
/// grower's log back `after` the kill.
struct Recovery {
    dtx: txn::dtx::DtxClient,
    after: Duration,
}

impl Recovery {
    /// The recovery client, as `owner`.
    async fn connect(memory: &Memory, heap: Heap, owner: u16, after: Duration) -> crate::Result<Recovery> {
        let fabric = memory.client().await?;
        let dtx = txn::dtx::DtxClient::new(fabric, heap, owner, TxConfig::default())
            .with_context(|| format!("cannot recover as owner {owner}"))?;
        Ok(Recovery { dtx, after })
    }

    /// Rolls the dead grower's DTX log.
    async fn roll(&mut self) -> crate::Result<txn::dtx::Finished> {
        let finished = self
            .dtx
            .finish_owner_log(GROWER)
            .await
            .context("cannot roll the dead grower's DTX log")?;
        self.dtx.release_pending().await.context("cannot release")?;
        Ok(finished)
    }
}

impl Grower<'_> {
    fn run(
        &self,
        rt: &tokio::runtime::Runtime,
        mut table: HashTable,
        faults: Option<Arc<Faulty<BaseTransport>>>,
        mut recovery: Option<Recovery>,
    ) -> crate::Result<Grow> {
        std::thread::sleep(self.phase);
        let fabric_before = table.fabric().stats();
        let start = self.t0.elapsed();
        self.shared.phase.store(DURING, Ordering::Relaxed);
        let grown = rt.block_on(table.grow());
        let end = self.t0.elapsed();
        self.shared.phase.store(AFTER, Ordering::Relaxed);
        let killed = faults.as_ref().and_then(|f| f.crashed());
        let splits = match (grown, &killed) {
            (_, Some(_)) => table.stats().splits,
            (Ok(_), None) if self.kill => {
                crate::bail!("the grower grew the table without reaching its kill point")
            }
            (Ok(splits), None) => splits,
            (Err(e), None) => return Err(e).context("the grow failed"),
        };
        let fabric = table.fabric().stats() - fabric_before;
        let mut rolled = None;
        if let (Some(r), Some(_)) = (recovery.as_mut(), &killed) {
            std::thread::sleep(r.after.saturating_sub(self.t0.elapsed().saturating_sub(end)));
            let finished = rt.block_on(r.roll())?;
            let at = self.t0.elapsed();
            rolled = Some(at);
            eprintln!(
                "bench rehash: dtx: recovery rolled the dead grower's log {:.0} ms after the kill ({} record(s) \
                 rolled back, {} lock(s) freed)",
                at.saturating_sub(end).as_secs_f64() * 1e3,
                finished.rolled_back,
                finished.released
            );
        }
        std::thread::sleep(self.phase);
        let stop = self.t0.elapsed();
        self.shared.stop.store(true, Ordering::Relaxed);
        let tx = table.tx_stats().unwrap_or_default();
        Ok(Grow {
            start,
            end,
            stop,
            splits,
            fabric,
            stats: table.stats(),
            aborts: tx.aborts,
            repairs: tx.repairs,
            killed,
            rolled,
        })
    }
}

/// An inserter's part: fresh keys until the grower says stop.
struct Inserter<'a> {
    shared: &'a Shared,
    t0: Instant,
    plan: &'a Plan,
    owner: u16,
    keys: KeyMap,
    /// The next key index, shared by every inserter.
    next: &'a AtomicU64,
    /// Key indices end here (the run's key limit).
    limit: u64,
}

impl Inserter<'_> {
    fn run(&self, rt: &tokio::runtime::Runtime, mut table: HashTable) -> crate::Result<Inserts> {
        if self.plan.kill_grower {
            // Give up on a subtable the dead grower left locked (optimal)
            // within the phase after the kill, so the run ends; dtx waits
            // for the recovery first.
            let wait = match table.variant() {
                Variant::Dtx => self.plan.recover_after + self.plan.phase,
                Variant::Optimal | Variant::Rtx => self.plan.phase,
            };
            table.set_attempts_max(attempts_waiting(wait));
        }
        let mut out = Inserts::default();
        rt.block_on(self.insert_until_stopped(&mut table, &mut out))?;
        let stats = table.stats();
        out.splits = stats.splits;
        out.settled = stats.settled;
        out.repairs = table.tx_stats().map_or(0, |t| t.repairs);
        Ok(out)
    }

    async fn insert_until_stopped(&self, table: &mut HashTable, out: &mut Inserts) -> crate::Result<()> {
        let bucket_ns = self.plan.bucket.as_nanos().max(1);
        while !self.shared.stop.load(Ordering::Relaxed) {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.limit {
                out.limit_reached = true;
                break;
            }
            let key = self.keys.key(i);
            let inserted = match table.insert(key, self.keys.load_value(key)).await {
                Err(IndexError::Blocked(sub)) if self.plan.kill_grower => {
                    tracing::info!(
                        owner = self.owner,
                        sub = format_args!("{sub:#x}"),
                        "inserter gave up on a locked subtable"
                    );
                    out.blocked += 1;
                    break;
                }
                r => r.with_context(|| format!("inserter {}: insert of key {key:#x}", self.owner))?,
            };
            if inserted {
                out.inserted += 1;
            } else {
                out.duplicates += 1;
            }
            let b = (self.t0.elapsed().as_nanos() / bucket_ns) as usize;
            if out.timeline.len() <= b {
                out.timeline.resize(b + 1, 0);
            }
            out.timeline[b] += 1;
            out.per_phase[usize::from(self.shared.phase.load(Ordering::Relaxed))] += 1;
        }
        Ok(())
    }
}

/// A client of the table as `owner`, on the calling thread's runtime.
async fn attach(
    memory: &Memory,
    heap: Heap,
    owner: u16,
    info: TableInfo,
    plan: &Plan,
) -> crate::Result<HashTable> {
    Ok(attach_faulty(memory, heap, owner, info, plan, false).await?.0)
}

/// [`attach`], and with `kill` a client that dies midway through its first
/// split; returns the handle that tells whether it died.
async fn attach_faulty(
    memory: &Memory,
    heap: Heap,
    owner: u16,
    info: TableInfo,
    plan: &Plan,
    kill: bool,
) -> crate::Result<(HashTable, Option<Arc<Faulty<BaseTransport>>>)> {
    let mut fabric = memory.client().await?;
    let mut faults = None;
    if kill {
        let plan = FaultPlan {
            crash_points: vec![
                CRASH_SPLIT_MIDWAY.to_owned(),
                txn::CRASH_AT_COMMIT_POINT.to_owned(),
                txn::dtx::CRASH_BEFORE_COMMIT.to_owned(),
            ],
            ..FaultPlan::default()
        };
        let (transport, handle) = fabric.transport().clone().with_faults(plan);
        fabric = Client::new(fabric.map().clone(), transport);
        faults = Some(handle);
    }
    let mut table = HashTable::attach(fabric, heap, owner, TxConfig::default(), info)
        .await
        .with_context(|| format!("cannot attach to the table as owner {owner}"))?;
    table.set_split_entries_per_round_trip(plan.optimal_entries_per_round_trip);
    Ok((table, faults))
}
