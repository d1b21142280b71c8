//! The processes of one variant's run: a control-plane member, the memory
//! nodes, the client processes. [`Procs`] owns them all, so that every exit
//! path of the runner (an error included) stops them and removes what they
//! left in /dev/shm.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use control_plane::config::{SECRET_ENV, TOKEN_ENV};
use index::Variant;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::distributions::{Alphanumeric, DistString};

use super::{Endpoint, Options, RunError, REGION};
use crate::experiment::{Experiment, TransportKind};

/// Members' and memory nodes' log filter unless RUST_LOG is set: their
/// own warnings, not openraft's narration.
pub const CHILD_LOG: &str = "warn,openraft=off";
/// Environment variable that asks a `kintsugi` child to stop (SIGTERM)
/// when the process that started it dies, even by `kill -9`; its value is
/// that process's pid (checked by the child, in case it is already gone).
pub const STOP_WITH_PARENT_ENV: &str = "KINTSUGI_STOP_WITH_PARENT";
/// How long a memory node or a control-plane member may take to print its
/// address: opening sled and starting Raft take well under a second; a
/// debug build on a loaded machine may take several.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopped (SIGTERM) memory node or member may take to exit
/// before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The child processes of a run (none at first). On drop: clients are killed (the run
/// ended early), memory nodes and the control-plane member stopped, the
/// memory images and the member's data removed.
#[derive(Default)]
pub struct Procs {
    /// The client processes still to be reaped.
    pub clients: Vec<Child>,
    memnodes: Vec<Child>,
    member: Option<Child>,
    shm: Vec<PathBuf>,
    member_dir: Option<PathBuf>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.clients {
            let _ = kill(pid(c), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
        for m in self.memnodes.iter_mut().chain(self.member.as_mut()) {
            let _ = kill(pid(m), Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for m in self.memnodes.iter_mut().chain(self.member.as_mut()) {
            while matches!(m.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = m.kill();
            let _ = m.wait();
        }
        for p in &self.shm {
            let _ = std::fs::remove_file(p);
        }
        if let Some(d) = &self.member_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The pid of a child, for signals.
pub fn pid(c: &Child) -> Pid {
    Pid::from_raw(i32::try_from(c.id()).unwrap_or(i32::MAX))
}

/// Reads the `listening ADDR` line a `kintsugi memnode` or `kintsugi
/// control` prints once it serves, waiting at most [`START_TIMEOUT`].
fn listening(child: &mut Child, what: &str, log: &Path) -> Result<String, RunError> {
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
    }
    let line = rx.recv_timeout(START_TIMEOUT).map_err(|_| {
        RunError::Process(format!(
            "{what} did not print its address within {START_TIMEOUT:?} (see {})",
            log.display()
        ))
    })?;
    line.trim()
        .strip_prefix("listening ")
        .map(str::to_owned)
        .ok_or_else(|| {
            RunError::Process(format!(
                "{what} did not start (see {}): it said {:?}",
                log.display(),
                line.trim()
            ))
        })
}

fn log_file(path: &Path) -> Result<std::fs::File, RunError> {
    std::fs::File::create(path).map_err(|err| RunError::io(path, err))
}

/// A `kintsugi` child of the runner: quiet unless RUST_LOG says otherwise,
/// and stopped if the runner dies.
pub fn child_of_runner(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", CHILD_LOG);
    }
    cmd.env(STOP_WITH_PARENT_ENV, std::process::id().to_string());
    cmd
}

/// A control-plane member of the run: where it serves, and the bearer
/// token it accepts (fresh per run: nothing outside the run can talk to it).
#[derive(Clone, Debug)]
pub struct Member {
    /// Its address.
    pub addr: String,
    /// The token it accepts.
    pub token: String,
}

/// Starts a one-member control plane in `dir`/control-plane (log in
/// `dir`/control-plane.log); it still has to be formed ([`super::control::form`]).
pub fn start_member(o: &Options, dir: &Path, procs: &mut Procs) -> Result<Member, RunError> {
    let mut rng = rand::thread_rng();
    let secret = Alphanumeric.sample_string(&mut rng, 32);
    let token = Alphanumeric.sample_string(&mut rng, 32);
    let data_dir = dir.join("control-plane");
    // Left by a runner that was killed: a member would find a formed
    // cluster there and refuse to form a new one.
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir).map_err(|err| RunError::io(&data_dir, err))?;
    }
    let log_path = dir.join("control-plane.log");
    let mut cmd = child_of_runner(&o.exe);
    cmd.args(["control", "--id", "1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env(SECRET_ENV, &secret)
        .env(TOKEN_ENV, &token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(&log_path)?);
    let child = cmd
        .spawn()
        .map_err(|err| RunError::Process(format!("cannot start {} control: {err}", o.exe.display())))?;
    procs.member_dir = Some(data_dir);
    let child = procs.member.insert(child);
    let addr = listening(child, "the control-plane member", &log_path)?;
    Ok(Member { addr, token })
}

/// Starts the run's memory nodes, each holding a replica of [`REGION`]
/// of `region_bytes` (node 1 the primary), registered with `member` if
/// there is one. Returns where clients reach them.
pub fn start_memnodes(
    e: &Experiment,
    variant: Variant,
    region_bytes: u64,
    o: &Options,
    dir: &Path,
    member: Option<&Member>,
    procs: &mut Procs,
) -> Result<Endpoint, RunError> {
    let mut addrs = Vec::new();
    let mut images = Vec::new();
    for i in 1..=e.cluster.memory_nodes {
        let log_path = dir.join(format!("memnode-{i}.log"));
        let mut cmd = child_of_runner(&o.exe);
        cmd.args(["memnode", "--listen", "127.0.0.1:0", "--id"])
            .arg(i.to_string())
            .arg("--region")
            .arg(format!("{REGION}:{region_bytes}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file(&log_path)?);
        if let Some(m) = member {
            cmd.arg("--control").arg(&m.addr).env(TOKEN_ENV, &m.token);
        }
        if e.cluster.transport == TransportKind::Shm {
            let image = PathBuf::from(format!(
                "/dev/shm/kintsugi-chaos-{}-{}-{variant}-mn{i}",
                e.name,
                std::process::id()
            ));
            cmd.arg("--shm").arg(&image);
            procs.shm.push(image.clone());
            images.push(image);
        }
        let child = cmd
            .spawn()
            .map_err(|err| RunError::Process(format!("cannot start {} memnode: {err}", o.exe.display())))?;
        procs.memnodes.push(child);
        let n = procs.memnodes.len() - 1;
        addrs.push(listening(
            &mut procs.memnodes[n],
            &format!("memory node {i}"),
            &log_path,
        )?);
    }
    Ok(match e.cluster.transport {
        TransportKind::Shm => Endpoint::Shm(images),
        TransportKind::Tcp => Endpoint::Tcp(addrs),
    })
}
