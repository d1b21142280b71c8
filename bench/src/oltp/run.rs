//! `kintsugi bench smallbank|tatp`: per round and variant, a fresh cluster,
//! the tables loaded, the clients run, the end-of-run check.

use std::time::{Duration, Instant};

use fabric::Batch;
use index::btree::Variant;
use serde::Serialize;
use txn::dtx::DtxClient;
use txn::{LockWord, OwnerId, TxClient, TxConfig};
use workload::smallbank::SmallBankSpec;
use workload::tatp::TatpSpec;

use super::engine::{Engine, OltpTx as _};
use super::plan::{OltpPlan, Which};
use super::report::OltpReport;
use super::smallbank::SmallBank;
use super::tatp::Tatp;
use super::worker::{OltpRun, Worker, WARMUP_TXNS};
use super::{OltpWorkload, Tables};
use crate::cluster::{self, Cluster, FIRST_WORKER, LOADER};
use crate::common::{load_bar, seed_for, Common};
use crate::error::Context;
use crate::threads::{on_threads, runtime};

/// Records the check reads per (read-only) transaction, and lock words per
/// batch: enough to amortise a round trip, few enough for any log or batch.
const RECORDS_PER_CHECK: usize = 16;
/// Lock words read per batch of the lock check.
const LOCKS_PER_BATCH: usize = 256;
/// Records a transaction of these benchmarks writes at most (Amalgamate):
/// for sizing each client's copy-on-write churn in the region.
const WRITE_SET_MAX: usize = 3;

/// What the end-of-run check found.
#[derive(Clone, Debug, Serialize)]
pub struct OltpCheck {
    /// Records read back.
    pub records: u64,
    /// Records whose lock word was still held (no client was running).
    pub locks_left: u64,
    /// Records that are not valid rows.
    pub inconsistent: u64,
    /// The first of them, described.
    pub first_inconsistency: Option<String>,
    /// The conserved quantity after loading.
    pub initial: i64,
    /// `initial` plus the committed transactions' effects.
    pub expected: i64,
    /// What the records add up to.
    pub found: i64,
}

impl OltpCheck {
    /// Whether every record was free, valid, and the quantity conserved.
    pub fn ok(&self) -> bool {
        self.locks_left == 0 && self.inconsistent == 0 && self.expected == self.found
    }

    /// One line for people, naming what `measure` is.
    pub fn describe(&self, measure: &str) -> String {
        let mut parts = Vec::new();
        if self.expected == self.found {
            parts.push(format!(
                "{measure}: {} = loaded {} + committed {}",
                self.found,
                self.initial,
                self.expected.wrapping_sub(self.initial)
            ));
        } else {
            parts.push(format!(
                "FAILED: {measure} is {}, loaded {} + committed {} = {} (lost or phantom updates)",
                self.found,
                self.initial,
                self.expected.wrapping_sub(self.initial),
                self.expected
            ));
        }
        parts.push(if self.locks_left == 0 {
            format!("{} records free", self.records)
        } else {
            format!("FAILED: {} record(s) left locked", self.locks_left)
        });
        parts.push(match &self.first_inconsistency {
            None => "every row valid".to_owned(),
            Some(first) => format!("FAILED: {} invalid row(s), first: {first}", self.inconsistent),
        });
        parts.join("; ")
    }
}

/// One variant's run in one round.
#[derive(Debug)]
pub struct VariantRun {
    /// rtx or dtx.
    pub variant: Variant,
    /// 1-based.
    pub round: usize,
    /// Where the memory was.
    pub origin: String,
    /// Records created.
    pub records: u64,
    /// How long creating them took (one round trip each).
    pub load_time: Duration,
    /// Every client's run added up.
    pub total: OltpRun,
    /// The end-of-run check.
    pub check: OltpCheck,
}

/// A client of either protocol, on a bench cluster.
pub trait Attach: Engine + Sized {
    /// A client as `owner`.
    fn attach(cluster: &Cluster, owner: OwnerId) -> crate::Result<Self>;
}

impl Attach for TxClient {
    fn attach(cluster: &Cluster, owner: OwnerId) -> crate::Result<Self> {
        cluster.client(owner, TxConfig::default(), None)
    }
}

