//! The wire: requests decoded from RESP (arrays of bulk strings, or an
//! inline line as from `nc`), replies encoded in the protocol the
//! connection chose (RESP2 until `HELLO 3`), both through the
//! `redis-protocol` crate, and the limits that keep a hostile client from
//! making the gateway buffer without end.

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::{BytesFrame as Frame2, Resp2Frame};
use redis_protocol::resp3::types::BytesFrame as Frame3;

/// Longest request: a write's largest value and key with room for the
/// command around them, and a multi-key write's bytes
/// ([`crate::keyspace::WRITE_BYTES_MAX`]) with its framing. A client that
/// sends more without completing a request is told so and disconnected.
pub const REQUEST_BYTES_MAX: usize = 512 * 1024;

/// Most arguments in one request.
pub const ARGS_MAX: usize = 4096;

/// Longest inline request line.
pub const INLINE_BYTES_MAX: usize = 64 * 1024;

/// The protocol a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2: what every client starts with.
    Resp2,
    /// RESP3: after `HELLO 3`.
    Resp3,
}

/// A reply, before it is encoded in a protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A simple string.
    Simple(String),
    /// An error: its text starts with the code (`ERR`, `WRONGPASS`...).
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// Nil.
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// A map (RESP3), a flat array of key, value... (RESP2).
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// An `ERR` error.
    pub fn err(text: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {text}"))
    }

    /// A bulk string of `s`.
    pub fn bulk(s: impl Into<Bytes>) -> Reply {
        Reply::Bulk(s.into())
    }

    /// Appends the encoding of this reply in `protocol` to `out`.
    pub fn encode(self, protocol: Protocol, out: &mut BytesMut) {
        // Encoding a frame we built cannot fail: the crate errors only on a
        // buffer too small, and `extend_encode` sizes it first.
        let encoded = match protocol {
            Protocol::Resp2 => redis_protocol::resp2::encode::extend_encode(out, &self.into_resp2(), false),
            Protocol::Resp3 => {
                redis_protocol::resp3::encode::complete::extend_encode(out, &self.into_resp3(), false)
            }
        };
        if let Err(e) = encoded {
            tracing::error!(error = %e, "a reply could not be encoded");
        }
    }

    fn into_resp2(self) -> Frame2 {
        match self {
            Reply::Ok => Frame2::SimpleString(Bytes::from_static(b"OK")),
            Reply::Simple(s) => Frame2::SimpleString(Bytes::from(s)),
            Reply::Error(e) => Frame2::Error(clean(e).into()),
            Reply::Int(i) => Frame2::Integer(i),
            Reply::Bulk(b) => Frame2::BulkString(b),
            Reply::Nil => Frame2::Null,
            Reply::Array(items) => Frame2::Array(items.into_iter().map(Reply::into_resp2).collect()),
            Reply::Map(pairs) => Frame2::Array(
                pairs
                    .into_iter()
                    .flat_map(|(k, v)| [k.into_resp2(), v.into_resp2()])
                    .collect(),
            ),
        }
    }

    fn into_resp3(self) -> Frame3 {
        match self {
            Reply::Ok => Frame3::SimpleString {
                data: Bytes::from_static(b"OK"),
                attributes: None,
            },
            Reply::Simple(s) => Frame3::SimpleString {
                data: Bytes::from(s),
                attributes: None,
            },
            Reply::Error(e) => Frame3::SimpleError {
                data: clean(e).into(),
                attributes: None,
            },
            Reply::Int(i) => Frame3::Number {
                data: i,
                attributes: None,
            },
            Reply::Bulk(b) => Frame3::BlobString {
                data: b,
                attributes: None,
            },
            Reply::Nil => Frame3::Null,
            Reply::Array(items) => Frame3::Array {
                data: items.into_iter().map(Reply::into_resp3).collect(),
                attributes: None,
            },
            Reply::Map(pairs) => Frame3::Map {
                data: pairs
                    .into_iter()
                    .map(|(k, v)| (k.into_resp3(), v.into_resp3()))
                    .collect(),
                attributes: None,
            },
        }
    }
}

/// An error or simple string may not hold a line break: it would end the
/// frame early and desynchronise the client.
fn clean(s: String) -> String {
    if s.contains(['\r', '\n']) {
        s.replace(['\r', '\n'], " ")
    } else {
        s
    }
}

/// What the request decoder found at the front of a buffer.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// A complete request: its arguments, the first one the command name.
    Request(Vec<Bytes>),
    /// More bytes are needed.
    Incomplete,
    /// The bytes are not RESP a client sends; the connection must close
    /// after the error is sent (its stream cannot be resynchronised).
    Malformed(String),
}

/// Takes one request off the front of `buf`, passing over the empty ones
/// Redis ignores (`*0`, blank inline lines): in a loop, not by recursion,
/// so that a client sending thousands of them cannot overflow the stack.
pub fn decode_request(buf: &mut BytesMut) -> Decoded {
    loop {
        if let Some(decoded) = decode_one(buf) {
            return decoded;
        }
    }
}

