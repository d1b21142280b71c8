//! The gateway: a tcp listener speaking RESP, a pool of keyspaces (one
//! index handle and owner id each) that connections borrow per burst of
//! pipelined requests, and the commands that need no index.
//!
//! A connection reads what the client sent, answers every complete
//! request in order (a pipeline is answered in one write), and borrows a
//! keyspace only while it runs index commands. Requests of one connection
//! never run concurrently, so replies keep their order; different
//! connections run on different keyspaces at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::auth::{TokenCheck, Verdict, FAILURES_MAX};
use crate::command::{self, Command, CommandQuery};
use crate::info::{self, Snapshot};
use crate::keyspace::{Counters, Keyspace, KeyspaceError};
use crate::metrics::{KeyspaceMeters, Meters};
use crate::resp::{decode_request, Decoded, Protocol, Reply};

/// Connections served at once: one more is told so and closed.
pub const CONNECTIONS_MAX: usize = 10_000;

/// How long a connection that must AUTH may take to do so: a client says
/// AUTH first, within a round trip; a socket that does not is closed, so
/// that unauthenticated connections cannot pile up.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes a connection that must AUTH may send before it has: an AUTH with
/// the longest password looked at fits; what does not is refused and the
/// connection closed, so that 10,000 unauthenticated connections hold 40 MiB
/// at most, not 512 KiB each.
pub const UNAUTHENTICATED_BYTES_MAX: usize = 4096;
/// How long a connection may stay silent before it is closed: longer than
/// a client pool keeps a spare connection idle between bursts, short
/// enough that vanished peers give their slots back.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Reply bytes buffered before they are written, within a pipeline.
const FLUSH_BYTES: usize = 64 * 1024;

/// Longest wait at shutdown for connections to finish the requests they
/// are running.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// How a gateway serves.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The index's name (INFO shows it).
    pub index: String,
    /// `btree` or `hash` (INFO shows it).
    pub kind: String,
    /// Whether a connection must AUTH before index commands.
    pub require_auth: bool,
}

/// Counters of the whole gateway.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) connections_received: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) index_commands: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) in_doubt: AtomicU64,
}

struct Shared {
    /// Why the gateway cannot serve index commands now (its cluster lease
    /// was lost and it is joining again), if it cannot: they, and PING, get
    /// a retryable error meanwhile.
    unavailable: Mutex<Option<String>>,
    settings: Settings,
    tokens: TokenCheck,
    pool: Arc<Pool>,
    totals: Totals,
    meters: Meters,
    connected: AtomicU64,
    next_client_id: AtomicU64,
    started: Instant,
}

/// A running gateway's pool and counters; [`Gateway::serve`] runs it.
pub struct Gateway {
    shared: Arc<Shared>,
    /// TLS on the RESP port ([`Gateway::with_tls`]).
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("index", &self.shared.settings.index)
            .field("keyspaces", &self.shared.pool.size)
            .finish()
    }
}

impl Gateway {
    /// A gateway over `keyspaces` (one per concurrent index operation),
    /// checking AUTH passwords with `tokens`.
    pub fn new(keyspaces: Vec<Keyspace>, tokens: TokenCheck, settings: Settings) -> Gateway {
        assert!(!keyspaces.is_empty(), "a gateway needs at least one keyspace");
        Gateway {
            shared: Arc::new(Shared {
                unavailable: Mutex::new(None),
                settings,
                tokens,
                pool: Arc::new(Pool::new(keyspaces)),
                totals: Totals::default(),
                meters: Meters::new(),
                connected: AtomicU64::new(0),
                next_client_id: AtomicU64::new(1),
                started: Instant::now(),
            }),
            tls: None,
        }
    }

    /// Serves RESP over TLS only (`redis-cli --tls`): each connection's
    /// handshake must finish within [`AUTH_TIMEOUT`], in its slot of the
    /// connection cap.
    pub fn with_tls(mut self, config: Arc<rustls::ServerConfig>) -> Gateway {
        self.tls = Some(tokio_rustls::TlsAcceptor::from(config));
        self
    }

