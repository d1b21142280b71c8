//! A memory node that keeps a lease serves verbs only while it holds it
//! (`MemoryNode::hold_lease_until`): past it, every batch that touches it
//! is refused whole, before any of its verbs run, and the client learns
//! why (`FabricError::NodeLeaseLapsed`). The node's CPU enforces it, so the
//! transports where it executes the verbs (local, tcp) are tried; under
//! `shm` the client executes them and the epoch fence alone holds. Under
//! `rdma` the device executes them: the node's lease watcher revokes every
//! client's queue pair once it sees the lease lapsed (within
//! `rdma::LEASE_POLL`), and admits none until it is renewed; the rdma
//! variant waits for that revocation before its batches.

mod common;

use std::time::{Duration, Instant};

use common::*;
use fabric::{Batch, FabricError, Outcome, Replica};

async fn a_lapsed_node_refuses_everything_until_renewed(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    // Keeping no lease: serves.
    assert!(c.node(2).serving(), "[{kind}]");
    write_u64_all(&mut client, big(0), 111).await;

    // A lease that ended a moment ago (granted from a renewal sent then).
    c.node(2)
        .hold_lease_until(Instant::now() - Duration::from_millis(1));
    assert!(!c.node(2).serving(), "[{kind}]");
    await_revoked(&c, 2).await;
    // The primary, which keeps no lease, still serves batches that touch
    // only it.
    let r = single(&mut client, |b| b.faa(big(8), 1)).await;
    assert_eq!(r, Ok(Outcome::Old(0)), "[{kind}] node 1 serves");
    for replica in [Replica::Backup(0), Replica::All] {
        let mut b = Batch::new();
        b.on(replica).write(big(0), &222u64.to_le_bytes());
        let r = client.execute(&mut b).await;
        assert!(
            matches!(r, Err(FabricError::NodeLeaseLapsed { node: 2 })),
            "[{kind}] {replica:?}: {r:?}"
        );
        assert!(
            r.is_err_and(|e| !e.sent_nothing()),
            "[{kind}] another node's verbs may have run"
        );
    }
    // Even a READ is refused: what the node holds may be stale.
    let mut b = Batch::new();
    b.on(Replica::Backup(0)).read(big(0), 8);
    assert!(
        matches!(
            client.execute(&mut b).await,
            Err(FabricError::NodeLeaseLapsed { node: 2 })
        ),
        "[{kind}]"
    );

    // Renewed: it serves again, and ran nothing meanwhile.
    c.node(2)
        .hold_lease_until(Instant::now() + Duration::from_secs(60));
    assert!(c.node(2).serving(), "[{kind}]");
    assert_eq!(
        read_u64_on(&mut client, Replica::Backup(0), big(0)).await,
        111,
        "[{kind}]"
    );
    // An earlier grant arriving late never shortens the lease.
    c.node(2)
        .hold_lease_until(Instant::now() - Duration::from_secs(1));
    assert!(c.node(2).serving(), "[{kind}] a late, shorter grant is ignored");
}

async fn a_node_expecting_a_lease_waits_for_its_first_grant(kind: Kind) {
    let c = Cluster::build(kind, 1).await;
    let mut client = c.client();
    // What a node following the control plane does before its first
    // renewal: it may hold regions it has since lost.
    c.node(1).hold_lease_until(Instant::now());
    await_revoked(&c, 1).await;
    let mut b = Batch::new();
    b.read(big(0), 8);
    assert!(
        matches!(
            client.execute(&mut b).await,
            Err(FabricError::NodeLeaseLapsed { node: 1 })
        ),
        "[{kind}]"
    );
    c.node(1)
        .hold_lease_until(Instant::now() + Duration::from_secs(60));
    assert_eq!(
        read_u64(&mut client, big(0)).await,
        0,
        "[{kind}] served after the grant"
    );
}

/// Under rdma: waits until node `id`'s server has revoked every client
/// (its lease watcher saw the lapse); at once on other transports.
async fn await_revoked(c: &Cluster, id: u16) {
    #[cfg(feature = "rdma")]
    if c.kind == Kind::Rdma {
        let server = &c.rdma[usize::from(id) - 1];
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.clients() > 0 {
            assert!(
                Instant::now() < deadline,
                "[rdma] node {id} never revoked its clients"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let _ = (c, id);
}

#[cfg(feature = "rdma")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma() {
    a_lapsed_node_refuses_everything_until_renewed(Kind::Rdma).await;
    a_node_expecting_a_lease_waits_for_its_first_grant(Kind::Rdma).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local() {
    a_lapsed_node_refuses_everything_until_renewed(Kind::Local).await;
    a_node_expecting_a_lease_waits_for_its_first_grant(Kind::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp() {
    a_lapsed_node_refuses_everything_until_renewed(Kind::Tcp).await;
    a_node_expecting_a_lease_waits_for_its_first_grant(Kind::Tcp).await;
}
