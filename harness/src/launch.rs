//! The one process launcher: every `kintsugi` child a tool starts (memory
//! nodes, control-plane members, chaos clients, the binary under test) is a
//! [`Process`], started from a [`Launch`].
//!
//! - **Start**: the child's stderr goes to a log file or is forwarded,
//!   prefixed, to ours; the last lines are kept either way, so that a child
//!   that fails to start is reported with its own words.
//! - **Readiness**: [`Process::await_listening`] waits, bounded, for the
//!   server's [`ServerLine::Listening`]; anything else, an exit or silence
//!   is an error naming the child, its exit status and its last log lines.
//! - **Stop on every exit path**: dropping a [`Process`] stops it (SIGTERM
//!   with a bounded wait, or SIGKILL, as the launch chose) and reaps it;
//!   [`stop_all`] stops many at once.
//! - **Stop with the parent**: a child started with
//!   [`STOP_WITH_PARENT_ENV`] calls [`stop_with_parent`] first thing, so it
//!   gets SIGTERM when its starter dies, even by `kill -9`.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::line::ServerLine;

/// Environment variable that asks a `kintsugi` child to stop (SIGTERM)
/// when the process that started it dies, even by `kill -9`; its value is
/// that process's pid (checked by the child, in case it is already gone).
pub const STOP_WITH_PARENT_ENV: &str = "KINTSUGI_STOP_WITH_PARENT";
/// Servers' log filter unless RUST_LOG is set: their own warnings, not
/// openraft's narration.
pub const CHILD_LOG: &str = "warn,openraft=off";
/// How long a server may take to print its address: opening sled and
/// starting Raft take well under a second; a debug build on a loaded
/// machine may take several.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a child stopped with SIGTERM may take to exit before it is
/// killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Log lines of a child kept for an error report.
const TAIL_LINES_MAX: usize = 12;
/// Bytes read from the end of a log file for an error report: enough for
/// [`TAIL_LINES_MAX`] long lines, bounded however large the log grew.
const TAIL_BYTES_MAX: u64 = 16 * 1024;
/// Pause between looks at a child that was asked to exit.
const REAP_POLL: Duration = Duration::from_millis(10);
/// How long a child that closed its stdout may take to exit before its
/// status is reported as unknown.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Why a child could not be started, did not get ready, or could not be
/// signalled.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The executable could not be run.
    #[error("cannot start {name} ({}): {source}", exe.display())]
    Spawn {
        /// The child.
        name: String,
        /// What was run.
        exe: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// Its log file could not be created.
    #[error("cannot create the log of {name}, {}: {source}", path.display())]
    Log {
        /// The child.
        name: String,
        /// The log.
        path: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// It did not say it serves within the bound.
    #[error("{name} did not print its address within {timeout:?}{}", tail_text(tail))]
    Silent {
        /// The child.
        name: String,
        /// The bound.
        timeout: Duration,
        /// Its last log lines.
        tail: Tail,
    },
    /// It exited, or printed something else, before it served.
    #[error("{name} did not start: {what}{}", tail_text(tail))]
    NotReady {
        /// The child.
        name: String,
        /// What happened instead.
        what: String,
        /// Its last log lines.
        tail: Tail,
    },
    /// A signal could not be sent or the child reaped.
    #[error("cannot {action} {name}: {source}")]
    Signal {
        /// The child.
        name: String,
        /// What was tried.
        action: &'static str,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The child was stopped or killed before.
    #[error("{name} is not running")]
    NotRunning {
        /// The child.
        name: String,
    },
    /// [`STOP_WITH_PARENT_ENV`] holds no pid, or the kernel refused.
    #[error("cannot stop with the parent ({STOP_WITH_PARENT_ENV}={value:?}): {why}")]
    StopWithParent {
        /// The variable's value.
        value: String,
        /// What went wrong.
        why: String,
    },
}

/// The last lines a child wrote to its log, and where the rest is.
#[derive(Clone, Debug, Default)]
pub struct Tail {
    /// The log file, if it went to one (else it was forwarded to ours).
    pub log: Option<PathBuf>,
    /// Its last lines, oldest first.
    pub lines: Vec<String>,
}

fn tail_text(t: &Tail) -> String {
    let mut s = String::new();
    match (&t.log, t.lines.is_empty()) {
        (Some(log), true) => s.push_str(&format!(" (its log, {}, is empty)", log.display())),
        (Some(log), false) => s.push_str(&format!("; its log, {}, ends:", log.display())),
        (None, true) => {}
        (None, false) => s.push_str("; it said:"),
    }
    for l in &t.lines {
        s.push_str("\n    ");
        s.push_str(l);
    }
    s
}

/// What dropping a [`Process`] does to a child still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopBy {
    /// SIGCONT (it may be paused), SIGTERM, up to [`STOP_TIMEOUT`] to exit,
    /// then SIGKILL: servers, which clean up (sync an image, close sled).
    Term,
    /// SIGKILL at once: clients whose run ended early, members a bench
    /// crashes on purpose.
    Kill,
}

/// Where a child's stderr goes.
#[derive(Clone, Debug)]
enum Stderr {
    File(PathBuf),
    Forward(String),
    Inherit,
}

/// How to start one child: a `Command` with the launcher's rules.
#[derive(Debug)]
pub struct Launch {
    name: String,
    cmd: Command,
    stderr: Stderr,
    stdin: bool,
    stop: StopBy,
}

impl Launch {
    /// A child named `name` (for messages: "memory node 2") running `exe`.
    /// By default: stdin closed, stdout piped (for readiness), stderr
    /// inherited, stopped with its parent, stopped by SIGTERM on drop.
    pub fn new(exe: &Path, name: impl Into<String>) -> Launch {
        let mut cmd = Command::new(exe);
        cmd.env(STOP_WITH_PARENT_ENV, std::process::id().to_string());
        Launch {
            name: name.into(),
            cmd,
            stderr: Stderr::Inherit,
            stdin: false,
            stop: StopBy::Term,
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Launch {
        self.cmd.arg(arg);
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Launch {
        self.cmd.env(key, value);
        self
    }

    /// Logs at [`CHILD_LOG`] unless RUST_LOG says otherwise: servers'
    /// warnings, not their narration.
    pub fn quiet(mut self) -> Launch {
        if std::env::var_os("RUST_LOG").is_none() {
            self.cmd.env("RUST_LOG", CHILD_LOG);
        }
        self
    }

    /// Writes its stderr to `path` (created, truncated).
    pub fn log_to(mut self, path: impl Into<PathBuf>) -> Launch {
        self.stderr = Stderr::File(path.into());
        self
    }

    /// Copies its stderr to ours, each line prefixed with `prefix`.
    pub fn forward_stderr(mut self, prefix: impl Into<String>) -> Launch {
        self.stderr = Stderr::Forward(prefix.into());
        self
    }

    /// Gives it a stdin pipe ([`Process::take_stdin`]).
    pub fn stdin_piped(mut self) -> Launch {
        self.stdin = true;
        self
    }

    /// What dropping the [`Process`] does.
    pub fn stop_by(mut self, stop: StopBy) -> Launch {
        self.stop = stop;
        self
    }

    /// Starts it.
    pub fn spawn(mut self) -> Result<Process, LaunchError> {
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr = match &self.stderr {
            Stderr::File(path) => {
                Stdio::from(std::fs::File::create(path).map_err(|source| LaunchError::Log {
                    name: self.name.clone(),
                    path: path.clone(),
                    source,
                })?)
            }
            Stderr::Forward(_) => Stdio::piped(),
            Stderr::Inherit => Stdio::inherit(),
        };
        self.cmd
            .stdin(if self.stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = self.cmd.spawn().map_err(|source| LaunchError::Spawn {
            name: self.name.clone(),
            exe: PathBuf::from(self.cmd.get_program()),
            source,
        })?;
        let forwarder = match (&self.stderr, child.stderr.take()) {
            (Stderr::Forward(prefix), Some(err)) => Some(forward(prefix.clone(), err, tail.clone())),
            _ => None,
        };
        Ok(Process {
            name: self.name,
            stdout: child.stdout.take(),
            child: Some(child),
            log: match self.stderr {
                Stderr::File(path) => Some(path),
                _ => None,
            },
            forwarded: tail,
            forwarder,
            stop: self.stop,
        })
    }
}

/// A running child; stopped and reaped when dropped.
#[derive(Debug)]
pub struct Process {
    name: String,
    /// `None` once stopped or killed.
    child: Option<Child>,
    stdout: Option<ChildStdout>,
    log: Option<PathBuf>,
    /// The last forwarded stderr lines (empty unless forwarded).
    forwarded: Arc<Mutex<VecDeque<String>>>,
    /// The thread copying its stderr, if forwarded: it ends at the
    /// child's last line.
    forwarder: Option<std::thread::JoinHandle<()>>,
    stop: StopBy,
}

impl Process {
    /// Its name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<Pid> {
        let c = self.child.as_ref()?;
        i32::try_from(c.id()).ok().map(Pid::from_raw)
    }

    /// True until it is stopped, killed or seen to have exited.
    pub fn alive(&mut self) -> bool {
        let running = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if !running {
            // Reaped: its pid may be another process's now, so nothing
            // signals it again.
            self.child = None;
        }
        running
    }

    /// Waits, at most `timeout`, for the first line on its stdout, which
    /// must be [`ServerLine::Listening`]; returns the address. Its stdout
    /// is drained from then on, so it never blocks on a full pipe.
    pub fn await_listening(&mut self, timeout: Duration) -> Result<String, LaunchError> {
        let Some(stdout) = self.stdout.take() else {
            return Err(self.not_ready("its stdout was already taken".into()));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let read = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send(read);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(timeout) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(self.not_ready(format!("cannot read its stdout: {e}"))),
            Err(_) => {
                return Err(LaunchError::Silent {
                    name: self.name.clone(),
                    timeout,
                    tail: self.tail(),
                })
            }
        };
        if line.is_empty() {
            let status = self.exit_status(EXIT_GRACE);
            self.await_forwarded(EXIT_GRACE);
            return Err(self.not_ready(format!("it exited ({status}) before printing its address")));
        }
        match line.parse::<ServerLine>() {
            Ok(ServerLine::Listening(addr)) => Ok(addr),
            // A server announces its metrics listener only after this.
            Ok(other) => Err(self.not_ready(format!("expected `listening ADDR` first, got `{other}`"))),
            Err(e) => Err(self.not_ready(e.to_string())),
        }
    }

    /// Its stdin, if launched with [`Launch::stdin_piped`] (once).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut()?.stdin.take()
    }

    /// Its stdout, unless [`Process::await_listening`] took it (once).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...).
    pub fn signal(&self, signal: Signal) -> Result<(), LaunchError> {
        let pid = self.pid().ok_or_else(|| LaunchError::NotRunning {
            name: self.name.clone(),
        })?;
        kill(pid, signal).map_err(|e| LaunchError::Signal {
            name: self.name.clone(),
            action: "signal",
            source: e.into(),
        })
    }

    /// SIGKILL (a crash, not a shutdown) and reap. Returns the instant the
    /// signal was sent: a failover clock starts there.
    pub fn kill(&mut self) -> Result<Instant, LaunchError> {
        let mut child = self.child.take().ok_or_else(|| LaunchError::NotRunning {
            name: self.name.clone(),
        })?;
        let failed = |action, source| LaunchError::Signal {
            name: self.name.clone(),
            action,
            source,
        };
        child.kill().map_err(|e| failed("kill", e))?;
        let at = Instant::now();
        child.wait().map_err(|e| failed("reap", e))?;
        Ok(at)
    }

    /// SIGTERM and wait for it to exit, unbounded: what a test of a clean
    /// shutdown wants to see. Returns its exit status.
    pub fn terminate(&mut self) -> Result<ExitStatus, LaunchError> {
        self.signal(Signal::SIGTERM)?;
        let mut child = self.child.take().ok_or_else(|| LaunchError::NotRunning {
            name: self.name.clone(),
        })?;
        child.wait().map_err(|source| LaunchError::Signal {
            name: self.name.clone(),
            action: "reap",
            source,
        })
    }

    /// Waits for it to exit by itself (a client at the end of its run).
    pub fn wait(&mut self) -> Result<ExitStatus, LaunchError> {
        let mut child = self.child.take().ok_or_else(|| LaunchError::NotRunning {
            name: self.name.clone(),
        })?;
        child.wait().map_err(|source| LaunchError::Signal {
            name: self.name.clone(),
            action: "wait for",
            source,
        })
    }

    /// The last lines of its log (file or forwarded).
    pub fn tail(&self) -> Tail {
        let lines = match &self.log {
            Some(path) => file_tail(path),
            None => self
                .forwarded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect(),
        };
        Tail {
            log: self.log.clone(),
            lines,
        }
    }

    fn not_ready(&self, what: String) -> LaunchError {
        LaunchError::NotReady {
            name: self.name.clone(),
            what,
            tail: self.tail(),
        }
    }

    /// Waits, at most `grace`, until a forwarded stderr has been copied to
    /// its end, so that an exited child's last words are in its tail.
    fn await_forwarded(&self, grace: Duration) {
        let Some(forwarder) = &self.forwarder else { return };
        let deadline = Instant::now() + grace;
        while !forwarder.is_finished() && Instant::now() < deadline {
            std::thread::sleep(REAP_POLL);
        }
    }

    /// Its exit status if it exits within `grace`, as text.
    fn exit_status(&mut self, grace: Duration) -> String {
        let Some(child) = self.child.as_mut() else {
            return "stopped".into();
        };
        let deadline = Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    let status = status.to_string();
                    // Reaped: nothing may signal its pid again.
                    self.child = None;
                    return status;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(REAP_POLL),
                Ok(None) => return "still running".into(),
                Err(e) => return format!("status unknown: {e}"),
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        stop_all(std::iter::once(self));
    }
}

/// Stops every process still running, by its [`StopBy`]: the SIGTERMs all
/// go out first and share one [`STOP_TIMEOUT`], so stopping many takes no
/// longer than stopping one.
pub fn stop_all<'a>(procs: impl IntoIterator<Item = &'a mut Process>) {
    let mut terminated = Vec::new();
    for p in procs {
        let Some(mut child) = p.child.take() else { continue };
        match p.stop {
            StopBy::Kill => {
                let _ = child.kill();
                let _ = child.wait();
            }
            StopBy::Term => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let pid = Pid::from_raw(pid);
                    let _ = kill(pid, Signal::SIGCONT);
                    let _ = kill(pid, Signal::SIGTERM);
                }
                terminated.push(child);
            }
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for mut child in terminated {
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(REAP_POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Honours [`STOP_WITH_PARENT_ENV`] in a child: asks the kernel for
/// SIGTERM when the parent dies (the child then stops as on Ctrl-C: a
/// memory node removes its shm image), and fails if the parent is gone.
pub fn stop_with_parent() -> Result<(), LaunchError> {
    let Some(value) = std::env::var_os(STOP_WITH_PARENT_ENV) else {
        return Ok(());
    };
    let value = value.to_string_lossy().into_owned();
    let failed = |why: String| LaunchError::StopWithParent {
        value: value.clone(),
        why,
    };
    let parent: i32 = value.parse().map_err(|_| failed("not a pid".into()))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(|e| failed(e.to_string()))?;
    // The parent may have died before the request took effect.
    if nix::unistd::getppid().as_raw() != parent {
        return Err(failed(format!("the launcher (pid {parent}) is gone")));
    }
    Ok(())
}

/// Copies a child's stderr lines to ours with `prefix`, keeping the last
/// [`TAIL_LINES_MAX`].
fn forward(
    prefix: String,
    stderr: impl Read + Send + 'static,
    tail: Arc<Mutex<VecDeque<String>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("{prefix}{line}");
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            if t.len() == TAIL_LINES_MAX {
                t.pop_front();
            }
            t.push_back(line);
        }
    })
}

/// The last non-empty lines of a log file, at most [`TAIL_LINES_MAX`].
fn file_tail(path: &Path) -> Vec<String> {
    file_tail_lines(path, TAIL_LINES_MAX, TAIL_BYTES_MAX)
}

/// The last non-empty lines of a log file, at most `lines_max` of them, read
/// from its last `bytes_max` bytes.
pub(crate) fn file_tail_lines(path: &Path, lines_max: usize, bytes_max: u64) -> Vec<String> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(bytes_max)));
    let mut bytes = Vec::new();
    if f.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<String> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    lines[lines.len().saturating_sub(lines_max)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Launch {
        Launch::new(Path::new("/bin/sh"), "the test server").args(["-c", script])
    }

    #[test]
    fn a_server_that_says_where_it_listens_is_ready() {
        let mut p = sh("echo 'listening 127.0.0.1:9'; exec sleep 60").spawn().unwrap();
        assert_eq!(p.await_listening(START_TIMEOUT).unwrap(), "127.0.0.1:9");
        assert!(p.alive());
        let pid = p.pid().unwrap();
        drop(p);
        // Stopped and reaped: the pid is gone.
        assert!(kill(pid, None).is_err());
    }

    #[test]
    fn a_child_that_dies_at_start_is_reported_with_its_own_words() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let mut p = sh("echo 'cannot map 64 GiB: Cannot allocate memory' >&2; exit 3")
            .log_to(&log)
            .spawn()
            .unwrap();
        let e = p.await_listening(START_TIMEOUT).unwrap_err().to_string();
        assert!(
            e.starts_with("the test server did not start: it exited (exit status: 3)"),
            "{e}"
        );
        assert!(e.contains("Cannot allocate memory"), "{e}");
        assert!(e.contains(&log.display().to_string()), "{e}");
    }

    #[test]
    fn a_forwarded_child_that_says_something_else_is_refused() {
        let mut p = sh("echo 'why not' >&2; echo 'serving 1.2.3.4:5'; exec sleep 60")
            .forward_stderr("test: ")
            .stop_by(StopBy::Kill)
            .spawn()
            .unwrap();
        let e = p.await_listening(START_TIMEOUT).unwrap_err().to_string();
        assert!(
            e.contains("expected `listening ADDR` or `metrics ADDR`, got \"serving 1.2.3.4:5\""),
            "{e}"
        );
    }

    #[test]
    fn a_forwarded_child_that_dies_at_start_is_reported_with_its_last_words() {
        for _ in 0..20 {
            let mut p = sh("echo 'first' >&2; echo 'last words' >&2; exit 3")
                .forward_stderr("test: ")
                .spawn()
                .unwrap();
            let e = p.await_listening(START_TIMEOUT).unwrap_err().to_string();
            assert!(e.contains("exit status: 3") && e.contains("last words"), "{e}");
        }
    }

    #[test]
    fn kill_and_terminate_say_when_the_child_is_gone() {
        let mut p = sh("exec sleep 60").spawn().unwrap();
        p.kill().unwrap();
        assert!(!p.alive());
        assert!(matches!(p.kill(), Err(LaunchError::NotRunning { .. })));
        let mut p = sh("trap 'exit 0' TERM; while :; do sleep 0.01; done")
            .spawn()
            .unwrap();
        // The trap may not be set yet; either way it exits on SIGTERM.
        let status = p.terminate().unwrap();
        assert!(status.success() || status.code().is_none(), "{status}");
    }
}
