//! The data path as an attacker and a partition see it, against real
//! `kintsugi memnode` processes: silent sockets do not lock clients out, and
//! an expired client's frames, held in the network until its owner ids have
//! an heir, run no verb when they arrive.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use cluster::{Cluster, ClusterOptions};
use control_plane::api::{ControlClient, MemberInfo};
use control_plane::config::{Role, Settings, Token};
use control_plane::member::{Member, MemberOptions};
use control_plane::network::{ClusterSecret, Partition};
use control_plane::state::{Command, MemNodeState};
use fabric::wire::{self, Response};
use fabric::{Batch, Completions, GlobalAddr, TcpTransport};
use support::proxy::HoldingProxy;
use support::MemnodeProcess;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const TOKEN: &str = "data-path-test-token-0123456789";
/// Bound on every wait; no wait decides an outcome.
const WAIT: Duration = Duration::from_secs(60);

/// A thousand sockets that connect and never speak, all held open, do not
/// keep a client from connecting and being served (the node closes the
/// oldest unauthenticated ones, and those that stay silent time out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_sockets_do_not_lock_a_client_out() {
    let node = MemnodeProcess::start(&["--region", "1:1MiB"]);
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(TcpStream::connect(&node.addr).await.expect("connect"));
    }
    for round in 0..3u64 {
        let (t, map) = TcpTransport::discover_with(std::slice::from_ref(&node.addr), support::tcp_options())
            .await
            .expect("a client connects past 1000 idle sockets");
        let mut c = fabric::Client::new(map, t.into());
        let mut b = Batch::new();
        b.write(GlobalAddr::new(1, 64), &(round + 7).to_le_bytes());
        c.execute(&mut b).await.expect("served");
        let mut b = Batch::new();
        let h = b.read(GlobalAddr::new(1, 64), 8);
        c.execute(&mut b).await.expect("served");
        assert_eq!(b.read_result(h).expect("read"), &(round + 7).to_le_bytes());
        // And a thousand more silent ones between clients.
        for s in idle.iter_mut().take(100) {
            *s = TcpStream::connect(&node.addr).await.expect("connect");
        }
    }
    drop(idle);
}

/// Waits until every one of `endpoints` is an active memory node of
/// `member`'s state.
async fn await_active(member: &Member, endpoints: &[String], what: &str) {
    tokio::time::timeout(
        WAIT,
        member.state().wait_for(|s| {
            endpoints
                .iter()
                .all(|e| {
                    s.memnodes
                        .values()
                        .any(|n| &n.endpoint == e && n.state == MemNodeState::Active)
                })
                .then_some(())
        }),
    )
    .await
    .expect(what);
}

/// A memory node placed by the member at `control`.
fn placed_args(control: &str) -> [&str; 6] {
    [
        "--control",
        control,
        "--control-token",
        TOKEN,
        "--capacity",
        "64MiB",
    ]
}

async fn start_member() -> (Member, String, ControlClient, tempfile::TempDir) {
    let settings = Settings::new(
        ClusterSecret::new("data-path-test-secret-0123456789").expect("secret"),
        vec![Token {
            name: "test".into(),
            token: TOKEN.into(),
            role: Role::Admin,
        }],
    )
    .expect("settings");
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let member = Member::start(
        listener,
        MemberOptions {
            id: 1,
            data_dir: dir.path().to_path_buf(),
            advertise: None,
            settings,
            partition: Partition::default(),
        },
    )
    .await
    .expect("member starts");
    let control = member.local_addr().to_string();
    let api = ControlClient::new(&control, Some(TOKEN.into())).expect("client");
    api.init(vec![MemberInfo {
        id: 1,
        addr: control.clone(),
        voter: true,
    }])
    .await
    .expect("init");
    (member, control, api, dir)
}

async fn write_words(c: &Cluster, words: &[(GlobalAddr, u64)]) -> Result<(), fabric::FabricError> {
    let mut b = Batch::new();
    for (at, v) in words {
        b.write(*at, &v.to_le_bytes());
    }
    let mut f = c.fabric();
    f.execute(&mut b).await
}

