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
        let Ok(Request::Hello { id }) = wire::decode_request(&body, 1, &mut Vec::new()) else {
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
