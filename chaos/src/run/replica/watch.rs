//! How a local-cluster run reads the control plane: `Watch` asks the
//! members in turn (skipping one the run has stopped, and moved by a
//! snapshot restore); `Status` is one read of the state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster::Cluster;
use control_plane::api::ControlClient;
use control_plane::state::{MemNodeId, MemNodeState, Region};

use super::faults::PHASE_POLL;
use crate::run::RunError;

/// Longest wait for one member's status while phases are watched: a
/// member answers from its own state at once, so a silent one is stopped,
/// dead or cut off, and the next is asked.
pub(super) const MEMBER_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest a status read goes on asking the members in turn (an election
/// is a fraction of it).
const READ_WAIT: Duration = Duration::from_secs(10);
/// The control plane's state as the runner watches it: each member asked
/// in turn, skipping one the runner has stopped (SIGSTOP leaves its socket
/// accepting and silent: every read would wait out a timeout there).
pub(super) struct Watch {
    members: std::sync::RwLock<Vec<ControlClient>>,
    token: String,
    /// The member (index) stopped now; `usize::MAX`: none.
    stopped: AtomicUsize,
}

impl Watch {
    /// Readers of the members at `endpoints`, in member order.
    pub(super) fn new(endpoints: &[String], token: &str) -> Result<Watch, RunError> {
        Ok(Watch {
            members: std::sync::RwLock::new(clients_of(endpoints, token)?),
            token: token.to_owned(),
            stopped: AtomicUsize::new(usize::MAX),
        })
    }

    /// Reads the members at `endpoints` from now on.
    pub(super) fn retarget(&self, endpoints: &[String]) -> Result<(), RunError> {
        let clients = clients_of(endpoints, &self.token)?;
        *self.members.write().unwrap_or_else(|p| p.into_inner()) = clients;
        Ok(())
    }

    /// One read of the state, from the first member that answers within
    /// [`MEMBER_READ_TIMEOUT`], for at most [`READ_WAIT`].
    pub(super) async fn status(&self) -> Result<Status, RunError> {
        let deadline = Instant::now() + READ_WAIT;
        loop {
            let mut last = String::new();
            let stopped = self.stopped.load(Ordering::Acquire);
            let members = self.members.read().unwrap_or_else(|p| p.into_inner()).clone();
            for (i, c) in members.iter().enumerate().filter(|(i, _)| *i != stopped) {
                match tokio::time::timeout(MEMBER_READ_TIMEOUT, c.status()).await {
                    Ok(Ok(s)) => return Ok(Status(s)),
                    Ok(Err(e)) => last = format!("member {}: {e}", i + 1),
                    Err(_) => last = format!("member {}: no answer within {MEMBER_READ_TIMEOUT:?}", i + 1),
                }
            }
            if Instant::now() >= deadline {
                return Err(RunError::Control(format!(
                    "no control-plane member answered a status read within {READ_WAIT:?}; last: {last}"
                )));
            }
            tokio::time::sleep(PHASE_POLL).await;
        }
    }

    pub(super) fn set_stopped(&self, member: Option<usize>) {
        self.stopped
            .store(member.unwrap_or(usize::MAX), Ordering::Release);
    }
}

fn clients_of(endpoints: &[String], token: &str) -> Result<Vec<ControlClient>, RunError> {
    endpoints
        .iter()
        .map(|e| ControlClient::new(e, Some(token.to_owned())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Control(format!("cannot make a control-plane client: {e}")))
}

/// One read of the control plane's state (bounded, from any member that
/// answers: `Cluster::status`).
pub(super) struct Status(pub(super) control_plane::api::Status);

impl Status {
    pub(super) async fn read(cluster: &Cluster) -> Result<Status, RunError> {
        cluster
            .status()
            .await
            .map(Status)
            .map_err(|e| RunError::Control(e.to_string()))
    }

    pub(super) fn region_of(&self, index: &str) -> Result<&Region, RunError> {
        let x = self
            .0
            .indexes
            .iter()
            .find(|x| x.name == index)
            .ok_or_else(|| RunError::Control(format!("no index {index}")))?;
        self.region(x.region)
    }

    pub(super) fn region(&self, id: fabric::RegionId) -> Result<&Region, RunError> {
        self.0
            .regions
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| RunError::Control(format!("no region {id}")))
    }

    /// Whether `r` is whole, or degraded with no node left to heal it.
    pub(super) fn settled(&self, r: &Region) -> bool {
        control_plane::state::settled(r, self.0.memnodes.iter())
    }

    pub(super) fn node_state(&self, node: MemNodeId) -> Option<MemNodeState> {
        self.0.memnodes.iter().find(|n| n.id == node).map(|n| n.state)
    }

    /// The image id `node`'s record names.
    pub(super) fn image_of(&self, node: MemNodeId) -> Option<fabric::ImageId> {
        self.0
            .memnodes
            .iter()
            .find(|n| n.id == node)
            .and_then(|n| n.image)
    }
}
