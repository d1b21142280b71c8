//! Test harness: the same cluster on each transport.
//!
//! [`Cluster::build`] creates `replicas` memory nodes (ids 1..=replicas), each
//! holding the same regions ([`REGIONS`]), so node 1 is the primary of every
//! region and node 2 (if any) its backup `Backup(0)`. The nodes are reached
//! through one of the three transports:
//!
//! - `local`: [`LocalTransport::cluster`];
//! - `shm`: [`MemoryNode::create_shm`] on files in a fresh `TempDir`, then
//!   [`ShmTransport::attach`];
//! - `tcp`: anonymous nodes served in-process by [`fabric::server::serve`] on
//!   `127.0.0.1:0` inside the test's runtime, then [`TcpTransport::discover`];
//! - `rdma` (cargo feature `rdma`): anonymous nodes served in-process by
//!   [`fabric::rdma::RdmaServer`] (control channel on `127.0.0.1:0`), then
//!   `RdmaTransport::discover`. Needs an RDMA device: the soft-RoCE VM
//!   (`deploy/rdma-vm/test.sh`) runs these tests; without one they fail.
//!
//! Every semantic test runs once per transport; assertion messages start with
//! the transport's name.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

use std::fmt;
use std::sync::Arc;

use fabric::{
    AnyTransport, BaseTransport, Batch, Client, ClusterMap, FaultPlan, Faulty, GlobalAddr, LocalTransport,
    MemoryNode, RegionId, RegionSpec, Replica, ShmTransport, TcpTransport,
};
use tokio::sync::oneshot;

/// A region big enough for the tests' data.
pub const BIG: RegionId = 1;
/// Size of [`BIG`].
pub const BIG_SIZE: u64 = 4096;
/// A small region, for bounds tests.
pub const SMALL: RegionId = 7;
/// Size of [`SMALL`].
pub const SMALL_SIZE: u64 = 64;
/// A region id no node holds.
pub const MISSING: RegionId = 9;

/// The regions every node holds.
pub const REGIONS: [RegionSpec; 2] = [
    RegionSpec {
        id: BIG,
        size: BIG_SIZE,
    },
    RegionSpec {
        id: SMALL,
        size: SMALL_SIZE,
    },
];

/// An address in [`BIG`].
pub fn big(offset: u64) -> GlobalAddr {
    GlobalAddr::new(BIG, offset)
}

/// An address in [`SMALL`].
pub fn small(offset: u64) -> GlobalAddr {
    GlobalAddr::new(SMALL, offset)
}

/// The transports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Local,
    Shm,
    Tcp,
    #[cfg(feature = "rdma")]
    Rdma,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Local => "local",
            Kind::Shm => "shm",
            Kind::Tcp => "tcp",
            #[cfg(feature = "rdma")]
            Kind::Rdma => "rdma",
        })
    }
}

/// A running cluster on one transport. Dropping it stops the tcp servers and
/// removes the shm images.
pub struct Cluster {
    pub kind: Kind,
    /// The map the transport produced (epoch 1, node 1 primary).
    pub map: ClusterMap,
    /// The plain transport (no faults).
    pub transport: AnyTransport,
    /// The memory nodes, in id order (node 1 first). For shm these are the
    /// creators' handles on the images the transport attached to.
    pub nodes: Vec<Arc<MemoryNode>>,
    _dir: Option<tempfile::TempDir>,
    _stop: Vec<oneshot::Sender<()>>,
    #[cfg(feature = "rdma")]
    /// The rdma servers, in node order (empty on other transports).
    pub rdma: Vec<fabric::rdma::RdmaServer>,
}

