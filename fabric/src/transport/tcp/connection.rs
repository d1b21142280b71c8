//! One pipelined connection to a memory node: opening it (TCP, TLS when
//! the endpoint says so, the HELLO with the credential), the writer task
//! that coalesces frames, the reader task that hands each response to its
//! waiter, and how it breaks. `super::TcpTransport` keeps one per node and
//! decides when to open another and how long a batch waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::{TcpOptions, TLS_SCHEME};
use crate::addr::{Epoch, NodeId};
use crate::admission::Credential;
use crate::error::FabricError;
use crate::memnode::NodeDescriptor;
use crate::verb::Completions;
use crate::wire::{self, Response, FRAME_BYTES_MAX};

/// Socket buffer per direction and connection.
const IO_BUFFER_BYTES: usize = 64 * 1024;

#[derive(Debug)]
pub(super) struct Connection {
    pub(super) node: NodeId,
    /// 1 for the first connection to the node, +1 per reconnection.
    pub(super) generation: u64,
    pub(super) frames: mpsc::UnboundedSender<Vec<u8>>,
    pub(super) next_id: AtomicU64,
    pub(super) pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
pub(super) struct Pending {
    pub(super) waiters: HashMap<u64, oneshot::Sender<Vec<u8>>>,
    /// Set once the connection is broken; no waiter is registered after.
    pub(super) broken: Option<String>,
}

impl Connection {
    /// A placeholder that is broken from the start, so that the first
    /// batch for its node connects (generation 1).
    pub(super) fn unconnected(node: NodeId) -> Connection {
        let (frames, _) = mpsc::unbounded_channel();
        Connection {
            node,
            generation: 0,
            frames,
            next_id: AtomicU64::new(1),
            pending: Mutex::new(Pending {
                waiters: HashMap::new(),
                broken: Some("not connected yet".into()),
            }),
        }
    }

    /// Connects, says hello, and starts the reader and writer tasks; gives
    /// up after `options.connect_timeout`.
    pub(super) async fn open(
        addr: &str,
        node_hint: NodeId,
        generation: u64,
        options: &TcpOptions,
    ) -> Result<(Arc<Connection>, NodeDescriptor), FabricError> {
        let timeout = options.connect_timeout;
        tokio::time::timeout(timeout, Self::open_now(addr, node_hint, generation, options))
            .await
            .unwrap_or_else(|_| {
                Err(FabricError::Disconnected {
                    node: node_hint,
                    reason: format!("connecting to {addr} and saying HELLO took over {timeout:?}"),
                })
            })
    }

