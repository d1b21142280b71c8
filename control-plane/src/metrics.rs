//! A member's metrics: Raft's state, the write path's and renewals'
//! latency, lease decisions, and the applied state's tables.
//!
//! Recorded through the `metrics` facade (a no-op until the process
//! installs a recorder: `kintsugi control --metrics-listen`). Every series
//! carries `member="<id>"`, so several members in one process (tests, a
//! benchmark) stay apart under the one process-global recorder.

use std::time::{Duration, Instant};

use ::metrics::{Counter, Gauge, Unit};
use fabric::metrics::{MetricDef, MetricKind};
use openraft::{BasicNode, RaftMetrics, ServerState};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::member::WriteError;
use crate::raft::{MemberId, Raft};
use crate::state::{ClientState, Command, ControlState, MemNodeState};
use crate::store::StateReader;

/// The member's current Raft term.
pub const RAFT_TERM: &str = "kintsugi_raft_term";
/// 1 while the member leads (acknowledged or not), else 0.
pub const RAFT_IS_LEADER: &str = "kintsugi_raft_is_leader";
/// 1 while the member knows a leader, else 0.
pub const RAFT_HAS_LEADER: &str = "kintsugi_raft_has_leader";
/// The leader's id as this member knows it; -1 when it knows none.
pub const RAFT_LEADER_ID: &str = "kintsugi_raft_leader_id";
/// Times this member saw a new leader (elections it learned of).
pub const RAFT_LEADER_CHANGES: &str = "kintsugi_raft_leader_changes_total";
/// The last index appended to the member's log.
pub const RAFT_LAST_LOG_INDEX: &str = "kintsugi_raft_last_log_index";
/// On the leader, the highest index a quorum of voters has matched; on
/// another member, its applied index (which the commit index bounds).
pub const RAFT_COMMIT_INDEX: &str = "kintsugi_raft_commit_index";
/// The last index applied to the member's state machine.
pub const RAFT_APPLIED_INDEX: &str = "kintsugi_raft_applied_index";
/// Voters in the membership the member knows.
pub const RAFT_VOTERS: &str = "kintsugi_raft_voters";
/// Learners in the membership the member knows.
pub const RAFT_LEARNERS: &str = "kintsugi_raft_learners";
/// On a leader, how long ago a quorum last acknowledged it.
pub const RAFT_QUORUM_ACK_AGE: &str = "kintsugi_raft_quorum_ack_age_seconds";
/// Proposals (every write: commands and lease decisions) from submission
/// to outcome, committed ones only.
pub const COMMIT_SECONDS: &str = "kintsugi_control_commit_seconds";
/// Proposals by `result`: committed, timeout (may still commit), failed
/// (not leader, raft stopped).
pub const PROPOSALS: &str = "kintsugi_control_proposals_total";
/// A lease renewal handled by the leader, from arrival to answer
/// (the quorum check included), by `kind` (memnode, client).
pub const RENEWAL_SECONDS: &str = "kintsugi_control_renewal_seconds";
/// Renewals by `kind` and `result` (granted, refused).
pub const RENEWALS: &str = "kintsugi_control_renewals_total";
/// Lease decisions the leader's judge proposed, by `decision`.
pub const LEASE_DECISIONS: &str = "kintsugi_control_lease_decisions_total";
/// The map epoch in the member's applied state.
pub const EPOCH: &str = "kintsugi_control_epoch";
/// Memory nodes by `state` (joining, active, suspect, dead, drained).
pub const MEMNODES: &str = "kintsugi_control_memnodes";
/// Regions by `state`: unready (a replica not yet allocated), restoring
/// (out of the map while recovery rebuilds it), degraded (usable, fewer
/// replicas than made with or some being made), whole, lost (its data died
/// with its nodes: `ctl region lost`).
pub const REGIONS: &str = "kintsugi_control_regions";
/// Clients by `lease` (live, expired).
pub const CLIENTS: &str = "kintsugi_control_clients";
/// Named indexes.
pub const INDEXES: &str = "kintsugi_control_indexes";
/// HTTP connections closed at once, the listener at its connection limit
/// (`crate::listener`), by `listener`.
pub const HTTP_CONNECTIONS_REFUSED: &str = "kintsugi_http_connections_refused_total";

