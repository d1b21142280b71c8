//! What `kintsugi bench txn` and `kintsugi bench lease` run: validated plans.

use std::time::Duration;

use crate::common::Common;

/// A validated `bench txn` run.
#[derive(Clone, Copy, Debug)]
pub struct TxnPlan {
    /// Objects in the heap (`--objects`); transactions pick theirs uniformly at
    /// random.
    pub objects: usize,
    /// Distinct objects each transaction reads and writes (`--write-set`; 1
    /// commits without a log).
    pub write_set: usize,
    /// Client threads (`--threads`), each a TxClient with its own owner id.
    pub threads: usize,
    /// How long the clients run transactions (`--duration`).
    pub duration: Duration,
    /// The flags `bench txn` shares with `bench lease`.
    pub common: Common,
}

/// A validated `bench lease` run.
#[derive(Clone, Debug)]
pub struct LeasePlan {
    /// Lease drifts to try (`--drift`), in the order given: one table column
    /// each.
    pub drifts: Vec<Duration>,
    /// Objects written (locked) per transaction to try (`--locks`): one table
    /// row each.
    pub locks: Vec<usize>,
    /// Client threads per cell (`--threads`), each a TxClient with its own
    /// owner id and clock skew.
    pub threads: usize,
    /// How long each cell runs (`--duration`).
    pub duration: Duration,
    /// Objects in each cell's heap (`--objects`; 100 is the paper's high
    /// contention).
    pub objects: usize,
    /// Each client's clock is off by a seeded random whole number of ms within
    /// +/- this (`--clock-skew`).
    pub clock_skew_ms: i64,
    /// OP_TIME of the regulated leases (`--op-time`): each lock taken adds
    /// this.
    pub op_time: Duration,
    /// The flags `bench lease` shares with `bench txn`.
    pub common: Common,
}
