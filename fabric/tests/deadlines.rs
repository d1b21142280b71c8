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

/// A real node holding region 1 (4 KiB) with an open gate, on loopback:
/// its address.
async fn open_node() -> String {
    let node = std::sync::Arc::new(
        fabric::MemoryNode::anonymous(1, &[fabric::RegionSpec { id: 1, size: 4096 }]).unwrap(),
    );
    node.set_gate(fabric::Gate::open());
    let (listener, served) = fabric::server::bind("127.0.0.1:0").await.unwrap();
    tokio::spawn(fabric::server::serve(listener, node, std::future::pending()));
    served.to_string()
}

/// Client to node bytes are held while `hold` is set (a partition that TCP
/// will deliver through once it heals); node to client bytes flow, and the
/// node's answers to what was held are copied to `answers`.
async fn holding_proxy(
    upstream: String,
) -> (
    String,
    tokio::sync::watch::Sender<bool>,
    mpsc::UnboundedReceiver<Vec<u8>>,
    mpsc::UnboundedReceiver<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (hold, holding) = tokio::sync::watch::channel(false);
    let (answers_tx, answers) = mpsc::unbounded_channel();
    let (held_tx, held) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let up = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let (mut down_r, mut down_w) = down.into_split();
            let (mut up_r, mut up_w) = up.into_split();
            let (mut holding, answers_tx, held_tx) = (holding.clone(), answers_tx.clone(), held_tx.clone());
            let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let copied = released.clone();
            tokio::spawn(async move {
                while let Ok(len) = up_r.read_u32_le().await {
                    let mut body = vec![0; len as usize];
                    if up_r.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    if copied.load(std::sync::atomic::Ordering::Acquire) {
                        let _ = answers_tx.send(body.clone());
                    }
                    let _ = down_w.write_all(&len.to_le_bytes()).await;
                    let _ = down_w.write_all(&body).await;
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                // Read to the end (the client may close its side): what
                // was held is delivered when the hold is lifted.
                while let Ok(n @ 1..) = down_r.read(&mut buf).await {
                    if *holding.borrow() {
                        let _ = held_tx.send(());
                        if holding.wait_for(|h| !h).await.is_err() {
                            return;
                        }
                        released.store(true, std::sync::atomic::Ordering::Release);
                    }
                    if up_w.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, hold, answers, held)
}

/// A live client's batch is held in the network past its deadline. The
/// client calls it lost (not before its deadline and the clocks' drift),
/// and moves on: the word is written again. When the network delivers the
/// old batch, the node refuses it as expired and runs none of it: the
/// client's later write stands. Without the node's check, the late WRITE
/// lands over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_held_past_its_deadline_is_refused_when_the_network_delivers_it() {
    let served = open_node().await;
    let (proxy, hold, mut answers, mut held) = holding_proxy(served.clone()).await;
    let deadline = Duration::from_millis(300);
    let options = TcpOptions {
        request_deadline: deadline,
        via: vec![(served.clone(), proxy)],
        ..TcpOptions::default()
    };
    let (t, map) = TcpTransport::discover_with(std::slice::from_ref(&served), options)
        .await
        .unwrap();
    let mut late = Client::new(map, t.into());
    let word = GlobalAddr::new(1, 8);
    let write = |v: u64| {
        let mut b = Batch::new();
        b.write(word, &v.to_le_bytes());
        b
    };
    late.execute(&mut write(1))
        .await
        .expect("served through the proxy");

    hold.send_replace(true);
    let sent = Instant::now();
    let r = tokio::time::timeout(HANG, late.execute(&mut write(0xdead)))
        .await
        .expect("the held batch waited past its deadline");
    assert!(
        matches!(&r, Err(FabricError::Disconnected { reason, .. }) if reason.contains("deadline")),
        "{r:?}"
    );
    assert!(
        sent.elapsed() >= fabric::deadline::settled_after(deadline),
        "a batch is called lost only once no node can run it any more"
    );
    held.recv().await.expect("the proxy holds the batch");

    // The client moves on (another connection: the same process, healed).
    let (t, map) = TcpTransport::discover_with(&[served], TcpOptions::default())
        .await
        .unwrap();
    let mut now = Client::new(map, t.into());
    now.execute(&mut write(2)).await.expect("written again");

    // The network delivers the old batch.
    hold.send_replace(false);
    let answer = tokio::time::timeout(HANG, answers.recv())
        .await
        .expect("the node answers the late batch")
        .expect("proxy running");
    let answer = wire::decode_response(&answer, &mut fabric::Completions::default());
    assert!(
        matches!(&answer, Ok(wire::Response::Expired { .. })),
        "the late batch is refused, not run: {answer:?}"
    );
    let mut b = Batch::new();
    let h = b.read(word, 8);
    now.execute(&mut b).await.unwrap();
    assert_eq!(
        b.read_result(h).unwrap(),
        &2u64.to_le_bytes()[..],
        "the later write stands"
    );
}

/// A batch that reaches its node past its deadline while its client still
/// waits out the clocks' drift (a deadline of zero: late on arrival) is
/// refused by the node, which runs none of it, and fails at the client as
/// a lost connection (outcome unknown: on a batch spanning nodes the others
/// may have run their parts), never as a refusal for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_late_on_arrival_fails_as_a_lost_connection_and_runs_nothing() {
    let served = open_node().await;
    let late = TcpOptions {
        request_deadline: Duration::ZERO,
        ..TcpOptions::default()
    };
    let (t, map) = TcpTransport::discover_with(std::slice::from_ref(&served), late)
        .await
        .unwrap();
    let mut c = Client::new(map, t.into());
    let mut b = Batch::new();
    b.write(GlobalAddr::new(1, 8), &7u64.to_le_bytes());
    let r = tokio::time::timeout(HANG, c.execute(&mut b))
        .await
        .expect("answered");
    assert!(
        matches!(&r, Err(FabricError::Disconnected { reason, .. }) if reason.contains("past its deadline")),
        "{r:?}"
    );
    let (t, map) = TcpTransport::discover_with(&[served], TcpOptions::default())
        .await
        .unwrap();
    let mut reader = Client::new(map, t.into());
    let mut b = Batch::new();
    let h = b.read(GlobalAddr::new(1, 8), 8);
    reader.execute(&mut b).await.unwrap();
    assert_eq!(b.read_result(h).unwrap(), &[0u8; 8][..], "nothing of it ran");
}
