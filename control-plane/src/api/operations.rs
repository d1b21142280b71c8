//! Routes for operating a cluster as a whole: snapshots saved and restored,
//! the state digest members are compared by, and moving the leadership.
//!
//! Moving the leadership (openraft 0.9 has no transfer of its own): the
//! leader stops its heartbeats, so that after one leader lease its
//! followers grant votes again; it asks the target to campaign right then,
//! before any other follower's election timer (a lease plus a random
//! election timeout) fires; it takes its heartbeats back once a new leader
//! is known, or the attempt is given up.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::{Extension, Json};
use openraft::ServerState;

use super::server::Actor;
use super::{Campaign, LeaderMoved, Snapshot, StateDigest, TransferLeader, SNAPSHOT_FORMAT};
use crate::config::Role;
use crate::member::{now_ms, Node, WriteError};
use crate::reply::{JsonBody, Refusal};
use crate::state::{state_hash, Command, Outcome, SavedState};

type Shared = Arc<Node>;

/// Longest a target campaigns: a handful of election rounds; past that the
/// transfer has failed and the cluster elects as it always would.
const CAMPAIGN_FOR: Duration = Duration::from_secs(2);

/// Pause between a target's election attempts.
const CAMPAIGN_RETRY: Duration = Duration::from_millis(40);

/// How long after the leader's last heartbeat the target first campaigns,
/// beyond the leader lease: the followers' leases must have lapsed, and
/// the margin absorbs a heartbeat in flight.
const CAMPAIGN_MARGIN: Duration = Duration::from_millis(30);

/// Longest `after_ms` a campaign request may ask for.
const CAMPAIGN_DELAY_MS_MAX: u64 = 10_000;

/// `GET /v1/snapshot`: the leader's state as it has applied it.
pub(super) async fn snapshot(
    State(node): State<Shared>,
    Extension(Actor(actor, role)): Extension<Actor>,
) -> Result<Json<Snapshot>, Refusal> {
    if role == Role::Client {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!("token {actor:?} has role \"client\": snapshots need role \"operator\" or \"admin\""),
        ));
    }
    // Everything committed before this request is applied here first.
    node.confirm_lead().await?;
    let members = node.members();
    let snapshot = node.reader.with_applied(|state, applied| Snapshot {
        format: SNAPSHOT_FORMAT,
        saved_at_ms: now_ms(),
        member: node.id,
        last_applied: applied.map(|l| l.index),
        members,
        state_hash: state_hash(state),
        state: state.clone(),
    });
    tracing::info!(
        member = node.id,
        actor,
        index = ?snapshot.last_applied,
        hash = %snapshot.state_hash,
        "snapshot taken"
    );
    Ok(Json(snapshot))
}

/// `POST /v1/snapshot/restore`: a snapshot's state becomes this (new,
/// empty) cluster's.
pub(super) async fn restore(
    State(node): State<Shared>,
    Extension(Actor(actor, _)): Extension<Actor>,
    JsonBody(snapshot): JsonBody<Snapshot>,
) -> Result<Json<Outcome>, Refusal> {
    if snapshot.format != SNAPSHOT_FORMAT {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "snapshot format {} is not the one this member reads ({SNAPSHOT_FORMAT})",
                snapshot.format
            ),
        ));
    }
    let hash = state_hash(&snapshot.state);
    if hash != snapshot.state_hash {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "the snapshot's state hashes to {hash}, not to the {} it was saved with: the file was \
                 changed or damaged",
                snapshot.state_hash
            ),
        ));
    }
    let command = Command::Restore {
        state: SavedState(Box::new(snapshot.state)),
    };
    Ok(Json(node.propose(&actor, command).await?))
}

/// `GET /v1/check`: this member's applied index and the digest of its
/// state there.
pub(super) async fn check(State(node): State<Shared>) -> Json<StateDigest> {
    let role = node.raft.metrics().borrow().state;
    Json(node.reader.with_applied(|state, applied| StateDigest {
        member: node.id,
        role: role_name(role).to_owned(),
        last_applied: applied.map(|l| l.index),
        epoch: state.epoch,
        state_hash: state_hash(state),
    }))
}

