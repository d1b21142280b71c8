//! The one memory set-up of every tool that runs an index or a benchmark
//! in process: fresh memory nodes (`local` in this process, `shm` images
//! in a temporary directory on tmpfs, or `tcp` servers on loopback in this
//! process), or an existing node (`--shm PATH`, `--addr ADDR`), kept alive
//! as long as the [`Memory`] is.
//!
//! Memory is committed only where it is touched (anonymous mappings and
//! tmpfs files are sparse), so a region sized for the worst case costs
//! address space, not RAM.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabric::{
    AnyTransport, Client, ClusterMap, FabricError, LocalTransport, MemoryNode, NodeError, RegionId,
    RegionSpec, ShmTransport, TcpTransport,
};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use crate::layout::REGION;
use crate::transport::TransportKind;

/// Fresh memory: what to make.
#[derive(Clone, Copy, Debug)]
pub struct MemorySpec {
    /// How clients reach it.
    pub transport: TransportKind,
    /// Memory nodes, each holding a replica of [`REGION`] (node 1 the
    /// primary).
    pub replicas: u16,
    /// The region's size.
    pub region_bytes: u64,
    /// shm only: allocate the images' pages now, and have every client
    /// map them all when it attaches, as RDMA registration pins a memory
    /// node's memory: no verb then waits for a page fault (about 3 µs on
    /// tmpfs at a page's first touch, paid by whoever writes it first).
    pub populate: bool,
    /// tcp only: worker threads of the in-process servers' runtime.
    pub server_threads: usize,
}

impl MemorySpec {
    /// One node with one region of `region_bytes`, reached by `transport`.
    pub fn single(transport: TransportKind, region_bytes: u64) -> MemorySpec {
        MemorySpec {
            transport,
            replicas: 1,
            region_bytes,
            populate: false,
            server_threads: 1,
        }
    }
}

