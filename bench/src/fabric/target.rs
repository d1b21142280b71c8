//! The memory under test: a fresh node made for the run, or an existing one
//! (`--shm PATH`, `--addr ADDR`), set up by [`harness::Memory`], and what the
//! memory baseline runs on.

use crate::error::Context;
use fabric::{Client, RegionId};
use harness::{Memory, MemorySpec, TransportKind};

use super::baseline_mem::Memory as Baseline;
use super::plan::{Plan, Target};

/// How phase 1 reaches memory.
pub enum Fabric {
    /// local or shm: threads fork this client.
    Inline(Client),
    /// tcp or rdma: each thread connects ([`Memory::client`]).
    Remote,
}

/// Everything the run needs, kept alive until it ends.
pub struct Prepared {
    /// How phase 1's clients reach the memory.
    pub fabric: Fabric,
    /// The region the clients' slots are in.
    pub region: RegionId,
    /// Where it came from, for the report.
    pub origin: String,
    /// Memory for the local/shm baseline.
    pub memory: Option<Baseline>,
    /// The memory nodes under test, kept alive for the run.
    pub nodes: Memory,
}

/// Builds the target the plan asks for.
pub fn prepare(plan: &Plan) -> crate::Result<Prepared> {
    let needed = plan.work.region_bytes(plan.slots());
    let why = "threads x outstanding x batch x cell; use fewer threads or a larger region";
    let (memory, region, origin) = match &plan.target {
        Target::Shm(Some(path)) => {
            let m = Memory::attach_shm(std::slice::from_ref(path))?;
            let region = m.pick_region(plan.region, needed, why)?;
            let origin = format!("{}, region {region}", m.origin());
            (m, region, origin)
        }
        Target::Tcp(Some(addr)) => {
            let m = Memory::connect_tcp(std::slice::from_ref(addr))?;
            let region = m.pick_region(plan.region, needed, why)?;
            let origin = format!("{}, region {region}", m.origin());
            (m, region, origin)
        }
        Target::Rdma(Some(addr)) => {
            let m = Memory::connect_rdma(std::slice::from_ref(addr))?;
            let region = m.pick_region(plan.region, needed, why)?;
            let origin = format!("{}, region {region}", m.origin());
            (m, region, origin)
        }
        Target::Local | Target::Shm(None) | Target::Tcp(None) | Target::Rdma(None) => {
            let m = Memory::start(&MemorySpec {
                server_threads: plan.threads,
                ..MemorySpec::single(plan.transport, needed)
            })?;
            let origin = m.origin().to_owned();
            (m, harness::layout::REGION, origin)
        }
    };
    let baseline = match (plan.transport, memory.shm_paths()) {
        (TransportKind::Local, _) => Some(Baseline::Anonymous(needed)),
        (TransportKind::Shm, Some(paths)) => Some(Baseline::Image {
            path: paths[0].clone(),
            region,
        }),
        _ => None,
    };
    let fabric = match memory.inline_client()? {
        Some(client) => Fabric::Inline(client),
        None => Fabric::Remote,
    };
    Ok(Prepared {
        fabric,
        region,
        origin,
        memory: baseline,
        nodes: memory,
    })
}

/// Worker threads for a server run in this process: one per client
/// thread, at most one per core.
pub fn server_runtime(threads: usize, name: &str) -> crate::Result<tokio::runtime::Runtime> {
    harness::memory::server_runtime(threads, name).context("cannot start the echo server")
}
