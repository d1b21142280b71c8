//! The member processes of `bench control`: `kintsugi control` children of
//! this same binary in a temporary directory, a cluster formed of them, and
//! the kill and restart the failover rounds need.
//!
//! Every child is killed (SIGKILL) and reaped when its [`MemberProcess`]
//! drops, so no exit path of the bench, an error or a panic included,
//! leaves members running; the temporary directory goes after them.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use control_plane::api::{ControlClient, Status};
use control_plane::raft::MemberId;
use rand::distributions::{Alphanumeric, DistString};

// The bounds and log filter of every launcher of `kintsugi` children.
use chaos::run::cluster::{CHILD_LOG as MEMBER_LOG, START_TIMEOUT};
pub use chaos::run::control::CALL_TIMEOUT;

use crate::cli::control::{SECRET_ENV, TOKEN_ENV};

/// How long forming the cluster may take (an election, then each member
/// added and caught up).
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// Tries at restarting a member on its old port: another process may hold
/// the port for a moment after the kill (an outgoing connection that drew
/// it as its ephemeral port).
const RESTART_TRIES: u32 = 10;
/// Pause between polls of a member's status.
pub const POLL: Duration = Duration::from_millis(10);

/// One `kintsugi control` child.
pub struct MemberProcess {
    pub id: MemberId,
    /// `host:port` it serves Raft and the API on (what it printed).
    pub addr: String,
    pub data_dir: PathBuf,
    /// `None` once killed.
    child: Option<Child>,
}

