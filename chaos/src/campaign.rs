//! Campaigns (`kintsugi chaos campaign`): many seeded random fault schedules
//! drawn from the kinds an experiment file allows, each run on fresh
//! processes by the local-cluster runner (`run::replica`), each judged by
//! its checks (nothing acknowledged lost, every key's history
//! linearizable, the structure sound, the replicas equal).
//!
//! A schedule is a pure function of the file and the seed
//! ([`schedule`]), and the seed also seeds the workload: the one command a
//! failure prints reproduces it.
//!
//! Which kinds: the file's `[campaign] kinds`, or else the kinds of its
//! `[[faults]]`. Each schedule holds 1 to `faults_max` of them, at times
//! from 15% to 55% of the duration, their parameters drawn within the
//! rules [`Experiment::validate`] enforces (a pause-memnode from one to
//! five memory-node leases, so below and past detection; a clock skew
//! within the rTX drift unless `skew_beyond_drift`; a wipe-memnode of the
//! primary or a backup, the seed's coin deciding).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::experiment::{
    Experiment, ExperimentError, Fault, FaultKind, PartitionTarget, ReplicaRole, LEADER_PAUSE_MIN,
};
use crate::run::{replica, Options, RunError, Sabotage};

/// Most faults one schedule holds unless the file says otherwise.
pub const FAULTS_PER_SCHEDULE_DEFAULT: usize = 2;
/// Most faults one schedule may hold: each is watched until its phases
/// end, and a run must stay seconds long.
pub const FAULTS_PER_SCHEDULE_MAX: usize = 6;
/// Most seeds one campaign runs: each is a cluster brought up and down.
pub const SEEDS_MAX: u64 = 100_000;
/// Draws of a schedule before the campaign gives up on a seed: a draw the
/// rules refuse (a second leader kill while the first is down) is drawn
/// again.
const DRAWS_MAX: usize = 64;

/// The `[campaign]` section of an experiment file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CampaignSpec {
    /// Fault kinds schedules are drawn from (default: the file's faults').
    #[serde(default)]
    pub kinds: Vec<FaultKind>,
    /// Most faults per schedule.
    #[serde(default = "faults_default")]
    pub faults_max: usize,
    /// Draw clock skews past the rTX drift (what breaks there is reported,
    /// not expected to pass).
    #[serde(default)]
    pub skew_beyond_drift: bool,
}

fn faults_default() -> usize {
    FAULTS_PER_SCHEDULE_DEFAULT
}

impl Default for CampaignSpec {
    fn default() -> Self {
        CampaignSpec {
            kinds: Vec::new(),
            faults_max: FAULTS_PER_SCHEDULE_DEFAULT,
            skew_beyond_drift: false,
        }
    }
}

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct CampaignOptions {
    /// The `kintsugi` binary.
    pub exe: PathBuf,
    /// Each seed's outputs go to `out/seed-N`.
    pub out: PathBuf,
    /// The first seed.
    pub first_seed: u64,
    /// How many seeds, from the first.
    pub seeds: u64,
    /// A defect put in on purpose (the campaign must then fail).
    pub sabotage: Option<Sabotage>,
}

/// One seed's run.
#[derive(Clone, Debug, Serialize)]
pub struct CampaignRow {
    /// The seed.
    pub seed: u64,
    /// The faults as injected (or as scheduled, if the run did not finish).
    pub faults: Vec<String>,
    /// Operations completed ok.
    pub ops: u64,
    /// Keys that lost an acknowledged write.
    pub lost: u64,
    /// Keys whose history has no linearization.
    pub non_linearizable: u64,
    /// From the first fault to the cluster whole again after the last,
    /// ms (the slowest fault's last phase).
    pub recovered_ms: f64,
    /// Writes stopped per fault, ms: the longest stretch with no
    /// operation completed, from the fault to a second after its last
    /// phase (none for a run that did not finish).
    pub stopped_ms: Vec<f64>,
    /// Wall time of the run, s.
    pub run_s: f64,
    /// Whether every check held.
    pub passed: bool,
    /// Why it failed, in a line.
    pub why: Option<String>,
}

/// Everything a campaign did.
#[derive(Clone, Debug, Serialize)]
pub struct CampaignReport {
    /// The experiment's name.
    pub name: String,
    /// The kinds schedules were drawn from.
    pub kinds: Vec<FaultKind>,
    /// The sabotage, if any.
    pub sabotage: Option<Sabotage>,
    /// One row per seed.
    pub rows: Vec<CampaignRow>,
}

