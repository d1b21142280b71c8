//! The tcp transport's frames. All integers little-endian.
//!
//! ```text
//! frame      = len: u32 (bytes after this field, <= FRAME_BYTES_MAX) | body
//! request    = kind: u8 | request_id: u64 | ...
//!   HELLO    = credential_len: u16 | credential[credential_len]   (`crate::admission`)
//!   BATCH    = epoch: u64 | expires_at_us: u64 | op_count: u16 | op*
//!              (expires_at_us: the client's wall clock, µs since the Unix
//!              epoch, past which the node must not run it: `crate::deadline`)
//!   op       = verb: u8 | region: u16 | key: u32 | offset: u64 | operand
//!     READ   operand = len: u32
//!     WRITE  operand = len: u32 | bytes[len]
//!     CAS    operand = expect: u64 | new: u64
//!     FAA    operand = add: u64
//!     FLUSH  operand = len: u32
//! response   = request_id: u64 | status: u8 | ...
//!   OK       = count: u16 | completion*
//!   STALE    = node_epoch: u64
//!   HELLO    = node: u16 | epoch: u64 | region_count: u16 | (id: u16 | size: u64 | key: u32)*
//!   LAPSED   = (nothing: the node's lease may have lapsed; it ran no verb)
//!   EXPIRED  = late_ms: u64   (the batch arrived past its deadline, by the
//!              node's clock; it ran no verb of it. The connection stays)
//!   REFUSED  = transient: u8 | reason_len: u16 | utf-8 reason   (no credential,
//!              a forged or fenced one, a batch before HELLO; transient = 1 when
//!              the same credential may be admitted later: the node is not
//!              ready yet, or full. The node closes the connection)
//! completion = 0 | len: u32 | bytes[len]          READ data
//!            | 1                                  WRITE/FLUSH done
//!            | 2 | old: u64                       CAS/FAA old value
//!            | 3 | code: u8 | a: u64 | b: u64 | c: u64   error (see `encode_error`)
//! ```
//!
//! A request that does not parse, or a length prefix past the limit, means
//! the peer is broken or hostile: the server closes that connection and
//! nothing else. Before HELLO is admitted a frame may be at most
//! [`HELLO_FRAME_BYTES_MAX`]: an unauthenticated peer costs the node a few
//! bytes, not a frame buffer.

use crate::addr::{Epoch, NodeId};
use crate::memnode::{NodeDescriptor, RegionDescriptor};
use crate::verb::{
    Completion, Completions, Op, OpKind, Outcome, PayloadRange, VerbError, BATCH_BYTES_MAX,
    VERBS_PER_BATCH_MAX,
};

/// Largest op on the wire without its WRITE bytes: verb, region, key,
/// offset, and a 16-byte operand.
const OP_HEADER_BYTES_MAX: usize = 1 + 2 + 4 + 8 + 16;
/// Largest completion without its READ bytes (an error: tag, code, 3 words).
const COMPLETION_HEADER_BYTES_MAX: usize = 1 + 1 + 3 * 8;
/// Largest frame body either way: a full batch of the largest ops plus the
/// byte budget of a batch. The server allocates at most this per connection
/// and direction, so this bounds its memory per connection.
pub const FRAME_BYTES_MAX: usize = 32
    + VERBS_PER_BATCH_MAX * max(OP_HEADER_BYTES_MAX, COMPLETION_HEADER_BYTES_MAX)
    + BATCH_BYTES_MAX as usize;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// Longest credential a HELLO may carry (today's are
/// [`crate::admission::CREDENTIAL_BYTES`]; the room left is for a layout
/// version 2 to be refused by name rather than as an oversized frame).
pub const HELLO_CREDENTIAL_BYTES_MAX: usize = 64;
/// Longest HELLO body: kind, request id, credential length and credential.
/// The pre-authentication byte budget of a connection.
pub const HELLO_FRAME_BYTES_MAX: usize = 1 + 8 + 2 + HELLO_CREDENTIAL_BYTES_MAX;
/// Longest refusal reason sent: one sentence.
pub const REFUSAL_BYTES_MAX: usize = 256;

