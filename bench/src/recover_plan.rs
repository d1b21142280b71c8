//! What `kintsugi bench recover` runs: a validated [`RecoverPlan`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// Most kills in one run (each re-replicates the whole region).
pub const ROUNDS_MAX: u32 = 100;

/// Whose memory node each round kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Victim {
    /// The region's primary: a backup is promoted.
    Primary,
    /// Its first backup: it is dropped.
    Backup,
    /// Primary and backup in turn, primary first.
    Alternate,
}

impl Victim {
    /// Whether round `i` (from 0) kills the primary.
    pub fn primary_in_round(self, i: u32) -> bool {
        match self {
            Victim::Primary => true,
            Victim::Backup => false,
            Victim::Alternate => i % 2 == 0,
        }
    }
}

impl RecoverPlan {
    /// What a round does to its node, as the report says it.
    pub fn fault_done(&self) -> &'static str {
        fault_done(self.wipe)
    }
}

/// What a round did to its node (`wiped`: started again at once without
/// its image), as the reports say it.
pub fn fault_done(wiped: bool) -> &'static str {
    if wiped {
        "wiped"
    } else {
        "killed"
    }
}

/// A validated `bench recover` run.
#[derive(Clone, Debug)]
pub struct RecoverPlan {
    /// The `kintsugi` binary that runs the members and memory nodes.
    pub exe: PathBuf,
    /// Kills, each followed by the killed node's restart (`--rounds`).
    pub rounds: u32,
    /// Whose node each round kills (`--kill`).
    pub victim: Victim,
    /// Each round wipes the node rather than only killing it (`--wipe`):
    /// kill -9 and started again at once without its image, inside the
    /// detection window, so the control plane tells the empty node from
    /// the one it was by its image id alone (tcp only).
    pub wipe: bool,
    /// Bytes of the index's region (`--region`): what re-replication copies.
    pub region_bytes: u64,
    /// Replicas of the region; one more memory node is the spare.
    pub replicas: u8,
    /// Client tasks running YCSB A throughout, one owner id each (`--tasks`).
    pub tasks: usize,
    /// Keys each task writes (`--keys`); loaded first.
    pub keys_per_task: u64,
    /// The memory nodes' lease (`--lease`): what detection follows.
    pub memnode_lease: Duration,
    /// The load runs this long before each kill (`--between`).
    pub between: Duration,
    /// How the clients reach the memory nodes (`--transport`: shm or tcp).
    pub transport: harness::TransportKind,
    /// Print JSON instead of the table (`--json`).
    pub json: bool,
}
