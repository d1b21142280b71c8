//! Control-plane members as processes: `kintsugi control` children with a
//! fresh secret and token, formed into a cluster, killed and restarted on
//! their old address. What `chaos run` (one member) and `bench control`
//! (three, with failover) both start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use control_plane::api::{ClientError, ControlClient, Status};
use control_plane::config::{RecoverySection, Role, Settings, Timing, Token, SECRET_ENV, TOKEN_ENV};
use control_plane::network::ClusterSecret;
use control_plane::raft::MemberId;
use rand::distributions::{Alphanumeric, DistString};

use crate::launch::{Launch, LaunchError, Process, StopBy, START_TIMEOUT};

/// How long forming the cluster may take (an election, then each member
/// added and caught up).
pub const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for one API call of the set-up.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between polls of a member's status.
pub const POLL: Duration = Duration::from_millis(10);
/// Tries at restarting a member on its old port: another process may hold
/// the port for a moment after the kill (an outgoing connection that drew
/// it as its ephemeral port).
const RESTART_TRIES: u32 = 10;
/// Pause between restart tries.
const RESTART_PAUSE: Duration = Duration::from_millis(200);
/// Length of the generated secret and token.
const CREDENTIAL_CHARS: usize = 32;

/// Why the control plane could not be started, formed or reached.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A member process failed.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A file system step of the set-up.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was tried.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// A member refused or failed a call.
    #[error("{what}: {source}")]
    Api {
        /// The call.
        what: String,
        /// Its error.
        #[source]
        source: ClientError,
    },
    /// A member did not answer in time, or a condition never held.
    #[error("{what}: no answer within {within:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The bound.
        within: Duration,
    },
    /// A member asked to restart was never killed.
    #[error("member {id} is still running")]
    StillRunning {
        /// The member.
        id: MemberId,
    },
    /// A member restarted elsewhere than asked.
    #[error("member {id} restarted on {got} instead of {want}")]
    Moved {
        /// The member.
        id: MemberId,
        /// Where it serves now.
        got: String,
        /// Where it served.
        want: String,
    },
}

/// Where a member's stderr goes.
#[derive(Clone, Debug)]
pub enum MemberLogs {
    /// `DIR/control-plane-<id>.log` (a run keeps its children's logs).
    Files(PathBuf),
    /// Our stderr, prefixed `member <id>: ` (a bench shows them live).
    Forward,
}

/// One `kintsugi control` child.
#[derive(Debug)]
pub struct Member {
    /// Its id.
    pub id: MemberId,
    /// `host:port` it serves Raft and the API on (what it printed).
    pub addr: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// `None` once killed.
    process: Option<Process>,
    /// Times it was started again: a restarted member logs to a file of
    /// its own (`control-plane-<id>.restart-<n>.log`), keeping what the
    /// dead one wrote.
    restarts: u32,
}

impl Member {
    /// True until killed.
    pub fn alive(&self) -> bool {
        self.process.is_some()
    }
}

/// Members, their shared secret and token. Every member is killed when
/// this drops (before its directory is removed, if it is a temporary one).
#[derive(Debug)]
pub struct ControlPlane {
    /// By index: member `i` has id `i + 1`.
    pub members: Vec<Member>,
    /// The bearer token every member accepts (fresh: nothing outside the
    /// run can talk to its members).
    pub token: String,
    /// A token of role `client` (registering, renewing, opening indexes
    /// only), when started with [`ControlPlane::start_configured`].
    pub client_token: Option<String>,
    secret: String,
    /// The members' settings file, when started configured.
    config: Option<PathBuf>,
    exe: PathBuf,
    /// Added to every member's environment.
    env: Vec<(String, String)>,
    logs: MemberLogs,
    dir: PathBuf,
    /// Declared last: removed after the members are gone.
    _temp: Option<tempfile::TempDir>,
}

impl ControlPlane {
    /// The members' cluster secret: what memory nodes' admission keys are
    /// derived from (`fabric::admission`).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Starts `n` members of `exe` on free loopback ports, their data in
    /// `dir` (a fresh temporary directory if `None`; a left-over data
    /// directory of an earlier run is removed, since a member that finds a
    /// formed cluster refuses to form a new one). They are not a cluster
    /// yet: [`ControlPlane::form`].
    pub fn start(exe: &Path, n: usize, dir: Option<&Path>, logs: MemberLogs) -> Result<Self, ControlError> {
        Self::start_inner(exe, n, dir, logs, None, &[])
    }

