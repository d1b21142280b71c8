//! Epoch fencing on every transport: a batch from an older map is refused
//! by each node whose epoch moved on, before any of its verbs run.

mod common;

use common::*;
use fabric::{Batch, Client, FabricError, LocalTransport, Outcome, Replica, ShmTransport, TcpTransport};

on_every_transport!(
    stale_epoch_is_fenced,
    partly_stale_batch_names_the_stale_node,
    a_fresh_transport_learns_the_new_epoch,
);

async fn stale_epoch_is_fenced(kind: Kind) {
    for replicas in [1u16, 2] {
        let c = Cluster::build(kind, replicas).await;
        let reps = replicas_of(replicas);
        let mut old = c.client();
        assert_eq!(old.map().epoch(), 1, "[{kind}] fresh nodes are at epoch 1");
        write_u64_all(&mut old, big(0), 111).await;
        write_u64_all(&mut old, big(8), 5).await;

        for n in &c.nodes {
            assert_eq!(n.advance_epoch(5), 5, "[{kind}]");
            assert_eq!(n.advance_epoch(3), 5, "[{kind}] the epoch never goes back");
            assert_eq!(n.epoch(), 5, "[{kind}]");
        }

        let before = old.stats();
        let mut b = Batch::new();
        b.on(Replica::All).write(big(0), &222u64.to_le_bytes());
        b.on(Replica::All).faa(big(8), 1);
        b.on(Replica::All).cas(big(16), 0, 9);
        match old.execute(&mut b).await {
            Err(FabricError::StaleEpoch {
                node,
                client_epoch,
                node_epoch,
            }) => {
                assert!((1..=replicas).contains(&node), "[{kind}] stale node {node}");
                assert_eq!((client_epoch, node_epoch), (1, 5), "[{kind}]");
            }
            other => panic!("[{kind}] {replicas} replicas: expected StaleEpoch, got {other:?}"),
        }
        assert_eq!(
            (old.stats() - before).round_trips,
            1,
            "[{kind}] a fenced batch is still a round trip"
        );

        // Nothing of the fenced batch ran, on any replica.
        let mut fresh = c.client_with_map(c.map.with_epoch(5));
        for &r in &reps {
            assert_eq!(
                read_u64_on(&mut fresh, r, big(0)).await,
                111,
                "[{kind}] fenced WRITE on {r:?}"
            );
            assert_eq!(
                read_u64_on(&mut fresh, r, big(8)).await,
                5,
                "[{kind}] fenced FAA on {r:?}"
            );
            assert_eq!(
                read_u64_on(&mut fresh, r, big(16)).await,
                0,
                "[{kind}] fenced CAS on {r:?}"
            );
        }
        // The client at the new epoch works.
        write_u64_all(&mut fresh, big(0), 333).await;
        for &r in &reps {
            assert_eq!(
                read_u64_on(&mut fresh, r, big(0)).await,
                333,
                "[{kind}] new-epoch WRITE"
            );
        }
        // The old client stays fenced, even for a READ, until it takes the new map.
        let mut b = Batch::new();
        b.read(big(0), 8);
        let r = old.execute(&mut b).await;
        assert!(
            matches!(r, Err(FabricError::StaleEpoch { .. })),
            "[{kind}] stale READ: {r:?}"
        );
        old.set_map(c.map.with_epoch(5));
        assert_eq!(read_u64(&mut old, big(0)).await, 333, "[{kind}] refreshed client");
        // A map ahead of the node is accepted.
        let mut ahead = c.client_with_map(c.map.with_epoch(9));
        assert_eq!(
            read_u64(&mut ahead, big(0)).await,
            333,
            "[{kind}] client ahead of the node"
        );
    }
}

async fn partly_stale_batch_names_the_stale_node(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    let mut client = c.client();
    c.node(2).advance_epoch(2);

    // Batches that touch only the primary still run.
    let r = single(&mut client, |b| b.faa(big(0), 1)).await;
    assert_eq!(r, Ok(Outcome::Old(0)), "[{kind}] node 1 is not fenced");
    // Batches that touch the backup are fenced by it.
    for replica in [Replica::Backup(0), Replica::All] {
        let mut b = Batch::new();
        b.on(replica).write(big(8), b"fenced");
        let r = client.execute(&mut b).await;
        assert!(
            matches!(
                r,
                Err(FabricError::StaleEpoch {
                    node: 2,
                    client_epoch: 1,
                    node_epoch: 2
                })
            ),
            "[{kind}] {replica:?}: {r:?}"
        );
    }
    let mut fresh = c.client_with_map(c.map.with_epoch(2));
    let got = read_on(&mut fresh, Replica::Backup(0), big(8), 6).await;
    assert_eq!(got, [0; 6], "[{kind}] the stale node ran nothing");
}

