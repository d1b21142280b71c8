//! The rdma transport's client side (cargo feature `rdma`): one RC queue
//! pair per memory node, a batch posted as one chained work-request list.
//!
//! - **A batch is one round trip.** The verbs a batch sends to a node are
//!   posted as one linked list (one doorbell), only the last signalled; the
//!   batch is done when that one completion arrives. RC executes a queue
//!   pair's requests in order, which is the fabric's per-node order. A
//!   multi-node batch posts to every node before polling any.
//! - **Checks.** The device checks only that a verb stays inside the region
//!   whose key it carries. The fabric's per-verb errors (unknown region,
//!   wrong access key, too large, out of bounds, misaligned, the per-batch
//!   READ budget, and `Flushed` after an error) are decided here, against
//!   the region table the node sent, exactly as `MemoryNode::check` decides
//!   them; a region missing from the table, or one whose key differs, makes
//!   the client ask the node for its table again first (it may have been
//!   placed there since). A verb refused here is never posted, so a bad
//!   verb does not break the queue pair (an access error on RDMA would).
//! - **Epochs.** A node admits a queue pair only from a client whose map is
//!   not older than its epoch, and revokes every queue pair when its epoch
//!   rises (`rdma::RdmaServer`). A batch from a map older than the epoch
//!   its connection was admitted at is refused here with `StaleEpoch`; a
//!   revoked connection is replaced at the next batch, which the node
//!   admits or refuses (`StaleEpoch`, `NodeLeaseLapsed`) before any verb.
//! - **Errors.** A completion in error means the queue pair is in error:
//!   the connection is lost (the batch fails with `Disconnected`, its
//!   verbs' outcomes unknown) and the next batch connects again, with the
//!   tcp transport's bounds ([`RECONNECT_ATTEMPTS_MAX`], backoff, and the
//!   mandate that stops reconnecting to an evicted node).
//!
//! Batches to one node are serialised per transport (one queue pair, one
//! completion queue); forks of a client share them.

mod batch;

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::BasicQueuePair;
use tokio::sync::oneshot;

use crate::addr::{Epoch, NodeId, ATOMIC_BYTES};
use crate::admission::Credential;
use crate::error::FabricError;
use crate::mandate::Mandate;
use crate::map::ClusterMap;
use crate::memnode::{NodeDescriptor, RegionDescriptor};
use crate::rdma::control::{self, RemoteRegion, ToClient, ToNode};
use crate::rdma::verbs::{self, Device, Side};
use crate::rdma::RdmaError;
use crate::transport::later::Later;
use crate::transport::tcp::{RECONNECT_ATTEMPTS_MAX, RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN};
use crate::transport::Transport;
use batch::{decide_missing, plan, post, wait, Missing, Posted, Step};

use crate::verb::{Completions, Op, Outcome, BATCH_BYTES_MAX, VERBS_PER_BATCH_MAX};

/// Longest a batch waits for its completion. The queue pair gives up on a
/// silent peer in under half a second (`verbs`); this bounds the wait if
/// the device itself stops answering.
pub const COMPLETION_WAIT_MAX: Duration = Duration::from_secs(10);
/// The local buffer's layout: READ results, then atomics' old values, then
/// WRITE data. Each area holds what one batch may need.
const READ_AREA_BYTES: usize = BATCH_BYTES_MAX as usize;
const ATOMIC_AREA_BYTES: usize = VERBS_PER_BATCH_MAX * ATOMIC_BYTES as usize;
const WRITE_AREA_BYTES: usize = BATCH_BYTES_MAX as usize;
const BUFFER_BYTES: usize = READ_AREA_BYTES + ATOMIC_AREA_BYTES + WRITE_AREA_BYTES;
const IBV_WC_SUCCESS: u32 = 0;

/// Queue pairs to memory nodes served over rdma ([`crate::rdma::RdmaServer`]).
/// Cheap to clone: clones share the queue pairs.
#[derive(Clone)]
pub struct RdmaTransport {
    // One pointer: a client holds its transport by value in an enum.
    inner: Arc<Inner>,
}

