//! The faults of a local-cluster run, as injected, and the phases each is
//! watched through on the control plane: a memory node killed, restarted,
//! paused, cut off or wiped (killed and started again without its image);
//! the Raft leader killed, paused past an election or moved (the last two
//! while recovery is at work); a client's clock skewed or its links to the
//! members cut.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, ClusterOptions};
use control_plane::state::{ClientState, MemNodeId, MemNodeState, Region};
use harness::control::ControlPlane;
use harness::local::LocalCluster;
use nix::sys::signal::Signal;

use super::leader::{kill_leader, pause_leader, transfer_leader};
pub(super) use super::outcome::{Injected, Phases};
pub(super) use super::watch::{Status, Watch, MEMBER_READ_TIMEOUT};
use super::{local_error, PHASE_TIMEOUT};
use crate::experiment::{Fault, FaultKind, PartitionTarget, ReplicaRole};
use crate::run::partition::Links;
use crate::run::workers::{self, WorkersReport, WorkersSpec};
use crate::run::RunError;

/// How long a paused node that was not declared dead is watched after it
/// resumes: a few memory-node leases, for a late detection to show.
const PAUSE_SETTLE: Duration = Duration::from_millis(500);
/// How often the control plane is asked while a phase is awaited.
pub(super) const PHASE_POLL: Duration = Duration::from_millis(2);
/// How long a wiped node is watched for its dead decision before the
/// runner concludes it was taken back under its old record (serving its
/// empty image). The decision does not wait for the memory-node lease: it
/// comes when the new process registers with its new image id, which it
/// does first thing, well within a second of the wipe even on a loaded
/// machine. Ten seconds is far past that.
const WIPE_DEAD_WAIT: Duration = Duration::from_secs(10);
/// How long a wiped node that was taken in again may take to say it
/// listens: it does so just before its first renewal, which made it
/// active.
const WIPED_LISTEN_WAIT: Duration = Duration::from_secs(10);
/// How long the clients write on between the region made whole after the
/// kill and the restore (`snapshot-restore`): writes the snapshot knows
/// nothing of, on replicas it names in other roles.
const WRITE_ON_BEFORE_RESTORE: Duration = Duration::from_millis(300);

/// What the faults act on, and what they leave for the end of the run.
pub(super) struct Injector<'a> {
    /// The control plane's state, as the phases are watched.
    pub watch: &'a Watch,
    /// The processes.
    pub local: &'a mut LocalCluster,
    /// The index's region.
    pub region: fabric::RegionId,
    /// The region of the first single-copy side index (`sole-copy`).
    pub sole: Option<fabric::RegionId>,
    /// The run's clock.
    pub t0: Instant,
    /// The clients' sessions, by client number.
    pub sessions: &'a [Arc<Cluster>],
    /// Each client session's proxies to the members.
    pub session_links: &'a [Links],
    /// Each memory node's proxies to the members, by node number (from 1).
    pub node_links: &'a BTreeMap<usize, Links>,
    /// The runner's own session's proxies to the members.
    pub runner_links: &'a Links,
    /// The members' addresses now (moved by a `snapshot-restore`).
    pub control: Vec<String>,
    /// The control plane's lease of a client.
    pub client_lease: Duration,
    /// Memory nodes killed and not restarted: (process, node).
    pub killed: Vec<(usize, MemNodeId)>,
    /// Skews to undo when their time comes.
    pub skews: Vec<tokio::task::JoinHandle<()>>,
    /// Clients a partition cut off long enough to lose their lease: an
    /// error that stopped their tasks is that, as it must be.
    pub cut_off: Vec<usize>,
    /// Each client session's proxies to the memory nodes, in process order
    /// (tcp; empty otherwise).
    pub data_links: &'a [Links],
    /// What an heir needs to join and work (`late-delivery`).
    pub heir_kit: HeirKit<'a>,
    /// The heirs that joined, kept to the end of the run.
    pub heirs: Vec<Arc<Cluster>>,
    /// Their workloads, joined at the end of the run.
    pub heir_work: Vec<tokio::task::JoinHandle<Result<WorkersReport, cluster::ClusterError>>>,
}

