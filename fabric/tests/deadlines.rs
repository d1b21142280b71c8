//! Nothing on the tcp data path waits for ever: a node that never answers a
//! batch (black-holed, or stuck while it still renews its lease), one that
//! never answers HELLO, and one the map evicts while a batch waits on it.

use std::time::{Duration, Instant};

use fabric::transport::TcpOptions;
use fabric::wire::{self, Request};
use fabric::{
    Batch, Client, ClusterMap, FabricError, GlobalAddr, Mandate, NodeDescriptor, NodeInfo, RegionDescriptor,
    RegionInfo, ReplicaLoc, TcpTransport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Turns a hang into a failure; never decides an outcome.
const HANG: Duration = Duration::from_secs(30);

/// A node that answers HELLO (`hello`) and then swallows every batch; or,
/// without `hello`, answers nothing at all. Says on the channel each time
/// bytes of a batch arrive.
async fn silent_node(hello: bool) -> (String, mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                if hello {
                    let len = s.read_u32_le().await.unwrap() as usize;
                    let mut body = vec![0; len];
                    s.read_exact(&mut body).await.unwrap();
                    let Ok(Request::Hello { id, .. }) = wire::decode_request(&body, 1, &mut Vec::new())
                    else {
                        panic!("expected hello");
                    };
                    let d = NodeDescriptor {
                        node: 1,
                        epoch: 1,
                        regions: vec![RegionDescriptor {
                            id: 1,
                            size: 4096,
                            key: 7,
                        }],
                    };
                    let mut frame = Vec::new();
                    wire::encode_hello_response(&mut frame, id, &d);
                    s.write_all(&frame).await.unwrap();
                }
                // Reads and drops whatever comes, answering nothing.
                let mut sink = vec![0u8; 4096];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {
                    let _ = tx.send(());
                }
            });
        }
    });
    (addr, rx)
}

fn write_batch() -> Batch {
    let mut b = Batch::new();
    b.write(GlobalAddr::new(1, 8), &1u64.to_le_bytes());
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_to_a_node_that_never_answers_fails_at_its_deadline_as_a_lost_connection() {
    let (addr, _) = silent_node(true).await;
    let options = TcpOptions {
        request_deadline: Duration::from_millis(200),
        ..TcpOptions::default()
    };
    let (t, map) = TcpTransport::discover_with(&[addr], options).await.unwrap();
    let mut c = Client::new(map, t.into());
    let r = tokio::time::timeout(HANG, c.execute(&mut write_batch()))
        .await
        .expect("the batch waited past any deadline");
    assert!(
        matches!(&r, Err(FabricError::Disconnected { reason, .. }) if reason.contains("deadline") && reason.contains("unknown")),
        "{r:?}"
    );
    // The connection was given up: the next batch connects again (and
    // meets the same silence).
    let again = tokio::time::timeout(HANG, c.execute(&mut write_batch()))
        .await
        .expect("hung");
    assert!(
        matches!(again, Err(FabricError::Disconnected { .. })),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_node_that_never_says_hello_times_out() {
    let (addr, _) = silent_node(false).await;
    let options = TcpOptions {
        connect_timeout: Duration::from_millis(200),
        ..TcpOptions::default()
    };
    let r = tokio::time::timeout(HANG, TcpTransport::discover_with(&[addr], options))
        .await
        .expect("connecting waited past its timeout");
    assert!(
        matches!(&r, Err(FabricError::Disconnected { reason, .. }) if reason.contains("took over")),
        "{:?}",
        r.err()
    );
}

/// A batch waits on a node that answers nothing; the deadline is far off.
/// The process's map stops routing to the node (recovery evicted it): the
/// batch fails at once, as a lost connection, and its caller routes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waiting_on_a_node_the_map_evicts_fails_at_the_eviction() {
    let (silent, mut arrived) = silent_node(true).await;
    let node = |id, endpoint: &str| NodeInfo {
        id,
        endpoint: endpoint.to_owned(),
    };
    let region_on = |n| RegionInfo {
        id: 1,
        size: 4096,
        replicas: vec![ReplicaLoc { node: n, key: 7 }],
    };
    let before = ClusterMap::new(
        1,
        vec![node(1, &silent), node(2, "127.0.0.1:9")],
        vec![region_on(1)],
    )
    .unwrap();
    let options = TcpOptions {
        request_deadline: Duration::from_secs(3600),
        ..TcpOptions::default()
    };
    let t = TcpTransport::connect_map_with(&before, options).await.unwrap();
    let mandate = Mandate::new(before.clone(), Instant::now() + Duration::from_secs(3600));
    let mut c = Client::under(mandate.clone(), t.into());
    let waiting = tokio::spawn(async move { c.execute(&mut write_batch()).await });
    arrived.recv().await.expect("the batch reaches the node");
    // The batch waits for its answer; the map moves the region away.
    let after = ClusterMap::new(2, before.nodes().to_vec(), vec![region_on(2)]).unwrap();
    assert_eq!(mandate.install(after), Ok(true));
    let r = tokio::time::timeout(HANG, waiting)
        .await
        .expect("the batch kept waiting on an evicted node")
        .unwrap();
    assert!(
        matches!(&r, Err(FabricError::Disconnected { reason, .. }) if reason.contains("no longer routes")),
        "{r:?}"
    );
}