async fn read_word(c: &Cluster, at: GlobalAddr) -> u64 {
    let mut b = Batch::new();
    let h = b.read(at, 8);
    let mut f = c.fabric();
    f.execute(&mut b).await.expect("read");
    u64::from_le_bytes(b.read_result(h).expect("read").try_into().expect("8 bytes"))
}

/// A client's batch is held in the network; meanwhile the client expires,
/// is forgotten, and its owner ids go to an heir, which writes its log slot
/// and takes a lock at the words the held batch writes (a late log WRITE,
/// and a DTX release: lock := FREE). When the network delivers the batch,
/// the node refuses it (the client is fenced) and runs none of its verbs:
/// the heir's words, and the index, are intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_clients_late_frames_land_nowhere_in_its_heirs_memory() {
    let (member, control, api, _dir) = start_member().await;
    let memnode = MemnodeProcess::start(&placed_args(&control));
    let endpoint = memnode.addr.clone();
    await_active(
        &member,
        std::slice::from_ref(&endpoint),
        "the memory node registers",
    )
    .await;
    let proxy = HoldingProxy::start(endpoint.clone()).await;
    let options = |via: bool| ClusterOptions {
        name: if via { "late" } else { "heir" }.into(),
        owner_ids: 4,
        lease: Some(Duration::from_secs(1)),
        replicas: 1,
        index_bytes: 8 << 20,
        data_path_via: if via {
            vec![(endpoint.clone(), proxy.addr.clone())]
        } else {
            Vec::new()
        },
        // The late client's batch would also be refused past its deadline
        // (`fabric::deadline`): an hour, so that only the fence stands
        // between it and the heir's memory.
        request_deadline: if via {
            Duration::from_secs(3600)
        } else {
            fabric::transport::REQUEST_DEADLINE
        },
        ..ClusterOptions::default()
    };
    let late = Cluster::connect_with(&[&control], TOKEN, options(true))
        .await
        .expect("the late client joins");
    let mut tree = late.btree("t").await.expect("index");
    for k in 1..=20u64 {
        tree.insert(k, k * 10).await.expect("insert");
    }
    let region = late.map().regions()[0].clone();
    let end = region.size - 4096;
    let (log_slot, lock) = (
        GlobalAddr::new(region.id, end),
        GlobalAddr::new(region.id, end + 8),
    );
    write_words(&late, &[(log_slot, 1), (lock, 1)])
        .await
        .expect("served through the proxy");

    // The network holds what the client sends from now on.
    proxy.hold.send_replace(true);
    let held_batch = {
        let late_fabric = late.fabric();
        tokio::spawn(async move {
            let mut b = Batch::new();
            b.write(log_slot, &0xdead_u64.to_le_bytes());
            b.write(lock, &0u64.to_le_bytes());
            let mut f = late_fabric;
            f.execute(&mut b).await
        })
    };
    support::cluster::eventually("the batch is in the network", WAIT, async || {
        (proxy.held.load(Ordering::Acquire) > 0).then_some(())
    })
    .await;

    // The client expires (its lease lapsed, as the coordinator judges), and
    // is forgotten once its quarantine is over and the node follows its fence.
    let late_id = late.id();
    let late_owners = late.owner_ids();
    api.command(&Command::ExpireClient { id: late_id })
        .await
        .expect("expired");
    support::cluster::eventually("the expired client is forgotten", WAIT, async || {
        api.command(&Command::ForgetClient {
            id: late_id,
            by: None,
        })
        .await
        .ok()
    })
    .await;
    let fence = member
        .state()
        .with_state(|s| s.memnodes.values().map(|n| n.fence_seq).max());
    let heir = Cluster::connect_with(&[&control], TOKEN, options(false))
        .await
        .expect("the heir joins");
    assert_eq!(
        heir.owner_ids(),
        late_owners,
        "the heir holds the expired client's owner ids"
    );
    let heir_lock = (u64::from(late_owners.first) << 32) | 1;
    write_words(&heir, &[(log_slot, 0xbeef), (lock, heir_lock)])
        .await
        .expect("the heir writes its log slot and takes the lock");

    // The network delivers the held batch.
    let mut verdicts = proxy.verdicts;
    proxy.hold.send_replace(false);
    let verdict = tokio::time::timeout(WAIT, verdicts.recv())
        .await
        .expect("the node answers the late batch")
        .expect("proxy running");
    let answer = verdict.map(|body| wire::decode_response(&body, &mut Completions::default()));
    assert!(
        matches!(&answer, Some(Ok(Response::Refused { reason, transient: false })) if reason.contains(&format!("client {late_id} is fenced"))),
        "the late batch is refused, not run: {answer:?} (fence followed: {fence:?})"
    );
    assert_eq!(
        read_word(&heir, log_slot).await,
        0xbeef,
        "the heir's log slot is intact"
    );
    assert_eq!(
        read_word(&heir, lock).await,
        heir_lock,
        "the heir's lock is still held"
    );
    let mut heirs_tree = heir.btree("t").await.expect("index");
    for k in 1..=20u64 {
        assert_eq!(heirs_tree.get(k).await.expect("get"), Some(k * 10));
    }
    let held = held_batch.await.expect("joins");
    assert!(
        held.is_err(),
        "the late client never saw its batch succeed: {held:?}"
    );
}

