//! What `bench resp` runs.

use std::path::PathBuf;

use serde::Serialize;

/// Most rounds: each is a redis-benchmark run per target and pipeline depth.
pub const ROUNDS_MAX: u32 = 50;

/// What redis-benchmark is pointed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Debian's redis-server, persistence off.
    Redis,
    /// The gateway on an rtx B+tree.
    GatewayBtree,
    /// The gateway on an rtx RACE hash table.
    GatewayHash,
}

impl Target {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Target::Redis => "redis-server",
            Target::GatewayBtree => "gateway btree",
            Target::GatewayHash => "gateway hash",
        }
    }

    /// The gateway's `--kind`, if it is one.
    pub fn kind(self) -> Option<&'static str> {
        match self {
            Target::Redis => None,
            Target::GatewayBtree => Some("btree"),
            Target::GatewayHash => Some("hash"),
        }
    }
}

/// A validated plan.
#[derive(Clone, Debug, Serialize)]
pub struct RespPlan {
    /// The kintsugi binary (gateways are its `serve`).
    #[serde(skip)]
    pub exe: PathBuf,
    /// Targets, in the first round's order (later rounds rotate it).
    pub targets: Vec<Target>,
    /// redis-benchmark's `-t`.
    pub tests: Vec<String>,
    /// redis-benchmark's `-P` values.
    pub pipelines: Vec<u32>,
    /// redis-benchmark's `-c`.
    pub clients: u32,
    /// redis-benchmark's `-n`, per test and run.
    pub requests: u64,
    /// redis-benchmark's `-r`: keys drawn from this many.
    pub keyspace: u64,
    /// Rounds.
    pub rounds: u32,
    /// Each gateway's `--handles`.
    pub handles: u16,
}
