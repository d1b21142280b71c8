//! A seeded fuzzer of the memory node's tcp listener: its frame decoders,
//! and its connection state machine (unauthenticated, admitted, refused)
//! over real sockets, while a client with a credential is served after
//! every hostile connection.
//!
//! Inputs are valid frames mutated (bits flipped, bytes cut, inserted or
//! replaced, length prefixes lied about) and random bytes. The counts are
//! fixed in CI; longer runs by command:
//!
//! ```sh
//! KINTSUGI_FUZZ_INPUTS=5000000 KINTSUGI_FUZZ_CONNECTIONS=20000 \
//!   cargo test --release -p kintsugi-fabric --test fuzz_wire -- --nocapture
//! ```
//!
//! Each prints what it ran: inputs, panics (a crash), connections left
//! neither answered nor closed within the bound (a hang), and the good
//! client's batches.

use std::sync::Arc;
use std::time::Duration;

use fabric::transport::TcpOptions;
use fabric::wire::{self, FRAME_BYTES_MAX};
use fabric::{
    AdmissionKey, Batch, Client, Completions, GlobalAddr, Holder, MemoryNode, NodeDescriptor, Op, OpKind,
    PayloadRange, RegionDescriptor, RegionSpec, TcpTransport,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEED: u64 = 0x6b69_6e74_7375_6769;
/// Decoder inputs in CI: a few seconds.
const INPUTS_CI: u64 = 1_000_000;
/// Hostile connections in CI: about a second.
const CONNECTIONS_CI: u64 = 2_000;
/// A connection neither answered nor closed in this long is a hang.
const HANG: Duration = Duration::from_secs(10);

fn count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key() -> AdmissionKey {
    AdmissionKey::derive(b"fuzz-test-secret-0123456789abcdef")
}

/// Valid frames (bodies, without the length prefix) to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let cred = key()
        .issue(Holder::Client {
            id: 1,
            owners_first: 1,
            owners_count: 1,
        })
        .to_bytes();
    let mut out = Vec::new();
    let mut f = Vec::new();
    wire::encode_hello(&mut f, 1, &cred);
    out.push(f[4..].to_vec());
    wire::encode_hello(&mut f, 2, &[]);
    out.push(f[4..].to_vec());
    let op = |offset, kind| Op {
        node: 1,
        region: 1,
        key: 7,
        offset,
        kind,
    };
    let ops = [
        op(0, OpKind::Read { len: 64 }),
        op(
            8,
            OpKind::Write {
                data: PayloadRange { start: 0, len: 8 },
            },
        ),
        op(16, OpKind::Cas { expect: 0, new: 1 }),
        op(24, OpKind::Faa { add: 3 }),
        op(0, OpKind::Flush { len: 64 }),
    ];
    wire::encode_batch(&mut f, 3, 1, u64::MAX, ops.iter(), &[9; 8]);
    out.push(f[4..].to_vec());
    let d = NodeDescriptor {
        node: 1,
        epoch: 4,
        regions: vec![RegionDescriptor {
            id: 1,
            size: 4096,
            key: 7,
        }],
    };
    wire::encode_hello_response(&mut f, 1, &d);
    out.push(f[4..].to_vec());
    wire::encode_refused(&mut f, 1, "no credential", false);
    out.push(f[4..].to_vec());
    let mut c = Completions::default();
    c.push_read(4).copy_from_slice(b"abcd");
    c.push(Ok(fabric::Outcome::Old(5)));
    c.push(Err(fabric::VerbError::BadKey));
    wire::encode_completions(&mut f, 9, &c);
    out.push(f[4..].to_vec());
    out
}

fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_ratio(1, 16) {
        return (0..rng.gen_range(0..256)).map(|_| rng.gen()).collect();
    }
    let mut b = seeds[rng.gen_range(0..seeds.len())].clone();
    for _ in 0..rng.gen_range(1..6) {
        match rng.gen_range(0..5) {
            0 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            2 if !b.is_empty() => {
                let cut = rng.gen_range(0..b.len());
                b.truncate(cut);
            }
            3 => {
                let i = rng.gen_range(0..=b.len());
                let n = rng.gen_range(1..16);
                let junk: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                b.splice(i..i, junk);
            }
            _ if b.len() >= 12 => {
                // A length or count field told a big lie.
                let i = rng.gen_range(0..b.len() - 4);
                b[i..i + 4].copy_from_slice(&rng.gen::<u32>().to_le_bytes());
            }
            _ => {}
        }
    }
    b
}