/// Why memory could not be set up or reached.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A memory node or image could not be made, attached or populated.
    #[error("{what}: {source}")]
    Node {
        /// What was tried.
        what: String,
        /// Why not.
        #[source]
        source: NodeError,
    },
    /// A tcp memory node could not be reached.
    #[error("{what}: {source}")]
    Fabric {
        /// What was tried.
        what: String,
        /// Why not.
        #[source]
        source: FabricError,
    },
    /// A server, runtime or directory could not be started or made.
    #[error("{what}: {source}")]
    Io {
        /// What was tried.
        what: String,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// An existing node lacks what the run needs.
    #[error("{0}")]
    Unfit(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MemoryError {
    let what = what.into();
    move |source| MemoryError::Io { what, source }
}

fn node(what: impl Into<String>) -> impl FnOnce(NodeError) -> MemoryError {
    let what = what.into();
    move |source| MemoryError::Node { what, source }
}

/// Memory a run uses, alive until dropped.
pub struct Memory {
    map: ClusterMap,
    kind: Kind,
    origin: String,
}

enum Kind {
    Local(LocalTransport),
    Shm {
        paths: Vec<PathBuf>,
        populate: bool,
        /// Fresh images: the nodes that made them, and their directory.
        _nodes: Vec<MemoryNode>,
        _dir: Option<tempfile::TempDir>,
    },
    Tcp {
        addrs: Vec<String>,
        /// How clients connect (the credential they present); boxed, as
        /// the other kinds are small.
        options: Box<fabric::transport::TcpOptions>,
        /// Fresh nodes: their servers, stopped on drop.
        _servers: Option<Servers>,
    },
    #[cfg(feature = "rdma")]
    Rdma {
        /// The nodes' control addresses.
        addrs: Vec<String>,
        /// Fresh nodes: their servers, stopped on drop.
        _servers: Vec<fabric::rdma::RdmaServer>,
    },
}

/// What a tool built without the `rdma` feature says when asked for it.
pub const NO_RDMA: &str =
    "this binary was built without RDMA: rebuild with `cargo build --release --features rdma` (needs cmake, libclang-dev, libibverbs-dev)";

impl Memory {
    /// Fresh memory nodes as `spec` says.
    pub fn start(spec: &MemorySpec) -> Result<Memory, MemoryError> {
        assert!(spec.replicas >= 1, "a region needs a primary");
        let regions = [RegionSpec {
            id: REGION,
            size: spec.region_bytes,
        }];
        let (n, bytes) = (spec.replicas, spec.region_bytes);
        match spec.transport {
            TransportKind::Local => {
                let (t, map) = LocalTransport::cluster(n, &regions)
                    .map_err(node("cannot create the in-process memory nodes"))?;
                Ok(Memory {
                    map,
                    kind: Kind::Local(t),
                    origin: format!("{}, {bytes}-byte region", nodes_text(n, "in-process memory node")),
                })
            }
            TransportKind::Shm => {
                let dir = shm_tempdir()?;
                let paths: Vec<PathBuf> = (1..=n).map(|i| dir.path().join(format!("node{i}.img"))).collect();
                let mut nodes = Vec::with_capacity(paths.len());
                for (id, p) in (1..=n).zip(&paths) {
                    let made = MemoryNode::create_shm(p, id, &regions)
                        .map_err(node(format!("cannot create the memory image {}", p.display())))?;
                    if spec.populate {
                        made.populate()
                            .map_err(node("cannot populate the memory image"))?;
                    }
                    nodes.push(made);
                }
                let (_, map) =
                    ShmTransport::attach(&paths).map_err(node("cannot attach the memory images"))?;
                let origin = format!(
                    "{} in {}, {bytes}-byte region",
                    nodes_text(n, "fresh image"),
                    dir.path().display()
                );
                Ok(Memory {
                    map,
                    kind: Kind::Shm {
                        paths,
                        populate: spec.populate,
                        _nodes: nodes,
                        _dir: Some(dir),
                    },
                    origin,
                })
            }
            TransportKind::Tcp => {
                let (servers, map) = Servers::start(n, &regions, spec.server_threads)?;
                let addrs = servers.addrs.clone();
                Ok(Memory {
                    map,
                    origin: format!(
                        "{} at {}, {bytes}-byte region",
                        nodes_text(n, "in-process memory node"),
                        addrs.join(",")
                    ),
                    kind: Kind::Tcp {
                        addrs,
                        // In-process nodes' gates are open.
                        options: Box::default(),
                        _servers: Some(servers),
                    },
                })
            }
            TransportKind::Rdma => Memory::start_rdma(n, &regions),
        }
    }

    #[cfg(not(feature = "rdma"))]
    fn start_rdma(_: u16, _: &[RegionSpec]) -> Result<Memory, MemoryError> {
        Err(MemoryError::Unfit(NO_RDMA.into()))
    }

    /// Fresh nodes served by rdma servers in this process (control
    /// channels on loopback, verbs on the device `fabric::rdma::DEVICE_ENV`
    /// names, or the first).
    #[cfg(feature = "rdma")]
    fn start_rdma(n: u16, regions: &[RegionSpec]) -> Result<Memory, MemoryError> {
        let mut servers = Vec::new();
        let mut descriptors = Vec::new();
        for id in 1..=n {
            let memnode =
                Arc::new(MemoryNode::anonymous(id, regions).map_err(node("cannot create the memory node"))?);
            let server = fabric::rdma::RdmaServer::start(memnode.clone(), "127.0.0.1:0")
                .map_err(|e| MemoryError::Unfit(format!("cannot serve memory node {id} over rdma: {e}")))?;
            descriptors.push((memnode.descriptor(), server.addr().to_string()));
            servers.push(server);
        }
        let map = ClusterMap::from_descriptors(1, &descriptors)
            .map_err(|e| MemoryError::Unfit(format!("the fresh nodes describe no valid map: {e}")))?;
        let addrs: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
        let bytes = regions.first().map_or(0, |r| r.size);
        let device = servers.first().map(|s| s.device()).unwrap_or_default();
        Ok(Memory {
            map,
            origin: format!(
                "{} at {} over rdma on {device}, {bytes}-byte region",
                nodes_text(n, "in-process memory node"),
                addrs.join(",")
            ),
            kind: Kind::Rdma {
                addrs,
                _servers: servers,
            },
        })
    }

    /// Existing memory nodes served over rdma (`kintsugi memnode --rdma`)
    /// whose control channels listen at `addrs`, the primary's first.
    pub fn connect_rdma(addrs: &[String]) -> Result<Memory, MemoryError> {
        Memory::connect_rdma_nodes(addrs)
    }

    #[cfg(not(feature = "rdma"))]
    fn connect_rdma_nodes(_: &[String]) -> Result<Memory, MemoryError> {
        Err(MemoryError::Unfit(NO_RDMA.into()))
    }

    #[cfg(feature = "rdma")]
    fn connect_rdma_nodes(addrs: &[String]) -> Result<Memory, MemoryError> {
        let owned = addrs.to_vec();
        let map = on_own_runtime(async move {
            fabric::RdmaTransport::discover(&owned)
                .await
                .map(|(_, map)| map)
                .map_err(|source| MemoryError::Fabric {
                    what: format!("cannot reach the rdma memory nodes at {}", owned.join(",")),
                    source,
                })
        })?;
        Ok(Memory {
            map,
            origin: format!("rdma memory node at {}", addrs.join(",")),
            kind: Kind::Rdma {
                addrs: addrs.to_vec(),
                _servers: Vec::new(),
            },
        })
    }

    /// Existing memory images (of `kintsugi memnode --shm` or `--persist`),
    /// the primary's first.
    pub fn attach_shm(paths: &[PathBuf]) -> Result<Memory, MemoryError> {
        let shown = paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let (_, map) = ShmTransport::attach(paths)
            .map_err(node(format!("cannot attach to the memory image {shown}")))?;
        Ok(Memory {
            map,
            origin: format!("image {shown}"),
            kind: Kind::Shm {
                paths: paths.to_vec(),
                populate: false,
                _nodes: Vec::new(),
                _dir: None,
            },
        })
    }

    /// Existing memory nodes served over tcp at `addrs`, the primary's
    /// first, reached with [`service_credential`].
    pub fn connect_tcp(addrs: &[String]) -> Result<Memory, MemoryError> {
        Self::connect_tcp_with(addrs, service_credential()?)
    }

    /// [`Memory::connect_tcp`] presenting `credential`. A node at a
    /// `tls://` address is checked against the process's CA
    /// (KINTSUGI_CA_FILE).
    pub fn connect_tcp_with(
        addrs: &[String],
        credential: Option<fabric::Credential>,
    ) -> Result<Memory, MemoryError> {
        let tls = control_plane::tls::ClientTls::process_default()
            .map_err(|e| MemoryError::Unfit(format!("the CA for memory nodes that speak TLS: {e}")))?
            .map(|t| t.data_path_config());
        let options = fabric::transport::TcpOptions {
            credential,
            tls,
            ..fabric::transport::TcpOptions::default()
        };
        let map = discover_map(addrs, options.clone())?;
        Ok(Memory {
            map,
            origin: format!("memory node at {}", addrs.join(",")),
            kind: Kind::Tcp {
                addrs: addrs.to_vec(),
                options: Box::new(options),
                _servers: None,
            },
        })
    }

    /// The cluster map of its nodes.
    pub fn map(&self) -> &ClusterMap {
        &self.map
    }

    /// What it is, for a report.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The transport clients reach it by.
    pub fn transport(&self) -> TransportKind {
        match self.kind {
            Kind::Local(_) => TransportKind::Local,
            Kind::Shm { .. } => TransportKind::Shm,
            Kind::Tcp { .. } => TransportKind::Tcp,
            #[cfg(feature = "rdma")]
            Kind::Rdma { .. } => TransportKind::Rdma,
        }
    }

    /// The images, for shm memory.
    pub fn shm_paths(&self) -> Option<&[PathBuf]> {
        match &self.kind {
            Kind::Shm { paths, .. } => Some(paths),
            _ => None,
        }
    }

    /// The servers' addresses, for tcp memory.
    pub fn tcp_addrs(&self) -> Option<&[String]> {
        match &self.kind {
            Kind::Tcp { addrs, .. } => Some(addrs),
            _ => None,
        }
    }

    /// A fabric client whose verbs run on the calling thread (local and
    /// shm), to fork for every client thread: forks share the mapping.
    /// `None` for tcp, where each client connects ([`Memory::client`]).
    pub fn inline_client(&self) -> Result<Option<Client>, MemoryError> {
        let t: AnyTransport = match &self.kind {
            Kind::Local(t) => t.clone().into(),
            Kind::Shm { paths, .. } => ShmTransport::attach(paths)
                .map_err(node("cannot attach the memory images"))?
                .0
                .into(),
            Kind::Tcp { .. } => return Ok(None),
            #[cfg(feature = "rdma")]
            Kind::Rdma { .. } => return Ok(None),
        };
        Ok(Some(Client::new(self.map.clone(), t)))
    }

    /// A fabric client of its own for one client thread: shm attaches
    /// afresh (and maps every page, if populated), tcp connects.
    pub async fn client(&self) -> Result<Client, MemoryError> {
        let t: AnyTransport = match &self.kind {
            Kind::Local(t) => t.clone().into(),
            Kind::Shm { paths, populate, .. } => {
                let (t, _) = ShmTransport::attach(paths).map_err(node("cannot attach the memory images"))?;
                if *populate {
                    t.populate()
                        .map_err(node("cannot map the memory image's pages"))?;
                }
                t.into()
            }
            Kind::Tcp { addrs, options, .. } => TcpTransport::discover_with(addrs, (**options).clone())
                .await
                .map_err(|source| MemoryError::Fabric {
                    what: format!("cannot reach the memory nodes at {}", addrs.join(",")),
                    source,
                })?
                .0
                .into(),
            #[cfg(feature = "rdma")]
            Kind::Rdma { addrs, .. } => fabric::RdmaTransport::discover_with(addrs, service_credential()?)
                .await
                .map_err(|source| MemoryError::Fabric {
                    what: format!("cannot reach the rdma memory nodes at {}", addrs.join(",")),
                    source,
                })?
                .0
                .into(),
        };
        Ok(Client::new(self.map.clone(), t))
    }

    /// The region to use: `asked`, or the first the nodes hold, checked to
    /// have at least `needed` bytes (`why` says what needs them).
    pub fn pick_region(
        &self,
        asked: Option<RegionId>,
        needed: u64,
        why: &str,
    ) -> Result<RegionId, MemoryError> {
        let info = match asked {
            Some(id) => self
                .map
                .region(id)
                .ok_or_else(|| MemoryError::Unfit(format!("{} holds no region {id}", self.origin)))?,
            None => self
                .map
                .regions()
                .first()
                .ok_or_else(|| MemoryError::Unfit(format!("{} holds no region", self.origin)))?,
        };
        if info.size < needed {
            return Err(MemoryError::Unfit(format!(
                "region {} of {} has {} bytes; this run needs {needed} ({why})",
                info.id, self.origin, info.size
            )));
        }
        Ok(info.id)
    }
}

fn nodes_text(n: u16, what: &str) -> String {
    if n == 1 {
        what.to_owned()
    } else {
        format!("{n} {what}s")
    }
}

/// The credential a process that reaches memory nodes of its own (no
/// control plane: `--memnodes`, `fabric bench --addr`) presents: a service
/// credential derived from the cluster secret in the environment
/// (`KINTSUGI_CLUSTER_SECRET`, what such nodes check with), or none, which
/// only a node started with `--insecure-open` (or an in-process one) serves.
pub fn service_credential() -> Result<Option<fabric::Credential>, MemoryError> {
    let Ok(secret) = std::env::var(control_plane::config::SECRET_ENV) else {
        return Ok(None);
    };
    let secret = control_plane::network::ClusterSecret::new(secret)
        .map_err(|e| MemoryError::Unfit(format!("{}: {e}", control_plane::config::SECRET_ENV)))?;
    Ok(Some(secret.service_credential()))
}

/// The map the nodes at `addrs` describe.
fn discover_map(addrs: &[String], options: fabric::transport::TcpOptions) -> Result<ClusterMap, MemoryError> {
    let owned = addrs.to_vec();
    on_own_runtime(async move {
        TcpTransport::discover_with(&owned, options)
            .await
            .map(|(_, map)| map)
            .map_err(|source| MemoryError::Fabric {
                what: format!("cannot reach the memory nodes at {}", owned.join(",")),
                source,
            })
    })
}

/// Runs `work` on a thread with a runtime of its own: set-up is
/// synchronous, and may be called from inside a runtime, where blocking
/// on another panics.
fn on_own_runtime<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, MemoryError>> + Send + 'static,
) -> Result<T, MemoryError> {
    let asked = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("cannot start an async runtime"))?;
        rt.block_on(work)
    });
    asked.join().unwrap_or_else(|_| {
        Err(MemoryError::Unfit(
            "the thread asking for the map panicked".into(),
        ))
    })
}

