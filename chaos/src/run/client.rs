//! A client process of a chaos run (`kintsugi chaos client`): registers
//! with the run's control plane for its owner ids and keeps its lease
//! (exiting with an error if the control plane expires it), attaches to the
//! memory nodes, opens the index the runner loaded, says `ready`, waits for
//! `go <t0>` on stdin, then runs the workload on its threads until the
//! duration is over.
//!
//! What it tells the runner, on stdout, one line each:
//! - `ready` once every thread has opened the index;
//! - `b <bucket> <ops>`: ops a thread completed in a bucket, when the
//!   thread moves past it (several lines of one bucket add up);
//! - `done <ops> <repairs>` at the end (repairs: locks of others repaired);
//!   `blocked <text>` if an op gave up on a lock nobody released, `error
//!   <text>` if it failed otherwise (and exit 1).
//!
//! After `go`, a `die` line on stdin (a kill-client fault) makes the
//! client die right after its next CAS that swaps, that is mid-operation
//! with a lock just taken (a CAS that loses a lock race leaves it armed): the thread whose CAS it was SIGKILLs its own process, so
//! nothing is flushed and no destructor runs, as with `kill -9`. A
//! `pause` line (a pause-client fault) makes the thread whose next
//! swapping CAS it is SIGSTOP its own process right after that CAS's batch; the runner's
//! SIGCONT resumes it mid-operation, its lock possibly repaired by then.
//!
//! Every acknowledged write goes to `history-c<client>-t<thread>.jsonl`
//! (`history::Write` per line), flushed before the bucket's line is
//! printed: a write the runner counted is in the history.