/// How a `late-delivery`'s heir joins (as the clients did) and works.
pub(super) struct HeirKit<'a> {
    /// The client token.
    pub token: &'a str,
    /// The options the clients joined with.
    pub options: ClusterOptions,
    /// The clients' workload.
    pub spec: &'a WorkersSpec,
    /// Tasks per client.
    pub threads: usize,
    /// The run's stop flag and op counter.
    pub stop: Arc<AtomicBool>,
    pub ops: Arc<AtomicU64>,
}

/// How long an heir works after the late client's frames are delivered:
/// a few hundred rounds of its locks and logs, which those frames would
/// have hit.
const HEIR_WORK_AFTER_DELIVERY: Duration = Duration::from_millis(500);
/// How long a `late-delivery` waits for a batch of the client's to be held
/// before it cuts the client's lease: its tasks issue one every few
/// milliseconds.
const HOLD_WAIT: Duration = Duration::from_secs(1);
/// Process ids between two heirs' first tasks: room for their
/// incarnations (a new one after each write in doubt).
const HEIR_PROCESS_SPACING_BITS: u32 = 16;
/// How long the heir works under its ids before the delivery: long enough
/// to hold locks and write its log slot, which the held frames target.
const HEIR_WORK_BEFORE_DELIVERY: Duration = Duration::from_millis(200);