/// One frame off the front of `buf`; `None` for an empty request, taken
/// off and ignored.
fn decode_one(buf: &mut BytesMut) -> Option<Decoded> {
    if buf.is_empty() {
        return Some(Decoded::Incomplete);
    }
    if buf[0] != b'*' {
        return decode_inline(buf);
    }
    Some(match redis_protocol::resp2::decode::decode_bytes_mut(buf) {
        Ok(None) if buf.len() > REQUEST_BYTES_MAX => {
            Decoded::Malformed(format!("request longer than {REQUEST_BYTES_MAX} bytes"))
        }
        Ok(None) => Decoded::Incomplete,
        Ok(Some((Frame2::Array(items), _, _))) => {
            if items.is_empty() {
                return None;
            }
            if items.len() > ARGS_MAX {
                return Some(Decoded::Malformed(format!("more than {ARGS_MAX} arguments")));
            }
            let mut args = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Frame2::BulkString(b) => args.push(b),
                    other => {
                        return Some(Decoded::Malformed(format!(
                            "expected '$', got '{}'",
                            char::from(other.kind().to_byte())
                        )))
                    }
                }
            }
            Decoded::Request(args)
        }
        Ok(Some((other, _, _))) => Decoded::Malformed(format!(
            "expected an array of bulk strings, got '{}'",
            char::from(other.kind().to_byte())
        )),
        Err(e) => Decoded::Malformed(e.details().to_owned()),
    })
}

/// An inline request: one line, arguments split on spaces; `None` for a
/// blank line.
fn decode_inline(buf: &mut BytesMut) -> Option<Decoded> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return Some(if buf.len() > INLINE_BYTES_MAX {
            Decoded::Malformed(format!("inline request longer than {INLINE_BYTES_MAX} bytes"))
        } else {
            Decoded::Incomplete
        });
    };
    let line = buf.split_to(end + 1).freeze();
    let text = line.slice(..end);
    let text = text
        .strip_suffix(b"\r")
        .map_or(text.clone(), |t| text.slice(..t.len()));
    let args: Vec<Bytes> = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|a| !a.is_empty())
        .map(|a| text.slice_ref(a))
        .collect();
    if args.is_empty() {
        return None;
    }
    if args.len() > ARGS_MAX {
        return Some(Decoded::Malformed(format!("more than {ARGS_MAX} arguments")));
    }
    Some(Decoded::Request(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Decoded {
        Decoded::Request(a.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect())
    }

    #[test]
    fn requests_pipelined_and_split() {
        let wire = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let mut buf = BytesMut::from(&wire[..10]);
        assert_eq!(decode_request(&mut buf), Decoded::Incomplete);
        buf.extend_from_slice(&wire[10..]);
        assert_eq!(decode_request(&mut buf), args(&["GET", "k"]));
        assert_eq!(decode_request(&mut buf), args(&["PING"]));
        assert_eq!(decode_request(&mut buf), Decoded::Incomplete);
        assert!(buf.is_empty());
    }

    #[test]
    fn inline_requests() {
        let mut buf = BytesMut::from(&b"set  k v\r\n\r\nPING\n"[..]);
        assert_eq!(decode_request(&mut buf), args(&["set", "k", "v"]));
        assert_eq!(decode_request(&mut buf), args(&["PING"]));
        assert_eq!(decode_request(&mut buf), Decoded::Incomplete);
    }

    #[test]
    fn many_empty_requests_do_not_recurse() {
        let mut wire = b"\r\n*0\r\n".repeat(200_000);
        wire.extend_from_slice(b"PING\r\n");
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(decode_request(&mut buf), args(&["PING"]));
    }

    #[test]
    fn hostile_requests() {
        for bad in [&b"*1\r\n:5\r\n"[..], b"*1\r\n$x\r\n", b"*1\r\n*1\r\n$1\r\na\r\n"] {
            let mut buf = BytesMut::from(bad);
            assert!(
                matches!(decode_request(&mut buf), Decoded::Malformed(_)),
                "{bad:?}"
            );
        }
        // A bulk string announced longer than any request, never sent.
        let mut buf = BytesMut::from(&b"*1\r\n$999999999\r\n"[..]);
        assert_eq!(decode_request(&mut buf), Decoded::Incomplete);
        buf.extend_from_slice(&vec![b'a'; REQUEST_BYTES_MAX]);
        assert!(matches!(decode_request(&mut buf), Decoded::Malformed(_)));
        let mut buf = BytesMut::from(&vec![b'a'; INLINE_BYTES_MAX + 1][..]);
        assert!(matches!(decode_request(&mut buf), Decoded::Malformed(_)));
    }

    #[test]
    fn replies_in_both_protocols() {
        let reply = || {
            Reply::Array(vec![
                Reply::Ok,
                Reply::Int(-3),
                Reply::bulk("v"),
                Reply::Nil,
                Reply::Error("ERR bad\r\nthing".into()),
                Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]),
            ])
        };
        let mut two = BytesMut::new();
        reply().encode(Protocol::Resp2, &mut two);
        assert_eq!(
            &two[..],
            &b"*6\r\n+OK\r\n:-3\r\n$1\r\nv\r\n$-1\r\n-ERR bad  thing\r\n*2\r\n$1\r\na\r\n:1\r\n"[..]
        );
        let mut three = BytesMut::new();
        reply().encode(Protocol::Resp3, &mut three);
        assert_eq!(
            &three[..],
            &b"*6\r\n+OK\r\n:-3\r\n$1\r\nv\r\n_\r\n-ERR bad  thing\r\n%1\r\n$1\r\na\r\n:1\r\n"[..]
        );
    }
}
