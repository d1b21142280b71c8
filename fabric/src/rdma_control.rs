//! The control channel of an rdma memory node (`crate::rdma`): a tcp connection per client
//! on which the client asks for a queue pair and the node's region table,
//! and the node tells the client that its access was revoked. Verbs never
//! pass here.
//!
//! A message is a 4-byte little-endian length, then that many bytes of JSON
//! (one definition: the serde types below). Rare and small, so readability
//! wins over a binary layout.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::addr::{AccessKey, Epoch, NodeId, RegionId};
use crate::admission::{unhex, Gate, Holder, Refusal};
use crate::image::REGIONS_PER_NODE_MAX;

/// Largest message either side accepts: a full region table
/// ([`REGIONS_PER_NODE_MAX`] entries of under 150 bytes of JSON) with room
/// to spare. A longer length prefix closes the connection.
pub const MESSAGE_BYTES_MAX: usize = 64 * 1024;
const _: () = assert!(REGIONS_PER_NODE_MAX * 150 < MESSAGE_BYTES_MAX);

/// Where a queue pair is: what its peer needs to connect to it. Exchanged
/// over the node's control channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpEndpoint {
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number it sends.
    pub psn: u32,
    /// Its port's GID (RoCE: an IP address in GID form).
    pub gid: [u8; 16],
    /// Its port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
}

/// A region as a client addresses it over rdma.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteRegion {
    /// Region id.
    pub id: RegionId,
    /// Size in bytes.
    pub size: u64,
    /// The fabric's access key: verbs naming another are refused (`BadKey`).
    pub key: AccessKey,
    /// Where its first byte is in the node's address space.
    pub addr: u64,
    /// The device key that grants access to exactly these bytes.
    pub rkey: u32,
}

/// Client to node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToNode {
    /// Connect a queue pair to mine; I route by a map at `epoch`.
    Hello {
        /// The client's map epoch.
        epoch: Epoch,
        /// The client's queue pair.
        qp: QpEndpoint,
        /// The client's admission credential, in hex (`crate::admission`);
        /// empty: none. Checked before any queue pair or key is made.
        #[serde(default)]
        credential: String,
    },
    /// Send me your region table again (a region I do not know, or whose
    /// key changed, may have been placed here since).
    Regions,
    /// I revoked my queue pair after your [`ToClient::Revoked`]: nothing
    /// more of mine will reach you on it.
    Revoked,
}

/// Node to client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToClient {
    /// Connected: my queue pair, and what I hold.
    Welcome {
        /// The node's id.
        node: NodeId,
        /// The node's epoch now.
        epoch: Epoch,
        /// The node's queue pair for this client.
        qp: QpEndpoint,
        /// The regions, for the client's checks and addressing.
        regions: Vec<RemoteRegion>,
    },
    /// Refused: your map is older than my epoch.
    Stale {
        /// The node's epoch.
        node_epoch: Epoch,
    },
    /// Refused: my lease with the control plane may have lapsed.
    Lapsed,
    /// The region table, as asked.
    Regions(Vec<RemoteRegion>),
    /// Your queue pair is revoked: my epoch rose to `epoch`, or (`lapsed`)
    /// my lease lapsed. Revoke yours, answer [`ToNode::Revoked`], and
    /// connect again.
    Revoked {
        /// The node's epoch now.
        epoch: Epoch,
        /// The node stopped serving because its lease lapsed.
        lapsed: bool,
    },
    /// The request could not be served (the node is out of queue pairs,
    /// or the message made no sense); the connection closes.
    Refused(String),
}

/// What a node knows when a client's first message arrives.
#[derive(Clone, Copy, Debug)]
pub struct Door<'a> {
    /// Who may connect (`crate::admission`).
    pub gate: &'a Gate,
    /// The node's epoch now.
    pub node_epoch: Epoch,
    /// Whether the node may serve verbs now (its lease holds).
    pub serving: bool,
    /// Clients connected now.
    pub clients: usize,
    /// Most clients connected at once.
    pub clients_max: usize,
}

