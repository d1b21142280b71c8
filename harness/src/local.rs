//! A local multi-process cluster (`kintsugi cluster up`): control-plane
//! members and memory nodes placed by them, as child processes of one
//! supervisor, everything under one directory.
//!
//! ```text
//! DIR/control.toml           the members' secret, tokens and timing (0600)
//! DIR/control-plane-<i>/     member i's Raft log and state (sled)
//! DIR/control-plane-<i>.log  its log
//! DIR/memnode-<i>.log        memory node i's log
//! DIR/memnode-<i>.img        its image, with `persist = true`
//! DIR/cluster.json           who is up where, with the tokens (0600)
//! ```
//!
//! `shm` images live under `/dev/shm` (tmpfs: an image on a disk would be
//! written back to it) and are removed when their node stops. Every child
//! stops with the supervisor (PR_SET_PDEATHSIG) and when it is dropped;
//! `cluster down` signals the supervisor recorded in `cluster.json`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use control_plane::config::{Timing, TOKEN_ENV};
use serde::{Deserialize, Serialize};

use crate::control::{ControlError, ControlPlane, MemberLogs};
use crate::launch::{Launch, LaunchError, Process, START_TIMEOUT};
use crate::TransportKind;

/// Control-plane members a local cluster may have: a majority of 7 rides
/// out 3 deaths, more only slows commits.
pub const MEMBERS_MAX: usize = 7;
/// Memory nodes a local cluster may have.
pub const MEMNODES_MAX: usize = 16;
/// Log lines of each process printed when a cluster is dropped while its
/// owner panics (a failing test): enough to see what recovery was doing.
const PANIC_TAIL_LINES_MAX: usize = 40;
/// Bytes read from the end of each log for [`PANIC_TAIL_LINES_MAX`] lines.
const PANIC_TAIL_BYTES_MAX: u64 = 64 * 1024;
/// The state file in the cluster's directory.
pub const STATE_FILE: &str = "cluster.json";
/// Longest wait for `down` to see the supervisor gone.
pub const DOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// What `kintsugi cluster up` starts (`deploy/local-cluster.toml`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalClusterSpec {
    /// Where everything lives (relative to the working directory).
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// The control plane.
    #[serde(default)]
    pub control: ControlSection,
    /// The memory nodes.
    #[serde(default)]
    pub memory: MemorySection,
    /// What clients create indexes with.
    #[serde(default)]
    pub indexes: IndexSection,
    /// The control plane's timings (humantime durations).
    #[serde(default)]
    pub timing: Timing,
}

/// `[control]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlSection {
    /// Members (voters).
    pub members: usize,
    /// Environment variables every member is started with (and restarted
    /// with). Not read from a file: tests set it to plant crash points in
    /// the members (`KINTSUGI_RECOVERY_CRASH_AFTER`).
    #[serde(skip)]
    pub env: Vec<(String, String)>,
}

/// `[memory]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySection {
    /// Memory nodes.
    pub nodes: usize,
    /// Bytes each offers to regions, e.g. `4GiB` (address space until written).
    pub capacity: String,
    /// `shm` (clients on this host map the images) or `tcp`.
    pub transport: TransportKind,
    /// Keep each node's image in `DIR/memnode-<i>.img` across restarts.
    pub persist: bool,
    /// Environment variables every memory node is started with (and
    /// restarted with). Not read from a file: a chaos run sets it to
    /// sabotage the nodes on purpose
    /// (`cluster::placement::SABOTAGE_SERVE_WIPED_ENV`).
    #[serde(skip)]
    pub env: Vec<(String, String)>,
}

/// `[indexes]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexSection {
    /// Replicas of every index's region, primary included.
    pub replicas: u8,
}

fn default_dir() -> PathBuf {
    PathBuf::from("kintsugi-cluster")
}

impl Default for LocalClusterSpec {
    fn default() -> Self {
        LocalClusterSpec {
            dir: default_dir(),
            control: ControlSection::default(),
            memory: MemorySection::default(),
            indexes: IndexSection::default(),
            timing: Timing::default(),
        }
    }
}

impl Default for ControlSection {
    fn default() -> Self {
        ControlSection {
            members: 3,
            env: Vec::new(),
        }
    }
}

impl Default for MemorySection {
    fn default() -> Self {
        MemorySection {
            nodes: 3,
            capacity: "4GiB".into(),
            transport: TransportKind::Shm,
            persist: false,
            env: Vec::new(),
        }
    }
}

