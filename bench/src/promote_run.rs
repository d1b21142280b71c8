//! `kintsugi bench promote`: planned promotions of an rtx B+tree's region
//! under YCSB A, on a local cluster of real processes (control-plane
//! members and memory nodes placed by them), through the client library.
//!
//! Each round promotes the next backup and measures, from the moment the
//! promotion's commit is known, how long until every replica's node fenced,
//! the new primary was rebuilt and every log finished, the region was
//! published again, and the first client operation completed at the
//! published epoch (the figure: how long the clients were without the
//! region). At the end every acknowledged write is checked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ::cluster::load::{self, Firsts, LoadSpec};
use ::cluster::{Cluster, ClusterOptions, IndexKind};
use harness::local::{LocalCluster, LocalClusterSpec};

use crate::error::Context;
use crate::promote_plan::PromotePlan;
use crate::promote_report::{PromoteReport, Round};
use crate::{bail, Result};

/// Runs `plan` (outside any runtime: it makes its own).
pub fn run(plan: &PromotePlan) -> Result<PromoteReport> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.tasks.max(2))
        .enable_all()
        .build()?;
    rt.block_on(run_async(plan))
}

async fn run_async(plan: &PromotePlan) -> Result<PromoteReport> {
    let dir = tempfile::Builder::new()
        .prefix("kintsugi-bench-promote-")
        .tempdir()?;
    let text = format!(
        "dir = {:?}\n[memory]\nnodes = {n}\ncapacity = \"{cap}\"\ntransport = \"{t}\"\n[indexes]\nreplicas = {n}\n",
        dir.path(),
        t = plan.transport,
        n = plan.replicas,
        cap = plan.region_bytes * 2,
    );
    let spec = LocalClusterSpec::parse(&text, "bench promote").context("the cluster")?;
    eprintln!(
        "bench promote: starting a local cluster ({} memory nodes)",
        plan.replicas
    );
    let local = LocalCluster::up(&plan.exe, &spec, |s| eprintln!("bench promote: {s}"))
        .await
        .context("starting the local cluster")?;
    let file = local.file.clone();
    let options = |name: &str, owner_ids: usize| ClusterOptions {
        name: name.into(),
        owner_ids: owner_ids as u16,
        replicas: plan.replicas,
        index_bytes: plan.region_bytes,
        ..ClusterOptions::default()
    };
    let clients = Arc::new(
        Cluster::connect_with(&file.control, &file.client_token, options("load", plan.tasks + 1))
            .await
            .context("connecting the load")?,
    );
    let promoter = Cluster::connect_with(&file.control, &file.token, options("promoter", 1))
        .await
        .context("connecting the promoter")?;
    let spec = LoadSpec {
        index: "bench".into(),
        kind: IndexKind::Btree,
        tasks: plan.tasks,
        keys_per_task: plan.keys_per_task,
        duration: std::time::Duration::from_secs(24 * 3600),
        seed: 1,
    };
    preload(&clients, &spec).await?;
    let (stop, ops, firsts) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(Firsts::default()),
    );
    let running = {
        let (c, s, stop, ops, firsts) = (
            clients.clone(),
            spec.clone(),
            stop.clone(),
            ops.clone(),
            firsts.clone(),
        );
        tokio::spawn(async move { load::run_observed(&c, &s, stop, ops, firsts).await })
    };
    let region = promoter
        .map()
        .regions()
        .first()
        .map(|r| r.id)
        .ok_or_else(|| crate::msg!("the index's region is not in the map"))?;
    let mut rounds = Vec::new();
    let started = Instant::now();
    for i in 0..plan.rounds {
        tokio::time::sleep(plan.between).await;
        let map = promoter.map();
        let replicas: Vec<u16> = map
            .region(region)
            .map(|r| r.replicas.iter().map(|l| l.node).collect())
            .unwrap_or_default();
        let Some(&to) = replicas.get(1) else {
            bail!("region {region} has no backup to promote");
        };
        let p = promoter.promote(region, to).await.context("promoting")?;
        let served = loop {
            if let Some(t) = firsts.first_at(p.published_epoch) {
                break t;
            }
            if p.committed_at.elapsed() > ::cluster::PROMOTE_TIMEOUT {
                bail!(
                    "no client operation completed at epoch {} within {:?}",
                    p.published_epoch,
                    ::cluster::PROMOTE_TIMEOUT
                );
            }
            tokio::time::sleep(std::time::Duration::from_micros(200)).await;
        };
        eprintln!(
            "bench promote: round {}/{}: node {to} primary; served again after {:.2} ms",
            i + 1,
            plan.rounds,
            served.saturating_duration_since(p.committed_at).as_secs_f64() * 1e3
        );
        rounds.push(Round {
            primary: to,
            fenced_ms: ms(p.fenced),
            restored_ms: ms(p.restored),
            published_ms: ms(p.published),
            served_ms: ms(served.saturating_duration_since(p.committed_at)),
            lock_words: p.lock_words,
        });
    }
    stop.store(true, Ordering::Relaxed);
    let report = running
        .await
        .map_err(|e| crate::msg!("the load failed: {e}"))?
        .context("the load")?;
    let elapsed = started.elapsed();
    let lost = load::lost(&clients, &spec.index, spec.kind, &report.acked)
        .await
        .context("checking")?;
    promoter.close().await.context("closing the promoter")?;
    // Before the cluster goes: a client outliving it would warn that it
    // cannot watch the map.
    drop(clients);
    drop(local);
    Ok(PromoteReport {
        rounds,
        ops: report.ops,
        ops_per_s: report.ops as f64 / elapsed.as_secs_f64(),
        writes: report.writes,
        retries: report.retries,
        errors: report.errors,
        lost: lost.len() as u64,
        plan: plan.clone(),
    })
}

/// Writes every key once, so that the promotions rebuild a full tree.
async fn preload(c: &Cluster, spec: &LoadSpec) -> Result<()> {
    let mut h = load::Handle::open(c, &spec.index, spec.kind)
        .await
        .context("opening the index")?;
    let keys = spec.tasks as u64 * spec.keys_per_task;
    eprintln!("bench promote: loading {keys} keys");
    for k in 1..=keys {
        h.put(k, 1).await.context("loading")?;
    }
    Ok(())
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
