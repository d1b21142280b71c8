//! `kintsugi cluster up|down|status`: a local multi-process cluster.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use harness::local::{self, ClusterFile, LocalCluster, LocalClusterSpec, READY_LINE};

use super::ctl::tables;

/// The directory of a cluster when neither --dir nor the config names one.
const DIR_DEFAULT: &str = "kintsugi-cluster";

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start a local cluster: control-plane members and memory nodes placed by them, as
    /// processes of this one (all stopped with it, on Ctrl-C, SIGTERM or `cluster down`).
    #[command(after_help = "\
Default: 3 control members, 3 memory nodes of 4GiB on shm, replication 3, data under
./kintsugi-cluster; deploy/local-cluster.toml is the commented config with every key.

Once up, DIR/cluster.json names the endpoints and tokens (operator and client).

Examples:
  kintsugi cluster up --detach
  kintsugi cluster up --config deploy/local-cluster.toml
  cargo run --release --example orders -- --dir kintsugi-cluster
  kintsugi cluster down")]
    Up(UpArgs),
    /// Stop the local cluster in DIR (its supervisor and every process it started).
    Down {
        /// The cluster's directory.
        #[arg(long, default_value = DIR_DEFAULT)]
        dir: PathBuf,
    },
    /// Run a checkable YCSB-A load on a named index of a running cluster, as a client process
    /// through the client library: tasks with disjoint keys, half reads, half writes.
    #[command(after_help = "\
Prints `running` once the first operation completed, progress on stderr, and at the end one line:
`done OPS WRITES RETRIES`. Exits 1 if an operation failed (after the library's retries).

With --die-after D, the process SIGKILLs itself right after its first CAS past D that takes a lock:
it dies mid-operation holding a lock, for a survivor to repair.

Examples:
  kintsugi cluster ycsb --index orders --duration 10s
  kintsugi cluster ycsb --index sessions --kind hash --tasks 8 --die-after 2s")]
    Ycsb(YcsbArgs),
    /// Give back the owner ids of expired clients: finish their logs and sweep their locks on
    /// every rtx index, then forget them (each once a lease has passed since its expiry).
    Reap {
        /// The cluster's directory.
        #[arg(long, default_value = DIR_DEFAULT)]
        dir: PathBuf,
    },
    /// Show the local cluster in DIR: its processes and the control plane's status.
    Status {
        /// The cluster's directory.
        #[arg(long, default_value = DIR_DEFAULT)]
        dir: PathBuf,
        /// Print the control plane's status as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// The cluster's TOML (see deploy/local-cluster.toml); default: the defaults above.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The cluster's directory (overrides the config's `dir`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Return once the cluster is up, leaving it running in the background (its supervisor
    /// logs to DIR/cluster.log); stop it with `kintsugi cluster down`.
    #[arg(long)]
    detach: bool,
    /// Internal: run as the supervisor of a detached `up`.
    #[arg(long, hide = true, conflicts_with = "detach")]
    supervised: bool,
}

#[derive(Args, Debug)]
pub struct YcsbArgs {
    /// The cluster's directory (endpoints and client token from its cluster.json).
    #[arg(long, default_value = DIR_DEFAULT)]
    dir: PathBuf,
    /// The index to open (created if new).
    #[arg(long)]
    index: String,
    /// The kind of index.
    #[arg(long, value_enum, default_value = "btree")]
    kind: Kind,
    /// Concurrent tasks, each with its own keys and owner id.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    tasks: u16,
    /// Keys each task owns.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    keys: u64,
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = super::units::parse_duration)]
    duration: std::time::Duration,
    /// Seeds the key choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Die (SIGKILL, by this process itself) right after the first lock-taking CAS past this.
    #[arg(long, value_parser = super::units::parse_duration)]
    die_after: Option<std::time::Duration>,
    /// Name the client registers under.
    #[arg(long, default_value = "ycsb")]
    name: String,
    /// After losing its cluster lease (paused or cut off past it), the load joins again as a new
    /// client and goes on; if it cannot within this long, it stops with the reason.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = super::units::parse_duration)]
    rejoin_timeout: std::time::Duration,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Kind {
    Btree,
    Hash,
}

