//! The tcp transport's client side: one pipelined connection per memory node.
//!
//! Any number of batches may be outstanding on a connection: each carries a
//! request id, a writer task coalesces queued frames into few socket writes,
//! and a reader task hands each response to whoever waits for its id. Forks
//! of a client share the connections, so K forks give K outstanding batches.
//!
//! A connection that breaks (the node restarted, the network dropped it,
//! [`Transport::drop_connections`]) fails the batches waiting on it with
//! `Disconnected`, and the next batch for that node connects again: up to
//! [`RECONNECT_ATTEMPTS_MAX`] attempts with exponential backoff, checking
//! that the endpoint is still the same node, and stopping early once the
//! process's clients route by a map that no longer sends anything to the
//! node ([`TcpTransport::follow`]). A batch spanning nodes may have
//! run on some of them when one connection broke; the layers above make
//! every such step repairable (`docs/txn.md` §8).
//!
//! Nothing waits for ever ([`TcpOptions`]): connecting has a timeout, TCP
//! keepalive is on, and a batch unanswered past its deadline breaks its
//! connection and fails as `Disconnected` (its outcome unknown where it
//! wrote: a node that is only slow may still run it). A batch waiting on a
//! node that the process's map stops routing to (recovery evicted it) fails
//! the same way at once, so that its caller routes again by the new map
//! instead of waiting for a node that was paused or cut off.
//!
//! Each connection opens with a HELLO presenting the transport's
//! credential (`crate::admission`); a node that refuses it says why, and
//! the batch fails with [`FabricError::Refused`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::addr::{Epoch, NodeId};
use crate::admission::Credential;
use crate::deadline;
use crate::error::FabricError;
use crate::mandate::Mandate;
use crate::map::ClusterMap;
use crate::transport::later::Later;
use crate::transport::Transport;
use crate::verb::{Completions, Op, Outcome};
use crate::wire::{self};

mod connection;

use connection::Connection;

/// Attempts at connecting again to a node whose connection broke, before the
/// batch fails with `Disconnected`: with the backoff below, about 1.3 s of
/// trying, longer than a memory node's restart on one host and short enough
/// for a caller to decide what to do next.
pub const RECONNECT_ATTEMPTS_MAX: u32 = 8;
/// The first wait between reconnection attempts; it doubles up to
/// [`RECONNECT_BACKOFF_MAX`].
pub const RECONNECT_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(5);
/// The longest wait between reconnection attempts.
pub const RECONNECT_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(320);
/// How long a batch waits for its node's answer, by default. A batch is at
/// most `BATCH_BYTES_MAX` and a node answers it in well under a
/// millisecond; 2 s is past any queueing a live node shows, and short next
/// to the leases (a client that waits longer than its lease cannot commit
/// anyway).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long connecting and saying HELLO may take, by default: a round trip
/// on any network with room for a loaded node, short next to the reconnect
/// budget.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The prefix of a memory node's endpoint that speaks TLS
/// (`tls://host:port`): the map says which nodes do, and every client
/// follows it.
pub const TLS_SCHEME: &str = "tls://";

/// How a [`TcpTransport`] connects and how long it waits.
#[derive(Clone, Debug)]
pub struct TcpOptions {
    /// Presented in every HELLO; `None` presents none (nodes with an open
    /// gate only).
    pub credential: Option<Credential>,
    /// How long a batch waits for its answer ([`REQUEST_DEADLINE`]).
    pub request_deadline: Duration,
    /// How long connecting and saying HELLO may take ([`CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// Endpoints reached through another address: `(endpoint, via)` sends
    /// what is for `endpoint` to `via` (an in-path proxy: chaos partitions
    /// of the data path, tests that hold a client's frames). The node's
    /// identity is checked as ever.
    pub via: Vec<(String, String)>,
    /// The roots a node that speaks TLS is checked against (with the
    /// endpoint's host, wherever `via` routes the bytes). A node speaks TLS
    /// when its endpoint says so ([`TLS_SCHEME`]: a node served with
    /// `server::serve_tls` registers it so); reaching one without roots is
    /// an error that says so.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            credential: None,
            request_deadline: REQUEST_DEADLINE,
            connect_timeout: CONNECT_TIMEOUT,
            via: Vec::new(),
            tls: None,
        }
    }
}