/// Two placed memory nodes, each reached through a proxy of its own, and
/// a client (300 ms request deadline) with one single-copy B+tree on each:
/// `a` on the node `proxies[node_a]` fronts, `b` on the other.
struct TwoIndexes {
    _member: Member,
    _nodes: [MemnodeProcess; 2],
    proxies: [HoldingProxy; 2],
    client: Cluster,
    node_a: usize,
}

impl TwoIndexes {
    async fn start() -> TwoIndexes {
        let (member, control, _api, _dir) = start_member().await;
        let memnode_args = placed_args(&control);
        let nodes = [
            MemnodeProcess::start(&memnode_args),
            MemnodeProcess::start(&memnode_args),
        ];
        let endpoints: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
        await_active(&member, &endpoints, "both memory nodes register").await;
        let proxies = [
            HoldingProxy::start(endpoints[0].clone()).await,
            HoldingProxy::start(endpoints[1].clone()).await,
        ];
        let client = Cluster::connect_with(
            &[&control],
            TOKEN,
            ClusterOptions {
                name: "black-hole".into(),
                replicas: 1,
                index_bytes: 8 << 20,
                request_deadline: Duration::from_millis(300),
                data_path_via: endpoints
                    .iter()
                    .cloned()
                    .zip(proxies.iter().map(|p| p.addr.clone()))
                    .collect(),
                ..ClusterOptions::default()
            },
        )
        .await
        .expect("joins");
        // Created in this order, the two single-copy regions go to the
        // two nodes (the control plane places on the roomiest).
        client.btree("a").await.expect("index a");
        client.btree("b").await.expect("index b");
        let map = client.map();
        let node_of = |i: usize| {
            let region = &map.regions()[i];
            let node = region.replicas[0].node;
            let endpoint = &map.nodes().iter().find(|n| n.id == node).expect("node").endpoint;
            endpoints.iter().position(|e| e == endpoint).expect("one of ours")
        };
        let (node_a, node_b) = (node_of(0), node_of(1));
        assert_ne!(
            node_a, node_b,
            "the control plane puts the two single-copy regions on the two nodes"
        );
        TwoIndexes {
            _member: member,
            _nodes: nodes,
            proxies,
            client,
            node_a,
        }
    }

    /// From now on the network swallows everything sent to `a`'s node
    /// (`false`: it delivers what it held, and flows again).
    fn black_hole_a(&self, on: bool) {
        self.proxies[self.node_a].hold.send_replace(on);
    }

    fn bytes_held_for_a(&self) -> usize {
        self.proxies[self.node_a].held.load(Ordering::Acquire)
    }
}

