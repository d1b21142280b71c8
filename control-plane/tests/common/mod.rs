//! A cluster of real members on loopback for the acceptance tests: each
//! member is a `Member` (sled store in a temporary directory, Raft, HTTP
//! listener, lease judge) in this process; killing one stops all of it, and
//! a restart reopens its directory on its old port.
//!
//! Waits are on Raft metrics or the applied state, bounded by [`WAIT`] so a
//! broken cluster fails a test instead of hanging it; no sleep decides an
//! outcome.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use control_plane::api::{ClientError, ControlClient, MemberInfo};
use control_plane::config::{Role, Settings, Timing, Token};
use control_plane::member::{Member, MemberOptions};
use control_plane::network::{ClusterSecret, Partition};
use control_plane::raft::MemberId;
use control_plane::state::{Command, ControlState, MemNodeState, Outcome};
use openraft::ServerState;

/// Bound on every wait.
pub const WAIT: Duration = Duration::from_secs(60);

pub const TOKEN: &str = "test-token-0123456789";
/// A token without the admin role.
pub const OPERATOR_TOKEN: &str = "operator-token-0123456789";
pub const SECRET: &str = "test-cluster-secret-0123456789";

/// Timings for a loaded CI machine: elections rarer than the defaults (a
/// test runner starving a member for 150 ms must not topple the leader
/// every time), a short commit timeout so a minority's refusal comes fast.
pub fn settings() -> Settings {
    let mut s = Settings::new(
        ClusterSecret::new(SECRET).expect("valid secret"),
        vec![
            Token {
                name: "tester".into(),
                token: TOKEN.into(),
                role: Role::Admin,
            },
            Token {
                name: "operator".into(),
                token: OPERATOR_TOKEN.into(),
                role: Role::Operator,
            },
        ],
    )
    .expect("valid settings");
    s.timing = Timing {
        heartbeat: Duration::from_millis(50),
        election_timeout_min: Duration::from_millis(400),
        election_timeout_max: Duration::from_millis(800),
        commit_timeout: Duration::from_secs(2),
        ..Timing::default()
    };
    s
}

pub struct Cluster {
    pub settings: Settings,
    running: BTreeMap<MemberId, Member>,
    addrs: BTreeMap<MemberId, SocketAddr>,
    dirs: BTreeMap<MemberId, tempfile::TempDir>,
    partitions: BTreeMap<MemberId, Partition>,
}

