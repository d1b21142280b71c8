//! Counters of one transaction client.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// What a [`TxClient`](crate::TxClient) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxStats {
    /// Transactions committed (read-only ones included).
    pub commits: u64,
    /// Attempts aborted (each retry of a transaction counts).
    pub aborts: u64,
    /// Repairs of other owners' transactions that changed something
    /// (aborted a log, released its locks, rolled it forward, or fenced a
    /// log-less lock).
    pub repairs: u64,
    /// Commits that wrote a log (multi-object write sets, or Opt1 off).
    pub logged_commits: u64,
    /// Locks of other owners found held with an expired lease (by this
    /// client's clock), counted each time one is met: when reading a meta,
    /// when a lock CAS or the validation of the read set finds one, and in
    /// `Tx::check_lease`. A repair may follow (then `repairs` counts what it
    /// changed) or not (the validation of a transaction that holds locks
    /// aborts instead; a repair may find nothing left to do). When every
    /// client is alive, each one is a false expiry.
    pub expired_seen: u64,
    /// Lease ends (lock words, commit leases) this client had to wait for
    /// its clock to take: it had taken leases faster than one per tick
    /// (1/256 ms) for long enough to run `LEAD_TICKS_MAX` ahead of it
    /// (`txn::lease`). Only in-process transports get there.
    #[serde(default)]
    pub lease_waits: u64,
    /// [`MetaHint`](crate::MetaHint)s a pre-lock CAS found stale (another
    /// client committed the object since): each cost one round trip more.
    #[serde(default)]
    pub stale_hints: u64,
    /// Broken protocol invariants this client detected (a pointer CAS of a
    /// commit it still owned that found neither the old nor the new
    /// pointer). Each is also an error returned and logged; any non-zero
    /// count is a bug or memory corruption, never load.
    #[serde(default)]
    pub invariant_violations: u64,
    /// Blocks taken from the runs a reclaim left for this owner id.
    #[serde(default)]
    pub blocks_adopted: u64,
    /// Blocks given up, unused, because their chunk's owner id was
    /// announced for reclaim (`txn::quiesce`).
    #[serde(default)]
    pub blocks_doomed: u64,
    /// Bytes of meta chunk tails the owner id's earlier holders left
    /// unwritten that this client carves (`txn::tails`).
    #[serde(default)]
    pub tail_bytes_adopted: u64,
    /// DTX reads that found a record invisible (being written in place
    /// under another transaction's lock) and read it again.
    #[serde(default)]
    pub invisible_waits: u64,
    /// DTX records recovery put back from their undo images (their
    /// transaction had not committed on every replica).
    #[serde(default)]
    pub rollbacks: u64,
    /// DTX records recovery made visible at their new version (their
    /// transaction had committed; its release never came).
    #[serde(default)]
    pub rollforwards: u64,
}

impl Add for TxStats {
    type Output = TxStats;
    fn add(self, o: TxStats) -> TxStats {
        TxStats {
            commits: self.commits + o.commits,
            aborts: self.aborts + o.aborts,
            repairs: self.repairs + o.repairs,
            logged_commits: self.logged_commits + o.logged_commits,
            expired_seen: self.expired_seen + o.expired_seen,
            lease_waits: self.lease_waits + o.lease_waits,
            stale_hints: self.stale_hints + o.stale_hints,
            invariant_violations: self.invariant_violations + o.invariant_violations,
            blocks_adopted: self.blocks_adopted + o.blocks_adopted,
            blocks_doomed: self.blocks_doomed + o.blocks_doomed,
            tail_bytes_adopted: self.tail_bytes_adopted + o.tail_bytes_adopted,
            invisible_waits: self.invisible_waits + o.invisible_waits,
            rollbacks: self.rollbacks + o.rollbacks,
            rollforwards: self.rollforwards + o.rollforwards,
        }
    }
}

impl AddAssign for TxStats {
    fn add_assign(&mut self, o: TxStats) {
        *self = *self + o;
    }
}
