//! The command line of `kintsugi bench resp` and its validation into a [`RespPlan`].

use anyhow::{bail, Context};
use bench::resp::plan::{RespPlan, Target, ROUNDS_MAX};

/// Arguments of `kintsugi bench resp`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What it measures (real processes on this machine): Debian's redis-server (persistence off) and the
Redis-protocol gateway (`kintsugi serve`: an embedded cluster of one control member and one memory
node on shm, replication 1, an rtx B+tree and an rtx hash table, each behind its own gateway), all
started by this command. Each round runs redis-benchmark against every target and --pipelines depth,
the targets' order rotating from round to round; the report gives the median requests per second
per test and depth, each gateway's as a ratio of redis-server's, and each gateway's round trips and
verbs per operation over the whole run (INFO kintsugi).

Needs redis-server and redis-benchmark (apt-get install -y redis-server redis-tools).

Examples:
  kintsugi bench resp
  kintsugi bench resp --rounds 5 --requests 200000 --keyspace 10000000")]
pub struct RespArgs {
    /// redis-benchmark's tests (-t).
    #[arg(long, value_delimiter = ',', default_value = "set,get,incr,mset")]
    tests: Vec<String>,
    /// Pipeline depths (-P), each a run of its own.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pipelines: Vec<u32>,
    /// Parallel connections (-c).
    #[arg(long, default_value_t = 50)]
    clients: u32,
    /// Requests per test and run (-n).
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Keys drawn from this many (-r).
    #[arg(long, default_value_t = 1_000_000)]
    keyspace: u64,
    /// Rounds (each runs every target).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Gateways' index handles (`kintsugi serve --handles`).
    #[arg(long, default_value_t = 8)]
    handles: u16,
    /// Targets: redis, btree, hash.
    #[arg(long, value_delimiter = ',', default_value = "redis,btree,hash")]
    targets: Vec<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

impl RespArgs {
    pub fn validate(self) -> anyhow::Result<(RespPlan, bool)> {
        if self.rounds == 0 || self.rounds > ROUNDS_MAX {
            bail!("--rounds must be 1 to {ROUNDS_MAX}");
        }
        if self.pipelines.is_empty() || self.pipelines.iter().any(|&p| p == 0 || p > 1024) {
            bail!("--pipelines takes depths from 1 to 1024");
        }
        if self.clients == 0 || self.clients > 1000 {
            bail!("--clients must be 1 to 1000");
        }
        if self.requests == 0 || self.keyspace == 0 {
            bail!("--requests and --keyspace must be positive");
        }
        if !(1..=64).contains(&self.handles) {
            bail!("--handles must be 1 to 64");
        }
        const TESTS: &[&str] = &["set", "get", "incr", "mset"];
        if let Some(t) = self.tests.iter().find(|t| !TESTS.contains(&t.as_str())) {
            bail!("--tests: {t:?} is not one of {TESTS:?} (the commands the gateway serves)");
        }
        let mut targets = Vec::new();
        for t in &self.targets {
            let target = match t.as_str() {
                "redis" => Target::Redis,
                "btree" => Target::GatewayBtree,
                "hash" => Target::GatewayHash,
                other => bail!("--targets: {other:?} is not redis, btree or hash"),
            };
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
        if targets.is_empty() {
            bail!("--targets names none");
        }
        Ok((
            RespPlan {
                exe: std::env::current_exe().context("cannot find the kintsugi binary")?,
                targets,
                tests: self.tests,
                pipelines: self.pipelines,
                clients: self.clients,
                requests: self.requests,
                keyspace: self.keyspace,
                rounds: self.rounds,
                handles: self.handles,
            },
            self.json,
        ))
    }
}
