//! A real `kintsugi memnode` process under hostile traffic: random bytes,
//! truncated frames, huge length prefixes, unknown verbs and out-of-bounds
//! verbs on some connections, while a well-behaved client on another
//! connection keeps getting correct answers. The node must neither crash nor
//! grow its memory without bound.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fabric::wire::{self, FRAME_BYTES_MAX};
use fabric::{Batch, Client, GlobalAddr, Op, OpKind, PayloadRange, TcpTransport};
use rand::{Rng, SeedableRng};
use support::MemnodeProcess;

const REGION: u16 = 1;
const REGION_BYTES: u64 = 1 << 20;
const ROUNDS: usize = 60;
/// Connections that each announce a full frame and send only 16 KiB of it.
const SLOW_CONNECTIONS: usize = 200;
/// Far above what a 1 MiB-region node needs, far below what unbounded
/// buffering of the hostile frames sent here would take.
const RSS_KIB_MAX: u64 = 128 * 1024;

/// Connects and bounds every read, so a server that fails to close a bad
/// connection makes the test fail instead of hang.
fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// True once the server has closed the connection (EOF or reset).
fn closed_by_server(mut s: TcpStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an answer to an earlier valid frame
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) => panic!("server neither answered nor closed: {e}"),
        }
    }
}

