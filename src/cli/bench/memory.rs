//! The memory node a YCSB or rehash benchmark runs against, for the whole
//! run of one variant: in process, a shared-memory image, or a loopback tcp
//! server on a thread of its own.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use fabric::{
    AnyTransport, Client, ClusterMap, LocalTransport, MemoryNode, RegionSpec, ShmTransport, TcpTransport,
};

use super::threads::runtime;

/// The one region a benchmark's memory node holds.
pub const REGION: u16 = 1;

/// Transports a benchmark of an index runs on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTransport {
    /// In-process memory node.
    Local,
    /// A memory image in /dev/shm mapped by every client thread (the CXL model).
    Shm,
    /// A memory-node server on loopback, one connection per client thread.
    Tcp,
}

impl MemoryTransport {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            MemoryTransport::Local => "local",
            MemoryTransport::Shm => "shm",
            MemoryTransport::Tcp => "tcp",
        }
    }
}

/// Where the memory is, kept alive for the whole variant.
pub struct Memory {
    map: ClusterMap,
    kind: MemoryKind,
}

enum MemoryKind {
    Local(LocalTransport),
    Shm {
        path: PathBuf,
        /// Every client maps every page at attach (see [`Memory::new`]).
        populate: bool,
        _node: MemoryNode,
        _dir: tempfile::TempDir,
    },
    Tcp {
        addr: String,
        _server: std::thread::JoinHandle<()>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
    },
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let MemoryKind::Tcp { stop, .. } = &mut self.kind {
            if let Some(stop) = stop.take() {
                let _ = stop.send(());
            }
        }
    }
}

impl Memory {
    /// A fresh memory node with one region of `region_bytes`. With
    /// `populate` (shm only), the image's pages are allocated now and every
    /// client maps them all when it attaches, as RDMA registration pins a
    /// memory node's memory: no verb then waits for a page fault, which on
    /// tmpfs costs about 3 µs at a page's first touch and lands on whoever
    /// writes a fresh page first.
    pub fn new(transport: MemoryTransport, region_bytes: u64, populate: bool) -> anyhow::Result<Memory> {
        let spec = [RegionSpec {
            id: REGION,
            size: region_bytes,
        }];
        match transport {
            MemoryTransport::Local => {
                let (t, map) = LocalTransport::cluster(1, &spec).context("cannot create the memory node")?;
                Ok(Memory {
                    map,
                    kind: MemoryKind::Local(t),
                })
            }
            MemoryTransport::Shm => {
                let dir = super::cluster::shm_tempdir()?;
                let path = dir.path().join("node1.img");
                let node =
                    MemoryNode::create_shm(&path, 1, &spec).context("cannot create the memory image")?;
                if populate {
                    node.populate().context("cannot populate the memory image")?;
                }
                let (_, map) = ShmTransport::attach(std::slice::from_ref(&path)).context("cannot attach")?;
                Ok(Memory {
                    map,
                    kind: MemoryKind::Shm {
                        path,
                        populate,
                        _node: node,
                        _dir: dir,
                    },
                })
            }
            MemoryTransport::Tcp => {
                let node =
                    Arc::new(MemoryNode::anonymous(1, &spec).context("cannot create the memory node")?);
                let (addr_tx, addr_rx) = std::sync::mpsc::channel();
                let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
                let server = std::thread::Builder::new()
                    .name("bench-memnode".into())
                    .spawn(move || {
                        let rt = match tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(1)
                            .enable_all()
                            .build()
                        {
                            Ok(rt) => rt,
                            Err(e) => {
                                let _ = addr_tx.send(Err(e.to_string()));
                                return;
                            }
                        };
                        rt.block_on(async move {
                            match fabric::server::bind("127.0.0.1:0").await {
                                Ok((listener, addr)) => {
                                    let _ = addr_tx.send(Ok(addr.to_string()));
                                    let _ = fabric::server::serve(listener, node, async {
                                        let _ = stop_rx.await;
                                    })
                                    .await;
                                }
                                Err(e) => {
                                    let _ = addr_tx.send(Err(e.to_string()));
                                }
                            }
                        });
                    })
                    .context("cannot start the memory-node thread")?;
                let addr = addr_rx
                    .recv()
                    .context("the memory-node thread stopped")?
                    .map_err(anyhow::Error::msg)
                    .context("cannot start the memory-node server")?;
                let map = runtime()?.block_on(async {
                    TcpTransport::discover(std::slice::from_ref(&addr))
                        .await
                        .map(|(_, m)| m)
                })?;
                Ok(Memory {
                    map,
                    kind: MemoryKind::Tcp {
                        addr,
                        _server: server,
                        stop: Some(stop_tx),
                    },
                })
            }
        }
    }

    /// A fabric client for the calling thread (inside its runtime).
    pub async fn client(&self) -> anyhow::Result<Client> {
        let t: AnyTransport = match &self.kind {
            MemoryKind::Local(t) => t.clone().into(),
            MemoryKind::Shm { path, populate, .. } => {
                let (t, _) = ShmTransport::attach(std::slice::from_ref(path))?;
                if *populate {
                    t.populate().context("cannot map the memory image's pages")?;
                }
                t.into()
            }
            MemoryKind::Tcp { addr, .. } => {
                TcpTransport::discover(std::slice::from_ref(addr)).await?.0.into()
            }
        };
        Ok(Client::new(self.map.clone(), t))
    }
}