impl TcpOptions {
    /// Where to connect for `endpoint`: itself, unless [`TcpOptions::via`]
    /// names a proxy.
    fn route<'a>(&'a self, endpoint: &'a str) -> &'a str {
        self.via
            .iter()
            .find(|(e, _)| e == endpoint)
            .map_or(endpoint, |(_, v)| v.as_str())
    }

    /// The defaults, presenting `credential`.
    pub fn with_credential(credential: Credential) -> Self {
        TcpOptions {
            credential: Some(credential),
            ..TcpOptions::default()
        }
    }
}

/// Connections to memory nodes over tcp.
#[derive(Clone, Debug)]
pub struct TcpTransport {
    slots: Arc<[Slot]>,
    /// Nodes that joined the map after the transport was made
    /// ([`TcpTransport::learn`]), connected at their first batch.
    later: Arc<Later<Slot>>,
    /// What every handle shares beside the connections (one pointer: a
    /// client holds its transport by value).
    conf: Arc<Conf>,
}

#[derive(Debug)]
struct Conf {
    /// The mandate of the process's clients, once one follows a control
    /// plane ([`TcpTransport::follow`]): reconnecting to a node stops when
    /// its map stops routing to it.
    mandate: OnceLock<Weak<Mandate>>,
    options: TcpOptions,
}

/// One node's connection, replaced by a new one when it broke.
#[derive(Debug)]
struct Slot {
    node: NodeId,
    endpoint: String,
    current: tokio::sync::Mutex<Arc<Connection>>,
    /// Attempts batches made at connecting (again), successful or not.
    attempts: AtomicU64,
}

impl TcpTransport {
    /// Connects to every node of `map` at its endpoint and checks that each
    /// endpoint is the node the map says it is. A node that cannot be
    /// reached (it died; recovery will route around it) is connected at its
    /// next batch instead.
    pub async fn connect_map(map: &ClusterMap) -> Result<Self, FabricError> {
        Self::connect_map_with(map, TcpOptions::default()).await
    }