const KIND_HELLO: u8 = 1;
const KIND_BATCH: u8 = 2;
const STATUS_OK: u8 = 0;
const STATUS_STALE: u8 = 1;
const STATUS_HELLO: u8 = 2;
const STATUS_LAPSED: u8 = 3;
const STATUS_REFUSED: u8 = 4;
const STATUS_EXPIRED: u8 = 5;
const VERB_READ: u8 = 1;
const VERB_WRITE: u8 = 2;
const VERB_CAS: u8 = 3;
const VERB_FAA: u8 = 4;
const VERB_FLUSH: u8 = 5;
const TAG_READ: u8 = 0;
const TAG_DONE: u8 = 1;
const TAG_OLD: u8 = 2;
const TAG_ERROR: u8 = 3;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed frame: {0}")]
pub struct WireError(pub &'static str);

/// A decoded request.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// Asks for the node's descriptor, presenting a credential.
    Hello {
        /// Echoed in the response.
        id: u64,
        /// The credential's bytes (empty: none).
        credential: Vec<u8>,
    },
    /// A batch; its ops were decoded into the caller's vector, and their
    /// WRITE data ranges point into the frame body.
    Batch {
        /// Echoed in the response.
        id: u64,
        /// The client's map epoch.
        epoch: Epoch,
        /// Past this instant (µs since the Unix epoch, by the node's clock)
        /// the batch must not run (`crate::deadline`).
        expires_at_us: u64,
    },
}

/// A decoded response, as the client sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Response {
    /// The batch ran; its completions were decoded into the caller's buffer.
    Done,
    /// The node refused the batch: its epoch is newer.
    Stale {
        /// The node's epoch.
        node_epoch: Epoch,
    },
    /// The node refused the batch: its lease may have lapsed.
    Lapsed,
    /// The node refused the batch: it arrived this late past its deadline
    /// (`crate::deadline`), and ran none of it.
    Expired {
        /// By how much, ms, by the node's clock.
        late_ms: u64,
    },
    /// The node refused the connection or the frame, and closes it.
    Refused {
        /// The node's reason.
        reason: String,
        /// Whether the same credential may be admitted later.
        transient: bool,
    },
    /// The node's descriptor.
    Hello(NodeDescriptor),
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).ok_or(WireError("length overflow"))?;
        let s = self.buf.get(self.at..end).ok_or(WireError("truncated"))?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(
            self.bytes(2)?.try_into().map_err(|_| WireError("u16"))?,
        ))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().map_err(|_| WireError("u32"))?,
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.bytes(8)?.try_into().map_err(|_| WireError("u64"))?,
        ))
    }
    fn finish(&self) -> Result<(), WireError> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(WireError("trailing bytes"))
        }
    }
}

/// Starts a frame in `buf` (clearing it); [`end_frame`] fills in the length.
pub fn begin_frame(buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&[0; 4]);
}

/// Writes the length prefix of a frame begun with [`begin_frame`].
pub fn end_frame(buf: &mut [u8]) {
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_le_bytes());
}

/// Encodes a HELLO request frame presenting `credential` (empty: none).
pub fn encode_hello(buf: &mut Vec<u8>, id: u64, credential: &[u8]) {
    assert!(credential.len() <= HELLO_CREDENTIAL_BYTES_MAX);
    begin_frame(buf);
    buf.push(KIND_HELLO);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.extend_from_slice(&(credential.len() as u16).to_le_bytes());
    buf.extend_from_slice(credential);
    end_frame(buf);
}

