//! Helpers for tests that run the real `kintsugi` binary as separate
//! processes, started by the one launcher ([`harness::Launch`]).

#![allow(dead_code)] // each test file uses a different subset

pub mod cluster;
pub mod local;
pub mod proxy;

use std::path::Path;
use std::process::Command;

use harness::launch::START_TIMEOUT;
use harness::{Launch, Process, StopBy};

/// The binary under test.
fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kintsugi"))
}

/// Starts `kintsugi ARGS...` with `env` added (and `RUST_LOG=warn`), and
/// waits for its `listening ADDR`; returns the process (SIGKILLed when
/// dropped) and ADDR. Servers (`memnode`, `control`) print that line once
/// they serve.
pub fn spawn_listening(args: &[&str], env: &[(&str, &str)]) -> (Process, String) {
    let mut launch = Launch::new(exe(), format!("kintsugi {}", args.first().unwrap_or(&"")))
        .args(args)
        .env("RUST_LOG", "warn")
        .stop_by(StopBy::Kill);
    for (k, v) in env {
        launch = launch.env(k, v);
    }
    let mut p = launch.spawn().unwrap_or_else(|e| panic!("{e}"));
    let addr = p
        .await_listening(START_TIMEOUT)
        .unwrap_or_else(|e| panic!("kintsugi {args:?}: {e}"));
    (p, addr)
}

/// A `kintsugi memnode` child process, killed (SIGKILL) when dropped.
pub struct MemnodeProcess {
    pub process: Process,
    pub addr: String,
}

/// The cluster secret standalone test memory nodes check credentials with
/// ([`MemnodeProcess::start`]); [`credential`] is one they admit.
pub const MEMNODE_SECRET: &str = "memnode-test-secret-0123456789";

/// A service credential the memory nodes [`MemnodeProcess::start`] starts
/// admit.
pub fn credential() -> fabric::Credential {
    control_plane::network::ClusterSecret::new(MEMNODE_SECRET)
        .expect("test secret")
        .service_credential()
}

/// Transport options presenting [`credential`].
pub fn tcp_options() -> fabric::transport::TcpOptions {
    fabric::transport::TcpOptions::with_credential(credential())
}

impl MemnodeProcess {
    /// Starts `kintsugi memnode --listen 127.0.0.1:0 ARGS...` and waits for its
    /// `listening ADDR` line. A node without `--control` checks credentials
    /// under [`MEMNODE_SECRET`].
    pub fn start(args: &[&str]) -> MemnodeProcess {
        let mut all = vec!["memnode", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (process, addr) = spawn_listening(&all, &[(control_plane::config::SECRET_ENV, MEMNODE_SECRET)]);
        MemnodeProcess { process, addr }
    }

    pub fn pid(&self) -> i32 {
        self.process.pid().expect("running").as_raw()
    }

    /// Resident memory of the process in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS line")
    }

    /// True while the process has not exited.
    pub fn alive(&mut self) -> bool {
        self.process.alive()
    }

    /// Sends SIGTERM and waits; returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.process.terminate().expect("SIGTERM and wait")
    }

    /// SIGKILL, as a crash, and wait.
    pub fn crash(mut self) {
        self.process.kill().expect("kill -9");
    }
}

pub fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("send signal");
}

/// Runs `kintsugi ARGS...` to completion and returns (exit code, stdout,
/// stderr). It has [`MEMNODE_SECRET`] as its cluster secret, so that it
/// reaches the nodes [`MemnodeProcess::start`] starts.
pub fn kintsugi(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(exe())
        .args(args)
        .env("RUST_LOG", "warn")
        .env(control_plane::config::SECRET_ENV, MEMNODE_SECRET)
        .output()
        .expect("run kintsugi");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}