struct Inner {
    /// Presented in every hello.
    credential: Option<Credential>,
    device: Arc<Device>,
    slots: Box<[Slot]>,
    /// Nodes that joined the map after the transport was made.
    later: Later<Slot>,
    /// The mandate of the process's clients, once one follows a control plane.
    mandate: OnceLock<Weak<Mandate>>,
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport")
            .field("device", &self.inner.device.name())
            .field("nodes", &self.inner.slots.len())
            .finish()
    }
}

/// One node's connection, replaced when it broke or was revoked.
struct Slot {
    node: NodeId,
    endpoint: String,
    current: tokio::sync::Mutex<Option<Conn>>,
    /// Attempts at connecting, successful or not.
    attempts: AtomicU64,
    /// Connections made.
    connects: AtomicU64,
}

/// A queue pair connected to a node, and what the node told of itself.
struct Conn {
    wire: Arc<Wire>,
    cq: Arc<BasicCompletionQueue>,
    regions: Vec<RemoteRegion>,
    /// The node's epoch when it admitted this connection.
    node_epoch: Epoch,
    control: Arc<Control>,
}

/// The queue pair and the buffer its verbs read into and write from.
/// Field order is drop order: the queue pair goes (and with it any work
/// the device could still do on the buffer) before the buffer.
struct Wire {
    qp: Mutex<BasicQueuePair>,
    buffer: LocalBuffer,
}

struct LocalBuffer {
    mr: Arc<MemoryRegion>,
    map: MmapRaw,
}

/// The control connection, read by a thread of its own.
struct Control {
    stream: TcpStream,
    sending: Mutex<()>,
    state: Mutex<ControlState>,
}

#[derive(Default)]
struct ControlState {
    /// Why the connection is no longer usable (revoked, closed).
    ended: Option<String>,
    /// Who waits for the region table asked for.
    regions: Option<oneshot::Sender<Vec<RemoteRegion>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn disconnected(node: NodeId, reason: impl Into<String>) -> FabricError {
    FabricError::Disconnected {
        node,
        reason: reason.into(),
    }
}

impl RdmaTransport {
    /// Connects to each control address, learns what each node holds, and
    /// builds the map they describe (the first node holding a region is its
    /// primary; the epoch is the highest the nodes report).
    pub async fn discover(addrs: &[String]) -> Result<(Self, ClusterMap), FabricError> {
        Self::discover_with(addrs, None).await
    }

    /// [`RdmaTransport::discover`] presenting `credential` in every hello
    /// (`crate::admission`).
    pub async fn discover_with(
        addrs: &[String],
        credential: Option<Credential>,
    ) -> Result<(Self, ClusterMap), FabricError> {
        let device = open_device()?;
        let mut slots = Vec::new();
        let mut descriptors = Vec::new();
        for addr in addrs {
            // Discovery knows no epoch yet: admitted at any; batches are
            // checked against the node's epoch all the same.
            let conn = Conn::open(&device, addr, 0, Epoch::MAX, credential.clone()).await?;
            let (node, d) = (conn.1.node, conn.1.clone());
            descriptors.push((d, addr.clone()));
            let slot = Slot::new(node, addr.clone());
            *slot
                .current
                .try_lock()
                .map_err(|_| disconnected(node, "slot busy"))? = Some(conn.0);
            slot.attempts.store(1, Ordering::Relaxed);
            slot.connects.store(1, Ordering::Relaxed);
            slots.push(slot);
        }
        let epoch = descriptors.iter().map(|(d, _)| d.epoch).max().unwrap_or(1);
        let map = ClusterMap::from_descriptors(epoch, &descriptors).map_err(|e| FabricError::Protocol {
            node: 0,
            reason: e.to_string(),
        })?;
        Ok((RdmaTransport::from_slots(device, slots, credential), map))
    }

    /// A transport for the nodes of `map` (endpoints: their control
    /// addresses), each connected at its first batch.
    pub fn connect_map(map: &ClusterMap) -> Result<Self, FabricError> {
        Self::connect_map_with(map, None)
    }