async fn a_fresh_transport_learns_the_new_epoch(kind: Kind) {
    let c = Cluster::build(kind, 2).await;
    for n in &c.nodes {
        n.advance_epoch(7);
    }
    let endpoints: Vec<String> = c.map.nodes().iter().map(|n| n.endpoint.clone()).collect();
    let (transport, map): (fabric::AnyTransport, _) = match kind {
        Kind::Local => {
            for n in &c.nodes {
                assert_eq!(n.descriptor().epoch, 7, "[{kind}]");
            }
            (LocalTransport::new(c.nodes.clone()).into(), c.map.with_epoch(7))
        }
        Kind::Shm => {
            let paths: Vec<std::path::PathBuf> = endpoints.iter().map(Into::into).collect();
            let (t, map) = ShmTransport::attach(&paths).unwrap();
            assert_eq!(
                t.node(2).unwrap().epoch(),
                7,
                "[{kind}] the attached image shows the epoch"
            );
            (t.into(), map)
        }
        Kind::Tcp => {
            let (t, map) = TcpTransport::discover(&endpoints).await.unwrap();
            // connect_map reaches the same nodes from a map alone.
            let again = TcpTransport::connect_map(&map).await.unwrap();
            let mut other = Client::new(map.clone(), again.into());
            write_u64_all(&mut other, big(0), 1).await;
            (t.into(), map)
        }
        #[cfg(feature = "rdma")]
        Kind::Rdma => {
            let (t, map) = fabric::RdmaTransport::discover(&endpoints).await.unwrap();
            // connect_map reaches the same nodes from a map alone.
            let again = fabric::RdmaTransport::connect_map(&map).unwrap();
            let mut other = Client::new(map.clone(), again.into());
            write_u64_all(&mut other, big(0), 1).await;
            (t.into(), map)
        }
    };
    assert_eq!(
        map.epoch(),
        7,
        "[{kind}] a transport built now gets the nodes' epoch"
    );
    assert_eq!(
        map.regions(),
        c.map.regions(),
        "[{kind}] same regions, keys and replica order"
    );
    let mut client = Client::new(map, transport);
    let mut b = Batch::new();
    let h = b.on(Replica::All).faa(big(24), 1);
    client.execute(&mut b).await.unwrap();
    assert_eq!(
        b.completions(h),
        [Ok(Outcome::Old(0)), Ok(Outcome::Old(0))],
        "[{kind}]"
    );
}

/// A node of the map whose image did not exist yet when the transport was
/// made (a memory node registers, then creates its image) is reached once
/// it exists: the batch that finds it unknown fails, and the next one,
/// under the same map, runs.
#[tokio::test]
async fn a_node_unreachable_at_connect_is_reached_at_a_later_batch() {
    let dir = tempfile::tempdir().unwrap();
    // The nodes own their images: kept to the end.
    let (_nodes, paths): (Vec<_>, Vec<_>) = (1..=2u16)
        .map(|id| {
            let path = dir.path().join(format!("node{id}.img"));
            (fabric::MemoryNode::create_shm(&path, id, &REGIONS).unwrap(), path)
        })
        .unzip();
    let (_, map) = ShmTransport::attach(&paths).unwrap();
    let away = dir.path().join("node2.away");
    std::fs::rename(&paths[1], &away).unwrap();
    let t = ShmTransport::attach_map(&map).unwrap();
    let mut c = Client::new(map.clone(), t.into());
    let mut b = Batch::new();
    b.on(Replica::Backup(0)).write(big(0), &7u64.to_le_bytes());
    match c.execute(&mut b).await {
        Err(FabricError::UnknownNode { node: 2 }) => {}
        other => panic!("expected node 2 unknown, got {other:?}"),
    }
    std::fs::rename(&away, &paths[1]).unwrap();
    write_on(&mut c, Replica::Backup(0), big(0), &7u64.to_le_bytes()).await;
    assert_eq!(read_u64_on(&mut c, Replica::Backup(0), big(0)).await, 7);
}
