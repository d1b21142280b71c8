//! `--metrics-listen`: real daemon processes announce `metrics ADDR` after
//! `listening ADDR`, and their `/metrics` counts what they were made to do
//! (a memory node's verbs, a gateway's commands and commits) while
//! `/healthz` says they serve.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fabric::{Batch, Client, GlobalAddr, TcpTransport};
use harness::launch::{Launch, Process, StopBy};
use harness::ServerLine;
use support::local::exe;

const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts `kintsugi ARGS...`; returns it with the addresses of its
/// `listening` and `metrics` lines.
fn start(name: &str, args: &[&str]) -> (Process, String, String) {
    let mut p = Launch::new(exe(), name)
        .args(args)
        .env("RUST_LOG", "warn")
        .env(control_plane::config::SECRET_ENV, support::MEMNODE_SECRET)
        .forward_stderr(format!("[{name}] "))
        .stop_by(StopBy::Kill)
        .spawn()
        .unwrap();
    let stdout = p.take_stdout().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for _ in 0..2 {
            let line = lines.next().and_then(Result::ok).unwrap_or_default();
            let _ = tx.send(line);
        }
        // Whatever else it prints is drained, so it never blocks on a pipe.
        lines.for_each(drop);
    });
    let line = || {
        rx.recv_timeout(START_TIMEOUT)
            .unwrap()
            .parse::<ServerLine>()
            .unwrap()
    };
    let ServerLine::Listening(listening) = line() else {
        panic!("{name}: `listening ADDR` first")
    };
    let ServerLine::Metrics(metrics) = line() else {
        panic!("{name}: `metrics ADDR` second")
    };
    (p, listening, metrics)
}

/// `GET path` on `addr`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let code = answer.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (code, body)
}

/// The value of `series` (name and labels as rendered) in a scrape.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test]
async fn a_memory_node_counts_the_verbs_it_serves() {
    let (_node, addr, metrics) = start(
        "memnode",
        &[
            "memnode",
            "--listen",
            "127.0.0.1:0",
            "--region",
            "1:1MiB",
            "--epoch",
            "4",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let (transport, map) = TcpTransport::discover_with(&[addr], support::tcp_options())
        .await
        .unwrap();
    let mut client = Client::new(map, transport.into());
    let at = GlobalAddr::new(1, 64);
    let mut batch = Batch::new();
    batch.write(at, &[7u8; 24]);
    batch.read(at, 16);
    batch.cas(GlobalAddr::new(1, 128), 0, 1);
    client.execute(&mut batch).await.unwrap();
    let mut batch = Batch::new();
    batch.read(GlobalAddr::new(1, (1 << 20) - 8), 16);
    client.execute(&mut batch).await.unwrap();

    let (code, scrape) = get(&metrics, "/metrics");
    assert_eq!(code, 200);
    let v = |series| value(&scrape, series);
    assert_eq!(
        v(r#"kintsugi_memnode_verbs_total{kind="write"}"#),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(v(r#"kintsugi_memnode_verbs_total{kind="read"}"#), Some(2.0));
    assert_eq!(v(r#"kintsugi_memnode_verbs_total{kind="cas"}"#), Some(1.0));
    assert_eq!(v(r#"kintsugi_memnode_bytes_total{kind="write"}"#), Some(24.0));
    assert_eq!(
        v(r#"kintsugi_memnode_bytes_total{kind="read"}"#),
        Some(16.0),
        "the refused READ adds none"
    );
    assert_eq!(
        v(r#"kintsugi_memnode_verb_errors_total{error="out_of_bounds"}"#),
        Some(1.0)
    );
    assert_eq!(v("kintsugi_memnode_batches_total"), Some(2.0));
    assert_eq!(v("kintsugi_memnode_connections"), Some(1.0));
    assert_eq!(v("kintsugi_memnode_epoch"), Some(4.0));
    assert_eq!(v("kintsugi_memnode_serving"), Some(1.0));

    let (code, body) = get(&metrics, "/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(r#""status":"ok""#) && body.contains("epoch 4"),
        "{body}"
    );
    assert_eq!(get(&metrics, "/").0, 404);
}

#[test]
fn a_gateway_counts_commands_and_commits_and_is_healthy_while_its_lease_holds() {
    let (_gateway, resp, metrics) = start(
        "gateway",
        &[
            "serve",
            "--resp",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--handles",
            "1",
            "--index-bytes",
            "64MiB",
        ],
    );
    let mut con = redis::Client::open(format!("redis://{resp}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("greeting")
        .arg("hello")
        .query(&mut con)
        .unwrap();
    let got: String = redis::cmd("GET").arg("greeting").query(&mut con).unwrap();
    assert_eq!(got, "hello");
    let nosuch: redis::RedisResult<()> = redis::cmd("NOSUCH").query(&mut con);
    assert!(nosuch.is_err());

    let (code, scrape) = get(&metrics, "/metrics");
    assert_eq!(code, 200);
    let v = |series| value(&scrape, series);
    assert_eq!(
        v(r#"kintsugi_gateway_commands_total{command="set"}"#),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(v(r#"kintsugi_gateway_commands_total{command="get"}"#), Some(1.0));
    assert_eq!(
        v(r#"kintsugi_gateway_errors_total{command="unknown"}"#),
        Some(1.0)
    );
    assert!(
        v("kintsugi_gateway_rtx_commits_total") >= Some(1.0),
        "SET is one rTX: {scrape}"
    );
    assert!(v("kintsugi_gateway_round_trips_total") >= Some(1.0));
    assert_eq!(v("kintsugi_gateway_buckets_created_total"), Some(1.0));
    assert_eq!(v("kintsugi_gateway_connections"), Some(1.0));
    assert_eq!(v("kintsugi_gateway_lease_holds"), Some(1.0));

    let (code, body) = get(&metrics, "/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(r#""daemon":"gateway""#) && body.contains("holds its lease"),
        "{body}"
    );
}