use std::io::{BufRead, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::{BaseTransport, Client, FaultPlan, Faulty};
use harness::{ClientLine, Memory, RunnerLine};
use index::btree::BTree;
use index::hash::HashTable;
use index::IndexError;
use txn::{Heap, TxConfig};

use cluster::Lease;
use fabric::Mandate;

use super::control;
use super::{unix_ns, Endpoint, RunError, RunSpec, REGION};
use crate::experiment::IndexKind;
use crate::history::{Write, WriteKind};
use workload::driver::{DriveError, IndexClient};
use workload::{Keyspace, Op, WorkloadSpec};

/// A thread's fault injector, shared with the stdin listener that arms it.
type Faults = Arc<Mutex<Vec<Arc<Faulty<BaseTransport>>>>>;
/// The common start, once the runner says `go`.
type Go = Arc<(Mutex<Option<u64>>, std::sync::Condvar)>;
/// A client thread: its ops and repairs, or why it stopped.
type ThreadHandle = JoinHandle<Result<(u64, u64), RunError>>;
/// The process's stdout, shared by its threads: one line at a time.
type Stdout = Arc<Mutex<std::io::Stdout>>;

/// Runs client `client` of `spec` (the body of `kintsugi chaos client`);
/// `token` is the control plane's bearer token, if the run has one.
pub fn main(spec_path: &Path, client: u32, token: Option<String>) -> Result<(), RunError> {
    let spec = RunSpec::read(spec_path)?;
    if client >= spec.experiment.cluster.clients {
        return Err(RunError::Client(format!(
            "client {client} is not one of the run's {}",
            spec.experiment.cluster.clients
        )));
    }
    let stdout: Stdout = Arc::new(Mutex::new(std::io::stdout()));
    let (first_owner, keeper) = take_owner_ids(&spec, client, token, &stdout)?;
    let validity = keeper.as_ref().map(Lease::validity);
    let go: Go = Arc::default();
    let faults: Faults = Arc::default();
    let reclaims = keeper.as_ref().map(Lease::reclaims);
    let lease = Leased { validity, reclaims };
    let (handles, opened) = start_threads(&spec, client, first_owner, lease, &go, &faults, &stdout);
    await_opened(&opened, spec.experiment.cluster.threads_per_client)?;
    say(&stdout, &ClientLine::Ready)?;
    let t0_ns = read_go()?;
    {
        let (lock, cv) = &*go;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = Some(t0_ns);
        cv.notify_all();
    }
    listen_for_faults(faults);
    let (ops, repairs) = join_threads(handles, &stdout)?;
    say(&stdout, &ClientLine::Done { ops, repairs })
}

/// The client's owner ids: leased from the control plane (kept on a
/// thread; lost, the client stops at once, since its ids may go to
/// another), or laid out after the loader's without one.
fn take_owner_ids(
    spec: &RunSpec,
    client: u32,
    token: Option<String>,
    stdout: &Stdout,
) -> Result<(u16, Option<Lease>), RunError> {
    let threads = u16::try_from(spec.experiment.cluster.threads_per_client)
        .map_err(|_| RunError::Client("more threads per client than owner ids".into()))?;
    let Some(endpoint) = &spec.control else {
        return Ok((spec.first_client_owner + (client as u16) * threads, None));
    };
    let token = token.ok_or_else(|| {
        RunError::Client(format!(
            "the run has a control plane at {endpoint}, but no bearer token was given"
        ))
    })?;
    let out = stdout.clone();
    let keeper = Lease::take(
        std::slice::from_ref(endpoint),
        &token,
        &control::client_name(client),
        threads,
        Some(spec.experiment.cluster.client_lease),
        move |why| {
            let _ = say(
                &out,
                &ClientLine::Error(format!("control-plane lease lost: {why}")),
            );
            std::process::exit(1);
        },
    )
    .map_err(|e| RunError::Control(format!("taking owner ids: {e}")))?;
    Ok((keeper.owners().first, Some(keeper)))
}

/// What the threads of a client with a control-plane lease act under.
#[derive(Clone, Default)]
struct Leased {
    /// Whether the lease certainly holds.
    validity: Option<std::sync::Arc<Mandate>>,
    /// The reclaims its transaction clients follow (`txn::quiesce`).
    reclaims: Option<std::sync::Arc<txn::ReclaimView>>,
}

/// Starts one thread per index client: each opens the index (and says so
/// on `opened`), waits for the common start, then runs until the duration
/// is over. A victim's threads get a fault injector each.
fn start_threads(
    spec: &RunSpec,
    client: u32,
    first_owner: u16,
    lease: Leased,
    go: &Go,
    faults: &Faults,
    stdout: &Stdout,
) -> (Vec<ThreadHandle>, Receiver<Option<String>>) {
    let threads = spec.experiment.cluster.threads_per_client;
    // Killed or paused: either right after a CAS, so with a lock just taken.
    let victim = spec.experiment.faults.iter().any(|f| f.client == client);
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let handles = (0..threads)
        .map(|t| {
            let (spec, stdout, opened, go) = (spec.clone(), stdout.clone(), opened_tx.clone(), go.clone());
            let (lease, faults) = (lease.clone(), faults.clone());
            let global = client * threads + t;
            std::thread::spawn(move || {
                let rt = super::runtime()?;
                let opened_client = rt.block_on(open_thread(&spec, first_owner + t as u16, victim, &faults));
                let _ = opened.send(opened_client.as_ref().err().map(ToString::to_string));
                let (mut index, fault) = opened_client?;
                if let Some(view) = &lease.reclaims {
                    index.follow_reclaims(view.clone());
                }
                let t0_ns = wait_for_go(&go);
                let me = Thread {
                    client,
                    global,
                    fault: fault.as_deref(),
                    lease: lease.validity.as_deref(),
                };
                let ops = rt.block_on(run_thread(&spec, me, &mut index, t0_ns, &stdout))?;
                Ok((ops, index.tx_stats().repairs))
            })
        })
        .collect();
    (handles, opened_rx)
}
/// Opens the index for one thread, behind a fault injector (kept in
/// `faults` for the stdin listener) if the client is a victim.
async fn open_thread(
    spec: &RunSpec,
    owner: u16,
    victim: bool,
    faults: &Faults,
) -> Result<(IndexClient, Option<Arc<Faulty<BaseTransport>>>), RunError> {
    let mut fabric = connect(&spec.endpoint, spec.data_credential()?).await?;
    let mut fault = None;
    if victim {
        let (t, handle) = fabric.transport().clone().with_faults(FaultPlan::default());
        fabric = Client::new(fabric.map().clone(), t);
        faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle.clone());
        fault = Some(handle);
    }
    Ok((open_on(fabric, spec, owner).await?, fault))
}