/// A client the node connects a queue pair for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Whom its credential names (`None` at an open gate).
    pub holder: Option<Holder>,
    /// The epoch of the client's map (checked again once it is listed).
    pub epoch: Epoch,
    /// The client's queue pair.
    pub qp: QpEndpoint,
}

/// The node's answer to a client's first message, decided before any queue
/// pair, region table or rkey exists: the client to connect, or the
/// refusal to send it before closing. The credential comes first, so that
/// a peer without one learns nothing of the node's epoch or load.
pub fn answer_first(first: ToNode, door: &Door<'_>) -> Result<Admitted, ToClient> {
    let ToNode::Hello {
        epoch,
        qp,
        credential,
    } = first
    else {
        return Err(ToClient::Refused("the first message must be Hello".into()));
    };
    let holder = unhex(&credential)
        .ok_or(Refusal::Malformed("not hex"))
        .and_then(|bytes| door.gate.admit(&bytes))
        .map_err(|why| ToClient::Refused(why.to_string()))?;
    if epoch < door.node_epoch {
        return Err(ToClient::Stale {
            node_epoch: door.node_epoch,
        });
    }
    if !door.serving {
        return Err(ToClient::Lapsed);
    }
    if door.clients >= door.clients_max {
        return Err(ToClient::Refused(format!(
            "{} clients connected already",
            door.clients_max
        )));
    }
    Ok(Admitted { holder, epoch, qp })
}

/// Writes one message.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if body.len() > MESSAGE_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("control message of {} bytes over the limit", body.len()),
        ));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one message; `Ok(None)` at a clean end of stream.
pub fn receive<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MESSAGE_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control message of {len} bytes over the {MESSAGE_BYTES_MAX}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad control message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> QpEndpoint {
        QpEndpoint {
            qpn: 0x11,
            psn: 0xab_cdef,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            lid: 0,
        }
    }

    #[test]
    fn messages_round_trip_with_a_length_prefix() {
        let full: Vec<RemoteRegion> = (0..REGIONS_PER_NODE_MAX as u16)
            .map(|i| RemoteRegion {
                id: u16::MAX - i,
                size: u64::MAX,
                key: u32::MAX,
                addr: u64::MAX,
                rkey: u32::MAX,
            })
            .collect();
        let to_client = [
            ToClient::Welcome {
                node: 3,
                epoch: 9,
                qp: endpoint(),
                regions: full.clone(),
            },
            ToClient::Stale { node_epoch: 4 },
            ToClient::Lapsed,
            ToClient::Regions(full),
            ToClient::Revoked {
                epoch: 5,
                lapsed: true,
            },
            ToClient::Refused("no".into()),
        ];
        for m in &to_client {
            let mut buf = Vec::new();
            send(&mut buf, m).unwrap();
            assert_eq!(
                u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize,
                buf.len() - 4
            );
            let back: ToClient = receive(&mut buf.as_slice()).unwrap().unwrap();
            assert_eq!(&back, m);
        }
        for m in [
            ToNode::Hello {
                epoch: 1,
                qp: endpoint(),
                credential: "00ff".into(),
            },
            ToNode::Regions,
            ToNode::Revoked,
        ] {
            let mut buf = Vec::new();
            send(&mut buf, &m).unwrap();
            let back: ToNode = receive(&mut buf.as_slice()).unwrap().unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn bad_frames_are_errors_and_a_clean_end_is_none() {
        let none: Option<ToNode> = receive(&mut [].as_slice()).unwrap();
        assert_eq!(none, None);
        let mut over = ((MESSAGE_BYTES_MAX + 1) as u32).to_le_bytes().to_vec();
        over.extend_from_slice(b"{}");
        let e = receive::<ToNode>(&mut over.as_slice()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut junk = 3u32.to_le_bytes().to_vec();
        junk.extend_from_slice(b"{x}");
        let e = receive::<ToNode>(&mut junk.as_slice()).unwrap_err();
        assert!(e.to_string().contains("bad control message"), "{e}");
        let truncated = 10u32.to_le_bytes();
        assert!(receive::<ToNode>(&mut truncated.as_slice()).is_err());
    }
}
