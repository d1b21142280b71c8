//! The tcp memory-node server: executes verbs for remote clients.
//!
//! One task per connection reads frames, executes each batch against the
//! node, and answers in request order; it flushes its socket only when no
//! further request is already buffered, so a pipelining client gets its
//! answers coalesced into few writes. A frame that does not parse, or whose
//! length prefix is over [`FRAME_BYTES_MAX`], closes that connection only.
//!
//! Admission (`crate::admission`). A connection is first unauthenticated:
//! its only frame may be a HELLO of at most [`HELLO_FRAME_BYTES_MAX`] bytes,
//! within [`Limits::hello_timeout`], and at most
//! [`Limits::unauthenticated_max`] such connections wait at once (a new one
//! closes the oldest, so that idle sockets cannot lock clients out). A HELLO
//! the node's gate admits gets the node's descriptor and one of
//! [`Limits::connections_max`] admitted slots; any other gets a refusal
//! that names its reason, and the connection closes. Before each batch the
//! gate is checked again (a client fenced since its HELLO is refused and
//! closed before any verb of the batch runs), and it is held while the
//! batch's verbs run. An admitted connection silent for
//! [`Limits::idle_timeout`] is closed; its client connects again at its next
//! batch.
//!
//! Memory is bounded: an unauthenticated connection holds at most a HELLO,
//! an admitted one at most one request body and one response of at most
//! `FRAME_BYTES_MAX` bytes plus two I/O buffers. A request body grows only
//! with the bytes received, so idle or trickling connections cost little.
//!
//! What it serves is counted ([`crate::metrics`]) once per batch, with
//! handles each connection takes once: the verb path adds a few atomics.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::admission::{Holder, Refusal as Denied};
use crate::deadline;
use crate::error::FabricError;
use crate::memnode::{execute_inline, MemoryNode};
use crate::metrics::{self, ConnectionGauge, Refusal, ServerMeters};
use crate::verb::Completions;
use crate::wire::{self, Request, FRAME_BYTES_MAX, HELLO_FRAME_BYTES_MAX};

/// Admitted connections served at once, by default: a cluster's clients
/// hold one connection per process and node, and 256 processes per node is
/// more than a rack of compute nodes runs.
pub const CONNECTIONS_MAX: usize = 256;
/// Connections that have not presented a credential yet, at once, by
/// default; a new one closes the oldest. A client says HELLO within a round
/// trip of connecting, so only a flood of sockets that never speak fills
/// this, and each of those is closed within 64 newer connections.
pub const UNAUTHENTICATED_MAX: usize = 64;
/// How long a new connection has to present its HELLO, by default: a round
/// trip on any network, with room for a loaded client.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(3);
/// How long an admitted connection may stay silent, by default: long enough
/// that a client idle between bursts rarely reconnects (it does so at its
/// next batch, transparently), short enough that a vanished peer's slot
/// comes back within minutes even where keepalive cannot tell.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// TCP keepalive: first probe after this much silence, then every
/// [`KEEPALIVE_INTERVAL`]. A peer gone without a FIN (power loss, a
/// partition) is found in about 20 s instead of the kernel's two hours.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between TCP keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Socket buffer per direction and connection.
const IO_BUFFER_BYTES: usize = 64 * 1024;

/// What a server admits at once and how long it waits; every field has a
/// default named above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Admitted connections at once; further HELLOs are refused.
    pub connections_max: usize,
    /// Connections waiting for their HELLO at once; a new one closes the
    /// oldest.
    pub unauthenticated_max: usize,
    /// How long a new connection has to send its HELLO.
    pub hello_timeout: Duration,
    /// How long an admitted connection may stay silent.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections_max: CONNECTIONS_MAX,
            unauthenticated_max: UNAUTHENTICATED_MAX,
            hello_timeout: HELLO_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
        }
    }
}

/// Serves `node` on `listener` with the default [`Limits`] until `shutdown`
/// completes; then stops accepting and closes every connection.
pub async fn serve(
    listener: TcpListener,
    node: Arc<MemoryNode>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_with(listener, node, Limits::default(), shutdown).await
}

/// [`serve`] with `limits`.
pub async fn serve_with(
    listener: TcpListener,
    node: Arc<MemoryNode>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_tls(listener, node, limits, None, shutdown).await
}