/// Blocks until the runner's `go` has been read; returns the start.
fn wait_for_go(go: &Go) -> u64 {
    let (lock, cv) = &**go;
    let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
    while g.is_none() {
        g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    g.unwrap_or(0)
}

/// Waits until every thread opened the index; the first failure is the
/// client's.
fn await_opened(opened: &Receiver<Option<String>>, threads: u32) -> Result<(), RunError> {
    for _ in 0..threads {
        match opened.recv() {
            Ok(None) => {}
            Ok(Some(e)) => return Err(RunError::Client(format!("cannot open the index: {e}"))),
            Err(_) => {
                return Err(RunError::Client(
                    "a client thread ended before it opened the index".into(),
                ))
            }
        }
    }
    Ok(())
}

/// Reads the runner's `go UNIX_NS` from stdin.
fn read_go() -> Result<u64, RunError> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|source| RunError::Io {
            what: "cannot read stdin".into(),
            source,
        })?;
    match line.parse::<RunnerLine>() {
        Ok(RunnerLine::Go { t0_ns }) => Ok(t0_ns),
        Ok(other) => Err(RunError::Client(format!(
            "expected `go UNIX_NS` on stdin first, got `{other}`"
        ))),
        Err(source) => Err(RunError::Line {
            from: "the runner, on stdin".into(),
            source,
        }),
    }
}

/// Arms the faults the runner asks for, on a thread reading stdin.
fn listen_for_faults(faults: Faults) {
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let faults = faults.lock().unwrap_or_else(|p| p.into_inner());
            match line.parse::<RunnerLine>() {
                Ok(RunnerLine::Die) => faults.iter().for_each(|f| f.arm_crash_after_next_cas()),
                Ok(RunnerLine::Pause) => {
                    // The first thread to take a lock stops the process (all
                    // of it, as SIGSTOP from outside would); the runner
                    // sends SIGCONT. Only once: the others' hooks then pass.
                    let fired = Arc::new(AtomicBool::new(false));
                    for f in faults.iter() {
                        let fired = fired.clone();
                        f.arm_after_next_cas(move || {
                            if !fired.swap(true, Ordering::SeqCst) {
                                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
                            }
                        });
                    }
                }
                Ok(RunnerLine::Go { .. }) | Err(_) => {
                    tracing::warn!(line = %line.trim(), "ignored: not a fault line");
                }
            }
        }
    });
}

/// Joins the threads; the first that failed says why on stdout
/// (`blocked` or `error`) and fails the client.
fn join_threads(handles: Vec<ThreadHandle>, stdout: &Stdout) -> Result<(u64, u64), RunError> {
    let (mut ops, mut repairs) = (0, 0);
    for h in handles {
        match h.join() {
            Ok(Ok((n, r))) => {
                ops += n;
                repairs += r;
            }
            Ok(Err(e)) => {
                let line = match &e {
                    RunError::Blocked(_) => ClientLine::Blocked(e.to_string()),
                    _ => ClientLine::Error(e.to_string()),
                };
                let _ = say(stdout, &line);
                return Err(e);
            }
            Err(_) => return Err(RunError::Client("a client thread panicked".into())),
        }
    }
    Ok((ops, repairs))
}

fn say(stdout: &Mutex<std::io::Stdout>, line: &ClientLine) -> Result<(), RunError> {
    let mut out = stdout.lock().unwrap_or_else(|p| p.into_inner());
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .map_err(|source| RunError::Io {
            what: "cannot write to the runner".into(),
            source,
        })
}

