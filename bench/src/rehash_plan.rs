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
    pub variants: Vec<Variant>,
    pub keys: u64,
    pub threads: usize,
    /// Clients of the fill (never 0).
    pub fill_threads: usize,
    pub transport: TransportKind,
    pub config: HashConfig,
    pub fill: FillArg,
    pub phase: Duration,
    pub bucket: Duration,
    /// Kill the grower midway through its first split.
    pub kill_grower: bool,
    /// optimal: entries a split handles per round trip.
    pub optimal_entries_per_round_trip: usize,
    /// Times every variant runs.
    pub rounds: usize,
    pub seed: u64,
    /// Where the JSON goes: a file, or stdout (`-`).
    pub json: Option<JsonTo>,
}

/// `--json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonTo {
    Stdout,
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

    /// Owner ids the run needs: loader, grower, fill clients, inserters.
    pub fn clients(&self) -> usize {
        2 + self.fill_threads + self.threads
    }
}
