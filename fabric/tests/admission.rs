//! Admission on the tcp data path (`fabric::admission`, `fabric::server`),
//! spoken to as an attacker would: raw frames with no credential, a forged
//! one, another cluster's, a fenced client's; while a real client is
//! served throughout.

use std::sync::Arc;
use std::time::Duration;

use fabric::transport::TcpOptions;
use fabric::wire::{self, Response};
use fabric::{
    AdmissionKey, Batch, Client, Completions, FabricError, FenceView, Gate, GlobalAddr, Holder, MemoryNode,
    RegionSpec, TcpTransport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &[u8] = b"admission-test-secret-0123456789";

fn key() -> AdmissionKey {
    AdmissionKey::derive(SECRET)
}

fn client_holder(id: u64) -> Holder {
    Holder::Client {
        id,
        owners_first: (id * 8) as u16,
        owners_count: 8,
    }
}

/// A node holding region 1 (64 KiB) behind `gate`, served on loopback.
async fn serve(gate: Gate) -> (Arc<MemoryNode>, String) {
    let node = Arc::new(
        MemoryNode::anonymous(
            1,
            &[RegionSpec {
                id: 1,
                size: 64 << 10,
            }],
        )
        .unwrap(),
    );
    node.set_gate(gate);
    let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
    tokio::spawn(fabric::server::serve(
        listener,
        node.clone(),
        std::future::pending(),
    ));
    (node, addr.to_string())
}

async fn client(addr: &str, holder: Holder) -> Result<Client, FabricError> {
    let options = TcpOptions::with_credential(key().issue(holder));
    let (t, map) = TcpTransport::discover_with(&[addr.to_owned()], options).await?;
    Ok(Client::new(map, t.into()))
}

async fn write_u64(c: &mut Client, offset: u64, v: u64) -> Result<(), FabricError> {
    let mut b = Batch::new();
    b.write(GlobalAddr::new(1, offset), &v.to_le_bytes());
    c.execute(&mut b).await
}

async fn read_u64(c: &mut Client, offset: u64) -> u64 {
    let mut b = Batch::new();
    let h = b.read(GlobalAddr::new(1, offset), 8);
    c.execute(&mut b).await.unwrap();
    u64::from_le_bytes(b.read_result(h).unwrap().try_into().unwrap())
}

/// Sends `frame` on a fresh socket and returns the node's answer, checking
/// that the node closes the connection after it.
async fn answer_to(addr: &str, frame: &[u8]) -> Response {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(frame).await.unwrap();
    let len = s.read_u32_le().await.unwrap() as usize;
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    let r = wire::decode_response(&body, &mut Completions::default()).unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the node closes the connection after {r:?}"
    );
    r
}

fn hello(credential: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    wire::encode_hello(&mut f, 1, credential);
    f
}

fn refusal(r: Response) -> String {
    match r {
        Response::Refused { reason, .. } => reason,
        other => panic!("expected a refusal, got {other:?} (which may carry region keys)"),
    }
}

/// No credential, a forged one, another cluster's, a malformed one, a
/// batch before HELLO, an oversized first frame: each gets a refusal that
/// names its reason and no region keys, and a client with a valid
/// credential is served before, between and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_without_a_valid_credential_gets_a_refusal_and_no_keys_while_a_client_is_served() {
    let (_node, addr) = serve(Gate::keyed(key())).await;
    let mut real = client(&addr, client_holder(3)).await.unwrap();
    let mut served = 0u64;
    serve_one(&mut real, &mut served).await;

    let good = key().issue(client_holder(3)).to_bytes();
    let mut forged = good;
    forged[20] ^= 0x40;
    let mut other_holder = good;
    other_holder[2] = 4; // client 4 under client 3's MAC
    let foreign = AdmissionKey::derive(b"some-other-clusters-secret-0123")
        .issue(client_holder(3))
        .to_bytes();
    let mut batch = Vec::new();
    wire::encode_batch(&mut batch, 1, 1, u64::MAX, std::iter::empty(), &[]);
    let mut oversized = Vec::new();
    oversized.extend_from_slice(&1_000_000u32.to_le_bytes());
    oversized.extend_from_slice(&[1; 64]);
    let cases: [(&str, Vec<u8>, &str); 7] = [
        ("no credential", hello(&[]), "no credential"),
        ("forged MAC", hello(&forged), "not issued by this cluster"),
        (
            "another holder under a MAC",
            hello(&other_holder),
            "not issued by this cluster",
        ),
        ("another cluster's", hello(&foreign), "not issued by this cluster"),
        ("truncated", hello(&good[..40]), "malformed credential"),
        ("batch before hello", batch, "a batch before HELLO"),
        ("oversized first frame", oversized, "HELLO of at most"),
    ];
    for (what, frame, reason) in cases {
        let why = refusal(answer_to(&addr, &frame).await);
        assert!(why.contains(reason), "{what}: {why:?}");
        serve_one(&mut real, &mut served).await;
    }
    // The same credential bytes the client uses open a second connection.
    assert!(matches!(answer_to_hello(&addr, &good).await, Response::Hello(_)));
    serve_one(&mut real, &mut served).await;
}