    /// [`ControlPlane::start`] with `timing` and `recovery`, and a second,
    /// client-role token ([`ControlPlane::client_token`]): the members read
    /// both tokens, the secret, the timing and the recovery section from
    /// `DIR/control.toml` (mode 0600). Every member is started (and
    /// restarted) with `env` added to its environment.
    pub fn start_configured(
        exe: &Path,
        n: usize,
        dir: &Path,
        logs: MemberLogs,
        timing: &Timing,
        recovery: &RecoverySection,
        env: &[(String, String)],
    ) -> Result<Self, ControlError> {
        Self::start_inner(exe, n, Some(dir), logs, Some((timing, recovery)), env)
    }

    fn start_inner(
        exe: &Path,
        n: usize,
        dir: Option<&Path>,
        logs: MemberLogs,
        settings: Option<(&Timing, &RecoverySection)>,
        env: &[(String, String)],
    ) -> Result<Self, ControlError> {
        let (dir, temp) = match dir {
            Some(d) => (d.to_owned(), None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("kintsugi-control-")
                    .tempdir()
                    .map_err(|source| ControlError::Io {
                        what: "cannot create a temporary directory in",
                        path: std::env::temp_dir(),
                        source,
                    })?;
                (t.path().to_owned(), Some(t))
            }
        };
        let mut rng = rand::thread_rng();
        let mut plane = ControlPlane {
            members: Vec::with_capacity(n),
            token: Alphanumeric.sample_string(&mut rng, CREDENTIAL_CHARS),
            client_token: None,
            secret: Alphanumeric.sample_string(&mut rng, CREDENTIAL_CHARS),
            config: None,
            exe: exe.to_owned(),
            env: env.to_vec(),
            logs,
            dir,
            _temp: temp,
        };
        if let Some((timing, recovery)) = settings {
            plane.client_token = Some(Alphanumeric.sample_string(&mut rng, CREDENTIAL_CHARS));
            plane.config = Some(plane.write_config(timing, recovery)?);
        }
        for i in 0..n {
            let id = i as MemberId + 1;
            let data_dir = plane.dir.join(format!("control-plane-{id}"));
            if data_dir.exists() {
                std::fs::remove_dir_all(&data_dir).map_err(|source| ControlError::Io {
                    what: "cannot remove the left-over",
                    path: data_dir.clone(),
                    source,
                })?;
            }
            let member = plane.spawn(id, "127.0.0.1:0", data_dir, 0)?;
            plane.members.push(member);
        }
        Ok(plane)
    }

