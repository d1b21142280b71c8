//! The shared [`Keyspace`] of a run and the per-thread [`OpGenerator`]s
//! drawing from it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::keys::{KeyMap, LoadKeys};
use super::perm::{splitmix64, Perm};
use super::ycsb::{Distribution, Workload, MAX_SCAN_LENGTH};
use super::zipf::{Zipfian, YCSB_THETA};

/// Largest record count a [`WorkloadSpec`] accepts (2^48): far beyond any
/// memory, and small enough that ranks are exact in an `f64`.
pub const MAX_RECORDS: u64 = 1 << 48;

/// Salts separating the random streams derived from one seed.
const STREAM_SALT: u64 = 0x4f50_5354_5245_414d;
const SCRAMBLE_SALT: u64 = 0x5343_5241_4d42_4c45;

/// What to run: a deterministic description of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct WorkloadSpec {
    /// Operation mix.
    pub workload: Workload,
    /// How existing keys are chosen (ignored by [`Workload::D`], whose reads
    /// always follow the latest distribution).
    pub distribution: Distribution,
    /// Records loaded before the run (keys `KeyMap::key(0..records)`).
    pub records: u64,
    /// Seed of the key set, the values and every thread's op stream.
    pub seed: u64,
}

/// A [`WorkloadSpec`] that cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `records` is 0 or above [`MAX_RECORDS`].
    #[error("record count {0} out of range: must be in 1..={MAX_RECORDS}")]
    Records(u64),
    /// A lane that is not below the lane count.
    #[error("insert lane {lane} of {lanes}: must be below the lane count")]
    Lane {
        /// The lane asked for.
        lane: u64,
        /// The lanes.
        lanes: u64,
    },
}

/// The counter of inserts, on its own cache line: it is the only shared
/// word written during a run.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Counter(AtomicU64);

/// State shared by all threads of a run: the spec, the key map, the
/// precomputed Zipfian constants, and the counter that hands out the
/// indices of inserted records.
///
/// Create one per run with [`Keyspace::new`] and hand each thread an
/// [`OpGenerator`] from [`Keyspace::generator`].
#[derive(Debug)]
pub struct Keyspace {
    spec: WorkloadSpec,
    keys: KeyMap,
    /// Zipfian over the loaded records, if the run needs one (Zipfian
    /// requests, or the latest distribution of D).
    zipf: Option<Zipfian>,
    /// Maps Zipfian ranks to record indices.
    scramble: Perm,
    inserted: Counter,
    /// Inserts take record indices `records + n * lanes + lane`: disjoint
    /// for keyspaces of distinct lanes (client processes that share no
    /// counter).
    lane: u64,
    lanes: u64,
}

impl Keyspace {
    /// Validates `spec` and sets up its shared state.
    ///
    /// O(1), except that a run with [`Distribution::Zipf`] or
    /// [`Workload::D`] computes `ζ(records, 0.99)` here, once: O(records),
    /// about one core-second per 100M records, spread over all cores.
    /// Generators then cost O(1) to create.
    pub fn new(spec: WorkloadSpec) -> Result<Arc<Self>, SpecError> {
        Self::in_lane(spec, 0, 1)
    }

    /// A keyspace whose inserts take lane `lane` of `lanes` (`lane < lanes`)
    /// of the fresh record indices, so that keyspaces in separate processes
    /// never insert the same key. The same spec gives the same loaded keys
    /// and op streams in every lane.
    pub fn in_lane(spec: WorkloadSpec, lane: u64, lanes: u64) -> Result<Arc<Self>, SpecError> {
        if lanes == 0 || lane >= lanes {
            return Err(SpecError::Lane { lane, lanes });
        }
        if spec.records == 0 || spec.records > MAX_RECORDS {
            return Err(SpecError::Records(spec.records));
        }
        let needs_zipf = spec.distribution == Distribution::Zipf || spec.workload == Workload::D;
        Ok(Arc::new(Self {
            spec,
            keys: KeyMap::new(spec.seed),
            zipf: needs_zipf.then(|| Zipfian::new(spec.records, YCSB_THETA)),
            scramble: Perm::covering(spec.records, spec.seed ^ SCRAMBLE_SALT),
            inserted: Counter::default(),
            lane,
            lanes,
        }))
    }

