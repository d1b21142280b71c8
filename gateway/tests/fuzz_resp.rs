//! A seeded fuzzer of the RESP port's decoder and command parser: what a
//! Redis client (or an attacker) sends before any index is touched.
//!
//! Inputs are valid requests (RESP arrays of bulk strings, inline
//! commands, several pipelined) built from every command in the table with
//! random arguments, then mutated (bits flipped, bytes cut, inserted or
//! replaced, length headers lied about), and random bytes. Each input is fed
//! to the decoder in random splits, as a socket delivers it, and every
//! request it decodes goes to the parser. The count is fixed in CI; longer
//! runs by command:
//!
//! ```sh
//! KINTSUGI_FUZZ_INPUTS=5000000 cargo test --release -p kintsugi-gateway --test fuzz_resp -- --nocapture
//! ```

use bytes::{Bytes, BytesMut};
use gateway::command::{self, TABLE};
use gateway::resp::{self, Decoded, ARGS_MAX, REQUEST_BYTES_MAX};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x7265_7370_6675_7a7a;
/// Inputs in CI: a few seconds.
const INPUTS_CI: u64 = 300_000;

fn count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn arg(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..6) {
        0 => rng.gen_range(-1_000_000i64..1_000_000).to_string().into_bytes(),
        1 => b"EX".to_vec(),
        2 => b"NX".to_vec(),
        3 => b"*".to_vec(),
        4 => i64::MAX.to_string().into_bytes(),
        _ => (0..rng.gen_range(0..24)).map(|_| rng.gen()).collect(),
    }
}

/// A valid request: a command of the table with 0 to 5 arguments, as a
/// RESP array or an inline line.
fn request(rng: &mut StdRng) -> Vec<u8> {
    let name = TABLE[rng.gen_range(0..TABLE.len())].name;
    let mut args = vec![name.as_bytes().to_vec()];
    for _ in 0..rng.gen_range(0..6) {
        args.push(arg(rng));
    }
    if rng.gen_ratio(1, 4) {
        let printable: Vec<Vec<u8>> = args
            .into_iter()
            .map(|a| a.into_iter().filter(|b| b.is_ascii_graphic()).collect())
            .collect();
        let mut line = printable.join(&b' ');
        line.extend_from_slice(b"\r\n");
        return line;
    }
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(&a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn mutate(rng: &mut StdRng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.gen_range(0..4) {
        match rng.gen_range(0..5) {
            0 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] = *b"*$\r\n-:+0123456789".get(rng.gen_range(0..17)).unwrap_or(&0);
            }
            2 if !b.is_empty() => {
                let cut = rng.gen_range(0..b.len());
                b.truncate(cut);
            }
            3 => {
                // A header that lies: a huge or negative count or length.
                let lie = match rng.gen_range(0..4) {
                    0 => format!("*{}\r\n", rng.gen::<u32>()),
                    1 => format!("${}\r\n", rng.gen::<i64>()),
                    2 => format!("*{}\r\n", ARGS_MAX + 1),
                    _ => format!("${}\r\n", REQUEST_BYTES_MAX + 1),
                };
                let i = rng.gen_range(0..=b.len());
                b.splice(i..i, lie.into_bytes());
            }
            _ => {
                let i = rng.gen_range(0..=b.len());
                let n = rng.gen_range(1..8);
                let junk: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                b.splice(i..i, junk);
            }
        }
    }
    b
}

#[test]
fn the_resp_decoder_and_parser_never_panic_and_never_grow_past_their_limits() {
    let n = count("KINTSUGI_FUZZ_INPUTS", INPUTS_CI);
    let mut rng = StdRng::seed_from_u64(SEED);
    let (mut requests, mut parsed, mut malformed) = (0u64, 0u64, 0u64);
    for _ in 0..n {
        let input = if rng.gen_ratio(1, 16) {
            (0..rng.gen_range(0..512)).map(|_| rng.gen()).collect()
        } else {
            let mut pipelined = Vec::new();
            for _ in 0..rng.gen_range(1..4) {
                pipelined.extend(request(&mut rng));
            }
            mutate(&mut rng, pipelined)
        };
        // Delivered in random splits, as a socket does.
        let mut buf = BytesMut::new();
        let mut at = 0;
        'input: while at < input.len() {
            let step = rng.gen_range(1..=input.len() - at);
            buf.extend_from_slice(&input[at..at + step]);
            at += step;
            loop {
                // A panic here fails the test: the crash it looks for.
                match resp::decode_request(&mut buf) {
                    Decoded::Request(args) => {
                        requests += 1;
                        assert!(!args.is_empty() && args.len() <= ARGS_MAX);
                        let args: Vec<Bytes> = args;
                        if command::parse(&args).is_ok() {
                            parsed += 1;
                        }
                    }
                    Decoded::Incomplete => {
                        assert!(
                            buf.len() <= REQUEST_BYTES_MAX,
                            "the decoder buffers past its limit instead of refusing"
                        );
                        break;
                    }
                    Decoded::Malformed(_) => {
                        // The connection closes here.
                        malformed += 1;
                        break 'input;
                    }
                }
            }
        }
    }
    eprintln!(
        "fuzz resp: {n} inputs, 0 panics; {requests} requests decoded ({parsed} parsed as commands), \
         {malformed} connections closed as malformed"
    );
}
