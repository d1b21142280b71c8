//! What only the rdma transport has: queue pairs admitted and revoked by
//! the node over its control channel, a region table the client checks
//! verbs against, and a control channel that must survive hostile peers.
//! Needs an RDMA device: `deploy/rdma-vm/test.sh` runs these in a VM with
//! soft-RoCE.
#![cfg(feature = "rdma")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use fabric::{Batch, Client, FabricError, Outcome, RdmaTransport, RegionInfo, ReplicaLoc};

/// Waits (bounded) until `done` holds: the server's threads act on their own.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_rise_revokes_every_queue_pair_and_the_next_batch_connects_anew() {
    let c = Cluster::build(Kind::Rdma, 1).await;
    let addrs = vec![c.rdma[0].addr().to_string()];
    let (t, map) = RdmaTransport::discover(&addrs).await.unwrap();
    let mut client = Client::new(map.clone(), t.clone().into());
    write(&mut client, big(0), &7u64.to_le_bytes()).await;
    assert_eq!(t.connects(), 1);
    until("both transports connected", || c.rdma[0].clients() == 2).await;

    // Returns once every client has revoked its side.
    assert_eq!(c.node(1).advance_epoch(2), 2);
    until("revoked clients forgotten", || c.rdma[0].clients() == 0).await;

    // The old map is refused at admission, before any verb.
    let mut b = Batch::new();
    b.write(big(0), &8u64.to_le_bytes());
    match client.execute(&mut b).await {
        Err(FabricError::StaleEpoch {
            node: 1,
            client_epoch: 1,
            node_epoch: 2,
        }) => {}
        other => panic!("expected StaleEpoch, got {other:?}"),
    }
    // The new map is admitted on a new queue pair and sees the old value.
    client.set_map(map.with_epoch(2));
    assert_eq!(read_u64(&mut client, big(0)).await, 7);
    assert_eq!(t.connects(), 2, "one connection per admission");
    assert_eq!(c.rdma[0].clients(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_leaves_no_queue_pair_behind() {
    let c = Cluster::build(Kind::Rdma, 2).await;
    {
        let addrs: Vec<String> = c.rdma.iter().map(|s| s.addr().to_string()).collect();
        let (t, map) = RdmaTransport::discover(&addrs).await.unwrap();
        let mut client = Client::new(map, t.into());
        write_u64_all(&mut client, big(0), 1).await;
        until("connected", || c.rdma.iter().all(|s| s.clients() == 2)).await;
    }
    until("the gone client's queue pairs freed", || {
        c.rdma.iter().all(|s| s.clients() == 1)
    })
    .await;
    // The cluster's own client is unaffected.
    let mut own = c.client();
    assert_eq!(read_u64(&mut own, big(0)).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_placed_after_connecting_is_found_by_asking_the_node_again() {
    // A node placed by a control plane: capacity, and regions added later.
    let (node, _) = fabric::MemoryNode::placed(1, 1 << 20, &fabric::Backing::Anonymous).unwrap();
    let node = std::sync::Arc::new(node);
    let key = 0x5eed;
    assert!(node.add_region(BIG, BIG_SIZE, key).unwrap());
    let server = fabric::rdma::RdmaServer::start(node.clone(), "127.0.0.1:0").unwrap();
    let (t, map) = RdmaTransport::discover(&[server.addr().to_string()])
        .await
        .unwrap();
    let mut client = Client::new(map.clone(), t.clone().into());
    write(&mut client, big(0), &1u64.to_le_bytes()).await;
    // Placed after the client connected.
    assert!(node.add_region(MISSING, 4096, key).unwrap());
    let mut regions = map.regions().to_vec();
    for id in [MISSING, MISSING + 1] {
        regions.push(RegionInfo {
            id,
            size: 4096,
            replicas: vec![ReplicaLoc { node: 1, key }],
        });
    }
    let placed_map = fabric::ClusterMap::new(map.epoch(), map.nodes().to_vec(), regions).unwrap();
    let mut placed = Client::new(placed_map, t.into());
    let addr = fabric::GlobalAddr::new(MISSING, 64);
    let r = single(&mut placed, |b| b.faa(addr, 5)).await;
    assert_eq!(r, Ok(Outcome::Old(0)));
    assert_eq!(read_u64(&mut placed, addr).await, 5);
    // A region the node does not hold, even after asking: refused as the
    // node would refuse it, and the verbs after it flushed.
    let mut b = Batch::new();
    let ok = b.read(addr, 8);
    let bad = b.read(fabric::GlobalAddr::new(MISSING + 1, 0), 8);
    let after = b.faa(addr, 1);
    placed.execute(&mut b).await.unwrap();
    assert_eq!(b.read_result(ok).unwrap(), 5u64.to_le_bytes());
    assert_eq!(
        b.completion(bad),
        Err(fabric::VerbError::UnknownRegion { region: MISSING + 1 })
    );
    assert_eq!(b.completion(after), Err(fabric::VerbError::Flushed));
    assert_eq!(
        read_u64(&mut placed, addr).await,
        5,
        "the flushed FAA did not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_control_connections_are_closed_and_the_node_keeps_serving() {
    let c = Cluster::build(Kind::Rdma, 1).await;
    let addr = c.rdma[0].addr();
    let answer = |bytes: &[u8]| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(bytes).unwrap();
        let mut got = Vec::new();
        // The node answers (or not) and closes: read to the end.
        let _ = s.read_to_end(&mut got);
        got
    };
    // A length prefix over the limit: closed without an answer.
    assert!(answer(&u32::MAX.to_le_bytes()).is_empty());
    // Not JSON.
    let mut junk = 4u32.to_le_bytes().to_vec();
    junk.extend_from_slice(b"\xff\xfe{]");
    assert!(answer(&junk).is_empty());
    // Valid JSON, but not a hello: refused with a reason.
    let body = br#""Regions""#;
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    let got = answer(&frame);
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("Refused") && text.contains("Hello"), "{text}");
    // Connected and gone at once.
    drop(TcpStream::connect(addr).unwrap());

    let mut client = c.client();
    write(&mut client, big(8), &3u64.to_le_bytes()).await;
    assert_eq!(read_u64(&mut client, big(8)).await, 3);
    until("only the real client left", || c.rdma[0].clients() == 1).await;
}
