//! The processes of one variant's run: a control-plane member, the memory
//! nodes, the client processes, all [`harness::Process`]es. [`Procs`] owns
//! them, so that every exit path of the runner (an error included) stops
//! them and removes what they left in /dev/shm.

use std::path::{Path, PathBuf};

use control_plane::api::ControlClient;
use control_plane::config::{SECRET_ENV, TOKEN_ENV};
use harness::control::{ControlPlane, MemberLogs};
use harness::launch::{stop_all, START_TIMEOUT};
use harness::{Launch, Process, TransportKind};
use index::Variant;

use super::{Endpoint, Options, RunError, REGION};
use crate::experiment::Experiment;

/// The child processes of a run (none at first). On drop: clients are
/// killed (the run ended early), memory nodes stopped, the control-plane
/// member killed, the memory images and the member's data removed.
#[derive(Default)]
pub struct Procs {
    /// The client processes still to be reaped.
    pub clients: Vec<Process>,
    memnodes: Vec<Process>,
    /// The one-member control plane and a client of it.
    pub control: Option<(ControlPlane, ControlClient)>,
    shm: Vec<PathBuf>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        stop_all(self.clients.iter_mut().chain(self.memnodes.iter_mut()));
        if let Some((plane, _)) = self.control.take() {
            let dirs: Vec<PathBuf> = plane.members.iter().map(|m| m.data_dir.clone()).collect();
            drop(plane);
            for d in dirs {
                let _ = std::fs::remove_dir_all(d);
            }
        }
        for p in &self.shm {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Procs {
    /// The member's address and token, if the run has a control plane.
    pub fn member(&self) -> Option<(&str, &str)> {
        self.control.as_ref().map(|(p, _)| (p.addr(0), p.token.as_str()))
    }

    /// The cluster secret the run's memory nodes admit by and its clients
    /// derive their credentials from: the control plane's, or, without one,
    /// a fixed run secret (the nodes listen on loopback only).
    pub fn secret(&self) -> &str {
        self.control.as_ref().map_or(RUN_SECRET, |(p, _)| p.secret())
    }

    /// A service credential the run's memory nodes admit: what the runner
    /// itself reaches them with (its clients derive theirs from
    /// [`SECRET_ENV`], set from [`Procs::secret`]).
    pub fn credential(&self) -> Option<fabric::Credential> {
        let secret = control_plane::network::ClusterSecret::new(self.secret()).ok()?;
        Some(secret.service_credential())
    }

    /// A client of the member, if the run has a control plane.
    pub fn api(&self) -> Option<&ControlClient> {
        self.control.as_ref().map(|(_, api)| api)
    }
}

/// The cluster secret of a run without a control plane.
const RUN_SECRET: &str = "kintsugi-chaos-run-secret-0123456789";

/// Starts a one-member control plane in `dir` (data in
/// `dir`/control-plane-1, log in `dir`/control-plane-1.log) and forms it.
///
/// Without a recovery coordinator: the run's index is not in the catalog,
/// so a coordinator would roll no log and sweep no lock of it, yet forget
/// the dead clients once their quarantine is over, freeing owner ids whose
/// locks are still in the index, and under the checker, which waits for
/// the expiry and forgets them itself once it has repaired what they left
/// (`control::wait_expired`, `control::forget_dead`). The runner is this
/// run's recovery (`dtx_recovery`, the checker).
pub async fn start_control(o: &Options, dir: &Path, procs: &mut Procs) -> Result<String, RunError> {
    let recovery = control_plane::config::RecoverySection {
        enabled: false,
        ..Default::default()
    };
    let plane = ControlPlane::start_configured(
        &o.exe,
        1,
        dir,
        MemberLogs::Files(dir.to_owned()),
        &control_plane::config::Timing::default(),
        &recovery,
        &[],
    )?;
    plane.form().await?;
    let api = plane.client(0)?;
    let addr = plane.addr(0).to_owned();
    procs.control = Some((plane, api));
    Ok(addr)
}

/// Starts the run's memory nodes, each holding a replica of [`REGION`]
/// of `region_bytes` (node 1 the primary), registered with the run's
/// control plane if there is one. Returns where clients reach them.
pub fn start_memnodes(
    e: &Experiment,
    variant: Variant,
    region_bytes: u64,
    o: &Options,
    dir: &Path,
    procs: &mut Procs,
) -> Result<Endpoint, RunError> {
    let mut addrs = Vec::new();
    let mut images = Vec::new();
    for i in 1..=e.cluster.memory_nodes {
        let mut launch = Launch::new(&o.exe, format!("memory node {i}"))
            .args([
                "memnode",
                "--listen",
                "127.0.0.1:0",
                "--id",
                &i.to_string(),
                "--region",
            ])
            .arg(format!("{REGION}:{region_bytes}"))
            .quiet()
            .env(SECRET_ENV, procs.secret())
            .log_to(dir.join(format!("memnode-{i}.log")));
        if let Some((addr, token)) = procs.member() {
            launch = launch.arg("--control").arg(addr).env(TOKEN_ENV, token);
        }
        if e.cluster.transport == TransportKind::Shm {
            let image = PathBuf::from(format!(
                "/dev/shm/kintsugi-chaos-{}-{}-{variant}-mn{i}",
                e.name,
                std::process::id()
            ));
            launch = launch.arg("--shm").arg(&image);
            procs.shm.push(image.clone());
            images.push(image);
        }
        procs.memnodes.push(launch.spawn()?);
        let n = procs.memnodes.len() - 1;
        addrs.push(procs.memnodes[n].await_listening(START_TIMEOUT)?);
    }
    Ok(match e.cluster.transport {
        TransportKind::Shm => Endpoint::Shm(images),
        _ => Endpoint::Tcp(addrs),
    })
}
