//! Phase 1: round trips through the fabric.
//!
//! local and shm: one OS thread per `--threads`, each with its own forked
//! [`Client`]; verbs complete inline, so each thread drives its whole loop
//! inside one `block_on` of a current-thread runtime and no await ever
//! suspends. tcp and rdma: each thread has its own runtime and its own
//! connections (`harness::Memory::client`), and runs `--outstanding` tasks on
//! them, each with a fork of the thread's client, so the tcp transport
//! pipelines K batches (rdma runs one: a queue pair per node and transport).

use std::time::Instant;

use crate::error::Context;
use fabric::{Batch, Client, GlobalAddr, RegionId, Stats, VerbHandle};
use tokio::task::JoinSet;

use super::measure::{self, on_threads, Run, WARMUP_ROUND_TRIPS};
use super::plan::{OpArg, Plan};
use super::workload::Workload;

/// One client's loop state: a reused batch and the values its CASes expect.
pub struct FabricWorker {
    client: Client,
    batch: Batch,
    work: Workload,
    /// The first cell of this client's slot.
    base: GlobalAddr,
    handles: Vec<VerbHandle>,
    /// Per cell: the value the next CAS expects (the last one it wrote).
    expected: Vec<u64>,
    /// What a WRITE verb writes.
    data: Vec<u8>,
    cas_failures: u64,
    /// Counters at the end of the warm-up, subtracted from the final ones.
    warm: Stats,
}

impl FabricWorker {
    /// A worker for slot `slot` of `region`, driving `work` through `client`.
    pub fn new(client: Client, work: Workload, region: RegionId, slot: usize) -> Self {
        FabricWorker {
            client,
            batch: Batch::new(),
            work,
            base: GlobalAddr::new(region, work.offset(slot, 0)),
            handles: Vec::with_capacity(work.batch),
            expected: vec![0; work.batch],
            data: vec![slot as u8; work.size as usize],
            cas_failures: 0,
            warm: Stats::default(),
        }
    }

    /// Builds and executes one batch and checks what CAS returned.
    async fn round_trip(&mut self) -> crate::Result<()> {
        let stride = self.work.stride();
        self.batch.clear();
        self.handles.clear();
        for i in 0..self.work.batch {
            let addr = self.base.add(i as u64 * stride);
            let h = match self.work.op {
                OpArg::Read => self.batch.read(addr, self.work.size),
                OpArg::Write => self.batch.write(addr, &self.data),
                OpArg::Cas => {
                    let e = self.expected[i];
                    self.batch.cas(addr, e, e.wrapping_add(1))
                }
                OpArg::Faa => self.batch.faa(addr, 1),
            };
            self.handles.push(h);
        }
        self.client.execute(&mut self.batch).await?;
        if self.work.op == OpArg::Cas {
            for (e, &h) in self.expected.iter_mut().zip(&self.handles) {
                let old = self.batch.old_value(h)?;
                if old == *e {
                    *e = old.wrapping_add(1);
                } else {
                    // Someone else's value (an attached image): adopt it.
                    *e = old;
                    self.cas_failures += 1;
                }
            }
        }
        Ok(())
    }

    /// Untimed round trips; fails with the node's reason if a verb is refused.
    pub async fn warm_up(&mut self) -> crate::Result<()> {
        for _ in 0..WARMUP_ROUND_TRIPS {
            self.round_trip().await?;
        }
        for (i, &h) in self.handles.iter().enumerate() {
            self.batch
                .done(h)
                .with_context(|| format!("verb {i} of a warm-up batch failed at {}", self.base))?;
        }
        self.warm = self.client.stats();
        self.cas_failures = 0;
        Ok(())
    }

    /// Round trips until `deadline`, every `every`-th one timed (see `measure`).
    pub async fn run(mut self, start: Instant, deadline: Instant, every: u64) -> crate::Result<Run> {
        let mut latency = measure::histogram()?;
        let mut done = 0u64;
        let elapsed = loop {
            for _ in 1..every {
                self.round_trip().await?;
            }
            let t0 = Instant::now();
            self.round_trip().await?;
            let t1 = Instant::now();
            measure::record(&mut latency, t1 - t0);
            done += every;
            if t1 >= deadline {
                break t1 - start;
            }
        };
        let stats = self.client.stats() - self.warm;
        if stats.verb_errors > 0 {
            crate::bail!(
                "{} verbs completed with an error during the run",
                stats.verb_errors
            );
        }
        Ok(Run {
            round_trips: done,
            elapsed,
            latency,
            cas_failures: self.cas_failures,
            stats: Some(stats),
        })
    }
}

/// local and shm: `client` is forked once per thread; thread `t` uses slot `t`.
pub fn run_inline(plan: &Plan, client: &Client, region: RegionId) -> crate::Result<Vec<Run>> {
    let every = plan.sample_every();
    on_threads("fabric", plan.threads, |t, gate| {
        let setup = (|| {
            let rt = crate::threads::runtime()?;
            let mut worker = FabricWorker::new(client.fork(), plan.work, region, t);
            rt.block_on(worker.warm_up())?;
            Ok::<_, crate::BenchError>((rt, worker))
        })();
        gate.wait();
        let (rt, worker) = setup?;
        let start = Instant::now();
        Ok(vec![rt.block_on(worker.run(
            start,
            start + plan.duration,
            every,
        ))?])
    })
}

/// tcp: each thread connects to `addr` and runs `plan.depth` tasks; task `k`
/// of thread `t` uses slot `t * depth + k`.
pub fn run_remote(plan: &Plan, memory: &harness::Memory, region: RegionId) -> crate::Result<Vec<Run>> {
    let every = plan.sample_every();
    on_threads("fabric", plan.threads, |t, gate| {
        let setup = (|| {
            let rt = crate::threads::runtime()?;
            let workers = rt.block_on(async {
                let client = memory
                    .client()
                    .await
                    .with_context(|| format!("cannot reach {}", memory.origin()))?;
                let mut warming = JoinSet::new();
                for k in 0..plan.depth {
                    let mut w = FabricWorker::new(client.fork(), plan.work, region, t * plan.depth + k);
                    warming.spawn(async move { w.warm_up().await.map(|()| w) });
                }
                let mut workers = Vec::new();
                while let Some(w) = warming.join_next().await {
                    workers.push(w.context("a warm-up task failed")??);
                }
                Ok::<_, crate::BenchError>(workers)
            })?;
            Ok::<_, crate::BenchError>((rt, workers))
        })();
        gate.wait();
        let (rt, workers) = setup?;
        let start = Instant::now();
        let deadline = start + plan.duration;
        rt.block_on(async {
            let mut running = JoinSet::new();
            for w in workers {
                running.spawn(w.run(start, deadline, every));
            }
            let mut runs = Vec::new();
            while let Some(r) = running.join_next().await {
                runs.push(r.context("a bench task failed")??);
            }
            Ok(runs)
        })
    })
}
