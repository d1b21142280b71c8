//! What `kintsugi bench smallbank` and `kintsugi bench tatp` run: a
//! validated [`OltpPlan`], and its limits.

use std::time::Duration;

use harness::TransportKind;
use index::btree::Variant;

/// The benchmark and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// SmallBank over this many accounts (`--accounts`).
    SmallBank {
        /// Customers, each with a savings and a checking record.
        accounts: u64,
    },
    /// TATP over this many subscribers (`--subscribers`).
    Tatp {
        /// Subscribers, each with 22 records (see `oltp::tatp`).
        subscribers: u64,
    },
}

/// A validated run.
#[derive(Clone, Debug)]
pub struct OltpPlan {
    /// The benchmark.
    pub which: Which,
    /// Variants to compare (`--variant`: rtx, dtx), in the order given.
    pub variants: Vec<Variant>,
    /// Times every variant runs (`--rounds`), alternating the order.
    pub rounds: usize,
    /// Client threads (`--threads`), each a client with its own owner id.
    pub threads: usize,
    /// How long the clients run transactions, per variant and round
    /// (`--duration`).
    pub duration: Duration,
    /// Where the memory lives (`--transport`): local or shm.
    pub transport: TransportKind,
    /// Replicas of the region (`--replicas`).
    pub replicas: u16,
    /// Seed of the population and the streams (`--seed`).
    pub seed: u64,
    /// Print one JSON object on stdout instead of the tables (`--json`).
    pub json: bool,
}

/// Most accounts or subscribers: every record is created in its own round
/// trip and kept in an in-process array, so beyond ~10M records loading
/// takes minutes and the arrays gigabytes.
pub const UNITS_MAX: u64 = 10_000_000;

/// Most rounds: enough for a median, few enough that a typo does not book
/// the machine for hours.
pub const ROUNDS_MAX: usize = 100;

impl OltpPlan {
    /// The variants in the order round `round` (1-based) runs them: as
    /// given in odd rounds, reversed in even ones, so that a drift of the
    /// machine's speed falls on both.
    pub fn variants_in(&self, round: usize) -> Vec<Variant> {
        let mut v = self.variants.clone();
        if round % 2 == 0 {
            v.reverse();
        }
        v
    }

    /// The benchmark's name.
    pub fn name(&self) -> &'static str {
        match self.which {
            Which::SmallBank { .. } => "smallbank",
            Which::Tatp { .. } => "tatp",
        }
    }
}
