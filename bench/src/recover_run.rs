//! `kintsugi bench recover`: memory nodes killed under YCSB A on a local
//! cluster of real processes (three control-plane members running the
//! recovery coordinator on their leader, the region's replicas and one
//! spare memory node), each kill followed by the killed node's restart.
//!
//! Each round SIGKILLs the node of the region's primary or first backup
//! and watches the control plane (one status read per [`POLL`]) for each
//! phase, timed from the kill: the node declared dead, its replica
//! evicted (a primary's backup promoted), the region serving again, a new
//! replica placed on the spare and allocated there, the copy joined to
//! the replicas clients write, and the region whole again. The copy's
//! time is from the new replica allocated to its join (the coordinator
//! copies between the two, so the rate is a lower bound); the
//! write-blocking window is from the join to whole (the catch-up, while
//! the region is out of the clients' map). Then the killed node is started
//! again and waited for until it is an active spare, for the next round.
//! At the end every acknowledged write is read back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::cluster::Cluster;
use control_plane::state::{MemNodeState, Region};
use harness::local::{LocalCluster, LocalClusterSpec};

use crate::error::Context;
use crate::local_load::{LoadShape, LocalLoad, INDEX};
use crate::recover_plan::RecoverPlan;
use crate::recover_report::{Phase, RecoverReport, Round};
use crate::{bail, Result};

/// How often the control plane is read while a round's phases are
/// awaited: each read is one loopback HTTP call, so phases are known to
/// within about this plus a call.
pub const POLL: Duration = Duration::from_millis(1);

/// Longest wait for a round to be whole again, on top of time for the
/// copy and the catch-up at 16 MiB/s: a round that reaches it has a
/// recovery that does not finish.
pub const ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `plan` (outside any runtime: it makes its own).
pub fn run(plan: &RecoverPlan) -> Result<RecoverReport> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.tasks.max(2))
        .enable_all()
        .build()?;
    rt.block_on(run_async(plan))
}

