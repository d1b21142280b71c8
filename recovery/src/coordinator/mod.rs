//! The coordinator: a pass reads the replicated state and takes, for
//! every region and every expired client, the next step it calls for;
//! [`Coordinator::run`] repeats passes while this process's control-plane
//! member leads.
//!
//! Recovery is per region (`design.md` §1b): a pass takes at most one step
//! for each region and each client, in three rounds (module docs of the
//! crate):
//!
//! 1. for each region, the first of: a replica on a dead node evicted
//!    (`evict_replica`, [`Step::Evicted`]), or, where that node held the
//!    primary and no replica can take over, the region declared lost
//!    (`declare_region_lost`, also [`Step::Evicted`]); a region being
//!    restored after a promotion has the new primary's primary-only words
//!    rebuilt, every log finished, and is published (`region_restored`,
//!    [`Step::Restored`], `cluster::Cluster::finish_promotion`); a region
//!    catching a joined replica up is caught up ([`crate::copy::catch_up`],
//!    `region_restored`, [`Step::CaughtUp`]);
//! 2. for each expired client: its logs rolled at once
//!    ([`Step::RolledClient`]), and once its quarantine is over, rolled
//!    again and forgotten ([`Step::ForgotClient`]), which frees its owner
//!    ids. Finishing logs reads every index, so this waits while an
//!    index's region is out of the clients' map;
//! 3. for each usable region that round 1 left alone, with fewer replicas
//!    than it was made with: `add_backup` on the roomiest spare
//!    ([`Step::AddedBackup`]), the copy ([`Step::Copied`]), `join_backup`
//!    ([`Step::Joined`]).
//!
//! A step that fails, or outlasts its bound, ends nothing but itself: its
//! region or client is recorded as stuck (why, since when, how many
//! attempts) and left alone until its own backoff has passed, between
//! [`STUCK_BACKOFF_MIN`] and [`STUCK_BACKOFF_MAX`], while the others go
//! on. A lost region is left alone for good: only an operator's
//! `DropRegion` ends it. Stuck regions and clients and lost regions are
//! gauges ([`crate::metrics`]) and lines in the log.
//!
//! A copy and a catch-up WRITE a replica that clients do not route by,
//! so nothing but the coordinator stops a stale one. Each copy starts by
//! fencing the region at a new epoch (`FenceCopy`, waited for on every
//! holder's node), then fetches its map, then proves its member still
//! leads ([`RecoveryOptions::leader_proof`]), and writes with that map
//! only. A deposed leader's coordinator, paused mid-copy and resumed, is
//! refused twice over: its batches carry an epoch older than the next
//! copy's fence (the nodes answer `StaleEpoch`), and a copy it starts
//! again fails its proof. The catch-up does the same after
//! `claim_restore`'s fence.
//!
//! What a pass decides depends on the replicated state only (and on the
//! checksums of a copy this coordinator made, which only save work, and on
//! its backoffs, which only delay work), so a coordinator that dies after
//! any step leaves the next leader's one the same work to finish.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, ClusterError, ClusterOptions};
use control_plane::api::Status;
use control_plane::state::{
    Client, ClientId, ClientState, Command, IndexState, IndexVariant, MemNode, MemNodeId, MemNodeState,
    Outcome, Region,
};
use fabric::RegionId;

use crate::copy::Copied;
use crate::metrics::{self as meter, PassOutcome};
use crate::stuck::Backoffs;
pub use crate::stuck::{stuck_backoff, Stuck, Work, STUCK_BACKOFF_MAX, STUCK_BACKOFF_MIN};
use crate::RecoveryError;

mod refill;

/// Longest pause between passes when nothing wakes the coordinator
/// earlier (a map change wakes it at once): client expiries and
/// quarantines do not change the map.
pub const TICK: Duration = Duration::from_millis(20);

/// Longest the status read that begins a pass, or one step that copies
/// nothing, may take before it is abandoned: a step waits on the control
/// plane and on memory nodes, and one that waits for good must not stop
/// recovery (an abandoned step leaves its region or client stuck, and the
/// pass goes on). Far beyond the control plane's answers
/// ([`cluster::members::MEMBER_TIMEOUT`] each) and a fence.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// The slowest copy rate a step on a region is given time for, on top
/// of [`PASS_TIMEOUT`] (a copy or catch-up reads the region whole): far
/// below loopback tcp's.
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

