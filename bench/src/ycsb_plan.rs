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
    pub indexes: Vec<IndexArg>,
    pub variants: Vec<Variant>,
    pub workloads: Vec<Workload>,
    pub dists: Vec<Distribution>,
    pub keys: u64,
    pub fill: f64,
    pub threads: usize,
    pub coroutines: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub transport: TransportKind,
    pub seed: u64,
    pub rounds: usize,
    pub slice: Option<Duration>,
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
