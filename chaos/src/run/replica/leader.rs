//! The faults on the control plane's Raft leader: killed
//! (`kill-control-leader`), stopped past an election
//! (`pause-control-leader`) or its lead moved (`transfer-leader`), each
//! watched until another member leads and the old one is back or follows.

use std::time::{Duration, Instant};

use control_plane::api::{ControlClient, Status};
use control_plane::state::MemNodeId;
use harness::control::ControlPlane;
use harness::local::LocalCluster;
use nix::sys::signal::Signal;

use super::faults::{control_error, ms_since, Phases, Watch, MEMBER_READ_TIMEOUT, PHASE_POLL};
use super::PHASE_TIMEOUT;
use crate::run::RunError;

/// Pause between attempts of a leadership transfer the leader refused for
/// now (its target not caught up yet, another transfer under way).
const TRANSFER_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A client of every member, the leader's index among them, and the
/// leader's status (its term and id).
async fn leader_now(control: &ControlPlane) -> Result<(Vec<ControlClient>, usize, Status), RunError> {
    let clients = control.clients().map_err(control_error)?;
    let (i, status) = control
        .leader(&clients, PHASE_TIMEOUT)
        .await
        .map_err(control_error)?;
    Ok((clients, i, status))
}

/// SIGSTOPs the Raft leader (its recovery coordinator with it), waits for
/// another member to lead, SIGCONTs it `pause` after the stop, and waits
/// until it follows the new leader. Times from `start`. Returns the
/// paused member's id and the phases.
pub(super) async fn pause_leader(
    control: &ControlPlane,
    watch: &Watch,
    pause: Duration,
    start: Instant,
) -> Result<(MemNodeId, Phases), RunError> {
    let (clients, i, old) = leader_now(control).await?;
    watch.set_stopped(Some(i));
    control.signal(i, Signal::SIGSTOP).map_err(control_error)?;
    let stopped = Instant::now();
    let mut p = Phases {
        leader_faulted_ms: Some(ms_since(start)),
        ..Phases::default()
    };
    let resume = async {
        tokio::time::sleep_until((stopped + pause).into()).await;
        let sent = control.signal(i, Signal::SIGCONT);
        watch.set_stopped(None);
        (ms_since(start), sent)
    };
    let (elected, (resumed, sent)) = tokio::join!(await_new_leader(&clients, i, old.term, start), resume);
    sent.map_err(control_error)?;
    p.resumed_ms = Some(resumed);
    p.elected_ms = elected;
    p.member_back_ms = await_follower(&clients[i], old.member, start).await;
    tracing::info!(member = old.member, phases = %p, "control-plane leader paused and resumed");
    Ok((old.member as MemNodeId, p))
}

/// Moves the Raft lead from the leader to the next live member, as `ctl
/// members transfer-leader` does, and waits until the old leader follows
/// the new one. Times from `start`. Returns the old leader's id and the
/// phases.
pub(super) async fn transfer_leader(
    control: &ControlPlane,
    start: Instant,
) -> Result<(MemNodeId, Phases), RunError> {
    let (clients, i, old) = leader_now(control).await?;
    let n = control.members.len();
    let to = (1..n)
        .map(|k| (i + k) % n)
        .find(|&j| control.members[j].alive())
        .ok_or_else(|| RunError::Control("no other live member to hand the lead to".into()))?;
    let to_id = control.members[to].id;
    let mut p = Phases::default();
    loop {
        match clients[i].transfer_leader(to_id).await {
            Ok(moved) => {
                p.leader_faulted_ms = Some(ms_since(start) - moved.took_ms as f64);
                break;
            }
            // Refused for now (its target not caught up, a transfer under
            // way): asked again, within the phase timeout.
            Err(e) if start.elapsed() < PHASE_TIMEOUT => {
                tracing::debug!(error = %e, to = to_id, "leader transfer refused; asking again");
                tokio::time::sleep(TRANSFER_RETRY_PAUSE).await;
            }
            Err(e) => {
                return Err(RunError::Control(format!(
                    "member {} did not hand the lead to {to_id}: {e}",
                    old.member
                )))
            }
        }
    }
    p.elected_ms = await_new_leader(&clients, i, old.term, start).await;
    p.member_back_ms = await_follower(&clients[i], old.member, start).await;
    tracing::info!(from = old.member, to = to_id, phases = %p, "control-plane lead moved");
    Ok((old.member as MemNodeId, p))
}

/// Polls every member but `old` until one leads at a term above `term`
/// (at most [`PHASE_TIMEOUT`]); when, in ms from `start`.
async fn await_new_leader(clients: &[ControlClient], old: usize, term: u64, start: Instant) -> Option<f64> {
    while start.elapsed() < PHASE_TIMEOUT {
        for (_, c) in clients.iter().enumerate().filter(|(j, _)| *j != old) {
            if let Ok(Ok(s)) = tokio::time::timeout(MEMBER_READ_TIMEOUT, c.status()).await {
                if s.role == "leader" && s.term > term {
                    return Some(ms_since(start));
                }
            }
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    None
}

/// Polls member `c` (id `me`, the old leader) until it follows another
/// leader (at most [`PHASE_TIMEOUT`]); when, in ms from `start`.
async fn await_follower(c: &ControlClient, me: control_plane::raft::MemberId, start: Instant) -> Option<f64> {
    while start.elapsed() < PHASE_TIMEOUT {
        if let Ok(Ok(s)) = tokio::time::timeout(MEMBER_READ_TIMEOUT, c.status()).await {
            if s.role != "leader" && s.leader.is_some_and(|l| l != me) {
                return Some(ms_since(start));
            }
        }
        tokio::time::sleep(PHASE_POLL).await;
    }
    None
}

/// SIGKILLs the Raft leader, waits for another member to claim the lead,
/// and (with `back_after`) restarts it that long after the kill and waits
/// until it knows the leader again. Returns the member's id and when it
/// was killed.
pub(super) async fn kill_leader(
    local: &mut LocalCluster,
    back_after: Option<Duration>,
) -> Result<(MemNodeId, Instant, Phases), RunError> {
    let control = |e: harness::control::ControlError| RunError::Control(e.to_string());
    let clients = local.control().clients().map_err(control)?;
    let (i, status) = local
        .control()
        .leader(&clients, PHASE_TIMEOUT)
        .await
        .map_err(control)?;
    let at = local.control().kill(i).map_err(control)?;
    let mut p = Phases::default();
    let (_, new) = local
        .control()
        .leader(&clients, PHASE_TIMEOUT)
        .await
        .map_err(control)?;
    p.elected_ms = Some(at.elapsed().as_secs_f64() * 1e3);
    tracing::info!(
        killed = status.member,
        elected = new.member,
        "control-plane leader replaced"
    );
    if let Some(d) = back_after {
        tokio::time::sleep_until((at + d).into()).await;
        local.control().restart(i).await.map_err(control)?;
        let c = &clients[i];
        while at.elapsed() < d + PHASE_TIMEOUT {
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await {
                if s.leader.is_some() {
                    p.member_back_ms = Some(at.elapsed().as_secs_f64() * 1e3);
                    break;
                }
            }
            tokio::time::sleep(PHASE_POLL).await;
        }
    }
    Ok((status.member as MemNodeId, at, p))
}
