//! Behaviour specific to the tcp transport: node identity checks and
//! connection lifetime. (Verb semantics over tcp are in `verbs.rs` and
//! `faults.rs`, which run on every transport.)

mod common;

use std::time::Duration;

use common::*;
use fabric::wire::{self, Request};
use fabric::{Client, ClusterMap, FabricError, NodeDescriptor, RegionDescriptor, TcpTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `connect_map` checks that each endpoint is the node the map says it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_map_checks_node_identity() {
    let c = Cluster::build(Kind::Tcp, 2).await;
    let t = TcpTransport::connect_map(&c.map).await.unwrap();
    let mut client = Client::new(c.map.clone(), t.into());
    write_u64_all(&mut client, big(0), 9).await;
    assert_eq!(read_u64(&mut c.client(), big(0)).await, 9);

    let mut nodes = c.map.nodes().to_vec();
    let (a, b) = (nodes[0].endpoint.clone(), nodes[1].endpoint.clone());
    nodes[0].endpoint = b;
    nodes[1].endpoint = a;
    let swapped = ClusterMap::new(1, nodes, c.map.regions().to_vec()).unwrap();
    let r = TcpTransport::connect_map(&swapped).await;
    assert!(
        matches!(r, Err(FabricError::Protocol { .. })),
        "swapped endpoints: {:?}",
        r.err()
    );
}

/// Reads one frame body from a raw socket.
async fn read_body(s: &mut TcpStream) -> Vec<u8> {
    let len = s.read_u32_le().await.unwrap() as usize;
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    body
}

/// Dropping every handle on a transport closes its connections, so that a
/// client that reconnects does not pile up sockets (and server connection
/// slots). Observed from a hand-written server: after the drop, the client
/// side of the socket must reach end-of-file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_transport_closes_its_connections() {
    let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let body = read_body(&mut s).await;
        let Ok(Request::Hello { id, .. }) = wire::decode_request(&body, 1, &mut Vec::new()) else {
            panic!("expected hello");
        };
        let d = NodeDescriptor {
            node: 1,
            epoch: 1,
            regions: vec![RegionDescriptor {
                id: BIG,
                size: BIG_SIZE,
                key: 7,
            }],
        };
        let mut frame = Vec::new();
        wire::encode_hello_response(&mut frame, id, &d);
        s.write_all(&frame).await.unwrap();
        // Wait for the client to close its side.
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        rest
    });

    let (t, map) = TcpTransport::discover(&[addr.to_string()]).await.unwrap();
    assert_eq!(map.epoch(), 1);
    let client = Client::new(map, t.into());
    let fork = client.fork();
    drop(client);
    drop(fork);
    // Not a timing assertion: the bound only turns a leaked connection (a
    // hang) into a failure.
    let rest = tokio::time::timeout(Duration::from_secs(20), server)
        .await
        .expect("the client kept its connection open after the transport was dropped")
        .unwrap();
    assert!(rest.is_empty(), "the client sent {} unexpected bytes", rest.len());
}

/// A connection dropped in the middle of a batch that spans two nodes: the
/// verbs before the drop ran, the rest never reached a node, the client sees
/// `Disconnected` and is not crashed, and its next batch connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_fails_one_batch_and_the_next_reconnects() {
    let c = Cluster::build(Kind::Tcp, 2).await;
    let mut inspect = c.client();
    let addr = big;
    // WRITE on the primary (verb 1), WRITE on the backup (verb 2), then a
    // CAS on the primary (verb 3): drop after verb 2.
    let (t, faults) = c.transport.clone().with_faults(fabric::FaultPlan {
        drop_after_verbs: Some(2),
        ..fabric::FaultPlan::default()
    });
    let mut client = Client::new(c.map.clone(), t);
    let mut b = fabric::Batch::new();
    b.on(fabric::Replica::All).write(addr(64), &7u64.to_le_bytes());
    let cas = b.cas(addr(128), 0, 9);
    let e = client.execute(&mut b).await.unwrap_err();
    assert!(matches!(e, FabricError::Disconnected { .. }), "{e}");
    assert!(faults.crashed().is_none(), "a dropped connection is not a crash");
    assert_eq!(
        read_u64_on(&mut inspect, fabric::Replica::Primary, addr(64)).await,
        7,
        "the primary's WRITE ran"
    );
    assert_eq!(
        read_u64_on(&mut inspect, fabric::Replica::Backup(0), addr(64)).await,
        7,
        "the backup's WRITE ran"
    );
    assert_eq!(
        read_u64(&mut inspect, addr(128)).await,
        0,
        "the CAS after the drop never ran"
    );

    // The same batch again, on new connections.
    client.execute(&mut b).await.unwrap();
    assert!(b.cas_succeeded(cas).unwrap());
    assert_eq!(read_u64(&mut inspect, addr(128)).await, 9);
    let fabric::AnyTransport::Faulty(f) = client.transport() else {
        unreachable!()
    };
    let fabric::BaseTransport::Tcp(tcp) = f.inner() else {
        unreachable!()
    };
    assert_eq!(tcp.reconnects(), 2, "one reconnection per node");
}

