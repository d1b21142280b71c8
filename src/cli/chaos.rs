//! `kintsugi chaos ...`: crash-point exploration and experiments with real
//! processes (`chaos_run`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use chaos::crash_points::{self, Mode, Report};

/// Chaos subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ChaosCommand {
    /// Stop a client after each of its verbs in turn (crash for good, or
    /// pause past its lease and wake), let another client through, and check
    /// what is left. Exits non-zero if any run violates the target's
    /// guarantees.
    #[command(after_help = "\
Target rtx: a transaction reads and rewrites N objects (N = 1, 2, 3, 8; one replica and two). After the
victim stops, a survivor whose clock is past the victim's leases must read all-old or all-new values,
repair what was left, and commit; no lock may remain and replicas must agree.

Target dtx: the FORD-style baseline. A victim runs 4 DTX transactions over N records (N = 1, 2, 3, 8),
each incrementing counters, and stops after each of its verbs: crashes, or pauses and is fenced
(its lease revoked) before it resumes, which is DTX's quarantine. Kinds: owner; recoverer (the
recovery client itself crashes after each of its verbs, a second one finishes); dropped-connection
(the victim settles its own log and goes on). After recovery nothing may stay locked or invisible,
the replicas must agree, the counters must be those of whole transactions holding every acknowledged
one, and a survivor must write every record. (resume-order is rTX's kind and is skipped for dtx.)

Target btree: an insert that writes one entry, splits a leaf, or splits a leaf and the internal root.
After the victim stops, a survivor inserts next to its key; then the tree's check() must pass, every
acknowledged key must be present, and the victim's key present or absent, never half. The optimal
variant is expected to show violations (blocked survivors, half splits): they are reported, and the
command exits 0 for it.

Target hash: RACE hashing with 21-slot subtables: an insert with room, an update, a delete, and an
insert whose combined buckets are full so that it splits the subtable. After the victim stops, a
survivor reads every preloaded key, then inserts fresh keys until it has split a subtable itself; then
the table's check() must pass (no lock held), every acknowledged key must hold its value, and the
victim's key its old or new value (or be absent, for an insert or a delete), never a value nobody
wrote. As for btree, optimal's violations (blocked survivors, headers left locked, keys in two slots)
are reported and the command exits 0 for it.")]
    CrashPoints(CrashPointsArgs),
    /// Run an experiment file: a memory node and client processes under load, faults injected at
    /// their times (kill, pause), a throughput timeline, and checks of what is left. Exits non-zero
    /// if a check fails.
    Run(super::chaos_run::RunArgs),
    /// Run many seeded random fault schedules drawn from an experiment file's kinds, each on a
    /// fresh local cluster, every history checked for linearizability; a table, and the command
    /// that reproduces each failure. Exits non-zero if a seed failed.
    Campaign(super::chaos_campaign::CampaignArgs),
    /// One client process of `chaos run` (started by it, not by hand).
    #[command(hide = true)]
    Client(super::chaos_run::ClientArgs),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Repairable transactions.
    Rtx,
    /// FORD-style DTX transactions and their recovery.
    Dtx,
    /// The B+tree (choose --variant).
    Btree,
    /// RACE hashing (choose --variant).
    Hash,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// Crash after the k-th verb, for good.
    Crash,
    /// Pause after the k-th verb past the lease; wake after a repair.
    Pause,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindArg {
    /// The victim stopped after each of its verbs.
    Owner,
    /// The repairer stopped after each of its verbs; a third client commits.
    Repairer,
    /// Victim and repairer both paused, resumed in each order.
    ResumeOrder,
    /// The victim's tcp connections dropped after each of its verbs.
    DroppedConnection,
    /// dtx: the victim crashed after each of its verbs, then the primary dies and a backup is
    /// promoted (2 replicas or more).
    Promotion,
}

impl KindArg {
    fn kind(self) -> Option<crash_points::rtx::Kind> {
        match self {
            KindArg::Owner => Some(crash_points::rtx::Kind::Owner),
            KindArg::Repairer => Some(crash_points::rtx::Kind::Repairer),
            KindArg::ResumeOrder => Some(crash_points::rtx::Kind::ResumeOrder),
            KindArg::DroppedConnection => Some(crash_points::rtx::Kind::DroppedConnection),
            KindArg::Promotion => None,
        }
    }
}

/// Arguments of `kintsugi chaos crash-points`.
#[derive(clap::Args, Debug)]
pub struct CrashPointsArgs {
    /// What to explore.
    #[arg(long, value_enum)]
    target: Target,
    /// Write-set sizes to explore (rtx), records per scenario (dtx).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 3, 8])]
    objects: Vec<usize>,
    /// Replication factors to explore (rtx, dtx).
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 2, 3])]
    replicas: Vec<u16>,
    /// Kinds of scenario to explore (rtx, dtx): the victim stopped at each
    /// verb (owner); the repairer (dtx: the recovery client) stopped at each
    /// of its verbs (repairer); victim and repairer both paused, resumed in
    /// each order (resume-order, rtx only); the victim's connections dropped
    /// at each verb (dropped-connection); the victim crashed at each verb,
    /// then its primary dead and a backup promoted (promotion, dtx only).
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [KindArg::Owner, KindArg::Repairer, KindArg::ResumeOrder, KindArg::DroppedConnection, KindArg::Promotion])]
    kinds: Vec<KindArg>,
    /// Stop modes to explore.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [ModeArg::Crash, ModeArg::Pause])]
    modes: Vec<ModeArg>,
    /// Index variant (btree and hash targets).
    #[arg(long, default_value = "rtx")]
    variant: index::btree::Variant,
    /// How the parties reach memory (rtx target; the others run in
    /// process): in-process nodes, or tcp or rdma servers in this process
    /// (rdma: a binary built with `--features rdma`, and an RDMA device).
    /// Dropped-connection runs need connections: on local they use tcp.
    #[arg(long, value_enum, default_value_t = harness::TransportKind::Local)]
    transport: harness::TransportKind,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(command: ChaosCommand) -> anyhow::Result<ExitCode> {
    match command {
        ChaosCommand::CrashPoints(args) => crash_points_cmd(args),
        ChaosCommand::Run(args) => super::chaos_run::run(args),
        ChaosCommand::Campaign(args) => super::chaos_campaign::run(args),
        ChaosCommand::Client(args) => super::chaos_run::client(args),
    }
}