impl Default for IndexSection {
    fn default() -> Self {
        IndexSection { replicas: 3 }
    }
}

/// Why a local cluster could not be started, found or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The spec is not usable.
    #[error("invalid cluster config: {0}")]
    Spec(String),
    /// A file of the cluster's directory.
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
    /// The control plane failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A memory node failed to start.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// There is a cluster up in the directory already, or none.
    #[error("{0}")]
    State(String),
}

impl LocalClusterSpec {
    /// Reads and validates a spec from TOML text (`source` names it in errors).
    pub fn parse(text: &str, source: &str) -> Result<LocalClusterSpec, LocalError> {
        let spec: LocalClusterSpec =
            toml::from_str(text).map_err(|e| LocalError::Spec(format!("{source}: {e}")))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks every bound, so that nothing is started from a bad spec.
    pub fn validate(&self) -> Result<(), LocalError> {
        let bad = |s: String| Err(LocalError::Spec(s));
        if !(1..=MEMBERS_MAX).contains(&self.control.members) {
            return bad(format!(
                "control.members must be 1 to {MEMBERS_MAX}, not {}",
                self.control.members
            ));
        }
        if !(1..=MEMNODES_MAX).contains(&self.memory.nodes) {
            return bad(format!(
                "memory.nodes must be 1 to {MEMNODES_MAX}, not {}",
                self.memory.nodes
            ));
        }
        let capacity = self.capacity_bytes()?;
        if !(4096..=fabric::CAPACITY_BYTES_MAX).contains(&capacity) {
            return bad(format!(
                "memory.capacity must be 4KiB to {} bytes",
                fabric::CAPACITY_BYTES_MAX
            ));
        }
        match self.memory.transport {
            TransportKind::Shm | TransportKind::Tcp => {}
            TransportKind::Local => {
                return bad("memory.transport must be shm or tcp: local memory lives in one process".into())
            }
            TransportKind::Rdma => {
                return bad(
                    "memory.transport must be shm or tcp: memory nodes placed by the control plane do not serve rdma yet (docs/rdma.md §6)"
                        .into(),
                )
            }
        }
        if self.indexes.replicas == 0 || usize::from(self.indexes.replicas) > self.memory.nodes {
            return bad(format!(
                "indexes.replicas must be 1 to memory.nodes ({}), not {}",
                self.memory.nodes, self.indexes.replicas
            ));
        }
        Ok(())
    }

    /// `memory.capacity` in bytes.
    pub fn capacity_bytes(&self) -> Result<u64, LocalError> {
        parse_size::parse_size(&self.memory.capacity)
            .map_err(|e| LocalError::Spec(format!("memory.capacity {:?}: {e}", self.memory.capacity)))
    }
}

/// Who is up where: `DIR/cluster.json`, what `down`, `status` and clients
/// read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    /// The supervisor (`kintsugi cluster up`).
    pub pid: u32,
    /// Control-plane members' `host:port`.
    pub control: Vec<String>,
    /// Memory nodes' endpoints (image paths for shm, `host:port` for tcp).
    pub memnodes: Vec<String>,
    /// The operator token (role admin): `ctl`, memory nodes.
    pub token: String,
    /// The client token (role client): applications.
    pub client_token: String,
    /// Replicas every index gets.
    pub replicas: u8,
    /// How clients reach the memory nodes.
    pub transport: TransportKind,
}

impl ClusterFile {
    /// Reads the state of the cluster in `dir`.
    pub fn read(dir: &Path) -> Result<ClusterFile, LocalError> {
        let path = dir.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                LocalError::State(format!(
                    "no cluster is up in {} (no {STATE_FILE}): start one with `kintsugi cluster up`",
                    dir.display()
                ))
            } else {
                LocalError::Io {
                    what: "cannot read",
                    path: path.clone(),
                    source,
                }
            }
        })?;
        serde_json::from_str(&text)
            .map_err(|e| LocalError::State(format!("{} is corrupt: {e}", path.display())))
    }

    fn write(&self, dir: &Path) -> Result<(), LocalError> {
        let path = dir.join(STATE_FILE);
        let io = |what, source| LocalError::Io {
            what,
            path: path.clone(),
            source,
        };
        let text =
            serde_json::to_string_pretty(self).map_err(|e| io("cannot encode", std::io::Error::other(e)))?;
        crate::control::write_private(&path, &text).map_err(|e| io("cannot write", e))
    }

    /// Whether the supervisor still runs.
    pub fn supervisor_alive(&self) -> bool {
        alive(self.pid)
    }
}