    /// [`TcpTransport::connect_map`] with `options` (a credential, deadlines).
    pub async fn connect_map_with(map: &ClusterMap, options: TcpOptions) -> Result<Self, FabricError> {
        let mut conns = Vec::new();
        for n in map.nodes() {
            match Connection::open(&n.endpoint, n.id, 1, &options).await {
                Ok((_, d)) if d.node != n.id => {
                    return Err(FabricError::Protocol {
                        node: n.id,
                        reason: format!("{} is memory node {}, the map says {}", n.endpoint, d.node, n.id),
                    });
                }
                Ok((conn, _)) => conns.push(Slot::new(conn, n.endpoint.clone())),
                // Refused for good: the caller's credential is wrong, which
                // no reconnection mends. (A node not admitting yet is tried
                // again at its next batch, as an unreachable one.)
                Err(e @ FabricError::Refused { transient: false, .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(node = n.id, endpoint = %n.endpoint, error = %e, "memory node unreachable; connecting at its next batch");
                    conns.push(Slot::unconnected(n.id, n.endpoint.clone()));
                }
            }
        }
        Ok(TcpTransport {
            slots: conns.into(),
            later: Arc::new(Later::new()),
            conf: Arc::new(Conf {
                mandate: OnceLock::new(),
                options,
            }),
        })
    }

    /// Takes on every node of `map` this transport does not know (it
    /// joined the cluster later), to be connected at its first batch.
    /// Returns how many.
    pub fn learn(&self, map: &ClusterMap) -> Result<usize, FabricError> {
        self.later.learn(
            map,
            |id| self.slot(id).is_some(),
            |s| s.node,
            |n| Ok::<_, FabricError>(Slot::unconnected(n.id, n.endpoint.clone())),
        )
    }

    fn slot(&self, node: NodeId) -> Option<&Slot> {
        self.slots
            .iter()
            .find(|s| s.node == node)
            .or_else(|| self.later.iter().find(|s| s.node == node))
    }

    /// Connects to each address, asks each node what it holds, and builds
    /// the map they describe (the first node holding a region is its
    /// primary; the epoch is the highest the nodes report).
    pub async fn discover(addrs: &[String]) -> Result<(Self, ClusterMap), FabricError> {
        Self::discover_with(addrs, TcpOptions::default()).await
    }

    /// [`TcpTransport::discover`] with `options` (a credential, deadlines).
    pub async fn discover_with(
        addrs: &[String],
        options: TcpOptions,
    ) -> Result<(Self, ClusterMap), FabricError> {
        let mut conns = Vec::new();
        let mut descriptors = Vec::new();
        for addr in addrs {
            let (conn, d) = Connection::open(addr, 0, 1, &options).await?;
            descriptors.push((d, addr.clone()));
            conns.push(Slot::new(conn, addr.clone()));
        }
        let epoch = descriptors.iter().map(|(d, _)| d.epoch).max().unwrap_or(1);
        let map = ClusterMap::from_descriptors(epoch, &descriptors).map_err(|e| FabricError::Protocol {
            node: 0,
            reason: e.to_string(),
        })?;
        Ok((
            TcpTransport {
                slots: conns.into(),
                later: Arc::new(Later::new()),
                conf: Arc::new(Conf {
                    mandate: OnceLock::new(),
                    options,
                }),
            },
            map,
        ))
    }

    /// The live connection to `node`, connecting again if it broke.
    async fn conn(&self, node: NodeId) -> Result<Arc<Connection>, FabricError> {
        let slot = self.slot(node).ok_or(FabricError::UnknownNode { node })?;
        slot.live(&self.conf.mandate, &self.conf.options).await
    }

    /// Stamps a batch's frame with its deadline ([`deadline::stamp`]), and
    /// says when its client may call it lost.
    fn stamp(&self) -> (u64, tokio::time::Instant) {
        let d = self.conf.options.request_deadline;
        let settled = tokio::time::Instant::now() + deadline::settled_after(d);
        (deadline::stamp(d), settled)
    }

    /// Waits for the answer to a batch sent at `epoch`, which no node runs
    /// after `settled` ([`TcpTransport::stamp`]). Fails it, breaking the
    /// connection, once `settled` passes unanswered; fails it at once when
    /// the process's map stops routing to the node. A connection that
    /// breaks under it fails it only at `settled` (or that eviction): the
    /// frame may still be in the network, a closed socket's kernel sending
    /// it on, and until then it may run.
    async fn answer(
        &self,
        conn: &Connection,
        rx: oneshot::Receiver<Vec<u8>>,
        epoch: Epoch,
        settled: tokio::time::Instant,
    ) -> Result<Vec<u8>, FabricError> {
        let deadline = self.conf.options.request_deadline;
        let mandate = self.conf.mandate.get().and_then(Weak::upgrade);
        let evicted = async {
            match &mandate {
                Some(m) => m.stops_routing_to(conn.node, epoch).await,
                None => std::future::pending().await,
            }
        };
        let mut evicted = std::pin::pin!(evicted);
        let received = tokio::select! {
            body = conn.receive(rx) => body,
            () = tokio::time::sleep_until(settled) => {
                let reason = format!("no answer within the {deadline:?} deadline; whether its writes ran is unknown");
                conn.fail(reason.clone());
                return Err(conn.disconnected(reason));
            }
            () = &mut evicted => {
                let reason = "the map no longer routes to it (recovery evicted it) while a batch waited; \
                              whether its writes ran is unknown".to_owned();
                conn.fail(reason.clone());
                return Err(conn.disconnected(reason));
            }
        };
        if received.is_err() {
            tokio::select! {
                () = tokio::time::sleep_until(settled) => {}
                () = &mut evicted => {}
            }
        }
        received
    }

    /// From now on, a reconnection to a node stops as soon as `mandate`
    /// installs a newer map that routes nothing to it (recovery evicted a
    /// dead node): the batch fails with `Disconnected` and its caller
    /// routes again by the new map, instead of waiting out
    /// [`RECONNECT_ATTEMPTS_MAX`] attempts. Set once: the first mandate
    /// stays (a process has one).
    pub fn follow(&self, mandate: &Arc<Mandate>) {
        let _ = self.conf.mandate.set(Arc::downgrade(mandate));
    }

    /// Breaks every connection now, as a network that drops them would:
    /// batches waiting on them fail, and the next batch for each node
    /// connects again.
    pub fn drop_all(&self) {
        for slot in self.slots.iter().chain(self.later.iter()) {
            // A slot being reconnected right now holds a fresh connection.
            if let Ok(conn) = slot.current.try_lock() {
                conn.fail("connection dropped".into());
            }
        }
    }

    /// Attempts at connecting again, successful or not, over all nodes.
    pub fn reconnect_attempts(&self) -> u64 {
        self.slots
            .iter()
            .chain(self.later.iter())
            .map(|s| s.attempts.load(Ordering::Relaxed))
            .sum()
    }

    /// Connections made again after one broke, over all nodes.
    pub fn reconnects(&self) -> u64 {
        self.slots
            .iter()
            .chain(self.later.iter())
            .map(Slot::reconnects)
            .sum()
    }
}

impl Slot {
    fn new(conn: Arc<Connection>, endpoint: String) -> Self {
        Slot {
            node: conn.node,
            endpoint,
            current: tokio::sync::Mutex::new(conn),
            attempts: AtomicU64::new(0),
        }
    }