    /// Starts as many new members as this plane has, in `dir`, with its
    /// secret, tokens, settings and environment: the control plane an
    /// operator builds to restore this one's snapshot into, whose
    /// processes (still configured with the old tokens) it must accept.
    /// Not a cluster yet: [`ControlPlane::form`].
    pub fn start_successor(&self, dir: &Path) -> Result<ControlPlane, ControlError> {
        let io = |what, path: &Path, source| ControlError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| io("cannot create", dir, e))?;
        let config = match &self.config {
            Some(old) => {
                let text = std::fs::read_to_string(old).map_err(|e| io("cannot read", old, e))?;
                let path = dir.join("control.toml");
                write_private(&path, &text).map_err(|e| io("cannot write", &path, e))?;
                Some(path)
            }
            None => None,
        };
        let logs = match &self.logs {
            MemberLogs::Files(_) => MemberLogs::Files(dir.to_owned()),
            MemberLogs::Forward => MemberLogs::Forward,
        };
        let mut plane = ControlPlane {
            members: Vec::with_capacity(self.members.len()),
            token: self.token.clone(),
            client_token: self.client_token.clone(),
            secret: self.secret.clone(),
            config,
            exe: self.exe.clone(),
            env: self.env.clone(),
            logs,
            dir: dir.to_owned(),
            _temp: None,
        };
        for i in 0..self.members.len() {
            let id = i as MemberId + 1;
            let member = plane.spawn(id, "127.0.0.1:0", dir.join(format!("control-plane-{id}")), 0)?;
            plane.members.push(member);
        }
        Ok(plane)
    }

    /// Writes the members' settings: secret, the admin and client
    /// tokens, `timing`, `recovery`. Readable by the owner only: it holds
    /// the secret.
    fn write_config(&self, timing: &Timing, recovery: &RecoverySection) -> Result<PathBuf, ControlError> {
        let path = self.dir.join("control.toml");
        let io = |what, source| ControlError::Io {
            what,
            path: path.clone(),
            source,
        };
        let encoding = |e: &dyn std::fmt::Display| {
            io(
                "cannot encode the settings for",
                std::io::Error::other(e.to_string()),
            )
        };
        let token = |name: &str, token: &str, role| Token {
            name: name.to_owned(),
            token: token.to_owned(),
            role,
        };
        let settings = Settings {
            cluster_secret: ClusterSecret::new(self.secret.clone()).map_err(|e| encoding(&e))?,
            tokens: vec![
                token("operator", &self.token, Role::Admin),
                token(
                    "client",
                    self.client_token.as_deref().unwrap_or_default(),
                    Role::Client,
                ),
            ],
            timing: timing.clone(),
            recovery: recovery.clone(),
            tls: None,
            member: toml::Table::new(),
        };
        let text = toml::to_string(&settings).map_err(|e| encoding(&e))?;
        std::fs::create_dir_all(&self.dir).map_err(|e| io("cannot create the directory of", e))?;
        write_private(&path, &text).map_err(|e| io("cannot write", e))?;
        Ok(path)
    }

    /// Where the members keep their data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The address of member `i` (an index into `members`).
    pub fn addr(&self, i: usize) -> &str {
        &self.members[i].addr
    }

    /// A client of member `i`.
    pub fn client(&self, i: usize) -> Result<ControlClient, ControlError> {
        let m = &self.members[i];
        ControlClient::new(&m.addr, Some(self.token.clone())).map_err(|source| ControlError::Api {
            what: format!("cannot make a client of member {} at {}", m.id, m.addr),
            source,
        })
    }

    /// One client per member, by index.
    pub fn clients(&self) -> Result<Vec<ControlClient>, ControlError> {
        (0..self.members.len()).map(|i| self.client(i)).collect()
    }

    /// Starts one member and waits for its `listening ADDR`.
    fn spawn(
        &self,
        id: MemberId,
        listen: &str,
        data_dir: PathBuf,
        restarts: u32,
    ) -> Result<Member, ControlError> {
        let launch = Launch::new(&self.exe, format!("control-plane member {id}"))
            .args([
                "control",
                "--id",
                &id.to_string(),
                "--listen",
                listen,
                "--data-dir",
            ])
            .arg(&data_dir);
        let launch = match &self.config {
            Some(config) => launch.arg("--config").arg(config),
            None => launch.env(SECRET_ENV, &self.secret).env(TOKEN_ENV, &self.token),
        };
        let launch = launch
            // Members narrate elections at info, and openraft warns of every
            // append to a member killed on purpose.
            .quiet()
            // A member is crashed on purpose, never shut down.
            .stop_by(StopBy::Kill);
        // Last, so that the caller's variables win (RUST_LOG included).
        let launch = self.env.iter().fold(launch, |launch, (k, v)| launch.env(k, v));
        let launch = match &self.logs {
            MemberLogs::Files(dir) => launch.log_to(dir.join(match restarts {
                0 => format!("control-plane-{id}.log"),
                n => format!("control-plane-{id}.restart-{n}.log"),
            })),
            MemberLogs::Forward => launch.forward_stderr(format!("member {id}: ")),
        };
        let mut process = launch.spawn()?;
        let addr = process.await_listening(START_TIMEOUT)?;
        Ok(Member {
            id,
            addr,
            data_dir,
            process: Some(process),
            restarts,
        })
    }

    /// True if member `i` was started and has exited on its own since (a
    /// crash point planted through its environment); it counts as killed
    /// from then on, so [`ControlPlane::restart`] may start it again.
    pub fn exited(&mut self, i: usize) -> bool {
        let m = &mut self.members[i];
        let exited = m.process.as_mut().is_some_and(|p| !p.alive());
        if exited {
            m.process = None;
        }
        exited
    }

    /// SIGKILLs member `i` (a crash) and returns when it was sent.
    pub fn kill(&mut self, i: usize) -> Result<Instant, ControlError> {
        let m = &mut self.members[i];
        let mut p = m.process.take().ok_or_else(|| LaunchError::NotRunning {
            name: format!("control-plane member {}", m.id),
        })?;
        Ok(p.kill()?)
    }

    /// Sends `signal` to member `i` (SIGSTOP: a member paused in place, its
    /// sockets open and silent; SIGCONT: it goes on where it stopped).
    pub fn signal(&self, i: usize, signal: nix::sys::signal::Signal) -> Result<(), ControlError> {
        let m = &self.members[i];
        let p = m.process.as_ref().ok_or_else(|| LaunchError::NotRunning {
            name: format!("control-plane member {}", m.id),
        })?;
        Ok(p.signal(signal)?)
    }

    /// Restarts member `i`, killed before, on its old address and data
    /// directory, so the membership the others hold stays valid.
    pub async fn restart(&mut self, i: usize) -> Result<(), ControlError> {
        let (id, addr, data_dir, restarts) = {
            let m = &self.members[i];
            if m.alive() {
                return Err(ControlError::StillRunning { id: m.id });
            }
            (m.id, m.addr.clone(), m.data_dir.clone(), m.restarts + 1)
        };
        let mut tries = 0;
        loop {
            tries += 1;
            match self.spawn(id, &addr, data_dir.clone(), restarts) {
                Ok(m) if m.addr == addr => {
                    self.members[i] = m;
                    return Ok(());
                }
                Ok(m) => {
                    return Err(ControlError::Moved {
                        id,
                        got: m.addr.clone(),
                        want: addr,
                    })
                }
                Err(e) if tries >= RESTART_TRIES => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, member = id, "restart on the old port: retrying");
                    tokio::time::sleep(RESTART_PAUSE).await;
                }
            }
        }
    }

    /// Forms the cluster: `init` on member 1 alone, waits until it leads,
    /// then adds every other member as a voter through it (each call waits
    /// for the member to catch up).
    pub async fn form(&self) -> Result<(), ControlError> {
        let first = self.client(0)?;
        call("init on member 1", first.init(Vec::new())).await?;
        let deadline = Instant::now() + FORM_TIMEOUT;
        // A member of one elects itself at once, but not synchronously with init.
        loop {
            if call("status of member 1", first.status()).await?.role == "leader" {
                break;
            }
            if Instant::now() >= deadline {
                return Err(ControlError::Timeout {
                    what: "member 1 to lead after init".into(),
                    within: FORM_TIMEOUT,
                });
            }
            tokio::time::sleep(POLL).await;
        }
        for m in &self.members[1..] {
            let what = format!("adding member {} ({})", m.id, m.addr);
            loop {
                match call(&what, first.add_member(m.id, &m.addr, true)).await {
                    Ok(_) => break,
                    Err(e) if Instant::now() < deadline => {
                        tracing::debug!(error = %e, member = m.id, "add_member: retrying");
                        tokio::time::sleep(POLL * 5).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Which live member leads, by its own status; with two claimants (an
    /// old leader that has not heard of the new term yet), the higher term.
    pub async fn leader(
        &self,
        clients: &[ControlClient],
        within: Duration,
    ) -> Result<(usize, Status), ControlError> {
        let deadline = Instant::now() + within;
        loop {
            let mut best: Option<(usize, Status)> = None;
            for (i, c) in clients.iter().enumerate() {
                if !self.members[i].alive() {
                    continue;
                }
                let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await else {
                    continue;
                };
                if s.role == "leader" && best.as_ref().is_none_or(|(_, b)| s.term > b.term) {
                    best = Some((i, s));
                }
            }
            if let Some(found) = best {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                return Err(ControlError::Timeout {
                    what: "a member to claim the lead".into(),
                    within,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Writes `text` to `path` (created or truncated) readable by its owner
/// only: the files that hold the cluster secret or tokens.
pub(crate) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(path)?, text.as_bytes())
}

/// Waits until `n` memory nodes are registered and active (they renewed
/// their lease once), at most [`FORM_TIMEOUT`]; `logs` says where to look
/// when they are not.
pub async fn await_memnodes(api: &ControlClient, n: usize, logs: &str) -> Result<(), ControlError> {
    let deadline = Instant::now() + FORM_TIMEOUT;
    loop {
        let nodes = call("listing memory nodes", api.memnodes()).await?;
        let active = nodes
            .iter()
            .filter(|m| m.state == control_plane::state::MemNodeState::Active)
            .count();
        if active >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ControlError::Timeout {
                what: format!("{n} memory nodes registered and active ({active} are; see {logs})"),
                within: FORM_TIMEOUT,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One API call, bounded by [`CALL_TIMEOUT`].
pub async fn call<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ControlError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map_err(|source| ControlError::Api {
            what: what.to_owned(),
            source,
        }),
        Err(_) => Err(ControlError::Timeout {
            what: what.to_owned(),
            within: CALL_TIMEOUT,
        }),
    }
}
