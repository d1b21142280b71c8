//! What `kintsugi bench ycsb` runs: a validated [`Plan`], and its limits.

use std::time::Duration;

use harness::TransportKind;
use index::btree::Variant;
use workload::{Distribution, Workload};

/// Indexes `bench ycsb` knows.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexArg {
    /// The Sherman-like B+tree (bulk-loaded to --fill); every workload.
    Btree,
    /// RACE hashing (extendible, lock-free slots); no range scans, so no workload e.
    Hash,
}

impl IndexArg {
    /// The name reports and JSON use.
    pub fn name(self) -> &'static str {
        match self {
            IndexArg::Btree => "btree",
            IndexArg::Hash => "hash",
        }
    }

    /// Whether the index runs range scans (workload e).
    pub fn scans(self) -> bool {
        match self {
            IndexArg::Btree => true,
            IndexArg::Hash => false,
        }
    }
}

impl std::fmt::Display for IndexArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A validated run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Indexes to measure (`--index`), in the order given.
    pub indexes: Vec<IndexArg>,
    /// Variants to compare (`--variant`), in the order given.
    pub variants: Vec<Variant>,
    /// YCSB workloads (`--workload`), or every one when none was given; see
    /// [`Plan::workloads_for`].
    pub workloads: Vec<Workload>,
    /// Request distributions (`--dist`).
    pub dists: Vec<Distribution>,
    /// Keys bulk-loaded before the run (`--keys`).
    pub keys: u64,
    /// Leaf fill of the B+tree's bulk load (`--fill`, 0.1 to 1.0); hash tables
    /// ignore it.
    pub fill: f64,
    /// Client threads (`--threads`).
    pub threads: usize,
    /// Clients per thread (`--coroutines`), each with its own owner id.
    pub coroutines: usize,
    /// How long each workload runs, per distribution and variant
    /// (`--duration`).
    pub duration: Duration,
    /// Untimed run of the same workload before each measurement, to warm the
    /// clients' caches (`--warmup`).
    pub warmup: Duration,
    /// Where the memory is (`--transport`).
    pub transport: TransportKind,
    /// Seed of the key set and the op streams (`--seed`).
    pub seed: u64,
    /// Times every cell runs (`--rounds`); the ratio table gives the rounds'
    /// median and range.
    pub rounds: usize,
    /// Run the variants of each cell in alternating slices of this length
    /// (`--slice`) instead of one after the other.
    pub slice: Option<Duration>,
    /// Also write the results as a JSON array to this file (`--json`).
    pub json: Option<std::path::PathBuf>,
}

/// Most clients of one run: each needs an owner id and a log slot.
pub const CLIENTS_MAX: usize = 4096;

/// Most keys: 100M keys take about 4 GiB of nodes; far more would not fit
/// this machine class, and the generator's key indices are 48-bit anyway.
pub const KEYS_MAX: u64 = 1 << 31;

/// Most rounds: enough for a median that one outlier cannot move, few
/// enough that a typo does not book the machine for days.
pub const ROUNDS_MAX: usize = 100;

/// Shortest slice: a client checks its deadline every few ops, and a
/// slice must hold many of those checks to end on time.
pub const SLICE_MIN: Duration = Duration::from_millis(10);

impl Plan {
    /// The workloads `index` runs, in order: those given, or every one it
    /// supports when none was given.
    pub fn workloads_for(&self, index: IndexArg) -> Vec<Workload> {
        self.workloads
            .iter()
            .copied()
            .filter(|&w| index.scans() || w != Workload::E)
            .collect()
    }

    /// The variants in the order round `round` (1-based) runs them: as
    /// given in odd rounds, reversed in even ones.
    pub fn variants_in(&self, round: usize) -> Vec<Variant> {
        let mut v = self.variants.clone();
        if round % 2 == 0 {
            v.reverse();
        }
        v
    }
}
