//! The command line of `kintsugi bench recover` and its validation into a [`RecoverPlan`].

use std::time::Duration;

use anyhow::{bail, Context};
use bench::recover_plan::{RecoverPlan, Victim, ROUNDS_MAX};

/// Arguments of `kintsugi bench recover`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What it measures (real processes: a local cluster of 3 control members, which run the recovery
coordinator on their leader, and --replicas + 1 memory nodes on shm or tcp, started by this binary
in a temporary directory):
  1. A client process's tasks (this one, through the client library) load --keys keys each into an
     rtx B+tree whose region of --region bytes has --replicas replicas, then run YCSB A for the
     whole run. One memory node holds no replica: the spare.
  2. --rounds times, --between apart: kill -9 of the node holding the region's primary or first
     backup (--kill; with --wipe it is started again at once without its image), then, from the kill: the node declared dead (one --lease after its last
     renewal), its replica evicted (a primary's first backup promoted and rebuilt), the region
     serving again, a new replica placed on the spare and allocated, the region copied to it while
     clients write, the copy joined (the region leaves the clients' map for the catch-up), whole
     again. Then the killed node restarts empty (a wiped one runs already) and becomes the next
     round's spare.
  3. At the end, every acknowledged write is read back.

The control plane is read every 1 ms; a phase shorter than a read may be missed (shown as '-').
The copy is timed from the new replica allocated to its join, so its rate is a lower bound.

Output: medians and worst cases (the most for times, the least for rates) per role of the killed
node (or one JSON object with --json, every round listed). Exits 1 if an acknowledged write was
lost or an error reached the application.

Examples:
  kintsugi bench recover                       # 1 GiB region on shm, primary and backup in turn
  kintsugi bench recover --lease 1s --rounds 4
  kintsugi bench recover --region 256MiB --transport tcp --kill backup
  kintsugi bench recover --transport tcp --wipe --tasks 2 --keys 500000   # 1M keys, nodes wiped")]
pub struct RecoverArgs {
    /// Kills, each followed by the restart of the killed node.
    #[arg(long, default_value_t = 6)]
    rounds: u32,
    /// Whose node each round kills.
    #[arg(long, value_enum, default_value = "alternate")]
    kill: Victim,
    /// Wipe the node instead: kill -9 and start it again at once without its image, inside the
    /// detection window (a new tmpfs, a replaced disk). The control plane must tell the empty node
    /// from the one it was by its image id, evict its replica and refill it. tcp only.
    #[arg(long)]
    wipe: bool,
    /// Bytes of the index's region: what a re-replication copies.
    #[arg(long, default_value = "1GiB", value_parser = crate::cli::units::parse_bytes)]
    region: u64,
    /// Replicas of the region, each on its own memory node (2 or 3); one more node is the spare.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Client tasks running YCSB A, one owner id each.
    #[arg(long, default_value_t = 2)]
    tasks: usize,
    /// Keys each task owns (all loaded first).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// The memory nodes' lease: a dead node is declared dead this long after its last renewal.
    #[arg(long, default_value = "100ms", value_parser = crate::cli::units::parse_duration)]
    lease: Duration,
    /// The load runs this long before each kill.
    #[arg(long, default_value = "500ms", value_parser = crate::cli::units::parse_duration)]
    between: Duration,
    /// How the clients reach the memory nodes: shm (images mapped here) or tcp (loopback).
    #[arg(long, value_enum, default_value = "shm")]
    transport: harness::TransportKind,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// The smallest region: room for a loaded tree, and a copy of many chunks.
const REGION_BYTES_MIN: u64 = 16 << 20;

/// The largest region: each memory node offers one and a spare's worth of
/// memory, on this machine's RAM (shm) or address space.
const REGION_BYTES_MAX: u64 = 16 << 30;

impl RecoverArgs {
    pub fn validate(self) -> anyhow::Result<RecoverPlan> {
        super::common::check_rounds_and_load(self.rounds, ROUNDS_MAX, self.tasks, self.keys)?;
        if !(2..=3).contains(&self.replicas) {
            bail!("--replicas must be 2 or 3: a kill must leave a replica");
        }
        if !(REGION_BYTES_MIN..=REGION_BYTES_MAX).contains(&self.region) || self.region % (1 << 20) != 0 {
            bail!(
                "--region must be a whole number of MiB from {} MiB to {} GiB",
                REGION_BYTES_MIN >> 20,
                REGION_BYTES_MAX >> 30
            );
        }
        let keys = self.tasks as u64 * self.keys;
        if keys * super::common::REGION_BYTES_PER_KEY > self.region {
            bail!(
                "{keys} keys do not fit a region of {} MiB: fewer --keys or a larger --region",
                self.region >> 20
            );
        }
        if self.lease < Duration::from_millis(10) || self.lease > Duration::from_secs(60) {
            bail!("--lease must be 10ms to 60s");
        }
        if self.wipe && self.transport != harness::TransportKind::Tcp {
            // A shm client keeps its mapping of the old, unlinked image
            // (`LocalCluster::wipe_memnode`): not a fault a cluster survives.
            bail!("--wipe needs --transport tcp: a shm client keeps mapping a wiped node's old image");
        }
        Ok(RecoverPlan {
            exe: std::env::current_exe().context("cannot find the kintsugi binary")?,
            rounds: self.rounds,
            victim: self.kill,
            wipe: self.wipe,
            region_bytes: self.region,
            replicas: self.replicas,
            tasks: self.tasks,
            keys_per_task: self.keys,
            memnode_lease: self.lease,
            between: self.between,
            transport: self.transport.require(
                "bench recover",
                &[harness::TransportKind::Shm, harness::TransportKind::Tcp],
            )?,
            json: self.json,
        })
    }
}