impl Cluster {
    /// Starts members `1..=n` and forms a cluster of all of them.
    pub async fn start(n: MemberId) -> Cluster {
        let mut c = Cluster {
            settings: settings(),
            running: BTreeMap::new(),
            addrs: BTreeMap::new(),
            dirs: BTreeMap::new(),
            partitions: BTreeMap::new(),
        };
        for id in 1..=n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            c.addrs.insert(id, listener.local_addr().expect("addr"));
            c.dirs.insert(id, tempfile::tempdir().expect("tempdir"));
            c.partitions.insert(id, Partition::default());
            c.launch(id, listener).await;
        }
        let members = c
            .addrs
            .iter()
            .map(|(&id, addr)| MemberInfo {
                id,
                addr: addr.to_string(),
                voter: true,
            })
            .collect();
        c.client(1).init(members).await.expect("init");
        c.leader().await;
        c
    }

    async fn launch(&mut self, id: MemberId, listener: tokio::net::TcpListener) {
        let options = MemberOptions {
            id,
            data_dir: self.dirs[&id].path().to_path_buf(),
            advertise: None,
            settings: self.settings.clone(),
            partition: self.partitions[&id].clone(),
        };
        let member = Member::start(listener, options).await.expect("member starts");
        self.running.insert(id, member);
    }

    pub fn ids(&self) -> Vec<MemberId> {
        self.running.keys().copied().collect()
    }

    pub fn addr(&self, id: MemberId) -> SocketAddr {
        self.addrs[&id]
    }

    pub fn member(&self, id: MemberId) -> &Member {
        &self.running[&id]
    }

    pub fn client(&self, id: MemberId) -> ControlClient {
        ControlClient::new(&self.addrs[&id].to_string(), Some(TOKEN.into())).expect("client")
    }

    /// Waits until every running member names the same leader, which
    /// leads, and returns it.
    pub async fn leader(&self) -> MemberId {
        self.leader_among(&self.ids()).await
    }

    /// Waits until members `among` name the same leader, one of them that
    /// leads, and returns it.
    pub async fn leader_among(&self, among: &[MemberId]) -> MemberId {
        let running = among.to_vec();
        tokio::time::timeout(WAIT, async {
            loop {
                let mut seen = Vec::new();
                for id in &running {
                    let m = self.running[id].raft().metrics().borrow().clone();
                    seen.push((m.current_leader, m.state));
                }
                if let Some((Some(l), _)) = seen.first() {
                    let agreed = seen.iter().all(|(x, _)| *x == Some(*l));
                    let leads = running
                        .contains(l)
                        .then(|| &self.running[l])
                        .map(|m| m.raft().metrics().borrow().state == ServerState::Leader);
                    if agreed && leads == Some(true) {
                        return *l;
                    }
                }
                // Metrics change on every election step: wait for the next.
                let mut rx = self.running[&running[0]].raft().metrics();
                let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
            }
        })
        .await
        .expect("a leader agreed on within the wait")
    }

    /// Waits until a member other than `old` leads members `among`.
    pub async fn new_leader(&self, old: MemberId, among: &[MemberId]) -> MemberId {
        tokio::time::timeout(WAIT, async {
            loop {
                let l = self.leader_among(among).await;
                if l != old {
                    return l;
                }
            }
        })
        .await
        .expect("a new leader within the wait")
    }

    /// Kills member `id` (listener, Raft, judge); its directory stays.
    pub async fn kill(&mut self, id: MemberId) {
        let member = self.running.remove(&id).expect("member is running");
        member.shutdown().await;
    }

    /// Restarts a killed member on its old port and directory.
    pub async fn restart(&mut self, id: MemberId) {
        let listener = tokio::net::TcpListener::bind(self.addrs[&id])
            .await
            .expect("rebind old port");
        self.launch(id, listener).await;
    }

    /// Cuts `minority` off from every other member, both ways.
    pub fn partition(&self, minority: &[MemberId]) {
        for (&id, p) in &self.partitions {
            if minority.contains(&id) {
                p.cut(self.addrs.keys().copied().filter(|x| !minority.contains(x)));
            } else {
                p.cut(minority.iter().copied());
            }
        }
    }

    pub fn heal(&self) {
        for p in self.partitions.values() {
            p.heal();
        }
    }

    /// Sends `command` to member `via` until it is committed (or refused by
    /// the state machine), retrying while the cluster has no reachable
    /// leader (503/502 or a failed connection) within [`WAIT`].
    pub async fn write(&self, via: MemberId, command: &Command) -> Result<Outcome, ClientError> {
        let client = self.client(via);
        tokio::time::timeout(WAIT, async {
            loop {
                match client.command(command).await {
                    Err(ClientError::Refused { status, .. })
                        if status.as_u16() == 503 || status.as_u16() == 502 => {}
                    Err(ClientError::Http { .. }) => {}
                    other => return other,
                }
                let mut rx = self.running[&via].raft().metrics();
                let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
            }
        })
        .await
        .expect("written within the wait")
    }

    /// Waits until member `id`'s applied state satisfies `f`.
    pub async fn wait_state<R>(&self, id: MemberId, f: impl FnMut(&ControlState) -> Option<R>) -> R {
        tokio::time::timeout(WAIT, self.running[&id].state().wait_for(f))
            .await
            .expect("state reached within the wait")
    }

    /// Waits until every running member has applied `index`.
    pub async fn wait_applied(&self, index: u64) {
        for m in self.running.values() {
            m.raft()
                .wait(Some(WAIT))
                .applied_index_at_least(Some(index), "catch up")
                .await
                .expect("applied within the wait");
        }
    }

    /// The leader's last applied index.
    pub fn applied(&self, id: MemberId) -> u64 {
        self.running[&id].state().last_applied().map_or(0, |l| l.index)
    }

    pub async fn stop(mut self) {
        for id in self.ids() {
            self.kill(id).await;
        }
    }
}

impl Cluster {
    /// Registers memory nodes `mn-0:1`..`mn-{n-1}:1` through `via`, renews
    /// each once and waits until the leader has activated them all (within
    /// one lease, which is plenty for placing regions right after).
    pub async fn active_memnodes(&self, via: MemberId, n: u16) {
        for i in 0..n {
            self.write(via, &register(&format!("mn-{i}:1")))
                .await
                .expect("register");
            self.client(via).renew_memnode(i).await.expect("renew");
        }
        let leader = self.leader().await;
        self.wait_state(leader, |s| {
            (s.memnodes.len() == usize::from(n)
                && s.memnodes.values().all(|m| m.state == MemNodeState::Active))
            .then_some(())
        })
        .await;
    }
}

pub fn register(endpoint: &str) -> Command {
    Command::RegisterMemNode {
        endpoint: endpoint.into(),
        capacity_bytes: 1 << 30,
        image: None,
    }
}

/// The state as operators see it: everything but the audit trail (which
/// also records refusals and the judge's decisions).
pub fn tables(s: &ControlState) -> String {
    format!("{:?}|{:?}|{:?}|{:?}", s.epoch, s.memnodes, s.regions, s.clients)
}