    /// The spec this keyspace was made from.
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// The index-to-key map (also gives values, and indices of keys).
    pub fn key_map(&self) -> &KeyMap {
        &self.keys
    }

    /// Records loaded before the run.
    pub fn records(&self) -> u64 {
        self.spec.records
    }

    /// Keys to bulk-load, in index order (see [`super::load_keys`]).
    pub fn load_keys(&self) -> LoadKeys {
        self.keys.keys(0..self.spec.records)
    }

    /// Inserts handed out so far by all generators (each has been returned
    /// by some `next_op`, not necessarily executed yet).
    pub fn inserted(&self) -> u64 {
        self.inserted.0.load(Ordering::Relaxed)
    }

    /// Records loaded or handed out for insertion, as far as this keyspace
    /// can tell: `records() + inserted() * lanes` (with one lane, record
    /// indices `0..key_count()` have been used).
    pub fn key_count(&self) -> u64 {
        self.spec.records + self.inserted() * self.lanes
    }

    /// For an inserted record index: its lane and its rank in the lane
    /// (`None` for a loaded record).
    pub fn insert_lane(&self, index: u64) -> Option<(u64, u64)> {
        let fresh = index.checked_sub(self.spec.records)?;
        Some((fresh % self.lanes, fresh / self.lanes))
    }

    /// The Zipfian over the loaded records, if this run uses one.
    pub fn zipf(&self) -> Option<&Zipfian> {
        self.zipf.as_ref()
    }

    /// The op generator of thread `thread`. Its random stream is a function
    /// of `(seed, thread)` only. O(1).
    pub fn generator(self: &Arc<Self>, thread: usize) -> OpGenerator {
        OpGenerator::new(Arc::clone(self), thread)
    }

    /// Claims the next record index for an insert: unique across threads.
    fn claim_insert(&self) -> u64 {
        self.spec.records + self.inserted.0.fetch_add(1, Ordering::Relaxed) * self.lanes + self.lane
    }
}

/// One operation to run against the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Look `key` up.
    Read {
        /// A loaded key (or, in D, possibly an inserted one).
        key: u64,
    },
    /// Overwrite the value of existing `key`.
    Update {
        /// A loaded key.
        key: u64,
        /// The new value.
        value: u64,
    },
    /// Insert a key no one has inserted before.
    Insert {
        /// A fresh key.
        key: u64,
        /// Its value.
        value: u64,
    },
    /// Read `count` consecutive keys in key order, starting at `start`.
    Scan {
        /// A loaded key.
        start: u64,
        /// In `[1, 100]`.
        count: usize,
    },
}

/// The kind of an [`Op`], for counting and per-kind statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// [`Op::Read`].
    Read,
    /// [`Op::Update`].
    Update,
    /// [`Op::Insert`].
    Insert,
    /// [`Op::Scan`].
    Scan,
}

impl OpKind {
    /// All four, in order.
    pub const ALL: [OpKind; 4] = [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Scan];
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
        })
    }
}

impl Op {
    /// The kind of this op.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Update { .. } => OpKind::Update,
            Op::Insert { .. } => OpKind::Insert,
            Op::Scan { .. } => OpKind::Scan,
        }
    }

    /// The key the op targets (a scan's start).
    pub fn key(&self) -> u64 {
        match *self {
            Op::Read { key } | Op::Update { key, .. } | Op::Insert { key, .. } => key,
            Op::Scan { start, .. } => start,
        }
    }
}

/// The version mixed into the value of the `seq`-th op (counting from 1)
/// of thread `thread`'s stream: [`KeyMap::value`]`(key, write_version(thread,
/// seq))` is the value that op writes. A checker uses it to recognise the
/// value of a write that was under way when its client died.
pub fn write_version(thread: usize, seq: u64) -> u64 {
    ((thread as u64 + 1) << 40).wrapping_add(seq)
}

/// How a generator picks an existing record.
#[derive(Clone, Debug)]
enum Chooser {
    Uniform,
    Zipf {
        zipf: Zipfian,
        scramble: Perm,
    },
    /// Zipfian over recency; grows (incrementally) with the key count.
    Latest {
        zipf: Zipfian,
    },
}

