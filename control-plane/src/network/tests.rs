//! Tests of the Raft transport: the router's refusals through
//! `tower::ServiceExt::oneshot`, the client's error mapping, and small
//! clusters talking over loopback. Waits are on Raft metrics, never sleeps.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request as HttpRequest, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use openraft::error::{Fatal, RPCError, RaftError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::{BasicNode, Config, Vote};
use tower::ServiceExt;

use super::*;
use crate::raft::{MemberId, Raft};
use crate::reply::ErrorBody;
use crate::state::{Command, Request};
use crate::store::{self, StateReader};

const SECRET: &str = "test-secret-0123456789";
const OTHER_SECRET: &str = "other-secret-0123456789";

/// Bounds every wait so a broken cluster fails the test instead of hanging
/// it; never used to decide an outcome.
const WAIT: Option<Duration> = Some(Duration::from_secs(30));

fn secret() -> ClusterSecret {
    ClusterSecret::new(SECRET).expect("test secret is valid")
}

fn config() -> Arc<Config> {
    let config = Config {
        cluster_name: "kintsugi-test".to_owned(),
        // Tiny chunks so that a snapshot of a few entries spans many RPCs.
        snapshot_max_chunk_size: 64,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..Default::default()
    };
    Arc::new(config.validate().expect("test config is valid"))
}

/// A member with its sled store in a temporary directory, not serving
/// anything yet. The directory lives as long as the returned guard.
async fn raft(id: MemberId, secret: &ClusterSecret) -> (Raft, StateReader, tempfile::TempDir) {
    let network = HttpNetworkFactory::new(id, secret).expect("http client builds");
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, sm) = store::open(dir.path()).await.expect("store opens");
    let reader = sm.reader();
    let raft = Raft::new(id, config(), network, log, sm)
        .await
        .expect("raft starts");
    (raft, reader, dir)
}

/// A member serving its router on an ephemeral loopback port.
struct Member {
    id: MemberId,
    raft: Raft,
    state: StateReader,
    _dir: tempfile::TempDir,
    node: BasicNode,
    /// Requests seen on the snapshot route.
    snapshot_posts: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Member {
    async fn start(id: MemberId) -> Member {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (raft, state, dir) = raft(id, &secret()).await;
        let snapshot_posts = Arc::new(AtomicUsize::new(0));
        let counter = snapshot_posts.clone();
        let router = raft_router(raft.clone(), secret()).layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                if req.uri().path() == SNAPSHOT_PATH {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                next.run(req)
            },
        ));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Member {
            id,
            raft,
            state,
            _dir: dir,
            node: BasicNode::new(addr.to_string()),
            snapshot_posts,
            server,
        }
    }

    async fn stop(self) {
        let _ = self.raft.shutdown().await;
        self.server.abort();
    }
}

fn register(endpoint: &str) -> Request {
    Request {
        at_ms: 1,
        clock_ms: 1,
        actor: "test".to_owned(),
        nonce: 7,
        command: Command::RegisterMemNode {
            endpoint: endpoint.to_owned(),
            capacity_bytes: 1 << 20,
            image: None,
        },
    }
}

// ---- ClusterSecret -------------------------------------------------------

#[test]
fn secret_debug_is_redacted() {
    let shown = format!("{:?}", secret());
    assert!(!shown.contains(SECRET), "{shown}");
    assert_eq!(shown, "ClusterSecret(<redacted>)");
}

#[test]
fn secret_is_validated_without_echoing_it() {
    assert_eq!(ClusterSecret::new("short"), Err(SecretError::TooShort { len: 5 }));
    assert_eq!(
        ClusterSecret::new("x".repeat(SECRET_BYTES_MAX + 1)),
        Err(SecretError::TooLong {
            len: SECRET_BYTES_MAX + 1
        })
    );
    let err = ClusterSecret::new("0123456789abcdef ghij").expect_err("space refused");
    assert_eq!(err, SecretError::NotVisibleAscii { at: 16 });
    assert!(!err.to_string().contains("0123"));
    assert!(ClusterSecret::new("0123456789abcdé-").is_err());
}

#[test]
fn secret_matches_only_itself() {
    let s = secret();
    assert!(s.matches(SECRET.as_bytes()));
    assert!(!s.matches(b""));
    assert!(!s.matches(&SECRET.as_bytes()[..SECRET.len() - 1]));
    let mut last_differs = SECRET.as_bytes().to_vec();
    *last_differs.last_mut().expect("non-empty") ^= 1;
    assert!(!s.matches(&last_differs));
    let mut first_differs = SECRET.as_bytes().to_vec();
    first_differs[0] ^= 0x80;
    assert!(!s.matches(&first_differs));
}

// ---- router refusals -----------------------------------------------------

async fn router() -> Router {
    let (raft, _, dir) = raft(1, &secret()).await;
    // The router owns the store's directory: it is removed with the router.
    raft_router(raft, secret()).layer(axum::Extension(Arc::new(dir)))
}