/// A memory node black-holed on the data path (its proxy holds everything
/// a client sends) while its lease is kept alive, so the map never moves
/// past it: an operation on the index it holds fails with a lost
/// connection (each batch at its deadline, the operation once its retries
/// have waited for a map that does not come), and never hangs; the index
/// on the other node is served all the while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_node_fails_its_operations_and_holds_back_no_other_index() {
    let cluster = TwoIndexes::start().await;
    let mut a = cluster.client.btree("a").await.expect("index a");
    let mut b = cluster.client.btree("b").await.expect("index b");
    a.insert(1, 10).await.expect("a served");
    b.insert(1, 10).await.expect("b served");

    cluster.black_hole_a(true);
    let stuck = tokio::spawn(async move { a.insert(2, 20).await });
    for k in 2..=50u64 {
        b.insert(k, k * 10)
            .await
            .expect("b is served while a's node is black-holed");
    }
    for k in 1..=50u64 {
        assert_eq!(b.get(k).await.expect("get"), Some(k * 10));
    }
    let failed = tokio::time::timeout(WAIT, stuck)
        .await
        .expect("an operation on a black-holed node gives up")
        .expect("joins");
    assert!(
        cluster.bytes_held_for_a() > 0,
        "its batches went into the black hole"
    );
    match failed {
        Err(e) => assert!(
            matches!(e.fabric_cause(), Some(fabric::FabricError::Disconnected { .. })),
            "fails as a lost connection: {e}"
        ),
        Ok(w) => panic!("an insert through a black hole succeeded: {w:?}"),
    }
}

/// A Redis gateway (`kintsugi serve`'s library, one handle) on each of the
/// two indexes, in one client process: while `a`'s node is black-holed,
/// the gateway of `b` serves every command, and `a`'s answers each SET with
/// a retryable error within its retries' bound instead of hanging with its
/// only handle; PING is answered throughout, and once the network heals
/// `a`'s gateway serves again with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_node_holds_back_no_gateway_and_drains_no_handle() {
    let cluster = TwoIndexes::start().await;
    let mut shutdowns = Vec::new();
    let mut ports = Vec::new();
    for name in ["a", "b"] {
        let handle = gateway::Handle::Tree(cluster.client.btree(name).await.expect("index"));
        let keyspace = gateway::Keyspace::new(handle, name).expect("keyspace");
        let gateway = gateway::Gateway::new(
            vec![keyspace],
            gateway::TokenCheck::new(Vec::new()),
            gateway::Settings {
                index: name.into(),
                kind: "btree".into(),
                require_auth: false,
            },
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        ports.push(listener.local_addr().expect("addr").port());
        let (stop, stopped) = watch::channel(false);
        shutdowns.push(stop);
        tokio::spawn(gateway.serve(listener, stopped));
    }
    let (port_a, port_b) = (ports[0], ports[1]);
    assert_eq!(redis(port_a, &["SET", "before", "1"]).await, Ok("OK".into()));
    assert_eq!(redis(port_b, &["SET", "before", "1"]).await, Ok("OK".into()));

    cluster.black_hole_a(true);
    let stuck = tokio::spawn(redis(port_a, &["SET", "during", "2"]));
    for k in 0..50 {
        let key = format!("b{k}");
        assert_eq!(redis(port_b, &["SET", &key, "v"]).await, Ok("OK".into()), "{key}");
        assert_eq!(redis(port_b, &["GET", &key]).await, Ok("v".into()), "{key}");
    }
    assert_eq!(redis(port_a, &["PING"]).await, Ok("PONG".into()));
    let first = tokio::time::timeout(WAIT, stuck)
        .await
        .expect("a SET on a black-holed node gets its answer")
        .expect("joins");
    assert!(
        cluster.bytes_held_for_a() > 0,
        "its batches went into the black hole"
    );
    let e = first.expect_err("a SET through a black hole succeeded");
    assert!(e.starts_with("TRYAGAIN"), "a retryable error: {e}");
    // Its one handle came back: the next command is answered too.
    let second = tokio::time::timeout(WAIT, redis(port_a, &["GET", "before"]))
        .await
        .expect("the gateway's only handle was given back");
    assert!(second.is_err_and(|e| e.starts_with("TRYAGAIN")));

    cluster.black_hole_a(false);
    let healed = tokio::time::timeout(WAIT, async {
        loop {
            match redis(port_a, &["SET", "after", "3"]).await {
                Ok(ok) => break ok,
                Err(e) if e.starts_with("TRYAGAIN") => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("after the heal: {e}"),
            }
        }
    })
    .await
    .expect("the gateway of a serves again once the node is reachable");
    assert_eq!(healed, "OK");
    assert_eq!(redis(port_a, &["GET", "before"]).await, Ok("1".into()));
    assert_eq!(redis(port_a, &["GET", "after"]).await, Ok("3".into()));
    for stop in shutdowns {
        stop.send_replace(true);
    }
}