impl<'a> Injector<'a> {
    /// Injects `f` now and watches it through its phases (or
    /// [`PHASE_TIMEOUT`]).
    pub async fn inject(&mut self, f: &Fault) -> Result<Injected, RunError> {
        let (watch, region, t0) = (self.watch, self.region, self.t0);
        Ok(match f.kind {
            FaultKind::PartitionData => {
                let links = self.client_data_links(f.client)?;
                let which = match f.role {
                    Some(_) => vec![node_by_role(watch, self.local, region, f.role).await?.1],
                    None => Vec::new(),
                };
                let pause = f.pause.unwrap_or_default();
                let held_before = links.held_bytes();
                links.set_cut(&which, true);
                let at = Instant::now();
                tokio::time::sleep_until((at + pause).into()).await;
                links.set_cut(&which, false);
                let phases = Phases {
                    resumed_ms: Some(at.elapsed().as_secs_f64() * 1e3),
                    held_bytes: Some(links.held_bytes() - held_before),
                    ..Phases::default()
                };
                Injected::new(f, f.client as MemNodeId, (at, t0), phases)
            }
            FaultKind::LateDelivery => {
                let (phases, at) = self.late_delivery(f.client).await?;
                Injected::new(f, f.client as MemNodeId, (at, t0), phases)
            }
            FaultKind::Partition if f.target == Some(PartitionTarget::Client) => {
                let links = self
                    .session_links
                    .get(f.client as usize)
                    .ok_or_else(|| RunError::Process(format!("no client {}", f.client)))?;
                let members = member_indexes(&f.members);
                let pause = f.pause.unwrap_or_default();
                links.set_cut(&members, true);
                let at = Instant::now();
                tokio::time::sleep_until((at + pause).into()).await;
                links.set_cut(&members, false);
                if pause * 3 >= self.client_lease {
                    // Renewals go every third of the lease: cut off longer, its
                    // lease may lapse by its own reckoning (and the control
                    // plane may expire it), and then its tasks must stop with
                    // an error.
                    self.cut_off.push(f.client as usize);
                }
                let phases = Phases {
                    resumed_ms: Some(at.elapsed().as_secs_f64() * 1e3),
                    ..Phases::default()
                };
                Injected::new(f, f.client as MemNodeId, (at, t0), phases)
            }
            FaultKind::Partition => {
                let (node, process) = node_by_role(watch, self.local, region, f.role).await?;
                let links = self.node_links.get(&(process + 1)).ok_or_else(|| {
                    RunError::Process(format!("memory node process {process} has no proxies"))
                })?;
                let members = member_indexes(&f.members);
                let pause = f.pause.unwrap_or_default();
                links.set_cut(&members, true);
                let at = Instant::now();
                let heal = async {
                    tokio::time::sleep_until((at + pause).into()).await;
                    links.set_cut(&members, false);
                    Instant::now()
                };
                let (phases, healed) = tokio::join!(watch_pause(watch, region, node, at, pause), heal);
                let mut phases = phases?;
                phases.resumed_ms = Some((healed - at).as_secs_f64() * 1e3);
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::KillMemnode if f.role == Some(ReplicaRole::SoleCopy) => {
                let sole = self.sole.ok_or_else(|| {
                    RunError::Process("a sole-copy kill with no single-copy side index".into())
                })?;
                let (node, _) = node_by_role(watch, self.local, sole, Some(ReplicaRole::Primary)).await?;
                // Whether the checked index loses a replica with it too.
                let shared = watch.status().await?.region(region)?.on(node);
                let (node, at) = self.kill_by_role(f.role).await?;
                let phases = watch_sole_loss(watch, (region, shared), sole, node, at).await?;
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::KillMemnode => {
                let (node, at) = self.kill_by_role(f.role).await?;
                let phases = watch_loss(watch, region, node, at, Phases::default()).await?;
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::PauseMemnode => {
                let (node, process) = node_by_role(watch, self.local, region, f.role).await?;
                let p = self
                    .local
                    .memnode(process)
                    .ok_or_else(|| RunError::Process(format!("no memory node process {process}")))?;
                let pause = f.pause.unwrap_or_default();
                p.signal(Signal::SIGSTOP)?;
                let at = Instant::now();
                let pid = p.pid();
                let resume = async move {
                    tokio::time::sleep_until((at + pause).into()).await;
                    let sent = pid.map(|pid| nix::sys::signal::kill(pid, Signal::SIGCONT));
                    (Instant::now(), sent)
                };
                let (phases, (resumed, sent)) =
                    tokio::join!(watch_pause(watch, region, node, at, pause), resume);
                if let Some(Err(e)) = sent {
                    return Err(RunError::Process(format!(
                        "cannot SIGCONT memory node {node}: {e}"
                    )));
                }
                let mut phases = phases?;
                phases.resumed_ms = Some((resumed - at).as_secs_f64() * 1e3);
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::WipeMemnode => {
                let (node, process) = node_by_role(watch, self.local, region, f.role).await?;
                let image = watch.status().await?.image_of(node);
                let at = self.local.wipe_memnode(process).map_err(local_error)?;
                let phases = watch_wipe(watch, region, node, image, at).await?;
                if phases.active_ms.is_some() {
                    // Taken in again, it has said where it listens (its
                    // stdout is drained from then on). Off the async
                    // workers' hands: this blocks, briefly.
                    tokio::task::block_in_place(|| self.local.await_memnode(process, WIPED_LISTEN_WAIT))
                        .map_err(local_error)?;
                }
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::RestartMemnode => {
                let (process, node) = self
                    .killed
                    .pop()
                    .ok_or_else(|| RunError::Process("a restart with no node killed".into()))?;
                self.local.restart_memnode(process).map_err(local_error)?;
                let at = Instant::now();
                let phases = watch_restart(watch, node, at).await?;
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::KillControlLeader => {
                let (member, at, phases) = kill_leader(self.local, f.pause).await?;
                Injected::new(f, member, (at, t0), phases)
            }
            FaultKind::PauseControlLeader | FaultKind::TransferLeader => {
                // With a role: that node killed first, and the leader
                // faulted once recovery is at work on the region.
                let (lost, at) = match f.role {
                    Some(role) => {
                        let (node, at) = self.kill_by_role(Some(role)).await?;
                        let mut phases = Phases::default();
                        await_recovery_at_work(watch, region, node, at, &mut phases).await?;
                        (Some((node, phases)), at)
                    }
                    None => (None, Instant::now()),
                };
                let lost_node = lost.as_ref().map(|(node, _)| *node);
                let control: &ControlPlane = self.local.control();
                let leader_fault = async {
                    match f.pause {
                        Some(pause) if f.kind == FaultKind::PauseControlLeader => {
                            pause_leader(control, watch, pause, at).await
                        }
                        _ => transfer_leader(control, at).await,
                    }
                };
                let loss = async {
                    match lost {
                        Some((node, phases)) => watch_loss(watch, region, node, at, phases).await.map(Some),
                        None => Ok(None),
                    }
                };
                let (leader, phases) = tokio::join!(leader_fault, loss);
                let (member, leader_phases) = leader?;
                let phases = phases?.unwrap_or_default().with_leader(leader_phases);
                let node = lost_node.unwrap_or(member);
                Injected {
                    leader: Some(member),
                    ..Injected::new(f, node, (at, t0), phases)
                }
            }
            FaultKind::SnapshotRestore => {
                let snapshot = {
                    let control = self.local.control();
                    let clients = control.clients().map_err(control_error)?;
                    let (leader, _) = control
                        .leader(&clients, PHASE_TIMEOUT)
                        .await
                        .map_err(control_error)?;
                    clients[leader]
                        .snapshot()
                        .await
                        .map_err(|e| RunError::Control(format!("cannot save a snapshot: {e}")))?
                };
                let (node, at) = self.kill_by_role(f.role).await?;
                let mut phases = watch_loss(watch, region, node, at, Phases::default()).await?;
                tokio::time::sleep(WRITE_ON_BEFORE_RESTORE).await;
                self.restore(&snapshot).await?;
                phases.restored_ms = Some(ms_since(at));
                if let Some(after) = f.pause {
                    // The killed node back from its image, pointed at the
                    // restored cluster (its links already are).
                    tokio::time::sleep(after).await;
                    let (process, back) = self
                        .killed
                        .pop()
                        .ok_or_else(|| RunError::Process("no killed node to start again".into()))?;
                    debug_assert_eq!(back, node);
                    self.local.restart_memnode(process).map_err(local_error)?;
                    phases.active_ms = Some(ms_since(at));
                }
                // A node started again may hold a new replica, refilled.
                let gone = f.pause.is_none().then_some(node);
                phases.restored_whole_ms = watch_restored(watch, region, gone, at).await?;
                Injected::new(f, node, (at, t0), phases)
            }
            FaultKind::ClockSkew => {
                let skew = f.skew_ms.unwrap_or_default();
                let faults = self
                    .sessions
                    .get(f.client as usize)
                    .and_then(|s| s.faults())
                    .ok_or_else(|| RunError::Process(format!("no client {}", f.client)))?
                    .clone();
                faults.set_clock_skew_ms(skew);
                let at = Instant::now();
                if let Some(d) = f.pause {
                    self.skews.push(tokio::spawn(async move {
                        tokio::time::sleep_until((at + d).into()).await;
                        faults.set_clock_skew_ms(0);
                    }));
                }
                Injected::new(f, f.client as MemNodeId, (at, t0), Phases::default())
            }
            FaultKind::KillClient | FaultKind::PauseClient => {
                return Err(RunError::Process(format!(
                    "{} is not a local-cluster fault",
                    f.kind
                )));
            }
        })
    }

    /// Restores `snapshot` into a fresh control plane (as many new members,
    /// the same tokens, in `restored/` of the cluster's directory), kills
    /// the old one and points every process's links, and the runner's
    /// watch, at the new members: what an operator does when the old
    /// cluster's state is gone (docs/operations.md §7), with the memory
    /// nodes keeping their images and addresses.
    async fn restore(&mut self, snapshot: &control_plane::api::Snapshot) -> Result<(), RunError> {
        let dir = self.local.dir().join("restored");
        let successor = self
            .local
            .control()
            .start_successor(&dir)
            .map_err(control_error)?;
        successor.form().await.map_err(control_error)?;
        successor
            .client(0)
            .map_err(control_error)?
            .restore(snapshot)
            .await
            .map_err(|e| RunError::Control(format!("cannot restore the snapshot: {e}")))?;
        let endpoints: Vec<String> = successor.members.iter().map(|m| m.addr.clone()).collect();
        // Dropped, the old members are killed.
        drop(self.local.replace_control(successor));
        for links in self
            .session_links
            .iter()
            .chain(self.node_links.values())
            .chain([self.runner_links])
        {
            links.retarget(&endpoints);
        }
        self.watch.retarget(&endpoints)?;
        tracing::info!(members = ?endpoints, "snapshot restored into a fresh control plane");
        self.control = endpoints;
        Ok(())
    }

    /// SIGKILLs the node holding the region's `role` replica; it stays
    /// down (a `restart-memnode` may bring it back). Returns it and when
    /// it was killed.
    /// Client `client`'s proxies to the memory nodes.
    fn client_data_links(&self, client: u32) -> Result<&'a Links, RunError> {
        let links: &'a [Links] = self.data_links;
        links
            .get(client as usize)
            .filter(|l| !l.0.is_empty())
            .ok_or_else(|| RunError::Process(format!("client {client} has no data-path proxies (tcp only)")))
    }

    /// `late-delivery` of `client`: its data path held and its control
    /// links cut until the control plane has expired and forgotten it, an
    /// heir joined with its owner ids and has worked under them for a
    /// while; then the network delivers everything at once. The heir works
    /// on past the delivery, its operations recorded with the others'.
    async fn late_delivery(&mut self, client: u32) -> Result<(Phases, Instant), RunError> {
        let c = client as usize;
        let data = self.client_data_links(client)?;
        let (session_links, sessions): (&'a [Links], &'a [Arc<Cluster>]) =
            (self.session_links, self.sessions);
        let control = session_links
            .get(c)
            .ok_or_else(|| RunError::Process(format!("no client {client}")))?;
        let session = sessions
            .get(c)
            .ok_or_else(|| RunError::Process(format!("no client {client}")))?;
        let (id, owners) = (session.id(), session.owner_ids());
        let held_before = data.held_bytes();
        data.set_hold(&[], true);
        // A batch of the client's in the network before it is cut from the
        // control plane too: what the heir's memory must not receive. (A
        // client idle for that long is cut off all the same.)
        let holding = Instant::now();
        while data.held_bytes() == held_before && holding.elapsed() < HOLD_WAIT {
            tokio::time::sleep(PHASE_POLL).await;
        }

        control.set_cut(&[], true);
        // Its lease lapses: the error that stops its tasks is that.
        self.cut_off.push(c);
        let at = Instant::now();
        let ms = |t: Instant| (t - at).as_secs_f64() * 1e3;
        let mut p = Phases::default();
        while at.elapsed() < PHASE_TIMEOUT {
            let status = self.watch.status().await?;
            let now = Instant::now();
            match status.0.clients.iter().find(|x| x.id == id) {
                Some(x) if matches!(x.state, ClientState::Expired { .. }) => {
                    p.expired_ms.get_or_insert(ms(now));
                }
                Some(_) => {}
                None => {
                    p.expired_ms.get_or_insert(ms(now));
                    p.forgotten_ms = Some(ms(now));
                    break;
                }
            }
            tokio::time::sleep(PHASE_POLL).await;
        }
        if p.forgotten_ms.is_some() {
            let kit = &self.heir_kit;
            let n = self.heirs.len();
            let heir = Cluster::connect_with(
                &self.control,
                kit.token,
                ClusterOptions {
                    name: format!("chaos-heir-{n}"),
                    data_path_via: Vec::new(),
                    ..kit.options.clone()
                },
            )
            .await
            .map_err(RunError::index("an heir cannot join the cluster"))?;
            // Only an heir of the same ids is the fault's point: one that
            // got others is told by its phase missing.
            if heir.owner_ids() == owners {
                p.heir_ms = Some(ms(Instant::now()));
            } else {
                tracing::warn!(
                    late = ?owners,
                    heir = ?heir.owner_ids(),
                    "the heir did not get the forgotten client's owner ids"
                );
            }
            let heir = Arc::new(heir);
            let first = workers::HEIR_PROCESS + ((n as u64) << HEIR_PROCESS_SPACING_BITS);
            let until = Instant::now() + HEIR_WORK_BEFORE_DELIVERY + HEIR_WORK_AFTER_DELIVERY;
            let (sessions, spec, threads) = (vec![heir.clone()], kit.spec.clone(), kit.threads);
            let (flags, t0) = ((kit.stop.clone(), kit.ops.clone()), self.t0);
            self.heir_work.push(tokio::spawn(async move {
                workers::run_until(&sessions, threads, first, &spec, flags, t0, until).await
            }));
            self.heirs.push(heir);
            tokio::time::sleep(HEIR_WORK_BEFORE_DELIVERY).await;
        }
        data.set_hold(&[], false);
        control.set_cut(&[], false);
        p.resumed_ms = Some(ms(Instant::now()));
        p.held_bytes = Some(data.held_bytes() - held_before);
        Ok((p, at))
    }

    async fn kill_by_role(&mut self, role: Option<ReplicaRole>) -> Result<(MemNodeId, Instant), RunError> {
        let (region, role) = match (role, self.sole) {
            (Some(ReplicaRole::SoleCopy), Some(sole)) => (sole, Some(ReplicaRole::Primary)),
            _ => (self.region, role),
        };
        let (node, process) = node_by_role(self.watch, self.local, region, role).await?;
        let p = self
            .local
            .memnode(process)
            .ok_or_else(|| RunError::Process(format!("no memory node process {process}")))?;
        p.kill()?;
        let at = Instant::now();
        self.killed.push((process, node));
        Ok((node, at))
    }
}

/// Polls the restored cluster from the kill at `start` until `region` is
/// whole again, every replica proven or replaced (and the killed node, if
/// `gone`, on none of them); when, in ms from `start`.
async fn watch_restored(
    watch: &Watch,
    region: fabric::RegionId,
    gone: Option<MemNodeId>,
    start: Instant,
) -> Result<Option<f64>, RunError> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while Instant::now() < deadline {
        let status = watch.status().await?;
        let r = status.region(region)?;
        if gone.is_none_or(|n| !r.on(n)) && r.usable() && status.settled(r) {
            return Ok(Some(ms_since(start)));
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(None)
}

/// Polls the control plane from a kill at `start` until `region` is
/// whole without `node`, going on from the phases `p` already noted.
async fn watch_loss(
    watch: &Watch,
    region: fabric::RegionId,
    node: MemNodeId,
    start: Instant,
    mut p: Phases,
) -> Result<Phases, RunError> {
    while start.elapsed() < PHASE_TIMEOUT {
        let status = watch.status().await?;
        if p.note_loss(&status, region, node, start)? {
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// Polls the control plane from the kill at `start` of `node`, which held
/// the only replica of side region `sole`, until that region is reported
/// lost and, if the checked `region` had a replica there (`shared`), that
/// region is whole again without it.
async fn watch_sole_loss(
    watch: &Watch,
    (region, shared): (fabric::RegionId, bool),
    sole: fabric::RegionId,
    node: MemNodeId,
    start: Instant,
) -> Result<Phases, RunError> {
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        let status = watch.status().await?;
        if p.detected_ms.is_none() && status.node_state(node) == Some(MemNodeState::Dead) {
            p.detected_ms = Some(ms_since(start));
        }
        if p.lost_ms.is_none() && status.region(sole)?.lost.is_some() {
            p.lost_ms = Some(ms_since(start));
        }
        let whole = !shared || p.note_loss(&status, region, node, start)?;
        if p.lost_ms.is_some() && whole {
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// Polls the control plane from a wipe at `start` of `node`, whose record
/// named image `image`, through its phases: declared dead (for its new
/// image), evicted, the region serving again and whole again, and the node
/// active again with another image. A node neither declared dead nor
/// evicted [`WIPE_DEAD_WAIT`] after the wipe was taken back under its old
/// record (it serves its empty image): the watch ends there, the fault
/// incomplete.
async fn watch_wipe(
    watch: &Watch,
    region: fabric::RegionId,
    node: MemNodeId,
    image: Option<fabric::ImageId>,
    start: Instant,
) -> Result<Phases, RunError> {
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        let status = watch.status().await?;
        let whole = p.note_loss(&status, region, node, start)?;
        let reimaged = status.image_of(node).is_some_and(|now| Some(now) != image);
        // Active with another image only after the dead decision: before
        // it, the record and its state are the old node's.
        if p.detected_ms.is_some()
            && p.active_ms.is_none()
            && reimaged
            && status.node_state(node) == Some(MemNodeState::Active)
        {
            p.active_ms = Some(start.elapsed().as_secs_f64() * 1e3);
        }
        if whole && p.active_ms.is_some() {
            return Ok(p);
        }
        if p.detected_ms.is_none() && start.elapsed() > WIPE_DEAD_WAIT {
            tracing::error!(
                memnode = node,
                "a wiped memory node was not declared dead: it was taken back under its old record"
            );
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// Polls the control plane from a restart at `start` until the node is
/// active.
async fn watch_restart(watch: &Watch, node: MemNodeId, start: Instant) -> Result<Phases, RunError> {
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        if watch.status().await?.node_state(node) == Some(MemNodeState::Active) {
            p.active_ms = Some(start.elapsed().as_secs_f64() * 1e3);
            return Ok(p);
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// Polls the control plane from a pause at `start` of `node` for `pause`:
/// a pause past detection goes as a kill (declared dead, evicted, the
/// region whole again elsewhere) and then the node active again as an
/// empty spare; a shorter one ends with the node still active a few leases
/// after it resumed.
async fn watch_pause(
    watch: &Watch,
    region: fabric::RegionId,
    node: MemNodeId,
    start: Instant,
    pause: Duration,
) -> Result<Phases, RunError> {
    let mut p = Phases::default();
    while start.elapsed() < PHASE_TIMEOUT {
        let status = watch.status().await?;
        let whole = p.note_loss(&status, region, node, start)?;
        let resumed = start.elapsed() > pause;
        if resumed && status.node_state(node) == Some(MemNodeState::Active) {
            let back = match p.evicted_ms {
                Some(_) => whole,
                None => start.elapsed() > pause + PAUSE_SETTLE,
            };
            if back {
                p.active_ms = Some(start.elapsed().as_secs_f64() * 1e3);
                return Ok(p);
            }
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Ok(p)
}

/// The members `members` (1-based, as a fault names them) as link indexes.
fn member_indexes(members: &[u32]) -> Vec<usize> {
    members.iter().map(|m| *m as usize - 1).collect()
}

/// The memory node holding the region's primary or first backup, and its
/// process (from 0).
async fn node_by_role(
    watch: &Watch,
    local: &LocalCluster,
    region: fabric::RegionId,
    role: Option<ReplicaRole>,
) -> Result<(MemNodeId, usize), RunError> {
    let status = watch.status().await?;
    let r = status.region(region)?;
    let replica = match role {
        Some(ReplicaRole::Backup) => 1,
        Some(ReplicaRole::Primary | ReplicaRole::SoleCopy) | None => 0,
    };
    let node = r
        .replicas
        .get(replica)
        .ok_or_else(|| RunError::Process(format!("region {region} has no replica {replica}: {r:?}")))?
        .node;
    let process = local.process_of(node, &status.0.memnodes).map_err(local_error)?;
    Ok((node, process))
}

/// Polls from a kill of `node` at `start` until recovery is at work on
/// `region` (`at_work`), noting the loss's phases in `p`. A region settled
/// again first (a copy quicker than the poll) ends the wait too: the
/// leader is faulted all the same, and the phases show it came after.
async fn await_recovery_at_work(
    watch: &Watch,
    region: fabric::RegionId,
    node: MemNodeId,
    start: Instant,
    p: &mut Phases,
) -> Result<(), RunError> {
    while start.elapsed() < PHASE_TIMEOUT {
        let status = watch.status().await?;
        let whole = p.note_loss(&status, region, node, start)?;
        if p.detected_ms.is_some() && (at_work(status.region(region)?) || whole) {
            return Ok(());
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    Err(RunError::Process(format!(
        "recovery did not start on region {region} within {PHASE_TIMEOUT:?} of memory node {node}'s kill"
    )))
}

/// Whether recovery is at work on `r`: a promoted replica being restored,
/// a replica placed, being copied or caught up.
fn at_work(r: &Region) -> bool {
    r.restoring || !r.pending.is_empty() || !r.syncing.is_empty() || r.catching_up.is_some()
}

pub(super) fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

pub(super) fn control_error(e: harness::control::ControlError) -> RunError {
    RunError::Control(e.to_string())
}

/// Waits until `region` is whole (as many replicas as it was made with,
/// none being made, in the map), or settled degraded with no node left to
/// heal it, at most [`PHASE_TIMEOUT`].
pub(super) async fn await_whole(cluster: &Cluster, region: fabric::RegionId) -> Result<(), RunError> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let status = Status::read(cluster).await?;
        let r = status.region(region)?;
        if status.settled(r) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(RunError::Process(format!(
                "the region was not whole again within {PHASE_TIMEOUT:?}: {r:?}"
            )));
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
}