fn crash_points_cmd(args: CrashPointsArgs) -> anyhow::Result<ExitCode> {
    if let Some(&n) = args
        .objects
        .iter()
        .find(|&&n| n == 0 || n > txn::log::LOG_ENTRIES_MAX)
    {
        anyhow::bail!(
            "--objects {n}: write sets of 1 to {} objects can be explored",
            txn::log::LOG_ENTRIES_MAX
        );
    }
    if let Some(&r) = args
        .replicas
        .iter()
        .find(|&&r| r == 0 || r as usize > fabric::REPLICAS_MAX)
    {
        anyhow::bail!("--replicas {r}: 1 to {} replicas", fabric::REPLICAS_MAX);
    }
    let modes: Vec<Mode> = args
        .modes
        .iter()
        .map(|m| match m {
            ModeArg::Crash => Mode::Crash,
            ModeArg::Pause => Mode::Pause,
        })
        .collect();
    if args.target != Target::Rtx && args.transport != harness::TransportKind::Local {
        anyhow::bail!(
            "--transport {}: only the rtx target runs over another transport; the others run in process",
            args.transport
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    eprintln!("crash-points: exploring target {:?} ...", args.target);
    let (report, must_hold) = match args.target {
        Target::Rtx => {
            let options = crash_points::rtx::Options {
                objects: args.objects,
                replicas: args.replicas,
                modes,
                kinds: args.kinds.iter().filter_map(|k| k.kind()).collect(),
                transport: args.transport,
            };
            (runtime.block_on(crash_points::rtx::explore(&options))?, true)
        }
        Target::Dtx => {
            if let Some(&n) = args.objects.iter().find(|&&n| n > txn::dtx::log::ENTRIES_MAX) {
                anyhow::bail!(
                    "--objects {n}: a DTX transaction locks at most {} records",
                    txn::dtx::log::ENTRIES_MAX
                );
            }
            let kinds = args
                .kinds
                .iter()
                .filter_map(|k| match k {
                    KindArg::Owner => Some(crash_points::dtx::Kind::Owner),
                    KindArg::Repairer => Some(crash_points::dtx::Kind::Recoverer),
                    KindArg::DroppedConnection => Some(crash_points::dtx::Kind::DroppedConnection),
                    KindArg::Promotion => Some(crash_points::dtx::Kind::Promotion),
                    KindArg::ResumeOrder => None,
                })
                .collect();
            let options = crash_points::dtx::Options {
                records: args.objects,
                replicas: args.replicas,
                modes,
                kinds,
            };
            (runtime.block_on(crash_points::dtx::explore(&options))?, true)
        }
        Target::Btree | Target::Hash => {
            let options = crash_points::IndexOptions {
                variant: args.variant,
                modes,
            };
            let report = if args.target == Target::Btree {
                runtime.block_on(crash_points::btree::explore(&options))?
            } else {
                runtime.block_on(crash_points::hash::explore(&options))?
            };
            // Optimal has no fault tolerance: its violations are the finding.
            (report, args.variant != index::btree::Variant::Optimal)
        }
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        write!(out, "{}", table(&report))?;
    }
    Ok(if report.violations == 0 || !must_hold {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn table(r: &Report) -> String {
    let mut s = format!("target {}\n", r.target);
    s += &format!(
        "{:<19} {:<22} {:>7} {:>13} {:>15}\n",
        "kind", "scenario", "verbs", "runs", "violating runs"
    );
    for sc in &r.scenarios {
        s += &format!(
            "{:<19} {:<22} {:>7} {:>13} {:>15}\n",
            sc.kind, sc.scenario, sc.verbs, sc.crash_points, sc.violating_runs
        );
    }
    s += &format!(
        "{:<19} {:>9} {:>10} {:>15}\n",
        "by kind", "scenarios", "runs", "violating runs"
    );
    for k in &r.kinds {
        s += &format!(
            "{:<19} {:>9} {:>10} {:>15}\n",
            k.kind, k.scenarios, k.runs, k.violating_runs
        );
    }
    for v in &r.details {
        let stops = if v.stops.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.stops)
        };
        s += &format!(
            "VIOLATION {} {} {:?} k={}{stops}: {}\n",
            v.kind, v.scenario, v.mode, v.k, v.what
        );
    }
    if r.details.len() as u64 != r.violations {
        s += &format!(
            "... {} more violations not listed\n",
            r.violations - r.details.len() as u64
        );
    }
    s += &format!(
        "crash points explored: {}, violations: {}\n",
        r.crash_points, r.violations
    );
    s
}
