//! Flags that `bench txn` and `bench lease` share, and checks on them;
//! helpers every bench uses (core count, seeds, progress bars, medians).

use anyhow::bail;
use fabric::REPLICAS_MAX;
use harness::TransportKind;

use crate::cli::units::parse_bytes;
use bench::cluster::OBJECT_BYTES;
use bench::common::Common;

/// Checks `--rounds`, `--tasks` and `--keys` of a benchmark that disturbs
/// a load on a local cluster (`bench promote`, `bench recover`).
pub fn check_rounds_and_load(rounds: u32, rounds_max: u32, tasks: usize, keys: u64) -> anyhow::Result<()> {
    use bench::local_load::{KEYS_PER_TASK_MAX, TASKS_MAX};
    if !(1..=rounds_max).contains(&rounds) {
        bail!("--rounds must be 1 to {rounds_max}");
    }
    if !(1..=TASKS_MAX).contains(&tasks) {
        bail!("--tasks must be 1 to {TASKS_MAX}");
    }
    if !(1..=KEYS_PER_TASK_MAX).contains(&keys) {
        bail!("--keys must be 1 to {KEYS_PER_TASK_MAX}");
    }
    Ok(())
}

/// Region bytes a benchmark's B+tree is given per key it loads, for its
/// load and a YCSB A run on it: 5 times the 52 bytes measured after
/// loading 200,000 keys and 3.4 million updates (`kintsugi bench recover
/// --keys 100000 --rounds 2`, its 'region used'), for half-full leaves
/// after splits and the freed blocks each writer keeps.
pub const REGION_BYTES_PER_KEY: u64 = 256;

/// Most client threads (each is an owner id with a log slot in the heap).
pub const THREADS_MAX: usize = 1024;

/// Flags of both bench commands.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Where the memory lives: local (in-process memory nodes) or shm (memory images under /dev/shm,
    /// mapped by this process: the CXL model). Both execute verbs on the calling thread; tcp is
    /// not one of this bench's transports (its clients fork one inline fabric client).
    #[arg(long, value_enum, default_value_t = TransportKind::Local)]
    pub transport: TransportKind,
    /// Replicas of the region (1 = primary only). With more, every commit also CASes each backup, in a
    /// round trip before the primary's.
    #[arg(long, value_name = "R", default_value_t = 1)]
    pub replicas: usize,
    /// Bytes of each object's data (one of 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1KiB, 2KiB, 4KiB).
    /// Its first 8 bytes are the counter the transactions increment.
    #[arg(long, value_name = "BYTES", default_value = "64", value_parser = parse_bytes)]
    pub object_bytes: u64,
    /// Seed of the random choices (objects per transaction, clock skews); the same seed makes the
    /// same choices, not the same interleaving.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Transports `bench txn` and `bench lease` run on: their clients fork
/// one fabric client whose verbs run on the calling thread.
pub const INLINE_TRANSPORTS: &[TransportKind] = &[TransportKind::Local, TransportKind::Shm];

impl CommonArgs {
    pub fn validate(self) -> anyhow::Result<Common> {
        if self.replicas == 0 || self.replicas > REPLICAS_MAX {
            bail!(
                "--replicas must be between 1 and {REPLICAS_MAX}, got {}",
                self.replicas
            );
        }
        let object_bytes = match u32::try_from(self.object_bytes) {
            Ok(b) if OBJECT_BYTES.contains(&b) => b,
            _ => bail!(
                "--object-bytes must be one of {} (got {})",
                OBJECT_BYTES
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                self.object_bytes
            ),
        };
        Ok(Common {
            transport: self
                .transport
                .require("bench txn and bench lease", INLINE_TRANSPORTS)?,
            replicas: self.replicas as u16,
            object_bytes,
            seed: self.seed,
            json: self.json,
        })
    }
}

/// Checks `--threads`.
pub fn check_threads(threads: usize) -> anyhow::Result<()> {
    if threads == 0 || threads > THREADS_MAX {
        bail!("--threads must be between 1 and {THREADS_MAX}, got {threads}");
    }
    Ok(())
}

/// Checks that `write_set` objects per transaction can be drawn from `objects` and logged.
pub fn check_write_set(flag: &str, write_set: usize, objects: usize) -> anyhow::Result<()> {
    if objects == 0 {
        bail!("--objects must be at least 1");
    }
    if write_set == 0 {
        bail!("{flag} must be at least 1 object per transaction");
    }
    if write_set > objects {
        bail!(
            "{flag} {write_set} is more objects than there are (--objects {objects}): a transaction \
             writes distinct objects"
        );
    }
    if write_set > txn::log::LOG_ENTRIES_MAX {
        bail!(
            "{flag} {write_set} does not fit one rTX log: at most {} objects per transaction \
             (txn::log::LOG_ENTRIES_MAX)",
            txn::log::LOG_ENTRIES_MAX
        );
    }
    Ok(())
}
