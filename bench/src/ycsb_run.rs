//! `kintsugi bench ycsb`: per index and variant, a fresh memory node and a
//! bulk-loaded index (B+tree or RACE hash table), then every (distribution,
//! workload) for a fixed time on `threads × coroutines` clients.

use std::time::Instant;

use crate::error::Context;
use index::btree::{BTree, TreeInfo, Variant};
use index::hash::layout::{Geometry, KV_BYTES};
use index::hash::{HashConfig, HashTable, TableInfo};
use txn::Heap;
use workload::load_entries;

use crate::common::load_bar;
use crate::threads::runtime;
use crate::ycsb_measure::{measure, Subject};
use crate::ycsb_plan::{IndexArg, Plan};
use crate::ycsb_report::Row;
use crate::ycsb_report::YcsbReport;
use harness::{Memory, MemorySpec};

use harness::layout::{CHUNK_BYTES, FIRST_WORKER as FIRST_CLIENT, LOADER};
/// Inserts one second of one client may add, for sizing the region: far
/// above what any transport here reaches with 5% inserts.
const INSERTS_PER_CLIENT_SECOND: u64 = 200_000;
/// Hash table ops one client thread may run in a second (its coroutines
/// share it; the transports here run verbs on the calling thread), for
/// sizing the region and the directory: about three times what one thread
/// reaches on local or shm memory (1.3 M/s).
const HASH_OPS_PER_THREAD_SECOND: u64 = 4_000_000;

/// Objects whose hints a tree of `keys` needs: one per node, and a node
/// of a fresh load holds more than 20 keys. 16 bytes each, taken a page at
/// a time as first written: about 6 MiB for 10M keys.
pub fn hinted_objects(keys: u64) -> u64 {
    const NODE_KEYS_MIN: u64 = 20;
    keys / NODE_KEYS_MIN
}

/// Region bytes for `keys` loaded keys, inserts during the run, and the
/// rTX copy-on-write churn of every client.
fn region_bytes(plan: &Plan, index: IndexArg) -> u64 {
    let clients = (plan.threads * plan.coroutines) as u64;
    let index_bytes = match index {
        IndexArg::Btree => {
            let runs = (plan.workloads_for(index).len() * plan.dists.len()) as u64;
            let inserts = clients * INSERTS_PER_CLIENT_SECOND * (plan.duration.as_secs() + 1) * runs / 20;
            let per_leaf = ((index::btree::node::LEAF_SLOTS as f64) * plan.fill).max(1.0) as u64;
            let leaves = plan.keys / per_leaf + 1 + inserts / 20;
            let node_bytes = 1024 + txn::META_BYTES;
            leaves * node_bytes * 21 / 20
        }
        IndexArg::Hash => {
            let writes = hash_writes(plan);
            let config = hash_config(plan);
            let subtable = Geometry {
                groups: config.groups,
            }
            .subtable_bytes()
                + txn::META_BYTES;
            let dir = 8u64 << config.dir_depth;
            // Every subtable the directory can name, twice over (an rtx
            // split retires the block it replaces, and splits are fewer
            // than subtables); each client's spare copies of a subtable and
            // the directory; a KV block per loaded key and per write.
            2 * (subtable << config.dir_depth)
                + clients * 2 * (subtable + dir)
                + (plan.keys + writes.blocks) * u64::from(KV_BYTES)
        }
    };
    let bytes = index_bytes + clients * 64 * CHUNK_BYTES + (256 << 20);
    bytes.next_multiple_of(4096)
}

/// Writes the hash runs of a plan may make, for sizing.
struct HashWrites {
    /// KV blocks taken: one per update and per insert (RACE writes out of
    /// place, and a replaced block is not reused).
    blocks: u64,
    /// Keys inserted.
    inserts: u64,
}

/// Bounds the writes of every hash run of `plan` at
/// `HASH_OPS_PER_THREAD_SECOND` per thread that has a core, warm-up
/// (one client after another) included.
fn hash_writes(plan: &Plan) -> HashWrites {
    let cores = std::thread::available_parallelism().map_or(plan.threads, |n| n.get());
    let threads = plan.threads.min(cores) as u64;
    let secs = plan.duration.as_secs() + plan.warmup.as_secs() * plan.coroutines as u64 + 2;
    let ops_per_percent = threads * secs * HASH_OPS_PER_THREAD_SECOND / 100 * plan.dists.len() as u64;
    let mut w = HashWrites {
        blocks: 0,
        inserts: 0,
    };
    for workload in plan.workloads_for(IndexArg::Hash) {
        let mix = workload.mix();
        w.blocks += ops_per_percent * u64::from(mix.update + mix.insert);
        w.inserts += ops_per_percent * u64::from(mix.insert);
    }
    w
}