impl Cluster {
    /// Builds `replicas` nodes holding [`REGIONS`] and connects to them.
    pub async fn build(kind: Kind, replicas: u16) -> Cluster {
        assert!((1..=2).contains(&replicas));
        match kind {
            Kind::Local => {
                let (t, map) = LocalTransport::cluster(replicas, &REGIONS).unwrap();
                let nodes = (1..=replicas).map(|id| t.node(id).unwrap().clone()).collect();
                Cluster {
                    kind,
                    map,
                    transport: t.into(),
                    nodes,
                    _dir: None,
                    _stop: Vec::new(),
                    #[cfg(feature = "rdma")]
                    rdma: Vec::new(),
                }
            }
            Kind::Shm => {
                let dir = tempfile::tempdir().unwrap();
                let mut nodes = Vec::new();
                let mut paths = Vec::new();
                for id in 1..=replicas {
                    let path = dir.path().join(format!("node{id}.img"));
                    nodes.push(Arc::new(MemoryNode::create_shm(&path, id, &REGIONS).unwrap()));
                    paths.push(path);
                }
                let (t, map) = ShmTransport::attach(&paths).unwrap();
                Cluster {
                    kind,
                    map,
                    transport: t.into(),
                    nodes,
                    _dir: Some(dir),
                    _stop: Vec::new(),
                    #[cfg(feature = "rdma")]
                    rdma: Vec::new(),
                }
            }
            Kind::Tcp => {
                let mut nodes = Vec::new();
                let mut addrs = Vec::new();
                let mut stop = Vec::new();
                for id in 1..=replicas {
                    let node = Arc::new(MemoryNode::anonymous(id, &REGIONS).unwrap());
                    let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
                    let (tx, rx) = oneshot::channel::<()>();
                    tokio::spawn(fabric::server::serve(listener, node.clone(), async move {
                        let _ = rx.await;
                    }));
                    nodes.push(node);
                    addrs.push(addr.to_string());
                    stop.push(tx);
                }
                let (t, map) = TcpTransport::discover(&addrs).await.unwrap();
                Cluster {
                    kind,
                    map,
                    transport: t.into(),
                    nodes,
                    _dir: None,
                    _stop: stop,
                    #[cfg(feature = "rdma")]
                    rdma: Vec::new(),
                }
            }
            #[cfg(feature = "rdma")]
            Kind::Rdma => {
                let mut nodes = Vec::new();
                let mut servers = Vec::new();
                for id in 1..=replicas {
                    let node = Arc::new(MemoryNode::anonymous(id, &REGIONS).unwrap());
                    let server = fabric::rdma::RdmaServer::start(node.clone(), "127.0.0.1:0")
                        .unwrap_or_else(|e| panic!("[rdma] cannot serve memory node {id}: {e}"));
                    nodes.push(node);
                    servers.push(server);
                }
                let addrs: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
                let (t, map) = fabric::RdmaTransport::discover(&addrs).await.unwrap();
                Cluster {
                    kind,
                    map,
                    transport: t.into(),
                    nodes,
                    _dir: None,
                    _stop: Vec::new(),
                    rdma: servers,
                }
            }
        }
    }

    /// The node with this id.
    pub fn node(&self, id: u16) -> &MemoryNode {
        self.nodes.iter().find(|n| n.id() == id).unwrap()
    }

    /// A client with the cluster's own map.
    pub fn client(&self) -> Client {
        Client::new(self.map.clone(), self.transport.clone())
    }

    /// A client that routes with `map` over the cluster's transport.
    pub fn client_with_map(&self, map: ClusterMap) -> Client {
        Client::new(map, self.transport.clone())
    }

    /// A client with faults injected, and the handle to inspect them.
    pub fn faulty_client(&self, plan: FaultPlan) -> (Client, Arc<Faulty<BaseTransport>>) {
        let (t, faults) = self.transport.clone().with_faults(plan);
        (Client::new(self.map.clone(), t), faults)
    }
}

/// Runs a one-verb batch: READ `len` bytes at `addr` on `replica`.
pub async fn read_on(client: &mut Client, replica: Replica, addr: GlobalAddr, len: u32) -> Vec<u8> {
    let mut b = Batch::new();
    let h = b.on(replica).read(addr, len);
    client.execute(&mut b).await.unwrap();
    b.read_result(h).unwrap().to_vec()
}

