//! The coordinator: one pass reads the replicated state and takes the
//! first step it calls for; [`Coordinator::run`] repeats passes while
//! this process's control-plane member leads.
//!
//! Steps, in the order a pass looks for them (module docs of the crate):
//!
//! 1. a replica on a dead node: `evict_replica` ([`Step::Evicted`]);
//! 2. a region being restored after a promotion: the new primary's
//!    primary-only words rebuilt, every log finished, `region_restored`
//!    ([`Step::Restored`], `cluster::Cluster::finish_promotion`);
//! 3. a region catching a joined replica up: [`crate::copy::catch_up`],
//!    `region_restored` ([`Step::CaughtUp`]);
//! 4. an expired client: its logs rolled at once ([`Step::RolledClient`]),
//!    and once its quarantine is over, rolled again and forgotten
//!    ([`Step::ForgotClient`]), which frees its owner ids;
//! 5. a region with fewer replicas than it was made with: `add_backup` on
//!    the roomiest spare ([`Step::AddedBackup`]), the copy
//!    ([`Step::Copied`]), `join_backup` ([`Step::Joined`]).
//!
//! What a pass decides depends on the replicated state only (and on the
//! checksums of a copy this coordinator made, which only save work), so a
//! coordinator that dies after any step leaves the next leader's one the
//! same work to finish.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, ClusterOptions};
use control_plane::state::{candidates, ClientId, ClientState, Command, MemNodeId, MemNodeState, Region};
use fabric::RegionId;

use crate::copy::{self, Copied};
use crate::metrics::{self as meter, PassOutcome};
use crate::RecoveryError;

/// Longest pause between passes when nothing wakes the coordinator
/// earlier (a map change wakes it at once): client expiries and
/// quarantines do not change the map.
pub const TICK: Duration = Duration::from_millis(20);

/// Longest a pass that copies nothing may take before it is abandoned and
/// begun again: a pass waits on the control plane and on memory nodes,
/// and one that waits for good must not stop recovery. Far beyond the
/// control plane's answers ([`cluster::members::MEMBER_TIMEOUT`] each) and a
/// fence.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// The slowest copy rate a pass is given time for, on top of
/// [`PASS_TIMEOUT`], for the largest region (a copy or catch-up reads it
/// whole): far below loopback tcp's.
pub const COPY_RATE_FLOOR_BYTES_PER_S: u64 = 16 << 20;

/// The name the coordinator joins the cluster under (it holds owner ids
/// for its repairs like any client, and shows in `ctl clients`).
pub const CLIENT_NAME: &str = "recovery";

/// Why [`Coordinator::run`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// This process's member no longer leads.
    NotLeading,
    /// The coordinator's own client lease was lost (why): it must join
    /// again to go on.
    LeaseLost(String),
}

/// A step of recovery, as taken (and as a test may stop the coordinator
/// right after).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// A dead node's replica was evicted.
    Evicted,
    /// A promoted primary was rebuilt and its region published.
    Restored,
    /// A joined replica was caught up and its region published.
    CaughtUp,
    /// An expired client's logs were rolled.
    RolledClient,
    /// An expired client was forgotten after its quarantine.
    ForgotClient,
    /// A new replica was placed on a spare node.
    AddedBackup,
    /// A new replica was copied.
    Copied,
    /// A copied replica joined the ones clients write.
    Joined,
}

impl Step {
    /// Every step, in the order of the module docs.
    pub const ALL: [Step; 8] = [
        Step::Evicted,
        Step::Restored,
        Step::CaughtUp,
        Step::RolledClient,
        Step::ForgotClient,
        Step::AddedBackup,
        Step::Copied,
        Step::Joined,
    ];

    /// Its name in configs and logs (`evicted`, `caught-up`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Step::Evicted => "evicted",
            Step::Restored => "restored",
            Step::CaughtUp => "caught-up",
            Step::RolledClient => "rolled-client",
            Step::ForgotClient => "forgot-client",
            Step::AddedBackup => "added-backup",
            Step::Copied => "copied",
            Step::Joined => "joined",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Step {
    type Err = String;
    fn from_str(s: &str) -> Result<Step, String> {
        Step::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Step::ALL.iter().map(|x| x.name()).collect();
            format!("unknown recovery step {s:?}; one of {}", names.join(", "))
        })
    }
}