impl MemberProcess {
    pub fn alive(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL (a crash, not a shutdown) and reap. Returns the instant the
    /// signal was sent: the failover clock starts there.
    pub fn kill(&mut self) -> anyhow::Result<Instant> {
        let Some(mut child) = self.child.take() else {
            bail!("member {} is not running", self.id);
        };
        child
            .kill()
            .with_context(|| format!("cannot kill member {} (pid {})", self.id, child.id()))?;
        let at = Instant::now();
        child
            .wait()
            .with_context(|| format!("cannot reap member {}", self.id))?;
        Ok(at)
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The members, their shared secret and token, and their directory.
pub struct Cluster {
    /// By index: member `i` has id `i + 1`. Declared before `dir` so the
    /// members are killed before their data directories are removed.
    pub members: Vec<MemberProcess>,
    /// The bearer token every member accepts.
    pub token: String,
    secret: String,
    exe: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` members on free loopback ports; they are not a cluster yet.
    pub async fn start(n: usize) -> anyhow::Result<Cluster> {
        let exe = std::env::current_exe().context("cannot find this executable to start members from")?;
        let dir = tempfile::Builder::new()
            .prefix("kintsugi-bench-control-")
            .tempdir()
            .context("cannot create a temporary directory for the members' data")?;
        // Fresh per run: nothing outside this run can talk to its members.
        let mut rng = rand::thread_rng();
        let secret = Alphanumeric.sample_string(&mut rng, 32);
        let token = Alphanumeric.sample_string(&mut rng, 32);
        let mut cluster = Cluster {
            members: Vec::with_capacity(n),
            token,
            secret,
            exe,
            dir,
        };
        for i in 0..n {
            let id = i as MemberId + 1;
            let data_dir = cluster.dir.path().join(format!("m{id}"));
            let member = cluster.spawn(id, "127.0.0.1:0", data_dir).await?;
            cluster.members.push(member);
        }
        Ok(cluster)
    }

    /// A client of member `i` (an index into `members`).
    pub fn client(&self, i: usize) -> anyhow::Result<ControlClient> {
        let m = &self.members[i];
        ControlClient::new(&m.addr, Some(self.token.clone()))
            .with_context(|| format!("cannot make a client of member {} at {}", m.id, m.addr))
    }

    /// One client per member, by index.
    pub fn clients(&self) -> anyhow::Result<Vec<ControlClient>> {
        (0..self.members.len()).map(|i| self.client(i)).collect()
    }

    /// Starts one `kintsugi control` and waits for its `listening ADDR`.
    async fn spawn(&self, id: MemberId, listen: &str, data_dir: PathBuf) -> anyhow::Result<MemberProcess> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("control")
            .args(["--id", &id.to_string(), "--listen", listen, "--data-dir"])
            .arg(&data_dir)
            .env(SECRET_ENV, &self.secret)
            .env(TOKEN_ENV, &self.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Members narrate elections and lease decisions at info, and
        // openraft warns of every append to a member the bench killed on
        // purpose: keep stderr for the bench's own progress and the members'
        // real warnings unless RUST_LOG asks for more (RUST_LOG=info).
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", MEMBER_LOG);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start member {id} ({} control)", self.exe.display()))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        // Guarded from here on: an error below kills it.
        let mut member = MemberProcess {
            id,
            addr: String::new(),
            data_dir,
            child: Some(child),
        };
        if let Some(stderr) = stderr {
            forward_stderr(id, stderr);
        }
        let stdout = stdout.ok_or_else(|| anyhow!("member {id}: no stdout pipe"))?;
        let line = match tokio::time::timeout(START_TIMEOUT, first_line(stdout)).await {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(e.context(format!("member {id} did not start"))),
            Err(_) => bail!("member {id} did not print its address within {START_TIMEOUT:?}"),
        };
        let Some(addr) = line.trim().strip_prefix("listening ") else {
            let exited = member.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            bail!(
                "member {id} printed {line:?} instead of `listening ADDR`{}",
                exited.map(|s| format!(" and exited ({s})")).unwrap_or_default()
            );
        };
        member.addr = addr.to_owned();
        Ok(member)
    }

    /// Restarts member `i`, killed before, on its old address and data
    /// directory, so the membership the others hold stays valid.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let (id, addr, data_dir) = {
            let m = &self.members[i];
            if m.alive() {
                bail!("member {} is still running", m.id);
            }
            (m.id, m.addr.clone(), m.data_dir.clone())
        };
        let mut last = None;
        for _ in 0..RESTART_TRIES {
            match self.spawn(id, &addr, data_dir.clone()).await {
                Ok(m) if m.addr == addr => {
                    self.members[i] = m;
                    return Ok(());
                }
                Ok(m) => bail!("member {id} restarted on {} instead of {addr}", m.addr),
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        Err(last
            .unwrap_or_else(|| anyhow!("no attempt made"))
            .context(format!("cannot restart member {id} on {addr}")))
    }

    /// Forms the cluster: `init` on member 1 alone, then every other member
    /// added as a voter through it (each call waits for the member to catch up).
    pub async fn form(&self) -> anyhow::Result<()> {
        let first = self.client(0)?;
        call(first.init(Vec::new())).await.context("init on member 1")?;
        let deadline = Instant::now() + FORM_TIMEOUT;
        // A member of one elects itself at once, but not synchronously with init.
        wait_until(deadline, "member 1 to lead after init", || async {
            Ok(call(first.status()).await?.role == "leader")
        })
        .await?;
        for m in &self.members[1..] {
            loop {
                match call(first.add_member(m.id, &m.addr, true)).await {
                    Ok(_) => break,
                    Err(e) if Instant::now() < deadline => {
                        tracing::debug!(error = %e, member = m.id, "add_member: retrying");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => return Err(e.context(format!("adding member {} ({})", m.id, m.addr))),
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
    ) -> anyhow::Result<(usize, Status)> {
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
                bail!("no member claimed the lead within {within:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// One API call of the setup, bounded by [`CALL_TIMEOUT`].
pub async fn call<T, E>(f: impl std::future::Future<Output = Result<T, E>>) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("no answer within {CALL_TIMEOUT:?}"),
    }
}

/// Polls `check` every [`POLL`] until it answers true; its errors count as
/// "not yet" until `deadline`, after which the last one is returned.
pub async fn wait_until<F, Fut>(deadline: Instant, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    loop {
        let last = match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            Err(e) => Some(e),
        };
        if Instant::now() >= deadline {
            let e = last.unwrap_or_else(|| anyhow!("still not the case"));
            return Err(e.context(format!("timed out waiting for {what}")));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The first line a member prints (`listening ADDR`), read on a thread;
/// the thread then drains the pipe so the member never blocks on it.
async fn first_line(stdout: impl Read + Send + 'static) -> anyhow::Result<String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let read = reader.read_line(&mut line).map(|_| line);
        let _ = tx.send(read);
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = rx
        .await
        .context("the reader of its stdout stopped")?
        .context("reading its stdout")?;
    if line.is_empty() {
        bail!("it exited before printing its address (its log is above)");
    }
    Ok(line)
}

/// Copies a member's log lines to our stderr, prefixed with its id.
fn forward_stderr(id: MemberId, stderr: impl Read + Send + 'static) {
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            match line {
                Ok(line) => eprintln!("member {id}: {line}"),
                Err(_) => break,
            }
        }
    });
}
