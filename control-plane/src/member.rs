//! One control-plane member: its sled store, its Raft, its HTTP listener
//! (Raft routes and the API) and the leader's lease judge, started and
//! stopped together.
//!
//! `Node` is what the API handlers and the judge share: the write path
//! (stamp a request, propose it, wait for its commit within
//! `timing.commit_timeout`) and the view of who leads.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, ServerState};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{api_router, MemberInfo};
use crate::config::{millis, ConfigError, Settings};
use crate::liveness::Liveness;
use crate::network::{raft_router, HttpNetworkFactory, Partition, TransportError};
use crate::raft::{MemberId, Raft};
use crate::state::{Command, CommandError, Outcome, Request};
use crate::store::{self, StateReader, StoreError};
use crate::tls::{ClientTls, ServerTls, TlsError};

/// How a member is started.
#[derive(Clone, Debug)]
pub struct MemberOptions {
    /// Its Raft id: unique in the cluster, never reused for another store.
    pub id: MemberId,
    /// Its sled directory (created if missing).
    pub data_dir: PathBuf,
    /// The `host:port` peers and callers reach it at; the listener's
    /// address when `None` (right unless it listens on a wildcard address).
    pub advertise: Option<String>,
    /// Secret, tokens and timings.
    pub settings: Settings,
    /// Injected network faults (none unless a test or chaos run cuts links).
    pub partition: Partition,
}

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The settings do not make a valid Raft configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store could not be opened.
    #[error("opening the store: {0}")]
    Store(#[from] StoreError),
    /// The HTTP client for peers could not be built.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The listener's address could not be read.
    #[error("listener: {0}")]
    Listener(#[source] std::io::Error),
    /// The `[tls]` files are unusable.
    #[error("tls: {0}")]
    Tls(#[from] TlsError),
    /// openraft refused to start (its storage failed its checks).
    #[error("starting raft: {0}")]
    Raft(String),
}

/// A running member.
pub struct Member {
    node: Arc<Node>,
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    judge: JoinHandle<()>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.node.id)
            .field("addr", &self.node.addr)
            .finish_non_exhaustive()
    }
}

impl Member {
    /// Opens the store, starts Raft and serves `listener` until
    /// [`Member::shutdown`].
    pub async fn start(
        listener: tokio::net::TcpListener,
        options: MemberOptions,
    ) -> Result<Member, MemberError> {
        let local_addr = listener.local_addr().map_err(MemberError::Listener)?;
        let addr = options
            .advertise
            .clone()
            .unwrap_or_else(|| local_addr.to_string());
        let settings = options.settings;
        let raft_config = Arc::new(settings.raft_config()?);
        // With `[tls]`, peers are dialled over HTTPS trusting the cluster's
        // CA, and the listener speaks only TLS.
        let tls = match &settings.tls {
            Some(section) => Some((ServerTls::load(section)?, ClientTls::load(&section.ca)?)),
            None => None,
        };
        let http = |builder: reqwest::ClientBuilder| {
            let builder = builder.tcp_nodelay(true);
            match &tls {
                Some((_, client)) => client.apply(builder),
                None => builder,
            }
            .build()
            .map_err(TransportError::Client)
        };
        let network = HttpNetworkFactory::with_client(
            options.id,
            &settings.cluster_secret,
            http(reqwest::Client::builder())?,
        )
        .with_tls(tls.is_some())
        .with_partition(options.partition)
        .with_retry_pause(settings.timing.heartbeat);
        let (log, sm) = store::open(&options.data_dir).await?;
        let reader = sm.reader();
        let raft = Raft::new(options.id, raft_config, network, log, sm)
            .await
            .map_err(|e| MemberError::Raft(e.to_string()))?;
        let http = http(reqwest::Client::builder())?;
        let (stop, stopped) = watch::channel(false);
        let node = Arc::new(Node {
            id: options.id,
            addr,
            raft: raft.clone(),
            reader,
            liveness: Mutex::new(Liveness::new(settings.timing.memnode_lease)),
            scheme: crate::tls::scheme(settings.tls.is_some()),
            transferring: std::sync::atomic::AtomicBool::new(false),
            clock: crate::clock::LeaderClock::default(),
            settings,
            http,
            stopped: stopped.clone(),
        });
        let router = raft_router(raft, node.settings.cluster_secret.clone()).merge(api_router(node.clone()));
        let server = match tls {
            None => serve_plain(listener, router, stopped.clone()),
            Some((server_tls, _)) => serve_tls(listener, router, server_tls, stopped.clone())?,
        };
        let judge = tokio::spawn(judge_leases(node.clone(), stopped));
        crate::metrics::spawn_raft_gauges(
            node.raft.clone(),
            node.id,
            node.reader.clone(),
            node.stopped.clone(),
        );
        tracing::info!(member = node.id, addr = %node.addr, "control-plane member started");
        Ok(Member {
            node,
            local_addr,
            stop,
            server,
            judge,
        })
    }