/// A node that goes away fails batches after a bounded number of attempts,
/// and is used again once it is back at the same address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_comes_back_is_reconnected() {
    let node = std::sync::Arc::new(fabric::MemoryNode::anonymous(1, &REGIONS).unwrap());
    let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(fabric::server::serve(listener, node.clone(), async move {
        let _ = stopped.await;
    }));
    let (t, map) = TcpTransport::discover(&[addr.to_string()]).await.unwrap();
    let mut client = Client::new(map, t.into());
    let at = big(0);
    let mut b = fabric::Batch::new();
    b.write(at, &5u64.to_le_bytes());
    client.execute(&mut b).await.unwrap();

    // The node stops serving: every connection closes.
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    let e = client.execute(&mut b).await.unwrap_err();
    assert!(matches!(e, FabricError::Disconnected { .. }), "{e}");
    // Reconnecting fails while nobody listens, after a bounded number of
    // attempts (the test's own bound only turns a hang into a failure).
    let e = tokio::time::timeout(Duration::from_secs(60), client.execute(&mut b))
        .await
        .expect("reconnection attempts are bounded")
        .unwrap_err();
    assert!(matches!(e, FabricError::Disconnected { .. }), "{e}");

    // Back at the same address: the next batch gets through.
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let (_keep, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(fabric::server::serve(listener, node.clone(), async move {
        let _ = stopped.await;
    }));
    let mut b = fabric::Batch::new();
    let h = b.read(at, 8);
    client.execute(&mut b).await.unwrap();
    assert_eq!(b.read_result(h).unwrap(), &5u64.to_le_bytes());
}

/// A batch trying to reconnect to a dead node stops as soon as the
/// process's mandate installs a map that routes nothing to the node
/// (recovery evicted it), instead of waiting out every attempt; the next
/// batch routes by that map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_stops_when_the_map_stops_routing_to_the_node() {
    let mut stops = Vec::new();
    let mut addrs = Vec::new();
    for id in 1..=2u16 {
        let node = std::sync::Arc::new(fabric::MemoryNode::anonymous(id, &REGIONS).unwrap());
        let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(fabric::server::serve(listener, node, async move {
            let _ = stopped.await;
        }));
        stops.push((stop, server));
        addrs.push(addr.to_string());
    }
    let (t, map) = TcpTransport::discover(&addrs).await.unwrap();
    let tcp = t.clone();
    let mandate = fabric::Mandate::new(map.clone(), std::time::Instant::now() + Duration::from_secs(3600));
    let mut client = Client::under(mandate.clone(), t.into());
    let at = big(0);
    write_u64_all(&mut client, at, 5).await;

    // Node 1, the primary, dies; a batch for it tries to reconnect. (One
    // sent before the connection was seen broken fails at once, whatever
    // the map: then the next one.)
    let (stop, server) = stops.remove(0);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    let (before, retry) = loop {
        let before = tcp.reconnect_attempts();
        let retry = tokio::spawn(async move {
            let mut b = fabric::Batch::new();
            b.write(at, &6u64.to_le_bytes());
            let r = client.execute(&mut b).await;
            (client, r)
        });
        while tcp.reconnect_attempts() == before && !retry.is_finished() {
            tokio::task::yield_now().await;
        }
        if tcp.reconnect_attempts() > before {
            break (before, retry);
        }
        let (c, r) = retry.await.unwrap();
        assert!(
            matches!(r, Err(FabricError::Disconnected { node: 1, .. })),
            "{r:?}"
        );
        client = c;
    };

    // Recovery's map: node 2 holds every region alone.
    let mut regions = map.regions().to_vec();
    for r in &mut regions {
        r.replicas.retain(|l| l.node == 2);
    }
    let evicted = ClusterMap::new(2, map.nodes().to_vec(), regions).unwrap();
    assert!(mandate.install(evicted).unwrap());
    let (mut client, r) = retry.await.unwrap();
    match r {
        Err(FabricError::Disconnected { node: 1, reason }) => {
            assert!(reason.contains("no longer routes"), "{reason}")
        }
        other => panic!("expected node 1 given up, got {other:?}"),
    }
    let tried = tcp.reconnect_attempts() - before;
    assert!(
        tried < u64::from(fabric::transport::RECONNECT_ATTEMPTS_MAX),
        "{tried} attempts: the map's change did not stop them"
    );
    // Routed by the new map: node 2 is the primary now.
    write_u64_all(&mut client, at, 7).await;
    assert_eq!(read_u64(&mut client, at).await, 7);
}
