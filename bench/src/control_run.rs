//! `kintsugi bench control`: the control plane as deployed (member processes
//! on loopback) measured through its API: commit throughput and latency,
//! how soon a watcher on a follower sees a map change, and how long the
//! cluster takes to commit again after its leader is killed.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Context;
use control_plane::api::ControlClient;
use control_plane::config::Timing;
use control_plane::raft::MemberId;
use control_plane::state::{Command, MemNodeId, MemNodeState, Outcome};
use fabric::{Epoch, RegionId};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;

use crate::control_plan::ControlPlan;
use crate::control_report::ControlReport;
use crate::poll::{call, wait_until, CALL_TIMEOUT, POLL};
use harness::control::{ControlPlane, MemberLogs};

/// Bytes each fake memory node offers: room for a region per writer, and
/// never the reason a command is refused.
const MEMNODE_BYTES: u64 = 1 << 40;
/// Bytes of each region: irrelevant to the control plane beyond accounting.
const REGION_BYTES: u64 = 1 << 20;
/// How long the leader may take to activate the fake memory nodes once
/// they renew (it judges leases every `timing.lease_check`, 20 ms).
const ACTIVATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for one command's acknowledgement in the commit and watch
/// phases (the members' own commit timeout is 5 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// GET /v1/status round trips timed for the yardstick.
const STATUS_SAMPLES: usize = 100;
/// Longest wait of one map long-poll; the watcher asks again after it.
const WATCH_WAIT: Duration = Duration::from_secs(5);
/// How long the watcher may take to see a committed epoch before the phase
/// fails: far more than any healthy follower needs (a heartbeat).
const WATCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of one write during a failover: a write sent to a member that
/// still forwards to the dead leader, or to a leader that lost its term,
/// is abandoned after this and sent to the next survivor.
const FAILOVER_TRY_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a quick refusal (no leader known yet) before the next try:
/// keeps the survivors from being flooded while they elect, at the cost of
/// this much resolution in the failover time.
const FAILOVER_RETRY_PAUSE: Duration = Duration::from_millis(2);
/// Give up on a failover after this long: something is broken.
const FAILOVER_GIVE_UP: Duration = Duration::from_secs(30);
/// How long a restarted member may take to catch up with the leader.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The commit phase: `ops` commands by `concurrency` writers.
pub struct CommitPhase {
    /// From the writers' common start to the last acknowledgement.
    pub elapsed: Duration,
    /// Send to acknowledgement, microseconds.
    pub latency: Histogram<u64>,
    /// Commits/s over the first and the last tenth of the acknowledgements:
    /// a rate that falls as the state (and its audit trail) grows would
    /// show here. It once did, when every apply re-encoded the state.
    pub first_tenth_per_sec: f64,
    /// Commits/s over the last tenth of the acknowledgements.
    pub last_tenth_per_sec: f64,
}

/// The watch phase.
pub struct WatchPhase {
    /// The member watched (a follower, unless there is one member only).
    pub member: MemberId,
    /// The watched member's role, as its `GET /v1/status` reported it.
    pub member_role: String,
    /// Acknowledgement to the watcher's receipt, microseconds, clamped at 0.
    pub gap: Histogram<u64>,
    /// Map changes the watcher received before the writer's acknowledgement.
    pub seen_before_ack: u64,
    /// GET /v1/status round trips to the same member, microseconds.
    pub status_rtt: Histogram<u64>,
}

/// One failover round.
pub struct Failover {
    /// The leader this round killed (SIGKILL).
    pub killed: MemberId,
    /// The survivor the first committed write was sent to (it forwards
    /// writes to the leader, so it need not be the leader).
    pub written_via: MemberId,
    /// The leader once it committed.
    pub new_leader: MemberId,
    /// SIGKILL to the first committed write.
    pub elapsed: Duration,
    /// Writes sent until one committed (that one included).
    pub tries: u32,
    /// Terms the failover took (1 unless a vote was split).
    pub failover_terms: u64,
    /// Restart of the killed member until it had applied what the leader
    /// had.
    pub rejoin: Duration,
    /// Terms begun while the killed member rejoined: elections it caused
    /// (each one a moment without a leader); 0 when it rejoined quietly.
    pub rejoin_terms: u64,
}

/// Everything a run measured.
pub struct ControlResults {
    /// The commit phase: throughput and latency.
    pub commit: CommitPhase,
    /// The watch phase: from a commit to a watcher seeing it.
    pub watch: WatchPhase,
    /// One per failover round, in the order run (none with `--failovers 0`).
    pub failovers: Vec<Failover>,
}