/// A per-thread stream of [`Op`]s.
///
/// Reproducible: with the same spec and thread index, the sequence of op
/// kinds, read/update/scan targets, scan lengths and values is the same on
/// every run. What depends on other threads is only which inserted indices
/// a thread gets (a shared counter hands them out) and, in D, which key the
/// latest distribution lands on (it is relative to the current key count).
///
/// Also an endless [`Iterator`], so `gen.by_ref().take(n)` works. A clone
/// replays the same stream from the same point (its inserts still claim
/// fresh indices).
#[derive(Clone, Debug)]
pub struct OpGenerator {
    keyspace: Arc<Keyspace>,
    keys: KeyMap,
    rng: SmallRng,
    chooser: Chooser,
    records: u64,
    /// Cumulative thresholds of a draw in `0..100`.
    read_below: u32,
    update_below: u32,
    insert_below: u32,
    thread: usize,
    /// Base of the value versions of this thread: `(thread + 1) << 40`.
    version_base: u64,
    generated: u64,
}

impl OpGenerator {
    /// The generator of thread `thread` on `keyspace` (same as
    /// [`Keyspace::generator`]). O(1).
    pub fn new(keyspace: Arc<Keyspace>, thread: usize) -> Self {
        let spec = keyspace.spec;
        let stream = splitmix64(splitmix64(spec.seed ^ STREAM_SALT).wrapping_add(thread as u64));
        let chooser = match (spec.workload, spec.distribution, keyspace.zipf) {
            (Workload::D, _, Some(zipf)) => Chooser::Latest { zipf },
            (_, Distribution::Zipf, Some(zipf)) => Chooser::Zipf {
                zipf,
                scramble: keyspace.scramble,
            },
            _ => Chooser::Uniform,
        };
        let mix = spec.workload.mix();
        Self {
            keys: keyspace.keys,
            rng: SmallRng::seed_from_u64(stream),
            chooser,
            records: spec.records,
            read_below: mix.read,
            update_below: mix.read + mix.update,
            insert_below: mix.read + mix.update + mix.insert,
            thread,
            version_base: write_version(thread, 0),
            generated: 0,
            keyspace,
        }
    }

    /// The next op.
    #[inline]
    pub fn next_op(&mut self) -> Op {
        self.generated += 1;
        let p = self.rng.gen_range(0..100u32);
        if p < self.read_below {
            Op::Read {
                key: self.existing_key(),
            }
        } else if p < self.update_below {
            let key = self.existing_key();
            Op::Update {
                key,
                value: self.value(key),
            }
        } else if p < self.insert_below {
            let key = self.keys.key(self.keyspace.claim_insert());
            Op::Insert {
                key,
                value: self.value(key),
            }
        } else {
            let start = self.existing_key();
            Op::Scan {
                start,
                count: self.rng.gen_range(1..=MAX_SCAN_LENGTH),
            }
        }
    }

    /// Ops generated so far.
    pub fn generated(&self) -> u64 {
        self.generated
    }

    /// This generator's thread index.
    pub fn thread(&self) -> usize {
        self.thread
    }

    /// The shared keyspace.
    pub fn keyspace(&self) -> &Arc<Keyspace> {
        &self.keyspace
    }

    fn value(&self, key: u64) -> u64 {
        self.keys
            .value(key, self.version_base.wrapping_add(self.generated))
    }

    /// A key chosen by the request distribution.
    #[inline]
    fn existing_key(&mut self) -> u64 {
        let index = match &mut self.chooser {
            Chooser::Uniform => self.rng.gen_range(0..self.records),
            Chooser::Zipf { zipf, scramble } => scramble.below(zipf.sample(&mut self.rng), self.records),
            Chooser::Latest { zipf } => {
                // YCSB's SkewedLatestGenerator: rank 0 is the newest key.
                let count = self.keyspace.key_count();
                zipf.grow(count);
                count - 1 - zipf.sample(&mut self.rng)
            }
        };
        self.keys.key(index)
    }
}

impl Iterator for OpGenerator {
    type Item = Op;

    #[inline]
    fn next(&mut self) -> Option<Op> {
        Some(self.next_op())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}