/// Proves, now, with a quorum, that the coordinator's member leads (a
/// leader lease: `true` only if a majority acknowledged this member as
/// leader after the call began). Asked after a copy's map was fetched and
/// before its first WRITE (see [`Coordinator`]'s copies).
pub type LeaderProof = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// How the coordinator works.
#[derive(Clone)]
pub struct RecoveryOptions {
    /// Longest pause between passes.
    pub tick: Duration,
    /// Make new replicas for regions that lost some.
    pub rereplicate: bool,
    /// Called after each step (logging, a timeline, or a test's crash).
    pub on_step: Option<StepHook>,
    /// How a copy proves its member still leads; `None` for a coordinator
    /// that runs alone outside any member (a test, `bench recover`).
    pub leader_proof: Option<LeaderProof>,
    /// How the coordinator's own cluster client reaches the memory nodes:
    /// its request deadline (a copy to a node that does not answer gives
    /// up after it, and the region is tried again after its backoff) and,
    /// in tests, in-path proxies. Its name is always [`CLIENT_NAME`].
    pub client: ClusterOptions,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            tick: TICK,
            rereplicate: true,
            on_step: None,
            leader_proof: None,
            client: ClusterOptions::default(),
        }
    }
}

impl std::fmt::Debug for RecoveryOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveryOptions")
            .field("tick", &self.tick)
            .field("rereplicate", &self.rereplicate)
            .field("request_deadline", &self.client.request_deadline)
            .finish_non_exhaustive()
    }
}

/// The step a region calls for in a pass's first round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RegionAction {
    /// A replica (or a replica being made) is on this dead node.
    Evict(MemNodeId),
    /// Promoted: its new primary is to be rebuilt.
    Restore,
    /// This joined replica is to be caught up.
    CatchUp(MemNodeId),
}

/// What `r` calls for first in a pass's first round, if anything; a
/// region another live client is restoring is left to it (unless a
/// replica is dead, which only eviction mends).
fn region_action(r: &Region, dead: &BTreeSet<MemNodeId>, claimed_by_other: bool) -> Option<RegionAction> {
    if let Some(l) = r
        .replicas
        .iter()
        .chain(&r.syncing)
        .find(|l| dead.contains(&l.node))
    {
        return Some(RegionAction::Evict(l.node));
    }
    if claimed_by_other {
        return None;
    }
    if r.restoring {
        return Some(RegionAction::Restore);
    }
    r.catching_up.map(RegionAction::CatchUp)
}

/// Whether a backup of `r` could take over its primary, as this
/// coordinator sees it: one on a node that is not dead, allocated (not
/// pending), and not being caught up. It only picks which of eviction and
/// the region's loss is asked first; the control plane judges (`heir`
/// there), and refuses the other.
fn has_heir(r: &Region, memnodes: &[MemNode]) -> bool {
    let live = |id: MemNodeId| {
        memnodes
            .iter()
            .any(|n| n.id == id && n.state != MemNodeState::Dead)
    };
    r.replicas
        .iter()
        .skip(1)
        .any(|x| Some(x.node) != r.catching_up && !r.pending.contains(&x.node) && live(x.node))
}

/// How long one step on a region of `size_bytes` may take:
/// [`PASS_TIMEOUT`], and time to read it whole at
/// [`COPY_RATE_FLOOR_BYTES_PER_S`].
fn step_timeout(size_bytes: u64) -> Duration {
    PASS_TIMEOUT + Duration::from_secs(size_bytes / COPY_RATE_FLOOR_BYTES_PER_S)
}

/// Why finishing an expired client's logs cannot go on now, if it cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LogsWait {
    /// An index's region is out of the clients' map for a while (lost, or
    /// its recovery stuck): the clients are stuck on it, and say why.
    Blocked(String),
    /// An index's region is out of the map, or was moved by this pass, and
    /// recovery is at work on it: the next pass finds it back.
    Moving,
}