/// Whether process `pid` exists (signal 0).
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// A running local cluster; every process stops when it drops.
#[derive(Debug)]
pub struct LocalCluster {
    /// What it is.
    pub file: ClusterFile,
    dir: PathBuf,
    memnodes: Vec<Process>,
    /// How each memory node was started (the listen address its first
    /// start was given), to start it again.
    launches: Vec<MemNodeLaunch>,
    /// Dropped after the memory nodes: they deregister nothing, but their
    /// renewals then fail quietly instead of logging errors.
    control: ControlPlane,
}

impl LocalCluster {
    /// Starts the cluster `spec` describes with the `kintsugi` binary
    /// `exe`, and returns once every member serves, the cluster is formed,
    /// and every memory node is registered and active. `progress` hears
    /// each step.
    pub async fn up(
        exe: &Path,
        spec: &LocalClusterSpec,
        progress: impl Fn(&str),
    ) -> Result<LocalCluster, LocalError> {
        Self::up_routed(exe, spec, progress, |_, members| Ok(members.to_vec())).await
    }

    /// [`LocalCluster::up`], with memory node `i` (from 1) given the
    /// control-plane endpoints `control_for(i, members)` instead of the
    /// members' own: proxies a chaos run can cut (a partition).
    pub async fn up_routed(
        exe: &Path,
        spec: &LocalClusterSpec,
        progress: impl Fn(&str),
        mut control_for: impl FnMut(usize, &[String]) -> Result<Vec<String>, LocalError>,
    ) -> Result<LocalCluster, LocalError> {
        spec.validate()?;
        let dir = spec.dir.clone();
        if let Ok(old) = ClusterFile::read(&dir) {
            if old.supervisor_alive() {
                return Err(LocalError::State(format!(
                    "a cluster is up in {} already (supervisor pid {}): `kintsugi cluster down --dir {}` first",
                    dir.display(),
                    old.pid,
                    dir.display()
                )));
            }
        }
        std::fs::create_dir_all(&dir).map_err(|source| LocalError::Io {
            what: "cannot create",
            path: dir.clone(),
            source,
        })?;
        progress(&format!(
            "starting {} control-plane members",
            spec.control.members
        ));
        let control = ControlPlane::start_configured(
            exe,
            spec.control.members,
            &dir,
            MemberLogs::Files(dir.clone()),
            &spec.timing,
            &control_plane::config::RecoverySection::default(),
            &spec.control.env,
        )?;
        control.form().await?;
        let endpoints: Vec<String> = (0..spec.control.members)
            .map(|i| control.addr(i).to_owned())
            .collect();
        progress(&format!("control plane formed at {}", endpoints.join(",")));
        let capacity = spec.capacity_bytes()?;
        let mut memnodes = Vec::with_capacity(spec.memory.nodes);
        let mut advertised = Vec::with_capacity(spec.memory.nodes);
        let mut launches = Vec::with_capacity(spec.memory.nodes);
        for i in 1..=spec.memory.nodes {
            let mut how = MemNodeLaunch {
                exe: exe.to_owned(),
                i,
                listen: "127.0.0.1:0".into(),
                control: control_for(i, &endpoints)?.join(","),
                capacity,
                token: control.token.clone(),
                log: dir.join(format!("memnode-{i}.log")),
                image: None,
                persist: spec.memory.persist,
                shm: spec.memory.transport == TransportKind::Shm,
                env: spec.memory.env.clone(),
                restarts: 0,
            };
            let image = match (spec.memory.persist, spec.memory.transport) {
                (true, _) => Some(dir.join(format!("memnode-{i}.img"))),
                (false, TransportKind::Shm) => {
                    let p = shm_dir().join(format!("kintsugi-{}-mn{i}", std::process::id()));
                    // Left by a supervisor of this pid that was killed.
                    let _ = std::fs::remove_file(&p);
                    Some(p)
                }
                (false, _) => None,
            };
            how.image = image.clone();
            let mut p = how.launch().spawn()?;
            let addr = p.await_listening(START_TIMEOUT)?;
            how.listen = addr.clone();
            launches.push(how);
            advertised.push(match (&image, spec.memory.transport) {
                (Some(image), TransportKind::Shm) => image.display().to_string(),
                _ => addr,
            });
            memnodes.push(p);
        }
        crate::control::await_memnodes(&control.client(0)?, spec.memory.nodes, "memnode-*.log").await?;
        progress(&format!(
            "{} memory nodes registered and active",
            spec.memory.nodes
        ));
        let file = ClusterFile {
            pid: std::process::id(),
            control: endpoints,
            memnodes: advertised,
            token: control.token.clone(),
            client_token: control.client_token.clone().unwrap_or_default(),
            replicas: spec.indexes.replicas,
            transport: spec.memory.transport,
        };
        file.write(&dir)?;
        Ok(LocalCluster {
            file,
            dir,
            memnodes,
            launches,
            control,
        })
    }