fn vote_json() -> Vec<u8> {
    serde_json::to_vec(&VoteRequest::<MemberId>::new(Vote::new(1, 2), None)).expect("serialize")
}

fn post(path: &str, secret: Option<&str>, content_type: Option<&str>, body: Vec<u8>) -> HttpRequest<Body> {
    let mut req = HttpRequest::builder().method(Method::POST).uri(path);
    if let Some(secret) = secret {
        req = req.header(SECRET_HEADER, secret);
    }
    if let Some(content_type) = content_type {
        req = req.header(header::CONTENT_TYPE, content_type);
    }
    req.body(Body::from(body)).expect("request builds")
}

/// Sends one request and returns the status and the `error` of the body,
/// asserting the body is the JSON error shape.
async fn refusal(router: Router, req: HttpRequest<Body>) -> (StatusCode, String) {
    let resp = router.oneshot(req).await.expect("router is infallible");
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let parsed: ErrorBody = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{status}: body {body:?} is not a JSON error: {e}"));
    (status, parsed.error)
}

#[tokio::test]
async fn missing_secret_is_401() {
    let req = post(VOTE_PATH, None, Some("application/json"), vote_json());
    let (status, error) = refusal(router().await, req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(error.contains(SECRET_HEADER), "{error}");
}

#[tokio::test]
async fn wrong_secret_is_401() {
    for wrong in [OTHER_SECRET, "", &SECRET[..SECRET.len() - 1]] {
        let req = post(APPEND_PATH, Some(wrong), Some("application/json"), vote_json());
        let (status, error) = refusal(router().await, req).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong:?}");
        assert_eq!(error, "wrong cluster secret");
    }
}

