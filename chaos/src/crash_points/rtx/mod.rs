//! The rTX target: a victim transaction reads `n` objects and rewrites all
//! of them, and other clients meet what it leaves when it stops.
//!
//! Four kinds of scenario, each swept over every verb of every stopped
//! party, at each write-set size and replication factor:
//!
//! - **owner**: the victim stops after its k-th verb (crashes, or pauses
//!   past its lease); a repairer, whose clock is past the victim's leases,
//!   runs the same transaction; a paused victim then resumes.
//! - **repairer**: the victim crashes after its k-th verb; the repairer
//!   stops after each of *its* verbs (crash or pause); a third client,
//!   further ahead still, commits meanwhile; a paused repairer resumes.
//! - **resume-order**: victim and repairer both pause, at every pair of
//!   verb positions; with and without a third client committing while both
//!   are paused; then they resume in each order.
//! - **dropped-connection**: over tcp, the victim's connections drop after
//!   its k-th verb; it reconnects and runs its transaction again, before or
//!   after the repairer runs.
//!
//! Checks, in `run.rs` and `check.rs`: every transaction reads one
//! generation for all objects; when a commit is acknowledged, every replica
//! already holds its value (or one a still-stopped party is installing); no
//! block on a client's free list is named by a log that is not DONE; at the
//! end (after recovery has finished the logs of crashed parties, and a
//! checker has met every object), no lock is held, the committed
//! transactions form one serial history that contains every acknowledged
//! one, and the replicas agree word for word on data pointers, data, log
//! slots and the chunk owner table (lock words live on the primary only).

mod check;
mod run;

use harness::TransportKind;
use serde::Serialize;

use super::{ExploreError, Mode, Report, ScenarioReport, Violation};
use run::{Party, Run, Stop, World};

/// Attempts before a transaction of the exploration gives up: far more than
/// any run needs (a handful), few enough that a livelock shows as a failure.
const ATTEMPTS_MAX: u32 = 200;

/// The families of scenario (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The victim stops at each of its verbs.
    Owner,
    /// The victim crashes; the repairer stops at each of its verbs.
    Repairer,
    /// Victim and repairer both pause; they resume in each order.
    ResumeOrder,
    /// The victim's tcp connections drop at each of its verbs.
    DroppedConnection,
}

impl Kind {
    /// Every kind, in the order explored.
    pub const ALL: [Kind; 4] = [
        Kind::Owner,
        Kind::Repairer,
        Kind::ResumeOrder,
        Kind::DroppedConnection,
    ];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Owner => super::KIND_OWNER,
            Kind::Repairer => "repairer",
            Kind::ResumeOrder => "resume-order",
            Kind::DroppedConnection => "dropped-connection",
        }
    }
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Write-set sizes.
    pub objects: Vec<usize>,
    /// Replication factors.
    pub replicas: Vec<u16>,
    /// How the stopped parties stop (owner and repairer kinds).
    pub modes: Vec<Mode>,
    /// Kinds of scenario.
    pub kinds: Vec<Kind>,
    /// How the parties reach memory: in-process nodes by default; tcp or
    /// rdma servers in this process. Dropped-connection runs need
    /// connections: on local or shm they run over tcp.
    pub transport: TransportKind,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            objects: vec![1, 2, 3, 8],
            replicas: vec![1, 2, 3],
            modes: vec![Mode::Crash, Mode::Pause],
            kinds: Kind::ALL.to_vec(),
            transport: TransportKind::Local,
        }
    }
}

/// Explores the rTX target.
pub async fn explore(options: &Options) -> Result<Report, ExploreError> {
    let mut report = Report {
        target: "rtx".into(),
        ..Report::default()
    };
    for &kind in &options.kinds {
        for &replicas in &options.replicas {
            for &n in &options.objects {
                let scenario = format!("rf={replicas} objects={n}");
                let setup_err = |reason: String| ExploreError::Setup {
                    scenario: format!("{} {scenario}", kind.name()),
                    reason,
                };
                let transport = match (kind, options.transport) {
                    (Kind::DroppedConnection, TransportKind::Local | TransportKind::Shm) => {
                        TransportKind::Tcp
                    }
                    (_, t) => t,
                };
                let verbs = World::victim_verbs(replicas, n, transport)
                    .await
                    .map_err(setup_err)?;
                let mut tally = Tally::new(kind, &scenario);
                let shape = Shape {
                    replicas,
                    n,
                    verbs,
                    transport,
                };
                explore_kind(kind, shape, &options.modes, &mut tally)
                    .await
                    .map_err(setup_err)?;
                tracing::info!(kind = kind.name(), %scenario, verbs, runs = tally.runs, violations = tally.violations.len(), "explored");
                tally.into_report(&mut report, verbs);
            }
        }
    }
    Ok(report)
}

/// The runs of one scenario, as they are made.
struct Tally {
    kind: Kind,
    scenario: String,
    runs: u64,
    violating_runs: u64,
    violations: Vec<Violation>,
}

impl Tally {
    fn new(kind: Kind, scenario: &str) -> Self {
        Tally {
            kind,
            scenario: scenario.to_string(),
            runs: 0,
            violating_runs: 0,
            violations: Vec::new(),
        }
    }

    fn record(&mut self, mode: Mode, k: u64, stops: String, found: Vec<String>) {
        self.runs += 1;
        if !found.is_empty() {
            self.violating_runs += 1;
        }
        self.violations.extend(found.into_iter().map(|what| Violation {
            kind: self.kind.name().to_string(),
            scenario: self.scenario.clone(),
            mode,
            k,
            stops: stops.clone(),
            what,
        }));
    }

