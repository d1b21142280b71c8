//! `kintsugi chaos campaign`: seeded random fault schedules from an
//! experiment file, a table, and the command that reproduces each failure.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chaos::campaign::{self, CampaignOptions, CampaignReport, CampaignRow};
use chaos::experiment::{Experiment, FaultKind};
use chaos::run::Sabotage;

/// Arguments of `kintsugi chaos campaign`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Each seed draws a fault schedule from the kinds the file allows (its [campaign] kinds, else the kinds of
its [[faults]]): 1 to faults_max faults between 15% and 55% of the duration, parameters drawn within the
file's rules. Each runs on a fresh local cluster (three control-plane members, the index's replicas and
spares as memory-node processes), every client operation recorded, and is checked: no error reached the
application, no acknowledged write lost, every key's history linearizable (two independent checkers),
the structure sound, the replicas equal word for word.

Prints a row per seed as it finishes, a table at the end, and for every failure the one command that
reproduces it. Exits non-zero if a seed failed. Outputs in --out/seed-N (summary.json, timeline, the
processes' logs; a failed seed also keeps history.jsonl and the memory nodes' images);
--out/campaign.json holds every row.

Kinds: kill-memnode, restart-memnode, pause-memnode, kill-control-leader, clock-skew, partition,
wipe-memnode (tcp only: a node killed and started again at once without its image),
pause-control-leader (the Raft leader SIGSTOPped past an election while recovery refills a killed node's
replica, then SIGCONTed), transfer-leader (its lead moved at that moment), snapshot-restore (a snapshot
saved, a node killed and recovered from, more written, the snapshot restored into a fresh control plane
over the same memory nodes), partition-data (one client's tcp links to the memory nodes cut for a while,
what it sent meanwhile delivered at the heal), late-delivery (one client's data path held until it has
expired, been forgotten and an heir holds its owner ids; then delivered). In a file with cluster.side_replicas (mixed-rf-*.toml) a seed's first
kill-memnode takes role sole-copy: the node of the rf-1 index's only copy.

Examples:
  kintsugi chaos campaign --experiment deploy/experiments/campaign-btree.toml --seeds 100
  kintsugi chaos campaign --experiment deploy/experiments/campaign-hash.toml --seeds 1 --first-seed 17
  kintsugi chaos campaign --experiment deploy/experiments/campaign-btree.toml --seeds 5 --sabotage drop-backup-writes
  kintsugi chaos campaign --experiment deploy/experiments/wipe-memnode-btree.toml --seeds 100
  kintsugi chaos campaign --experiment deploy/experiments/wipe-memnode-hash.toml --seeds 3 --sabotage serve-wiped
  kintsugi chaos campaign --experiment deploy/experiments/leader-during-recovery-btree.toml --seeds 100
  kintsugi chaos campaign --experiment deploy/experiments/snapshot-restore-hash.toml --seeds 100
  kintsugi chaos campaign --experiment deploy/experiments/mixed-rf-btree.toml --seeds 100
  kintsugi chaos campaign --experiment deploy/experiments/data-path-hash.toml --variant dtx --seeds 100")]
