//! Helpers for tests that run the real `kintsugi` binary as separate processes.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `kintsugi ARGS...` with `env` added (and `RUST_LOG=warn`), and
/// waits for its first stdout line, `listening ADDR`; returns the child and
/// ADDR. Servers (`memnode`, `control`) print that line once they serve.
pub fn spawn_listening(args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kintsugi"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn kintsugi {args:?}: {e}"));
    let stdout = child.stdout.take().expect("stdout piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read listening line");
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("kintsugi {args:?} printed {line:?} instead of its address"))
        .to_string();
    (child, addr)
}

/// A `kintsugi memnode` child process, killed (SIGKILL) when dropped.
pub struct MemnodeProcess {
    pub child: Child,
    pub addr: String,
}

impl MemnodeProcess {
    /// Starts `kintsugi memnode --listen 127.0.0.1:0 ARGS...` and waits for its
    /// `listening ADDR` line.
    pub fn start(args: &[&str]) -> MemnodeProcess {
        let mut all = vec!["memnode", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (child, addr) = spawn_listening(&all, &[]);
        MemnodeProcess { child, addr }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
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
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Sends SIGTERM and waits; returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        signal(self.pid(), nix::sys::signal::Signal::SIGTERM);
        let status = self.child.wait().expect("wait");
        std::mem::forget(self);
        status
    }

    /// SIGKILL, as a crash, and wait.
    pub fn crash(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("wait");
        std::mem::forget(self);
    }
}

impl Drop for MemnodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("send signal");
}

/// Runs `kintsugi ARGS...` to completion and returns (exit code, stdout, stderr).
pub fn kintsugi(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kintsugi"))
        .args(args)
        .env("RUST_LOG", "warn")
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
