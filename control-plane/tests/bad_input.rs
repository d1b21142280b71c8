//! Hostile and careless requests to a member's listener: each gets a 4xx
//! with a JSON error body, and nothing changes in the cluster.

mod common;

use common::{register, tables, Cluster, OPERATOR_TOKEN, SECRET, TOKEN};
use control_plane::api::{ClientError, ControlClient, ErrorBody, API_BODY_BYTES_MAX};
use control_plane::network::{SECRET_HEADER, VOTE_PATH};
use control_plane::state::Command;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends a raw request and returns the status and the
/// `error` of its body, asserting the body is the JSON error shape.
async fn refusal(req: reqwest::RequestBuilder) -> (StatusCode, String) {
    let resp = req.send().await.expect("request completes");
    let status = resp.status();
    let body = resp.bytes().await.expect("body");
    let parsed: ErrorBody = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{status}: body {body:?} is not a JSON error: {e}"));
    (status, parsed.error)
}

fn url(c: &Cluster, id: u64, path: &str) -> String {
    format!("http://{}{path}", c.addr(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_api_refuses_bad_requests_and_changes_nothing() {
    let c = Cluster::start(3).await;
    let leader = c.leader().await;
    c.active_memnodes(leader, 2).await;
    let before = tables(&c.member(leader).state().state());
    let http = reqwest::Client::new();
    let follower = c.ids().into_iter().find(|&id| id != leader).expect("follower");

    for id in [leader, follower] {
        // Tokens: missing, wrong scheme, wrong token.
        let (s, e) = refusal(http.get(url(&c, id, "/v1/status"))).await;
        assert_eq!(
            (s, e.contains("Authorization")),
            (StatusCode::UNAUTHORIZED, true),
            "{e}"
        );
        let basic = http
            .get(url(&c, id, "/v1/status"))
            .header("authorization", format!("Basic {TOKEN}"));
        assert_eq!(refusal(basic).await.0, StatusCode::UNAUTHORIZED);
        let wrong = http
            .post(url(&c, id, "/v1/commands"))
            .bearer_auth("not-the-token-0123456789");
        let (s, e) = refusal(wrong.json(&register("x:1"))).await;
        assert_eq!(
            (s, e.as_str()),
            (StatusCode::UNAUTHORIZED, "unknown bearer token")
        );

        // Bodies: not JSON, not a command, unknown op, too large, no content type.
        let cmd = |body: Vec<u8>| {
            http.post(url(&c, id, "/v1/commands"))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(body)
        };
        for body in [
            b"{not json".to_vec(),
            b"[1,2,3]".to_vec(),
            br#"{"op":"launch_missiles"}"#.to_vec(),
            br#"{"op":"create_region","size_bytes":-1,"replicas":2}"#.to_vec(),
            vec![0xff, 0xfe, 0x00],
        ] {
            let (s, e) = refusal(cmd(body.clone())).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{body:?}: {e}");
        }
        let (s, _) = refusal(cmd(vec![b' '; API_BODY_BYTES_MAX + 1])).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        let plain = http
            .post(url(&c, id, "/v1/commands"))
            .bearer_auth(TOKEN)
            .body(serde_json::to_vec(&register("x:1")).expect("json"));
        assert_eq!(refusal(plain).await.0, StatusCode::BAD_REQUEST);

        // Routes, methods and queries.
        let (s, _) = refusal(http.get(url(&c, id, "/v1/nothing")).bearer_auth(TOKEN)).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (s, _) = refusal(http.delete(url(&c, id, "/v1/status")).bearer_auth(TOKEN)).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
        for q in ["after_epoch=abc", "after_epoch=1&wait=forever", "colour=blue"] {
            let req = http.get(url(&c, id, &format!("/v1/map?{q}"))).bearer_auth(TOKEN);
            assert_eq!(refusal(req).await.0, StatusCode::BAD_REQUEST, "{q}");
        }
        let req = http
            .post(url(&c, id, "/v1/memnodes/notanumber/renew"))
            .bearer_auth(TOKEN);
        assert_eq!(refusal(req).await.0, StatusCode::BAD_REQUEST);
        let req = http
            .post(url(&c, id, "/v1/init"))
            .bearer_auth(TOKEN)
            .body("{\"members\": 7}");
        assert_eq!(refusal(req).await.0, StatusCode::BAD_REQUEST);

        // Membership is for admin tokens only: adding a member hands it the
        // log and the cluster secret.
        let req = http
            .post(url(&c, id, "/v1/members"))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&serde_json::json!({"id": 9, "addr": "127.0.0.1:9"}));
        let (s, e) = refusal(req).await;
        assert_eq!((s, e.contains("admin")), (StatusCode::FORBIDDEN, true), "{e}");
        let req = http
            .delete(url(&c, id, "/v1/members/1"))
            .bearer_auth(OPERATOR_TOKEN);
        assert_eq!(refusal(req).await.0, StatusCode::FORBIDDEN);
        let req = http.post(url(&c, id, "/v1/init")).bearer_auth(OPERATOR_TOKEN);
        assert_eq!(refusal(req).await.0, StatusCode::FORBIDDEN);
        // Operators may still command: an unknown node is a 404, not a 403.
        let req = http
            .post(url(&c, id, "/v1/commands"))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&Command::DrainMemNode { id: 99 });
        assert_eq!(refusal(req).await.0, StatusCode::NOT_FOUND);
        for addr in ["evil.example:80/steal", "host:0", ":7401", "a b:1", "host:99999"] {
            let req = http
                .post(url(&c, id, "/v1/members"))
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({"id": 9, "addr": addr}));
            assert_eq!(refusal(req).await.0, StatusCode::BAD_REQUEST, "{addr}");
        }
    }

    // Well-formed but impossible commands, through the typed client: clear
    // errors, refused by the state machine.
    let client = c.client(follower);
    let impossible = [
        (
            Command::CreateRegion {
                size_bytes: 4096,
                replicas: 3,
            },
            409,
            "cannot place 3 replicas",
        ),
        (
            Command::CreateRegion {
                size_bytes: 4096,
                replicas: 0,
            },
            400,
            "1 to",
        ),
        (Command::DrainMemNode { id: 77 }, 404, "no memory node 77"),
        (
            Command::PromoteBackup {
                region: 9,
                node: 0,
                restorer: None,
            },
            404,
            "no region 9",
        ),
        (Command::ExpireClient { id: 5 }, 404, "no client 5"),
        (
            Command::RegisterMemNode {
                endpoint: "mn-0:1".into(),
                capacity_bytes: 1,
                image: None,
            },
            409,
            "already has endpoint",
        ),
        (
            Command::RegisterClient {
                name: String::new(),
                owner_ids: 1,
                lease_ms: 100,
            },
            400,
            "client name",
        ),
    ];
    for (command, status, want) in impossible {
        match client.command(&command).await {
            Err(ClientError::Refused {
                status: s, message, ..
            }) => {
                assert_eq!(s.as_u16(), status, "{command:?}: {message}");
                assert!(message.contains(want), "{command:?}: {message}");
            }
            other => panic!("{command:?} must be refused: {other:?}"),
        }
    }
    let e = client
        .renew_client(77, None, None)
        .await
        .expect_err("unknown client");
    assert_eq!(e.status().map(|s| s.as_u16()), Some(404), "{e}");
    let e = client.remove_member(42).await.expect_err("unknown member");
    assert_eq!(e.status().map(|s| s.as_u16()), Some(409), "{e}");
    let e = client
        .add_member(9, "not an address", true)
        .await
        .expect_err("bad address");
    assert_eq!(e.status().map(|s| s.as_u16()), Some(400), "{e}");
    let e = c
        .client(leader)
        .init(Vec::new())
        .await
        .expect_err("already initialised");
    assert_eq!(e.status().map(|s| s.as_u16()), Some(409), "{e}");
    assert!(ControlClient::new("ftp://x:1", None).is_err());
    assert!(ControlClient::new("http://x:1/some/path", None).is_err());

    let index = c.applied(leader);
    c.wait_applied(index).await;
    for id in c.ids() {
        assert_eq!(tables(&c.member(id).state().state()), before, "member {id}");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_at_the_raft_routes_does_not_disturb_the_cluster() {
    let c = Cluster::start(3).await;
    let leader = c.leader().await;
    c.write(leader, &register("mn-0:1")).await.expect("write");
    let http = reqwest::Client::new();
    for id in c.ids() {
        let vote = |secret: &str, body: &'static [u8]| {
            http.post(url(&c, id, VOTE_PATH))
                .header(SECRET_HEADER, secret)
                .header("content-type", "application/json")
                .body(body)
        };
        // The API's token is not the cluster secret, and vice versa.
        let (s, _) = refusal(vote(TOKEN, br#"{"vote":{}}"#)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        let (s, _) = refusal(http.get(url(&c, id, "/v1/status")).bearer_auth(SECRET)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        // Authenticated garbage.
        for body in [
            &b"\x00\x01garbage"[..],
            br#"{"vote":"high","last_log_id":null}"#,
            b"null",
        ] {
            let (s, _) = refusal(vote(SECRET, body)).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{body:?}");
        }
        // Bytes that are not HTTP at all: the connection is closed, the
        // listener keeps serving.
        let mut raw = tokio::net::TcpStream::connect(c.addr(id)).await.expect("connect");
        raw.write_all(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
            .await
            .expect("send");
        let mut sink = Vec::new();
        let _ = raw.read_to_end(&mut sink).await;
    }
    // Still one leader for all, still committing, still in agreement.
    let leader = c.leader().await;
    c.write(leader, &register("mn-1:1"))
        .await
        .expect("write after the garbage");
    let index = c.applied(leader);
    c.wait_applied(index).await;
    let view = tables(&c.member(leader).state().state());
    for id in c.ids() {
        assert_eq!(tables(&c.member(id).state().state()), view, "member {id}");
    }
    c.stop().await;
}

/// The operations routes: a snapshot only for operators, a restore only for
/// admins, only of an intact snapshot, only into an empty cluster, bounded
/// in size; a campaign bounded in its delay; a transfer only to a voter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operations_routes_refuse_what_they_must_and_change_nothing() {
    use control_plane::api::{Snapshot, SNAPSHOT_BYTES_MAX};

    let c = Cluster::start(3).await;
    let leader = c.leader().await;
    c.active_memnodes(leader, 2).await;
    let before = tables(&c.member(leader).state().state());
    let http = reqwest::Client::new();
    let follower = c.ids().into_iter().find(|&id| id != leader).expect("follower");

    // A snapshot asked of a follower is the leader's.
    let snap: Snapshot = http
        .get(url(&c, follower, "/v1/snapshot"))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .expect("snapshot")
        .json()
        .await
        .expect("snapshot JSON");
    assert_eq!(snap.member, leader);
    assert_eq!(snap.state.memnodes.len(), 2);

    let restore = |token: &str, body: Vec<u8>| {
        http.post(url(&c, follower, "/v1/snapshot/restore"))
            .bearer_auth(token.to_owned())
            .header("content-type", "application/json")
            .body(body)
    };
    let good = serde_json::to_vec(&snap).expect("encode");
    let (s, e) = refusal(restore(OPERATOR_TOKEN, good.clone())).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
    let (s, e) = refusal(restore(TOKEN, good.clone())).await;
    assert_eq!(s, StatusCode::CONFLICT, "not an empty cluster: {e}");
    let mut tampered = snap.clone();
    tampered.state.memnodes.clear();
    let (s, e) = refusal(restore(TOKEN, serde_json::to_vec(&tampered).expect("encode"))).await;
    assert_eq!(
        (s, e.contains("changed or damaged")),
        (StatusCode::BAD_REQUEST, true),
        "{e}"
    );
    let mut future = snap.clone();
    future.format += 1;
    let (s, _) = refusal(restore(TOKEN, serde_json::to_vec(&future).expect("encode"))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    for body in [
        b"{not json".to_vec(),
        b"[]".to_vec(),
        vec![b' '; SNAPSHOT_BYTES_MAX + 1],
    ] {
        let (s, e) = refusal(restore(TOKEN, body)).await;
        assert!(
            s == StatusCode::BAD_REQUEST || s == StatusCode::PAYLOAD_TOO_LARGE,
            "{s}: {e}"
        );
    }
    // A restore smuggled in as a plain command, past the route's checks.
    let state = serde_json::to_string(&snap.state).expect("encode");
    let smuggled = serde_json::json!({ "op": "restore", "state": state });
    for token in [OPERATOR_TOKEN, TOKEN] {
        let (s, e) = refusal(
            http.post(url(&c, leader, "/v1/commands"))
                .bearer_auth(token)
                .json(&smuggled),
        )
        .await;
        assert_eq!(
            (s, e.contains("/v1/snapshot/restore")),
            (StatusCode::BAD_REQUEST, true),
            "{e}"
        );
    }

    let (s, _) = refusal(
        http.post(url(&c, follower, "/v1/campaign"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({ "after_ms": 1_000_000 })),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = refusal(
        http.post(url(&c, follower, "/v1/campaign"))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&serde_json::json!({ "after_ms": 0 })),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, e) = refusal(
        http.post(url(&c, follower, "/v1/leader"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({ "to": 77 })),
    )
    .await;
    assert_eq!(
        (s, e.contains("not in the cluster")),
        (StatusCode::CONFLICT, true),
        "{e}"
    );

    // Every member still holds the same state, and agrees on it.
    assert_eq!(tables(&c.member(leader).state().state()), before);
    let api = ControlClient::new(&c.addr(leader).to_string(), Some(TOKEN.into())).expect("client");
    let digest = api.check().await.expect("check");
    assert_eq!(digest.member, leader);
}

/// A connection that sends half a request head and then nothing (a
/// slowloris) is closed once the head timeout passes, while others are
/// served; so is one that never sends anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_finishes_its_request_head_is_closed() {
    let c = Cluster::start(1).await;
    let leader = c.leader().await;
    let addr = c.addr(leader);
    let mut half = tokio::net::TcpStream::connect(addr).await.expect("connect");
    half.write_all(b"GET /v1/status HTTP/1.1\r\nauthorization: Bear")
        .await
        .expect("write");
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let operator = ControlClient::new(&addr.to_string(), Some(OPERATOR_TOKEN.into())).expect("client");
    operator.status().await.expect("others are served meanwhile");
    let bound = control_plane::listener::HEADER_READ_TIMEOUT * 3;
    for s in [&mut half, &mut silent] {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(bound, s.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "the member closes a connection that sends no whole request head"
        );
    }
}
