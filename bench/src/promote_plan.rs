//! What `kintsugi bench promote` runs: a validated [`PromotePlan`].

use std::path::PathBuf;

/// Most promotions in one run (each rebuilds the region's lock words).
pub const ROUNDS_MAX: u32 = 1000;

/// A validated `bench promote` run.
#[derive(Clone, Debug)]
pub struct PromotePlan {
    /// The `kintsugi` binary that runs the members and memory nodes.
    pub exe: PathBuf,
    /// Promotions, each to the next backup in turn (`--rounds`).
    pub rounds: u32,
    /// Client tasks running YCSB A meanwhile, one owner id each (`--tasks`).
    pub tasks: usize,
    /// Keys each task writes (`--keys`); loaded before the first promotion.
    pub keys_per_task: u64,
    /// Memory nodes, all replicas of the index's region (`--replicas`).
    pub replicas: u8,
    /// The load runs this long between promotions (`--between`).
    pub between: std::time::Duration,
    /// Bytes of the index's region.
    pub region_bytes: u64,
    /// How the clients reach the memory nodes (`--transport`: shm or tcp).
    pub transport: harness::TransportKind,
    /// Print JSON instead of the table (`--json`).
    pub json: bool,
}