pub struct CampaignArgs {
    /// The experiment file (TOML); its faults are replaced by drawn ones.
    #[arg(long, value_name = "FILE")]
    experiment: PathBuf,
    /// How many seeds to run.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// The first seed (the others follow it).
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Where the outputs go [default: chaos-out/NAME-campaign].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Break the system on purpose, to see the campaign fail: drop-backup-writes (every
    /// client's WRITEs to the first backup are dropped), no-repair (clients repair no other
    /// owner's expired lock), serve-wiped (memory nodes serve a wiped image as if it held their
    /// replicas: fails wipe-memnode seeds).
    #[arg(long, value_name = "DEFECT")]
    sabotage: Option<Sabotage>,
    /// Draw from these fault kinds instead of the file's (comma-separated), e.g.
    /// `--kinds pause-memnode,partition`.
    #[arg(long, value_name = "KIND,...", value_delimiter = ',', value_parser = parse_kind)]
    kinds: Vec<FaultKind>,
    /// Draw clock skews past the rTX drift (up to 20 times it), to see what breaks there:
    /// the paper's bounded-drift assumption, broken on purpose.
    #[arg(long)]
    skew_beyond_drift: bool,
    /// Run the index as this variant instead of the file's (rtx or dtx): one file covers both.
    #[arg(long, value_name = "VARIANT", value_parser = parse_variant)]
    variant: Option<index::Variant>,
    /// Only print the schedules the seeds draw; run nothing.
    #[arg(long)]
    dry_run: bool,
}

fn parse_variant(s: &str) -> Result<index::Variant, String> {
    match s {
        "rtx" => Ok(index::Variant::Rtx),
        "dtx" => Ok(index::Variant::Dtx),
        _ => Err(format!(
            "'{s}' is not a variant campaigns run (rtx, dtx: optimal does not survive a memory node)"
        )),
    }
}

fn parse_kind(s: &str) -> Result<FaultKind, String> {
    FaultKind::ALL
        .into_iter()
        .find(|k| k.to_string() == s)
        .ok_or_else(|| {
            let all: Vec<String> = FaultKind::ALL.iter().map(|k| k.to_string()).collect();
            format!("'{s}' is not a fault kind ({})", all.join(", "))
        })
}

pub fn run(args: CampaignArgs) -> anyhow::Result<ExitCode> {
    let mut base = Experiment::from_file(&args.experiment)?;
    if !args.kinds.is_empty() {
        base.campaign.get_or_insert_with(Default::default).kinds = args.kinds.clone();
    }
    if args.skew_beyond_drift {
        base.campaign
            .get_or_insert_with(Default::default)
            .skew_beyond_drift = true;
    }
    if let Some(v) = args.variant {
        base.index.variants = vec![v];
        // Its own outputs: the file's name says the other variant.
        base.name = format!("{}-{v}", base.name);
    }
    let mut kinds_flag = if args.kinds.is_empty() {
        String::new()
    } else {
        let k: Vec<String> = args.kinds.iter().map(|k| k.to_string()).collect();
        format!(" --kinds {}", k.join(","))
    };
    if args.skew_beyond_drift {
        kinds_flag += " --skew-beyond-drift";
    }
    if let Some(v) = args.variant {
        kinds_flag += &format!(" --variant {v}");
    }
    if args.dry_run {
        for seed in args.first_seed..args.first_seed.saturating_add(args.seeds) {
            let e = campaign::schedule(&base, seed)?;
            let faults: Vec<String> = e.faults.iter().map(campaign::describe).collect();
            println!("seed {seed}: {}", faults.join(", "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("chaos-out").join(format!("{}-campaign", base.name)));
    let options = CampaignOptions {
        exe: std::env::current_exe().context("cannot find the kintsugi binary")?,
        out: out.clone(),
        first_seed: args.first_seed,
        seeds: args.seeds,
        sabotage: args.sabotage,
    };
    let kinds: Vec<String> = campaign::kinds(&base).iter().map(|k| k.to_string()).collect();
    eprintln!(
        "chaos campaign: {} seed(s) of {} ({}), kinds: {}{}",
        args.seeds,
        base.name,
        base.index.kind,
        kinds.join(", "),
        args.sabotage
            .map(|s| format!(", sabotage: {s}"))
            .unwrap_or_default()
    );
    let mut done = 0;
    let report = campaign::run(&base, &options, |row| {
        done += 1;
        eprintln!(
            "[{done}/{}] seed {}: {} in {:.1} s ({})",
            args.seeds,
            row.seed,
            if row.passed { "passed" } else { "FAILED" },
            row.run_s,
            row.faults.join(", ")
        );
    })?;
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join("campaign.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    print!("{}", table(&report));
    let failed: Vec<&CampaignRow> = report.failed().collect();
    println!(
        "{} of {} seed(s) passed; outputs: {}",
        report.rows.len() - failed.len(),
        report.rows.len(),
        out.display()
    );
    for row in &failed {
        println!(
            "seed {} FAILED: {}\n  reproduce: kintsugi chaos campaign --experiment {} --seeds 1 --first-seed {}{kinds_flag}{}",
            row.seed,
            row.why.as_deref().unwrap_or("?"),
            args.experiment.display(),
            row.seed,
            args.sabotage.map(|s| format!(" --sabotage {s}")).unwrap_or_default()
        );
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn table(report: &CampaignReport) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(vec![
        "seed",
        "faults",
        "ops",
        "lost",
        "non-linearizable keys",
        "recovered (ms)",
        "writes stopped (ms)",
        "run (s)",
        "verdict",
    ]);
    for r in &report.rows {
        t.add_row(vec![
            r.seed.to_string(),
            r.faults.join("; "),
            r.ops.to_string(),
            r.lost.to_string(),
            r.non_linearizable.to_string(),
            format!("{:.0}", r.recovered_ms),
            r.stopped_ms
                .iter()
                .map(|s| format!("{s:.0}"))
                .collect::<Vec<_>>()
                .join("; "),
            format!("{:.1}", r.run_s),
            if r.passed { "passed" } else { "FAILED" }.to_owned(),
        ]);
    }
    format!("{t}\n")
}
