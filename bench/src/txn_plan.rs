//! What `kintsugi bench txn` and `kintsugi bench lease` run: validated plans.

use std::time::Duration;

use crate::common::Common;

/// A validated `bench txn` run.
#[derive(Clone, Copy, Debug)]
pub struct TxnPlan {
    pub objects: usize,
    pub write_set: usize,
    pub threads: usize,
    pub duration: Duration,
    pub common: Common,
}

/// A validated `bench lease` run.
#[derive(Clone, Debug)]
pub struct LeasePlan {
    pub drifts: Vec<Duration>,
    pub locks: Vec<usize>,
    pub threads: usize,
    pub duration: Duration,
    pub objects: usize,
    pub clock_skew_ms: i64,
    pub op_time: Duration,
    pub common: Common,
}
