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

use std::sync::Arc;

use ::cluster::load::Firsts;
use harness::local::LocalClusterSpec;

use crate::error::Context;
use crate::local_load::{LoadShape, LocalLoad};
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
    let shape = LoadShape {
        tasks: plan.tasks,
        keys_per_task: plan.keys_per_task,
        replicas: plan.replicas,
        region_bytes: plan.region_bytes,
    };
    let firsts = Arc::new(Firsts::default());
    let run = LocalLoad::start(
        "bench promote",
        &plan.exe,
        &spec,
        &shape,
        "promoter",
        firsts.clone(),
    )
    .await?;
    let promoter = &run.operator;
    let region = promoter
        .map()
        .regions()
        .first()
        .map(|r| r.id)
        .ok_or_else(|| crate::msg!("the index's region is not in the map"))?;
    let mut rounds = Vec::new();
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
    let clients = run.finish("bench promote").await?;
    Ok(PromoteReport {
        rounds,
        clients,
        plan: plan.clone(),
    })
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