    /// [`RdmaTransport::connect_map`] presenting `credential`.
    pub fn connect_map_with(map: &ClusterMap, credential: Option<Credential>) -> Result<Self, FabricError> {
        let device = open_device()?;
        let slots: Vec<Slot> = map
            .nodes()
            .iter()
            .map(|n| Slot::new(n.id, n.endpoint.clone()))
            .collect();
        Ok(RdmaTransport::from_slots(device, slots, credential))
    }

    fn from_slots(device: Arc<Device>, slots: Vec<Slot>, credential: Option<Credential>) -> Self {
        RdmaTransport {
            inner: Arc::new(Inner {
                credential,
                device,
                slots: slots.into(),
                later: Later::new(),
                mandate: OnceLock::new(),
            }),
        }
    }

    /// Takes on every node of `map` this transport does not know, to be
    /// connected at its first batch. Returns how many.
    pub fn learn(&self, map: &ClusterMap) -> Result<usize, FabricError> {
        self.inner.later.learn(
            map,
            |id| self.slot(id).is_some(),
            |s| s.node,
            |n| Ok::<_, FabricError>(Slot::new(n.id, n.endpoint.clone())),
        )
    }

    /// From now on, connecting again to a node stops as soon as `mandate`
    /// installs a map that routes nothing to it (as
    /// [`TcpTransport::follow`](crate::TcpTransport::follow)).
    pub fn follow(&self, mandate: &Arc<Mandate>) {
        let _ = self.inner.mandate.set(Arc::downgrade(mandate));
    }

    /// Drops every connection now (a network that drops them): the next
    /// batch for each node connects again.
    pub fn drop_all(&self) {
        for slot in self.inner.slots.iter().chain(self.inner.later.iter()) {
            if let Ok(mut current) = slot.current.try_lock() {
                *current = None;
            }
        }
    }

    /// Connections made, over all nodes (the first included).
    pub fn connects(&self) -> u64 {
        self.inner
            .slots
            .iter()
            .chain(self.inner.later.iter())
            .map(|s| s.connects.load(Ordering::Relaxed))
            .sum()
    }

    /// The device this transport uses.
    pub fn device_name(&self) -> &str {
        self.inner.device.name()
    }

    fn slot(&self, node: NodeId) -> Option<&Slot> {
        self.inner
            .slots
            .iter()
            .find(|s| s.node == node)
            .or_else(|| self.inner.later.iter().find(|s| s.node == node))
    }
}

fn open_device() -> Result<Arc<Device>, FabricError> {
    Device::open().map_err(|e| FabricError::Protocol {
        node: 0,
        reason: e.to_string(),
    })
}

impl Slot {
    fn new(node: NodeId, endpoint: String) -> Slot {
        Slot {
            node,
            endpoint,
            current: tokio::sync::Mutex::new(None),
            attempts: AtomicU64::new(0),
            connects: AtomicU64::new(0),
        }
    }