    /// A slot for `node` whose first batch connects.
    fn unconnected(node: NodeId, endpoint: String) -> Self {
        Slot {
            node,
            endpoint,
            current: tokio::sync::Mutex::new(Arc::new(Connection::unconnected(node))),
            attempts: AtomicU64::new(0),
        }
    }

    fn reconnects(&self) -> u64 {
        self.current
            .try_lock()
            .map_or(0, |c| c.generation.saturating_sub(1))
    }

    /// The current connection if it is not broken; otherwise a new one
    /// (bounded attempts, exponential backoff). Concurrent callers wait for
    /// one reconnection rather than each opening their own.
    /// `mandate`: the process's, if it follows one (taken only when the
    /// connection is broken: a live one costs the batch nothing more).
    async fn live(
        &self,
        mandate: &OnceLock<Weak<Mandate>>,
        options: &TcpOptions,
    ) -> Result<Arc<Connection>, FabricError> {
        let mut current = self.current.lock().await;
        if current.pending().broken.is_none() {
            return Ok(current.clone());
        }
        let Some(m) = mandate.get().and_then(Weak::upgrade) else {
            return self.reconnect(&mut current, options).await;
        };
        let since = m.epoch();
        tokio::select! {
            done = self.reconnect(&mut current, options) => done,
            () = m.stops_routing_to(self.node, since) => Err(FabricError::Disconnected {
                node: self.node,
                reason: "the map no longer routes to it (recovery evicted it): not reconnecting".into(),
            }),
        }
    }

