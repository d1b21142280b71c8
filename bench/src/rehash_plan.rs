//! What `kintsugi bench rehash` runs: a validated [`Plan`], and its limits.

use std::path::PathBuf;
use std::time::Duration;

use harness::TransportKind;
use index::hash::layout::Geometry;
use index::hash::HashConfig;
use index::Variant;

/// How full the table is when the grow starts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillArg {
    /// Bulk-load --keys keys, then insert fresh keys until the first subtable splits: a table that
    /// cannot take more keys without growing.
    Split,
    /// Bulk-load --keys keys only: 30-60% of the slots, depending on how the key count rounds to
    /// a power of two of subtables.
    Load,
}

impl FillArg {
    /// The flag's value, as reports and JSON print it.
    pub fn name(self) -> &'static str {
        match self {
            FillArg::Split => "split",
            FillArg::Load => "load",
        }
    }
}

/// A validated run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Variants to grow a table with (`--variant`), in the order given.
    pub variants: Vec<Variant>,
    /// Keys bulk-loaded before the fill and the grow (`--keys`).
    pub keys: u64,
    /// Client threads inserting fresh keys during the timed part (`--threads`;
    /// 0: the grow runs alone).
    pub threads: usize,
    /// Clients of the fill (never 0).
    pub fill_threads: usize,
    /// Where the memory is (`--transport`).
    pub transport: TransportKind,
    /// The table's shape: bucket groups per subtable (`--groups`) and directory
    /// depth (`--dir-depth`, or room for the grow above the bulk load's depth).
    pub config: HashConfig,
    /// How full the table is when the grow starts (`--fill`).
    pub fill: FillArg,
    /// How long the inserters run before the grow starts, and again after it
    /// ends (`--phase`).
    pub phase: Duration,
    /// Width of a throughput-timeline bucket (`--bucket`).
    pub bucket: Duration,
    /// Kill the grower midway through its first split.
    pub kill_grower: bool,
    /// dtx with `kill_grower`: how long after the kill recovery rolls the
    /// dead grower's log (`--recover-after`), standing for the recovery
    /// module's wait (the client's expiry, then its quarantine).
    pub recover_after: Duration,
    /// optimal: entries a split handles per round trip.
    pub optimal_entries_per_round_trip: usize,
    /// Times every variant runs.
    pub rounds: usize,
    /// Seed of the key set (`--seed`).
    pub seed: u64,
    /// Where the JSON goes: a file, or stdout (`-`).
    pub json: Option<JsonTo>,
}

/// `--json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonTo {
    /// `--json -`: print the JSON array on stdout instead of the table.
    Stdout,
    /// `--json FILE`: write the JSON array to this file, and print the table.
    File(PathBuf),
}

/// Most keys: the generator's indices and the region's offsets stay far
/// below their limits, and 2^31 keys take ~50 GiB of KV blocks alone.
pub const KEYS_MAX: u64 = 1 << 31;

/// Most inserting threads (each an owner id).
pub const THREADS_MAX: usize = 256;

/// Directory levels kept above the bulk load's depth: one for a fill or
/// insert split before the grow, one for the grow. Inserts after it stay
/// below the run's key limit (`rehash_run::key_limit`), which keeps the
/// deepest subtables far from splitting again.
pub const DIR_HEADROOM: u8 = 2;

impl Plan {
    /// Slots of one subtable.
    pub fn slots_per_subtable(&self) -> u64 {
        Geometry {
            groups: self.config.groups,
        }
        .slots()
    }

    /// Owner ids the run needs: loader, grower, fill clients, inserters,
    /// and the recoverer of a killed dtx grower.
    pub fn clients(&self) -> usize {
        3 + self.fill_threads + self.threads
    }
}
