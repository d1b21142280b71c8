//! Per-client verb counters.
//!
//! A [`Client`](crate::Client) is used by one task at a time, so its counters
//! are plain integers: no atomic read-modify-write on the verb path. Readers
//! take a [`Stats`] snapshot (it is `Copy`) and add snapshots of several
//! clients together.

use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

use crate::verb::{Op, OpKind};

/// Counters of one client, or the sum of several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Batches executed: one round trip each, whatever they contain.
    pub round_trips: u64,
    /// READ verbs (a verb aimed at `Replica::All` counts once per replica).
    pub reads: u64,
    /// WRITE verbs.
    pub writes: u64,
    /// CAS verbs.
    pub cas: u64,
    /// FAA verbs.
    pub faa: u64,
    /// FLUSH verbs.
    pub flushes: u64,
    /// Bytes asked for by READs.
    pub bytes_read: u64,
    /// Bytes carried by WRITEs.
    pub bytes_written: u64,
    /// Verbs that completed with an error.
    pub verb_errors: u64,
}

impl Stats {
    /// All verbs of every kind.
    pub fn verbs(&self) -> u64 {
        self.reads + self.writes + self.cas + self.faa + self.flushes
    }

    /// Counts one round trip carrying `ops`.
    pub(crate) fn record(&mut self, ops: &[Op]) {
        self.round_trips += 1;
        for op in ops {
            match op.kind {
                OpKind::Read { len } => {
                    self.reads += 1;
                    self.bytes_read += u64::from(len);
                }
                OpKind::Write { data } => {
                    self.writes += 1;
                    self.bytes_written += u64::from(data.len);
                }
                OpKind::Cas { .. } => self.cas += 1,
                OpKind::Faa { .. } => self.faa += 1,
                OpKind::Flush { .. } => self.flushes += 1,
            }
        }
    }
}

macro_rules! fieldwise {
    ($trait:ident, $method:ident, $op:tt) => {
        impl $trait for Stats {
            type Output = Stats;
            fn $method(self, o: Stats) -> Stats {
                Stats {
                    round_trips: self.round_trips $op o.round_trips,
                    reads: self.reads $op o.reads,
                    writes: self.writes $op o.writes,
                    cas: self.cas $op o.cas,
                    faa: self.faa $op o.faa,
                    flushes: self.flushes $op o.flushes,
                    bytes_read: self.bytes_read $op o.bytes_read,
                    bytes_written: self.bytes_written $op o.bytes_written,
                    verb_errors: self.verb_errors $op o.verb_errors,
                }
            }
        }
    };
}
fieldwise!(Add, add, +);
fieldwise!(Sub, sub, -);

impl AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        *self = *self + o;
    }
}

impl std::iter::Sum for Stats {
    fn sum<I: Iterator<Item = Stats>>(iter: I) -> Stats {
        iter.fold(Stats::default(), Add::add)
    }
}