    async fn open_now(
        addr: &str,
        node_hint: NodeId,
        generation: u64,
        options: &TcpOptions,
    ) -> Result<(Arc<Connection>, NodeDescriptor), FabricError> {
        let broken = |reason: String| FabricError::Disconnected {
            node: node_hint,
            reason,
        };
        let target = options.route(addr);
        let (addr, tls) = match addr.strip_prefix(TLS_SCHEME) {
            Some(plain) => (plain, true),
            None => (addr, false),
        };
        let target = target.strip_prefix(TLS_SCHEME).unwrap_or(target);
        let tls = match (tls, &options.tls) {
            (false, _) => None,
            (true, Some(config)) => Some(config),
            (true, None) => {
                return Err(FabricError::Protocol {
                    node: node_hint,
                    reason: format!(
                    "the memory node at {TLS_SCHEME}{addr} speaks TLS and this client has no CA to check it \
                         (TcpOptions::tls; a cluster client takes the control plane's: KINTSUGI_CA_FILE)"
                ),
                })
            }
        };
        let stream = TcpStream::connect(target)
            .await
            .map_err(|e| broken(format!("cannot connect to {target}: {e}")))?;
        stream.set_nodelay(true).map_err(|e| broken(e.to_string()))?;
        crate::server::keep_alive(&stream).map_err(|e| broken(e.to_string()))?;
        match tls {
            None => Self::hello(stream, node_hint, generation, options).await,
            Some(config) => {
                let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls_pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|e| broken(format!("{host} is not a name a certificate can carry: {e}")))?;
                let stream = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|e| broken(format!("TLS with {addr}: {e}")))?;
                Self::hello(stream, node_hint, generation, options).await
            }
        }
    }

    /// Says HELLO on `stream` and starts the reader and writer tasks.
    async fn hello<S: Halves>(
        mut stream: S,
        node_hint: NodeId,
        generation: u64,
        options: &TcpOptions,
    ) -> Result<(Arc<Connection>, NodeDescriptor), FabricError> {
        let broken = |reason: String| FabricError::Disconnected {
            node: node_hint,
            reason,
        };
        let mut frame = Vec::new();
        let credential = options.credential.as_ref().map(Credential::to_bytes);
        wire::encode_hello(&mut frame, 0, credential.as_ref().map_or(&[][..], |c| &c[..]));
        stream
            .write_all(&frame)
            .await
            .map_err(|e| broken(e.to_string()))?;
        let body = read_frame(&mut stream).await.map_err(|e| broken(e.to_string()))?;
        let descriptor = match wire::decode_response(&body, &mut Completions::default()) {
            Ok(Response::Hello(d)) => d,
            Ok(Response::Refused { reason, transient }) => {
                return Err(FabricError::Refused {
                    node: node_hint,
                    reason,
                    transient,
                })
            }
            Ok(other) => {
                return Err(FabricError::Protocol {
                    node: node_hint,
                    reason: format!("answered hello with {other:?}"),
                })
            }
            Err(e) => {
                return Err(FabricError::Protocol {
                    node: node_hint,
                    reason: e.to_string(),
                })
            }
        };
        let (r, w) = stream.halves();
        let (tx, rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Connection {
            node: descriptor.node,
            generation,
            frames: tx,
            next_id: AtomicU64::new(1),
            pending: Mutex::new(Pending::default()),
        });
        // The tasks hold the connection weakly: once every transport handle
        // is dropped, the sender drops, the writer ends and shuts the socket
        // down, and the reader ends at the node's end-of-file.
        tokio::spawn(write_loop(rx, w, Arc::downgrade(&conn)));
        tokio::spawn(read_loop(r, Arc::downgrade(&conn)));
        Ok((conn, descriptor))
    }

    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a request built by `encode` (given the buffer and request id)
    /// and returns where its response will arrive.
    pub(super) fn send(
        &self,
        encode: impl FnOnce(&mut Vec<u8>, u64),
    ) -> Result<oneshot::Receiver<Vec<u8>>, FabricError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.pending();
            if let Some(reason) = &p.broken {
                return Err(self.disconnected(reason.clone()));
            }
            p.waiters.insert(id, tx);
        }
        let mut frame = Vec::new();
        encode(&mut frame, id);
        if self.frames.send(frame).is_err() {
            self.fail("writer stopped".into());
            return Err(self.disconnected("writer stopped".into()));
        }
        Ok(rx)
    }

    /// Waits for a response queued by `send`.
    pub(super) async fn receive(&self, rx: oneshot::Receiver<Vec<u8>>) -> Result<Vec<u8>, FabricError> {
        rx.await.map_err(|_| {
            let reason = self.pending().broken.clone().unwrap_or_else(|| "closed".into());
            self.disconnected(reason)
        })
    }

    pub(super) fn fail(&self, reason: String) {
        let mut p = self.pending();
        if p.broken.is_none() {
            tracing::warn!(node = self.node, %reason, "memory node connection broken");
            p.broken = Some(reason);
        }
        // Dropping the senders wakes every waiter with an error.
        p.waiters.clear();
    }

    pub(super) fn disconnected(&self, reason: String) -> FabricError {
        FabricError::Disconnected {
            node: self.node,
            reason,
        }
    }

    pub(super) fn decode(
        &self,
        body: &[u8],
        epoch: Epoch,
        expected: usize,
        out: &mut Completions,
    ) -> Result<(), FabricError> {
        let before = out.len();
        match wire::decode_response(body, out) {
            Ok(Response::Done) if out.len() - before == expected => Ok(()),
            Ok(Response::Done) => Err(FabricError::Protocol {
                node: self.node,
                reason: format!("{} completions for {expected} verbs", out.len() - before),
            }),
            Ok(Response::Stale { node_epoch }) => Err(FabricError::StaleEpoch {
                node: self.node,
                client_epoch: epoch,
                node_epoch,
            }),
            Ok(Response::Lapsed) => Err(FabricError::NodeLeaseLapsed { node: self.node }),
            // Past its deadline: this node ran none of it, but the batch's
            // other nodes may have run theirs, and its caller may be past
            // waiting (a race with its own timer). A lost connection is
            // what both mean above: outcome unknown, retried.
            Ok(Response::Expired { late_ms }) => Err(FabricError::Disconnected {
                node: self.node,
                reason: format!(
                    "the node received the batch {late_ms} ms past its deadline and ran none of it; whether \
                     its other nodes ran theirs is unknown"
                ),
            }),
            Ok(Response::Refused { reason, transient }) => {
                // The node closes the connection after a refusal.
                self.fail(format!("refused: {reason}"));
                Err(FabricError::Refused {
                    node: self.node,
                    reason,
                    transient,
                })
            }
            Ok(Response::Hello(_)) => Err(FabricError::Protocol {
                node: self.node,
                reason: "answered a batch with hello".into(),
            }),
            Err(e) => Err(FabricError::Protocol {
                node: self.node,
                reason: e.to_string(),
            }),
        }
    }
}