/// One command on a new connection to the gateway at `port`: its simple or
/// bulk reply, or its error's text (`Err`).
async fn redis(port: u16, args: &[&str]) -> Result<String, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.expect("reply");
    let line = line.trim_end().to_owned();
    match line.split_at_checked(1) {
        Some(("+", s)) => Ok(s.to_owned()),
        Some(("-", e)) => Err(e.to_owned()),
        Some(("$", len)) => {
            let len: usize = len.parse().expect("bulk length");
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body).await.expect("bulk");
            body.truncate(len);
            Ok(String::from_utf8(body).expect("utf-8"))
        }
        _ => panic!("unexpected reply {line:?}"),
    }
}

/// A memory node served over TLS (`memnode --tls-cert --tls-key`) registers
/// a `tls://` endpoint; a client given the cluster's CA reaches it over
/// TLS and its index works; a client without a CA is told why it cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_node_served_over_tls_is_reached_over_tls() {
    let (member, control, _api, dir) = start_member().await;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let node_key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&node_key, &ca, &ca_key)
        .expect("cert");
    let (ca_path, cert_path, key_path) = (
        dir.path().join("ca.pem"),
        dir.path().join("node.pem"),
        dir.path().join("node-key.pem"),
    );
    std::fs::write(&ca_path, ca.pem()).expect("write");
    std::fs::write(&cert_path, cert.pem()).expect("write");
    std::fs::write(&key_path, node_key.serialize_pem()).expect("write");
    let mut args = placed_args(&control).to_vec();
    let (cert_arg, key_arg) = (cert_path.display().to_string(), key_path.display().to_string());
    args.extend(["--tls-cert", &cert_arg, "--tls-key", &key_arg]);
    let memnode = MemnodeProcess::start(&args);
    let endpoint = format!("{}{}", fabric::transport::TLS_SCHEME, memnode.addr);
    await_active(
        &member,
        std::slice::from_ref(&endpoint),
        "the node registers its tls:// endpoint",
    )
    .await;
    let options = |data_tls| ClusterOptions {
        replicas: 1,
        index_bytes: 8 << 20,
        data_tls,
        ..ClusterOptions::default()
    };
    let ca = control_plane::tls::ClientTls::load(&ca_path)
        .expect("ca")
        .data_path_config();
    let client = Cluster::connect_with(&[&control], TOKEN, options(Some(ca)))
        .await
        .expect("joins");
    let mut tree = client.btree("t").await.expect("index over TLS");
    for k in 1..=20u64 {
        tree.insert(k, k * 3).await.expect("insert over TLS");
    }
    for k in 1..=20u64 {
        assert_eq!(tree.get(k).await.expect("get"), Some(k * 3));
    }
    let bare = async {
        let c = Cluster::connect_with(&[&control], TOKEN, options(None)).await?;
        c.btree("t").await.map(|_| ())
    };
    let refused = tokio::time::timeout(WAIT, bare).await.expect("no hang");
    let why = format!(
        "{:?}",
        refused.expect_err("a client without a CA reaches a TLS node")
    );
    assert!(why.contains("speaks TLS"), "{why}");
}