    /// Its Raft id.
    pub fn id(&self) -> MemberId {
        self.node.id
    }

    /// The address it advertises.
    pub fn addr(&self) -> &str {
        &self.node.addr
    }

    /// The address its listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A probe of whether this member leads, to carry into a task.
    pub fn leadership(&self) -> Leadership {
        Leadership {
            raft: self.node.raft.clone(),
            id: self.node.id,
        }
    }

    /// Its Raft handle (metrics, waits).
    pub fn raft(&self) -> &Raft {
        &self.node.raft
    }

    /// Its applied state.
    pub fn state(&self) -> &StateReader {
        &self.node.reader
    }

    /// Stops serving (in-flight requests finish, long-polls return at once),
    /// stops Raft and the judge. The store is closed when the last handle
    /// drops, which may be a moment later (see `store::open`).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.node.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not stop cleanly");
        }
        let _ = self.judge.await;
        let _ = self.server.await;
        tracing::info!(member = self.node.id, "control-plane member stopped");
    }
}

/// What the API and the judge share.
pub(crate) struct Node {
    pub(crate) id: MemberId,
    pub(crate) addr: String,
    pub(crate) raft: Raft,
    pub(crate) reader: StateReader,
    pub(crate) settings: Settings,
    pub(crate) liveness: Mutex<Liveness>,
    /// Forwards writes to the leader.
    pub(crate) http: reqwest::Client,
    /// Turns true when the member stops.
    pub(crate) stopped: watch::Receiver<bool>,
    /// `https` with `[tls]`, else `http`: how peers are reached.
    pub(crate) scheme: &'static str,
    /// A leadership transfer is under way (one at a time: each turns the
    /// heartbeats off and back on).
    pub(crate) transferring: std::sync::atomic::AtomicBool,
    /// This member's readings of the cluster clock while it leads.
    pub(crate) clock: crate::clock::LeaderClock,
}

/// Who leads, as this member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Leader {
    /// This member.
    Me,
    /// Another member, reachable at this address.
    At(String),
    /// Nobody this member knows of (an election is under way, or this
    /// member is cut off, or the cluster is not initialised).
    Unknown,
}

/// Why a write did not produce an outcome.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The state machine refused the command (nothing changed).
    Refused(CommandError),
    /// This member does not lead; the leader's address if known.
    NotLeader(Option<String>),
    /// Not committed within `commit_timeout`: it may still commit.
    Timeout(Duration),
    /// A membership change was refused.
    Membership(String),
    /// Raft has stopped.
    Stopped(String),
    /// Raft dropped the request without an answer while it still runs:
    /// openraft 0.9 reports that as `Fatal::Stopped`, and it happens when
    /// the lead changes under a pending write. The write may still commit.
    Unanswered,
    /// This member could not confirm with a quorum that it still leads.
    NoQuorum(String),
    /// This member is handing the lead over (`POST /v1/leader`): it
    /// proposes nothing meanwhile, or its entries would keep renewing the
    /// followers' leases and no vote for the new leader would be granted.
    HandingOver,
}