    /// Starts memory node `i` (counting from 0) again, after it was killed,
    /// at the address (and with the image) of its first start: with
    /// `persist`, it comes back with what its image kept, and registers
    /// again under its old id. Returns once it listens.
    pub fn restart_memnode(&mut self, i: usize) -> Result<(), LocalError> {
        let how = self
            .launches
            .get_mut(i)
            .ok_or_else(|| LocalError::State(format!("no memory node {i}")))?;
        how.restarts += 1;
        let mut p = how.launch().spawn()?;
        p.await_listening(START_TIMEOUT)?;
        self.memnodes[i] = p;
        Ok(())
    }

    /// Wipes memory node `i` (counting from 0): SIGKILLs it (if it runs),
    /// removes its image file (`DIR/memnode-<i>.img` with `persist`, its
    /// `/dev/shm` image on shm; over tcp without `persist` its memory was
    /// anonymous and went with it), and starts it again at once with the
    /// same flags and address. What a node restarted on a new tmpfs or a
    /// replaced disk is: the same endpoint, an empty image with another
    /// image id. Returns when the SIGKILL was sent.
    ///
    /// It does not wait for the new process to say it listens: a node
    /// placed by the control plane says so only once it is taken in again,
    /// which for a wiped node is after it was declared dead and its
    /// replicas evicted ([`LocalCluster::await_memnode`] waits for it).
    ///
    /// On shm, a client that mapped the old image keeps that mapping (the
    /// shm transport maps each node's file once): it goes on seeing the
    /// old, unlinked file, not the new one the node serves under the same
    /// path and id. A wipe there is what a test of that limit wants, not a
    /// fault a running cluster survives.
    pub fn wipe_memnode(&mut self, i: usize) -> Result<Instant, LocalError> {
        let p = self
            .memnodes
            .get_mut(i)
            .ok_or_else(|| LocalError::State(format!("no memory node {i}")))?;
        let at = if p.alive() { p.kill()? } else { Instant::now() };
        let how = self
            .launches
            .get_mut(i)
            .ok_or_else(|| LocalError::State(format!("no memory node {i}")))?;
        if let Some(image) = &how.image {
            match std::fs::remove_file(image) {
                Ok(()) => {}
                // A shm node that stopped cleanly removed it already.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(LocalError::Io {
                        what: "cannot wipe the image",
                        path: image.clone(),
                        source,
                    })
                }
            }
        }
        how.restarts += 1;
        tracing::info!(memnode = how.i, image = ?how.image, "memory node wiped: restarting it without its image");
        self.memnodes[i] = how.launch().spawn()?;
        Ok(at)
    }

    /// Waits, at most `timeout`, until memory node `i` (counting from 0),
    /// started by [`LocalCluster::wipe_memnode`], says it listens; returns
    /// its address. An error if it exited or was silent, with the end of
    /// its log.
    pub fn await_memnode(&mut self, i: usize, timeout: Duration) -> Result<String, LocalError> {
        let p = self
            .memnodes
            .get_mut(i)
            .ok_or_else(|| LocalError::State(format!("no memory node {i}")))?;
        Ok(p.await_listening(timeout)?)
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Puts `successor` (a control plane restored from this one's
    /// snapshot) in place of the control plane and returns the old one:
    /// its members die when it drops. The memory nodes still reach
    /// whatever addresses they were started with.
    pub fn replace_control(&mut self, successor: ControlPlane) -> ControlPlane {
        std::mem::replace(&mut self.control, successor)
    }

    /// The control plane's members (to kill or restart one in a test).
    pub fn control(&mut self) -> &mut ControlPlane {
        &mut self.control
    }

    /// Memory node `i`'s process (counting from 0).
    pub fn memnode(&mut self, i: usize) -> Option<&mut Process> {
        self.memnodes.get_mut(i)
    }

    /// The process index (for [`LocalCluster::memnode`]) of memory node
    /// `node`, found by the endpoint it registered in `memnodes` (the
    /// control plane's list): ids are the control plane's, not the order
    /// the processes started in.
    pub fn process_of(
        &self,
        node: control_plane::state::MemNodeId,
        memnodes: &[control_plane::state::MemNode],
    ) -> Result<usize, LocalError> {
        let endpoint = &memnodes
            .iter()
            .find(|n| n.id == node)
            .ok_or_else(|| LocalError::State(format!("memory node {node} is not registered")))?
            .endpoint;
        self.file
            .memnodes
            .iter()
            .position(|e| e == endpoint)
            .ok_or_else(|| {
                LocalError::State(format!(
                    "memory node {node} ({endpoint}) is none of the cluster's processes"
                ))
            })
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        crate::launch::stop_all(self.memnodes.iter_mut());
        // A node stopped cleanly removes its shm image; one killed on
        // purpose (and not restarted) leaves it, in RAM, for good.
        for how in self.launches.iter().filter(|h| h.shm && !h.persist) {
            if let Some(image) = &how.image {
                let _ = std::fs::remove_file(image);
            }
        }
        let _ = std::fs::remove_file(self.dir.join(STATE_FILE));
        if std::thread::panicking() {
            // The directory is usually a temporary one that goes next: what
            // the processes logged is the only account of a failure.
            print_log_tails(&self.dir);
        }
    }
}

/// Prints the end of every `*.log` in `dir` to stderr.
fn print_log_tails(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let lines = crate::launch::file_tail_lines(&log, PANIC_TAIL_LINES_MAX, PANIC_TAIL_BYTES_MAX);
        eprintln!("--- the end of {} ---", log.display());
        for l in lines {
            eprintln!("    {l}");
        }
    }
}

