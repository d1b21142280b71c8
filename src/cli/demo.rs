//! `kintsugi demo`: the project's main job on an embedded default. A
//! control-plane member and a memory node on shm in a temporary directory,
//! a B+tree and then a RACE table
//! (rtx) loaded, YCSB A from three client processes, one killed
//! mid-operation; a live progress line, a short report, the timeline PNGs.
//! Everything but the PNGs and summaries is removed at the end.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use chaos::experiment::{
    ClusterSpec, Experiment, Fault, FaultKind, IndexKind, IndexSpec, TransportKind, WorkloadToml,
};
use chaos::run::Options;
use index::Variant;

/// Arguments of `kintsugi demo`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Runs two chaos experiments with real processes (see `kintsugi chaos run --help`): the B+tree, then
RACE hashing, both rtx, YCSB A, three client processes, one killed at 40% of the run right after it
takes a lock. The survivors repair its lock once its lease expires and carry on. A control-plane member
leases every client its owner ids; once it has expired the killed client's lease, a fresh client checks
the index and every acknowledged write, and the control plane forgets the dead client. Exits non-zero
if a check fails.

Keeps DIR/btree-timeline.png, DIR/hash-timeline.png and their summary JSON; removes the rest.")]
pub struct DemoArgs {
    /// How long each index runs under load.
    #[arg(long, value_parser = super::units::parse_duration, default_value = "5s")]
    duration: Duration,
    /// Keys loaded into each index.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Small and short: 2s and 100,000 keys (overrides --duration and --keys).
    #[arg(long)]
    quick: bool,
    /// Where the PNGs and summaries go.
    #[arg(long, value_name = "DIR", default_value = "kintsugi-demo")]
    out: PathBuf,
}

fn experiment(kind: IndexKind, duration: Duration, keys: u64) -> Experiment {
    Experiment {
        name: format!("demo-{kind}"),
        description: "kill one of three YCSB A clients mid-operation".into(),
        duration,
        cluster: ClusterSpec {
            memory_nodes: 1,
            transport: TransportKind::Shm,
            clients: 3,
            threads_per_client: 1,
            control_plane: true,
            client_lease: Duration::from_secs(1),
            spares: 0,
            memnode_lease: Duration::from_millis(100),
            side_replicas: Vec::new(),
            request_deadline: fabric::transport::REQUEST_DEADLINE,
        },
        index: IndexSpec {
            kind,
            variants: vec![Variant::Rtx],
            expect_violations: vec![],
        },
        workload: WorkloadToml {
            ycsb: "a".into(),
            keys,
            distribution: "uniform".into(),
        },
        faults: vec![Fault {
            kind: FaultKind::KillClient,
            client: 2,
            role: None,
            at: duration * 2 / 5,
            pause: None,
            skew_ms: None,
            target: None,
            members: Vec::new(),
        }],
        seed: 42,
        campaign: None,
    }
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let (duration, keys) = if args.quick {
        (Duration::from_secs(2), 100_000)
    } else {
        (args.duration, args.keys)
    };
    let work = tempfile::tempdir().context("cannot create a temporary directory")?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let exe = std::env::current_exe().context("cannot find the kintsugi binary")?;
    let mut passed = true;
    let mut pngs = Vec::new();
    for kind in [IndexKind::Btree, IndexKind::Hash] {
        let e = experiment(kind, duration, keys);
        e.validate()?;
        let out = work.path().join(kind.to_string());
        let summary = chaos::run::run(
            e,
            &Options {
                exe: exe.clone(),
                out: out.clone(),
                seed: None,
                progress: true,
                sabotage: None,
            },
        )?;
        print!("{}", super::chaos_run::report(&summary));
        passed &= summary.passed;
        for (from, to) in [("timeline.png", "timeline.png"), ("summary.json", "summary.json")] {
            let dest = args.out.join(format!("{kind}-{to}"));
            std::fs::copy(out.join(from), &dest)
                .with_context(|| format!("cannot write {}", dest.display()))?;
            if from.ends_with(".png") {
                pngs.push(dest);
            }
        }
    }
    work.close().context("cannot remove the temporary directory")?;
    for p in &pngs {
        println!("timeline: {}", p.display());
    }
    println!(
        "{}",
        if passed {
            "demo: all checks passed"
        } else {
            "demo: a check FAILED"
        }
    );
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