#[tokio::test]
async fn secret_is_checked_before_the_body() {
    // Garbage and no content type, yet the answer is about the secret.
    let req = post(SNAPSHOT_PATH, Some(OTHER_SECRET), None, b"\x00\xff{".to_vec());
    let (status, _) = refusal(router().await, req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn garbage_body_is_400() {
    for path in [APPEND_PATH, VOTE_PATH, SNAPSHOT_PATH] {
        let req = post(
            path,
            Some(SECRET),
            Some("application/json"),
            b"{not json".to_vec(),
        );
        let (status, error) = refusal(router().await, req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(error.contains("not valid JSON"), "{error}");
    }
}

#[tokio::test]
async fn wrong_shape_is_400_not_422() {
    let req = post(
        VOTE_PATH,
        Some(SECRET),
        Some("application/json"),
        br#"{"vote": 3}"#.to_vec(),
    );
    let (status, error) = refusal(router().await, req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error.contains("not the expected request"), "{error}");
}

#[tokio::test]
async fn wrong_content_type_is_400_not_415() {
    for content_type in [None, Some("text/plain")] {
        let req = post(VOTE_PATH, Some(SECRET), content_type, vote_json());
        let (status, error) = refusal(router().await, req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{content_type:?}");
        assert!(error.contains("application/json"), "{error}");
    }
}

#[tokio::test]
async fn oversized_body_is_413() {
    let body = vec![b' '; RAFT_BODY_BYTES_MAX + 1];
    let req = post(SNAPSHOT_PATH, Some(SECRET), Some("application/json"), body);
    let (status, error) = refusal(router().await, req).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(error.contains("too large"), "{error}");
}

#[tokio::test]
async fn wrong_method_is_405() {
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let req = HttpRequest::builder()
            .method(method.clone())
            .uri(VOTE_PATH)
            .header(SECRET_HEADER, SECRET)
            .body(Body::empty())
            .expect("request builds");
        let resp = router().await.oneshot(req).await.expect("router is infallible");
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(
            resp.headers().get(header::ALLOW).map(|v| v.as_bytes()),
            Some(&b"POST"[..])
        );
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let parsed: ErrorBody = serde_json::from_slice(&body).expect("a JSON error body");
        assert!(parsed.error.contains("POST"), "{}", parsed.error);
    }
}

#[tokio::test]
async fn authenticated_vote_reaches_raft() {
    let req = post(VOTE_PATH, Some(SECRET), Some("application/json"), vote_json());
    let resp = router().await.oneshot(req).await.expect("router is infallible");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let answer: Result<VoteResponse<MemberId>, RaftError<MemberId>> =
        serde_json::from_slice(&body).expect("a Raft result");
    let answer = answer.expect("a fresh member answers a vote");
    // A fresh member has voted for nobody: it grants a higher-term candidate.
    assert!(answer.vote_granted);
}

// ---- client error mapping ------------------------------------------------

async fn client_to(me: MemberId, secret: &ClusterSecret, target: &Member) -> HttpNetwork {
    let mut factory = HttpNetworkFactory::new(me, secret).expect("http client builds");
    factory.new_client(target.id, &target.node).await
}

fn option() -> RPCOption {
    RPCOption::new(Duration::from_secs(10))
}

#[tokio::test]
async fn closed_port_is_unreachable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    let mut factory = HttpNetworkFactory::new(1, &secret()).expect("http client builds");
    let mut net = factory.new_client(2, &BasicNode::new(addr.to_string())).await;
    let rpc = VoteRequest::new(Vote::new(1, 1), None);
    match net.vote(rpc, option()).await {
        Err(RPCError::Unreachable(_)) => {}
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_address_is_unreachable() {
    let mut factory = HttpNetworkFactory::new(1, &secret()).expect("http client builds");
    let mut net = factory.new_client(2, &BasicNode::new("not a host:port")).await;
    let rpc = VoteRequest::new(Vote::new(1, 1), None);
    match net.vote(rpc, option()).await {
        Err(RPCError::Unreachable(_)) => {}
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn refused_secret_is_unreachable() {
    let peer = Member::start(2).await;
    let other = ClusterSecret::new(OTHER_SECRET).expect("valid");
    let mut net = client_to(1, &other, &peer).await;
    match net.vote(VoteRequest::new(Vote::new(1, 1), None), option()).await {
        Err(RPCError::Unreachable(e)) => {
            assert!(e.to_string().contains("401"), "{e}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    peer.stop().await;
}

#[tokio::test]
async fn raft_error_comes_back_as_remote_error() {
    let peer = Member::start(2).await;
    let mut net = client_to(1, &secret(), &peer).await;
    // A member whose Raft stopped still serves HTTP: its refusal is data.
    peer.raft.shutdown().await.expect("shutdown");
    match net.vote(VoteRequest::new(Vote::new(1, 1), None), option()).await {
        Err(RPCError::RemoteError(remote)) => {
            assert_eq!(remote.target, 2);
            assert_eq!(remote.target_node.as_ref(), Some(&peer.node));
            assert!(
                matches!(remote.source, RaftError::Fatal(Fatal::Stopped)),
                "{:?}",
                remote.source
            );
        }
        other => panic!("expected RemoteError, got {other:?}"),
    }
    peer.stop().await;
}

// ---- clusters over loopback ----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_and_commit() {
    let members = [
        Member::start(1).await,
        Member::start(2).await,
        Member::start(3).await,
    ];
    let nodes: BTreeMap<MemberId, BasicNode> = members.iter().map(|m| (m.id, m.node.clone())).collect();
    members[0].raft.initialize(nodes).await.expect("initialize");

    let metrics = members[0]
        .raft
        .wait(WAIT)
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .expect("a leader is elected");
    let leader_id = metrics.current_leader.expect("waited for it");
    let leader = members
        .iter()
        .find(|m| m.id == leader_id)
        .expect("the leader is a member");

    let written = leader
        .raft
        .client_write(register("10.0.0.1:7000"))
        .await
        .expect("write commits");
    assert!(written.data.is_ok(), "{:?}", written.data);
    let index = written.log_id.index;

    for m in &members {
        m.raft
            .wait(WAIT)
            .applied_index_at_least(Some(index), "the write applied")
            .await
            .expect("every member applies the write");
        let state = m.state.state();
        assert_eq!(state.memnodes.len(), 1, "member {}", m.id);
        let node = state.memnodes.values().next().expect("one node");
        assert_eq!(node.endpoint, "10.0.0.1:7000");
    }
    for m in members {
        m.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_catches_up_through_a_chunked_snapshot() {
    let one = Member::start(1).await;
    let nodes = BTreeMap::from([(one.id, one.node.clone())]);
    one.raft.initialize(nodes).await.expect("initialize");
    one.raft
        .wait(WAIT)
        .current_leader(1, "member 1 leads itself")
        .await
        .expect("a single member elects itself");

    let mut last = None;
    for i in 0..3 {
        let written = one
            .raft
            .client_write(register(&format!("10.0.0.{i}:7000")))
            .await
            .expect("write commits");
        last = Some(written.log_id);
    }
    let last = last.expect("three writes");

    one.raft.trigger().snapshot().await.expect("trigger snapshot");
    one.raft
        .wait(WAIT)
        .snapshot(last, "snapshot of the writes")
        .await
        .expect("snapshot built");
    one.raft
        .trigger()
        .purge_log(last.index)
        .await
        .expect("trigger purge");
    one.raft
        .wait(WAIT)
        .purged(Some(last), "log purged")
        .await
        .expect("log purged");

    // The entries are gone from the log: the learner can only get them as a
    // snapshot, sent in 64-byte chunks.
    let two = Member::start(2).await;
    one.raft
        .add_learner(two.id, two.node.clone(), true)
        .await
        .expect("learner added");
    let metrics = two
        .raft
        .wait(WAIT)
        .applied_index_at_least(Some(last.index), "learner caught up")
        .await
        .expect("learner catches up");
    assert_eq!(metrics.snapshot, Some(last), "installed from a snapshot");
    assert_eq!(two.state.state().memnodes.len(), 3);
    let chunks = two.snapshot_posts.load(Ordering::Relaxed);
    assert!(chunks > 1, "the snapshot spans many chunks, got {chunks}");

    one.stop().await;
    two.stop().await;
}
