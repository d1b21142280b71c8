//! Helpers for tests of a local cluster of real processes (`kintsugi
//! cluster up`'s `LocalCluster`) driven through the client library.

use std::path::Path;

use harness::local::{ClusterFile, LocalClusterSpec};
use kintsugi::cluster::ClusterOptions;

/// The binary under test.
pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kintsugi"))
}

/// A small cluster in `dir`: 3 members, `nodes` shm memory nodes of 256 MiB,
/// replication `replicas`, client leases of `lease`.
pub fn spec(dir: &Path, nodes: usize, replicas: u8, lease: &str) -> LocalClusterSpec {
    spec_over(dir, nodes, replicas, lease, "shm")
}

/// [`spec`] over `transport` (`shm` or `tcp`).
pub fn spec_over(dir: &Path, nodes: usize, replicas: u8, lease: &str, transport: &str) -> LocalClusterSpec {
    let text = format!(
        "dir = {dir:?}\n[memory]\nnodes = {nodes}\ncapacity = \"256MiB\"\ntransport = \"{transport}\"\n\
         [indexes]\nreplicas = {replicas}\n[timing]\nclient_lease = \"{lease}\"\n"
    );
    LocalClusterSpec::parse(&text, "test").unwrap()
}

/// Client options named `name`: the cluster's replication, 32 MiB indexes.
pub fn options(name: &str, file: &ClusterFile) -> ClusterOptions {
    ClusterOptions {
        name: name.into(),
        replicas: file.replicas,
        index_bytes: 32 << 20,
        ..ClusterOptions::default()
    }
}