/// Every metric of this crate.
pub const ALL: &[MetricDef] = &[
    MetricDef::gauge(RAFT_TERM, "The member's current Raft term."),
    MetricDef::gauge(RAFT_IS_LEADER, "1 while the member leads, else 0."),
    MetricDef::gauge(RAFT_HAS_LEADER, "1 while the member knows a leader, else 0."),
    MetricDef::gauge(
        RAFT_LEADER_ID,
        "The leader's id as the member knows it; -1 when none.",
    ),
    MetricDef::counter(RAFT_LEADER_CHANGES, "Times the member saw a new leader."),
    MetricDef::gauge(
        RAFT_LAST_LOG_INDEX,
        "The last index appended to the member's log.",
    ),
    MetricDef::gauge(
        RAFT_COMMIT_INDEX,
        "Leader: the highest index a quorum of voters matched; others: their applied index.",
    ),
    MetricDef::gauge(
        RAFT_APPLIED_INDEX,
        "The last index applied to the member's state machine.",
    ),
    MetricDef::gauge(RAFT_VOTERS, "Voters in the membership the member knows."),
    MetricDef::gauge(RAFT_LEARNERS, "Learners in the membership the member knows."),
    MetricDef {
        name: RAFT_QUORUM_ACK_AGE,
        kind: MetricKind::Gauge,
        unit: Some(Unit::Seconds),
        help: "Leader: time since a quorum last acknowledged it.",
    },
    MetricDef::seconds(COMMIT_SECONDS, "Committed proposals, from submission to outcome."),
    MetricDef::counter(PROPOSALS, "Proposals by result (committed, timeout, failed)."),
    MetricDef::seconds(RENEWAL_SECONDS, "Lease renewals handled by the leader, by kind."),
    MetricDef::counter(RENEWALS, "Lease renewals by kind and result (granted, refused)."),
    MetricDef::counter(
        LEASE_DECISIONS,
        "Lease decisions the leader proposed, by decision.",
    ),
    MetricDef::gauge(EPOCH, "The map epoch in the member's applied state."),
    MetricDef::gauge(MEMNODES, "Memory nodes by state."),
    MetricDef::gauge(
        REGIONS,
        "Regions by state (unready, restoring, degraded, whole, lost).",
    ),
    MetricDef::gauge(CLIENTS, "Clients by lease (live, expired)."),
    MetricDef::gauge(INDEXES, "Named indexes."),
    MetricDef::counter(
        HTTP_CONNECTIONS_REFUSED,
        "HTTP connections closed at once, the listener at its connection limit, by listener.",
    ),
];

/// Counts a connection `listener` closed at its connection limit.
pub(crate) fn http_connection_refused(listener: &'static str) {
    ::metrics::counter!(HTTP_CONNECTIONS_REFUSED, "listener" => listener).increment(1);
}

/// Registers this crate's descriptions with the installed recorder.
pub fn describe() {
    ALL.iter().for_each(MetricDef::describe);
}

/// How often the applied state's tables are sampled: they may hold many
/// clients, and Raft's metrics change with every entry.
pub const STATE_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Follows `raft`'s metrics (a watch, so each change is seen) and sets
/// the Raft gauges of `member`; samples the tables of `reader`'s applied
/// state every [`STATE_SAMPLE_INTERVAL`]. Ends when `stopped` turns true
/// or Raft is dropped.
pub fn spawn_raft_gauges(
    raft: Raft,
    member: MemberId,
    reader: StateReader,
    mut stopped: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = raft.metrics();
        drop(raft);
        let gauges = MemberGauges::new(member);
        let mut seen_leader = None;
        let mut tick = tokio::time::interval(STATE_SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            gauges.raft(&changes.borrow_and_update(), &mut seen_leader);
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tick.tick() => reader.with_state(|s| gauges.state(s)),
                _ = stopped.wait_for(|&s| s) => return,
            }
        }
    })
}

/// A member's gauge handles, looked up once.
struct MemberGauges {
    term: Gauge,
    is_leader: Gauge,
    has_leader: Gauge,
    leader_id: Gauge,
    leader_changes: Counter,
    last_log: Gauge,
    commit: Gauge,
    applied: Gauge,
    voters: Gauge,
    learners: Gauge,
    quorum_ack_age: Gauge,
    epoch: Gauge,
    memnodes: [(MemNodeState, Gauge); 5],
    regions: [Gauge; REGION_STATES.len()],
    clients_live: Gauge,
    clients_expired: Gauge,
    indexes: Gauge,
}

