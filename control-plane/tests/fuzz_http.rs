//! A seeded fuzzer of a member's HTTP API listener: hostile connections
//! (valid requests of every route, with and without a token, mutated:
//! bits flipped, bytes cut, inserted or replaced, headers and lengths
//! lied about; and random bytes) sent over raw sockets to a real member,
//! while an operator's status read is served after every few of them.
//!
//! The count is fixed in CI; longer runs by command:
//!
//! ```sh
//! KINTSUGI_FUZZ_CONNECTIONS=50000 cargo test --release -p kintsugi-control-plane --test fuzz_http -- --nocapture
//! ```
//!
//! It prints what it ran: connections, panics (a crash), connections left
//! neither answered nor closed within the bound (a hang), and the good
//! reads.

mod common;

use std::time::Duration;

use common::{register, Cluster, OPERATOR_TOKEN, TOKEN};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEED: u64 = 0x6874_7470_6675_7a7a;
/// Hostile connections in CI: a few seconds.
const CONNECTIONS_CI: u64 = 1_500;
/// A connection neither answered nor closed in this long is a hang (the
/// listener's header timeout is well within it).
const HANG: Duration = Duration::from_secs(40);
/// Hostile connections between two good reads.
const GOOD_EVERY: u64 = 25;

fn count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Valid requests of the API's routes, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let command = serde_json::to_vec(&register("127.0.0.1:9")).unwrap();
    let routes: [(&str, &str, &[u8]); 12] = [
        ("GET", "/v1/status", b""),
        ("GET", "/v1/map", b""),
        ("GET", "/v1/map?after=3&wait=1s", b""),
        ("GET", "/v1/clients", b""),
        ("GET", "/v1/admission", b""),
        ("POST", "/v1/commands", &command),
        ("POST", "/v1/clients/7/renew", b"{}"),
        ("POST", "/v1/memnodes/1/renew", b"{\"term\":1}"),
        ("POST", "/v1/admission", b"{\"client\":3}"),
        ("POST", "/v1/members", b"{\"id\":9,\"addr\":\"127.0.0.1:1\"}"),
        ("DELETE", "/v1/members/9", b""),
        ("GET", "/v1/check", b""),
    ];
    let mut out = Vec::new();
    for (method, path, body) in routes {
        for token in [Some(TOKEN), Some(OPERATOR_TOKEN), None] {
            let mut r = format!("{method} {path} HTTP/1.1\r\nhost: kintsugi\r\n").into_bytes();
            if let Some(t) = token {
                r.extend_from_slice(format!("authorization: Bearer {t}\r\n").as_bytes());
            }
            if !body.is_empty() {
                r.extend_from_slice(
                    format!(
                        "content-type: application/json\r\ncontent-length: {}\r\n",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
            r.extend_from_slice(b"\r\n");
            r.extend_from_slice(body);
            out.push(r);
        }
    }
    out
}

fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_ratio(1, 16) {
        return (0..rng.gen_range(0..512)).map(|_| rng.gen()).collect();
    }
    let mut b = seeds[rng.gen_range(0..seeds.len())].clone();
    for _ in 0..rng.gen_range(0..5) {
        match rng.gen_range(0..6) {
            0 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] = *b"{}[]\":,\r\n 0123456789".get(rng.gen_range(0..20)).unwrap_or(&0);
            }
            2 if !b.is_empty() => {
                let cut = rng.gen_range(0..b.len());
                b.truncate(cut);
            }
            3 => {
                let lie = match rng.gen_range(0..4) {
                    0 => format!("content-length: {}\r\n", rng.gen::<u32>()),
                    1 => "transfer-encoding: chunked\r\n".to_owned(),
                    2 => format!("x-junk: {}\r\n", "a".repeat(rng.gen_range(0..20_000))),
                    _ => "content-length: 5\r\ncontent-length: 7\r\n".to_owned(),
                };
                // After the request line, where headers go.
                let i = b.iter().position(|&c| c == b'\n').map_or(0, |i| i + 1);
                b.splice(i..i, lie.into_bytes());
            }
            _ => {
                let i = rng.gen_range(0..=b.len());
                let n = rng.gen_range(1..16);
                let junk: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                b.splice(i..i, junk);
            }
        }
    }
    b
}

/// Sends `bytes` on a fresh connection, closes the sending side, and reads
/// until the member closes; `Err` if it neither answers nor closes within
/// [`HANG`].
async fn hostile_connection(addr: &str, bytes: &[u8]) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    if s.write_all(bytes).await.is_err() {
        return Ok(());
    }
    let _ = s.shutdown().await;
    let mut sink = vec![0u8; 64 << 10];
    loop {
        match tokio::time::timeout(HANG, s.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(()),
            Ok(Ok(_)) => continue,
            Err(_) => return Err("neither answered nor closed".into()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_api_survives_hostile_connections_and_serves_an_operator_throughout() {
    let n = count("KINTSUGI_FUZZ_CONNECTIONS", CONNECTIONS_CI);
    static PANICS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        default(info);
    }));
    let c = Cluster::start(1).await;
    let leader = c.leader().await;
    let addr = c.addr(leader).to_string();
    let operator = control_plane::api::ControlClient::new(&addr, Some(OPERATOR_TOKEN.into())).unwrap();
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(SEED);
    // Several at once, as an attacker would: the listener serves them
    // concurrently.
    const AT_ONCE: u64 = 8;
    let (mut hangs, mut good) = (0u64, 0u64);
    let mut done = 0;
    while done < n {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..AT_ONCE.min(n - done) {
            let (addr, bytes) = (addr.clone(), mutate(&mut rng, &seeds));
            set.spawn(async move { hostile_connection(&addr, &bytes).await });
        }
        while let Some(r) = set.join_next().await {
            done += 1;
            if r.expect("joins").is_err() {
                hangs += 1;
            }
        }
        if done % GOOD_EVERY < AT_ONCE {
            operator
                .status()
                .await
                .expect("an operator is served between hostile connections");
            good += 1;
        }
    }
    let panics = PANICS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "fuzz http api: {n} hostile connections, {panics} panics, {hangs} hangs; {good} good reads served"
    );
    assert_eq!(panics, 0, "a connection panicked the member's listener");
    assert_eq!(hangs, 0, "a connection was neither answered nor closed");
}