fn frame_with_len(len: u32, body: &[u8]) -> Vec<u8> {
    let mut f = len.to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

fn hostile(round: usize, addr: &str, rng: &mut rand::rngs::StdRng, key: u32) {
    let mut s = connect(addr);
    match round % 6 {
        // Random bytes.
        0 => {
            let junk: Vec<u8> = (0..rng.gen_range(1..4096)).map(|_| rng.gen()).collect();
            let _ = s.write_all(&junk);
            // Either the node rejects the prefix or it waits for the rest of
            // a plausible frame; closing our side must free it in both cases.
            let _ = s.shutdown(std::net::Shutdown::Write);
            assert!(closed_by_server(s));
        }
        // A huge length prefix: must be refused without allocating it.
        1 => {
            let len = if rng.gen() {
                u32::MAX
            } else {
                FRAME_BYTES_MAX as u32 + 1
            };
            s.write_all(&frame_with_len(len, &[2; 64])).unwrap();
            assert!(closed_by_server(s));
        }
        // A frame that promises a megabyte and stops short, then hangs up.
        2 => {
            let _ = s.write_all(&frame_with_len(FRAME_BYTES_MAX as u32 - 1, &[0; 1000]));
            drop(s);
        }
        // A well-framed body that does not parse (unknown verb).
        3 => {
            let mut body = vec![2u8];
            body.extend_from_slice(&1u64.to_le_bytes()); // request id
            body.extend_from_slice(&1u64.to_le_bytes()); // epoch
            body.extend_from_slice(&1u16.to_le_bytes()); // one op
            body.push(0xEE); // no such verb
            body.extend_from_slice(&[0; 30]);
            s.write_all(&frame_with_len(body.len() as u32, &body)).unwrap();
            assert!(closed_by_server(s));
        }
        // Valid frames with verbs outside the region, misaligned, wrong key:
        // answered with error completions; the connection stays usable.
        4 => {
            let op = |offset, key, kind| Op {
                node: 1,
                region: REGION,
                key,
                offset,
                kind,
            };
            let ops = [
                op(REGION_BYTES - 4, key, OpKind::Read { len: 8 }),
                op(u64::MAX - 3, key, OpKind::Read { len: 8 }),
                op(12, key, OpKind::Cas { expect: 0, new: 1 }),
                op(0, key ^ 1, OpKind::Faa { add: 1 }),
                op(
                    REGION_BYTES,
                    key,
                    OpKind::Write {
                        data: PayloadRange { start: 0, len: 8 },
                    },
                ),
            ];
            // Admitted first: verbs run only on a connection whose HELLO
            // presented a credential.
            let mut frame = Vec::new();
            wire::encode_hello(&mut frame, 6, &support::credential().to_bytes());
            s.write_all(&frame).unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut body = vec![0; u32::from_le_bytes(len) as usize];
            s.read_exact(&mut body).unwrap();
            let mut out = fabric::Completions::default();
            assert!(matches!(
                wire::decode_response(&body, &mut out),
                Ok(wire::Response::Hello(_))
            ));
            wire::encode_batch(&mut frame, 7, 1, u64::MAX, ops.iter(), &[9; 8]);
            s.write_all(&frame).unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut body = vec![0; u32::from_le_bytes(len) as usize];
            s.read_exact(&mut body).unwrap();
            let mut out = fabric::Completions::default();
            assert_eq!(wire::decode_response(&body, &mut out), Ok(wire::Response::Done));
            assert_eq!(out.len(), ops.len());
            assert!(matches!(
                out.as_slice()[0],
                Err(fabric::VerbError::OutOfBounds { .. })
            ));
            assert!(out.as_slice()[1..]
                .iter()
                .all(|c| *c == Err(fabric::VerbError::Flushed)));
        }
        // A truncated frame followed by hanging up mid-header.
        _ => {
            let _ = s.write_all(&[5, 0]);
            drop(s);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_connections_do_not_disturb_a_good_client() {
    let mut node = MemnodeProcess::start(&["--region", "1:1MiB"]);
    let (transport, map) =
        TcpTransport::discover_with(std::slice::from_ref(&node.addr), support::tcp_options())
            .await
            .unwrap();
    let key = map.region(REGION).unwrap().replicas[0].key;
    let mut good = Client::new(map, transport.into());
    let counter = GlobalAddr::new(REGION, 0);
    let rss_start = node.rss_kib();

    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b69_6e74);
    let mut batch = Batch::new();
    for round in 0..ROUNDS {
        let addr = node.addr.clone();
        let mut hostile_rng = rand::rngs::StdRng::seed_from_u64(rng.gen());
        tokio::task::spawn_blocking(move || hostile(round, &addr, &mut hostile_rng, key))
            .await
            .unwrap();

        // The good client: an FAA and a write/read of a round-specific pattern.
        batch.clear();
        let pattern = vec![round as u8; 100];
        let at = GlobalAddr::new(REGION, 4096 + 128 * round as u64 + 3);
        let faa = batch.faa(counter, 1);
        batch.write(at, &pattern);
        let read = batch.read(at, 100);
        good.execute(&mut batch).await.unwrap();
        assert_eq!(batch.old_value(faa), Ok(round as u64), "round {round}");
        assert_eq!(batch.read_result(read), Ok(&pattern[..]), "round {round}");
        assert!(node.alive(), "memory node died in round {round}");
    }

    // Slow loris: many connections announce a full-size frame, send a
    // little of it and sit there while the good client carries on.
    let addr = node.addr.clone();
    let idle: Vec<TcpStream> = tokio::task::spawn_blocking(move || {
        (0..SLOW_CONNECTIONS)
            .map(|_| {
                let mut s = connect(&addr);
                // Refused at the length prefix (over the HELLO budget): the
                // node may close before all of it is written.
                let _ = s.write_all(&frame_with_len(FRAME_BYTES_MAX as u32, &[1; 16 * 1024]));
                s
            })
            .collect()
    })
    .await
    .unwrap();
    batch.clear();
    let faa = batch.faa(counter, 1);
    good.execute(&mut batch).await.unwrap();
    assert_eq!(batch.old_value(faa), Ok(ROUNDS as u64));
    let rss_end = node.rss_kib();
    drop(idle);
    assert!(
        rss_end < RSS_KIB_MAX,
        "memory node grew from {rss_start} KiB to {rss_end} KiB under hostile traffic"
    );
    assert_eq!(good.stats().round_trips, ROUNDS as u64 + 1);
    assert!(node.terminate().success());
}