/// Serves `router` on `listener` in plain HTTP until `stopped` turns true,
/// with the listener's limits (`crate::listener`).
fn serve_plain(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    stopped: watch::Receiver<bool>,
) -> JoinHandle<()> {
    crate::listener::serve(listener, router, stopped, "control")
}

/// Serves `router` on `listener` over TLS until `stopped` turns true, with
/// the listener's limits (`crate::listener`).
fn serve_tls(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: ServerTls,
    stopped: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, MemberError> {
    Ok(crate::listener::serve_tls(
        listener,
        router,
        stopped,
        "control",
        tls.config(),
    ))
}

impl Node {
    /// How peers are reached: `https` or `http`.
    pub(crate) fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// Who leads now.
    pub(crate) fn leader(&self) -> Leader {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        match m.current_leader {
            Some(id) if id == self.id && m.state == ServerState::Leader => Leader::Me,
            Some(id) if id != self.id => match m.membership_config.membership().get_node(&id) {
                Some(node) => Leader::At(node.addr.clone()),
                None => Leader::Unknown,
            },
            _ => Leader::Unknown,
        }
    }

    /// The members as this member knows them, by id.
    pub(crate) fn members(&self) -> Vec<MemberInfo> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<MemberId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(&id, node)| MemberInfo {
                id,
                addr: node.addr.clone(),
                voter: voters.contains(&id),
            })
            .collect()
    }

    /// Confirms with a quorum, now, that this member leads, and that it has
    /// applied everything committed before (openraft's read index); returns
    /// its term. A leader cut off from its majority keeps believing it leads
    /// (openraft 0.9 has no check-quorum), so whatever it answers without
    /// committing, such as a renewal, must first pass this. A leader
    /// handing the lead over confirms nothing: the round it would send
    /// renews the followers' leases, and no vote for its successor would be
    /// granted.
    pub(crate) async fn confirm_lead(&self) -> Result<u64, WriteError> {
        if self.handing_over() {
            return Err(WriteError::HandingOver);
        }
        match self.bounded(self.raft.ensure_linearizable()).await? {
            Ok(_) => Ok(self.raft.metrics().borrow().current_term),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(WriteError::NotLeader(f.leader_node.map(|n| n.addr)))
            }
            Err(RaftError::APIError(e)) => Err(WriteError::NoQuorum(e.to_string())),
            Err(RaftError::Fatal(f)) => Err(self.fatal(f)),
        }
    }

    /// What a fatal error of a Raft call means: a stop only if the core has
    /// stopped (`WriteError::Unanswered`).
    fn fatal(&self, f: openraft::error::Fatal<MemberId>) -> WriteError {
        if self.raft.metrics().borrow().running_state.is_ok() {
            WriteError::Unanswered
        } else {
            WriteError::Stopped(f.to_string())
        }
    }

    /// The cluster clock as this member reads it now (`crate::clock`): the
    /// leader's reading while it leads, else the clock its applied state
    /// has reached (behind the leader's: a judgement by it waits longer).
    pub(crate) fn cluster_clock_ms(&self) -> u64 {
        let applied = self.reader.with_state(|s| s.clock_ms);
        let term = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader && m.current_leader == Some(self.id)).then_some(m.current_term)
        };
        match term {
            Some(term) => self.clock.now(term, applied, now_ms(), Instant::now()),
            None => applied,
        }
    }

    /// A leadership transfer is under way (`POST /v1/leader`): this member
    /// proposes, confirms and judges nothing meanwhile.
    pub(crate) fn handing_over(&self) -> bool {
        self.transferring.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Stamps `command` (time, actor, a fresh nonce), proposes it and waits
    /// for its outcome.
    ///
    /// A command the state machine would refuse is not proposed: the
    /// refusal is answered from this member's applied state (`dry_run`).
    /// A caller that retries a refused command in a loop (a recovery step,
    /// a dead memory node's registration) would otherwise grow the log,
    /// and every snapshot, with the same refusal over and over. Such a
    /// refusal leaves no audit entry: the audit trail records what was
    /// committed. A command that passes the dry run and is refused when
    /// applied (another command committed between the two) is committed
    /// as before.
    pub(crate) async fn propose(&self, actor: &str, mut command: Command) -> Result<Outcome, WriteError> {
        if let Command::RegisterClient {
            lease_ms: lease_ms @ 0,
            ..
        } = &mut command
        {
            *lease_ms = millis(self.settings.timing.client_lease);
        }
        if self.handing_over() {
            return Err(WriteError::HandingOver);
        }
        let request = Request {
            at_ms: now_ms(),
            clock_ms: self.cluster_clock_ms(),
            actor: actor.to_owned(),
            nonce: rand::random(),
            command,
        };
        let started = Instant::now();
        if let Err(refused) = self.dry_run(&request).await? {
            tracing::debug!(
                actor,
                command = ?request.command.for_audit(),
                error = %refused,
                "refused without proposing"
            );
            let answered: Result<Result<Outcome, CommandError>, WriteError> = Ok(Err(refused.clone()));
            crate::metrics::proposal(self.id, started, &answered);
            return Err(WriteError::Refused(refused));
        }
        let written = self.bounded(self.raft.client_write(request)).await;
        crate::metrics::proposal(self.id, started, &written);
        let written = written?;
        match written {
            Ok(reply) => reply.data.map_err(WriteError::Refused),
            Err(e) => Err(self.write_error(e)),
        }
    }

    /// `Ok(Err(refusal))` if the state machine would refuse `request` now,
    /// `Ok(Ok(()))` to propose it; `Err` if this member cannot confirm that
    /// it leads.
    ///
    /// Judged first on the applied state as it is, which costs no round
    /// trip: a command it passes is proposed, and the log has the last
    /// word. A refusal is judged again once this member has confirmed with
    /// a quorum that it leads and has applied everything committed before
    /// (`confirm_lead`): the applied state may trail what was committed (a
    /// leader new in office applies its predecessor's last entries after
    /// taking office), and a command that depends on one of those must
    /// not be refused for want of it.
    async fn dry_run(&self, request: &Request) -> Result<Result<(), CommandError>, WriteError> {
        if self.reader.with_state(|s| s.dry_run(request)).is_ok() {
            return Ok(Ok(()));
        }
        self.confirm_lead().await?;
        Ok(self.reader.with_state(|s| s.dry_run(request)).map(|_| ()))
    }

    /// Adds `member` as a learner, waits for it to catch up, and promotes it
    /// to voter if asked. Returns the new membership.
    pub(crate) async fn add_member(&self, member: &MemberInfo) -> Result<Vec<MemberInfo>, WriteError> {
        let node = BasicNode::new(member.addr.clone());
        let catch_up = self.settings.timing.catch_up_timeout();
        let added = tokio::time::timeout(catch_up, self.raft.add_learner(member.id, node, true))
            .await
            .map_err(|_| WriteError::Timeout(catch_up))?;
        added.map_err(|e| self.write_error(e))?;
        if member.voter {
            let ids = BTreeSet::from([member.id]);
            let changed = self
                .bounded(self.raft.change_membership(ChangeMembers::AddVoterIds(ids), true))
                .await?;
            changed.map_err(|e| self.write_error(e))?;
        }
        Ok(self.members())
    }

    /// Removes member `id` (voter or learner) from the cluster.
    pub(crate) async fn remove_member(&self, id: MemberId) -> Result<Vec<MemberInfo>, WriteError> {
        let known = self.members();
        let Some(member) = known.iter().find(|m| m.id == id) else {
            return Err(WriteError::Membership(format!(
                "member {id} is not in the cluster"
            )));
        };
        let ids = BTreeSet::from([id]);
        let change = if member.voter {
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        let changed = self.bounded(self.raft.change_membership(change, false)).await?;
        changed.map_err(|e| self.write_error(e))?;
        Ok(self.members())
    }

    /// Forms a new cluster of `members` (this member alone when empty).
    pub(crate) async fn init(&self, members: &[MemberInfo]) -> Result<(), WriteError> {
        let mut nodes: BTreeMap<MemberId, BasicNode> = members
            .iter()
            .map(|m| (m.id, BasicNode::new(m.addr.clone())))
            .collect();
        if nodes.is_empty() {
            nodes.insert(self.id, BasicNode::new(self.addr.clone()));
        }
        if !nodes.contains_key(&self.id) {
            return Err(WriteError::Membership(format!(
                "the initial members must include this member ({})",
                self.id
            )));
        }
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(e)) => Err(WriteError::Membership(e.to_string())),
            Err(RaftError::Fatal(f)) => Err(self.fatal(f)),
        }
    }

    async fn bounded<T>(&self, f: impl std::future::Future<Output = T>) -> Result<T, WriteError> {
        let limit = self.settings.timing.commit_timeout;
        tokio::time::timeout(limit, f)
            .await
            .map_err(|_| WriteError::Timeout(limit))
    }

    fn write_error(&self, e: RaftError<MemberId, ClientWriteError<MemberId, BasicNode>>) -> WriteError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                WriteError::NotLeader(f.leader_node.map(|n| n.addr))
            }
            RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
                WriteError::Membership(e.to_string())
            }
            RaftError::Fatal(f) => self.fatal(f),
        }
    }

    /// The lease table (held briefly: never across an await).
    pub(crate) fn liveness(&self) -> std::sync::MutexGuard<'_, Liveness> {
        self.liveness.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Milliseconds since the Unix epoch (0 on a clock set before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// The term this member leads in, if it leads on a quorum's word heard
/// within `election_timeout_min`: what its lease judge acts on.
///
/// A leader whose followers stopped answering (they are electing, or it
/// is cut off, or starved of CPU) still reads as the leader until it hears
/// a newer term (openraft 0.9 has no check-quorum). Acting on that
/// is how a leader declared every memory node dead: it confirmed none of
/// their renewals (that needs a quorum), judged them silent, appended its
/// decisions to its own log, and won the next election with that log, so
/// they were committed (snapshot-restore-hash seed 95). Past one
/// `election_timeout_min` without a quorum's acknowledgement a follower
/// may already be campaigning: the member acts no more until one comes.
/// A leader restored from its own vote at restart leads on paper until it
/// hears its term is over, and has no acknowledgement at all.
fn leads_now(raft: &Raft, id: MemberId) -> Option<u64> {
    leads(raft, id, Some(raft.config().election_timeout_min))
}

/// The term this member leads in, if a quorum has acknowledged it at all
/// (`ack_ms_max`: within that many ms).
fn leads(raft: &Raft, id: MemberId, ack_ms_max: Option<u64>) -> Option<u64> {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    (m.state == ServerState::Leader
        && m.current_leader == Some(id)
        && m.millis_since_quorum_ack
            .is_some_and(|ms| ack_ms_max.is_none_or(|max| ms <= max)))
    .then_some(m.current_term)
}

/// Whether a member leads: what its recovery coordinator acts on.
#[derive(Clone)]
pub struct Leadership {
    raft: Raft,
    id: MemberId,
}

impl Leadership {
    /// The member is the leader and a quorum has acknowledged it: a
    /// leader restored from its own vote at restart leads on paper until
    /// it hears its term is over, and must not act before. Looser than the
    /// lease judge's rule ([`leads_now`]): a coordinator that stopped at
    /// every late acknowledgement would join the cluster again as a new
    /// client each time, and what it writes is fenced anyway (a copy proves
    /// its leadership with a quorum round, `Leadership::confirm`).
    pub fn holds(&self) -> bool {
        leads(&self.raft, self.id, None).is_some()
    }

    /// Proves with a quorum, now, that this member leads (openraft's read
    /// index: a heartbeat round that a majority acknowledges after this
    /// call began), within `within`. A leader that was paused and resumed
    /// still reads as leading in [`Leadership::holds`] until it hears of
    /// the newer term; this fails for it instead.
    pub async fn confirm(&self, within: std::time::Duration) -> bool {
        matches!(
            tokio::time::timeout(within, self.raft.ensure_linearizable()).await,
            Ok(Ok(_))
        ) && self.holds()
    }
}

/// The leader's lease judge: every `timing.lease_check`, if this member
/// leads (acknowledged by a quorum), proposes the decisions
/// [`Liveness::decisions`] finds due, one at a time, recomputed before each.
/// The one in flight stays pending until the state shows it or the term
/// ends, so none is proposed twice (see the module docs of `liveness`).
async fn judge_leases(node: Arc<Node>, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(node.settings.timing.lease_check);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let actor = format!("member {} (lease judge)", node.id);
    // When the last judgement ended: a long wait from there to the next
    // tick is this process's stall, not the holders' silence (liveness's
    // deafness rule). A slow proposal is not: it is awaited inside a
    // judgement, while the handlers go on noting renewals.
    let mut judged_at = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|&s| s) => return,
        }
        let now = Instant::now();
        let gap = now.saturating_duration_since(judged_at);
        if node.liveness().resume_after(now, gap) {
            tracing::warn!(
                member = node.id,
                gap_ms = gap.as_millis() as u64,
                "the lease judge did not run for longer than half a lease: this process stalled; \
                 every lease counts again from now"
            );
        }
        judge_once(&node, &actor).await;
        judged_at = Instant::now();
    }
}