    /// Makes `current` a live connection admitted for `epoch`: keeps the one
    /// there unless it ended, connects otherwise (bounded attempts with
    /// backoff for a node that cannot be reached; a refusal is final).
    async fn ensure(
        &self,
        current: &mut Option<Conn>,
        device: &Arc<Device>,
        epoch: Epoch,
        mandate: &OnceLock<Weak<Mandate>>,
        credential: &Option<Credential>,
    ) -> Result<(), FabricError> {
        if let Some(c) = current {
            match c.ended() {
                None => return Ok(()),
                Some(why) => {
                    tracing::debug!(node = self.node, %why, "rdma connection ended; connecting again");
                    *current = None;
                }
            }
        }
        let connect = async {
            let mut wait = RECONNECT_BACKOFF_MIN;
            for attempt in 1..=RECONNECT_ATTEMPTS_MAX {
                self.attempts.fetch_add(1, Ordering::Relaxed);
                match Conn::open(device, &self.endpoint, self.node, epoch, credential.clone()).await {
                    Ok((_, d)) if d.node != self.node => {
                        return Err(FabricError::Protocol {
                            node: self.node,
                            reason: format!("{} is memory node {}, not {}", self.endpoint, d.node, self.node),
                        })
                    }
                    Ok((conn, _)) => return Ok(conn),
                    Err(e @ FabricError::Disconnected { .. }) if attempt < RECONNECT_ATTEMPTS_MAX => {
                        tracing::debug!(node = self.node, attempt, error = %e, "rdma connect failed; trying again");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RECONNECT_BACKOFF_MAX);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(disconnected(self.node, "no attempt made"))
        };
        let conn = match mandate.get().and_then(Weak::upgrade) {
            None => connect.await?,
            Some(m) => {
                let since = m.epoch();
                tokio::select! {
                    done = connect => done?,
                    () = m.stops_routing_to(self.node, since) => return Err(disconnected(
                        self.node,
                        "the map no longer routes to it (recovery evicted it): not reconnecting",
                    )),
                }
            }
        };
        self.connects.fetch_add(1, Ordering::Relaxed);
        *current = Some(conn);
        Ok(())
    }
}

impl Conn {
    /// Opens a control connection to `addr`, asks for a queue pair at
    /// `epoch`, and connects it. Blocking I/O, run off the async workers.
    async fn open(
        device: &Arc<Device>,
        addr: &str,
        node_hint: NodeId,
        epoch: Epoch,
        credential: Option<Credential>,
    ) -> Result<(Conn, NodeDescriptor), FabricError> {
        let device = device.clone();
        let addr = addr.to_owned();
        tokio::task::spawn_blocking(move || Conn::open_blocking(&device, &addr, node_hint, epoch, credential))
            .await
            .map_err(|e| disconnected(node_hint, format!("connecting stopped: {e}")))?
    }

    fn open_blocking(
        device: &Arc<Device>,
        addr: &str,
        node_hint: NodeId,
        epoch: Epoch,
        credential: Option<Credential>,
    ) -> Result<(Conn, NodeDescriptor), FabricError> {
        let broken = |reason: String| disconnected(node_hint, reason);
        let device_error = |e: RdmaError| FabricError::Protocol {
            node: node_hint,
            reason: e.to_string(),
        };
        let cq = device.completion_queue(Side::Client).map_err(device_error)?;
        let (mut qp, local) = device.queue_pair(Side::Client, &cq).map_err(device_error)?;
        let buffer = LocalBuffer::new(device).map_err(device_error)?;
        let mut stream =
            TcpStream::connect(addr).map_err(|e| broken(format!("cannot connect to {addr}: {e}")))?;
        stream.set_nodelay(true).map_err(|e| broken(e.to_string()))?;
        let hello = ToNode::Hello {
            epoch,
            qp: local,
            credential: credential.map(|c| c.to_hex()).unwrap_or_default(),
        };
        control::send(&mut stream, &hello).map_err(|e| broken(e.to_string()))?;
        let answer = control::receive::<ToClient>(&mut stream)
            .map_err(|e| broken(e.to_string()))?
            .ok_or_else(|| broken(format!("{addr} closed the connection at hello")))?;
        let (node, node_epoch, remote, regions) = match answer {
            ToClient::Welcome {
                node,
                epoch,
                qp,
                regions,
            } => (node, epoch, qp, regions),
            ToClient::Stale { node_epoch } => {
                return Err(FabricError::StaleEpoch {
                    node: node_hint,
                    client_epoch: epoch,
                    node_epoch,
                })
            }
            ToClient::Lapsed => return Err(FabricError::NodeLeaseLapsed { node: node_hint }),
            other => {
                return Err(FabricError::Protocol {
                    node: node_hint,
                    reason: format!("answered hello with {other:?}"),
                })
            }
        };
        device.connect(&mut qp, &local, &remote).map_err(device_error)?;
        let descriptor = NodeDescriptor {
            node,
            epoch: node_epoch,
            regions: regions
                .iter()
                .map(|r| RegionDescriptor {
                    id: r.id,
                    size: r.size,
                    key: r.key,
                })
                .collect(),
        };
        let wire = Arc::new(Wire {
            qp: Mutex::new(qp),
            buffer,
        });
        let control = Arc::new(Control {
            stream: stream.try_clone().map_err(|e| broken(e.to_string()))?,
            sending: Mutex::new(()),
            state: Mutex::new(ControlState::default()),
        });
        let (w, c) = (wire.clone(), control.clone());
        std::thread::Builder::new()
            .name(format!("rdma-control-{node}"))
            .spawn(move || read_control(stream, c, w))
            .map_err(|e| broken(format!("cannot start a thread: {e}")))?;
        Ok((
            Conn {
                wire,
                cq,
                regions,
                node_epoch,
                control,
            },
            descriptor,
        ))
    }

    fn ended(&self) -> Option<String> {
        lock(&self.control.state).ended.clone()
    }

    /// Asks the node for its region table again.
    async fn refresh_regions(&mut self, node: NodeId) -> Result<(), FabricError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = lock(&self.control.state);
            if let Some(why) = &state.ended {
                return Err(disconnected(node, why.clone()));
            }
            state.regions = Some(tx);
        }
        self.control
            .send(&ToNode::Regions)
            .map_err(|e| disconnected(node, e.to_string()))?;
        let regions = rx.await.map_err(|_| {
            disconnected(
                node,
                self.ended().unwrap_or_else(|| "control connection closed".into()),
            )
        })?;
        self.regions = regions;
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Nothing more runs on the queue pair; the reader thread ends at the
        // closed socket and drops its handles.
        let _ = verbs::revoke(&mut lock(&self.wire.qp));
        let _ = self.control.stream.shutdown(Shutdown::Both);
    }
}

impl Control {
    fn send(&self, msg: &ToNode) -> std::io::Result<()> {
        let _one = lock(&self.sending);
        control::send(&mut &self.stream, msg)
    }

