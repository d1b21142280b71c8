//! `kintsugi bench rehash` flags, validated into a plan.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use fabric::VERBS_PER_BATCH_MAX;
use index::hash::layout::{Geometry, DIR_DEPTH_MAX, GROUPS_MAX};
use index::hash::{load_depth, HashConfig, LOAD_FILL, SPLIT_ENTRIES_PER_ROUND_TRIP_DEFAULT};
use index::Variant;

use crate::cli::units::parse_duration;
use bench::common::{cores, dedup};
use bench::rehash_plan::{FillArg, JsonTo, Plan, DIR_HEADROOM, KEYS_MAX, THREADS_MAX};
use bench::ycsb_plan::ROUNDS_MAX;
use harness::TransportKind;

/// Arguments of `kintsugi bench rehash`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What it measures (the rTX paper's rehash experiment):
  How long growing a full RACE hash table takes, per variant: optimal (the original RACE resize:
  lock every bucket header of a subtable, then one entry at a time READ its key and move it with
  two CASes, each verb a round trip; unlock) against rtx (each subtable split is one rTX: read
  the subtable and every key in full batches, write both halves out of place, rewrite the
  directory, install with CASes). And what clients inserting meanwhile see.
  --optimal-entries-per-round-trip N batches optimal's per-entry verbs N to a round trip: a
  stronger baseline than the paper's, safe because the split holds every header locked.

