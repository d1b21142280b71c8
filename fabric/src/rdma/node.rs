//! The rdma memory-node server: registers the node's regions with the
//! device, connects a queue pair per client over the control channel, and
//! fences clients by revoking their queue pairs.
//!
//! One-sided verbs never reach this code: the device executes them against
//! the registered regions. What the node's CPU still does:
//!
//! - **Admission.** A client's `Hello` carries its map epoch; a client
//!   older than the node's epoch is refused (`Stale`), as is every client
//!   while the node's lease has lapsed (`Lapsed`): the same refusals a tcp
//!   node gives a batch, given at connection time.
//! - **Fencing.** When the node's epoch rises ([`MemoryNode::advance_epoch`]
//!   runs the hook this server installs) every client queue pair is moved
//!   to the error state before the call returns, so no verb of an older map
//!   runs after it; the clients are told (`Revoked`) and the hook waits, at
//!   most [`REVOKE_ACK_WAIT_MAX`], for each to revoke its own side, so that
//!   a client's next batch is refused at admission rather than lost in the
//!   fabric. A lapsed lease revokes every client the same way, found by a
//!   watcher every [`LEASE_POLL`]. Clients connect again with their map's
//!   epoch and are admitted or refused as above.
//! - **Lifetimes.** A client's queue pair lives as long as its control
//!   connection: a client that dies (its sockets close) leaves nothing.
//!
//! Per-verb checks (region, key, bounds, alignment) are the client's
//! (`transport::rdma`), against the table this server sends; the device
//! enforces the part that protects the node: a verb reaches only the bytes
//! of the region whose device key it carries.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::BasicQueuePair;

use super::control::{self, Admitted, RemoteRegion, ToClient, ToNode};
use super::verbs::{self, Device, Side};
use super::RdmaError;
use crate::addr::Epoch;
use crate::admission::{Gate, Holder};
use crate::memnode::MemoryNode;

/// Clients served at once (each holds a queue pair and a thread); more are
/// refused so that a flood of connections cannot exhaust the device.
pub const CLIENTS_MAX: usize = 256;
/// Longest a fence waits for the clients to confirm their revocation. A
/// client that does not answer in time (paused, gone) is fenced anyway by
/// its queue pair's state; it only learns of it later, when its batch fails.
pub const REVOKE_ACK_WAIT_MAX: Duration = Duration::from_secs(1);
/// How often the lease watcher looks whether the node's lease lapsed: the
/// window in which a node past its lease still serves rdma clients.
pub const LEASE_POLL: Duration = Duration::from_millis(1);
/// Longest a new control connection may take to say hello before it is
/// closed, so that idle sockets cannot hold the node's threads.
pub const HELLO_WAIT_MAX: Duration = Duration::from_secs(10);

/// A memory node served over rdma. Stops serving when dropped.
pub struct RdmaServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

// Field order is drop order: the clients' queue pairs, then the
// registrations, go before the node whose memory they reach.
struct Shared {
    clients: Mutex<HashMap<u64, Arc<Client>>>,
    regions: Mutex<Vec<Registered>>,
    node: Arc<MemoryNode>,
    device: Arc<Device>,
    next_client: AtomicU64,
    /// Connections being served (admitted or still saying hello): each
    /// holds a thread, so at most [`CLIENTS_MAX`] plus as many in hello.
    connections: AtomicUsize,
    stopping: AtomicBool,
}

struct Registered {
    remote: RemoteRegion,
    _mr: Arc<MemoryRegion>,
}

/// One connected client.
struct Client {
    /// Whom its credential admitted (`None` at an open gate).
    holder: Option<Holder>,
    qp: Mutex<BasicQueuePair>,
    _cq: Arc<BasicCompletionQueue>,
    stream: TcpStream,
    /// Serialises messages to the client: its own thread answers requests
    /// while a fence may be telling it of a revocation.
    sending: Mutex<()>,
    /// Set once this client's queue pair is revoked.
    revoked: AtomicBool,
    /// The client confirmed the revocation.
    acked: Mutex<bool>,
    ack: Condvar,
}

