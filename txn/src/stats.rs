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
}

impl Add for TxStats {
    type Output = TxStats;
    fn add(self, o: TxStats) -> TxStats {
        TxStats {
            commits: self.commits + o.commits,
            aborts: self.aborts + o.aborts,
            repairs: self.repairs + o.repairs,
            logged_commits: self.logged_commits + o.logged_commits,
        }
    }
}

impl AddAssign for TxStats {
    fn add_assign(&mut self, o: TxStats) {
        *self = *self + o;
    }
}
