//! Running one `bench ycsb` cell (index, workload, distribution) on every
//! client thread, for one variant or for several in alternating slices.
//!
//! Slices are how two variants are compared on a machine whose speed
//! drifts (a shared VM varies by 10-15% from one second to the next): every
//! variant is loaded at once, each thread keeps its clients of every
//! variant (and so their caches) from slice to slice, and all threads
//! switch variant together, at deadlines counted from one start instant
//! (no barrier, so a thread that fails leaves nobody waiting). A drift
//! slower than a slice then falls on every variant alike.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::error::Context;
use index::btree::{BTree, LeafHintTable};
use index::hash::HashTable;
use txn::{HintCache, TxConfig};
use workload::driver::{drive, ClientResult, IndexClient};
use workload::{Distribution, Keyspace, OpGenerator, Workload, WorkloadSpec};

use crate::threads::{on_threads, runtime};
use crate::ycsb_plan::Plan;
use crate::ycsb_run::{hinted_objects, Loaded};
use harness::layout::FIRST_WORKER as FIRST_CLIENT;
use harness::Memory;

/// One variant's loaded index, ready for clients.
pub struct Subject<'a> {
    /// The memory the index lives in.
    pub memory: &'a Memory,
    /// The loaded index, which the clients attach to.
    pub loaded: Loaded,
}

type Clients = Vec<(IndexClient, OpGenerator)>;

/// What the B+tree clients of one variant share in this process.
struct ProcessHints {
    metas: Arc<HintCache>,
    leaves: Arc<LeafHintTable>,
    /// The process's view of reclaims (`txn::quiesce`). No control plane
    /// announces any here, but a client under one follows a view, and what
    /// its sections cost is measured with it.
    reclaims: Arc<txn::ReclaimView>,
}

/// Runs `workload` under `dist` on every subject for `plan.duration` each:
/// in one go when there is one subject or no `plan.slice`, else in
/// alternating slices. Returns each subject's clients' results, added up.
pub fn measure(
    subjects: &[Subject],
    workload: Workload,
    dist: Distribution,
    plan: &Plan,
) -> crate::Result<Vec<ClientResult>> {
    let spec = WorkloadSpec {
        workload,
        distribution: dist,
        records: plan.keys,
        seed: plan.seed,
    };
    let keyspace = Keyspace::new(spec)?;
    // rtx B+tree clients share one cache of meta hints and one table of
    // leaf hints per variant, as Sherman's threads share one index cache;
    // hash tables keep none.
    let hints: Vec<Option<ProcessHints>> = subjects
        .iter()
        .map(|s| match s.loaded {
            Loaded::BTree(..) => Some(ProcessHints {
                metas: Arc::new(HintCache::for_objects(hinted_objects(plan.keys))),
                leaves: Arc::new(LeafHintTable::default()),
                reclaims: txn::ReclaimView::new(),
            }),
            Loaded::Hash(..) => None,
        })
        .collect();
    let slices = slices(plan.duration, plan.slice.filter(|_| subjects.len() > 1));
    // Set by the first thread through the start gate: every thread's slice
    // deadlines count from it, so all run the same variant at once.
    let start = OnceLock::new();
    let per_thread = on_threads("ycsb", plan.threads, |t, gate| {
        let setup = (|| -> crate::Result<_> {
            let rt = runtime()?;
            let mut clients = Vec::with_capacity(subjects.len());
            for (s, hints) in subjects.iter().zip(&hints) {
                clients.push(rt.block_on(attach(s, hints.as_ref(), &keyspace, t, plan))?);
            }
            Ok((rt, clients))
        })();
        let (rt, mut clients) = match setup {
            Ok(s) => s,
            Err(e) => {
                gate.wait();
                return Err(e);
            }
        };
        // Warm every client's caches, then start together. The gate is
        // passed whatever the warm-up did: the other threads wait for it.
        let warmup = rt.block_on(async {
            for variant in &mut clients {
                for (client, generator) in variant.iter_mut() {
                    drive(client, generator, Instant::now() + plan.warmup).await?;
                }
            }
            Ok::<_, crate::BenchError>(())
        });
        gate.wait();
        warmup?;
        let start = *start.get_or_init(Instant::now);
        let mut totals: Vec<ClientResult> = subjects.iter().map(|_| ClientResult::empty()).collect();
        let mut offset = Duration::ZERO;
        for &slice in &slices {
            for (variant, total) in clients.iter_mut().zip(&mut totals) {
                offset += slice;
                total.merge(&rt.block_on(run_slice(variant, start + offset))?);
            }
        }
        Ok(totals)
    })?;
    let mut totals: Vec<ClientResult> = subjects.iter().map(|_| ClientResult::empty()).collect();
    for thread in &per_thread {
        for (total, r) in totals.iter_mut().zip(thread) {
            total.merge(r);
        }
    }
    Ok(totals)
}

