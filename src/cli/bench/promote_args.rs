//! The command line of `kintsugi bench promote` and its validation into a [`PromotePlan`].

use std::time::Duration;

use anyhow::{bail, Context};
use bench::promote_plan::{PromotePlan, ROUNDS_MAX};

/// Arguments of `kintsugi bench promote`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What it measures (real processes: a local cluster of 3 control members and --replicas memory nodes
on shm or tcp, placed by the control plane, started by this binary in a temporary directory):
  1. A client process's tasks (this one, through the client library) load --keys keys each into an
     rtx B+tree whose region has --replicas replicas, then run YCSB A (half reads, half writes, each
     task on its own keys) for the whole run.
  2. --rounds times, --between apart: a planned promotion of the next backup (what `kintsugi ctl
     region promote` does): the commit, every replica's node fencing the new epoch, the new primary
     rebuilt (lock words, chunk counter), the backups aligned to it, every log finished, the region
     published again. Times are from the promotion's commit to each step, and to the first client
     operation that completed at the published epoch.
  3. At the end, every acknowledged write is read back.

Output: the medians, p99 and max of each step on stdout (or one JSON object with --json, every
round listed). Exits 1 if an acknowledged write was lost or an error reached the application.

Examples:
  kintsugi bench promote
  kintsugi bench promote --rounds 50 --keys 250000 --tasks 4")]
pub struct PromoteArgs {
    /// Promotions.
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// Client tasks running YCSB A, one owner id each.
    #[arg(long, default_value_t = 4)]
    tasks: usize,
    /// Keys each task owns (all loaded first).
    #[arg(long, default_value_t = 25_000)]
    keys: u64,
    /// Replicas of the index's region, each on its own memory node (2 or 3).
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// The load runs this long between promotions.
    #[arg(long, default_value = "200ms", value_parser = crate::cli::units::parse_duration)]
    between: Duration,
    /// How the clients reach the memory nodes: shm (images mapped here) or tcp (loopback).
    #[arg(long, value_enum, default_value = "shm")]
    transport: harness::TransportKind,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

impl PromoteArgs {
    pub fn validate(self) -> anyhow::Result<PromotePlan> {
        super::common::check_rounds_and_load(self.rounds, ROUNDS_MAX, self.tasks, self.keys)?;
        if !(2..=3).contains(&self.replicas) {
            bail!("--replicas must be 2 or 3: a promotion needs a backup");
        }
        // `REGION_BYTES_PER_KEY` per key, at least 64 MiB.
        let keys = self.tasks as u64 * self.keys;
        let region_bytes = (keys * super::common::REGION_BYTES_PER_KEY)
            .max(64 << 20)
            .next_multiple_of(1 << 20);
        Ok(PromotePlan {
            exe: std::env::current_exe().context("cannot find the kintsugi binary")?,
            rounds: self.rounds,
            tasks: self.tasks,
            keys_per_task: self.keys,
            replicas: self.replicas,
            between: self.between,
            region_bytes,
            transport: self.transport.require(
                "bench promote",
                &[harness::TransportKind::Shm, harness::TransportKind::Tcp],
            )?,
            json: self.json,
        })
    }
}