impl MemberGauges {
    fn new(member: MemberId) -> Self {
        let m = member.to_string();
        let g = |name: &'static str| ::metrics::gauge!(name, "member" => m.clone());
        let labelled = |name: &'static str, key: &'static str, v: &'static str| ::metrics::gauge!(name, "member" => m.clone(), key => v);
        let node_state = |s: MemNodeState| (s, labelled(MEMNODES, "state", memnode_state(s)));
        MemberGauges {
            term: g(RAFT_TERM),
            is_leader: g(RAFT_IS_LEADER),
            has_leader: g(RAFT_HAS_LEADER),
            leader_id: g(RAFT_LEADER_ID),
            leader_changes: ::metrics::counter!(RAFT_LEADER_CHANGES, "member" => m.clone()),
            last_log: g(RAFT_LAST_LOG_INDEX),
            commit: g(RAFT_COMMIT_INDEX),
            applied: g(RAFT_APPLIED_INDEX),
            voters: g(RAFT_VOTERS),
            learners: g(RAFT_LEARNERS),
            quorum_ack_age: g(RAFT_QUORUM_ACK_AGE),
            epoch: g(EPOCH),
            memnodes: [
                node_state(MemNodeState::Joining),
                node_state(MemNodeState::Active),
                node_state(MemNodeState::Suspect),
                node_state(MemNodeState::Dead),
                node_state(MemNodeState::Drained),
            ],
            regions: REGION_STATES.map(|s| labelled(REGIONS, "state", s)),
            clients_live: labelled(CLIENTS, "lease", "live"),
            clients_expired: labelled(CLIENTS, "lease", "expired"),
            indexes: g(INDEXES),
        }
    }

    fn raft(&self, m: &RaftMetrics<MemberId, BasicNode>, seen_leader: &mut Option<MemberId>) {
        let leading = m.state == ServerState::Leader;
        self.term.set(m.current_term as f64);
        self.is_leader.set(flag(leading));
        self.has_leader.set(flag(m.current_leader.is_some()));
        self.leader_id.set(m.current_leader.map_or(-1.0, |id| id as f64));
        if m.current_leader.is_some() && m.current_leader != *seen_leader {
            self.leader_changes.increment(1);
            *seen_leader = m.current_leader;
        }
        self.last_log.set(m.last_log_index.unwrap_or(0) as f64);
        let applied = m.last_applied.map_or(0, |l| l.index);
        self.applied.set(applied as f64);
        self.commit.set(commit_index(m).unwrap_or(applied) as f64);
        let membership = m.membership_config.membership();
        self.voters.set(membership.voter_ids().count() as f64);
        self.learners.set(membership.learner_ids().count() as f64);
        let age = m.millis_since_quorum_ack.filter(|_| leading);
        self.quorum_ack_age.set(age.map_or(0.0, |ms| ms as f64 / 1e3));
    }

    fn state(&self, s: &ControlState) {
        self.epoch.set(s.epoch as f64);
        for (state, g) in &self.memnodes {
            g.set(s.memnodes.values().filter(|n| n.state == *state).count() as f64);
        }
        let mut regions = [0u64; REGION_STATES.len()];
        for r in s.regions.values() {
            let slot = if r.lost.is_some() {
                4
            } else if !r.ready() {
                0
            } else if r.being_restored() {
                1
            } else if !r.whole() {
                2
            } else {
                3
            };
            regions[slot] += 1;
        }
        for (g, n) in self.regions.iter().zip(regions) {
            g.set(n as f64);
        }
        let live = s
            .clients
            .values()
            .filter(|c| c.state == ClientState::Live)
            .count();
        self.clients_live.set(live as f64);
        self.clients_expired.set((s.clients.len() - live) as f64);
        self.indexes.set(s.indexes.len() as f64);
    }
}

/// The `state` labels of regions, in the order `MemberGauges::state`
/// counts them.
const REGION_STATES: [&str; 5] = ["unready", "restoring", "degraded", "whole", "lost"];

fn memnode_state(s: MemNodeState) -> &'static str {
    match s {
        MemNodeState::Joining => "joining",
        MemNodeState::Active => "active",
        MemNodeState::Suspect => "suspect",
        MemNodeState::Dead => "dead",
        MemNodeState::Drained => "drained",
    }
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// On a leader, the highest log index a quorum of voters has matched
/// (openraft 0.9's metrics carry no commit index); `None` elsewhere.
fn commit_index(m: &RaftMetrics<MemberId, BasicNode>) -> Option<u64> {
    if m.state != ServerState::Leader {
        return None;
    }
    let replication = m.replication.as_ref()?;
    let mut matched: Vec<u64> = m
        .membership_config
        .membership()
        .voter_ids()
        .map(|id| match replication.get(&id) {
            Some(log) => log.map_or(0, |l| l.index),
            None if id == m.id => m.last_log_index.unwrap_or(0),
            None => 0,
        })
        .collect();
    if matched.is_empty() {
        return None;
    }
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched.get(matched.len() / 2).copied()
}

/// Counts one proposal by its outcome, and times it if it committed.
pub(crate) fn proposal<T, E>(member: MemberId, started: Instant, written: &Result<Result<T, E>, WriteError>) {
    let m = member.to_string();
    let result = match written {
        Ok(Ok(_)) => {
            ::metrics::histogram!(COMMIT_SECONDS, "member" => m.clone()).record(started.elapsed());
            "committed"
        }
        Err(WriteError::Timeout(_)) => "timeout",
        Ok(Err(_)) | Err(_) => "failed",
    };
    ::metrics::counter!(PROPOSALS, "member" => m, "result" => result).increment(1);
}