/// `POST /v1/leader`: moves the leadership to another voter.
pub(super) async fn transfer_leader(
    State(node): State<Shared>,
    headers: HeaderMap,
    JsonBody(TransferLeader { to }): JsonBody<TransferLeader>,
) -> Result<Json<LeaderMoved>, Refusal> {
    let started = Instant::now();
    let conflict = |why: String| Refusal::new(StatusCode::CONFLICT, why);
    if to == node.id {
        return Ok(Json(LeaderMoved {
            from: node.id,
            to,
            term: node.raft.metrics().borrow().current_term,
            took_ms: 0,
        }));
    }
    let Some(target) = node.members().into_iter().find(|m| m.id == to) else {
        return Err(conflict(format!("member {to} is not in the cluster")));
    };
    if !target.voter {
        return Err(conflict(format!(
            "member {to} is a learner: only a voter may lead"
        )));
    }
    // From here on this member proposes nothing and confirms nothing
    // (`WriteError::HandingOver`): an entry sent to the followers renews
    // their leases, and they would refuse the target their votes.
    if node
        .transferring
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Err(conflict("a leadership transfer is already under way".into()));
    }
    // In a task of its own: proposals and heartbeats come back on however
    // the request ends (a caller that hangs up, a forwarding member that
    // gives up waiting).
    let commit_timeout = node.settings.timing.commit_timeout;
    let lease = node.settings.timing.election_timeout_max;
    let task = {
        let node = node.clone();
        tokio::spawn(async move {
            // A target that lags would lose the election (its log is
            // shorter); nothing new is appended now.
            let caught_up = node
                .raft
                .wait(Some(commit_timeout))
                .metrics(
                    |m| {
                        let matched = m
                            .replication
                            .as_ref()
                            .and_then(|r| r.get(&to).cloned().flatten())
                            .map(|l| l.index);
                        matched.is_some() && matched == m.last_log_index
                    },
                    "transfer target caught up",
                )
                .await;
            let moved = if caught_up.is_err() {
                Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!(
                        "member {to} has not caught up with the leader's log within {}; try again",
                        humantime::format_duration(commit_timeout)
                    ),
                ))
            } else {
                node.raft.runtime_config().heartbeat(false);
                let moved = campaign_and_wait(&node, &target.addr, &headers, lease).await;
                // Always: a member that leads again later must heartbeat.
                node.raft.runtime_config().heartbeat(true);
                moved
            };
            node.transferring.store(false, Ordering::Release);
            moved
        })
    };
    let moved = task.await.map_err(|e| {
        Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the transfer failed: {e}"),
        )
    })?;
    let term = node.raft.metrics().borrow().current_term;
    match moved? {
        Some(leader) if leader == to => {
            tracing::info!(from = node.id, to, term, "leadership transferred");
            Ok(Json(LeaderMoved {
                from: node.id,
                to,
                term,
                took_ms: started.elapsed().as_millis() as u64,
            }))
        }
        Some(other) => Err(conflict(format!(
            "member {other} won the election instead of member {to} (term {term}); try again"
        ))),
        None => Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "member {to} did not take the lead within {}; member {} keeps it (or the cluster elects as \
                 usual)",
                humantime::format_duration(CAMPAIGN_FOR),
                node.id
            ),
        )),
    }
}

/// Asks the target to campaign once the followers' leases have lapsed, and
/// waits for a new leader. `None`: nobody else took the lead in time.
async fn campaign_and_wait(
    node: &Node,
    addr: &str,
    headers: &HeaderMap,
    lease: Duration,
) -> Result<Option<u64>, Refusal> {
    let url = format!("{}://{addr}/v1/campaign", node.scheme());
    let mut request = node.http.post(&url).json(&Campaign {
        after_ms: (lease + CAMPAIGN_MARGIN).as_millis() as u64,
    });
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        request = request.header(header::AUTHORIZATION, auth.clone());
    }
    let answer = request
        .timeout(node.settings.timing.commit_timeout)
        .send()
        .await
        .map_err(|e| {
            Refusal::new(
                StatusCode::BAD_GATEWAY,
                format!("asking {addr} to campaign: {e} (if it was asked, it may still take the lead: see `ctl status`)"),
            )
        })?;
    if !answer.status().is_success() {
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        return Err(Refusal::new(
            StatusCode::BAD_GATEWAY,
            format!("{addr} refused to campaign ({status}): {body}"),
        ));
    }
    let me = node.id;
    let waited = node
        .raft
        .wait(Some(lease + CAMPAIGN_MARGIN + CAMPAIGN_FOR))
        .metrics(|m| m.current_leader.is_some_and(|l| l != me), "a new leader")
        .await;
    Ok(waited.ok().and_then(|m| m.current_leader))
}

/// `POST /v1/campaign`: this member campaigns for the lead after
/// `after_ms`, again and again for [`CAMPAIGN_FOR`] until it leads. Sent by
/// a leader handing over (with the caller's admin token).
pub(super) async fn campaign(
    State(node): State<Shared>,
    JsonBody(Campaign { after_ms }): JsonBody<Campaign>,
) -> Result<StatusCode, Refusal> {
    if after_ms > CAMPAIGN_DELAY_MS_MAX {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("after_ms is at most {CAMPAIGN_DELAY_MS_MAX}"),
        ));
    }
    if !node.members().iter().any(|m| m.id == node.id && m.voter) {
        return Err(WriteError::Membership(format!("member {} is not a voter", node.id)).into());
    }
    let raft = node.raft.clone();
    let me = node.id;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        let until = Instant::now() + CAMPAIGN_FOR;
        let asked_in = raft.metrics().borrow().current_term;
        while Instant::now() < until {
            {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                if m.state == ServerState::Leader && m.current_leader == Some(me) {
                    return;
                }
                // Another member won an election since: campaigning on
                // would only depose it.
                if m.current_term > asked_in && m.current_leader.is_some_and(|l| l != me) {
                    tracing::info!(member = me, leader = ?m.current_leader, "another member took the lead");
                    return;
                }
            }
            if let Err(e) = raft.trigger().elect().await {
                tracing::warn!(member = me, error = %e, "campaign stopped");
                return;
            }
            tokio::time::sleep(CAMPAIGN_RETRY).await;
        }
        tracing::warn!(member = me, "campaign for the lead gave up");
    });
    Ok(StatusCode::ACCEPTED)
}

/// The name `status` uses for a Raft role.
pub(super) fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}