impl CampaignReport {
    /// Seeds that failed.
    pub fn failed(&self) -> impl Iterator<Item = &CampaignRow> {
        self.rows.iter().filter(|r| !r.passed)
    }
}

/// splitmix64: a few lines, seeded, enough to draw schedules.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 0
    }
}

/// The kinds `base` allows a campaign to draw.
pub fn kinds(base: &Experiment) -> Vec<FaultKind> {
    let listed = base
        .campaign
        .as_ref()
        .map(|c| c.kinds.as_slice())
        .unwrap_or_default();
    let from = if listed.is_empty() {
        base.faults.iter().map(|f| f.kind).collect()
    } else {
        listed.to_vec()
    };
    // Each once, in the order first listed.
    let mut kinds = Vec::new();
    for k in from {
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    kinds
}

/// The experiment seed `seed` runs: `base` with its faults replaced by a
/// schedule drawn from `kinds(base)`, and its seed set. Pure: the same file
/// and seed give the same schedule.
pub fn schedule(base: &Experiment, seed: u64) -> Result<Experiment, ExperimentError> {
    let spec = base.campaign.clone().unwrap_or_default();
    let kinds = kinds(base);
    if kinds.is_empty() {
        return Err(ExperimentError::Invalid {
            field: "campaign.kinds".into(),
            rule: "a campaign needs fault kinds: list them, or give the file faults".into(),
        });
    }
    if let Some(k) = kinds.iter().find(|k| !k.on_memnode()) {
        return Err(ExperimentError::Invalid {
            field: "campaign.kinds".into(),
            rule: format!("{k} does not run on the local-cluster runner campaigns use"),
        });
    }
    if spec.faults_max == 0 || spec.faults_max > FAULTS_PER_SCHEDULE_MAX {
        return Err(ExperimentError::Invalid {
            field: "campaign.faults_max".into(),
            rule: format!("1 to {FAULTS_PER_SCHEDULE_MAX}"),
        });
    }
    let mut draw = Draw(seed ^ 0x6B69_6E74_7375_6769);
    let mut last = None;
    for _ in 0..DRAWS_MAX {
        let mut e = base.clone();
        e.seed = seed;
        e.faults = draw_faults(base, &spec, &kinds, &mut draw);
        match e.validate() {
            Ok(()) => return Ok(e),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or(ExperimentError::Invalid {
        field: "campaign".into(),
        rule: "no schedule could be drawn".into(),
    }))
}

fn draw_faults(base: &Experiment, spec: &CampaignSpec, kinds: &[FaultKind], draw: &mut Draw) -> Vec<Fault> {
    let d = base.duration.as_millis() as u64;
    let lease = base.cluster.memnode_lease.as_millis() as u64;
    let drift = txn::TxConfig::default().drift.as_millis() as u64;
    let n = draw.range(1, spec.faults_max as u64) as usize;
    let mut at: Vec<u64> = (0..n).map(|_| draw.range(d * 15 / 100, d * 55 / 100)).collect();
    at.sort_unstable();
    let mut faults = Vec::new();
    let mut down = 0;
    // A mixed-rf cluster's first kill takes its single copy: every seed
    // loses that region (the experiment's point); later kills are drawn.
    let mut sole_left = base.cluster.side_replicas.contains(&1);
    for t in at {
        let kind = draw.pick(kinds);
        let fault = |kind| Fault {
            kind,
            client: 0,
            role: None,
            at: Duration::from_millis(t),
            pause: None,
            skew_ms: None,
            target: None,
            members: Vec::new(),
        };
        let role = if draw.coin() {
            ReplicaRole::Primary
        } else {
            ReplicaRole::Backup
        };
        let until_end = d.saturating_sub(t + 1);
        let f = match kind {
            FaultKind::KillMemnode | FaultKind::RestartMemnode if down == 0 => {
                down += 1;
                let mut f = fault(FaultKind::KillMemnode);
                f.role = Some(if std::mem::take(&mut sole_left) {
                    ReplicaRole::SoleCopy
                } else {
                    role
                });
                f
            }
            FaultKind::KillMemnode => {
                down += 1;
                Fault {
                    role: Some(if std::mem::take(&mut sole_left) {
                        ReplicaRole::SoleCopy
                    } else {
                        role
                    }),
                    ..fault(kind)
                }
            }
            FaultKind::RestartMemnode => {
                down -= 1;
                fault(kind)
            }
            FaultKind::WipeMemnode => Fault {
                role: Some(role),
                ..fault(kind)
            },
            FaultKind::SnapshotRestore => {
                down += 1;
                Fault {
                    role: Some(role),
                    ..fault(kind)
                }
            }
            FaultKind::PauseMemnode => Fault {
                role: Some(role),
                pause: Some(Duration::from_millis(draw.range(lease, 5 * lease).min(until_end))),
                ..fault(kind)
            },
            FaultKind::KillControlLeader => Fault {
                pause: draw
                    .coin()
                    .then(|| Duration::from_millis(draw.range(200, 1000).min(until_end))),
                ..fault(kind)
            },
            // Mostly while recovery is at work on a node of `role` killed
            // first (the fault's point: a deposed coordinator mid-step), a
            // quarter of the time on a quiet cluster.
            FaultKind::PauseControlLeader | FaultKind::TransferLeader => {
                let role = (draw.coin() || draw.coin()).then_some(role);
                if role.is_some() {
                    down += 1;
                }
                let least = LEADER_PAUSE_MIN.as_millis() as u64;
                Fault {
                    role,
                    pause: (kind == FaultKind::PauseControlLeader)
                        .then(|| Duration::from_millis(draw.range(least, least * 3 / 2).min(until_end))),
                    ..fault(kind)
                }
            }
            FaultKind::ClockSkew => {
                let most = if spec.skew_beyond_drift {
                    20 * drift
                } else {
                    drift.saturating_sub(1)
                };
                let skew = draw.range(1, most.max(1)) as i64;
                Fault {
                    client: draw.range(0, u64::from(base.cluster.clients) - 1) as u32,
                    skew_ms: Some(if draw.coin() { skew } else { -skew }),
                    pause: draw
                        .coin()
                        .then(|| Duration::from_millis(draw.range(100, 1000).min(until_end))),
                    ..fault(kind)
                }
            }
            FaultKind::Partition => {
                let members = if draw.coin() {
                    Vec::new()
                } else {
                    vec![draw.range(1, u64::from(crate::experiment::CONTROL_MEMBERS)) as u32]
                };
                if draw.coin() {
                    Fault {
                        role: Some(role),
                        target: Some(PartitionTarget::Memnode),
                        members,
                        pause: Some(Duration::from_millis(draw.range(lease, 5 * lease).min(until_end))),
                        ..fault(kind)
                    }
                } else {
                    let client_lease = base.cluster.client_lease.as_millis() as u64;
                    Fault {
                        client: draw.range(0, u64::from(base.cluster.clients) - 1) as u32,
                        target: Some(PartitionTarget::Client),
                        members,
                        pause: Some(Duration::from_millis(
                            draw.range(100, client_lease * 3 / 2).min(until_end),
                        )),
                        ..fault(kind)
                    }
                }
            }
            // From a blip to past the request deadline (batches called
            // lost, their frames delivered late), on every link of the
            // client's or one replica's.
            FaultKind::PartitionData => {
                let deadline = base.cluster.request_deadline.as_millis() as u64;
                Fault {
                    client: draw.range(0, u64::from(base.cluster.clients) - 1) as u32,
                    role: draw.coin().then_some(role),
                    pause: Some(Duration::from_millis(
                        draw.range(50, deadline * 2).min(until_end).max(1),
                    )),
                    ..fault(kind)
                }
            }
            FaultKind::LateDelivery => Fault {
                client: draw.range(0, u64::from(base.cluster.clients) - 1) as u32,
                ..fault(kind)
            },
            FaultKind::KillClient | FaultKind::PauseClient => fault(kind),
        };
        faults.push(f);
    }
    faults
}

/// Runs seeds `first_seed..first_seed + seeds` of `base`, calling
/// `progress` after each.
pub fn run(
    base: &Experiment,
    options: &CampaignOptions,
    mut progress: impl FnMut(&CampaignRow),
) -> Result<CampaignReport, RunError> {
    if options.seeds == 0 || options.seeds > SEEDS_MAX {
        return Err(RunError::Experiment(ExperimentError::Invalid {
            field: "--seeds".into(),
            rule: format!("1 to {SEEDS_MAX}"),
        }));
    }
    // Every seed's schedule drawn first: a file no schedule fits fails
    // before any cluster starts.
    let mut runs = Vec::new();
    for seed in options.first_seed..options.first_seed.saturating_add(options.seeds) {
        runs.push((seed, schedule(base, seed)?));
    }
    let mut rows = Vec::new();
    for (seed, e) in runs {
        let scheduled: Vec<String> = e.faults.iter().map(describe).collect();
        let started = Instant::now();
        let run_options = Options {
            exe: options.exe.clone(),
            out: options.out.join(format!("seed-{seed}")),
            seed: Some(seed),
            progress: false,
            sabotage: options.sabotage,
        };
        let row = match replica::run(e, &run_options) {
            Ok(s) => CampaignRow {
                seed,
                faults: s.faults.iter().map(|f| f.label()).collect(),
                ops: s.ops,
                lost: s.check.lost,
                non_linearizable: s.check.non_linearizable,
                recovered_ms: s.faults.iter().map(|f| f.recovered_ms()).fold(0.0, f64::max),
                stopped_ms: s.faults.iter().map(|f| f.stopped_ms).collect(),
                run_s: started.elapsed().as_secs_f64(),
                passed: s.passed,
                why: (!s.passed).then(|| s.why()),
            },
            Err(err) => CampaignRow {
                seed,
                faults: scheduled,
                ops: 0,
                lost: 0,
                non_linearizable: 0,
                recovered_ms: 0.0,
                stopped_ms: Vec::new(),
                run_s: started.elapsed().as_secs_f64(),
                passed: false,
                why: Some(err.to_string()),
            },
        };
        if row.passed {
            prune(&run_options.out);
        }
        progress(&row);
        rows.push(row);
    }
    Ok(CampaignReport {
        name: base.name.clone(),
        kinds: kinds(base),
        sabotage: options.sabotage,
        rows,
    })
}

/// Removes from a passing seed's outputs what only a failure needs: the
/// memory nodes' images (sparse, but tens of MiB each once written) and the
/// history (every op: megabytes). Its summary, timeline and logs stay. A
/// hundred seeds would otherwise hold gigabytes.
fn prune(out: &std::path::Path) {
    let _ = std::fs::remove_file(out.join("history.jsonl"));
    let cluster = out.join("rtx").join("cluster");
    let Ok(entries) = std::fs::read_dir(&cluster) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let image = path.extension().is_some_and(|x| x == "img");
        // The members' Raft state is kept: small, and what a reader of the
        // logs may want.
        if image {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// A fault as scheduled, in a few words.
pub fn describe(f: &Fault) -> String {
    let mut s = format!("{} @{}ms", f.kind, f.at.as_millis());
    if let Some(r) = f.role {
        s += &format!(" {r}");
    }
    if let Some(k) = f.skew_ms {
        s += &format!(" client {} {k:+}ms", f.client);
    }
    if matches!(f.kind, FaultKind::PartitionData | FaultKind::LateDelivery) {
        s += &format!(" client {}", f.client);
    }
    if let Some(t) = f.target {
        let whom = match t {
            PartitionTarget::Memnode => "memnode".to_owned(),
            PartitionTarget::Client => format!("client {}", f.client),
        };
        let from = if f.members.is_empty() {
            "all members".to_owned()
        } else {
            format!("member(s) {:?}", f.members)
        };
        s += &format!(" {whom} from {from}");
    }
    if let Some(p) = f.pause {
        s += &format!(" for {}ms", p.as_millis());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Experiment {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/experiments/campaign-btree.toml");
        Experiment::from_file(&path).unwrap()
    }

    #[test]
    fn a_seed_draws_one_valid_schedule_of_the_kinds_asked_for() {
        let mut base = base();
        let all = kinds(&base);
        assert_eq!(all.len(), 6, "{all:?}");
        for kind in all.iter().copied() {
            base.campaign.as_mut().unwrap().kinds = vec![kind];
            let mut seen = std::collections::BTreeSet::new();
            for seed in 1..=200 {
                let e = schedule(&base, seed).unwrap();
                assert_eq!(
                    e,
                    schedule(&base, seed).unwrap(),
                    "seed {seed}: not a function of the seed"
                );
                e.validate().unwrap();
                assert_eq!(e.seed, seed);
                assert!((1..=FAULTS_PER_SCHEDULE_DEFAULT).contains(&e.faults.len()));
                for f in &e.faults {
                    // A restart drawn with no node down is preceded by the kill it needs.
                    let allowed = f.kind == kind
                        || (kind == FaultKind::RestartMemnode && f.kind == FaultKind::KillMemnode);
                    assert!(allowed, "seed {seed}: {kind} drew {}", describe(f));
                }
                seen.insert(e.faults.iter().map(describe).collect::<Vec<_>>().join(", "));
            }
            assert!(
                seen.len() > 20,
                "{kind}: only {} distinct schedules in 200 seeds",
                seen.len()
            );
        }
    }

    #[test]
    fn wipes_hit_the_primary_and_backups_and_need_tcp() {
        let mut base = base();
        base.campaign.as_mut().unwrap().kinds = vec![FaultKind::WipeMemnode];
        let mut roles = std::collections::BTreeSet::new();
        for seed in 1..=100 {
            let e = schedule(&base, seed).unwrap();
            assert_eq!(e, schedule(&base, seed).unwrap(), "seed {seed}");
            for f in &e.faults {
                assert_eq!(f.kind, FaultKind::WipeMemnode, "seed {seed}: {}", describe(f));
                assert_eq!(f.pause, None);
                roles.insert(f.role.unwrap().to_string());
            }
        }
        assert_eq!(roles.len(), 2, "both roles drawn: {roles:?}");
        // Shm clients keep their mapping of the old image: refused, with why.
        base.cluster.transport = crate::experiment::TransportKind::Shm;
        let e = schedule(&base, 1).unwrap_err().to_string();
        assert!(e.contains("cluster.transport") && e.contains("tcp only"), "{e}");
    }

    #[test]
    fn leader_faults_mostly_follow_a_kill_and_pause_past_an_election() {
        let mut base = base();
        for kind in [FaultKind::PauseControlLeader, FaultKind::TransferLeader] {
            base.campaign.as_mut().unwrap().kinds = vec![kind];
            let (mut roles, mut quiet) = (std::collections::BTreeSet::new(), 0);
            for seed in 1..=100 {
                let e = schedule(&base, seed).unwrap();
                assert_eq!(e, schedule(&base, seed).unwrap(), "seed {seed}");
                for f in &e.faults {
                    assert_eq!(f.kind, kind, "seed {seed}: {}", describe(f));
                    match f.role {
                        Some(r) => {
                            roles.insert(r.to_string());
                        }
                        None => quiet += 1,
                    }
                    match kind {
                        FaultKind::PauseControlLeader => {
                            assert!(
                                f.pause.is_some_and(|p| p >= LEADER_PAUSE_MIN),
                                "seed {seed}: {}",
                                describe(f)
                            );
                        }
                        _ => assert_eq!(f.pause, None, "seed {seed}"),
                    }
                }
            }
            assert_eq!(roles.len(), 2, "{kind}: both roles drawn: {roles:?}");
            assert!(quiet > 0, "{kind}: never on a quiet cluster");
        }
    }

    #[test]
    fn a_mixed_rf_seed_kills_the_single_copy_first() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/experiments/mixed-rf-btree.toml");
        let base = Experiment::from_file(&path).unwrap();
        let mut second = std::collections::BTreeSet::new();
        for seed in 1..=100 {
            let e = schedule(&base, seed).unwrap();
            assert_eq!(e.faults[0].role, Some(ReplicaRole::SoleCopy), "seed {seed}");
            for f in &e.faults[1..] {
                assert_eq!(f.kind, FaultKind::KillMemnode, "seed {seed}");
                second.insert(f.role.unwrap().to_string());
            }
        }
        assert_eq!(
            second.len(),
            2,
            "later kills hit the primary and a backup: {second:?}"
        );
    }

    #[test]
    fn skews_stay_within_the_drift_unless_asked_beyond() {
        let mut base = base();
        let drift = txn::TxConfig::default().drift.as_millis() as i64;
        let spec = base.campaign.as_mut().unwrap();
        spec.kinds = vec![FaultKind::ClockSkew];
        let most = |base: &Experiment| {
            (1..=300)
                .flat_map(|seed| schedule(base, seed).unwrap().faults)
                .filter_map(|f| f.skew_ms)
                .map(i64::abs)
                .max()
                .unwrap()
        };
        assert!(most(&base) < drift);
        base.campaign.as_mut().unwrap().skew_beyond_drift = true;
        assert!(most(&base) > drift);
    }

    #[test]
    fn a_campaign_needs_kinds_that_run_on_a_local_cluster() {
        let mut base = base();
        base.campaign = None;
        // The file's own fault (pause-memnode) is the default kind.
        assert_eq!(kinds(&base), vec![FaultKind::PauseMemnode]);
        base.faults.clear();
        let e = schedule(&base, 1).unwrap_err().to_string();
        assert!(e.contains("campaign.kinds"), "{e}");
        base.campaign = Some(CampaignSpec {
            kinds: vec![FaultKind::KillClient],
            ..CampaignSpec::default()
        });
        let e = schedule(&base, 1).unwrap_err().to_string();
        assert!(e.contains("kill-client"), "{e}");
        base.campaign = Some(CampaignSpec {
            kinds: vec![FaultKind::PauseMemnode],
            faults_max: 0,
            ..CampaignSpec::default()
        });
        let e = schedule(&base, 1).unwrap_err().to_string();
        assert!(e.contains("faults_max"), "{e}");
    }
}