/// tcp memory-node servers running in this process, on a runtime of
/// their own; stopped, and their tasks awaited, on drop.
struct Servers {
    addrs: Vec<String>,
    /// Taken on drop: stopped on a thread of its own.
    runtime: Option<Runtime>,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Servers {
    /// Starts `n` nodes' servers; never blocks on a runtime, so it may be
    /// called from inside one. Returns them with the map they describe.
    fn start(n: u16, regions: &[RegionSpec], threads: usize) -> Result<(Servers, ClusterMap), MemoryError> {
        let runtime = server_runtime(threads, "memnode")?;
        let handle = runtime.handle().clone();
        let mut servers = Servers {
            addrs: Vec::new(),
            runtime: Some(runtime),
            stops: Vec::new(),
            tasks: Vec::new(),
        };
        let mut descriptors = Vec::new();
        for id in 1..=n {
            let memnode =
                Arc::new(MemoryNode::anonymous(id, regions).map_err(node("cannot create the memory node"))?);
            let std_listener =
                std::net::TcpListener::bind("127.0.0.1:0").map_err(io("cannot listen on 127.0.0.1"))?;
            std_listener
                .set_nonblocking(true)
                .map_err(io("cannot make the listener non-blocking"))?;
            let addr = std_listener
                .local_addr()
                .map_err(io("cannot read the listener's address"))?;
            let listener = {
                let _in_server_runtime = handle.enter();
                tokio::net::TcpListener::from_std(std_listener).map_err(io("cannot register the listener"))?
            };
            descriptors.push((memnode.descriptor(), addr.to_string()));
            let (stop, stopped) = oneshot::channel::<()>();
            servers
                .tasks
                .push(handle.spawn(fabric::server::serve(listener, memnode, async {
                    let _ = stopped.await;
                })));
            servers.stops.push(stop);
            servers.addrs.push(addr.to_string());
        }
        let map = ClusterMap::from_descriptors(1, &descriptors)
            .map_err(|e| MemoryError::Unfit(format!("the fresh nodes describe no valid map: {e}")))?;
        Ok((servers, map))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        // Wait for the servers, and drop their runtime, on a thread of
        // their own: this may be dropped inside another runtime, where
        // blocking on or dropping one panics.
        let tasks: Vec<_> = self.tasks.drain(..).collect();
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        let waited = std::thread::spawn(move || {
            for task in tasks {
                match runtime.block_on(task) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "in-process memory node stopped with an error"),
                    Err(e) => tracing::warn!(error = %e, "in-process memory node task failed"),
                }
            }
            drop(runtime);
        });
        let _ = waited.join();
    }
}