/// One judgement: if this member leads, the decisions due, one at a time.
async fn judge_once(node: &Node, actor: &str) {
    // A leader restored from its own committed vote at restart leads
    // on paper until it hears its term is over: it takes office only
    // once a quorum has acknowledged it.
    //
    // Nor does a leader handing the lead over judge: it proposes nothing
    // and confirms no renewal meanwhile (`WriteError::HandingOver`), so a
    // hand-over that fails, and leaves it leading, must not count that
    // silence against the holders: leases are judged from its end, as
    // from a new term.
    //
    // A leader no quorum acknowledged lately judges nothing either
    // ([`leads_now`]); once one does, leases count from then.
    let leads = leads_now(&node.raft, node.id).filter(|_| !node.handing_over());
    {
        let mut liveness = node.liveness();
        let office = liveness.office_term();
        let Some(term) = leads else {
            if office.is_some() {
                liveness.follow();
            }
            return;
        };
        if office != Some(term) {
            liveness.lead(Instant::now(), term);
            tracing::info!(member = node.id, term, "leading: leases are judged from now");
        }
    }
    // One decision at a time, recomputed before each: a renewal heard
    // while the previous one committed counts.
    loop {
        let next = {
            let mut liveness = node.liveness();
            node.reader.with_state(|s| {
                liveness.settle(s);
                if liveness.pending().is_some() {
                    // A decision whose commit timed out may still
                    // commit: never propose a second beside it.
                    return None;
                }
                let next = liveness.decisions(Instant::now(), s).into_iter().next();
                if let Some(d) = &next {
                    liveness.set_pending(d.clone());
                }
                next
            })
        };
        let Some(decision) = next else { break };
        tracing::info!(?decision, "lease decision");
        crate::metrics::lease_decision(node.id, &decision);
        match node.propose(actor, decision).await {
            // Applied (or refused, which changes nothing): the state
            // shows it, and `settle` clears it on the next look.
            Ok(_) | Err(WriteError::Refused(_)) => {}
            Err(e) => {
                tracing::info!(error = ?e, "lease decision not committed yet; it stays pending");
                break;
            }
        }
    }
}