    fn end(&self, why: String) {
        let mut state = lock(&self.state);
        if state.ended.is_none() {
            state.ended = Some(why);
        }
        // Dropping the sender wakes a waiting refresh with an error.
        state.regions = None;
    }
}

/// The control connection's reader: hands out region tables, and on a
/// revocation revokes the local queue pair (flushing whatever is posted)
/// before confirming it to the node.
fn read_control(mut stream: TcpStream, control: Arc<Control>, wire: Arc<Wire>) {
    let why = loop {
        match control::receive::<ToClient>(&mut stream) {
            Ok(Some(ToClient::Regions(regions))) => {
                if let Some(tx) = lock(&control.state).regions.take() {
                    let _ = tx.send(regions);
                }
            }
            Ok(Some(ToClient::Revoked { epoch, lapsed })) => {
                let _ = verbs::revoke(&mut lock(&wire.qp));
                control.end(if lapsed {
                    "revoked: the node's lease lapsed".into()
                } else {
                    format!("revoked: the node's epoch rose to {epoch}")
                });
                let _ = control.send(&ToNode::Revoked);
                return;
            }
            Ok(Some(other)) => break format!("unexpected control message {other:?}"),
            Ok(None) => break "the node closed the control connection".into(),
            Err(e) => break format!("control connection: {e}"),
        }
    };
    let _ = verbs::revoke(&mut lock(&wire.qp));
    control.end(why);
}

impl LocalBuffer {
    fn new(device: &Device) -> Result<LocalBuffer, RdmaError> {
        let map = MmapOptions::new()
            .len(BUFFER_BYTES)
            .map_anon()
            .map_err(|e| RdmaError::Io(format!("cannot map a {BUFFER_BYTES}-byte buffer: {e}")))?;
        let map = MmapRaw::from(map);
        // SAFETY: `map` is owned by the returned buffer, which drops the
        // registration (field order) before it unmaps the bytes.
        let mr = unsafe { device.register(map.as_ptr() as usize, BUFFER_BYTES, false) }?;
        Ok(LocalBuffer { mr, map })
    }

    fn addr(&self, offset: usize) -> u64 {
        debug_assert!(offset <= BUFFER_BYTES);
        self.map.as_ptr() as u64 + offset as u64
    }

    /// Copies `src` into the buffer at `offset`.
    fn put(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= BUFFER_BYTES, "buffer overrun");
        // SAFETY: in bounds (asserted); the device only reads this area
        // after the post that follows, and no completion is outstanding on
        // it (one batch at a time per connection).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_mut_ptr().add(offset), src.len()) };
    }