/// READ from the primary.
pub async fn read(client: &mut Client, addr: GlobalAddr, len: u32) -> Vec<u8> {
    read_on(client, Replica::Primary, addr, len).await
}

/// READ an 8-byte little-endian word from `replica`.
pub async fn read_u64_on(client: &mut Client, replica: Replica, addr: GlobalAddr) -> u64 {
    u64::from_le_bytes(read_on(client, replica, addr, 8).await.try_into().unwrap())
}

/// READ an 8-byte little-endian word from the primary.
pub async fn read_u64(client: &mut Client, addr: GlobalAddr) -> u64 {
    read_u64_on(client, Replica::Primary, addr).await
}

/// Runs a one-verb batch: WRITE `data` at `addr` on `replica`.
pub async fn write_on(client: &mut Client, replica: Replica, addr: GlobalAddr, data: &[u8]) {
    let mut b = Batch::new();
    let h = b.on(replica).write(addr, data);
    client.execute(&mut b).await.unwrap();
    b.done(h).unwrap();
}

/// WRITE to the primary.
pub async fn write(client: &mut Client, addr: GlobalAddr, data: &[u8]) {
    write_on(client, Replica::Primary, addr, data).await
}

/// WRITE an 8-byte little-endian word to every replica.
pub async fn write_u64_all(client: &mut Client, addr: GlobalAddr, v: u64) {
    write_on(client, Replica::All, addr, &v.to_le_bytes()).await
}

/// The same map with the key of `region` on every replica replaced by a wrong one.
pub fn map_with_wrong_key(map: &ClusterMap, region: RegionId) -> ClusterMap {
    let mut regions = map.regions().to_vec();
    for r in regions.iter_mut().filter(|r| r.id == region) {
        for rep in &mut r.replicas {
            rep.key = rep.key.wrapping_add(1);
        }
    }
    ClusterMap::new(map.epoch(), map.nodes().to_vec(), regions).unwrap()
}

/// The same map plus region [`MISSING`] (size 4096) claimed to be on every
/// node (in node order), which none of them holds.
pub fn map_with_missing_region(map: &ClusterMap) -> ClusterMap {
    let mut regions = map.regions().to_vec();
    let key = regions[0].replicas[0].key;
    regions.push(fabric::RegionInfo {
        id: MISSING,
        size: 4096,
        replicas: map
            .nodes()
            .iter()
            .map(|n| fabric::ReplicaLoc { node: n.id, key })
            .collect(),
    });
    ClusterMap::new(map.epoch(), map.nodes().to_vec(), regions).unwrap()
}

/// Generates, for each listed `async fn name(kind: Kind)`, a module `name`
/// with one `#[tokio::test]` per transport: `name::local`, `name::shm`,
/// `name::tcp`, and `name::rdma` with the `rdma` feature.
#[macro_export]
macro_rules! on_every_transport {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use super::common::Kind;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn local() {
                    super::$name(Kind::Local).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn shm() {
                    super::$name(Kind::Shm).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn tcp() {
                    super::$name(Kind::Tcp).await
                }

                #[cfg(feature = "rdma")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn rdma() {
                    super::$name(Kind::Rdma).await
                }
            }
        )*
    };
}

/// Runs a batch holding one verb and returns that verb's completion.
pub async fn single(
    client: &mut Client,
    push: impl FnOnce(&mut fabric::Batch) -> fabric::VerbHandle,
) -> fabric::Completion {
    let mut b = fabric::Batch::new();
    let h = push(&mut b);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.completions(h).len(), 1);
    b.completion(h)
}

/// The targets of each replica of a region with `replicas` replicas, primary first.
pub fn replicas_of(replicas: u16) -> Vec<Replica> {
    (0..replicas)
        .map(|i| {
            if i == 0 {
                Replica::Primary
            } else {
                Replica::Backup((i - 1) as u8)
            }
        })
        .collect()
}
