//! The memory under test: a fresh node made for the run, or an existing one
//! (`--shm PATH`, `--addr ADDR`), and what the memory baseline runs on.

use crate::cli::bench::cluster::shm_tempdir;
use std::sync::Arc;

use anyhow::{bail, Context};
use fabric::{
    Client, ClusterMap, LocalTransport, MemoryNode, RegionId, RegionSpec, ShmTransport, TcpTransport,
};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use super::args::{Plan, Target};
use super::baseline_mem::Memory;

/// Region id of a node the bench creates.
const OWN_REGION: RegionId = 1;

/// How phase 1 reaches memory.
pub enum Fabric {
    /// local or shm: threads fork this client.
    Inline(Client),
    /// tcp: each thread connects to this address.
    Tcp(String),
}

/// Everything the run needs, kept alive until it ends.
pub struct Prepared {
    pub fabric: Fabric,
    pub region: RegionId,
    /// Where it came from, for the report.
    pub origin: String,
    /// Memory for the local/shm baseline.
    pub memory: Option<Memory>,
    _keep: Keep,
}

/// Owned resources whose drop ends the run's infrastructure.
#[derive(Default)]
struct Keep {
    _shm_node: Option<MemoryNode>,
    _dir: Option<tempfile::TempDir>,
    server: Option<InProcessServer>,
}

struct InProcessServer {
    runtime: Runtime,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for Keep {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            if let Some(stop) = s.stop.take() {
                let _ = stop.send(());
            }
            match s.runtime.block_on(&mut s.task) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "in-process memory node stopped with an error"),
                Err(e) => tracing::warn!(error = %e, "in-process memory node task failed"),
            }
        }
    }
}

/// Builds the target the plan asks for.
pub fn prepare(plan: &Plan) -> anyhow::Result<Prepared> {
    let needed = plan.work.region_bytes(plan.slots());
    let own = [RegionSpec {
        id: OWN_REGION,
        size: needed,
    }];
    match &plan.target {
        Target::Local => {
            let (transport, map) =
                LocalTransport::cluster(1, &own).context("cannot create the in-process memory node")?;
            Ok(Prepared {
                fabric: Fabric::Inline(Client::new(map, transport.into())),
                region: OWN_REGION,
                origin: format!("in-process memory node, {needed}-byte region"),
                memory: Some(Memory::Anonymous(needed)),
                _keep: Keep::default(),
            })
        }
        Target::Shm(None) => {
            let dir = shm_tempdir()?;
            let path = dir.path().join("bench.img");
            let node = MemoryNode::create_shm(&path, 1, &own)?;
            let (transport, map) = ShmTransport::attach(std::slice::from_ref(&path))?;
            Ok(Prepared {
                fabric: Fabric::Inline(Client::new(map, transport.into())),
                region: OWN_REGION,
                origin: format!("fresh image {}, {needed}-byte region", path.display()),
                memory: Some(Memory::Image {
                    path,
                    region: OWN_REGION,
                }),
                _keep: Keep {
                    _shm_node: Some(node),
                    _dir: Some(dir),
                    server: None,
                },
            })
        }
        Target::Shm(Some(path)) => {
            let (transport, map) = ShmTransport::attach(std::slice::from_ref(path))
                .with_context(|| format!("cannot attach to the memory image {}", path.display()))?;
            let region = pick_region(&map, plan.region, needed, &path.display().to_string())?;
            Ok(Prepared {
                fabric: Fabric::Inline(Client::new(map, transport.into())),
                region,
                origin: format!("image {}, region {region}", path.display()),
                memory: Some(Memory::Image {
                    path: path.clone(),
                    region,
                }),
                _keep: Keep::default(),
            })
        }
        Target::Tcp(None) => {
            let node = Arc::new(MemoryNode::anonymous(1, &own)?);
            let runtime = server_runtime(plan.threads, "memnode")?;
            let (listener, addr) = runtime
                .block_on(fabric::server::bind("127.0.0.1:0"))
                .context("cannot listen on 127.0.0.1")?;
            let (stop, stopped) = oneshot::channel::<()>();
            let task = runtime.spawn(fabric::server::serve(listener, node, async {
                let _ = stopped.await;
            }));
            Ok(Prepared {
                fabric: Fabric::Tcp(addr.to_string()),
                region: OWN_REGION,
                origin: format!("in-process memory node at {addr}, {needed}-byte region"),
                memory: None,
                _keep: Keep {
                    _shm_node: None,
                    _dir: None,
                    server: Some(InProcessServer {
                        runtime,
                        stop: Some(stop),
                        task,
                    }),
                },
            })
        }
        Target::Tcp(Some(addr)) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start an async runtime")?;
            let map = rt
                .block_on(TcpTransport::discover(std::slice::from_ref(addr)))
                .with_context(|| format!("cannot reach the memory node at {addr}"))?
                .1;
            let region = pick_region(&map, plan.region, needed, addr)?;
            Ok(Prepared {
                fabric: Fabric::Tcp(addr.clone()),
                region,
                origin: format!("memory node at {addr}, region {region}"),
                memory: None,
                _keep: Keep::default(),
            })
        }
    }
}

/// Worker threads for a server run in this process: one per client thread,
/// at most one per core.
pub fn server_runtime(threads: usize, name: &str) -> anyhow::Result<Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, cores))
        .thread_name(name)
        .enable_all()
        .build()
        .context("cannot start the server's async runtime")
}

/// The region to use on an existing node, checked to be large enough.
fn pick_region(
    map: &ClusterMap,
    asked: Option<RegionId>,
    needed: u64,
    node: &str,
) -> anyhow::Result<RegionId> {
    let info = match asked {
        Some(id) => map
            .region(id)
            .with_context(|| format!("{node} holds no region {id}"))?,
        None => map
            .regions()
            .first()
            .with_context(|| format!("{node} holds no region"))?,
    };
    if info.size < needed {
        bail!(
            "region {} of {node} has {} bytes; this run needs {needed} (threads x outstanding x batch x cell); \
             use fewer threads or a larger region",
            info.id,
            info.size
        );
    }
    Ok(info.id)
}