/// [`serve_with`], over TLS when given a configuration: every connection
/// first completes a handshake, within the HELLO timeout and in its place
/// among the unauthenticated ones, and then speaks the same frames.
pub async fn serve_tls(
    listener: TcpListener,
    node: Arc<MemoryNode>,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    assert!(limits.connections_max > 0 && limits.unauthenticated_max > 0);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let admitted = Arc::new(Semaphore::new(limits.connections_max));
    let waiting = Arc::new(Waiting::new(limits.unauthenticated_max));
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
                let ticket = waiting.enter();
                let node = node.clone();
                let admitted = admitted.clone();
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    let _open = ConnectionGauge::open();
                    let served = serve_connection(stream, &node, ticket, &admitted, &limits, acceptor.as_ref());
                    match served.await {
                        Ok(()) => tracing::debug!(%peer, "connection closed"),
                        Err(e) => {
                            metrics::connection_error();
                            tracing::warn!(%peer, error = %e, "connection dropped");
                        }
                    }
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

/// Connections waiting for their HELLO, oldest first: a new one beyond the
/// limit closes the oldest.
struct Waiting {
    queue: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next: AtomicU64,
    max: usize,
}

/// One waiting connection's place; leaving it (admitted, refused, closed)
/// gives the place back.
struct Ticket {
    id: u64,
    evict: Arc<Notify>,
    waiting: Arc<Waiting>,
}

impl Waiting {
    fn new(max: usize) -> Self {
        Waiting {
            queue: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
            max,
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<Notify>)>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter(self: &Arc<Self>) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        let mut q = self.queue();
        while q.len() >= self.max {
            if let Some((_, oldest)) = q.pop_front() {
                // Stored if the connection is not waiting on it yet.
                oldest.notify_one();
            }
        }
        q.push_back((id, evict.clone()));
        Ticket {
            id,
            evict,
            waiting: self.clone(),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiting.queue().retain(|(id, _)| *id != self.id);
    }
}

/// Reads one frame body into `body`: `Ok(false)` at a clean end of stream
/// between frames.
async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    body: &mut Vec<u8>,
    max: usize,
) -> io::Result<bool> {
    let len = match reader.read_u32_le().await {
        Ok(len) => len as usize,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(e),
    };
    if len > max {
        return Err(invalid(format!("length prefix {len} over the {max}-byte limit")));
    }
    // Grow with the bytes that actually arrive, not with the declared
    // length: a peer that announces a large frame and trickles it in
    // costs only what it has sent.
    body.clear();
    reader.take(len as u64).read_to_end(body).await?;
    if body.len() != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside a frame",
        ));
    }
    Ok(true)
}

/// Turns TCP keepalive on, so that a peer gone without a word is found.
pub(crate) fn keep_alive(stream: &TcpStream) -> io::Result<()> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    socket2::SockRef::from(stream).set_tcp_keepalive(&ka)
}

async fn serve_connection(
    stream: TcpStream,
    node: &MemoryNode,
    ticket: Ticket,
    admitted: &Arc<Semaphore>,
    limits: &Limits,
    tls: Option<&tokio_rustls::TlsAcceptor>,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    keep_alive(&stream)?;
    let Some(acceptor) = tls else {
        let (r, w) = stream.into_split();
        return serve_io(r, w, node, ticket, admitted, limits).await;
    };
    // The handshake is part of the unauthenticated phase: its timeout, and
    // its place among the waiting connections.
    let shaken = tokio::select! {
        () = ticket.evict.notified() => {
            metrics::preauth_closed("evicted");
            return Ok(());
        }
        shaken = tokio::time::timeout(limits.hello_timeout, acceptor.accept(stream)) => shaken,
    };
    let stream = match shaken {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            metrics::preauth_closed("tls");
            tracing::debug!(error = %e, "TLS handshake failed");
            return Ok(());
        }
        Err(_) => {
            metrics::preauth_closed("hello_timeout");
            return Ok(());
        }
    };
    let (r, w) = tokio::io::split(stream);
    serve_io(r, w, node, ticket, admitted, limits).await
}