/// One more write and read by the real client.
async fn serve_one(real: &mut Client, served: &mut u64) {
    *served += 1;
    write_u64(real, 0, *served).await.unwrap();
    assert_eq!(read_u64(real, 0).await, *served);
}

/// A HELLO's answer, leaving the connection open.
async fn answer_to_hello(addr: &str, credential: &[u8]) -> Response {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello(credential)).await.unwrap();
    let len = s.read_u32_le().await.unwrap() as usize;
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    wire::decode_response(&body, &mut Completions::default()).unwrap()
}

/// A placed node admits nobody before it has the key and a fence view;
/// then a client the view fences is refused at HELLO and, on a connection
/// admitted before the fence, at its next batch, before any verb of it
/// runs; other clients are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_client_is_refused_before_any_verb_of_its_next_batch() {
    let (node, addr) = serve(Gate::placed()).await;
    let early = client(&addr, client_holder(7)).await;
    assert!(
        matches!(&early, Err(FabricError::Refused { reason, .. }) if reason.contains("not admitting yet")),
        "{:?}",
        early.err()
    );
    node.set_admission_key(key());
    node.follow_fence(FenceView {
        seq: 1,
        next_client: 9,
        live: vec![7, 8],
    });
    let mut seven = client(&addr, client_holder(7)).await.unwrap();
    let mut eight = client(&addr, client_holder(8)).await.unwrap();
    write_u64(&mut seven, 8, 70).await.unwrap();
    write_u64(&mut eight, 16, 80).await.unwrap();

    // Client 7 expires: the node follows the fence that says so.
    assert_eq!(
        node.follow_fence(FenceView {
            seq: 2,
            next_client: 10,
            live: vec![8, 9],
        }),
        Some(2)
    );
    let late = write_u64(&mut seven, 8, 71).await;
    assert!(
        matches!(&late, Err(FabricError::Refused { reason, .. }) if reason.contains("client 7 is fenced")),
        "{late:?}"
    );
    assert_eq!(read_u64(&mut eight, 8).await, 70, "the fenced batch ran no verb");
    let again = client(&addr, client_holder(7)).await;
    assert!(
        matches!(&again, Err(FabricError::Refused { reason, .. }) if reason.contains("fenced")),
        "{:?}",
        again.err()
    );
    // A client newer than the view, and one live in it, are served.
    let mut twelve = client(&addr, client_holder(12)).await.unwrap();
    write_u64(&mut twelve, 24, 120).await.unwrap();
    write_u64(&mut eight, 16, 81).await.unwrap();
    assert_eq!(read_u64(&mut twelve, 16).await, 81);
    // An older view does not take the fence back.
    node.follow_fence(FenceView {
        seq: 1,
        next_client: 9,
        live: vec![7, 8],
    });
    assert!(client(&addr, client_holder(7)).await.is_err());
}

/// A node whose HELLO never arrives is closed after the timeout, and a
/// flood of silent sockets beyond the unauthenticated limit closes the
/// oldest of them, so that a client connecting after them is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_beyond_the_limit_close_the_oldest_and_a_client_is_served() {
    let (_node, addr) = serve(Gate::keyed(key())).await;
    let mut silent = Vec::new();
    for _ in 0..fabric::server::UNAUTHENTICATED_MAX + 10 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    // The first ten were closed to make room: they read end-of-file.
    for s in silent.iter_mut().take(10) {
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
        assert!(matches!(n, Ok(Ok(0))), "an evicted socket is closed: {n:?}");
    }
    let mut real = client(&addr, client_holder(3)).await.unwrap();
    write_u64(&mut real, 0, 5).await.unwrap();
    assert_eq!(read_u64(&mut real, 0).await, 5);
}

/// A node that is not admitting yet (no key or fence from its control
/// plane: it just restarted) does not fail a client's join: the refusal is
/// transient, the node is connected at its next batch, and served once it
/// admits. A refusal for good (a forged credential) fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_admitting_yet_is_tried_again_and_a_bad_credential_is_not() {
    let (node, addr) = serve(Gate::placed()).await;
    let region = node.descriptor().regions[0];
    let map = fabric::ClusterMap::new(
        1,
        vec![fabric::NodeInfo {
            id: 1,
            endpoint: addr.clone(),
        }],
        vec![fabric::RegionInfo {
            id: 1,
            size: region.size,
            replicas: vec![fabric::ReplicaLoc {
                node: 1,
                key: region.key,
            }],
        }],
    )
    .unwrap();
    let options = TcpOptions::with_credential(key().issue(client_holder(7)));
    let t = TcpTransport::connect_map_with(&map, options)
        .await
        .expect("joins past a node not ready");
    node.set_admission_key(key());
    node.follow_fence(FenceView {
        seq: 1,
        next_client: 8,
        live: vec![7],
    });
    let mut c = Client::new(map.clone(), t.into());
    write_u64(&mut c, 0, 7)
        .await
        .expect("served once the node admits");
    let forged = TcpOptions::with_credential(
        AdmissionKey::derive(b"not-this-clusters-secret-012345").issue(client_holder(7)),
    );
    let r = TcpTransport::connect_map_with(&map, forged).await;
    assert!(
        matches!(&r, Err(FabricError::Refused { transient: false, .. })),
        "{:?}",
        r.err()
    );
}