    /// Copies `dst.len()` bytes at `offset` out of the buffer.
    fn get(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= BUFFER_BYTES, "buffer overrun");
        // SAFETY: in bounds (asserted); the device wrote these bytes before
        // the completion the caller polled, and writes nothing more to them.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
    }
}

impl Transport for RdmaTransport {
    async fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> Result<(), FabricError> {
        if ops.is_empty() {
            return Ok(());
        }
        if ops.len() > VERBS_PER_BATCH_MAX {
            return Err(FabricError::BatchTooLarge {
                what: format!("{} verbs, at most {VERBS_PER_BATCH_MAX}", ops.len()),
            });
        }
        let mut nodes: Vec<NodeId> = Vec::new();
        for op in ops {
            if !nodes.contains(&op.node) {
                nodes.push(op.node);
            }
        }
        // Locked in id order, so that batches over several nodes never wait
        // on each other in a cycle.
        nodes.sort_unstable();
        // Every node admits the batch's epoch before any verb is posted.
        let mut held = Vec::with_capacity(nodes.len());
        for &node in &nodes {
            let slot = self.slot(node).ok_or(FabricError::UnknownNode { node })?;
            let mut current = slot.current.lock().await;
            slot.ensure(
                &mut current,
                &self.inner.device,
                epoch,
                &self.inner.mandate,
                &self.inner.credential,
            )
            .await?;
            let conn = current
                .as_ref()
                .ok_or_else(|| disconnected(node, "not connected"))?;
            if epoch < conn.node_epoch {
                return Err(FabricError::StaleEpoch {
                    node,
                    client_epoch: epoch,
                    node_epoch: conn.node_epoch,
                });
            }
            held.push((node, current));
        }
        let mut steps: Vec<Option<Step>> = vec![None; ops.len()];
        let mut posted = Vec::with_capacity(held.len());
        for (node, current) in held.iter_mut() {
            let node = *node;
            let conn = current
                .as_mut()
                .ok_or_else(|| disconnected(node, "not connected"))?;
            let mine: Vec<(usize, &Op)> = ops.iter().enumerate().filter(|(_, op)| op.node == node).collect();
            let requests = match plan(conn, &mine, payload, &mut steps) {
                Ok(r) => r,
                Err(Missing) => {
                    conn.refresh_regions(node).await?;
                    plan(conn, &mine, payload, &mut steps).unwrap_or_else(|Missing| {
                        // Still unknown after asking: decided as the node would.
                        decide_missing(conn, &mine, payload, &mut steps)
                    })
                }
            };
            let last = post(node, conn, &requests);
            match last {
                Ok(last) => posted.push((node, last)),
                Err(e) => {
                    **current = None;
                    return Err(e);
                }
            }
        }
        for ((node, last), (_, current)) in posted.into_iter().zip(held.iter_mut()) {
            let Some(last) = last else { continue };
            let conn = current
                .as_ref()
                .ok_or_else(|| disconnected(node, "not connected"))?;
            if let Err(e) = wait(node, conn, last).await {
                **current = None;
                return Err(e);
            }
        }
        // Results, in op order.
        for (op, step) in ops.iter().zip(&steps) {
            let conn = held
                .iter()
                .find(|(n, _)| *n == op.node)
                .and_then(|(_, c)| c.as_ref())
                .ok_or_else(|| disconnected(op.node, "not connected"))?;
            match step {
                Some(Step::Posted(Posted::Read { at, len })) => {
                    conn.wire.buffer.get(*at, out.push_read(*len))
                }
                Some(Step::Posted(Posted::Atomic { at })) => {
                    let mut word = [0u8; ATOMIC_BYTES as usize];
                    conn.wire.buffer.get(*at, &mut word);
                    out.push(Ok(Outcome::Old(u64::from_le_bytes(word))));
                }
                Some(Step::Posted(Posted::Done)) => out.push(Ok(Outcome::Done)),
                Some(Step::EmptyRead) => {
                    out.push_read(0);
                }
                Some(Step::Decided(c)) => out.push(*c),
                None => unreachable!("every op was planned for its node"),
            }
        }
        Ok(())
    }
}