/// Names the recovery steps after which a control-plane member running a
/// coordinator aborts (a comma-separated list of [`Step`] names, or
/// `each`): crash points of recovery itself, for tests. Read by
/// `kintsugi control`.
pub const RECOVERY_CRASH_ENV: &str = "KINTSUGI_RECOVERY_CRASH_AFTER";

/// A directory shared by the members: with it, each step of
/// [`RECOVERY_CRASH_ENV`] crashes one member once (the first to create the
/// step's mark file there), so the members that take over finish the work
/// instead of crashing at the same point in turn.
pub const RECOVERY_CRASH_ONCE_ENV: &str = "KINTSUGI_RECOVERY_CRASH_ONCE";

/// Called after every step taken, with the step, the region or client it
/// was about, and what it did in words.
pub type StepHook = Arc<dyn Fn(Step, u64, &str) + Send + Sync>;

/// How the coordinator works.
#[derive(Clone)]
pub struct RecoveryOptions {
    /// Longest pause between passes.
    pub tick: Duration,
    /// Make new replicas for regions that lost some.
    pub rereplicate: bool,
    /// Called after each step (logging, a timeline, or a test's crash).
    pub on_step: Option<StepHook>,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            tick: TICK,
            rereplicate: true,
            on_step: None,
        }
    }
}

impl std::fmt::Debug for RecoveryOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveryOptions")
            .field("tick", &self.tick)
            .field("rereplicate", &self.rereplicate)
            .finish_non_exhaustive()
    }
}

/// A recovery coordinator: a cluster client of its own that acts on the
/// control plane's decisions.
pub struct Coordinator {
    cluster: Cluster,
    options: RecoveryOptions,
    /// Copies this coordinator made, by region and node: their checksums
    /// spare the catch-up reading the new replica.
    copies: HashMap<(RegionId, MemNodeId), Copied>,
    /// Expired clients whose logs this coordinator has rolled.
    rolled: BTreeSet<ClientId>,
}

impl Coordinator {
    /// Joins the cluster at `endpoints` with `token` (which must be an
    /// operator's: recovery moves replicas).
    pub async fn connect<S: AsRef<str>>(
        endpoints: &[S],
        token: &str,
        options: RecoveryOptions,
    ) -> Result<Coordinator, RecoveryError> {
        let cluster = Cluster::connect_with(
            endpoints,
            token,
            ClusterOptions {
                name: CLIENT_NAME.into(),
                ..ClusterOptions::default()
            },
        )
        .await?;
        Ok(Coordinator {
            cluster,
            options,
            copies: HashMap::new(),
            rolled: BTreeSet::new(),
        })
    }

    /// The cluster client recovery works through.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Leaves the cluster.
    pub async fn close(self) -> Result<(), RecoveryError> {
        Ok(self.cluster.close().await?)
    }

    /// Runs passes while `leading()` holds and this coordinator's lease
    /// lasts; says which ended. A failed pass is logged and tried again
    /// after a tick.
    ///
    /// A coordinator whose lease was lost (a stall past it: the control
    /// plane expired it) issues no verb any more, so every pass would fail
    /// while its member leads, and recovery would stop: the caller joins
    /// again as a new client, and recovery rolls this one like any other.
    pub async fn run(&mut self, leading: &(dyn Fn() -> bool + Send + Sync)) -> Stopped {
        let mut epochs = self.cluster.epochs();
        loop {
            if !leading() {
                return Stopped::NotLeading;
            }
            if let Some(why) = self.cluster.lease_lost() {
                return Stopped::LeaseLost(why);
            }
            let timeout = self.pass_timeout();
            let started = Instant::now();
            match tokio::time::timeout(timeout, self.pass()).await {
                Ok(Ok(Some(_))) => {
                    meter::pass(started, PassOutcome::Step);
                    continue;
                }
                Ok(Ok(None)) => meter::pass(started, PassOutcome::Idle),
                Ok(Err(e)) => {
                    meter::pass(started, PassOutcome::Failed);
                    tracing::warn!(error = %e, "recovery step failed; trying again");
                }
                // Every step is safe to stop after any verb (a crashed
                // coordinator stops that way): the next pass redoes it.
                Err(_) => {
                    meter::pass(started, PassOutcome::Timeout);
                    tracing::warn!(
                        ?timeout,
                        "a recovery pass did not finish in time; abandoned and tried again"
                    );
                }
            }
            tokio::select! {
                _ = epochs.changed() => {}
                _ = tokio::time::sleep(self.options.tick) => {}
            }
        }
    }