/// Encodes a BATCH request frame carrying `ops` (all to one node), not to
/// run past `expires_at_us` ([`crate::deadline::stamp`]).
pub fn encode_batch<'o>(
    buf: &mut Vec<u8>,
    id: u64,
    epoch: Epoch,
    expires_at_us: u64,
    ops: impl ExactSizeIterator<Item = &'o Op>,
    payload: &[u8],
) {
    begin_frame(buf);
    buf.push(KIND_BATCH);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.extend_from_slice(&epoch.to_le_bytes());
    buf.extend_from_slice(&expires_at_us.to_le_bytes());
    buf.extend_from_slice(&(ops.len() as u16).to_le_bytes());
    for op in ops {
        let verb = match op.kind {
            OpKind::Read { .. } => VERB_READ,
            OpKind::Write { .. } => VERB_WRITE,
            OpKind::Cas { .. } => VERB_CAS,
            OpKind::Faa { .. } => VERB_FAA,
            OpKind::Flush { .. } => VERB_FLUSH,
        };
        buf.push(verb);
        buf.extend_from_slice(&op.region.to_le_bytes());
        buf.extend_from_slice(&op.key.to_le_bytes());
        buf.extend_from_slice(&op.offset.to_le_bytes());
        match op.kind {
            OpKind::Read { len } | OpKind::Flush { len } => buf.extend_from_slice(&len.to_le_bytes()),
            OpKind::Write { data } => {
                buf.extend_from_slice(&data.len.to_le_bytes());
                buf.extend_from_slice(&payload[data.range()]);
            }
            OpKind::Cas { expect, new } => {
                buf.extend_from_slice(&expect.to_le_bytes());
                buf.extend_from_slice(&new.to_le_bytes());
            }
            OpKind::Faa { add } => buf.extend_from_slice(&add.to_le_bytes()),
        }
    }
    end_frame(buf);
}

/// Decodes a request body (the frame without its length prefix). BATCH ops
/// are appended to `ops` with `node` as their node; WRITE data ranges index
/// into `body`.
pub fn decode_request(body: &[u8], node: NodeId, ops: &mut Vec<Op>) -> Result<Request, WireError> {
    ops.clear();
    let mut r = Reader::new(body);
    let kind = r.u8()?;
    let id = r.u64()?;
    match kind {
        KIND_HELLO => {
            let len = usize::from(r.u16()?);
            if len > HELLO_CREDENTIAL_BYTES_MAX {
                return Err(WireError("credential too long"));
            }
            let credential = r.bytes(len)?.to_vec();
            r.finish()?;
            Ok(Request::Hello { id, credential })
        }
        KIND_BATCH => {
            let epoch = r.u64()?;
            let expires_at_us = r.u64()?;
            let count = usize::from(r.u16()?);
            if count > VERBS_PER_BATCH_MAX {
                return Err(WireError("too many verbs"));
            }
            for _ in 0..count {
                let verb = r.u8()?;
                let region = r.u16()?;
                let key = r.u32()?;
                let offset = r.u64()?;
                let kind = match verb {
                    VERB_READ => OpKind::Read { len: r.u32()? },
                    VERB_FLUSH => OpKind::Flush { len: r.u32()? },
                    VERB_WRITE => {
                        let len = r.u32()?;
                        let start = r.at as u32;
                        r.bytes(len as usize)?;
                        OpKind::Write {
                            data: PayloadRange { start, len },
                        }
                    }
                    VERB_CAS => OpKind::Cas {
                        expect: r.u64()?,
                        new: r.u64()?,
                    },
                    VERB_FAA => OpKind::Faa { add: r.u64()? },
                    _ => return Err(WireError("unknown verb")),
                };
                ops.push(Op {
                    node,
                    region,
                    key,
                    offset,
                    kind,
                });
            }
            r.finish()?;
            Ok(Request::Batch {
                id,
                epoch,
                expires_at_us,
            })
        }
        _ => Err(WireError("unknown request kind")),
    }
}

/// Encodes the response to a batch that ran.
pub fn encode_completions(buf: &mut Vec<u8>, id: u64, out: &Completions) {
    begin_frame(buf);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(STATUS_OK);
    buf.extend_from_slice(&(out.len() as u16).to_le_bytes());
    for c in out.as_slice() {
        match c {
            Ok(Outcome::Read(range)) => {
                buf.push(TAG_READ);
                buf.extend_from_slice(&range.len.to_le_bytes());
                buf.extend_from_slice(out.read_data(*range));
            }
            Ok(Outcome::Done) => buf.push(TAG_DONE),
            Ok(Outcome::Old(v)) => {
                buf.push(TAG_OLD);
                buf.extend_from_slice(&v.to_le_bytes());
            }
            Err(e) => {
                buf.push(TAG_ERROR);
                let (code, a, b, c) = encode_error(e);
                buf.push(code);
                for w in [a, b, c] {
                    buf.extend_from_slice(&w.to_le_bytes());
                }
            }
        }
    }
    end_frame(buf);
}