Per variant:
  1. A fresh memory node and a table of --groups bucket groups per subtable, with a directory
     deep enough for the table after the grow (bulk-load depth + 2, at least 12, or --dir-depth).
     On shm, every page of the image is allocated up front and mapped by every client as it
     attaches (as RDMA registration pins a memory node's memory), so that no verb waits for a
     page fault; this takes about a second per GiB of image before the load.
  2. Bulk load of --keys keys (~60% of the slots at most); with --fill split (the default),
     then fresh keys inserted by several clients until the first subtable splits: the table is
     full. The load factor reached is reported.
  3. The timed part: --threads client threads insert fresh keys continuously while one more
     client, the grower, waits --phase, then grows the table (HashTable::grow: splits every
     subtable once, doubling it), then waits --phase again. The grower's wall time, splits and
     verbs are the rehash cost; the inserters' completed ops per --bucket form the throughput
     timeline, and their rates before, during and after the grow are reported, along with the
     longest run of buckets in which no insert completed (stall).
  4. The whole table is checked: no structural violation, and exactly the keys loaded and
     inserted. A failed check fails the command (after the report).
  The last line is optimal's grow time over rtx's; with --rounds N, the median of the rounds'
  ratios (each round's optimal over the same round's rtx) and their range.

With --kill-grower (the paper's failed-rehash experiment, its Figure 15):
  The grower crashes midway through its first split, as a killed process would (an injected
  fault: it issues no verb after that point). optimal: after copying the moving entries into
  the new subtable and writing the directory, every bucket header of both subtables locked.
  rtx: at the split's commit point (log DOING), nothing installed. The inserters carry on for
  --phase; one that meets the dead grower's locks waits (optimal: up to --phase, then it gives
  up and counts as blocked) or repairs them once the lease expires (rtx). Reported: the time
  from the kill to normal insert throughput (the first 10-bucket window after the kill with
  no bucket under 25% and a mean of at least 80% of the rate before the kill), blocked
  inserters, repairs. Before the check, a sweep repairs expired locks (rtx). optimal's check
  is expected to fail (the dead splitter's locks stay): it is reported, and does not fail the
  command; rtx's must pass.
  dtx: the grower dies at its first split's commit (both locks held, log LOCKING, nothing
  written in place). Nobody but recovery acts on a DTX lock: inserters that meet the subtable's
  lock wait; --recover-after later (default 1s: about what the recovery module waits, the dead
  client's expiry and then its quarantine, with a 1 s client lease), a recovery client rolls the
  grower's log back, and they carry on. The timed part after the kill is --recover-after plus
  --phase; the report says when the log was rolled. dtx's check must pass.

Output:
  A table on stdout (or, with --json -, the JSON array instead). --json FILE writes one object
  per variant and round (fields round, optimal_entries_per_round_trip, ...) with the grow's cost, the phase rates and the timeline as [ms, ops] pairs (ms:
  the bucket's start, from when the inserters started).

Examples:
  kintsugi bench rehash
  kintsugi bench rehash --keys 10000000 --threads 2 --json rehash.json
  kintsugi bench rehash --variant rtx --keys 100000 --fill load --threads 0
  kintsugi bench rehash --keys 1000000 --threads 0 --optimal-entries-per-round-trip 4096
  kintsugi bench rehash --keys 1000000 --rounds 5
  kintsugi bench rehash --kill-grower --phase 300ms")]
pub struct RehashArgs {
    /// Variants, comma-separated (optimal, rtx, dtx).
    #[arg(long, value_delimiter = ',', default_values = ["optimal", "rtx"])]
    variant: Vec<Variant>,
    /// Keys bulk-loaded before the fill and the grow.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Client threads inserting fresh keys during the timed part (0: the grow runs alone)
    /// [default: 2, or 1 on machines with fewer than 3 cores: one core stays for the grower].
    #[arg(long, value_name = "T")]
    threads: Option<usize>,
    /// Where the memory is.
    #[arg(long, value_enum, default_value = "shm")]
    transport: TransportKind,
    /// Bucket groups per subtable (1..=1024; 512 = 96 KiB and 10,752 slots per subtable).
    #[arg(long, value_name = "G", default_value_t = 512)]
    groups: u32,
    /// Directory depth (at most 2^D subtables) [default: the bulk load's depth + 2, at least 12].
    #[arg(long, value_name = "D")]
    dir_depth: Option<u8>,
    /// How full the table is when the grow starts.
    #[arg(long, value_enum, default_value = "split")]
    fill: FillArg,
    /// How long the inserters run before the grow starts, and again after it ends.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "500ms")]
    phase: Duration,
    /// Width of a throughput-timeline bucket (at least 100us).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1ms")]
    bucket: Duration,
    /// Kill the grower midway through its first split and measure how long the inserters take to
    /// get back to normal throughput (needs --threads of at least 1).
    #[arg(long)]
    kill_grower: bool,
    /// dtx with --kill-grower: how long after the kill recovery rolls the dead grower's log back
    /// (standing for the recovery module's wait: the client's expiry, then its quarantine).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
    recover_after: Duration,
    /// optimal: entries a split handles per round trip (their key READs, CASes in, CASes out). 1,
    /// the default, is the original RACE resize the rTX paper measures: one entry at a time, each
    /// verb awaited. More batches them (at most 4096, a batch's most verbs): a stronger baseline
    /// than the paper's.
    #[arg(long, value_name = "N", default_value_t = SPLIT_ENTRIES_PER_ROUND_TRIP_DEFAULT)]
    optimal_entries_per_round_trip: usize,
    /// Times every variant runs (1..=100), variants in the given order in odd rounds and reversed
    /// in even ones; the last line then gives the median of the rounds' optimal / rtx grow-time
    /// ratios and their range. This VM's speed drifts by tens of percent: use 3 or more.
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: usize,
    /// Seed of the key set.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as a JSON array to FILE ('-': print it on stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// The directory depth a table gets at least (`HashConfig::default`'s).
const DIR_DEPTH_MIN: u8 = 12;

impl RehashArgs {
    pub fn validate(self) -> anyhow::Result<Plan> {
        if self.variant.is_empty() {
            bail!("--variant needs at least one value");
        }
        if self.keys == 0 || self.keys > KEYS_MAX {
            bail!("--keys must be between 1 and {KEYS_MAX}");
        }
        if self.groups == 0 || self.groups > GROUPS_MAX {
            bail!("--groups must be between 1 and {GROUPS_MAX}, got {}", self.groups);
        }
        let threads = self.threads.unwrap_or(if cores() >= 3 { 2 } else { 1 });
        if threads > THREADS_MAX {
            bail!("--threads must be at most {THREADS_MAX}, got {threads}");
        }
        if self.kill_grower && threads == 0 {
            bail!("--kill-grower needs inserting clients to watch recover: give --threads 1 or more");
        }
        if self.kill_grower && self.phase.is_zero() {
            bail!("--kill-grower needs a --phase to watch the inserters before and after the kill");
        }
        if !(1..=VERBS_PER_BATCH_MAX).contains(&self.optimal_entries_per_round_trip) {
            bail!(
                "--optimal-entries-per-round-trip must be between 1 and {VERBS_PER_BATCH_MAX} (verbs in one batch), got {}",
                self.optimal_entries_per_round_trip
            );
        }
        if !(1..=ROUNDS_MAX).contains(&self.rounds) {
            bail!("--rounds must be between 1 and {ROUNDS_MAX}, got {}", self.rounds);
        }
        if self.bucket < Duration::from_micros(100) {
            bail!("--bucket must be at least 100us");
        }
        let slots = Geometry { groups: self.groups }.slots();
        let load_depth = load_depth(self.keys, slots).with_context(|| {
            format!(
                "{} keys do not fit 2^{DIR_DEPTH_MAX} subtables of {slots} slots (--groups {}) at the bulk load's \
                 {LOAD_FILL} fill",
                self.keys, self.groups
            )
        })?;
        let dir_depth = match self.dir_depth {
            Some(d) => {
                if d < load_depth + DIR_HEADROOM || d > DIR_DEPTH_MAX {
                    bail!(
                        "--dir-depth must be between {} (two above the bulk load's depth {load_depth}: room for \
                         the fill's split and the grow) and {DIR_DEPTH_MAX}, got {d}",
                        load_depth + DIR_HEADROOM
                    );
                }
                d
            }
            None => {
                let d = (load_depth + DIR_HEADROOM).max(DIR_DEPTH_MIN);
                if d > DIR_DEPTH_MAX {
                    bail!(
                        "{} keys load subtables of --groups {} at depth {load_depth}, which leaves no room to grow \
                         in a directory of depth {DIR_DEPTH_MAX} (the most): use more --groups or fewer --keys, \
                         or give --dir-depth",
                        self.keys,
                        self.groups
                    );
                }
                d
            }
        };
        Ok(Plan {
            variants: dedup(self.variant),
            keys: self.keys,
            threads,
            fill_threads: threads.max(cores().min(4)).max(1),
            transport: self.transport,
            config: HashConfig {
                groups: self.groups,
                dir_depth,
            },
            fill: self.fill,
            phase: self.phase,
            bucket: self.bucket,
            kill_grower: self.kill_grower,
            recover_after: self.recover_after,
            optimal_entries_per_round_trip: self.optimal_entries_per_round_trip,
            rounds: self.rounds,
            seed: self.seed,
            json: self.json.map(|p| {
                if p.as_os_str() == "-" {
                    JsonTo::Stdout
                } else {
                    JsonTo::File(p)
                }
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_depth_follows_the_bulk_load_rule() {
        let slots = Geometry { groups: 512 }.slots();
        assert_eq!(slots, 10_752);
        assert_eq!(load_depth(1, slots), Some(0));
        assert_eq!(load_depth(6_451, slots), Some(0));
        assert_eq!(load_depth(6_452, slots), Some(1));
        // 1M keys: 256 subtables; 10M: 2048.
        assert_eq!(load_depth(1_000_000, slots), Some(8));
        assert_eq!(load_depth(10_000_000, slots), Some(11));
        assert_eq!(load_depth(u64::MAX, slots), None);
    }
}