/// Runs `plan`: member processes started, measured, stopped.
pub fn run(plan: &ControlPlan) -> crate::Result<ControlReport> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start an async runtime")?;
    let results = rt.block_on(bench(plan))?;
    Ok(ControlReport { plan: *plan, results })
}

async fn bench(plan: &ControlPlan) -> crate::Result<ControlResults> {
    eprintln!("control bench: starting {} member process(es)", plan.members);
    let exe = std::env::current_exe().context("cannot find this executable to start members from")?;
    let mut cluster = ControlPlane::start(&exe, plan.members, None, MemberLogs::Forward)?;
    cluster.form().await.context("forming the cluster")?;
    let clients = cluster.clients()?;
    let (leader, _) = cluster.leader(&clients, CALL_TIMEOUT).await?;
    eprintln!(
        "control bench: cluster of {} formed, member {} leads; data in {}",
        plan.members,
        cluster.members[leader].id,
        cluster.dir().display()
    );

    let (nodes, renewer) = memnodes(&clients, &clients[leader]).await?;
    let mut regions = Vec::with_capacity(plan.concurrency);
    for _ in 0..plan.concurrency {
        regions.push(create_region(&clients[leader], nodes).await?);
    }

    eprintln!(
        "control bench: committing {} PromoteBackup command(s) with {} writer(s)",
        plan.ops, plan.concurrency
    );
    let commit = commit_phase(
        plan,
        &cluster.members[leader].addr,
        &cluster.token,
        regions.clone(),
    )
    .await?;

    let watched = (0..plan.members).find(|&i| i != leader).unwrap_or(leader);
    eprintln!(
        "control bench: watching member {} while committing {} more, one at a time",
        cluster.members[watched].id,
        plan.watch_ops()
    );
    let watch = watch_phase(plan, &cluster, leader, watched, regions[0]).await?;

    let mut failovers = Vec::with_capacity(plan.failovers as usize);
    for round in 0..plan.failovers {
        let f = failover(&mut cluster, &clients, round).await?;
        eprintln!(
            "control bench: failover {}/{}: killed leader {}, a write via member {} committed {:.1} ms later \
             ({} write(s) sent, {} new term(s)), member {} leads; member {} caught up {:.1} ms after \
             its restart ({} new term(s) meanwhile)",
            round + 1,
            plan.failovers,
            f.killed,
            f.written_via,
            ms(f.elapsed),
            f.tries,
            f.failover_terms,
            f.new_leader,
            f.killed,
            ms(f.rejoin),
            f.rejoin_terms,
        );
        failovers.push(f);
    }
    drop(renewer);
    Ok(ControlResults {
        commit,
        watch,
        failovers,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Latencies in whole microseconds (0 included), up to 1 min, 3 significant digits.
fn histogram() -> crate::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000, 3).context("cannot create a latency histogram")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
}

/// Aborts a background task when dropped, on every exit path.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Registers two fake memory nodes, keeps their leases renewed from a
/// background task (as a real memory node does: otherwise the leader would
/// declare them suspect, then dead, and its decisions would bump the epoch
/// in the middle of the measurements), and waits until the leader has
/// activated both (placement needs active nodes).
async fn memnodes(
    clients: &[ControlClient],
    leader: &ControlClient,
) -> crate::Result<([MemNodeId; 2], AbortOnDrop)> {
    let mut ids = [0; 2];
    for (i, id) in ids.iter_mut().enumerate() {
        let command = Command::RegisterMemNode {
            endpoint: format!("bench-mn-{i}:1"),
            capacity_bytes: MEMNODE_BYTES,
            image: None,
        };
        *id = match call(leader.command(&command))
            .await
            .context("registering a memory node")?
        {
            Outcome::MemNode(n) => n.id,
            other => crate::bail!("registering a memory node answered {other:?}"),
        };
    }
    let lease_ms = call(leader.renew_memnode(ids[0]))
        .await
        .context("renewing a memory node's lease")?
        .lease_ms;
    // A third of the lease is customary; a quarter leaves room for a
    // renewal lost to a killed member.
    let every = Duration::from_millis((lease_ms / 4).max(1));
    let renewer = AbortOnDrop(tokio::spawn(renew_forever(clients.to_vec(), ids, every)));
    let deadline = Instant::now() + ACTIVATE_TIMEOUT;
    wait_until(deadline, "the leader to activate the memory nodes", || async {
        let known = call(leader.memnodes()).await?;
        Ok(ids.iter().all(|id| {
            known
                .iter()
                .any(|n| n.id == *id && n.state == MemNodeState::Active)
        }))
    })
    .await?;
    Ok((ids, renewer))
}

/// Renews `ids` every `every`, through whichever member answers: a member
/// that fails (killed, no leader yet) is passed over for the next.
async fn renew_forever(clients: Vec<ControlClient>, ids: [MemNodeId; 2], every: Duration) {
    let mut at = 0;
    loop {
        for id in ids {
            let renewed = tokio::time::timeout(FAILOVER_TRY_TIMEOUT, clients[at].renew_memnode(id)).await;
            if !matches!(renewed, Ok(Ok(_))) {
                at = (at + 1) % clients.len();
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// A region and where its two replicas are.
#[derive(Clone, Copy, Debug)]
struct RegionTrack {
    id: RegionId,
    primary: MemNodeId,
    backup: MemNodeId,
    /// Promoted and not yet published again: the next command is the
    /// `RegionRestored` a promoter would send.
    restoring: bool,
}

impl RegionTrack {
    /// Reads where the region's primary and backup are now: the primary
    /// may have moved since the last answer was read.
    async fn refresh(&mut self, client: &ControlClient) -> crate::Result<()> {
        let now = call(client.regions()).await.context("reading the regions")?;
        let r = now
            .iter()
            .find(|r| r.id == self.id)
            .ok_or_else(|| crate::msg!("region {} has disappeared", self.id))?;
        self.primary = r.primary();
        self.restoring = r.restoring;
        self.backup = r
            .replicas
            .iter()
            .map(|l| l.node)
            .find(|&n| n != self.primary)
            .ok_or_else(|| crate::msg!("region {} has lost its backup", self.id))?;
        Ok(())
    }

    /// Promotes the backup (the primary becomes the backup), or publishes
    /// the region promoted by the previous call (`RegionRestored`, as the
    /// promoter does once it rebuilt the new primary), and checks the answer
    /// says so. Returns the epoch the change created: both change the map.
    async fn promote(&mut self, client: &ControlClient) -> crate::Result<Epoch> {
        if self.restoring {
            let command = Command::RegionRestored { region: self.id };
            let outcome = match tokio::time::timeout(COMMAND_TIMEOUT, client.command(&command)).await {
                Ok(r) => r.with_context(|| format!("{command:?} at {}", client.endpoint()))?,
                Err(_) => crate::bail!(
                    "{command:?} at {}: no answer within {COMMAND_TIMEOUT:?}",
                    client.endpoint()
                ),
            };
            return match outcome {
                Outcome::Region(r) if r.id == self.id && !r.restoring => {
                    self.restoring = false;
                    Ok(r.epoch)
                }
                other => crate::bail!("{command:?} answered {other:?}, not the region published"),
            };
        }
        let command = Command::PromoteBackup {
            region: self.id,
            node: self.backup,
            restorer: None,
        };
        let outcome = match tokio::time::timeout(COMMAND_TIMEOUT, client.command(&command)).await {
            Ok(r) => r.with_context(|| format!("{command:?} at {}", client.endpoint()))?,
            Err(_) => crate::bail!(
                "{command:?} at {}: no answer within {COMMAND_TIMEOUT:?}",
                client.endpoint()
            ),
        };
        match outcome {
            Outcome::Region(r)
                if r.id == self.id && r.replicas.first().map(|p| p.node) == Some(self.backup) =>
            {
                std::mem::swap(&mut self.primary, &mut self.backup);
                self.restoring = true;
                Ok(r.epoch)
            }
            other => {
                crate::bail!("{command:?} answered {other:?}, not the region with the backup as primary")
            }
        }
    }
}

async fn create_region(leader: &ControlClient, nodes: [MemNodeId; 2]) -> crate::Result<RegionTrack> {
    let command = Command::CreateRegion {
        size_bytes: REGION_BYTES,
        replicas: 2,
    };
    match call(leader.command(&command))
        .await
        .context("creating a region")?
    {
        Outcome::Region(r) => match r.replicas.as_slice() {
            [p, b] if nodes.contains(&p.node) && nodes.contains(&b.node) => Ok(RegionTrack {
                id: r.id,
                primary: p.node,
                backup: b.node,
                restoring: r.restoring,
            }),
            _ => crate::bail!(
                "region {} was placed on {:?}, not on the two bench nodes",
                r.id,
                r.replicas
            ),
        },
        other => crate::bail!("creating a region answered {other:?}"),
    }
}

/// A progress bar on stderr, unless stdout is for a machine or stderr is
/// not a terminal.
fn progress(plan: &ControlPlan, len: u64, what: &str) -> ProgressBar {
    if plan.json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} ({per_sec}, {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_owned());
    bar
}

/// `plan.ops` PromoteBackups sent to the leader by `plan.concurrency`
/// writers, each alternating the primary of its own region (writers on one
/// region would refuse each other's promotions).
async fn commit_phase(
    plan: &ControlPlan,
    leader_addr: &str,
    token: &str,
    regions: Vec<RegionTrack>,
) -> crate::Result<CommitPhase> {
    let bar = progress(plan, plan.ops, "committing");
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    // Writers open their connections first, then start together.
    let gate = Arc::new(tokio::sync::Barrier::new(plan.concurrency + 1));
    let mut writers = Vec::with_capacity(plan.concurrency);
    for mut region in regions {
        let client = ControlClient::new(leader_addr, Some(token.to_owned()))
            .with_context(|| format!("cannot make a client of the leader at {leader_addr}"))?;
        let (next, failed, gate, bar) = (next.clone(), failed.clone(), gate.clone(), bar.clone());
        let ops = plan.ops;
        writers.push(tokio::spawn(async move {
            let warmed = call(client.status())
                .await
                .context("warming up a writer's connection");
            gate.wait().await;
            warmed?;
            let mut latency = histogram()?;
            let mut acks = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < ops && !failed.load(Ordering::Relaxed) {
                let sent = Instant::now();
                if let Err(e) = region.promote(&client).await {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
                let acked = Instant::now();
                record(&mut latency, acked - sent);
                acks.push(acked);
                bar.inc(1);
            }
            Ok::<_, crate::BenchError>((latency, acks))
        }));
    }
    gate.wait().await;
    let start = Instant::now();
    let mut latency = histogram()?;
    let mut acks = Vec::with_capacity(plan.ops as usize);
    let mut first_error = None;
    for w in writers {
        match w
            .await
            .map_err(|e| crate::msg!("a writer task failed: {e}"))
            .and_then(|r| r)
        {
            Ok((l, a)) => {
                latency.add(l).context("merging latency histograms")?;
                acks.extend(a);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    bar.finish_and_clear();
    if let Some(e) = first_error {
        return Err(e.context("the commit phase failed"));
    }
    acks.sort_unstable();
    let last = *acks
        .last()
        .ok_or_else(|| crate::msg!("no command was committed"))?;
    let elapsed = last.saturating_duration_since(start);
    let overall = acks.len() as f64 / elapsed.as_secs_f64().max(1e-9);
    let (first_tenth_per_sec, last_tenth_per_sec) = tenths(&acks, start).unwrap_or((overall, overall));
    Ok(CommitPhase {
        elapsed,
        latency,
        first_tenth_per_sec,
        last_tenth_per_sec,
    })
}

/// Commits/s over the first and the last tenth of the sorted
/// acknowledgements; `None` with too few to tell.
fn tenths(acks: &[Instant], start: Instant) -> Option<(f64, f64)> {
    let n = acks.len();
    let tenth = n / 10;
    if tenth < 2 {
        return None;
    }
    let first = acks[tenth - 1].saturating_duration_since(start);
    // `tenth` acknowledgements after the one that ends the ninth tenth.
    let last = acks[n - 1].saturating_duration_since(acks[n - 1 - tenth]);
    Some((
        tenth as f64 / first.as_secs_f64().max(1e-9),
        tenth as f64 / last.as_secs_f64().max(1e-9),
    ))
}

/// Times GET /v1/status round trips to the watched member, then commits
/// `plan.watch_ops()` PromoteBackups on the leader one at a time, each once
/// the watcher has seen the previous one (so each change is seen on its
/// own, as map changes happen in practice, not carried by the next write's
/// replication).
async fn watch_phase(
    plan: &ControlPlan,
    cluster: &ControlPlane,
    leader: usize,
    watched: usize,
    mut region: RegionTrack,
) -> crate::Result<WatchPhase> {
    let writer = cluster.client(leader)?;
    let reader = cluster.client(watched)?;
    let watcher = cluster.client(watched)?;
    let member = cluster.members[watched].id;
    let (member_role, status_rtt) = status_round_trips(&reader, member).await?;
    region.refresh(&writer).await?;
    let start_epoch = call(watcher.map(None, None))
        .await
        .with_context(|| format!("the map of member {member}"))?
        .epoch();
    let (seen_tx, seen_rx) = tokio::sync::watch::channel(start_epoch);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watching = tokio::spawn(watch_epochs(watcher, member, start_epoch, seen_tx, stop_rx));
    let bar = progress(plan, plan.watch_ops(), "watching");
    let written = promote_and_wait(plan, &writer, &mut region, seen_rx, member, &bar).await;
    bar.finish_and_clear();
    let _ = stop_tx.send(());
    let seen = match watching.await {
        Ok(Ok(seen)) => seen,
        // The watcher's own error explains a writer's wait that timed out.
        Ok(Err(e)) => return Err(e),
        Err(e) => crate::bail!("the watcher task failed: {e}"),
    };
    let acks = written?;
    let mut gap = histogram()?;
    let mut seen_before_ack = 0;
    for (epoch, acked) in acks {
        let (_, at) = seen
            .iter()
            .find(|(e, _)| *e == epoch)
            .ok_or_else(|| crate::msg!("the watcher has no record of epoch {epoch}"))?;
        if *at < acked {
            seen_before_ack += 1;
        }
        record(&mut gap, at.saturating_duration_since(acked));
    }
    Ok(WatchPhase {
        member,
        member_role,
        gap,
        seen_before_ack,
        status_rtt,
    })
}

/// The watched member's role, and the round trips of its status calls.
async fn status_round_trips(
    reader: &ControlClient,
    member: MemberId,
) -> crate::Result<(String, Histogram<u64>)> {
    let role = call(reader.status())
        .await
        .context("status of the watched member")?
        .role;
    let mut status_rtt = histogram()?;
    for _ in 0..STATUS_SAMPLES {
        let sent = Instant::now();
        call(reader.status())
            .await
            .with_context(|| format!("status of member {member}"))?;
        record(&mut status_rtt, sent.elapsed());
    }
    Ok((role, status_rtt))
}

/// Long-polls member `member`'s map until stopped; every epoch it shows,
/// with when it showed (epochs a poll skipped were visible by then too),
/// the latest also sent on `seen_tx`.
async fn watch_epochs(
    watcher: ControlClient,
    member: MemberId,
    start_epoch: Epoch,
    seen_tx: tokio::sync::watch::Sender<Epoch>,
    mut stop_rx: tokio::sync::oneshot::Receiver<()>,
) -> crate::Result<Vec<(Epoch, Instant)>> {
    let mut last = start_epoch;
    let mut seen: Vec<(Epoch, Instant)> = Vec::new();
    loop {
        tokio::select! {
            _ = &mut stop_rx => return Ok(seen),
            map = watcher.map(Some(last), Some(WATCH_WAIT)) => {
                let at = Instant::now();
                let map = map.with_context(|| format!("watching the map of member {member}"))?;
                if map.epoch() > last {
                    seen.extend((last + 1..=map.epoch()).map(|e| (e, at)));
                    last = map.epoch();
                    let _ = seen_tx.send(last);
                }
            }
        }
    }
}

/// The watch phase's writes: each a promotion committed through the
/// leader, then a wait until the watcher has seen its epoch. Returns each
/// epoch with the instant its commit was acknowledged.
async fn promote_and_wait(
    plan: &ControlPlan,
    writer: &ControlClient,
    region: &mut RegionTrack,
    mut seen_rx: tokio::sync::watch::Receiver<Epoch>,
    member: MemberId,
    bar: &ProgressBar,
) -> crate::Result<Vec<(Epoch, Instant)>> {
    let mut acks = Vec::with_capacity(plan.watch_ops() as usize);
    for _ in 0..plan.watch_ops() {
        let epoch = region.promote(writer).await?;
        acks.push((epoch, Instant::now()));
        match tokio::time::timeout(WATCH_TIMEOUT, seen_rx.wait_for(|&e| e >= epoch)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => crate::bail!("the watcher stopped before it saw epoch {epoch}"),
            Err(_) => {
                crate::bail!(
                    "member {member} did not show epoch {epoch} within {WATCH_TIMEOUT:?} of its commit"
                )
            }
        }
        bar.inc(1);
    }
    Ok(acks)
}

/// Kills the leader, writes to the survivors until a write commits, then
/// restarts the killed member and waits until it has caught up and the
/// cluster has settled (so the next round starts from a quiet cluster).
async fn failover(
    cluster: &mut ControlPlane,
    clients: &[ControlClient],
    round: u32,
) -> crate::Result<Failover> {
    let (leader, before) = cluster.leader(clients, CALL_TIMEOUT).await?;
    let killed = cluster.members[leader].id;
    let survivors: Vec<usize> = (0..clients.len()).filter(|&i| i != leader).collect();
    let killed_at = cluster.kill(leader)?;

    let mut tries = 0u32;
    let mut last_error: String;
    let written_via = loop {
        let i = survivors[tries as usize % survivors.len()];
        tries += 1;
        // A fresh endpoint per try: a try abandoned at its timeout may
        // still commit, and a repeated endpoint would then be refused.
        let command = Command::RegisterMemNode {
            endpoint: format!("bench-failover-{round}-{tries}:1"),
            capacity_bytes: 1,
            image: None,
        };
        let sent = Instant::now();
        match tokio::time::timeout(FAILOVER_TRY_TIMEOUT, clients[i].command(&command)).await {
            Ok(Ok(Outcome::MemNode(_))) => break i,
            Ok(Ok(other)) => crate::bail!("{command:?} answered {other:?}"),
            Ok(Err(e)) => last_error = format!("member {}: {e}", cluster.members[i].id),
            Err(_) => {
                last_error = format!(
                    "member {}: no answer within {FAILOVER_TRY_TIMEOUT:?}",
                    cluster.members[i].id
                )
            }
        }
        if killed_at.elapsed() > FAILOVER_GIVE_UP {
            crate::bail!(
                "no write committed within {FAILOVER_GIVE_UP:?} of killing leader {killed} \
                 ({tries} tried; the last: {last_error})"
            );
        }
        if sent.elapsed() < FAILOVER_RETRY_PAUSE {
            tokio::time::sleep(FAILOVER_RETRY_PAUSE).await;
        }
    };
    let elapsed = killed_at.elapsed();
    let written_via = cluster.members[written_via].id;
    let (now_leading, after) = cluster.leader(clients, CALL_TIMEOUT).await?;
    let new_leader = cluster.members[now_leading].id;

    let restarted = Instant::now();
    cluster
        .restart(leader)
        .await
        .with_context(|| format!("restarting member {killed}"))?;
    let (caught_up, settled) = settle(cluster, clients, leader).await?;
    Ok(Failover {
        killed,
        written_via,
        new_leader,
        elapsed,
        tries,
        failover_terms: after.term.saturating_sub(before.term),
        rejoin: caught_up.saturating_duration_since(restarted),
        rejoin_terms: settled.saturating_sub(after.term),
    })
}

/// Waits until member `rejoining` has applied what the leader had applied
/// when it was asked, and every member reports the same leader and term
/// twice, an election timeout apart (a restarted member that hears from
/// no leader in time starts an election). Returns when it had caught up,
/// and the term agreed.
async fn settle(
    cluster: &ControlPlane,
    clients: &[ControlClient],
    rejoining: usize,
) -> crate::Result<(Instant, u64)> {
    let deadline = Instant::now() + REJOIN_TIMEOUT;
    let (_, leading) = cluster.leader(clients, CALL_TIMEOUT).await?;
    let target = leading.last_applied.unwrap_or(0);
    let id = cluster.members[rejoining].id;
    wait_until(
        deadline,
        &format!("member {id} to catch up with the leader (entry {target})"),
        || async {
            // Refused connections are expected while it opens its store.
            let s = tokio::time::timeout(POLL * 10, clients[rejoining].status()).await;
            Ok(matches!(s, Ok(Ok(s)) if s.last_applied.unwrap_or(0) >= target))
        },
    )
    .await?;
    let caught_up = Instant::now();
    let quiet = Timing::default().election_timeout_max;
    loop {
        let first = agreed(clients).await;
        tokio::time::sleep(quiet).await;
        let second = agreed(clients).await;
        if let (Some(a), Some(b)) = (first, second) {
            if a == b {
                return Ok((caught_up, a.1));
            }
        }
        if Instant::now() >= deadline {
            crate::bail!("the members did not agree on one leader and term within {REJOIN_TIMEOUT:?} of member {id}'s restart");
        }
    }
}

/// The (leader, term) every member reports, if they all report the same.
async fn agreed(clients: &[ControlClient]) -> Option<(MemberId, u64)> {
    let mut seen = None;
    for c in clients {
        let s = tokio::time::timeout(CALL_TIMEOUT, c.status()).await.ok()?.ok()?;
        let now = (s.leader?, s.term);
        if *seen.get_or_insert(now) != now {
            return None;
        }
    }
    seen
}