async fn run_async(plan: &RecoverPlan) -> Result<RecoverReport> {
    // The images live in the cluster's directory (`--persist`, so that a
    // restarted node reopens the same file its clients mapped): on tmpfs
    // where there is one, so that a copy measures memory, not a disk.
    let dev_shm = std::path::Path::new("/dev/shm");
    let base = if dev_shm.is_dir() {
        dev_shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("kintsugi-bench-recover-")
        .tempdir_in(base)?;
    let path = dir.path().to_owned();
    match measure(plan, &path).await {
        Ok(report) => Ok(report),
        Err(e) => {
            // The members' and nodes' logs say why; the images only take
            // memory.
            let kept = dir.keep();
            for entry in std::fs::read_dir(&kept).into_iter().flatten().flatten() {
                if entry.path().extension().is_some_and(|x| x == "img") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            Err(crate::msg!(
                "{e}; the cluster's logs are kept in {}",
                kept.display()
            ))
        }
    }
}

async fn measure(plan: &RecoverPlan, dir: &std::path::Path) -> Result<RecoverReport> {
    let nodes = usize::from(plan.replicas) + 1;
    let text = format!(
        "dir = {:?}\n[memory]\nnodes = {nodes}\ncapacity = \"{cap}\"\ntransport = \"{t}\"\npersist = true\n\
         [indexes]\nreplicas = {r}\n[timing]\nmemnode_lease = \"{lease}ms\"\n",
        dir,
        t = plan.transport,
        r = plan.replicas,
        // One region per node, and room for the node's own header.
        cap = plan.region_bytes + (64 << 20),
        lease = plan.memnode_lease.as_millis(),
    );
    let spec = LocalClusterSpec::parse(&text, "bench recover").context("the cluster")?;
    let shape = LoadShape {
        tasks: plan.tasks,
        keys_per_task: plan.keys_per_task,
        replicas: plan.replicas,
        region_bytes: plan.region_bytes,
    };
    let mut run = LocalLoad::start(
        "bench recover",
        &plan.exe,
        &spec,
        &shape,
        "observer",
        Arc::default(),
    )
    .await?;
    let mut rounds = Vec::new();
    for i in 0..plan.rounds {
        tokio::time::sleep(plan.between).await;
        let primary = plan.victim.primary_in_round(i);
        let round = kill_and_watch(plan, &mut run.local, &run.operator, primary)
            .await
            .with_context(|| format!("round {}", i + 1))?;
        eprintln!("bench recover: round {}/{}: {}", i + 1, plan.rounds, round.line());
        rounds.push(round);
    }
    let clients = run.finish("bench recover").await?;
    Ok(RecoverReport {
        rounds,
        clients,
        plan: plan.clone(),
    })
}

/// Kills the node of the index's primary (or first backup), watches the
/// phases until the region is whole again, then restarts the node and
/// waits until it is an active spare.
async fn kill_and_watch(
    plan: &RecoverPlan,
    local: &mut LocalCluster,
    observer: &Cluster,
    primary: bool,
) -> Result<Round> {
    // Whole before the kill: the last round's restarted node taken in as
    // a spare may still move the map.
    let waited = Instant::now();
    let (status, before) = loop {
        let status = observer.status().await.context("reading the status")?;
        let r = region_of(&status)?;
        if r.whole() {
            break (status, r);
        }
        if waited.elapsed() > ROUND_TIMEOUT {
            bail!(
                "region {} not whole before the kill within {ROUND_TIMEOUT:?}",
                r.id
            );
        }
        tokio::time::sleep(POLL).await;
    };
    let dead = if primary {
        before.primary()
    } else {
        before.replicas[1].node
    };
    let process = local
        .process_of(dead, &status.memnodes)
        .context("finding the node's process")?;
    let killed = if plan.wipe {
        local.wipe_memnode(process).context("wiping the memory node")?
    } else {
        local
            .memnode(process)
            .ok_or_else(|| crate::msg!("no memory node process {process}"))?
            .kill()
            .context("killing the memory node")?
    };
    let timeout = ROUND_TIMEOUT + Duration::from_secs(2 * plan.region_bytes / (16 << 20));
    let mut p = Phases::default();
    loop {
        let status = observer.status().await.context("reading the status")?;
        let at = killed.elapsed();
        let r = region_of(&status)?;
        let node_dead = status
            .memnodes
            .iter()
            .any(|n| n.id == dead && n.state == MemNodeState::Dead);
        p.note(Phase::Detected, node_dead, at);
        let evicted = !r.on(dead);
        p.note(Phase::Evicted, evicted, at);
        p.note(Phase::Serving, evicted && r.usable(), at);
        let new = r.syncing.first().map(|l| l.node);
        p.note(Phase::Added, evicted && new.is_some(), at);
        p.note(Phase::Allocated, new.is_some_and(|n| !r.pending.contains(&n)), at);
        p.note(Phase::Joined, evicted && r.catching_up.is_some(), at);
        if evicted && r.whole() {
            p.note(Phase::Whole, true, at);
            break;
        }
        if at > timeout {
            let seen: Vec<String> = Phase::ALL
                .iter()
                .filter(|&&ph| p.0[ph as usize].is_some())
                .map(|ph| format!("{ph:?}"))
                .collect();
            let nodes: Vec<String> = status
                .memnodes
                .iter()
                .map(|n| format!("{}: {:?}", n.id, n.state))
                .collect();
            bail!(
                "region {} not whole again {timeout:?} after the kill of node {dead} \
                 (phases seen: {seen:?}; {}; memory nodes {nodes:?})",
                r.id,
                r.summary(),
            );
        }
        tokio::time::sleep(POLL).await;
    }
    // A wiped node runs already: empty, under another image id.
    if !plan.wipe {
        local
            .restart_memnode(process)
            .context("restarting the killed node")?;
    }
    loop {
        let status = observer.status().await.context("reading the status")?;
        let active = status
            .memnodes
            .iter()
            .any(|n| n.id == dead && n.state == MemNodeState::Active);
        if active {
            break;
        }
        if killed.elapsed() > timeout * 2 {
            bail!("node {dead} not active again after its restart");
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(Round {
        wiped: plan.wipe,
        ..Round::new(dead, primary, plan.region_bytes, &p.0)
    })
}

/// When each phase was first seen, from the kill. A phase shorter than a
/// poll may be missed: it stays unknown rather than guessed.
#[derive(Default)]
struct Phases([Option<Duration>; Phase::ALL.len()]);

impl Phases {
    /// Notes `phase` at `at` if it holds and was not seen before.
    fn note(&mut self, phase: Phase, holds: bool, at: Duration) {
        if holds {
            self.0[phase as usize].get_or_insert(at);
        }
    }
}

fn region_of(status: &control_plane::api::Status) -> Result<Region> {
    let index = status
        .indexes
        .iter()
        .find(|x| x.name == INDEX)
        .ok_or_else(|| crate::msg!("no index {INDEX:?}"))?;
    status
        .regions
        .iter()
        .find(|r| r.id == index.region)
        .cloned()
        .ok_or_else(|| crate::msg!("no region {}", index.region))
}