    fn into_report(self, report: &mut Report, verbs: u64) {
        report.add(
            ScenarioReport {
                kind: self.kind.name().to_string(),
                scenario: self.scenario,
                verbs,
                crash_points: self.runs,
                violating_runs: self.violating_runs,
            },
            self.violations,
        );
    }
}

/// Every run of one kind of scenario.
async fn explore_kind(kind: Kind, shape: Shape, modes: &[Mode], tally: &mut Tally) -> Result<(), String> {
    match kind {
        Kind::Owner => explore_owner(shape, modes, tally).await,
        Kind::Repairer => explore_repairer(shape, modes, tally).await,
        Kind::ResumeOrder => explore_resume_order(shape, tally).await,
        Kind::DroppedConnection => explore_dropped_connection(shape, tally).await,
    }
}

/// What every run of a kind shares: replicas, the target's size, and the
/// verbs of one undisturbed run (each a stop position).
#[derive(Clone, Copy)]
struct Shape {
    replicas: u16,
    n: usize,
    verbs: u64,
    transport: TransportKind,
}

/// The owner stopped after each verb; a repairer finishes; the owner resumes.
async fn explore_owner(shape: Shape, modes: &[Mode], tally: &mut Tally) -> Result<(), String> {
    let Shape {
        replicas,
        n,
        verbs,
        transport,
    } = shape;
    for &mode in modes {
        for k in 1..=verbs {
            let mut run = Run::new(replicas, n, transport).await?;
            let victim = run.start(Party::Victim, mode.plan(k));
            let victim = run.stop(victim, Stop::after(mode)).await?;
            let repairer = run.start(Party::Repairer, Default::default());
            run.finish(repairer).await?;
            run.resume_in_order(victim.into_iter().collect()).await?;
            tally.record(mode, k, String::new(), run.judge().await?);
        }
    }
    Ok(())
}

/// The owner crashed after each verb; its repairer stopped after each of its own; a third client commits; the repairer resumes.
async fn explore_repairer(shape: Shape, modes: &[Mode], tally: &mut Tally) -> Result<(), String> {
    let Shape {
        replicas,
        n,
        verbs,
        transport,
    } = shape;
    for k in 1..=verbs {
        for &mode in modes {
            for kr in 1.. {
                let mut run = Run::new(replicas, n, transport).await?;
                let victim = run.start(Party::Victim, Mode::Crash.plan(k));
                run.stop(victim, Stop::Crash).await?;
                let repairer = run.start(Party::Repairer, mode.plan(kr));
                let repairer = run.stop(repairer, Stop::after(mode)).await?;
                let stopped = run.stopped_before_the_end(Party::Repairer);
                let third = run.start(Party::Third, Default::default());
                run.finish(third).await?;
                run.resume_in_order(repairer.into_iter().collect()).await?;
                let stops = format!("repairer {mode:?} after verb {kr}, third commits");
                tally.record(Mode::Crash, k, stops, run.judge().await?);
                if !stopped {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Owner and repairer both paused, at every pair of verbs; with and without a third commit; resumed in each order.
async fn explore_resume_order(shape: Shape, tally: &mut Tally) -> Result<(), String> {
    let Shape {
        replicas,
        n,
        verbs,
        transport,
    } = shape;
    for k in 1..=verbs {
        for kr in 1.. {
            let mut stopped = true;
            for third in [false, true] {
                for victim_first in [true, false] {
                    let mut run = Run::new(replicas, n, transport).await?;
                    let victim = run.start(Party::Victim, Mode::Pause.plan(k));
                    let victim = run.stop(victim, Stop::Pause).await?;
                    let repairer = run.start(Party::Repairer, Mode::Pause.plan(kr));
                    let repairer = run.stop(repairer, Stop::Pause).await?;
                    stopped = run.stopped_before_the_end(Party::Repairer);
                    if third {
                        let t = run.start(Party::Third, Default::default());
                        run.finish(t).await?;
                    }
                    let order = if victim_first {
                        [victim, repairer]
                    } else {
                        [repairer, victim]
                    };
                    run.resume_in_order(order.into_iter().flatten().collect()).await?;
                    let stops = format!(
                        "repairer paused after verb {kr}{}, {} resumes first",
                        if third { ", third commits" } else { "" },
                        if victim_first { "victim" } else { "repairer" }
                    );
                    tally.record(Mode::Pause, k, stops, run.judge().await?);
                }
            }
            if !stopped {
                break;
            }
        }
    }
    Ok(())
}

/// The owner's tcp connections dropped after each verb; it or a repairer goes on first.
async fn explore_dropped_connection(shape: Shape, tally: &mut Tally) -> Result<(), String> {
    let Shape {
        replicas,
        n,
        verbs,
        transport,
    } = shape;
    for k in 1..=verbs {
        for victim_first in [true, false] {
            let mut run = Run::new(replicas, n, transport).await?;
            let plan = fabric::FaultPlan {
                drop_after_verbs: Some(k),
                ..Default::default()
            };
            let victim = run.start(Party::Victim, plan);
            let victim = run.stop(victim, Stop::Dropped).await?;
            if victim_first {
                run.resume_in_order(victim.into_iter().collect()).await?;
                let repairer = run.start(Party::Repairer, Default::default());
                run.finish(repairer).await?;
            } else {
                let repairer = run.start(Party::Repairer, Default::default());
                run.finish(repairer).await?;
                run.resume_in_order(victim.into_iter().collect()).await?;
            }
            let stops = format!(
                "connections dropped; {} goes on first",
                if victim_first { "victim" } else { "repairer" }
            );
            tally.record(Mode::Crash, k, stops, run.judge().await?);
        }
    }
    Ok(())
}