    /// [`PASS_TIMEOUT`], and time to copy the largest region at
    /// [`COPY_RATE_FLOOR_BYTES_PER_S`].
    fn pass_timeout(&self) -> Duration {
        let bytes = self
            .cluster
            .map()
            .regions()
            .iter()
            .map(|r| r.size)
            .max()
            .unwrap_or(0);
        PASS_TIMEOUT + Duration::from_secs(bytes / COPY_RATE_FLOOR_BYTES_PER_S)
    }

    /// Looks at the state once and takes the first step it calls for
    /// (module docs). `None` when there is nothing to do.
    pub async fn pass(&mut self) -> Result<Option<Step>, RecoveryError> {
        let status = self.cluster.status().await?;
        let dead: BTreeSet<MemNodeId> = status
            .memnodes
            .iter()
            .filter(|n| n.state == MemNodeState::Dead)
            .map(|n| n.id)
            .collect();
        // Before any step: a dead node's image, where this host maps it,
        // refuses every map that may still route to it (older than the
        // current epoch, which is past its eviction once that is done), so
        // that no client reads it once a promoted primary serves writes.
        for &node in &dead {
            if let Some(now) = self.cluster.fence_dead(node, status.epoch) {
                tracing::trace!(node, epoch = now, "dead node's image fenced");
            }
        }
        for r in &status.regions {
            if let Some(l) = r
                .replicas
                .iter()
                .chain(&r.syncing)
                .find(|l| dead.contains(&l.node))
            {
                return self.evict(r, l.node).await.map(Some);
            }
        }
        // A region another live client is restoring (a `ctl region promote`)
        // is its to finish; if it dies, its claim lapses with its lease.
        let claimed_by_other = |r: &control_plane::state::Region| {
            r.restorer.is_some_and(|h| {
                h != self.cluster.id()
                    && status
                        .clients
                        .iter()
                        .any(|c| c.id == h && c.state == ClientState::Live)
            })
        };
        for r in status.regions.iter().filter(|r| !claimed_by_other(r)) {
            if r.restoring {
                let p = self.cluster.finish_promotion(r.id).await?;
                let what = format!(
                    "region {} restored on node {} ({} lock words rebuilt) in {} ms",
                    r.id,
                    p.primary,
                    p.lock_words,
                    p.published.as_millis()
                );
                return Ok(Some(self.took(Step::Restored, u64::from(r.id), &what)));
            }
            if let Some(node) = r.catching_up {
                return self.catch_up(r.id, node).await.map(Some);
            }
        }
        self.rolled
            .retain(|id| status.clients.iter().any(|c| c.id == *id));
        for c in status.clients.iter().filter(|c| c.state != ClientState::Live) {
            if !self.rolled.contains(&c.id) {
                // rtx logs at once; dtx logs after the client's quarantine
                // (its expiry and one more lease), when nothing it sent can
                // still land.
                let dtx_from_ms = match c.state {
                    ClientState::Expired { at_ms, .. } => at_ms.saturating_add(c.lease_ms),
                    _ => u64::MAX,
                };
                if self
                    .cluster
                    .finish_logs(&c.owners.ids(), true, dtx_from_ms)
                    .await?
                {
                    self.rolled.insert(c.id);
                    let what = format!("client {}'s logs rolled (owner ids {:?})", c.id, c.owners);
                    return Ok(Some(self.took(Step::RolledClient, c.id, &what)));
                }
                continue; // a commit under a live lease: next pass
            }
            if let Some(r) = self.cluster.forget_expired(c).await? {
                self.rolled.remove(&c.id);
                let what = format!(
                    "client {} forgotten after its unreferenced blocks were reclaimed ({} blocks, {} bytes, in {} data chunks); owner ids {:?} free",
                    c.id, r.blocks_free, r.bytes_free, r.data_chunks, c.owners
                );
                return Ok(Some(self.took(Step::ForgotClient, c.id, &what)));
            }
        }
        if self.options.rereplicate {
            for r in status.regions.iter().filter(|r| r.usable()) {
                if let Some(step) = self.rereplicate(r, &status.memnodes).await? {
                    return Ok(Some(step));
                }
            }
        }
        Ok(None)
    }