#[test]
fn the_frame_decoders_never_panic_on_mutated_frames() {
    let n = count("KINTSUGI_FUZZ_INPUTS", INPUTS_CI);
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(SEED);
    let (mut ops, mut out) = (Vec::new(), Completions::default());
    let (mut requests_ok, mut responses_ok) = (0u64, 0u64);
    for _ in 0..n {
        let body = mutate(&mut rng, &seeds);
        // A panic here fails the test: that is the crash it looks for.
        if wire::decode_request(&body, 1, &mut ops).is_ok() {
            requests_ok += 1;
            assert!(ops.len() <= fabric::VERBS_PER_BATCH_MAX);
        }
        out.clear();
        if wire::decode_response(&body, &mut out).is_ok() {
            responses_ok += 1;
        }
        let _ = wire::response_id(&body);
    }
    eprintln!(
        "fuzz wire decoders: {n} inputs, 0 panics; {requests_ok} decoded as requests, {responses_ok} as responses"
    );
}

/// Sends `frames` (each with a length prefix, true or lying) on a fresh
/// connection, then reads until the node closes or stops answering;
/// `Err` if it neither answers nor closes within [`HANG`].
async fn hostile_connection(addr: &str, frames: &[Vec<u8>]) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    for f in frames {
        if s.write_all(f).await.is_err() {
            return Ok(()); // closed on us: fine
        }
    }
    // Our side is done: the node must answer and close, or close.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_survives_hostile_connections_and_serves_a_client_throughout() {
    let n = count("KINTSUGI_FUZZ_CONNECTIONS", CONNECTIONS_CI);
    // A panic in a connection's task would only close that connection:
    // counted here, it is the crash the fuzzer looks for.
    static PANICS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        default(info);
    }));
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
    node.set_gate(fabric::Gate::keyed(key()));
    let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
    let addr = addr.to_string();
    let server = tokio::spawn(fabric::server::serve(
        listener,
        node.clone(),
        std::future::pending(),
    ));
    let good_cred = key().issue(Holder::Service { id: 9 });
    let (t, map) = TcpTransport::discover_with(
        std::slice::from_ref(&addr),
        TcpOptions::with_credential(good_cred.clone()),
    )
    .await
    .unwrap();
    let mut good = Client::new(map, t.into());
    let hello = {
        let mut f = Vec::new();
        wire::encode_hello(&mut f, 1, &good_cred.to_bytes());
        f
    };
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(SEED ^ 1);
    let (mut hangs, mut served, mut frames_sent) = (0u64, 0u64, 0u64);
    for i in 0..n {
        let mut frames = Vec::new();
        // Half the connections are admitted first: the fuzz then reaches
        // the admitted state machine and the verb path.
        if rng.gen_bool(0.5) {
            frames.push(hello.clone());
        }
        for _ in 0..rng.gen_range(1..6) {
            let body = mutate(&mut rng, &seeds);
            let len = if rng.gen_ratio(1, 8) {
                rng.gen_range(0..=FRAME_BYTES_MAX as u32 + 16)
            } else {
                body.len() as u32
            };
            let mut f = len.to_le_bytes().to_vec();
            f.extend_from_slice(&body);
            frames.push(f);
            frames_sent += 1;
        }
        if let Err(why) = hostile_connection(&addr, &frames).await {
            hangs += 1;
            eprintln!("connection {i}: {why}");
        }
        // The good client, after every hostile connection.
        let mut b = Batch::new();
        let faa = b.faa(GlobalAddr::new(1, 4096), 1);
        good.execute(&mut b).await.expect("the good client is served");
        assert_eq!(b.old_value(faa), Ok(i), "connection {i}");
        served += 1;
        assert!(!server.is_finished(), "the server stopped at connection {i}");
    }
    let panics = PANICS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "fuzz memory-node listener: {n} connections, {frames_sent} hostile frames, {panics} crashes, {hangs} \
         hangs; the good client served {served} batches"
    );
    assert_eq!((panics, hangs), (0, 0));
}