/// A runtime for servers run in this process: `threads` workers, at most
/// one per core.
pub fn server_runtime(threads: usize, name: &str) -> Result<Runtime, MemoryError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, cores))
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(io("cannot start the server's async runtime"))
}

/// A temporary directory on tmpfs when the host has one: an shm image
/// belongs in memory, not on a disk that writes it back.
pub fn shm_tempdir() -> Result<tempfile::TempDir, MemoryError> {
    let dev_shm = Path::new("/dev/shm");
    let parent: PathBuf = if dev_shm.is_dir() {
        dev_shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("kintsugi-")
        .tempdir_in(&parent)
        .map_err(io(format!(
            "cannot create a temporary directory in {}",
            parent.display()
        )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(transport: TransportKind, replicas: u16) -> MemorySpec {
        MemorySpec {
            replicas,
            ..MemorySpec::single(transport, 1 << 20)
        }
    }

    /// rdma needs the feature and a device (the soft-RoCE VM runs the
    /// fabric's rdma tests); without the feature it is refused, saying why.
    #[test]
    fn rdma_without_the_feature_says_how_to_get_it() {
        if cfg!(feature = "rdma") {
            return;
        }
        let e = Memory::start(&spec(TransportKind::Rdma, 1))
            .err()
            .map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some(NO_RDMA));
    }

    #[test]
    fn every_transport_serves_a_write_to_every_replica() {
        for transport in [TransportKind::Local, TransportKind::Shm, TransportKind::Tcp] {
            let memory = Memory::start(&spec(transport, 2)).unwrap_or_else(|e| panic!("{transport}: {e}"));
            assert_eq!(memory.map().nodes().len(), 2, "{transport}");
            assert_eq!(memory.transport(), transport);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut c = memory.client().await.unwrap();
                let addr = fabric::GlobalAddr::new(REGION, 64);
                let mut b = fabric::Batch::new();
                b.on(fabric::Replica::All).write(addr, &7u64.to_le_bytes());
                c.execute(&mut b).await.unwrap();
                for replica in [fabric::Replica::Primary, fabric::Replica::Backup(0)] {
                    let mut b = fabric::Batch::new();
                    let h = b.on(replica).read(addr, 8);
                    c.execute(&mut b).await.unwrap();
                    assert_eq!(
                        b.read_result(h).unwrap(),
                        7u64.to_le_bytes(),
                        "{transport} {replica:?}"
                    );
                }
            });
            assert_eq!(
                memory.inline_client().unwrap().is_some(),
                transport != TransportKind::Tcp
            );
        }
    }

    #[test]
    fn memory_is_set_up_and_torn_down_inside_a_runtime_too() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let memory = Memory::start(&spec(TransportKind::Tcp, 2)).unwrap();
            let again = Memory::connect_tcp(memory.tcp_addrs().unwrap()).unwrap();
            assert_eq!(again.map().nodes().len(), 2);
            let mut c = again.client().await.unwrap();
            let mut b = fabric::Batch::new();
            b.faa(fabric::GlobalAddr::new(REGION, 0), 1);
            c.execute(&mut b).await.unwrap();
            drop(again);
            drop(memory);
        });
    }

    #[test]
    fn an_existing_node_too_small_for_the_run_is_refused_with_the_reason() {
        let memory = Memory::start(&spec(TransportKind::Tcp, 1)).unwrap();
        let addr = memory.tcp_addrs().unwrap()[0].clone();
        let existing = Memory::connect_tcp(&[addr]).unwrap();
        assert_eq!(existing.pick_region(None, 4096, "test").unwrap(), REGION);
        let e = existing
            .pick_region(None, 2 << 20, "two cells")
            .unwrap_err()
            .to_string();
        assert!(e.contains("this run needs 2097152 (two cells)"), "{e}");
        assert!(existing
            .pick_region(Some(9), 1, "test")
            .unwrap_err()
            .to_string()
            .contains("no region 9"));
    }
}
