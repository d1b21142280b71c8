//! The command line of `kintsugi bench control` and its validation into a [`ControlPlan`].

use anyhow::bail;
use bench::control_plan::{
    ControlPlan, CONCURRENCY_MAX, FAILOVERS_DEFAULT, FAILOVERS_MAX, FAILOVER_MEMBERS_MIN, MEMBERS_MAX,
    OPS_MAX,
};

/// Arguments of `kintsugi bench control`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What it measures (real processes on loopback, default timings: heartbeat 50ms, election timeout
150-300ms):
  1. Starts --members `kintsugi control` processes (this binary) in a temporary directory with a
     generated cluster secret and token, forms a cluster (init on member 1, the others added as
     voters), registers two memory nodes (fake endpoints, kept alive by renewals) and one region with
     two replicas per writer.
  2. Commits: --ops commands sent to the leader by --concurrency writers, each on its own region,
     alternating PromoteBackup (its primary moves to the other node) and RegionRestored (what a
     promoter sends once it rebuilt the new primary); every command is a map change that keeps the
     state the same size. Commits/s and per-command latency (send to acknowledgement).
  3. Watch: min(200, --ops) more such commands, one at a time, while a watcher long-polls
     GET /v1/map on a follower. Per map change: the time from the writer's acknowledgement to the
     watcher receiving that epoch (0 when the watcher saw it first), against the yardstick of one
     GET /v1/status round trip to that follower. Target: visible within one round trip after commit.
  4. Failover, --failovers times: SIGKILL the leader, write to the survivors in turn (1 s timeout
     per try) until one write commits (failover time = kill to that commit), then restart the killed
     member on its port and data directory and wait until it has caught up and the members agree on
     one leader and term (terms begun meanwhile are reported: a restart may depose the leader).
     Target: under 1 s.

Output:
  A summary on stdout, or with --json one JSON object (commits_per_sec, commit_p50_us, commit_p99_us,
  watch_p50_us, watch_p99_us, status_rtt_p50_us, failover_ms, failover_ms_max, target_failover_ms,
  ...). Progress and the members' logs go to stderr, each log line prefixed with the member's id.
  Members log warnings, but not openraft's (it warns of every message to a member killed on
  purpose), unless RUST_LOG is set: RUST_LOG=info shows elections and lease decisions.

Examples:
  kintsugi bench control
  kintsugi bench control --members 5 --ops 5000 --concurrency 8
  kintsugi bench control --members 1 --ops 500 --json")]
pub struct ControlBenchArgs {
    /// Control-plane members to start (1 to 7), one process each.
    #[arg(long, value_name = "M", default_value_t = 3)]
    pub members: usize,
    /// Commands committed in the throughput and latency phase.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub ops: u64,
    /// Concurrent writers of that phase (1 to 256), each an async task with its own connection and
    /// region. 1 measures the latency of one writer; more measure throughput under load.
    #[arg(long, value_name = "C", default_value_t = 1)]
    pub concurrency: usize,
    /// Leader kills to time (0 to 20); needs at least 3 members. Default: 3 with 3 or more members,
    /// 0 otherwise.
    #[arg(long, value_name = "K")]
    pub failovers: Option<u32>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl ControlBenchArgs {
    pub fn validate(self) -> anyhow::Result<ControlPlan> {
        if self.members == 0 || self.members > MEMBERS_MAX {
            bail!(
                "--members must be between 1 and {MEMBERS_MAX}, got {}",
                self.members
            );
        }
        if self.ops == 0 || self.ops > OPS_MAX {
            bail!("--ops must be between 1 and {OPS_MAX}, got {}", self.ops);
        }
        if self.concurrency == 0 || self.concurrency > CONCURRENCY_MAX {
            bail!(
                "--concurrency must be between 1 and {CONCURRENCY_MAX}, got {}",
                self.concurrency
            );
        }
        let failovers = match self.failovers {
            Some(k) if k > FAILOVERS_MAX => {
                bail!("--failovers must be between 0 and {FAILOVERS_MAX}, got {k}")
            }
            Some(k) if k > 0 && self.members < FAILOVER_MEMBERS_MIN => bail!(
                "--failovers {k} needs --members {FAILOVER_MEMBERS_MIN} or more (got {}): with fewer, killing \
                 the leader leaves no majority to elect another",
                self.members
            ),
            Some(k) => k,
            None if self.members >= FAILOVER_MEMBERS_MIN => FAILOVERS_DEFAULT,
            None => 0,
        };
        Ok(ControlPlan {
            members: self.members,
            ops: self.ops,
            concurrency: self.concurrency,
            failovers,
            json: self.json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(members: usize, ops: u64, concurrency: usize, failovers: Option<u32>) -> ControlBenchArgs {
        ControlBenchArgs {
            members,
            ops,
            concurrency,
            failovers,
            json: false,
        }
    }

    #[test]
    fn failovers_default_to_what_the_members_allow() {
        assert_eq!(args(3, 10, 1, None).validate().unwrap().failovers, 3);
        assert_eq!(args(1, 10, 1, None).validate().unwrap().failovers, 0);
        assert_eq!(args(2, 10, 1, Some(0)).validate().unwrap().failovers, 0);
    }

    #[test]
    fn refuses_out_of_range_flags_naming_them() {
        let cases = [
            (args(0, 10, 1, None), "--members"),
            (args(8, 10, 1, None), "--members"),
            (args(3, 0, 1, None), "--ops"),
            (args(3, 10, 0, None), "--concurrency"),
            (args(3, 10, 257, None), "--concurrency"),
            (args(3, 10, 1, Some(21)), "--failovers"),
            (args(2, 10, 1, Some(1)), "needs --members 3"),
        ];
        for (a, want) in cases {
            let err = a.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should mention {want:?}");
        }
    }
}
