//! `kintsugi chaos run` (an experiment file with real processes), the
//! hidden `kintsugi chaos client` those processes run, and the report.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chaos::experiment::Experiment;
use chaos::experiment::{FaultKind, ReplicaRole};
use chaos::run::control::{ControlOutcome, LeaseSeen};
use chaos::run::replica::ReplicaSummary;
use chaos::run::{Fate, Options, Summary, VariantOutcome};

/// Arguments of `kintsugi chaos run`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
For each variant in turn, on fresh processes: starts a control-plane member (kintsugi control; unless
the file says control_plane = false), the memory nodes (kintsugi memnode, one replica of the index's
region each, the first the primary; they register with the control plane) and the client processes
the file asks for; every client takes its owner ids with a lease from the control plane. Loads the
index; runs the workload from every client, one common start;
applies the faults at their times (kill-client: the client SIGKILLs itself right after its next CAS that
swaps, holding a lock, or is SIGKILLed 100 ms later; pause-client: the same with SIGSTOP, then SIGCONT after
`for`). Clients report their ops per 1 ms bucket and log every acknowledged write. After the duration a
client still inside an op gets 2 s, then counts as blocked and is killed.

Checks, once the control plane has expired the dead clients' leases, by a fresh client: repair what
dead clients left (rtx, as recovery would; then the control plane forgets them), the index's structural
checker (no lock held), every acknowledged write present with its last acknowledged value (or a
concurrent or later one), no key nobody wrote. Exits non-zero if a variant fails its checks, unless the
file lists it under index.expect_violations (optimal cannot repair a dead client's locks).

Outputs in --out: timeline.csv, timeline.png (a line per variant, a marker per fault), history.jsonl,
summary.json (throughput before and after each fault, time to recover, client fates, checks, the
control plane's leases), and a directory per variant with the processes' logs.

Experiment files: deploy/experiments/*.toml (format: the chaos crate's experiment module).

Examples:
  kintsugi chaos run deploy/experiments/kill-client.toml
  kintsugi chaos run deploy/experiments/pause-client.toml --out /tmp/pause --seed 7
  kintsugi chaos run deploy/experiments/kill-client-replicated.toml   # 3 memory nodes over tcp
  kintsugi chaos run deploy/experiments/wipe-memnode-btree.toml       # a node back without its image
  kintsugi chaos run deploy/experiments/leader-during-recovery-btree.toml  # the leader paused mid-refill")]
pub struct RunArgs {
    /// The experiment file (TOML).
    file: PathBuf,
    /// Where the outputs go [default: chaos-out/NAME].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Seed of keys, values and op streams (overrides the file's).
    #[arg(long)]
    seed: Option<u64>,
}

/// Arguments of `kintsugi chaos client` (started by `chaos run`).
#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    /// The run spec the runner wrote.
    #[arg(long)]
    spec: PathBuf,
    /// This client's number.
    #[arg(long)]
    client: u32,
    /// Bearer token of the run's control plane (the runner sets it).
    #[arg(long, env = super::control::TOKEN_ENV, hide_env_values = true)]
    control_token: Option<String>,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let experiment = Experiment::from_file(&args.file)?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("chaos-out").join(&experiment.name));
    let options = Options {
        exe: std::env::current_exe().context("cannot find the kintsugi binary")?,
        out: out.clone(),
        seed: args.seed,
        progress: true,
        sabotage: None,
    };
    if experiment.on_memnodes() {
        let summary = chaos::run::replica::run(experiment, &options)?;
        print!("{}", replica_report(&summary));
        println!(
            "outputs: {0}/timeline.png, timeline.csv, history.jsonl, summary.json",
            out.display()
        );
        return Ok(if summary.passed {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let summary = chaos::run::run(experiment, &options)?;
    print!("{}", report(&summary));
    println!(
        "outputs: {0}/timeline.png, timeline.csv, history.jsonl, summary.json",
        out.display()
    );
    Ok(if summary.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn client(args: ClientArgs) -> anyhow::Result<ExitCode> {
    chaos::run::client::main(&args.spec, args.client, args.control_token)?;
    Ok(ExitCode::SUCCESS)
}

/// The report of a run with memory-node faults.
fn replica_report(s: &ReplicaSummary) -> String {
    let mut out = String::new();
    let ms = |t: Option<f64>| t.map_or_else(|| "never".to_owned(), |t| format!("{t:.0} ms"));
    let verdict = if s.passed { "PASSED" } else { "FAILED" };
    let variant = s
        .experiment
        .index
        .variants
        .first()
        .map_or_else(|| "rtx".to_owned(), ToString::to_string);
    let _ = writeln!(
        out,
        "{}\n{variant}: {} ops, {} ops/s on average, {} operation(s) retried after a map change or a lost connection: {verdict}",
        s.experiment.headline(),
        s.ops,
        rate(s.ops_per_sec),
        s.retries
    );
    for (client, t) in s.tx_by_client.iter().enumerate() {
        let _ = writeln!(
            out,
            "  client {client}: {} commits, {} aborts, {} repairs, {} expired locks met",
            t.commits, t.aborts, t.repairs, t.expired_seen
        );
    }
    for f in &s.faults {
        let p = &f.phases;
        let healed = |p: &chaos::run::replica::Phases| {
            let how = if p.degraded {
                "settled degraded (no spare left)"
            } else {
                "re-replicated"
            };
            format!("{how} after {}", ms(p.rereplicated_ms))
        };
        // What the fault's phases say, in the order they came; the
        // throughput around it follows, for every kind alike.
        let what = match f.kind {
            FaultKind::RestartMemnode => {
                let _ = writeln!(
                    out,
                    "  {} at {:.1} s: active again (an empty spare) after {}",
                    f.label(),
                    f.at_ms / 1e3,
                    ms(p.active_ms)
                );
                continue;
            }
            FaultKind::ClockSkew => {
                let _ = writeln!(out, "  {} at {:.1} s", f.label(), f.at_ms / 1e3);
                continue;
            }
            FaultKind::PartitionData => {
                let _ = writeln!(
                    out,
                    "  {} at {:.1} s: its data path cut, healed after {} (what it sent meanwhile delivered then); \
                     writes stopped {:.0} ms",
                    f.label(),
                    f.at_ms / 1e3,
                    ms(p.resumed_ms),
                    f.stopped_ms
                );
                continue;
            }
            FaultKind::LateDelivery => {
                let _ = writeln!(
                    out,
                    "  {} at {:.1} s: its data path held and its lease cut; expired after {}, forgotten after {}, \
                     an heir with its owner ids joined after {}, the held frames delivered after {}; writes stopped \
                     {:.0} ms",
                    f.label(),
                    f.at_ms / 1e3,
                    ms(p.expired_ms),
                    ms(p.forgotten_ms),
                    ms(p.heir_ms),
                    ms(p.resumed_ms),
                    f.stopped_ms
                );
                continue;
            }
            FaultKind::Partition if f.role.is_none() => {
                let _ = writeln!(
                    out,
                    "  {} at {:.1} s: cut off from the control plane, healed after {}; writes stopped {:.0} ms",
                    f.label(),
                    f.at_ms / 1e3,
                    ms(p.resumed_ms),
                    f.stopped_ms
                );
                continue;
            }
            FaultKind::WipeMemnode => format!(
                "killed and started again without its image; declared dead after {}, evicted after {}, \
                 serving after {} ({} from the dead decision), refilled (whole) after {}, \
                 active again (empty, a new image id) after {}",
                ms(p.detected_ms),
                ms(p.evicted_ms),
                ms(p.serving_ms),
                ms(f.dead_to_serving_ms),
                ms(p.rereplicated_ms),
                ms(p.active_ms)
            ),
            FaultKind::SnapshotRestore => format!(
                "snapshot saved, the node killed: dead after {}, serving after {}, whole after {}; \
                 restored into a fresh control plane after {}, whole there (every replica proven or replaced) after {}",
                ms(p.detected_ms),
                ms(p.serving_ms),
                ms(p.rereplicated_ms),
                ms(p.restored_ms),
                ms(p.restored_whole_ms)
            ),
            FaultKind::KillControlLeader => format!(
                "another member leads after {}, the killed one back after {}",
                ms(p.elected_ms),
                ms(p.member_back_ms)
            ),
            FaultKind::PauseControlLeader | FaultKind::TransferLeader => {
                let loss = if f.role.is_some() {
                    format!(
                        "the node killed first declared dead after {}, serving after {}, {}; ",
                        ms(p.detected_ms),
                        ms(p.serving_ms),
                        healed(p)
                    )
                } else {
                    String::new()
                };
                let paused = match p.resumed_ms {
                    Some(r) => format!(", resumed after {r:.0} ms"),
                    None => String::new(),
                };
                format!(
                    "{loss}the leader {} after {}, another member leads after {}{paused}, the old leader follows after {}",
                    if f.kind == FaultKind::PauseControlLeader {
                        "stopped"
                    } else {
                        "asked to hand over"
                    },
                    ms(p.leader_faulted_ms),
                    ms(p.elected_ms),
                    ms(p.member_back_ms)
                )
            }
            FaultKind::KillMemnode if f.role == Some(ReplicaRole::SoleCopy) => format!(
                "dead after {}, the single-copy index reported lost after {}{}",
                ms(p.detected_ms),
                ms(p.lost_ms),
                match p.evicted_ms {
                    Some(_) => format!(
                        ", the checked index's replica there evicted after {}, serving after {}, whole after {}",
                        ms(p.evicted_ms),
                        ms(p.serving_ms),
                        ms(p.rereplicated_ms)
                    ),
                    None => ", the checked index untouched (no replica there)".to_owned(),
                }
            ),
            FaultKind::PauseMemnode if p.detected_ms.is_none() => format!(
                "resumed after {}, never declared dead, active after {}",
                ms(p.resumed_ms),
                ms(p.active_ms)
            ),
            _ => format!(
                "dead after {}, evicted after {}, serving after {} ({} from the dead decision), {}{}",
                ms(p.detected_ms),
                ms(p.evicted_ms),
                ms(p.serving_ms),
                ms(f.dead_to_serving_ms),
                healed(p),
                match (p.resumed_ms, p.active_ms) {
                    (Some(r), a) => format!(", resumed (healed) after {r:.0} ms, active again after {}", ms(a)),
                    (None, _) => String::new(),
                }
            ),
        };
        let _ = writeln!(
            out,
            "  {} at {:.1} s: {what}; {} ops/s before, {} ops/s after; writes stopped {:.0} ms",
            f.label(),
            f.at_ms / 1e3,
            rate(f.ops_per_sec_before),
            rate(f.ops_per_sec_after),
            f.stopped_ms
        );
    }
    let c = &s.check;
    let l = &c.linearizability;
    let _ = writeln!(
        out,
        "  checks: {} error(s) reached the application ({} write(s) of unknown outcome, {} client(s) stopped by a \
         lost lease); history: {} ok, {} fail, {} info over {} keys, \
         {} lost, {} non-linearizable (two checkers, {} disagreement(s), {} too hard); \
         structure: {} violation(s); replicas: {} backup(s) against the primary, {} words and {} objects \
         compared, {} difference(s)",
        c.errors.len(),
        c.in_doubt,
        c.lease_lost.len(),
        l.ok,
        l.fail,
        l.info,
        l.keys_checked,
        c.lost,
        c.non_linearizable,
        l.disagreement_count,
        l.unknown_keys,
        c.structure_violations,
        c.replicas.replicas.saturating_sub(1),
        c.replicas.words_compared,
        c.replicas.objects,
        c.replicas.differences
    );
    let keys = l
        .non_linearizable
        .iter()
        .map(|k| format!("key {} is not linearizable", k.key));
    for v in c
        .errors
        .iter()
        .cloned()
        .chain(keys)
        .chain(c.structure.iter().cloned())
        .chain(c.replicas.listed.iter().cloned())
        .take(5)
    {
        let _ = writeln!(out, "    {v}");
    }
    for side in &s.sides {
        let _ = writeln!(
            out,
            "  side index {}{}",
            side.describe(),
            if side.is_ok() { "" } else { ": FAILED" }
        );
    }
    out
}

fn fate(f: &Fate) -> String {
    match f {
        Fate::Finished => "finished".into(),
        Fate::Killed => "killed".into(),
        Fate::Blocked => "BLOCKED".into(),
        Fate::Failed(e) => format!("FAILED ({e})"),
    }
}

fn rate(ops_per_sec: f64) -> String {
    format!("{:.0} k", ops_per_sec / 1e3)
}

/// One variant's lines of the report.
fn variant_report(s: &mut String, v: &VariantOutcome) {
    let verdict = match (v.passed, v.expect_violations) {
        (true, _) => "PASSED",
        (false, true) => "failed, as expected",
        (false, false) => "FAILED",
    };
    let _ = writeln!(
        s,
        "{}: {} ops, {} ops/s on average: {verdict}",
        v.variant,
        v.ops,
        rate(v.ops_per_sec)
    );
    for f in &v.faults {
        let recovery = f.recovery_ms.map_or_else(
            || "did not recover".to_owned(),
            |m| format!("recovered in {m:.0} ms"),
        );
        let _ = writeln!(
            s,
            "  {} {} at {:.1} s: {} ops/s before, {} ops/s after, {recovery}",
            f.kind,
            f.client,
            f.at_ms / 1e3,
            rate(f.ops_per_sec_before),
            rate(f.ops_per_sec_after)
        );
    }
    let clients: Vec<String> = v
        .clients
        .iter()
        .map(|c| {
            format!(
                "{}: {} ops, {}{}",
                c.client,
                c.ops,
                fate(&c.fate),
                if c.paused { " (paused)" } else { "" }
            )
        })
        .collect();
    let _ = writeln!(s, "  clients: {}", clients.join("; "));
    let repairs: u64 = v.clients.iter().map(|c| c.repairs).sum();
    let _ = writeln!(
        s,
        "  repairs: {repairs} lock(s) of other clients repaired by the clients themselves"
    );
    let c = &v.check;
    let h = &c.history;
    let _ = writeln!(
        s,
        "  checks: {} lock(s) of dead clients repaired; structure: {} violation(s) ({} lock(s) held); \
         {} acknowledged writes: {} missing, {} wrong value, {} unexpected key(s); {} unacknowledged write(s) of \
         dead clients found",
        c.repaired_locks,
        c.structure_violations,
        c.locks_held,
        h.acked_writes,
        h.missing,
        h.wrong_value,
        h.unexpected,
        h.unacked_values
    );
    for v in c.structure.iter().chain(&h.violations).take(5) {
        let _ = writeln!(s, "    {v}");
    }
    let r = &c.replicas;
    if r.replicas > 1 {
        let _ = writeln!(
            s,
            "  replicas: {} backup(s) against the primary, {} words and {} objects compared, {} difference(s)",
            r.replicas - 1,
            r.words_compared,
            r.objects,
            r.differences
        );
        for d in r.listed.iter().take(5) {
            let _ = writeln!(s, "    {d}");
        }
    } else {
        let _ = writeln!(s, "  replicas: one, nothing to compare");
    }
    if let Some(cp) = &v.control_plane {
        control_report(s, cp);
    }
}

/// The control plane's line: its memory nodes and what became of each
/// client process's lease.
fn control_report(s: &mut String, cp: &ControlOutcome) {
    let active = cp.memory_nodes.iter().filter(|m| m.state == "active").count();
    let mut processes: Vec<(u32, &LeaseSeen)> =
        cp.clients.iter().filter_map(|l| Some((l.client?, l))).collect();
    processes.sort_by_key(|(c, _)| *c);
    let mut leases: Vec<String> = Vec::new();
    for (c, l) in processes {
        let mut line = format!("client {c} (owner ids {}) {}", l.owners(), l.state);
        if let Some(ms) = l.expired_after_death_ms {
            line.push_str(&format!(" {:.2} s after it died", ms as f64 / 1e3));
        }
        if l.forgotten {
            line.push_str(", forgotten after repair");
        }
        leases.push(line);
    }
    let _ = writeln!(
        s,
        "  control plane: {} of {} memory node(s) active; {}",
        active,
        cp.memory_nodes.len(),
        leases.join("; ")
    );
}

/// The report printed at the end of a run.
pub fn report(summary: &Summary) -> String {
    let mut s = String::new();
    let e = &summary.experiment;
    let _ = writeln!(s, "\n{}, {:?}, seed {}", e.headline(), e.duration, e.seed);
    for v in &summary.variants {
        variant_report(&mut s, v);
    }
    let _ = writeln!(s, "{}", if summary.passed { "PASSED" } else { "FAILED" });
    s
}
