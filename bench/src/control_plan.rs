//! What `kintsugi bench control` runs: a validated [`ControlPlan`], and its limits.

/// Most members: a Raft cluster of more than seven only adds replication
/// work and no useful fault tolerance for a control plane.
pub const MEMBERS_MAX: usize = 7;

/// Most concurrent writers.
pub const CONCURRENCY_MAX: usize = 256;

/// Most failover rounds (each kills and restarts a member: seconds apiece).
pub const FAILOVERS_MAX: u32 = 20;

/// Most commands of the commit phase: the latencies of a run are kept in
/// memory until its end, and at a few thousand commits per second ten
/// million is already most of an hour.
pub const OPS_MAX: u64 = 10_000_000;

/// Failover rounds when `--failovers` is not given and there are enough
/// members for one (three).
pub const FAILOVERS_DEFAULT: u32 = 3;

/// Members a failover needs: with two, killing one leaves no majority, so
/// there is nothing to fail over to.
pub const FAILOVER_MEMBERS_MIN: usize = 3;

/// A validated `bench control` run.
#[derive(Clone, Copy, Debug)]
pub struct ControlPlan {
    /// Control-plane member processes to start (`--members`).
    pub members: usize,
    /// Commands committed in the commit phase (`--ops`).
    pub ops: u64,
    /// Concurrent writers of the commit phase (`--concurrency`), each with its
    /// own connection and region.
    pub concurrency: usize,
    /// Leader kills to time (`--failovers`; by default 3 with three or more
    /// members, else 0).
    pub failovers: u32,
    /// Print one JSON object on stdout instead of the summary (`--json`).
    pub json: bool,
}

impl ControlPlan {
    /// Commits of the watch phase: a shorter, sequential phase (see the help).
    pub fn watch_ops(&self) -> u64 {
        self.ops.min(200)
    }
}