/// Counts a lease decision the judge proposes.
pub(crate) fn lease_decision(member: MemberId, decision: &Command) {
    let kind = match decision {
        Command::ActivateMemNode { .. } => "activate_memnode",
        Command::SuspectMemNode { .. } => "suspect_memnode",
        Command::DeclareMemNodeDead { .. } => "declare_memnode_dead",
        Command::ExpireClient { .. } => "expire_client",
        _ => "other",
    };
    ::metrics::counter!(LEASE_DECISIONS, "member" => member.to_string(), "decision" => kind).increment(1);
}

/// Times one renewal handler and counts it when dropped: refused unless
/// [`RenewalTimer::granted`] was called (so a handler that returns early,
/// or is cancelled, counts as refused).
pub(crate) struct RenewalTimer {
    member: MemberId,
    kind: &'static str,
    started: Instant,
    granted: bool,
}

impl RenewalTimer {
    /// Starts timing a renewal of `kind` (`memnode` or `client`).
    pub(crate) fn start(member: MemberId, kind: &'static str) -> Self {
        RenewalTimer {
            member,
            kind,
            started: Instant::now(),
            granted: false,
        }
    }

    /// The renewal is granted.
    pub(crate) fn granted(&mut self) {
        self.granted = true;
    }
}

impl Drop for RenewalTimer {
    fn drop(&mut self) {
        let m = self.member.to_string();
        ::metrics::histogram!(RENEWAL_SECONDS, "member" => m.clone(), "kind" => self.kind)
            .record(self.started.elapsed());
        let result = if self.granted { "granted" } else { "refused" };
        ::metrics::counter!(RENEWALS, "member" => m, "kind" => self.kind, "result" => result).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_valid() {
        assert_eq!(fabric::metrics::check_table(ALL), Ok(()));
    }

    #[test]
    fn names_are_distinct_from_fabrics() {
        let mut all: Vec<MetricDef> = ALL.to_vec();
        all.extend_from_slice(fabric::metrics::ALL);
        assert_eq!(fabric::metrics::check_table(&all), Ok(()));
    }

    /// Metrics of member 1 leading `voters`, its log at 10, each peer
    /// having matched the index given.
    fn leading(voters: &[MemberId], matched: &[(MemberId, u64)]) -> RaftMetrics<MemberId, BasicNode> {
        use openraft::{CommittedLeaderId, LogId, Membership, StoredMembership};
        use std::collections::{BTreeMap, BTreeSet};
        let mut m = RaftMetrics::new_initial(1);
        m.state = ServerState::Leader;
        m.last_log_index = Some(10);
        m.last_applied = Some(LogId::new(CommittedLeaderId::new(1, 1), 3));
        let nodes: BTreeMap<MemberId, BasicNode> = voters
            .iter()
            .map(|&id| (id, BasicNode::new(format!("127.0.0.1:{id}"))))
            .collect();
        let config = vec![voters.iter().copied().collect::<BTreeSet<_>>()];
        m.membership_config =
            std::sync::Arc::new(StoredMembership::new(None, Membership::new(config, nodes)));
        m.replication = Some(
            matched
                .iter()
                .map(|&(id, i)| (id, Some(LogId::new(CommittedLeaderId::new(1, 1), i))))
                .collect(),
        );
        m
    }

    #[test]
    fn the_commit_index_is_what_a_quorum_of_voters_matched() {
        // The leader's own log counts when replication does not list it.
        assert_eq!(commit_index(&leading(&[1, 2, 3], &[(2, 7), (3, 4)])), Some(7));
        assert_eq!(
            commit_index(&leading(&[1, 2, 3], &[(1, 10), (2, 4), (3, 9)])),
            Some(9)
        );
        // A learner's progress (4) does not count; a silent voter counts 0.
        assert_eq!(
            commit_index(&leading(&[1, 2, 3, 5, 6], &[(2, 8), (3, 2), (4, 10)])),
            Some(2)
        );
        let mut follower = leading(&[1, 2, 3], &[(2, 7)]);
        follower.state = ServerState::Follower;
        assert_eq!(
            commit_index(&follower),
            None,
            "a follower reports its applied index instead"
        );
    }

    #[test]
    fn every_memnode_state_has_its_label() {
        for s in [
            MemNodeState::Joining,
            MemNodeState::Active,
            MemNodeState::Suspect,
            MemNodeState::Dead,
            MemNodeState::Drained,
        ] {
            assert_eq!(memnode_state(s), s.to_string());
        }
    }
}