/// Encodes a stale-epoch refusal.
pub fn encode_stale(buf: &mut Vec<u8>, id: u64, node_epoch: Epoch) {
    begin_frame(buf);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(STATUS_STALE);
    buf.extend_from_slice(&node_epoch.to_le_bytes());
    end_frame(buf);
}

/// Encodes a refusal by a node whose lease may have lapsed.
pub fn encode_lapsed(buf: &mut Vec<u8>, id: u64) {
    begin_frame(buf);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(STATUS_LAPSED);
    end_frame(buf);
}

/// Encodes the refusal of a batch that arrived `late_ms` past its deadline.
pub fn encode_expired(buf: &mut Vec<u8>, id: u64, late_ms: u64) {
    begin_frame(buf);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(STATUS_EXPIRED);
    buf.extend_from_slice(&late_ms.to_le_bytes());
    end_frame(buf);
}

/// Encodes a refusal: the node closes the connection after it.
/// `transient`: the same credential may be admitted later.
pub fn encode_refused(buf: &mut Vec<u8>, id: u64, reason: &str, transient: bool) {
    // Cut at a character boundary within the bound.
    let mut end = reason.len().min(REFUSAL_BYTES_MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    begin_frame(buf);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(STATUS_REFUSED);
    buf.push(u8::from(transient));
    buf.extend_from_slice(&(end as u16).to_le_bytes());
    buf.extend_from_slice(&reason.as_bytes()[..end]);
    end_frame(buf);
}

/// Encodes the answer to HELLO.
pub fn encode_hello_response(buf: &mut Vec<u8>, id: u64, d: &NodeDescriptor) {
    begin_frame(buf);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.push(STATUS_HELLO);
    buf.extend_from_slice(&d.node.to_le_bytes());
    buf.extend_from_slice(&d.epoch.to_le_bytes());
    buf.extend_from_slice(&(d.regions.len() as u16).to_le_bytes());
    for r in &d.regions {
        buf.extend_from_slice(&r.id.to_le_bytes());
        buf.extend_from_slice(&r.size.to_le_bytes());
        buf.extend_from_slice(&r.key.to_le_bytes());
    }
    end_frame(buf);
}

/// The request id of a response body, to find who waits for it.
pub fn response_id(body: &[u8]) -> Result<u64, WireError> {
    Reader::new(body).u64()
}

/// Decodes a response body, appending completions to `out`.
pub fn decode_response(body: &[u8], out: &mut Completions) -> Result<Response, WireError> {
    let mut r = Reader::new(body);
    let _id = r.u64()?;
    let response = match r.u8()? {
        STATUS_OK => {
            let count = r.u16()?;
            for _ in 0..count {
                let c: Completion = match r.u8()? {
                    TAG_READ => {
                        let len = r.u32()?;
                        let bytes = r.bytes(len as usize)?;
                        out.push_read(len).copy_from_slice(bytes);
                        continue;
                    }
                    TAG_DONE => Ok(Outcome::Done),
                    TAG_OLD => Ok(Outcome::Old(r.u64()?)),
                    TAG_ERROR => {
                        let code = r.u8()?;
                        Err(decode_error(code, r.u64()?, r.u64()?, r.u64()?)?)
                    }
                    _ => return Err(WireError("unknown completion tag")),
                };
                out.push(c);
            }
            Response::Done
        }
        STATUS_STALE => Response::Stale { node_epoch: r.u64()? },
        STATUS_LAPSED => Response::Lapsed,
        STATUS_EXPIRED => Response::Expired { late_ms: r.u64()? },
        STATUS_REFUSED => {
            let transient = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(WireError("refusal flag")),
            };
            let len = usize::from(r.u16()?);
            if len > REFUSAL_BYTES_MAX {
                return Err(WireError("refusal reason too long"));
            }
            let reason = std::str::from_utf8(r.bytes(len)?).map_err(|_| WireError("refusal not utf-8"))?;
            Response::Refused {
                reason: reason.to_owned(),
                transient,
            }
        }
        STATUS_HELLO => {
            let node = r.u16()?;
            let epoch = r.u64()?;
            let count = r.u16()?;
            let mut regions = Vec::new();
            for _ in 0..count {
                regions.push(RegionDescriptor {
                    id: r.u16()?,
                    size: r.u64()?,
                    key: r.u32()?,
                });
            }
            Response::Hello(NodeDescriptor { node, epoch, regions })
        }
        _ => return Err(WireError("unknown response status")),
    };
    r.finish()?;
    Ok(response)
}