    /// Connects again in place of `current` (bounded attempts, exponential
    /// backoff). Stopped at any await, it leaves `current` broken, and the
    /// next batch for the node tries again.
    async fn reconnect(
        &self,
        current: &mut Arc<Connection>,
        options: &TcpOptions,
    ) -> Result<Arc<Connection>, FabricError> {
        let generation = current.generation + 1;
        let mut wait = RECONNECT_BACKOFF_MIN;
        let mut last = None;
        for attempt in 1..=RECONNECT_ATTEMPTS_MAX {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            match Connection::open(&self.endpoint, self.node, generation, options).await {
                Ok((conn, d)) if d.node == self.node => {
                    tracing::info!(node = self.node, endpoint = %self.endpoint, attempt, "memory node reconnected");
                    *current = conn.clone();
                    return Ok(conn);
                }
                Ok((_, d)) => {
                    return Err(FabricError::Protocol {
                        node: self.node,
                        reason: format!(
                            "{} is memory node {} now, not {}",
                            self.endpoint, d.node, self.node
                        ),
                    })
                }
                // Refused for good: trying again presents the same
                // credential.
                Err(e @ FabricError::Refused { transient: false, .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
            if attempt < RECONNECT_ATTEMPTS_MAX {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RECONNECT_BACKOFF_MAX);
            }
        }
        Err(last.unwrap_or_else(|| FabricError::Disconnected {
            node: self.node,
            reason: "no attempt made".into(),
        }))
    }
}

impl Transport for TcpTransport {
    async fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> Result<(), FabricError> {
        // Fault injection may pass an empty batch (a crash before any verb,
        // or a batch whose only WRITE it holds back): nothing to send.
        let Some(&Op { node: first, .. }) = ops.first() else {
            return Ok(());
        };
        if ops.iter().all(|op| op.node == first) {
            let conn = self.conn(first).await?;
            let (expires_at_us, settled) = self.stamp();
            let rx =
                conn.send(|buf, id| wire::encode_batch(buf, id, epoch, expires_at_us, ops.iter(), payload))?;
            let body = self.answer(&conn, rx, epoch, settled).await?;
            return conn.decode(&body, epoch, ops.len(), out);
        }
        // Several nodes: post to all of them, then wait for all of them.
        let mut nodes: Vec<NodeId> = Vec::new();
        for op in ops {
            if !nodes.contains(&op.node) {
                nodes.push(op.node);
            }
        }
        let mut waits = Vec::with_capacity(nodes.len());
        // Every node's part answered or settled before any error is
        // reported: the caller's next step must not race a part still in
        // the network. A node that cannot be reached stops the posting.
        let mut failed = None;
        for &node in &nodes {
            let conn = match self.conn(node).await {
                Ok(conn) => conn,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let mine = ops.iter().filter(|op| op.node == node);
            let count = mine.clone().count();
            // Stamped once connected: a reconnection does not eat the deadline.
            let (expires_at_us, settled) = self.stamp();
            match conn.send(|buf, id| {
                wire::encode_batch(buf, id, epoch, expires_at_us, ExactLen(mine, count), payload)
            }) {
                Ok(rx) => waits.push((conn, rx, count, settled)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let mut per_node = Vec::with_capacity(nodes.len());
        for (conn, rx, count, settled) in waits {
            let answered = self.answer(&conn, rx, epoch, settled).await;
            if failed.is_some() {
                continue;
            }
            let mut c = Completions::default();
            match answered.and_then(|body| conn.decode(&body, epoch, count, &mut c)) {
                Ok(()) => per_node.push((c, 0usize)),
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        // Back into op order.
        for op in ops {
            let i = nodes.iter().position(|&n| n == op.node).unwrap_or_default();
            let (c, next) = &mut per_node[i];
            match c.as_slice()[*next] {
                Ok(Outcome::Read(range)) => out.push_read(range.len).copy_from_slice(c.read_data(range)),
                other => out.push(other),
            }
            *next += 1;
        }
        Ok(())
    }
}

/// An iterator with a known length (a filter whose count was taken first).
struct ExactLen<I>(I, usize);

impl<I: Iterator> Iterator for ExactLen<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        self.0.next()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.1, Some(self.1))
    }
}

impl<I: Iterator> ExactSizeIterator for ExactLen<I> {}
