//! The tcp memory-node server: executes verbs for remote clients.
//!
//! One task per connection reads frames, executes each batch against the
//! node, and answers in request order; it flushes its socket only when no
//! further request is already buffered, so a pipelining client gets its
//! answers coalesced into few writes. A frame that does not parse, or whose
//! length prefix is over [`FRAME_BYTES_MAX`], closes that connection only.
//!
//! Memory is bounded: at most [`CONNECTIONS_MAX`] connections, each holding
//! at most one request body and one response of at most `FRAME_BYTES_MAX`
//! bytes plus two I/O buffers. A request body grows only with the bytes
//! received, so idle or trickling connections cost little.
//!
//! What it serves is counted ([`crate::metrics`]) once per batch, with
//! handles each connection takes once: the verb path adds a few atomics.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::FabricError;
use crate::memnode::{execute_inline, MemoryNode};
use crate::metrics::{self, ConnectionGauge, Refusal, ServerMeters};
use crate::verb::Completions;
use crate::wire::{self, Request, FRAME_BYTES_MAX};

/// Connections served at once; further ones are accepted and closed at once
/// so that a flood of idle sockets cannot exhaust the node's memory.
pub const CONNECTIONS_MAX: usize = 256;
/// Socket buffer per direction and connection.
const IO_BUFFER_BYTES: usize = 64 * 1024;

/// Serves `node` on `listener` until `shutdown` completes; then stops
/// accepting and closes every connection.
pub async fn serve(
    listener: TcpListener,
    node: Arc<MemoryNode>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: transient for
                        // the listener, so log and keep accepting.
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, limit = CONNECTIONS_MAX, "connection limit reached; closing new connection");
                    metrics::connection_refused();
                    continue;
                };
                let node = node.clone();
                connections.spawn(async move {
                    let _open = ConnectionGauge::open();
                    match serve_connection(stream, &node).await {
                        Ok(()) => tracing::debug!(%peer, "connection closed"),
                        Err(e) => {
                            metrics::connection_error();
                            tracing::warn!(%peer, error = %e, "connection dropped");
                        }
                    }
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
    Ok(())
}

/// Binds `addr` and returns the listener with the address it got (for
/// `127.0.0.1:0`).
pub async fn bind(addr: &str) -> io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

async fn serve_connection(stream: TcpStream, node: &MemoryNode) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let mut reader = BufReader::with_capacity(IO_BUFFER_BYTES, r);
    let mut writer = BufWriter::with_capacity(IO_BUFFER_BYTES, w);
    let mut body = Vec::new();
    let mut ops = Vec::new();
    let mut out = Completions::default();
    let mut response = Vec::new();
    let meters = ServerMeters::new();
    loop {
        let len = match reader.read_u32_le().await {
            Ok(len) => len as usize,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        if len > FRAME_BYTES_MAX {
            return Err(invalid(format!(
                "length prefix {len} over the {FRAME_BYTES_MAX}-byte limit"
            )));
        }
        // Grow with the bytes that actually arrive, not with the declared
        // length: a peer that announces a large frame and trickles it in
        // costs only what it has sent.
        body.clear();
        (&mut reader).take(len as u64).read_to_end(&mut body).await?;
        if body.len() != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a frame",
            ));
        }
        match wire::decode_request(&body, node.id(), &mut ops).map_err(|e| invalid(e.to_string()))? {
            Request::Hello { id } => wire::encode_hello_response(&mut response, id, &node.descriptor()),
            Request::Batch { id, epoch } => {
                out.clear();
                match execute_inline(|_| Some(node), epoch, &ops, &body, &mut out) {
                    Ok(()) => {
                        meters.batch(&ops, &out);
                        wire::encode_completions(&mut response, id, &out)
                    }
                    Err(FabricError::StaleEpoch { node_epoch, .. }) => {
                        meters.refused(Refusal::StaleEpoch);
                        wire::encode_stale(&mut response, id, node_epoch)
                    }
                    Err(FabricError::NodeLeaseLapsed { .. }) => {
                        meters.refused(Refusal::LeaseLapsed);
                        wire::encode_lapsed(&mut response, id)
                    }
                    Err(e) => return Err(invalid(e.to_string())),
                }
            }
        }
        writer.write_all(&response).await?;
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
    }
}

fn invalid(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}