/// A fabric client of the run's memory nodes (the first is the primary).
/// `credential`: what tcp nodes admit (the run's secret's: see
/// `Procs::credential`).
pub(super) async fn connect(
    endpoint: &Endpoint,
    credential: Option<fabric::Credential>,
) -> Result<Client, RunError> {
    let memory = match endpoint {
        Endpoint::Shm(paths) => Memory::attach_shm(paths)?,
        Endpoint::Tcp(addrs) => Memory::connect_tcp_with(addrs, credential)?,
    };
    Ok(memory.client().await?)
}

/// The index of the run, opened as `owner`.
pub(super) async fn open(spec: &RunSpec, owner: u16) -> Result<IndexClient, RunError> {
    open_on(
        connect(&spec.endpoint, spec.data_credential()?).await?,
        spec,
        owner,
    )
    .await
}

/// The index of the run, opened as `owner` over `fabric`.
async fn open_on(mut fabric: Client, spec: &RunSpec, owner: u16) -> Result<IndexClient, RunError> {
    let heap = Heap::open(&mut fabric, REGION)
        .await
        .map_err(RunError::index("cannot open the heap"))?;
    let config = TxConfig::default();
    let index = RunError::index("cannot open the index");
    Ok(match spec.experiment.index.kind {
        IndexKind::Btree => IndexClient::BTree(Box::new(
            BTree::open_with(fabric, heap, owner, config)
                .await
                .map_err(index)?,
        )),
        IndexKind::Hash => IndexClient::Hash(Box::new(
            HashTable::open(fabric, heap, owner, config)
                .await
                .map_err(index)?,
        )),
    })
}

/// Who a client thread is, and what may stop it.
struct Thread<'a> {
    /// Its client process.
    client: u32,
    /// Its index among all client threads of the run.
    global: u32,
    /// Its fault injector, if its client is a victim.
    fault: Option<&'a Faulty<BaseTransport>>,
    /// Its client's control-plane lease, if the run has a control plane.
    lease: Option<&'a Mandate>,
}

/// One thread's run: ops until the deadline, counted per bucket, writes
/// to the history.
async fn run_thread(
    spec: &RunSpec,
    me: Thread<'_>,
    index: &mut IndexClient,
    t0_ns: u64,
    stdout: &Mutex<std::io::Stdout>,
) -> Result<u64, RunError> {
    // No op starts, and none is acknowledged, once the control-plane lease
    // may have lapsed (it cannot be renewed, say): the owner id may be
    // someone else's by then.
    let holds = || me.lease.is_none_or(Mandate::holds);
    let lapsed =
        || RunError::Client("control-plane lease lapsed: this client's owner ids may be another's".into());
    let mut generator = op_stream(spec, me.global)?;
    let mut history = History::create(&history_path(&spec.out_dir, me.client, me.global))?;
    // The common start, on this process's monotonic clock.
    let behind = Duration::from_nanos(unix_ns().saturating_sub(t0_ns));
    let t0 = Instant::now().checked_sub(behind).unwrap_or_else(Instant::now);
    let deadline = t0 + spec.experiment.duration;
    let mut buckets = Buckets::new(t0, spec.bucket_us);
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if let Some(line) = buckets.at(now) {
            // A write the runner counts is in the history.
            history.flush()?;
            say(stdout, &line)?;
        }
        let op = generator.next_op();
        if !holds() {
            return Err(lapsed());
        }
        let start_ns = unix_ns();
        let wrote = run_op(index, op, me.fault).await?;
        // An update of an absent key writes nothing.
        let write = match op {
            _ if !wrote => None,
            Op::Insert { key, value } => Some((WriteKind::Insert, key, value)),
            Op::Update { key, value } => Some((WriteKind::Update, key, value)),
            Op::Read { .. } | Op::Scan { .. } => None,
        };
        if let Some((kind, key, value)) = write {
            if !holds() {
                return Err(lapsed());
            }
            history.record(&Write {
                client: me.client,
                thread: me.global,
                seq: generator.generated(),
                kind,
                key,
                value,
                start_ns,
                ack_ns: unix_ns(),
            })?;
        }
        buckets.count();
    }
    // A dtx client's last write's release, before the process exits.
    index
        .flush()
        .await
        .map_err(RunError::index("cannot send the last release"))?;
    history.flush()?;
    if let Some(line) = buckets.last() {
        say(stdout, &line)?;
    }
    Ok(buckets.total)
}