/// How a memory node of a local cluster is started.
#[derive(Clone, Debug)]
struct MemNodeLaunch {
    exe: PathBuf,
    /// 1-based, in file names.
    i: usize,
    listen: String,
    control: String,
    capacity: u64,
    token: String,
    log: PathBuf,
    image: Option<PathBuf>,
    persist: bool,
    shm: bool,
    /// Set in its environment at every start (`MemorySection::env`).
    env: Vec<(String, String)>,
    /// Restarts so far: each logs to a file of its own
    /// (`memnode-<i>.restart-<n>.log`), keeping what the dead one wrote.
    restarts: u32,
}

impl MemNodeLaunch {
    fn launch(&self) -> Launch {
        let log = match self.restarts {
            0 => self.log.clone(),
            n => self.log.with_extension(format!("restart-{n}.log")),
        };
        let mut launch = Launch::new(&self.exe, format!("memory node {}", self.i))
            .args(["memnode", "--listen", &self.listen, "--control", &self.control])
            .args(["--capacity", &self.capacity.to_string()])
            .env(TOKEN_ENV, &self.token)
            .env("RUST_LOG", "info")
            .log_to(log);
        for (key, value) in &self.env {
            launch = launch.env(key, value);
        }
        if let Some(image) = &self.image {
            let flag = if self.persist { "--persist" } else { "--shm" };
            launch = launch.arg(flag).arg(image);
            if self.shm {
                // Clients on this host map the image.
                launch = launch.arg("--advertise").arg(image);
            }
        }
        launch
    }
}