pub fn run(command: ClusterCommand) -> anyhow::Result<ExitCode> {
    match command {
        ClusterCommand::Ycsb(args) => ycsb(args),
        ClusterCommand::Reap { dir } => reap(&dir),
        ClusterCommand::Up(args) => up(args),
        ClusterCommand::Down { dir } => {
            let file = local::down(&dir)?;
            println!(
                "cluster in {} is down (supervisor pid {} stopped)",
                dir.display(),
                file.pid
            );
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Status { dir, json } => status(&dir, json),
    }
}

fn spec(args: &UpArgs) -> anyhow::Result<LocalClusterSpec> {
    let mut spec = match &args.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            LocalClusterSpec::parse(&text, &path.display().to_string())?
        }
        None => LocalClusterSpec::default(),
    };
    if let Some(dir) = &args.dir {
        spec.dir = dir.clone();
    }
    spec.validate()?;
    Ok(spec)
}

fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let spec = spec(&args)?;
    let exe = std::env::current_exe().context("cannot find the kintsugi binary")?;
    if args.detach {
        let mut forwarded: Vec<OsString> = Vec::new();
        if let Some(c) = &args.config {
            forwarded.extend([OsString::from("--config"), c.clone().into_os_string()]);
        }
        forwarded.extend([OsString::from("--dir"), spec.dir.clone().into_os_string()]);
        eprintln!(
            "starting the cluster in {} in the background ...",
            spec.dir.display()
        );
        let file = local::detach(&exe, &forwarded, &spec.dir)?;
        print_summary(&spec, &file, true);
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = runtime()?;
    runtime.block_on(async {
        let shutdown = super::memnode::shutdown_signal()?;
        let cluster = LocalCluster::up(&exe, &spec, |step| tracing::info!("{step}")).await?;
        if args.supervised {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{READY_LINE}")?;
            out.flush()?;
        } else {
            print_summary(&spec, &cluster.file, false);
        }
        shutdown.await;
        tracing::info!("stopping the cluster");
        drop(cluster);
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn print_summary(spec: &LocalClusterSpec, file: &ClusterFile, detached: bool) {
    let dir = spec.dir.display();
    println!("cluster up in {dir} (supervisor pid {})", file.pid);
    println!("  control plane: {}", file.control.join(","));
    println!(
        "  memory nodes:  {} ({:?})",
        file.memnodes.join(","),
        file.transport
    );
    println!("  endpoints and tokens: {dir}/{}", local::STATE_FILE);
    println!("try:");
    println!(
        "  KINTSUGI_ENDPOINT={} KINTSUGI_TOKEN=$(jq -r .token {dir}/cluster.json) kintsugi ctl status",
        file.control[0]
    );
    println!("  cargo run --release --example orders -- --dir {dir}");
    if detached {
        println!("stop it: kintsugi cluster down --dir {dir}");
    } else {
        println!("stop it: Ctrl-C here, or kintsugi cluster down --dir {dir}");
    }
}

fn status(dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let file = ClusterFile::read(dir)?;
    let alive = file.supervisor_alive();
    let members = cluster::Members::new(&file.control, &file.token)?;
    let status = runtime()?.block_on(members.call("reading the status", |c| async move { c.status().await }));
    if json {
        println!("{}", serde_json::to_string(&status.as_ref().ok())?);
        return Ok(if status.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    println!(
        "cluster in {} (supervisor pid {}: {})",
        dir.display(),
        file.pid,
        if alive { "running" } else { "gone" }
    );
    match status {
        Ok(s) => {
            println!("{}", tables::status(&s));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn ycsb(args: YcsbArgs) -> anyhow::Result<ExitCode> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let file = ClusterFile::read(&args.dir)?;
    let runtime = runtime()?;
    runtime.block_on(async {
        let options = cluster::ClusterOptions {
            name: args.name.clone(),
            owner_ids: args.tasks,
            replicas: file.replicas,
            faults: args.die_after.map(|_| fabric::FaultPlan::default()),
            ..cluster::ClusterOptions::default()
        };
        let membership =
            cluster::Membership::join(&file.control, &file.client_token, options, args.rejoin_timeout)
                .await?;
        let membership = Arc::new(membership);
        let c = membership.current();
        eprintln!(
            "client {} (owner ids {:?}) on index {:?}",
            c.id(),
            c.owner_ids(),
            args.index
        );
        let spec = cluster::load::LoadSpec {
            index: args.index.clone(),
            kind: match args.kind {
                Kind::Btree => cluster::IndexKind::Btree,
                Kind::Hash => cluster::IndexKind::Hash,
            },
            tasks: usize::from(args.tasks),
            keys_per_task: args.keys,
            duration: args.duration,
            seed: args.seed,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let ticker = {
            let (ops, faults) = (ops.clone(), c.faults().cloned());
            let (die_after, started) = (args.die_after, std::time::Instant::now());
            tokio::spawn(async move {
                let mut said = false;
                let mut armed = false;
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    let n = ops.load(Ordering::Relaxed);
                    if n > 0 && !said {
                        said = true;
                        println!("running");
                    }
                    if let (Some(d), Some(f), false) = (die_after, &faults, armed) {
                        if said && started.elapsed() >= d {
                            armed = true;
                            super::die_after_next_lock(f);
                        }
                    }
                }
            })
        };
        drop(c);
        // A lost lease is survived: a new client, new owner ids; recovery
        // rolls the old ones.
        let kept = {
            let m = membership.clone();
            tokio::spawn(async move {
                m.keep(|c| {
                    eprintln!(
                        "joined the cluster again as client {} (owner ids {:?}) after losing the lease",
                        c.id(),
                        c.owner_ids()
                    );
                })
                .await
            })
        };
        let report = cluster::load::run(membership.clone(), &spec, stop, ops).await;
        ticker.abort();
        let report = report?;
        println!(
            "done {} {} {} {}",
            report.ops, report.writes, report.retries, report.rejoins
        );
        for e in &report.errors {
            eprintln!("error: {e}");
        }
        if !report.errors.is_empty() {
            kept.abort();
            return Ok(ExitCode::FAILURE);
        }
        // Left with the client in force: one whose lease was lost as the
        // load ended leaves once the next has joined.
        let mut c = membership.current();
        if !c.lease_holds() {
            c = membership.next_after(&c).await?;
        }
        let lost = cluster::load::lost(&c, &spec.index, spec.kind, &report.acked).await?;
        drop(c);
        kept.abort();
        // The aborted task's clone is dropped once it has stopped.
        let _ = kept.await;
        if !lost.is_empty() {
            for (k, found, acked) in lost.iter().take(10) {
                eprintln!("error: key {k} holds {found:?}, not its acknowledged {acked}");
            }
            eprintln!(
                "error: {} of {} acknowledged writes lost",
                lost.len(),
                report.acked.len()
            );
            return Ok(ExitCode::FAILURE);
        }
        eprintln!(
            "checked: all {} keys written hold their last acknowledged value",
            report.acked.len()
        );
        Arc::into_inner(membership)
            .context("the cluster client is still shared at the end")?
            .close()
            .await?;
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

fn reap(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let file = ClusterFile::read(dir)?;
    let runtime = runtime()?;
    runtime.block_on(async {
        let options = cluster::ClusterOptions {
            name: "reaper".into(),
            owner_ids: 1,
            ..cluster::ClusterOptions::default()
        };
        let c = cluster::Cluster::connect_with(&file.control, &file.client_token, options).await?;
        let forgotten = c.reap_expired().await;
        c.close().await?;
        let forgotten = forgotten?;
        if forgotten.is_empty() {
            println!("no expired client could be forgotten yet (none expired, or still in quarantine)");
        } else {
            let ids: Vec<String> = forgotten.iter().map(ToString::to_string).collect();
            println!("forgot client(s) {}: their owner ids are free", ids.join(", "));
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