    /// A handle on this gateway's availability and keyspaces, for whoever
    /// keeps its cluster membership (`kintsugi serve` joins again when its
    /// lease is lost).
    pub fn control(&self) -> GatewayControl {
        GatewayControl {
            shared: self.shared.clone(),
        }
    }

    /// Serves connections on `listener` until `shutdown` turns true; then
    /// lets each connection finish what it is running (at most
    /// [`SHUTDOWN_WAIT`]) and returns the keyspaces, for their handles to
    /// be closed.
    pub async fn serve(self, listener: TcpListener, mut shutdown: watch::Receiver<bool>) -> Vec<Keyspace> {
        let admitted = Arc::new(Semaphore::new(CONNECTIONS_MAX));
        let mut tasks = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.wait_for(|&s| s) => break,
            };
            // Reap finished connections so the set does not grow.
            while tasks.try_join_next().is_some() {}
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: keep serving the
                    // connections there are.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            self.shared
                .totals
                .connections_received
                .fetch_add(1, Ordering::Relaxed);
            self.shared.meters.received.increment(1);
            let Ok(permit) = admitted.clone().try_acquire_owned() else {
                self.shared
                    .totals
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                self.shared.meters.refused.increment(1);
                tasks.spawn(refuse(stream));
                continue;
            };
            let _ = stream.set_nodelay(true);
            let shared = self.shared.clone();
            let stop = shutdown.clone();
            let tls = self.tls.clone();
            tasks.spawn(async move {
                tracing::debug!(%peer, "connected");
                match tls {
                    None => Connection::new(shared).run(stream, stop).await,
                    Some(acceptor) => match tokio::time::timeout(AUTH_TIMEOUT, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => Connection::new(shared).run(stream, stop).await,
                        Ok(Err(e)) => {
                            shared.meters.closed_unheard.increment(1);
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        }
                        Err(_) => {
                            shared.meters.closed_unheard.increment(1);
                            tracing::debug!(%peer, "no TLS handshake in time");
                        }
                    },
                }
                drop(permit);
            });
        }
        let drained = tokio::time::timeout(SHUTDOWN_WAIT, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("connections still running after {SHUTDOWN_WAIT:?}: dropped");
            tasks.abort_all();
        }
        self.shared.pool.drain()
    }
}

/// Marks a running gateway unavailable and gives it new keyspaces.
#[derive(Clone)]
pub struct GatewayControl {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GatewayControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayControl").finish_non_exhaustive()
    }
}

impl GatewayControl {
    /// From now on index commands and PING get `-TRYAGAIN {why}` (a
    /// retryable error) until [`GatewayControl::replace`].
    pub fn unavailable(&self, why: String) {
        *lock(&self.shared.unavailable) = Some(why);
    }

    /// Why the gateway cannot serve, if it cannot.
    pub fn why_unavailable(&self) -> Option<String> {
        lock(&self.shared.unavailable).clone()
    }

    /// Takes `keyspaces` (as many as the pool holds) in place of the
    /// pool's, once every lent one is back, and serves again. Returns the
    /// old ones, for their handles to be dropped.
    pub async fn replace(&self, keyspaces: Vec<Keyspace>) -> Vec<Keyspace> {
        let pool = &self.shared.pool;
        assert_eq!(keyspaces.len(), pool.size, "a pool keeps its size");
        let Ok(all) = pool.permits.acquire_many(pool.size as u32).await else {
            unreachable!("the pool's semaphore is never closed");
        };
        let old = std::mem::replace(
            &mut *lock(&pool.free),
            keyspaces.into_iter().enumerate().collect(),
        );
        *lock(&pool.counters) = vec![Counters::default(); pool.size];
        drop(all);
        *lock(&self.shared.unavailable) = None;
        old.into_iter().map(|(_, k)| k).collect()
    }
}