impl RdmaServer {
    /// Registers `node`'s regions with the device ([`verbs::DEVICE_ENV`]
    /// chooses it), listens for clients' control connections at `listen`
    /// (`host:port`; port 0 picks one) and serves them from threads of its
    /// own until dropped.
    pub fn start(node: Arc<MemoryNode>, listen: &str) -> Result<RdmaServer, RdmaError> {
        let device = Device::open()?;
        let listener = TcpListener::bind(listen)
            .map_err(|e| RdmaError::Io(format!("cannot listen at {listen}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| RdmaError::Io(format!("cannot read the listening address: {e}")))?;
        let shared = Arc::new(Shared {
            clients: Mutex::new(HashMap::new()),
            regions: Mutex::new(Vec::new()),
            node: node.clone(),
            device,
            next_client: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        });
        shared.register_new()?;
        let weak = Arc::downgrade(&shared);
        node.on_epoch_advance(move |epoch| {
            if let Some(s) = weak.upgrade() {
                s.revoke_all(epoch, false);
            }
        });
        let weak = Arc::downgrade(&shared);
        node.on_fence(move |gate| {
            if let Some(s) = weak.upgrade() {
                s.revoke_fenced(gate);
            }
        });
        let accept = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name(format!("rdma-accept-{}", node.id()))
            .spawn(move || accept_loop(listener, accept))
            .map_err(|e| RdmaError::Io(format!("cannot start a thread: {e}")))?;
        let watch = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name(format!("rdma-lease-{}", node.id()))
            .spawn(move || lease_watch(watch))
            .map_err(|e| RdmaError::Io(format!("cannot start a thread: {e}")))?;
        tracing::info!(node = node.id(), %addr, device = shared.device.name(), "serving over rdma");
        Ok(RdmaServer { shared, addr })
    }

    /// Where clients connect (the control channel's address).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The device serving it, for a report (says when it is emulated).
    pub fn device(&self) -> String {
        self.shared.device.describe()
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        lock(&self.shared.clients).len()
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        // Wakes the accept loop, which then sees `stopping`.
        let _ = TcpStream::connect(self.addr);
        for c in lock(&self.shared.clients).drain().map(|(_, c)| c) {
            let _ = verbs::revoke(&mut lock(&c.qp));
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Registers the regions the node took since the last call (the control
    /// plane places regions on a running node) and returns the table.
    fn register_new(&self) -> Result<Vec<RemoteRegion>, RdmaError> {
        let mut held = lock(&self.regions);
        for (d, addr) in self.node.mapped_regions() {
            match held.iter_mut().find(|r| r.remote.id == d.id) {
                // Placed here again under a new key: same bytes, same rkey.
                Some(r) => r.remote.key = d.key,
                None => {
                    let len = usize::try_from(d.size)
                        .map_err(|_| RdmaError::Device(format!("region {} too large", d.id)))?;
                    // SAFETY: `addr` is region `d.id`'s first byte in the
                    // node's mapping, which `self.node` keeps mapped for as
                    // long as this server (and so the registration) lives.
                    let mr = unsafe { self.device.register(addr, len, true) }?;
                    held.push(Registered {
                        remote: RemoteRegion {
                            id: d.id,
                            size: d.size,
                            key: d.key,
                            addr: addr as u64,
                            rkey: mr.rkey(),
                        },
                        _mr: mr,
                    });
                }
            }
        }
        Ok(held.iter().map(|r| r.remote).collect())
    }

    /// Revokes every client's queue pair (before returning), tells each, and
    /// waits for their confirmations up to [`REVOKE_ACK_WAIT_MAX`].
    fn revoke_all(&self, epoch: Epoch, lapsed: bool) {
        let clients: Vec<Arc<Client>> = lock(&self.clients).values().cloned().collect();
        for c in &clients {
            c.revoke();
        }
        let mut told = Vec::new();
        for c in clients {
            let msg = ToClient::Revoked { epoch, lapsed };
            if c.send(&msg).is_ok() {
                told.push(c);
            }
        }
        let deadline = Instant::now() + REVOKE_ACK_WAIT_MAX;
        for c in told {
            let mut acked = lock(&c.acked);
            while !*acked {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::warn!(
                        node = self.node.id(),
                        "a client did not confirm its revocation in time"
                    );
                    break;
                }
                acked = c
                    .ack
                    .wait_timeout(acked, left)
                    .map_or_else(|p| p.into_inner().0, |r| r.0);
            }
        }
        tracing::debug!(node = self.node.id(), epoch, lapsed, "rdma clients revoked");
    }

    /// Moves the queue pair of every client `gate` no longer admits to
    /// error (before returning: its verbs fail from then on) and forgets it.
    fn revoke_fenced(&self, gate: &Gate) {
        let fenced: Vec<u64> = lock(&self.clients)
            .iter()
            .filter(|(_, c)| gate.admits(c.holder).is_err())
            .map(|(&id, _)| id)
            .collect();
        for id in fenced {
            if let Some(c) = lock(&self.clients).remove(&id) {
                c.revoke();
                let holder = c.holder.map(|h| h.to_string()).unwrap_or_default();
                let _ = c.send(&ToClient::Refused(format!(
                    "{holder} is fenced: its lease expired"
                )));
                tracing::info!(node = self.node.id(), %holder, "fenced rdma client revoked");
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Some(c) = lock(&self.clients).remove(&id) {
            c.revoke();
        }
    }
}

impl Client {
    fn send(&self, msg: &ToClient) -> io::Result<()> {
        let _one = lock(&self.sending);
        control::send(&mut &self.stream, msg)
    }

    fn revoke(&self) {
        if !self.revoked.swap(true, Ordering::AcqRel) {
            if let Err(e) = verbs::revoke(&mut lock(&self.qp)) {
                tracing::error!(error = %e, "cannot revoke a client's queue pair");
            }
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Weak<Shared>) {
    for stream in listener.incoming() {
        let Some(s) = shared.upgrade() else { return };
        if s.stopping.load(Ordering::Acquire) {
            return;
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        if s.connections.fetch_add(1, Ordering::AcqRel) >= 2 * CLIENTS_MAX {
            s.connections.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                limit = 2 * CLIENTS_MAX,
                "control connection limit reached; closing a new one"
            );
            continue;
        }
        let weak = Arc::downgrade(&s);
        let spawned = std::thread::Builder::new()
            .name("rdma-client".into())
            .spawn(move || {
                serve_client(stream, &weak);
                if let Some(s) = weak.upgrade() {
                    s.connections.fetch_sub(1, Ordering::AcqRel);
                }
            });
        if let Err(e) = spawned {
            s.connections.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(error = %e, "cannot start a client thread");
        }
    }
}

fn lease_watch(shared: Weak<Shared>) {
    let mut lapsed = false;
    loop {
        std::thread::sleep(LEASE_POLL);
        let Some(s) = shared.upgrade() else { return };
        if s.stopping.load(Ordering::Acquire) {
            return;
        }
        let serving = s.node.serving();
        if !serving && !lapsed && !lock(&s.clients).is_empty() {
            tracing::warn!(node = s.node.id(), "lease lapsed: revoking every rdma client");
            s.revoke_all(s.node.epoch(), true);
        }
        lapsed = !serving;
    }
}

fn serve_client(stream: TcpStream, shared: &Weak<Shared>) {
    let peer = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
    match admit(stream, shared) {
        Ok(None) => {}
        Ok(Some((id, client))) => {
            let result = follow(&client, shared);
            if let Some(s) = shared.upgrade() {
                s.forget(id);
            }
            match result {
                Ok(()) => tracing::debug!(%peer, "rdma client left"),
                Err(e) => tracing::debug!(%peer, error = %e, "rdma client dropped"),
            }
        }
        Err(e) => tracing::warn!(%peer, error = %e, "rdma client refused"),
    }
}

/// Reads the client's `Hello` and connects it, or refuses it.
fn admit(mut stream: TcpStream, shared: &Weak<Shared>) -> io::Result<Option<(u64, Arc<Client>)>> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HELLO_WAIT_MAX))?;
    let Some(hello) = control::receive::<ToNode>(&mut stream)? else {
        return Ok(None);
    };
    stream.set_read_timeout(None)?;
    let Some(s) = shared.upgrade() else {
        return Ok(None);
    };
    // Before any queue pair, region table or rkey.
    let answer = {
        let gate = s.node.gate();
        control::answer_first(
            hello,
            &control::Door {
                gate: &gate,
                node_epoch: s.node.epoch(),
                serving: s.node.serving(),
                clients: lock(&s.clients).len(),
                clients_max: CLIENTS_MAX,
            },
        )
    };
    let Admitted {
        holder,
        epoch,
        qp: remote,
    } = match answer {
        Ok(a) => a,
        Err(refusal) => {
            control::send(&mut stream, &refusal)?;
            return Ok(None);
        }
    };
    let made = (|| {
        let regions = s.register_new()?;
        let cq = s.device.completion_queue(Side::Node)?;
        let (mut qp, local) = s.device.queue_pair(Side::Node, &cq)?;
        s.device.connect(&mut qp, &local, &remote)?;
        Ok::<_, RdmaError>((regions, cq, qp, local))
    })();
    let (regions, cq, qp, local) = match made {
        Ok(m) => m,
        Err(e) => {
            control::send(&mut stream, &ToClient::Refused(e.to_string()))?;
            return Ok(None);
        }
    };
    let client = Arc::new(Client {
        holder,
        qp: Mutex::new(qp),
        _cq: cq,
        stream: stream.try_clone()?,
        sending: Mutex::new(()),
        revoked: AtomicBool::new(false),
        acked: Mutex::new(false),
        ack: Condvar::new(),
    });
    let id = s.next_client.fetch_add(1, Ordering::Relaxed);
    // Listed before the epoch and the lease are read again: a fence or a
    // lapse from here on revokes this client too.
    lock(&s.clients).insert(id, client.clone());
    let epoch_now = s.node.epoch();
    if epoch < epoch_now {
        s.forget(id);
        control::send(
            &mut stream,
            &ToClient::Stale {
                node_epoch: epoch_now,
            },
        )?;
        return Ok(None);
    }
    // Likewise a fence taken before this client was listed.
    let fenced = s.node.gate().admits(holder);
    if let Err(why) = fenced {
        s.forget(id);
        control::send(&mut stream, &ToClient::Refused(why.to_string()))?;
        return Ok(None);
    }
    // Likewise a lapse the watcher acted on before this client was listed.
    if !s.node.serving() {
        s.forget(id);
        control::send(&mut stream, &ToClient::Lapsed)?;
        return Ok(None);
    }
    let welcome = ToClient::Welcome {
        node: s.node.id(),
        epoch: epoch_now,
        qp: local,
        regions,
    };
    if let Err(e) = client.send(&welcome) {
        s.forget(id);
        return Err(e);
    }
    Ok(Some((id, client)))
}

/// Serves a connected client's requests until it leaves or is revoked.
fn follow(client: &Client, shared: &Weak<Shared>) -> io::Result<()> {
    let mut stream = &client.stream;
    loop {
        match control::receive::<ToNode>(&mut stream)? {
            None => return Ok(()),
            Some(ToNode::Revoked) => {
                *lock(&client.acked) = true;
                client.ack.notify_all();
                return Ok(());
            }
            Some(ToNode::Regions) => {
                let Some(s) = shared.upgrade() else { return Ok(()) };
                let reply = match s.register_new() {
                    Ok(regions) => ToClient::Regions(regions),
                    Err(e) => ToClient::Refused(e.to_string()),
                };
                client.send(&reply)?;
            }
            Some(ToNode::Hello { .. }) => {
                client.send(&ToClient::Refused("already connected".into()))?;
                return Ok(());
            }
        }
    }
}