/// A verb error as `(code, a, b, c)`.
fn encode_error(e: &VerbError) -> (u8, u64, u64, u64) {
    match *e {
        VerbError::UnknownRegion { region } => (1, region.into(), 0, 0),
        VerbError::OutOfBounds { offset, len, size } => (2, offset, len, size),
        VerbError::Misaligned { offset } => (3, offset, 0, 0),
        VerbError::BadKey => (4, 0, 0, 0),
        VerbError::TooLarge { len } => (5, len, 0, 0),
        VerbError::Flushed => (6, 0, 0, 0),
        VerbError::FlushFailed => (7, 0, 0, 0),
    }
}

fn decode_error(code: u8, a: u64, b: u64, c: u64) -> Result<VerbError, WireError> {
    Ok(match code {
        1 => VerbError::UnknownRegion {
            region: u16::try_from(a).map_err(|_| WireError("region id"))?,
        },
        2 => VerbError::OutOfBounds {
            offset: a,
            len: b,
            size: c,
        },
        3 => VerbError::Misaligned { offset: a },
        4 => VerbError::BadKey,
        5 => VerbError::TooLarge { len: a },
        6 => VerbError::Flushed,
        7 => VerbError::FlushFailed,
        _ => return Err(WireError("unknown error code")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_ops() -> (Vec<Op>, Vec<u8>) {
        let payload = b"hello, memory".to_vec();
        let op = |kind| Op {
            node: 4,
            region: 2,
            key: 0xDEAD_BEEF,
            offset: 64,
            kind,
        };
        let ops = vec![
            op(OpKind::Read { len: 100 }),
            op(OpKind::Write {
                data: PayloadRange { start: 7, len: 6 },
            }),
            op(OpKind::Cas { expect: 1, new: 2 }),
            op(OpKind::Faa { add: u64::MAX }),
            op(OpKind::Flush { len: 8 }),
        ];
        (ops, payload)
    }

    #[test]
    fn batch_request_round_trips() {
        let (ops, payload) = sample_ops();
        let mut buf = Vec::new();
        encode_batch(&mut buf, 99, 7, 1234, ops.iter(), &payload);
        assert_eq!(
            u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize,
            buf.len() - 4
        );
        let body = &buf[4..];
        let mut decoded = Vec::new();
        assert_eq!(
            decode_request(body, 4, &mut decoded),
            Ok(Request::Batch {
                id: 99,
                epoch: 7,
                expires_at_us: 1234
            })
        );
        assert_eq!(decoded.len(), ops.len());
        for (d, o) in decoded.iter().zip(&ops) {
            match (d.kind, o.kind) {
                (OpKind::Write { data: got }, OpKind::Write { data: sent }) => {
                    assert_eq!(&body[got.range()], &payload[sent.range()]);
                }
                _ => assert_eq!(d, o),
            }
        }
    }

    #[test]
    fn completions_round_trip() {
        let mut out = Completions::default();
        out.push_read(3).copy_from_slice(b"abc");
        out.push(Ok(Outcome::Done));
        out.push(Ok(Outcome::Old(42)));
        out.push(Err(VerbError::OutOfBounds {
            offset: 1,
            len: 2,
            size: 3,
        }));
        out.push(Err(VerbError::UnknownRegion { region: 9 }));
        let mut buf = Vec::new();
        encode_completions(&mut buf, 5, &out);
        assert_eq!(response_id(&buf[4..]), Ok(5));
        let mut back = Completions::default();
        assert_eq!(decode_response(&buf[4..], &mut back), Ok(Response::Done));
        assert_eq!(back.as_slice()[1..], out.as_slice()[1..]);
        let Ok(Outcome::Read(r)) = back.as_slice()[0] else {
            panic!()
        };
        assert_eq!(back.read_data(r), b"abc");
    }

    #[test]
    fn hello_stale_and_lapsed_round_trip() {
        let d = NodeDescriptor {
            node: 3,
            epoch: 11,
            regions: vec![RegionDescriptor {
                id: 1,
                size: 4096,
                key: 7,
            }],
        };
        let mut buf = Vec::new();
        encode_hello_response(&mut buf, 1, &d);
        let mut out = Completions::default();
        assert_eq!(decode_response(&buf[4..], &mut out), Ok(Response::Hello(d)));
        encode_stale(&mut buf, 2, 12);
        assert_eq!(
            decode_response(&buf[4..], &mut out),
            Ok(Response::Stale { node_epoch: 12 })
        );
        encode_lapsed(&mut buf, 3);
        assert_eq!(buf[4..], [3, 0, 0, 0, 0, 0, 0, 0, STATUS_LAPSED]);
        assert_eq!(decode_response(&buf[4..], &mut out), Ok(Response::Lapsed));
        encode_expired(&mut buf, 4, 506);
        assert_eq!(buf[12], STATUS_EXPIRED);
        assert_eq!(
            decode_response(&buf[4..], &mut out),
            Ok(Response::Expired { late_ms: 506 })
        );
        encode_hello(&mut buf, 8, &[]);
        assert_eq!(buf[4..], [KIND_HELLO, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            decode_request(&buf[4..], 0, &mut Vec::new()),
            Ok(Request::Hello {
                id: 8,
                credential: vec![]
            })
        );
        encode_hello(&mut buf, 9, &[5; 46]);
        assert_eq!(buf.len(), 4 + 11 + 46);
        assert_eq!(
            decode_request(&buf[4..], 0, &mut Vec::new()),
            Ok(Request::Hello {
                id: 9,
                credential: vec![5; 46]
            })
        );
        encode_refused(&mut buf, 4, "no credential", false);
        assert_eq!(buf[4..16], [4, 0, 0, 0, 0, 0, 0, 0, STATUS_REFUSED, 0, 13, 0]);
        assert_eq!(
            decode_response(&buf[4..], &mut out),
            Ok(Response::Refused {
                reason: "no credential".into(),
                transient: false
            })
        );
        // A long reason is cut at a character boundary within the bound.
        encode_refused(&mut buf, 4, &"é".repeat(200), true);
        let Ok(Response::Refused { reason, transient }) = decode_response(&buf[4..], &mut out) else {
            panic!("refusal decodes")
        };
        assert_eq!((reason.len(), transient), (REFUSAL_BYTES_MAX, true));
    }

    #[test]
    fn a_hello_over_the_pre_authentication_budget_is_refused() {
        let mut body = vec![KIND_HELLO];
        body.extend_from_slice(&1u64.to_le_bytes());
        body.extend_from_slice(&((HELLO_CREDENTIAL_BYTES_MAX + 1) as u16).to_le_bytes());
        body.resize(body.len() + HELLO_CREDENTIAL_BYTES_MAX + 1, 0);
        assert_eq!(
            decode_request(&body, 0, &mut Vec::new()),
            Err(WireError("credential too long"))
        );
        let mut buf = Vec::new();
        encode_hello(&mut buf, 1, &[0; HELLO_CREDENTIAL_BYTES_MAX]);
        assert_eq!(buf.len() - 4, HELLO_FRAME_BYTES_MAX);
    }

    #[test]
    fn every_truncation_of_a_request_is_refused() {
        let (ops, payload) = sample_ops();
        let mut buf = Vec::new();
        encode_batch(&mut buf, 1, 1, u64::MAX, ops.iter(), &payload);
        let body = &buf[4..];
        for cut in 0..body.len() {
            assert!(
                decode_request(&body[..cut], 0, &mut Vec::new()).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert_eq!(
            decode_request(&longer, 0, &mut Vec::new()),
            Err(WireError("trailing bytes"))
        );
    }

    #[test]
    fn a_huge_declared_write_length_does_not_allocate() {
        let mut body = vec![KIND_BATCH];
        body.extend_from_slice(&1u64.to_le_bytes());
        body.extend_from_slice(&1u64.to_le_bytes());
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.push(VERB_WRITE);
        body.extend_from_slice(&[0; 2 + 4 + 8]);
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_request(&body, 0, &mut Vec::new()),
            Err(WireError("truncated"))
        );
    }
}
