//! Seeded, reproducible YCSB workloads for index benchmarks and chaos
//! experiments, as in the rTX paper's evaluation (§6, Table 1): 8-byte keys
//! and values, uniform or Zipfian (θ = 0.99) requests.
//!
//! | workload | mix                          | keys chosen by             |
//! |----------|------------------------------|----------------------------|
//! | A        | 50% read, 50% update         | the [`Distribution`]       |
//! | B        | 90% read, 10% update         | the [`Distribution`]       |
//! | C        | 100% read                    | the [`Distribution`]       |
//! | D        | 95% read, 5% insert          | latest (newest most read)  |
//! | E        | 95% scan of 1..=100, 5% insert | the [`Distribution`]     |
//!
//! B follows the paper's Table 1 (90/10), not stock YCSB (95/5).
//!
//! - [`ycsb`]: [`Workload`] (its [`Mix`]) and [`Distribution`], parsed from
//!   `a`..`e` and `uniform` / `zipf` / `zipfian`.
//! - [`keys`]: [`KeyMap`]: record index `i` ↔ key, a seeded bijective mix
//!   of `i` that is never `0` or `u64::MAX`; [`load_keys`] /
//!   [`sorted_keys`] for bulk loading; deterministic values.
//! - [`zipf`]: Gray et al.'s Zipfian generator (YCSB's), with `ζ(n)`
//!   computed once per run.
//! - [`generator`]: the shared [`Keyspace`] of a run and the per-thread
//!   [`OpGenerator`] producing [`Op`]s.
//! - [`driver`]: the client loop that runs an op stream on an index, shared
//!   by `bench ycsb` and chaos experiments.
//! - [`smallbank`] and [`tatp`]: FORD's and Motor's OLTP workloads
//!   (`bench smallbank`, `bench tatp`): seeded transaction streams, and
//!   TATP's population; the records they run on are the bench's.
//! - [`timeline`]: throughput timelines (operations per bucket), what a
//!   fault did to them and when they recovered, for chaos runs and the
//!   benchmarks that kill something (`bench rehash`).
//!
//! **Keys.** Loaded records are indices `0..records`; inserts take
//! `records`, `records + 1`, ... from a shared atomic counter, so no two
//! threads insert the same key, and D's latest distribution (YCSB's
//! `SkewedLatestGenerator`: a Zipfian over recency, rank 0 the newest
//! index) reaches them. Reads, updates and scan starts of A, B, C and E
//! choose among the loaded records only (as YCSB does). A D read may pick a
//! key whose insert another thread has been handed but not yet finished;
//! treat a miss on such a key as a race, not a loss.
//!
//! **Zipfian.** YCSB's scrambled Zipfian: ranks are drawn with Gray's
//! method and mapped to record indices by a seeded permutation (YCSB uses
//! an FNV hash modulo the count; a permutation keeps the skew exact), then
//! to keys by the key map, so hot keys are spread over the key space.
//! YCSB draws ranks over 10^10 items with a hard-coded `ζ` and folds them
//! onto the records, which flattens the skew; here ranks are drawn over the
//! records themselves (as Sherman's and MICA's benchmarks do), so the
//! hottest key gets `1/ζ(records)` of the requests (4.8% for 100M).
//!
//! **Cost.** [`Keyspace::new`] is O(1) except for Zipfian or D runs, which
//! compute `ζ(records)` once (about one core-second per 100M records,
//! spread over all cores); generators are O(1) to create and share it. A
//! D generator extends its copy of `ζ` by one term per insert it observes.
//! Generating an op takes tens of nanoseconds.
//!
//! **Reproducibility.** The key set is a function of `(records, seed)`; a
//! generator's stream of op kinds, targets, scan lengths and values is a
//! function of `(spec, thread index)`. Across threads, only the assignment
//! of insert indices and D's read targets (relative to the current key
//! count) depend on the interleaving. Streams use `rand`'s `SmallRng`, so
//! they are stable for a given `rand` version (pinned by `Cargo.lock`).
//!
//! ```
//! use workload::{Distribution, Keyspace, Op, Workload, WorkloadSpec};
//!
//! let spec = WorkloadSpec { workload: Workload::A, distribution: Distribution::Zipf, records: 10_000, seed: 7 };
//! let keyspace = Keyspace::new(spec)?;
//! let loaded: Vec<(u64, u64)> =
//!     keyspace.load_keys().map(|k| (k, keyspace.key_map().load_value(k))).collect();
//! let mut ops = keyspace.generator(0);
//! for op in ops.by_ref().take(1000) {
//!     match op {
//!         Op::Read { key } | Op::Update { key, .. } => {
//!             assert!(matches!(keyspace.key_map().index(key), Some(i) if i < 10_000))
//!         }
//!         Op::Insert { .. } | Op::Scan { .. } => unreachable!("A only reads and updates"),
//!     }
//! }
//! # assert_eq!(loaded.len(), 10_000);
//! # Ok::<(), workload::SpecError>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod driver;
pub mod generator;
pub mod keys;
mod perm;
pub mod smallbank;
pub mod tatp;
pub mod timeline;
pub mod ycsb;
pub mod zipf;

#[cfg(test)]
mod tests;

pub use generator::{write_version, Keyspace, Op, OpGenerator, OpKind, SpecError, WorkloadSpec, MAX_RECORDS};
pub use keys::{load_entries, load_keys, sorted_keys, KeyMap, LoadKeys};
pub use ycsb::{Distribution, Mix, ParseError, Workload, MAX_SCAN_LENGTH};
pub use zipf::{zeta, Zipfian, YCSB_THETA};