/// A recovery coordinator: a cluster client of its own that acts on the
/// control plane's decisions.
pub struct Coordinator {
    cluster: Cluster,
    options: RecoveryOptions,
    /// Copies this coordinator made, by region and node, with the replica
    /// generation each was made for: their checksums spare the catch-up
    /// reading the new replica. A copy counts only for the replica at that
    /// generation: one placed again since (evicted, re-added on the same
    /// node) is a new replica that no copy has filled yet.
    copies: HashMap<(RegionId, MemNodeId), (u64, Copied)>,
    /// Expired clients whose logs this coordinator has rolled.
    rolled: BTreeSet<ClientId>,
    /// Regions and clients whose last step failed.
    backoffs: Backoffs,
    /// Lost regions this coordinator has said so about in its log (once
    /// each).
    lost_seen: BTreeSet<RegionId>,
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
                ..options.client.clone()
            },
        )
        .await?;
        Ok(Coordinator {
            cluster,
            options,
            copies: HashMap::new(),
            rolled: BTreeSet::new(),
            backoffs: Backoffs::default(),
            lost_seen: BTreeSet::new(),
        })
    }

    /// The cluster client recovery works through.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The regions and clients whose last step failed, and why.
    pub fn stuck(&self) -> &BTreeMap<Work, Stuck> {
        &self.backoffs.stuck
    }

    /// Leaves the cluster.
    pub async fn close(self) -> Result<(), RecoveryError> {
        Ok(self.cluster.close().await?)
    }

    /// Leaves after this coordinator's member lost the lead: first gives
    /// back the restore claims it holds (a promotion it was restoring when
    /// it was paused or deposed), so that the new leader's coordinator
    /// claims them at once, then leaves as [`Coordinator::close`] does.
    /// Kept, a claim would hold the region out of the map until this
    /// client left or expired, and leaving itself waits for that region.
    pub async fn step_down(self) -> Result<(), RecoveryError> {
        let given = self.cluster.release_restore_claims().await?;
        if !given.is_empty() {
            tracing::info!(regions = ?given, "no longer leading: restore claims given back");
        }
        self.close().await
    }

    /// Runs passes while `leading()` holds and this coordinator's lease
    /// lasts; says which ended. A pass that fails (its status read: a
    /// step's failure fails only that step) is logged and tried again
    /// after a tick.
    ///
    /// A coordinator whose lease was lost (a stall past it: the control
    /// plane expired it) issues no verb any more, so every pass would fail
    /// while its member leads, and recovery would stop: the caller joins
    /// again as a new client, and recovery rolls this one like any other.
    pub async fn run(&mut self, leading: &(dyn Fn() -> bool + Send + Sync)) -> Stopped {
        let stopped = self.run_passes(leading).await;
        // Another member's coordinator reports from now on; this one's
        // gauges must not count what it no longer watches.
        meter::backlog(0, 0, 0);
        stopped
    }

    async fn run_passes(&mut self, leading: &(dyn Fn() -> bool + Send + Sync)) -> Stopped {
        let mut epochs = self.cluster.epochs();
        loop {
            if !leading() {
                return Stopped::NotLeading;
            }
            if let Some(why) = self.cluster.lease_lost() {
                return Stopped::LeaseLost(why);
            }
            let started = Instant::now();
            match self.pass().await {
                Ok(Some(_)) => {
                    meter::pass(started, PassOutcome::Step);
                    continue;
                }
                Ok(None) => meter::pass(started, PassOutcome::Idle),
                Err(e) => {
                    let outcome = match e {
                        RecoveryError::Cluster(ClusterError::Timeout { .. }) => PassOutcome::Timeout,
                        _ => PassOutcome::Failed,
                    };
                    meter::pass(started, outcome);
                    tracing::warn!(error = %e, "recovery pass failed; trying again");
                }
            }
            tokio::select! {
                _ = epochs.changed() => {}
                _ = tokio::time::sleep(self.options.tick) => {}
            }
        }
    }

    /// Looks at the state once and takes, for each region and each
    /// expired client, the next step it calls for (module docs). The first
    /// step taken, `None` when there was nothing to do (or all of it is
    /// stuck). Fails only when the state cannot be read: a step that fails
    /// leaves its region or client stuck, and the pass goes on.
    pub async fn pass(&mut self) -> Result<Option<Step>, RecoveryError> {
        let status = match tokio::time::timeout(PASS_TIMEOUT, self.cluster.status()).await {
            Ok(status) => status?,
            Err(_) => {
                return Err(ClusterError::Timeout {
                    what: "reading the control plane's status for a recovery pass".into(),
                    after: format!("{PASS_TIMEOUT:?}"),
                }
                .into())
            }
        };
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
        self.forget_gone(&status);
        let mut first = None;
        let moved = self.regions_round(&status, &dead, &mut first).await;
        self.clients_round(&status, &moved, &mut first).await;
        if self.options.rereplicate {
            self.rereplication_round(&status, &moved, &mut first).await;
        }
        let (regions_stuck, clients_stuck) = self.backoffs.counts();
        let lost = status.regions.iter().filter(|r| r.lost.is_some()).count();
        meter::backlog(regions_stuck, clients_stuck, lost);
        Ok(first)
    }

    /// Drops what no longer calls for recovery: backoffs of regions gone
    /// or lost and of clients forgotten, and the lost regions said so about
    /// that are gone. Says once in the log which regions are lost.
    fn forget_gone(&mut self, status: &Status) {
        let recoverable = |id: RegionId| status.regions.iter().any(|r| r.id == id && r.lost.is_none());
        let expired = |id: ClientId| {
            status
                .clients
                .iter()
                .any(|c| c.id == id && c.state != ClientState::Live)
        };
        self.backoffs.stuck.retain(|w, _| match *w {
            Work::Region(id) => recoverable(id),
            Work::Client(id) => expired(id),
        });
        self.lost_seen
            .retain(|id| status.regions.iter().any(|r| r.id == *id));
        for r in &status.regions {
            if let Some(why) = &r.lost {
                if self.lost_seen.insert(r.id) {
                    tracing::error!(
                        region = r.id,
                        "region {} is lost: {why}; recovery leaves it alone: an operator drops it \
                         (`kintsugi ctl region drop {} --confirm`), which frees its nodes",
                        r.id,
                        r.id
                    );
                }
            }
        }
    }

    /// Round 1: for each region not lost, the first of eviction (or its
    /// loss), restore, catch-up. Returns the regions it took or tried a
    /// step on: the status no longer says where they are.
    async fn regions_round(
        &mut self,
        status: &Status,
        dead: &BTreeSet<MemNodeId>,
        first: &mut Option<Step>,
    ) -> BTreeSet<RegionId> {
        let me = self.cluster.id();
        // A region another live client is restoring (a `ctl region
        // promote`) is its to finish; if it dies, its claim lapses with
        // its lease.
        let claimed_by_other = |r: &Region| {
            r.restorer.is_some_and(|h| {
                h != me
                    && status
                        .clients
                        .iter()
                        .any(|c| c.id == h && c.state == ClientState::Live)
            })
        };
        let mut moved = BTreeSet::new();
        for r in status.regions.iter().filter(|r| r.lost.is_none()) {
            let work = Work::Region(r.id);
            if !self.backoffs.due(work, Instant::now()) {
                continue;
            }
            let Some(action) = region_action(r, dead, claimed_by_other(r)) else {
                continue;
            };
            moved.insert(r.id);
            let limit = step_timeout(r.size_bytes);
            let done = tokio::time::timeout(limit, self.region_step(r, action, &status.memnodes)).await;
            if let Some(step) = self.settle(work, limit, done.map(|d| d.map(Some))) {
                first.get_or_insert(step);
            }
        }
        moved
    }

    async fn region_step(
        &mut self,
        r: &Region,
        action: RegionAction,
        memnodes: &[MemNode],
    ) -> Result<Step, RecoveryError> {
        match action {
            RegionAction::Evict(node) => self.evict(r, node, memnodes).await,
            RegionAction::Restore => {
                let p = self.cluster.finish_promotion(r.id).await?;
                let what = format!(
                    "region {} restored on node {} ({} lock words rebuilt) in {} ms",
                    r.id,
                    p.primary,
                    p.lock_words,
                    p.published.as_millis()
                );
                Ok(self.took(Step::Restored, u64::from(r.id), &what))
            }
            RegionAction::CatchUp(node) => self.catch_up(r.id, node, r.generation_of(node)).await,
        }
    }

    /// Round 2: for each expired client, its roll or its forgetting; none
    /// while finishing logs would wait on an index's region ([`LogsWait`]).
    async fn clients_round(&mut self, status: &Status, moved: &BTreeSet<RegionId>, first: &mut Option<Step>) {
        self.rolled
            .retain(|id| status.clients.iter().any(|c| c.id == *id));
        let expired: Vec<&Client> = status
            .clients
            .iter()
            .filter(|c| c.state != ClientState::Live)
            .collect();
        if expired.is_empty() {
            return;
        }
        match self.logs_wait(status, moved) {
            None => {}
            Some(LogsWait::Moving) => return,
            Some(LogsWait::Blocked(why)) => {
                for c in expired {
                    let work = Work::Client(c.id);
                    if self.backoffs.due(work, Instant::now()) {
                        self.stuck_now(work, why.clone());
                    }
                }
                return;
            }
        }
        for c in expired {
            let work = Work::Client(c.id);
            if !self.backoffs.due(work, Instant::now()) {
                continue;
            }
            let done = tokio::time::timeout(PASS_TIMEOUT, self.client_step(c)).await;
            if let Some(step) = self.settle(work, PASS_TIMEOUT, done) {
                first.get_or_insert(step);
            }
        }
    }

    /// Whether finishing a client's logs would wait now: it reads every
    /// ready index that has logs (`Cluster::finish_logs`), and waits, up to
    /// `cluster::OPEN_TIMEOUT`, for each one's region to be in the
    /// clients' map. A pass does not wait there: the steps that bring a
    /// region back are the coordinator's own. A lost region, or one whose
    /// recovery is stuck, holds the clients until it is dropped or moves
    /// again, and they are reported stuck on it.
    fn logs_wait(&self, status: &Status, moved: &BTreeSet<RegionId>) -> Option<LogsWait> {
        let regions = status
            .indexes
            .iter()
            .filter(|x| x.variant != IndexVariant::Optimal && x.state == IndexState::Ready)
            .filter_map(|x| Some((x, status.regions.iter().find(|r| r.id == x.region)?)));
        let mut wait = None;
        for (x, r) in regions {
            if let Some(why) = &r.lost {
                return Some(LogsWait::Blocked(format!(
                    "its logs are finished on every index, and index {:?}'s region {} is lost ({why}): \
                     it waits for an operator to drop that region (`kintsugi ctl region drop {} --confirm`)",
                    x.name, r.id, r.id
                )));
            }
            if moved.contains(&r.id) || !r.usable() {
                if let Some(s) = self.backoffs.get(Work::Region(r.id)).filter(|_| !r.usable()) {
                    wait = Some(LogsWait::Blocked(format!(
                        "its logs are finished on every index, and index {:?}'s region {} is out of the \
                         clients' map while its recovery is stuck ({} attempts): {}",
                        x.name, r.id, s.attempts, s.reason
                    )));
                } else if wait.is_none() {
                    wait = Some(LogsWait::Moving);
                }
            }
        }
        wait
    }

    async fn client_step(&mut self, c: &Client) -> Result<Option<Step>, RecoveryError> {
        if !self.rolled.contains(&c.id) {
            // rtx logs at once; dtx logs after the client's quarantine
            // (its expiry and one more lease), when nothing it sent can
            // still land.
            let dtx_from_ms = match c.state {
                ClientState::Expired { at_ms, .. } => at_ms.saturating_add(c.lease_ms),
                _ => u64::MAX,
            };
            if !self
                .cluster
                .finish_logs(&c.owners.ids(), true, dtx_from_ms)
                .await?
            {
                return Ok(None); // a commit under a live lease: next pass
            }
            self.rolled.insert(c.id);
            let what = format!("client {}'s logs rolled (owner ids {:?})", c.id, c.owners);
            return Ok(Some(self.took(Step::RolledClient, c.id, &what)));
        }
        let Some(r) = self.cluster.forget_expired(c).await? else {
            return Ok(None);
        };
        self.rolled.remove(&c.id);
        let what = format!(
            "client {} forgotten after its unreferenced blocks were reclaimed ({} blocks, {} bytes, in {} data chunks); owner ids {:?} free",
            c.id, r.blocks_free, r.bytes_free, r.data_chunks, c.owners
        );
        Ok(Some(self.took(Step::ForgotClient, c.id, &what)))
    }

    /// Round 3: a step of re-replication for each usable region with
    /// fewer replicas than it was made with that round 1 left alone.
    /// Placement counts the replicas this round placed: the status read
    /// at the start of the pass does not.
    async fn rereplication_round(
        &mut self,
        status: &Status,
        moved: &BTreeSet<RegionId>,
        first: &mut Option<Step>,
    ) {
        let mut memnodes = status.memnodes.clone();
        for r in status
            .regions
            .iter()
            .filter(|r| r.usable() && !moved.contains(&r.id))
        {
            let work = Work::Region(r.id);
            if !self.backoffs.due(work, Instant::now()) {
                continue;
            }
            let limit = step_timeout(r.size_bytes);
            let done = tokio::time::timeout(limit, self.rereplicate(r, &mut memnodes)).await;
            if let Some(step) = self.settle(work, limit, done) {
                first.get_or_insert(step);
            }
        }
    }

    /// Records how `work`'s step ended: a step taken, nothing to do, a
    /// failure, or a step abandoned past `limit`. Returns the step taken.
    fn settle(
        &mut self,
        work: Work,
        limit: Duration,
        done: Result<Result<Option<Step>, RecoveryError>, tokio::time::error::Elapsed>,
    ) -> Option<Step> {
        let why = match done {
            Ok(Ok(step)) => {
                if let Some(was) = self.backoffs.succeeded(work) {
                    tracing::info!(
                        %work,
                        attempts = was.attempts,
                        stuck_ms = was.since.elapsed().as_millis() as u64,
                        "{work} is no longer stuck"
                    );
                }
                return step;
            }
            Ok(Err(e)) => e.to_string(),
            // Every step is safe to stop after any verb (a crashed
            // coordinator stops that way): the next attempt redoes it.
            Err(_) => format!("its step did not finish within {limit:?} and was abandoned"),
        };
        self.stuck_now(work, why);
        None
    }

    /// Records that `work` cannot go on now, and why: left alone until
    /// its backoff has passed.
    fn stuck_now(&mut self, work: Work, why: String) {
        let now = Instant::now();
        let s = self.backoffs.failed(work, why, now);
        tracing::warn!(
            %work,
            attempts = s.attempts,
            stuck_ms = now.duration_since(s.since).as_millis() as u64,
            retry_in_ms = s.retry_at.duration_since(now).as_millis() as u64,
            reason = %s.reason,
            "recovery of {work} is stuck; tried again after its backoff while the other regions and clients go on"
        );
    }

    /// Drops dead node `node`'s replica of `r`, or, where it holds the
    /// primary and no replica can take over, declares `r` lost. The control
    /// plane judges which applies; this coordinator's view ([`has_heir`])
    /// only picks which to ask first, and the other follows its refusal
    /// (409), which costs no log entry.
    async fn evict(
        &mut self,
        r: &Region,
        node: MemNodeId,
        memnodes: &[MemNode],
    ) -> Result<Step, RecoveryError> {
        let evict = (
            format!("evicting node {node} from region {}", r.id),
            Command::EvictReplica { region: r.id, node },
        );
        let primary = r.primary() == node;
        let outcome = if primary {
            let lose = (
                format!("declaring region {} lost with node {node}", r.id),
                Command::DeclareRegionLost { region: r.id },
            );
            let (ask, then) = if has_heir(r, memnodes) {
                (evict, lose)
            } else {
                (lose, evict)
            };
            match self.cluster.command(&ask.0, &ask.1).await {
                Err(e) if e.refused_with(409) => {
                    tracing::debug!(region = r.id, node, error = %e, "refused; asking the other way");
                    self.cluster.command(&then.0, &then.1).await?
                }
                other => other?,
            }
        } else {
            self.cluster.command(&evict.0, &evict.1).await?
        };
        self.copies.remove(&(r.id, node));
        if let Outcome::Region(x) = &outcome {
            if let Some(why) = &x.lost {
                self.lost_seen.insert(r.id);
                tracing::error!(
                    region = r.id,
                    node,
                    "region {} is lost: {why}; recovery leaves it alone: an operator drops it \
                     (`kintsugi ctl region drop {} --confirm`), which frees its nodes",
                    r.id,
                    r.id
                );
                let what = format!("region {} declared lost with dead node {node}", r.id);
                return Ok(self.took(Step::Evicted, u64::from(r.id), &what));
            }
        }
        let role = if primary { "primary" } else { "backup" };
        let what = format!("dead node {node}'s replica ({role}) of region {} evicted", r.id);
        Ok(self.took(Step::Evicted, u64::from(r.id), &what))
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