impl Attach for DtxClient {
    fn attach(cluster: &Cluster, owner: OwnerId) -> crate::Result<Self> {
        cluster.dtx_client(owner, TxConfig::default())
    }
}

/// Runs `plan`, progress on stderr; the report says whether every check
/// passed ([`OltpReport::failure`]).
pub fn run(plan: &OltpPlan) -> crate::Result<OltpReport> {
    match plan.which {
        Which::SmallBank { accounts } => {
            let bench = SmallBank {
                spec: SmallBankSpec {
                    accounts,
                    seed: plan.seed,
                },
            };
            run_bench(plan, &bench)
        }
        Which::Tatp { subscribers } => {
            let bench = Tatp {
                spec: TatpSpec {
                    subscribers,
                    seed: plan.seed,
                },
            };
            run_bench(plan, &bench)
        }
    }
}

fn run_bench<W: OltpWorkload>(plan: &OltpPlan, bench: &W) -> crate::Result<OltpReport> {
    let mut runs = Vec::new();
    for round in 1..=plan.rounds {
        for variant in plan.variants_in(round) {
            let run = match variant {
                Variant::Rtx => run_variant::<W, TxClient>(plan, bench, variant, round)?,
                Variant::Dtx => run_variant::<W, DtxClient>(plan, bench, variant, round)?,
                Variant::Optimal => crate::bail!(
                    "{} has no optimal variant: optimal has no transactions (use rtx and dtx)",
                    W::NAME
                ),
            };
            runs.push(run);
        }
    }
    Ok(OltpReport::new::<W>(plan.clone(), bench.units(), runs))
}

fn run_variant<W: OltpWorkload, E: Attach>(
    plan: &OltpPlan,
    bench: &W,
    variant: Variant,
    round: usize,
) -> crate::Result<VariantRun> {
    let prefix = if plan.rounds > 1 {
        format!("round {round}/{}: ", plan.rounds)
    } else {
        String::new()
    };
    let records = bench
        .units()
        .checked_mul(bench.records_per_unit())
        .context("too many records")?;
    let common = Common {
        transport: plan.transport,
        replicas: plan.replicas,
        object_bytes: bench.record_bytes_max(),
        seed: plan.seed,
        json: plan.json,
    };
    let records_usize = usize::try_from(records).context("too many records")?;
    // Each DTX client also takes an undo area at its first locking
    // transaction; the rtx churn estimate covers the rest.
    let undo = (plan.threads as u64 + 1) * 2 * txn::dtx::UNDO_HALF_BYTES;
    let region = cluster::region_bytes(
        records_usize,
        bench.record_bytes_max(),
        plan.threads + 1,
        WRITE_SET_MAX,
    )?
    .checked_add(undo.next_multiple_of(4096))
    .context("the region is too large")?;
    let rt = runtime()?;
    let cluster = rt.block_on(Cluster::new(&common, region, plan.threads))?;

    let loading = Instant::now();
    let bar = load_bar(bench.units(), format!("{prefix}{} {variant}: loading", W::NAME));
    if plan.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let (mut loader, tables, initial) =
        rt.block_on(load::<W, E>(&cluster, bench, |n| bar.set_position(n)))?;
    bar.finish_and_clear();
    let load_time = loading.elapsed();
    eprintln!(
        "bench {}: {prefix}{variant}: loaded {records} records in {:.1} s; {} thread(s) for {} ...",
        W::NAME,
        load_time.as_secs_f64(),
        plan.threads,
        humantime::format_duration(plan.duration)
    );

    let tables = &tables;
    let runs = on_threads(W::NAME, plan.threads, |t, gate| {
        let setup = (|| {
            let rt = runtime()?;
            let client = E::attach(&cluster, FIRST_WORKER + t as u16)?;
            let mut worker = Worker::new(bench, client, tables, seed_for(plan.seed, t as u64));
            rt.block_on(worker.warm_up(WARMUP_TXNS))?;
            Ok::<_, crate::BenchError>((rt, worker))
        })();
        gate.wait();
        let (rt, worker) = setup?;
        let start = Instant::now();
        rt.block_on(worker.run(start, start + plan.duration))
    })?;
    let total = OltpRun::merge(W::KINDS.len(), runs)?;

    let check = rt.block_on(check::<W, E>(
        &cluster,
        bench,
        &mut loader,
        tables,
        initial,
        total.effect,
    ))?;
    Ok(VariantRun {
        variant,
        round,
        origin: cluster.origin.clone(),
        records,
        load_time,
        total,
        check,
    })
}

