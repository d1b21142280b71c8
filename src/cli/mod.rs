//! Command-line parsing and dispatch. Each subcommand lives in its own
//! module; this one only wires them.

mod bench;
mod chaos;
mod chaos_campaign;
mod chaos_run;
mod cluster;
pub mod config_file;
mod control;
mod ctl;
mod demo;
mod fabric_bench;
mod memnode;
mod serve;
mod telemetry;
mod units;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Crash-tolerant indexes on disaggregated memory.
#[derive(Parser, Debug)]
#[command(name = "kintsugi", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: a memory node, a B+tree and a RACE table under YCSB A from three client
    /// processes, one killed mid-operation and repaired around; a report and timeline PNGs.
    Demo(demo::DemoArgs),
    /// A local cluster: control-plane members and placed memory nodes, started and stopped together.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Serve the Redis protocol (RESP2/RESP3) on a kintsugi index: redis-cli, redis-benchmark and
    /// Redis libraries on a crash-tolerant index.
    Serve(serve::ServeArgs),
    /// Run a memory node: regions served over tcp (and shm, and persisted).
    Memnode(memnode::MemnodeArgs),
    /// Run a control-plane member: Raft-replicated memory nodes, regions, replica roles and leases.
    Control(control::ControlArgs),
    /// Operate the control plane: status, members, memory nodes, regions, clients.
    Ctl(ctl::CtlArgs),
    /// Chaos experiments: crash and pause clients, then check what is left.
    Chaos {
        #[command(subcommand)]
        command: chaos::ChaosCommand,
    },
    /// Benchmarks of the layers above the fabric: rTX, YCSB on the B+tree, lease accuracy, the control plane.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// The DM fabric on its own.
    Fabric {
        #[command(subcommand)]
        command: FabricCommand,
    },
}

#[derive(Subcommand, Debug)]
enum FabricCommand {
    /// Measure verb throughput and round-trip latency against a raw baseline.
    Bench(fabric_bench::BenchArgs),
}

/// Prints a benchmark's result to stdout: its JSON (one line) with `--json`,
/// else its table. Only results go to stdout, so scripts can parse it.
pub(crate) fn print_report<J: std::fmt::Display, T: std::fmt::Display>(
    json: bool,
    as_json: impl FnOnce() -> J,
    as_table: impl FnOnce() -> T,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", as_json())
    } else {
        write!(out, "{}", as_table())
    }
    .and_then(|()| out.flush())
    .map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}"))
}

/// Test hook of `cluster ycsb --die-after` and `serve --die-after`: the
/// process SIGKILLs itself right after its next CAS that takes an rTX lock,
/// so it dies mid-write holding the lock, for a survivor to repair.
pub(crate) fn die_after_next_lock(faults: &fabric::Faulty<fabric::BaseTransport>) {
    let takes_a_lock = |_: u64, new: u64| txn::LockWord::from_raw(new).is_locked();
    faults.arm_after_next_cas_where(takes_a_lock, || {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    });
}

/// Logs go to stderr so that stdout stays machine-readable.
pub fn init_tracing(verbose: u8, quiet: bool) {
    let default = match verbose {
        // A campaign's in-process clients warn of every connection a fault
        // breaks, hundreds of times a seed; its rows say what happened, and
        // each seed's processes log to files.
        0 if quiet => "error",
        // openraft narrates every election and replication step at info.
        0 => "info,openraft=warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only on a terminal: children of `cluster up` and chaos
        // runs log to files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

impl Cli {
    /// Whether the command logs only errors unless asked for more: a
    /// campaign, whose progress lines would drown in its runs' warnings.
    pub fn quiet_by_default(&self) -> bool {
        matches!(
            &self.command,
            Command::Chaos {
                command: chaos::ChaosCommand::Campaign(_)
            }
        )
    }
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Cluster { command } => cluster::run(command),
        Command::Serve(args) => serve::run(args),
        Command::Memnode(args) => memnode::run(args),
        Command::Control(args) => control::run(args),
        Command::Ctl(args) => ctl::run(args),
        Command::Chaos { command } => chaos::run(command),
        Command::Bench { command } => bench::run(command),
        Command::Fabric {
            command: FabricCommand::Bench(args),
        } => fabric_bench::run(args),
    }
}