/// One connection's frames, after any TLS handshake: HELLO, then batches.
async fn serve_io<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: R,
    w: W,
    node: &MemoryNode,
    ticket: Ticket,
    admitted: &Arc<Semaphore>,
    limits: &Limits,
) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(IO_BUFFER_BYTES, r);
    let mut writer = BufWriter::with_capacity(IO_BUFFER_BYTES, w);
    let mut body = Vec::new();
    let mut ops = Vec::new();
    let mut response = Vec::new();
    let Some((holder, _permit)) = admit(
        &mut reader,
        &mut writer,
        node,
        ticket,
        admitted,
        limits,
        &mut body,
        &mut ops,
    )
    .await?
    else {
        return Ok(());
    };
    let mut out = Completions::default();
    let meters = ServerMeters::new();
    loop {
        match tokio::time::timeout(
            limits.idle_timeout,
            read_frame(&mut reader, &mut body, FRAME_BYTES_MAX),
        )
        .await
        {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                metrics::idle_closed();
                tracing::debug!(
                    node = node.id(),
                    "closing a connection idle for {:?}",
                    limits.idle_timeout
                );
                return Ok(());
            }
        }
        let request = wire::decode_request(&body, node.id(), &mut ops).map_err(|e| invalid(e.to_string()))?;
        let refused = match request {
            Request::Hello { id, .. } => match node.gate().admits(holder) {
                Ok(()) => {
                    wire::encode_hello_response(&mut response, id, &node.descriptor());
                    None
                }
                Err(why) => Some((id, why)),
            },
            Request::Batch {
                id,
                epoch,
                expires_at_us,
            } => {
                out.clear();
                // Held while the verbs run: a fence taken meanwhile waits
                // for this batch (`MemoryNode::follow_fence`).
                let gate = node.gate();
                let now_us = deadline::now_us();
                match gate.admits(holder) {
                    Err(why) => Some((id, why)),
                    // Checked last, right before the verbs: its client
                    // calls it lost from this instant (`crate::deadline`).
                    // The batch is refused, not the connection.
                    Ok(()) if deadline::passed(expires_at_us, now_us) => {
                        drop(gate);
                        let late_ms = (now_us - expires_at_us) / 1000;
                        let why = Denied::Expired { late_ms };
                        metrics::admission_refused(&why);
                        tracing::info!(holder = ?holder, reason = %why, "batch refused");
                        wire::encode_expired(&mut response, id, late_ms);
                        None
                    }
                    Ok(()) => {
                        let ran = execute_inline(|_| Some(node), epoch, &ops, &body, &mut out);
                        drop(gate);
                        match ran {
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
                        None
                    }
                }
            }
        };
        if let Some((id, why)) = refused {
            return refuse(&mut writer, &mut response, id, &why, holder).await;
        }
        writer.write_all(&response).await?;
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
    }
}

/// The unauthenticated phase: the HELLO, checked by the node's gate, then
/// an admitted slot. `None`: refused (and told why) or gone.
#[allow(clippy::too_many_arguments)]
async fn admit<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut BufReader<R>,
    writer: &mut BufWriter<W>,
    node: &MemoryNode,
    ticket: Ticket,
    admitted: &Arc<Semaphore>,
    limits: &Limits,
    body: &mut Vec<u8>,
    ops: &mut Vec<crate::verb::Op>,
) -> io::Result<Option<(Option<Holder>, OwnedSemaphorePermit)>> {
    let mut response = Vec::new();
    let read = tokio::select! {
        () = ticket.evict.notified() => {
            metrics::preauth_closed("evicted");
            return Ok(None);
        }
        read = tokio::time::timeout(limits.hello_timeout, read_frame(reader, body, HELLO_FRAME_BYTES_MAX)) => read,
    };
    match read {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return Ok(None),
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            let why = Denied::Protocol("the first frame must be a HELLO of at most 75 bytes");
            refuse(writer, &mut response, 0, &why, None).await?;
            return Ok(None);
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            metrics::preauth_closed("hello_timeout");
            let why = Denied::Protocol("no HELLO in time");
            refuse(writer, &mut response, 0, &why, None).await?;
            return Ok(None);
        }
    }
    drop(ticket);
    let (id, credential) = match wire::decode_request(body, node.id(), ops) {
        Ok(Request::Hello { id, credential }) => (id, credential),
        Ok(Request::Batch { id, .. }) => {
            refuse(
                writer,
                &mut response,
                id,
                &Denied::Protocol("a batch before HELLO"),
                None,
            )
            .await?;
            return Ok(None);
        }
        Err(_) => {
            refuse(
                writer,
                &mut response,
                0,
                &Denied::Protocol("malformed HELLO"),
                None,
            )
            .await?;
            return Ok(None);
        }
    };
    let admitted_as = node.gate().admit(&credential);
    let holder = match admitted_as {
        Ok(h) => h,
        Err(why) => {
            refuse(writer, &mut response, id, &why, None).await?;
            return Ok(None);
        }
    };
    let Ok(permit) = admitted.clone().try_acquire_owned() else {
        metrics::connection_refused();
        let why = Denied::Full {
            limit: limits.connections_max,
        };
        refuse(writer, &mut response, id, &why, holder).await?;
        return Ok(None);
    };
    wire::encode_hello_response(&mut response, id, &node.descriptor());
    writer.write_all(&response).await?;
    writer.flush().await?;
    Ok(Some((holder, permit)))
}

/// Tells the peer why, counts it, and ends the connection.
async fn refuse<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    response: &mut Vec<u8>,
    id: u64,
    why: &Denied,
    holder: Option<Holder>,
) -> io::Result<()> {
    metrics::admission_refused(why);
    match holder {
        Some(h) => tracing::info!(holder = %h, reason = %why, "refused"),
        None => tracing::debug!(reason = %why, "connection refused"),
    }
    wire::encode_refused(response, id, &why.to_string(), why.is_transient());
    writer.write_all(response).await?;
    writer.flush().await?;
    writer.shutdown().await
}

fn invalid(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}
