//! A seeded fuzzer of the rdma control channel (`fabric::rdma_control`):
//! its message decoder, both ways, and the node's answer to a client's
//! first message, which runs before any queue pair, region table or rkey
//! exists. Built without the `rdma` feature, so it runs on every machine;
//! the listener around it needs a device (`deploy/rdma-vm`).
//!
//! Inputs are valid messages mutated (bits flipped, bytes cut, inserted or
//! replaced, JSON tokens swapped, length prefixes lied about) and random
//! bytes. The count is fixed in CI; longer runs by command:
//!
//! ```sh
//! KINTSUGI_FUZZ_INPUTS=5000000 \
//!   cargo test --release -p kintsugi-fabric --test fuzz_rdma_control -- --nocapture
//! ```
//!
//! It prints what it ran: inputs, panics (a crash fails the test), what
//! decoded, and how the node answered each hello. The invariant beyond
//! "no panic": the node admits a hello only with a credential the cluster's
//! key issued, byte for byte.

use fabric::rdma_control::{self, Admitted, Door, QpEndpoint, ToClient, ToNode, MESSAGE_BYTES_MAX};
use fabric::{AdmissionKey, Gate, Holder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x7264_6d61_6374_726c;
/// Inputs in CI: a few seconds.
const INPUTS_CI: u64 = 1_000_000;

fn count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key() -> AdmissionKey {
    AdmissionKey::derive(b"fuzz-rdma-secret-0123456789abcdef")
}

fn holder(id: u64) -> Holder {
    Holder::Client {
        id,
        owners_first: 1,
        owners_count: 4,
    }
}

fn endpoint() -> QpEndpoint {
    QpEndpoint {
        qpn: 0x11,
        psn: 0xab_cdef,
        gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        lid: 0,
    }
}

/// Valid message bodies (no length prefix) to mutate: every message of
/// both directions.
fn seeds(issued: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let body = |m: &dyn erased::Message| m.body();
    let mut out = Vec::new();
    for credential in
        issued
            .iter()
            .map(|c| fabric::admission::hex(c))
            .chain([String::new(), "zz".into(), "0".into()])
    {
        out.push(body(&ToNode::Hello {
            epoch: 3,
            qp: endpoint(),
            credential,
        }));
    }
    out.push(body(&ToNode::Regions));
    out.push(body(&ToNode::Revoked));
    let regions = vec![
        rdma_control::RemoteRegion {
            id: 1,
            size: 1 << 20,
            key: 7,
            addr: 0x7f00_0000_0000,
            rkey: 0x1234,
        };
        3
    ];
    for m in [
        ToClient::Welcome {
            node: 2,
            epoch: 3,
            qp: endpoint(),
            regions: regions.clone(),
        },
        ToClient::Stale { node_epoch: 9 },
        ToClient::Lapsed,
        ToClient::Regions(regions),
        ToClient::Revoked {
            epoch: 4,
            lapsed: false,
        },
        ToClient::Refused("no".into()),
    ] {
        out.push(body(&m));
    }
    out
}

/// Serialising either direction's messages through one function.
mod erased {
    pub trait Message {
        fn body(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Message for T {
        fn body(&self) -> Vec<u8> {
            let mut framed = Vec::new();
            fabric::rdma_control::send(&mut framed, self).expect("a seed encodes");
            framed[4..].to_vec()
        }
    }
}

/// JSON tokens a mutation swaps in: the shapes a hostile peer would try.
const TOKENS: &[&str] = &[
    "null",
    "true",
    "-1",
    "18446744073709551616",
    "1e999",
    "\"\"",
    "[]",
    "{}",
    "\"Hello\"",
    "{\"Hello\":{}}",
    "\"\\u0000\"",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
];

fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_ratio(1, 16) {
        return (0..rng.gen_range(0..256)).map(|_| rng.gen()).collect();
    }
    let mut b = seeds[rng.gen_range(0..seeds.len())].clone();
    for _ in 0..rng.gen_range(1..4) {
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
            _ => {
                // A value replaced by another token: after a ':' or a '['.
                let at: Vec<usize> = (0..b.len()).filter(|&i| b[i] == b':' || b[i] == b'[').collect();
                if let Some(&i) = at.get(rng.gen_range(0..at.len().max(1))) {
                    let end = (i + 1..b.len())
                        .find(|&j| matches!(b[j], b',' | b'}' | b']'))
                        .unwrap_or(b.len());
                    let token = TOKENS[rng.gen_range(0..TOKENS.len())].as_bytes();
                    b.splice(i + 1..end, token.iter().copied());
                }
            }
        }
    }
    b
}

/// A frame: the body behind its length prefix, which lies now and then.
fn frame(rng: &mut StdRng, body: &[u8]) -> Vec<u8> {
    let len = match rng.gen_range(0..16) {
        0 => rng.gen::<u32>(),
        1 => (MESSAGE_BYTES_MAX + 1) as u32,
        2 => body.len().saturating_sub(1) as u32,
        _ => body.len() as u32,
    };
    let mut f = len.to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

#[derive(Debug, Default)]
struct Tally {
    to_node: u64,
    to_client: u64,
    hellos: u64,
    admitted: u64,
    refused: u64,
    stale: u64,
    lapsed: u64,
}

#[test]
fn the_control_channel_never_panics_and_admits_only_issued_credentials() {
    let n = count("KINTSUGI_FUZZ_INPUTS", INPUTS_CI);
    let key = key();
    let issued: Vec<Vec<u8>> = (1..=3)
        .map(|id| key.issue(holder(id)).to_bytes().to_vec())
        .collect();
    let gate = Gate::keyed(key);
    let seeds = seeds(&issued);
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut t = Tally::default();
    for _ in 0..n {
        let body = mutate(&mut rng, &seeds);
        let wire = frame(&mut rng, &body);
        // A panic anywhere here fails the test: that is the crash it looks for.
        if let Ok(Some(_)) = rdma_control::receive::<ToClient>(&mut wire.as_slice()) {
            t.to_client += 1;
        }
        let Ok(Some(first)) = rdma_control::receive::<ToNode>(&mut wire.as_slice()) else {
            continue;
        };
        t.to_node += 1;
        let credential = match &first {
            ToNode::Hello { credential, .. } => {
                t.hellos += 1;
                Some(credential.clone())
            }
            _ => None,
        };
        let door = Door {
            gate: &gate,
            node_epoch: rng.gen_range(0..6),
            serving: rng.gen_ratio(7, 8),
            clients: rng.gen_range(0..4),
            clients_max: 3,
        };
        match rdma_control::answer_first(first, &door) {
            Ok(Admitted { holder, .. }) => {
                t.admitted += 1;
                let bytes = credential
                    .as_deref()
                    .and_then(fabric::admission::unhex)
                    .expect("only a hello is admitted, with a hex credential");
                let which = issued
                    .iter()
                    .position(|c| *c == bytes)
                    .unwrap_or_else(|| panic!("admitted a credential nobody issued: {credential:?}"));
                assert_eq!(holder, Some(self::holder(which as u64 + 1)));
            }
            Err(ToClient::Refused(_)) => t.refused += 1,
            Err(ToClient::Stale { .. }) => t.stale += 1,
            Err(ToClient::Lapsed) => t.lapsed += 1,
            Err(other) => panic!("a first message answered with {other:?}"),
        }
    }
    eprintln!("fuzz rdma control channel: {n} inputs, 0 panics; {t:?}");
    assert!(
        t.to_node > 0 && t.admitted > 0 && t.refused > 0,
        "the inputs reach every answer: {t:?}"
    );
}

/// A hello that is right in every way but its credential gets a refusal
/// that names why and nothing of the node: no epoch, no load.
#[test]
fn a_hello_without_a_valid_credential_learns_nothing_of_the_node() {
    let gate = Gate::keyed(key());
    let key = key();
    let door = Door {
        gate: &gate,
        node_epoch: 9,
        serving: false,
        clients: 3,
        clients_max: 3,
    };
    let forged = {
        let mut c = key.issue(holder(1)).to_bytes();
        let last = c.len() - 1;
        c[last] ^= 1;
        fabric::admission::hex(&c)
    };
    let other_cluster = fabric::admission::hex(
        &AdmissionKey::derive(b"another-cluster-secret-0123456789")
            .issue(holder(1))
            .to_bytes(),
    );
    for credential in [String::new(), "not hex".into(), forged, other_cluster] {
        let answer = rdma_control::answer_first(
            ToNode::Hello {
                epoch: 1,
                qp: endpoint(),
                credential: credential.clone(),
            },
            &door,
        );
        match answer {
            Err(ToClient::Refused(why)) => assert!(!why.contains('9'), "{credential:?}: {why}"),
            other => panic!("{credential:?}: {other:?}"),
        }
    }
    let good = fabric::admission::hex(&key.issue(holder(2)).to_bytes());
    let answer = rdma_control::answer_first(
        ToNode::Hello {
            epoch: 1,
            qp: endpoint(),
            credential: good,
        },
        &door,
    );
    assert_eq!(answer, Err(ToClient::Stale { node_epoch: 9 }));
}