async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Vec<u8>> {
    let len = stream.read_u32_le().await? as usize;
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("response frame of {len} bytes over the limit"),
        ));
    }
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

/// Marks the connection broken, unless every handle on it is gone already.
fn fail(conn: &Weak<Connection>, reason: String) {
    if let Some(conn) = conn.upgrade() {
        conn.fail(reason);
    }
}

/// A connected stream that splits into a reader and a writer for the two
/// tasks: a TCP socket's own halves, or a TLS stream's (which share a lock).
trait Halves: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    type R: AsyncRead + Unpin + Send + 'static;
    type W: AsyncWrite + Unpin + Send + 'static;
    fn halves(self) -> (Self::R, Self::W);
}

impl Halves for TcpStream {
    type R = OwnedReadHalf;
    type W = OwnedWriteHalf;
    fn halves(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

impl Halves for tokio_rustls::client::TlsStream<TcpStream> {
    type R = tokio::io::ReadHalf<Self>;
    type W = tokio::io::WriteHalf<Self>;
    fn halves(self) -> (Self::R, Self::W) {
        tokio::io::split(self)
    }
}

async fn write_loop(
    mut frames: mpsc::UnboundedReceiver<Vec<u8>>,
    w: impl AsyncWrite + Unpin,
    conn: Weak<Connection>,
) {
    let mut w = BufWriter::with_capacity(IO_BUFFER_BYTES, w);
    let result: std::io::Result<()> = async {
        while let Some(frame) = frames.recv().await {
            w.write_all(&frame).await?;
            while let Ok(frame) = frames.try_recv() {
                w.write_all(&frame).await?;
            }
            w.flush().await?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        fail(&conn, format!("write failed: {e}"));
    }
}

async fn read_loop(r: impl AsyncRead + Unpin, conn: Weak<Connection>) {
    let mut r = BufReader::with_capacity(IO_BUFFER_BYTES, r);
    loop {
        let body = match read_frame(&mut r).await {
            Ok(b) => b,
            Err(e) => return fail(&conn, format!("read failed: {e}")),
        };
        let Some(conn) = conn.upgrade() else {
            // Nobody waits for responses any more.
            return;
        };
        let id = match wire::response_id(&body) {
            Ok(id) => id,
            Err(e) => return conn.fail(e.to_string()),
        };
        let waiter = conn.pending().waiters.remove(&id);
        match waiter {
            // The waiter may have given up (its future was dropped); fine.
            Some(tx) => drop(tx.send(body)),
            None => return conn.fail(format!("response to unknown request {id}")),
        }
    }
}