    async fn evict(&mut self, r: &Region, node: MemNodeId) -> Result<Step, RecoveryError> {
        let evict = Command::EvictReplica { region: r.id, node };
        self.cluster
            .command(&format!("evicting node {node} from region {}", r.id), &evict)
            .await?;
        self.copies.remove(&(r.id, node));
        let role = if r.primary() == node { "primary" } else { "backup" };
        let what = format!("dead node {node}'s replica ({role}) of region {} evicted", r.id);
        Ok(self.took(Step::Evicted, u64::from(r.id), &what))
    }

    async fn catch_up(&mut self, region: RegionId, node: MemNodeId) -> Result<Step, RecoveryError> {
        let start = Instant::now();
        self.cluster.claim_and_fence(region).await?;
        tokio::time::sleep(cluster::FENCE_SETTLE).await;
        let mut fabric = self.cluster.full_fabric().await?;
        let copied = self.copies.remove(&(region, node));
        let done = copy::catch_up(&mut fabric, region, node, copied.as_ref()).await?;
        // A writer cut off by the death that called for this replica may
        // have left a hash slot on some replicas only.
        let converged = self.cluster.converge_hash(region, &mut fabric).await?;
        let publish = Command::RegionRestored { region };
        self.cluster
            .command(&format!("publishing region {region}"), &publish)
            .await?;
        let what = format!(
            "node {node}'s replica of region {region} caught up: {} of {} chunks written again, {converged} hash word(s) converged; {} ms out of the map{}",
            done.chunks_written,
            done.chunks,
            start.elapsed().as_millis(),
            if copied.is_some() { "" } else { " (compared whole: the copy was another coordinator's)" }
        );
        Ok(self.took(Step::CaughtUp, u64::from(region), &what))
    }

    async fn rereplicate(
        &mut self,
        r: &Region,
        memnodes: &[control_plane::state::MemNode],
    ) -> Result<Option<Step>, RecoveryError> {
        // A copied replica joins; an allocated one is copied.
        for l in &r.syncing {
            if r.pending.contains(&l.node) {
                continue; // its node has not allocated it yet
            }
            if self.copies.contains_key(&(r.id, l.node)) {
                let join = Command::JoinBackup {
                    region: r.id,
                    node: l.node,
                };
                self.cluster
                    .command(&format!("joining node {} to region {}", l.node, r.id), &join)
                    .await?;
                let what = format!("node {}'s copy of region {} joined", l.node, r.id);
                return Ok(Some(self.took(Step::Joined, u64::from(r.id), &what)));
            }
            let mut fabric = self.cluster.full_fabric().await?;
            let mut shown = 0;
            let copied = copy::copy_replica(&mut fabric, r.id, l.node, &mut |done, total| {
                // Progress in tenths, for an operator tailing the log.
                let tenth = done * 10 / total.max(1);
                if tenth > shown {
                    shown = tenth;
                    tracing::info!(region = r.id, node = l.node, done, total, "copying a new replica");
                }
            })
            .await?;
            let what = format!(
                "region {} copied to node {}: {} bytes in {} ms ({:.2} GiB/s)",
                r.id,
                l.node,
                copied.bytes,
                copied.elapsed.as_millis(),
                copied.rate_bytes_per_s() / f64::from(1u32 << 30)
            );
            self.copies.insert((r.id, l.node), copied);
            return Ok(Some(self.took(Step::Copied, u64::from(r.id), &what)));
        }
        if r.replicas.len() + r.syncing.len() >= r.replication_target() {
            return Ok(None);
        }
        let holders: Vec<MemNodeId> = r.replicas.iter().chain(&r.syncing).map(|l| l.node).collect();
        let Some(&spare) = candidates(memnodes.iter(), r.size_bytes, &holders).first() else {
            return Ok(None); // no room anywhere: it stays short until a node joins
        };
        let add = Command::AddBackup {
            region: r.id,
            node: spare,
        };
        self.cluster
            .command(
                &format!("placing a new replica of region {} on node {}", r.id, spare),
                &add,
            )
            .await?;
        let what = format!(
            "region {} has {} of {} replicas: a new one placed on node {}",
            r.id,
            r.replicas.len(),
            r.replication_target(),
            spare
        );
        Ok(Some(self.took(Step::AddedBackup, u64::from(r.id), &what)))
    }

    fn took(&self, step: Step, about: u64, what: &str) -> Step {
        tracing::info!(step = step.name(), about, "{what}");
        meter::step(step);
        if let Some(hook) = &self.options.on_step {
            hook(step, about, what);
        }
        step
    }
}