/// The slices of a run of `duration`: one, or `slice` long each with a
/// shorter last one.
fn slices(duration: Duration, slice: Option<Duration>) -> Vec<Duration> {
    let Some(slice) = slice.filter(|s| !s.is_zero() && *s < duration) else {
        return vec![duration];
    };
    let mut v = Vec::new();
    let mut left = duration;
    while !left.is_zero() {
        let s = slice.min(left);
        v.push(s);
        left -= s;
    }
    v
}

/// Thread `t`'s clients of one subject, with their op generators.
async fn attach(
    s: &Subject<'_>,
    hints: Option<&ProcessHints>,
    keyspace: &Arc<Keyspace>,
    t: usize,
    plan: &Plan,
) -> crate::Result<Clients> {
    let fabric = s.memory.client().await?;
    let mut clients = Vec::with_capacity(plan.coroutines);
    for c in 0..plan.coroutines {
        let slot = t * plan.coroutines + c;
        let owner = FIRST_CLIENT + slot as u16;
        let client = match s.loaded {
            Loaded::BTree(heap, info) => {
                let mut tree = BTree::attach(fabric.fork(), heap, owner, TxConfig::default(), info)?;
                if let Some(hints) = hints {
                    tree.share_hints(hints.metas.clone());
                    tree.share_leaf_hints(hints.leaves.clone());
                    tree.follow_reclaims(hints.reclaims.clone());
                }
                IndexClient::BTree(Box::new(tree))
            }
            Loaded::Hash(heap, info) => {
                let table = HashTable::attach(fabric.fork(), heap, owner, TxConfig::default(), info).await?;
                IndexClient::Hash(Box::new(table))
            }
        };
        clients.push((client, keyspace.generator(slot)));
    }
    Ok(clients)
}

/// Runs a thread's clients of one subject together until `deadline`.
async fn run_slice(clients: &mut Clients, deadline: Instant) -> crate::Result<ClientResult> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (mut client, mut generator)) in std::mem::take(clients).into_iter().enumerate() {
        tasks.spawn(async move {
            let r = drive(&mut client, &mut generator, deadline).await;
            (i, client, generator, r)
        });
    }
    let mut back = Vec::with_capacity(tasks.len());
    let mut total = ClientResult::empty();
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        let (i, client, generator, r) = done.context("a client task failed")?;
        back.push((i, client, generator));
        match r {
            Ok(r) => total.merge(&r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    back.sort_by_key(|(i, ..)| *i);
    *clients = back.into_iter().map(|(_, c, g)| (c, g)).collect();
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(total),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_add_up_to_the_duration() {
        let ms = Duration::from_millis;
        assert_eq!(slices(ms(3000), None), [ms(3000)]);
        assert_eq!(slices(ms(3000), Some(ms(1000))), [ms(1000); 3]);
        assert_eq!(slices(ms(2500), Some(ms(1000))), [ms(1000), ms(1000), ms(500)]);
        assert_eq!(
            slices(ms(500), Some(ms(1000))),
            [ms(500)],
            "a slice longer than the run"
        );
        assert_eq!(slices(ms(500), Some(ms(0))), [ms(500)]);
    }
}