/// The op stream of thread `global`: its lane of the run's keyspace.
fn op_stream(spec: &RunSpec, global: u32) -> Result<workload::OpGenerator, RunError> {
    let e = &spec.experiment;
    let w = e.workload()?;
    let lanes = u64::from(e.cluster.clients * e.cluster.threads_per_client);
    let spec = WorkloadSpec {
        workload: w.workload,
        distribution: w.distribution,
        records: w.keys,
        seed: e.seed,
    };
    let keyspace =
        Keyspace::in_lane(spec, u64::from(global), lanes).map_err(RunError::index("the workload"))?;
    Ok(keyspace.generator(global as usize))
}

/// Runs one op; an injected crash kills the process here, mid-operation,
/// as `kill -9` would.
async fn run_op(
    index: &mut IndexClient,
    op: Op,
    fault: Option<&Faulty<BaseTransport>>,
) -> Result<bool, RunError> {
    match index.run(op).await {
        Ok(wrote) => Ok(wrote),
        Err(e) if fault.is_some_and(|f| f.crashed().is_some()) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
            Err(RunError::Client(format!("injected crash: {e}")))
        }
        Err(e @ DriveError::Index(IndexError::Blocked(_) | IndexError::TooManyAttempts(_))) => {
            Err(RunError::Blocked(format!("{op:?} failed: {e}")))
        }
        Err(e) => Err(RunError::index(format!("{op:?} failed"))(e)),
    }
}

/// A thread's acknowledged writes, one JSON line each.
struct History {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
}

impl History {
    fn create(path: &Path) -> Result<History, RunError> {
        let file = std::fs::File::create(path).map_err(|e| RunError::io(path, e))?;
        Ok(History {
            path: path.to_owned(),
            out: BufWriter::new(file),
        })
    }

    fn record(&mut self, w: &Write) -> Result<(), RunError> {
        serde_json::to_writer(&mut self.out, w).map_err(RunError::json(self.path.display().to_string()))?;
        self.out.write_all(b"\n").map_err(|e| RunError::io(&self.path, e))
    }

    fn flush(&mut self) -> Result<(), RunError> {
        self.out.flush().map_err(|e| RunError::io(&self.path, e))
    }
}

/// Ops counted per timeline bucket since the common start.
struct Buckets {
    t0: Instant,
    bucket_ns: u128,
    bucket: u64,
    in_bucket: u64,
    total: u64,
}

impl Buckets {
    fn new(t0: Instant, bucket_us: u64) -> Buckets {
        Buckets {
            t0,
            bucket_ns: u128::from(bucket_us) * 1000,
            bucket: 0,
            in_bucket: 0,
            total: 0,
        }
    }

    /// Moves to the bucket of `now`; the line for the one left, if it
    /// counted any op.
    fn at(&mut self, now: Instant) -> Option<ClientLine> {
        let b = (now.duration_since(self.t0).as_nanos() / self.bucket_ns) as u64;
        if b == self.bucket {
            return None;
        }
        let line = self.last();
        self.bucket = b;
        self.in_bucket = 0;
        line
    }

    fn count(&mut self) {
        self.in_bucket += 1;
        self.total += 1;
    }

    /// The line for the current bucket, if it counted any op.
    fn last(&self) -> Option<ClientLine> {
        (self.in_bucket > 0).then_some(ClientLine::Bucket {
            bucket: self.bucket,
            ops: self.in_bucket,
        })
    }
}

/// Where thread `global` of `client` writes its history.
pub(super) fn history_path(dir: &Path, client: u32, global: u32) -> PathBuf {
    dir.join(format!("history-c{client}-t{global}.jsonl"))
}