async fn refuse(mut stream: TcpStream) {
    let mut out = BytesMut::new();
    Reply::err("max number of clients reached").encode(Protocol::Resp2, &mut out);
    let _ = stream.write_all(&out).await;
}

/// The keyspaces, lent one at a time.
struct Pool {
    size: usize,
    free: Mutex<Vec<(usize, Keyspace)>>,
    permits: Arc<Semaphore>,
    /// Each keyspace's counters as of its last return.
    counters: Mutex<Vec<Counters>>,
    /// Where what a keyspace counted while lent is exported.
    meters: KeyspaceMeters,
}

struct Lent {
    pool: Arc<Pool>,
    slot: usize,
    keyspace: Option<Keyspace>,
    _permit: OwnedSemaphorePermit,
}

impl Pool {
    fn new(keyspaces: Vec<Keyspace>) -> Pool {
        let size = keyspaces.len();
        Pool {
            size,
            free: Mutex::new(keyspaces.into_iter().enumerate().collect()),
            permits: Arc::new(Semaphore::new(size)),
            counters: Mutex::new(vec![Counters::default(); size]),
            meters: KeyspaceMeters::new(),
        }
    }

    async fn lend(self: &Arc<Self>) -> Lent {
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            unreachable!("the pool's semaphore is never closed");
        };
        let Some((slot, keyspace)) = lock(&self.free).pop() else {
            unreachable!("a permit means a free keyspace");
        };
        Lent {
            pool: self.clone(),
            slot,
            keyspace: Some(keyspace),
            _permit: permit,
        }
    }

    fn totals(&self) -> Counters {
        lock(&self.counters)
            .iter()
            .fold(Counters::default(), |a, &c| a + c)
    }

    fn drain(&self) -> Vec<Keyspace> {
        lock(&self.free).drain(..).map(|(_, k)| k).collect()
    }
}