/// Where shm images go: `/dev/shm` where it exists (tmpfs), else the
/// temporary directory.
fn shm_dir() -> PathBuf {
    let dev_shm = Path::new("/dev/shm");
    if dev_shm.is_dir() {
        dev_shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// Stops the cluster up in `dir`: SIGTERM to its supervisor, then waits
/// (bounded) until it is gone. Returns what was up.
pub fn down(dir: &Path) -> Result<ClusterFile, LocalError> {
    let file = ClusterFile::read(dir)?;
    if !file.supervisor_alive() {
        let _ = std::fs::remove_file(dir.join(STATE_FILE));
        return Err(LocalError::State(format!(
            "the cluster in {} was not running (supervisor pid {} is gone); its state file is removed",
            dir.display(),
            file.pid
        )));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(file.pid).unwrap_or(i32::MAX));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).map_err(|e| LocalError::Io {
        what: "cannot signal the supervisor of",
        path: dir.to_owned(),
        source: std::io::Error::from(e),
    })?;
    let deadline = Instant::now() + DOWN_TIMEOUT;
    while file.supervisor_alive() {
        if Instant::now() >= deadline {
            return Err(LocalError::State(format!(
                "the supervisor (pid {}) is still running {DOWN_TIMEOUT:?} after SIGTERM",
                file.pid
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(file)
}

/// The line a supervisor started by [`detach`] prints once the cluster is
/// up; it prints nothing after it (its stdout is a pipe to a parent that
/// exits).
pub const READY_LINE: &str = "ready";

/// Longest wait for a detached supervisor to bring its cluster up.
pub const DETACH_TIMEOUT: Duration = Duration::from_secs(180);

/// Starts `exe cluster up ARGS --supervised` as a supervisor that outlives
/// this process (its log in `DIR/cluster.log`), waits for its
/// [`READY_LINE`], and returns what is up. A supervisor that fails is
/// reported with the end of its log.
pub fn detach(exe: &Path, args: &[std::ffi::OsString], dir: &Path) -> Result<ClusterFile, LocalError> {
    use std::io::BufRead;
    std::fs::create_dir_all(dir).map_err(|source| LocalError::Io {
        what: "cannot create",
        path: dir.to_owned(),
        source,
    })?;
    let log = dir.join("cluster.log");
    let stderr = std::fs::File::create(&log).map_err(|source| LocalError::Io {
        what: "cannot create",
        path: log.clone(),
        source,
    })?;
    let mut child = std::process::Command::new(exe)
        .args(["cluster", "up"])
        .args(args)
        .arg("--supervised")
        // It must outlive us: not stopped with its parent.
        .env_remove(crate::launch::STOP_WITH_PARENT_ENV)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|source| LocalError::Io {
            what: "cannot start a supervisor from",
            path: exe.to_owned(),
            source,
        })?;
    let stdout = child.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if let Some(out) = stdout {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        let _ = tx.send(line);
    });
    let failed = |why: String| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text
            .lines()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        LocalError::State(format!(
            "{why}; the end of {}:\n{}",
            log.display(),
            tail.join("\n")
        ))
    };
    match rx.recv_timeout(DETACH_TIMEOUT) {
        Ok(line) if line.trim() == READY_LINE => ClusterFile::read(dir),
        Ok(_) => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            Err(failed(format!(
                "the supervisor stopped before the cluster was up ({status})"
            )))
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(failed(format!(
                "the cluster was not up within {DETACH_TIMEOUT:?}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_three_members_three_nodes_replication_three_on_shm() {
        let spec = LocalClusterSpec::parse("", "empty").unwrap();
        assert_eq!(spec.control.members, 3);
        assert_eq!(spec.memory.nodes, 3);
        assert_eq!(spec.indexes.replicas, 3);
        assert_eq!(spec.memory.transport, TransportKind::Shm);
    }

    #[test]
    fn bad_specs_are_refused_with_the_field_named() {
        let err = |text: &str| LocalClusterSpec::parse(text, "f").unwrap_err().to_string();
        assert!(err("[control]\nmembers = 0").contains("control.members"));
        assert!(err("[memory]\nnodes = 2\n[indexes]\nreplicas = 3").contains("indexes.replicas"));
        assert!(err("[memory]\ncapacity = \"lots\"").contains("memory.capacity"));
        assert!(err("[memory]\ntransport = \"local\"").contains("shm or tcp"));
        assert!(err("[memory]\ntransport = \"rdma\"").contains("do not serve rdma yet"));
        assert!(err("[timing]\nclient_lease = \"soon\"").contains("client_lease"));
        assert!(err("typo = 1").contains("unknown field"));
    }

    #[test]
    fn the_example_in_deploy_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/local-cluster.toml");
        let text = std::fs::read_to_string(path).unwrap();
        // It shows the defaults: the file and the code say the same.
        assert_eq!(
            LocalClusterSpec::parse(&text, path).unwrap(),
            LocalClusterSpec::default()
        );
    }
}