/// The shape of the hash tables of `plan`: room for the loaded keys and
/// every insert the runs may make.
fn hash_config(plan: &Plan) -> HashConfig {
    HashConfig::for_keys(plan.keys + hash_writes(plan).inserts)
}

/// A loaded index: what its clients attach to.
#[derive(Clone, Copy)]
pub enum Loaded {
    /// A B+tree: the heap it is in, and where the tree is.
    BTree(Heap, TreeInfo),
    /// A RACE hash table: the heap it is in, and where and how the table is.
    Hash(Heap, TableInfo),
}

/// Runs every index, variant, workload and distribution of `plan` for its
/// rounds, progress on stderr.
pub fn run(plan: &Plan) -> crate::Result<YcsbReport> {
    let mut rows: Vec<Row> = Vec::new();
    let mut described = None;
    for round in 1..=plan.rounds {
        let prefix = if plan.rounds > 1 {
            format!("round {round}/{}: ", plan.rounds)
        } else {
            String::new()
        };
        for &index in &plan.indexes {
            // The variants measured together: all at once in slices, else
            // one after the other.
            let variants = plan.variants_in(round);
            let groups: Vec<Vec<Variant>> = if plan.slice.is_some() {
                vec![variants]
            } else {
                variants.into_iter().map(|v| vec![v]).collect()
            };
            for group in groups {
                let mut loaded = Vec::with_capacity(group.len());
                for &variant in &group {
                    let memory =
                        Memory::start(&MemorySpec::single(plan.transport, region_bytes(plan, index)))?;
                    described.get_or_insert_with(|| memory.origin().to_owned());
                    let l = load(&memory, index, variant, plan)?;
                    loaded.push((memory, l));
                }
                let subjects: Vec<Subject> = loaded
                    .iter()
                    .map(|(memory, loaded)| Subject {
                        memory,
                        loaded: *loaded,
                    })
                    .collect();
                let names = group.iter().map(Variant::to_string).collect::<Vec<_>>();
                let how = if group.len() > 1 { " each, in slices" } else { "" };
                for &dist in &plan.dists {
                    for workload in plan.workloads_for(index) {
                        eprintln!(
                            "bench ycsb: {prefix}{index} {} {workload} {dist}: running {}{how} ...",
                            names.join(" and "),
                            humantime::format_duration(plan.duration)
                        );
                        let results = measure(&subjects, workload, dist, plan)?;
                        for (&variant, result) in group.iter().zip(&results) {
                            rows.push(Row::new(index, variant, workload, dist, round, plan, result));
                        }
                    }
                }
            }
        }
    }
    Ok(YcsbReport {
        rows,
        rounds: plan.rounds,
        memory: described.unwrap_or_default(),
    })
}

/// Formats the heap, creates the index and bulk-loads it, with a progress bar.
fn load(memory: &Memory, index: IndexArg, variant: Variant, plan: &Plan) -> crate::Result<Loaded> {
    let rt = runtime()?;
    rt.block_on(async {
        let mut fabric = memory.client().await?;
        let clients = plan.threads * plan.coroutines;
        let owner_slots = u16::try_from(clients + usize::from(FIRST_CLIENT)).context("too many clients")?;
        let heap = harness::layout::format_heap(&mut fabric, owner_slots).await?;
        let entries = load_entries(plan.keys, plan.seed);
        let bar = load_bar(plan.keys, format!("loading {index} {variant}"));
        let started = Instant::now();
        let (keys, shape, loaded) = match index {
            IndexArg::Btree => {
                let mut tree = BTree::create(fabric, heap, variant, LOADER).await?;
                let report = tree
                    .bulk_load(&entries, plan.fill, |n| bar.set_position(n))
                    .await?;
                let shape = format!(
                    "{} nodes, {} levels, {:.1} DM bytes per key",
                    report.nodes, report.levels, report.bytes_per_key
                );
                (report.keys, shape, Loaded::BTree(heap, tree.info()))
            }
            IndexArg::Hash => {
                let mut table = HashTable::create(fabric, heap, variant, LOADER, hash_config(plan)).await?;
                let report = table.bulk_load(&entries, |n| bar.set_position(n)).await?;
                let shape = format!(
                    "{} subtables (depth {}, load factor {:.2}), {:.1} DM bytes per key",
                    report.subtables, report.depth, report.load_factor, report.bytes_per_key
                );
                (report.keys, shape, Loaded::Hash(heap, table.info()))
            }
        };
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "bench ycsb: loaded {keys} keys into {index} {variant} in {secs:.1} s ({:.2} M keys/s): {shape}",
            keys as f64 / secs / 1e6,
        );
        if keys != plan.keys {
            crate::bail!("loaded {keys} keys of {}", plan.keys);
        }
        Ok(loaded)
    })
}