impl Lent {
    fn get(&mut self) -> &mut Keyspace {
        match self.keyspace.as_mut() {
            Some(k) => k,
            None => unreachable!("a lent keyspace is taken only on drop"),
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(mut k) = self.keyspace.take() {
            let now = k.counters();
            let mut counters = lock(&self.pool.counters);
            self.pool.meters.add(&counters[self.slot], &now);
            counters[self.slot] = now;
            drop(counters);
            lock(&self.pool.free).push((self.slot, k));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain data: a panic elsewhere leaves it usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One client connection's state.
struct Connection {
    shared: Arc<Shared>,
    id: u64,
    protocol: Protocol,
    authed: bool,
    auth_failures: u32,
    name: Option<Bytes>,
}

/// What to do after a reply.
enum After {
    Continue,
    Close,
}

impl Connection {
    fn new(shared: Arc<Shared>) -> Connection {
        shared.connected.fetch_add(1, Ordering::Relaxed);
        shared.meters.connections.increment(1.0);
        Connection {
            id: shared.next_client_id.fetch_add(1, Ordering::Relaxed),
            protocol: Protocol::Resp2,
            authed: !shared.settings.require_auth,
            shared,
            auth_failures: 0,
            name: None,
        }
    }

    async fn run(mut self, mut stream: impl AsyncRead + AsyncWrite + Unpin, mut stop: watch::Receiver<bool>) {
        let opened = Instant::now();
        let mut input = BytesMut::with_capacity(16 * 1024);
        let mut out = BytesMut::with_capacity(16 * 1024);
        loop {
            let mut lent: Option<Lent> = None;
            let mut after = After::Continue;
            loop {
                match decode_request(&mut input) {
                    Decoded::Incomplete => break,
                    Decoded::Request(args) => {
                        after = self.request(&args, &mut lent, &mut out).await;
                        if out.len() >= FLUSH_BYTES {
                            // A client that does not read must not hold a
                            // keyspace while its replies wait.
                            lent = None;
                            if stream.write_all(&out).await.is_err() {
                                return;
                            }
                            out.clear();
                        }
                        if matches!(after, After::Close) {
                            break;
                        }
                    }
                    Decoded::Malformed(why) => {
                        Reply::err(format!("Protocol error: {why}")).encode(self.protocol, &mut out);
                        after = After::Close;
                        break;
                    }
                }
            }
            drop(lent);
            if !out.is_empty() {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
            if matches!(after, After::Close) || *stop.borrow() {
                return;
            }
            let (wait, why) = if self.authed {
                (IDLE_TIMEOUT, "idle timeout")
            } else {
                (AUTH_TIMEOUT.saturating_sub(opened.elapsed()), "no AUTH in time")
            };
            let read = tokio::select! {
                r = stream.read_buf(&mut input) => r,
                _ = async { stop.wait_for(|&s| s).await.map(|_| ()) } => return,
                () = tokio::time::sleep(wait) => {
                    self.shared.meters.closed_unheard.increment(1);
                    let _ = self.close_with(&mut stream, why).await;
                    return;
                }
            };
            match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if !self.authed && input.len() > UNAUTHENTICATED_BYTES_MAX {
                self.shared.meters.closed_unheard.increment(1);
                let _ = self
                    .close_with(&mut stream, "Protocol error: too much sent before AUTH")
                    .await;
                return;
            }
        }
    }

    /// Tells the client why, and ends the connection.
    async fn close_with(&self, stream: &mut (impl AsyncWrite + Unpin), why: &str) -> std::io::Result<()> {
        let mut out = BytesMut::new();
        Reply::err(why).encode(self.protocol, &mut out);
        stream.write_all(&out).await?;
        stream.shutdown().await
    }

    /// Runs one request and appends its reply to `out`.
    async fn request(&mut self, args: &[Bytes], lent: &mut Option<Lent>, out: &mut BytesMut) -> After {
        // Counted through `self.shared` at each use: a reference held
        // across the awaits below would keep `self` borrowed.
        self.shared.totals.commands.fetch_add(1, Ordering::Relaxed);
        let slot = args
            .first()
            .map_or(command::TABLE.len(), |name| Meters::slot(name));
        self.shared.meters.command(slot);
        let (reply, after) = match command::parse(args) {
            Err(reply) => (reply, After::Continue),
            Ok(cmd) if !self.authed && !cmd.allowed_before_auth() => (
                Reply::Error("NOAUTH Authentication required.".into()),
                After::Continue,
            ),
            Ok(cmd) if cmd.needs_index() || matches!(cmd, Command::Ping(_)) => {
                let unavailable = lock(&self.shared.unavailable).clone();
                if let Some(why) = unavailable {
                    (Reply::Error(format!("TRYAGAIN {why}")), After::Continue)
                } else if !cmd.needs_index() {
                    self.local_command(cmd).await
                } else {
                    self.index_command_lent(cmd, lent).await
                }
            }
            Ok(cmd) => self.local_command(cmd).await,
        };
        if matches!(reply, Reply::Error(_)) {
            self.shared.totals.errors.fetch_add(1, Ordering::Relaxed);
            self.shared.meters.error(slot);
        }
        reply.encode(self.protocol, out);
        after
    }

    /// An index command on a keyspace this connection borrows (and keeps
    /// for the rest of its pipeline).
    async fn index_command_lent(&mut self, cmd: Command, lent: &mut Option<Lent>) -> (Reply, After) {
        self.shared.totals.index_commands.fetch_add(1, Ordering::Relaxed);
        if lent.is_none() {
            *lent = Some(self.shared.pool.lend().await);
        }
        let Some(k) = lent.as_mut() else {
            unreachable!("lent just above");
        };
        (self.index_command(k.get(), cmd).await, After::Continue)
    }

    async fn index_command(&self, k: &mut Keyspace, cmd: Command) -> Reply {
        let done = match cmd {
            Command::Get(key) => k.get(key).await.map(|v| v.map_or(Reply::Nil, Reply::bulk)),
            Command::Set {
                key,
                value,
                condition,
            } => k
                .set(key, value, condition)
                .await
                .map(|wrote| if wrote { Reply::Ok } else { Reply::Nil }),
            Command::Del(keys) => k.del(keys).await.map(|n| Reply::Int(n as i64)),
            Command::Exists(keys) => k.exists(keys).await.map(|n| Reply::Int(n as i64)),
            Command::MGet(keys) => k.mget(keys).await.map(|vs| {
                Reply::Array(
                    vs.into_iter()
                        .map(|v| v.map_or(Reply::Nil, Reply::bulk))
                        .collect(),
                )
            }),
            Command::MSet(pairs) => k.mset(pairs).await.map(|()| Reply::Ok),
            Command::IncrBy(key, by) => k.incr_by(key, by).await.map(Reply::Int),
            Command::Scan {
                cursor,
                pattern,
                count,
            } => k
                .scan(cursor, count, pattern.as_deref())
                .await
                .map(|(next, keys)| {
                    Reply::Array(vec![
                        Reply::bulk(next.to_string()),
                        Reply::Array(keys.into_iter().map(Reply::bulk).collect()),
                    ])
                }),
            Command::DbSize => k.dbsize().await.map(|n| Reply::Int(n as i64)),
            other => unreachable!("{other:?} needs no index"),
        };
        done.unwrap_or_else(|e| self.index_error(e))
    }

    fn index_error(&self, e: KeyspaceError) -> Reply {
        match &e {
            KeyspaceError::Index(index::IndexError::InDoubt(cause)) => {
                self.shared.totals.in_doubt.fetch_add(1, Ordering::Relaxed);
                self.shared.meters.in_doubt.increment(1);
                tracing::warn!(error = %cause, "a write's outcome is unknown");
                Reply::err(format!(
                    "the write's outcome is unknown: it was cut off at its commit point ({cause}); read the keys to learn it"
                ))
            }
            KeyspaceError::Index(i) if matches!(i.fabric_cause(), Some(fabric::FabricError::LeaseUncertain)) => Reply::Error(
                "TRYAGAIN the gateway's cluster lease is not certain: no verb was issued; it joins again if the lease \
                 is lost"
                    .into(),
            ),
            // Past the handle's retries, and short of the commit point (an
            // in-doubt write is the arm above): a command to send again once
            // the node answers or the map moves past it.
            KeyspaceError::Index(i) if matches!(i.fabric_cause(), Some(fabric::FabricError::Disconnected { .. })) => {
                tracing::warn!(error = %e, "a memory node did not answer");
                Reply::Error(format!("TRYAGAIN a memory node did not answer: {e}"))
            }
            KeyspaceError::Index(_) | KeyspaceError::Corrupt(_) => {
                tracing::warn!(error = %e, "index operation failed");
                Reply::err(e)
            }
            _ => Reply::err(e),
        }
    }

    async fn local_command(&mut self, cmd: Command) -> (Reply, After) {
        let reply = match cmd {
            Command::Ping(None) => Reply::Simple("PONG".into()),
            Command::Ping(Some(m)) | Command::Echo(m) => Reply::Bulk(m),
            Command::Quit => return (Reply::Ok, After::Close),
            Command::Select(0) => Reply::Ok,
            Command::Select(_) => Reply::err("DB index is out of range"),
            Command::ConfigGet(patterns) => command::config_get(&patterns),
            Command::ClientSetName(name) => {
                self.name = Some(name);
                Reply::Ok
            }
            Command::ClientGetName => self.name.clone().map_or(Reply::Nil, Reply::Bulk),
            Command::ClientId => Reply::Int(self.id as i64),
            Command::Command(q) => command_reply(q),
            Command::Info(section) => Reply::bulk(info::render(&self.snapshot(), section.as_deref())),
            Command::Auth { user, password } => {
                return self.auth(user.as_deref(), &password).await;
            }
            Command::Hello {
                protover,
                auth,
                setname,
            } => {
                let protocol = match protover {
                    None | Some(2) => Protocol::Resp2,
                    Some(3) => Protocol::Resp3,
                    Some(_) => {
                        return (
                            Reply::Error("NOPROTO unsupported protocol version".into()),
                            After::Continue,
                        )
                    }
                };
                if let Some((user, password)) = auth {
                    let (reply, after) = self.auth(Some(&user), &password).await;
                    if matches!(reply, Reply::Error(_)) {
                        return (reply, after);
                    }
                }
                if !self.authed {
                    return (
                        Reply::Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into()),
                        After::Continue,
                    );
                }
                if let Some(name) = setname {
                    self.name = Some(name);
                }
                if protover.is_some() {
                    self.protocol = protocol;
                }
                Reply::Map(vec![
                    (Reply::bulk("server"), Reply::bulk("redis")),
                    (Reply::bulk("version"), Reply::bulk(info::REDIS_VERSION)),
                    (
                        Reply::bulk("proto"),
                        Reply::Int(if self.protocol == Protocol::Resp3 { 3 } else { 2 }),
                    ),
                    (Reply::bulk("id"), Reply::Int(self.id as i64)),
                    (Reply::bulk("mode"), Reply::bulk("standalone")),
                    (Reply::bulk("role"), Reply::bulk("master")),
                    (Reply::bulk("modules"), Reply::Array(Vec::new())),
                ])
            }
            other => unreachable!("{other:?} needs the index"),
        };
        (reply, After::Continue)
    }

    async fn auth(&mut self, user: Option<&[u8]>, password: &[u8]) -> (Reply, After) {
        let wrong = || Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into());
        let verdict = match user {
            Some(u) if u != b"default" => Ok(Verdict::Bad),
            _ => self.shared.tokens.check(password).await,
        };
        match verdict {
            Ok(Verdict::Good) => {
                self.authed = true;
                self.auth_failures = 0;
                (Reply::Ok, After::Continue)
            }
            Ok(Verdict::Bad) => {
                self.auth_failures += 1;
                tracing::warn!(
                    client = self.id,
                    failures = self.auth_failures,
                    "AUTH with a wrong token"
                );
                if self.auth_failures >= FAILURES_MAX {
                    (wrong(), After::Close)
                } else {
                    (wrong(), After::Continue)
                }
            }
            Err(e) => (
                Reply::err(format!(
                    "cannot check the token: the control plane did not answer ({e})"
                )),
                After::Continue,
            ),
        }
    }

    fn snapshot(&self) -> Snapshot {
        let t = &self.shared.totals;
        Snapshot {
            settings: self.shared.settings.clone(),
            uptime: self.shared.started.elapsed(),
            connected: self.shared.connected.load(Ordering::Relaxed),
            connections_received: t.connections_received.load(Ordering::Relaxed),
            connections_refused: t.connections_refused.load(Ordering::Relaxed),
            commands: t.commands.load(Ordering::Relaxed),
            index_commands: t.index_commands.load(Ordering::Relaxed),
            errors: t.errors.load(Ordering::Relaxed),
            in_doubt: t.in_doubt.load(Ordering::Relaxed),
            keyspaces: self.shared.pool.size,
            counters: self.shared.pool.totals(),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.connected.fetch_sub(1, Ordering::Relaxed);
        self.shared.meters.connections.decrement(1.0);
    }
}

fn command_reply(q: CommandQuery) -> Reply {
    match q {
        CommandQuery::All => Reply::Array(command::TABLE.iter().map(command::info).collect()),
        CommandQuery::Count => Reply::Int(command::TABLE.len() as i64),
        CommandQuery::Info(names) => Reply::Array(
            names
                .iter()
                .map(|n| command::lookup(n).map_or(Reply::Nil, command::info))
                .collect(),
        ),
        CommandQuery::Docs => Reply::Map(Vec::new()),
    }
}
