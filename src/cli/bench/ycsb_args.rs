//! `kintsugi bench ycsb` flags, validated into a plan.

use std::time::Duration;

use anyhow::{bail, Context};
use index::btree::Variant;
use workload::{Distribution, Workload};

use crate::cli::units::parse_duration;
use bench::common::dedup;
use bench::ycsb_plan::{IndexArg, Plan, CLIENTS_MAX, KEYS_MAX, ROUNDS_MAX, SLICE_MIN};
use harness::TransportKind;

/// Arguments of `kintsugi bench ycsb`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Each index and variant gets its own memory node and index, bulk-loaded with --keys keys (8-byte keys
and values; B+tree leaves filled to --fill, hash tables sized for the keys and the run's inserts);
then every workload runs on it for --duration per distribution, in the order given (inserts of D and
E stay in the index). Workloads follow the rTX paper's Table 1: A 50/50 read/update, B 90/10, C read
only, D 95/5 read/insert (reads favour the latest inserts), E 95/5 scan(1..100)/insert. Latency is
sampled (one op in 16). The ratio table divides each variant's throughput by optimal's for the same
index, workload and distribution; with dtx (the FORD-style baseline, B+tree only) measured as well, a
second table divides rtx's by dtx's (the paper's claim: rTX 1.2-2x faster than DTX). The clients of one cell share a process, so rtx B+tree clients
share one cache of meta hints, as Sherman's threads share one index cache per compute node; each
cell starts with empty caches and warms them for --warmup.

With --rounds N every cell runs N times: each round loads every variant afresh and runs all its
cells, variants in the given order in odd rounds and reversed in even ones, so that a drift of the
machine's speed falls on both. The ratio table then gives, per cell, the median of the rounds'
ratios (each round's variant against the same round's optimal) and their range. On a shared VM
single cells vary by 10-15%: compare variants over 3 or more rounds, or with --slice.

With --slice S every variant is loaded at once and each cell runs the variants in alternating
slices of S (each thread keeps its clients and their caches from slice to slice; all threads
switch together) until each has run --duration: a drift of the machine's speed slower than a
slice falls on every variant alike. It takes the memory of every variant at once.")]
pub struct YcsbArgs {
    /// Indexes to measure, comma-separated. hash has no range scans: by default it runs every
    /// workload but e, and it refuses an explicit --workload e.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["btree"])]
    index: Vec<IndexArg>,
    /// Variants, comma-separated: optimal, rtx, dtx (dtx: B+tree only).
    #[arg(long, value_delimiter = ',', default_values = ["optimal", "rtx"])]
    variant: Vec<Variant>,
    /// YCSB workloads, comma-separated (a..e) [default: a,b,c,d,e; hash: a,b,c,d].
    #[arg(long, value_delimiter = ',')]
    workload: Vec<Workload>,
    /// Request distributions, comma-separated (uniform, zipf).
    #[arg(long, value_delimiter = ',', default_values = ["uniform", "zipf"])]
    dist: Vec<Distribution>,
    /// Keys loaded before the run.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Leaf fill of the B+tree's bulk load (0.1..=1.0; hash tables ignore it).
    #[arg(long, default_value_t = 0.7)]
    fill: f64,
    /// Client threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Clients (coroutines, each with its own owner id) per thread.
    #[arg(long, default_value_t = 1)]
    coroutines: usize,
    /// How long each workload runs, per distribution and variant.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    duration: Duration,
    /// Untimed run of the same workload before each measurement, to warm
    /// the clients' caches (internal nodes; rtx: meta hints).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Where the memory is.
    #[arg(long, value_enum, default_value = "shm")]
    transport: TransportKind,
    /// Seed of the key set and the op streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Times every cell runs (1..=100); the ratio table reports the median
    /// of the rounds and their range.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Run the variants of each cell in alternating slices of this length
    /// (at least 10ms, at most --duration) instead of one after the other.
    #[arg(long, value_parser = parse_duration)]
    slice: Option<Duration>,
    /// Also write the results as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
}

impl YcsbArgs {
    pub fn validate(self) -> anyhow::Result<Plan> {
        if self.index.is_empty() || self.variant.is_empty() || self.dist.is_empty() {
            bail!("--index, --variant and --dist each need at least one value");
        }
        let indexes = dedup(self.index);
        // Not given: every workload, each index running those it can.
        // Given: exactly those, on every index.
        let workloads = if self.workload.is_empty() {
            Workload::ALL.to_vec()
        } else {
            let workloads = dedup(self.workload);
            if workloads.contains(&Workload::E) && indexes.contains(&IndexArg::Hash) {
                bail!("RACE hashing has no range scans: workload e needs --index btree");
            }
            workloads
        };
        if self.keys == 0 || self.keys > KEYS_MAX {
            bail!("--keys must be between 1 and {KEYS_MAX}");
        }
        if !(0.1..=1.0).contains(&self.fill) {
            bail!("--fill {} is not between 0.1 and 1.0", self.fill);
        }
        let clients = self
            .threads
            .checked_mul(self.coroutines)
            .filter(|&c| c > 0 && c <= CLIENTS_MAX)
            .with_context(|| format!("--threads × --coroutines must be between 1 and {CLIENTS_MAX}"))?;
        let _ = clients;
        if self.duration.is_zero() {
            bail!("--duration must be positive");
        }
        if !(1..=ROUNDS_MAX).contains(&self.rounds) {
            bail!("--rounds must be between 1 and {ROUNDS_MAX}");
        }
        if let Some(slice) = self.slice {
            if slice < SLICE_MIN || slice > self.duration {
                bail!(
                    "--slice must be between {} and --duration ({})",
                    humantime::format_duration(SLICE_MIN),
                    humantime::format_duration(self.duration)
                );
            }
        }
        Ok(Plan {
            indexes,
            variants: dedup(self.variant),
            workloads,
            dists: dedup(self.dist),
            keys: self.keys,
            fill: self.fill,
            threads: self.threads,
            coroutines: self.coroutines,
            duration: self.duration,
            warmup: self.warmup,
            transport: self.transport,
            seed: self.seed,
            rounds: self.rounds,
            slice: self.slice,
            json: self.json,
        })
    }
}