/// Creates every unit's records as [`LOADER`] (one round trip each), and
/// returns the loader, the tables and the conserved quantity's start.
async fn load<W: OltpWorkload, E: Attach>(
    cluster: &Cluster,
    bench: &W,
    progress: impl Fn(u64),
) -> crate::Result<(E, Tables<E::Rec>, i64)> {
    let mut loader = E::attach(cluster, LOADER)?;
    let per_table = usize::try_from(bench.units()).context("too many units")?;
    let mut tables: Tables<E::Rec> = W::TABLES.iter().map(|_| Vec::with_capacity(per_table)).collect();
    let mut images = Vec::new();
    let mut initial = 0i64;
    for unit in 0..bench.units() {
        images.clear();
        bench.images(unit, &mut images);
        for (table, image) in &images {
            initial = initial.wrapping_add(bench.measure(*table, image));
            let rec = loader
                .create(image)
                .await
                .with_context(|| format!("cannot create a {} row of unit {unit}", W::TABLES[*table]))?;
            tables[*table].push(rec);
        }
        if unit % 1024 == 0 {
            progress(unit);
        }
    }
    loader.quiesce().await.context("the loader cannot settle")?;
    Ok((loader, tables, initial))
}

/// Reads every lock word, then every record (in read-only transactions of
/// `checker`, after every client finished), and checks them.
async fn check<W: OltpWorkload, E: Attach>(
    cluster: &Cluster,
    bench: &W,
    checker: &mut E,
    tables: &Tables<E::Rec>,
    initial: i64,
    effect: i64,
) -> crate::Result<OltpCheck> {
    let mut found = OltpCheck {
        records: 0,
        locks_left: 0,
        inconsistent: 0,
        first_inconsistency: None,
        initial,
        expected: initial.wrapping_add(effect),
        found: 0,
    };
    // Lock words first: a reader that met a lock left behind could repair
    // it (rtx) before the check saw it.
    let mut fabric = cluster.fabric();
    let all: Vec<E::Rec> = tables.iter().flatten().copied().collect();
    let mut batch = Batch::new();
    for chunk in all.chunks(LOCKS_PER_BATCH) {
        batch.clear();
        let handles: Vec<_> = chunk.iter().map(|&r| batch.read(E::lock_addr(r), 8)).collect();
        fabric
            .execute(&mut batch)
            .await
            .context("cannot read the lock words")?;
        for h in handles {
            let bytes = batch.read_result(h).context("cannot read a lock word")?;
            if LockWord::from_raw(fabric::le_word(bytes, 0)).is_locked() {
                found.locks_left += 1;
            }
        }
    }
    for (table, recs) in tables.iter().enumerate() {
        for (c, chunk) in recs.chunks(RECORDS_PER_CHECK).enumerate() {
            let images = checker
                .run(async |tx| {
                    let mut out = Vec::with_capacity(chunk.len());
                    for &r in chunk {
                        out.push(tx.read(r).await?.to_vec());
                    }
                    Ok(out)
                })
                .await
                .with_context(|| format!("cannot read the {} table back", W::TABLES[table]))?;
            for (i, bytes) in images.iter().enumerate() {
                let row = (c * RECORDS_PER_CHECK + i) as u64;
                found.records += 1;
                found.found = found.found.wrapping_add(bench.measure(table, bytes));
                if let Some(why) = bench.inconsistency(table, row, bytes) {
                    found.inconsistent += 1;
                    found.first_inconsistency.get_or_insert(why);
                }
            }
        }
    }
    checker.quiesce().await.context("the checker cannot settle")?;
    Ok(found)
}
