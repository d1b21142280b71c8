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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabric::{BaseTransport, Client, FaultPlan, Faulty, ShmTransport, TcpTransport};
use index::btree::BTree;
use index::hash::HashTable;
use index::IndexError;
use txn::{Heap, TxConfig};

use super::control::{self, LeaseKeeper, Validity};
use super::{unix_ns, Endpoint, RunError, RunSpec, REGION};
use crate::experiment::IndexKind;
use crate::history::{Write, WriteKind};
use workload::driver::{DriveError, IndexClient};
use workload::{Keyspace, Op, WorkloadSpec};

/// Runs client `client` of `spec` (the body of `kintsugi chaos client`);
/// `token` is the control plane's bearer token, if the run has one.
pub fn main(spec_path: &Path, client: u32, token: Option<String>) -> Result<(), RunError> {
    let spec = RunSpec::read(spec_path)?;
    let threads = spec.experiment.cluster.threads_per_client;
    if client >= spec.experiment.cluster.clients {
        return Err(RunError::Client(format!(
            "client {client} is not one of the run's {}",
            spec.experiment.cluster.clients
        )));
    }
    let stdout = Arc::new(Mutex::new(std::io::stdout()));
    let threads_u16 = u16::try_from(threads).map_err(|e| RunError::Client(e.to_string()))?;
    let (first_owner, keeper) = match &spec.control {
        None => (spec.first_client_owner + (client as u16) * threads_u16, None),
        Some(endpoint) => {
            let token = token.ok_or_else(|| {
                RunError::Client(format!(
                    "the run has a control plane at {endpoint}, but no bearer token was given"
                ))
            })?;
            // Expired by the control plane: its owner ids may go to another
            // client, so this one stops at once.
            let out = stdout.clone();
            let (owners, keeper) = control::lease(
                endpoint,
                &token,
                &control::client_name(client),
                threads_u16,
                spec.experiment.cluster.client_lease,
                move |why| {
                    let _ = say(&out, &format!("error control-plane lease lost: {why}"));
                    std::process::exit(1);
                },
            )?;
            (owners.first, Some(keeper))
        }
    };
    let validity = keeper.as_ref().map(LeaseKeeper::validity);
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let go: Arc<(Mutex<Option<u64>>, std::sync::Condvar)> = Arc::default();
    // Killed or paused: either right after a CAS, so with a lock just taken.
    let victim = spec.experiment.faults.iter().any(|f| f.client == client);
    let faults: Arc<Mutex<Vec<Arc<Faulty<BaseTransport>>>>> = Arc::default();
    let mut handles = Vec::new();
    for t in 0..threads {
        let (spec, stdout, opened, go) = (spec.clone(), stdout.clone(), opened_tx.clone(), go.clone());
        let validity = validity.clone();
        let faults = faults.clone();
        let global = client * threads + t;
        handles.push(std::thread::spawn(move || -> Result<(u64, u64), RunError> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| RunError::Client(format!("cannot start a runtime: {e}")))?;
            let mut fault = None;
            let opened_client = rt.block_on(async {
                let mut fabric = connect(&spec.endpoint).await?;
                if victim {
                    let (t, handle) = fabric.transport().clone().with_faults(FaultPlan::default());
                    fabric = Client::new(fabric.map().clone(), t);
                    faults
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(handle.clone());
                    fault = Some(handle);
                }
                open_on(fabric, &spec, first_owner + t as u16).await
            });
            let _ = opened.send(opened_client.as_ref().err().map(ToString::to_string));
            let mut index = opened_client?;
            let t0_ns = {
                let (lock, cv) = &*go;
                let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
                while g.is_none() {
                    g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
                }
                g.unwrap_or(0)
            };
            let me = Thread {
                client,
                global,
                fault: fault.as_deref(),
                lease: validity.as_ref(),
            };
            let ops = rt.block_on(run_thread(&spec, me, &mut index, t0_ns, &stdout))?;
            Ok((ops, index.tx_stats().repairs))
        }));
    }
    drop(opened_tx);
    for _ in 0..threads {
        match opened_rx.recv() {
            Ok(None) => {}
            Ok(Some(e)) => return Err(RunError::Client(format!("cannot open the index: {e}"))),
            Err(_) => {
                return Err(RunError::Client(
                    "a client thread ended before it opened the index".into(),
                ))
            }
        }
    }
    say(&stdout, "ready")?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| RunError::Client(format!("cannot read stdin: {e}")))?;
    let t0_ns = line
        .trim()
        .strip_prefix("go ")
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| {
            RunError::Client(format!("expected `go <unix ns>` on stdin, got {:?}", line.trim()))
        })?;
    {
        let (lock, cv) = &*go;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = Some(t0_ns);
        cv.notify_all();
    }
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let faults = faults.lock().unwrap_or_else(|p| p.into_inner());
            match line.trim() {
                "die" => faults.iter().for_each(|f| f.arm_crash_after_next_cas()),
                "pause" => {
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
                _ => {}
            }
        }
    });
    let (mut ops, mut repairs) = (0, 0);
    for h in handles {
        match h.join() {
            Ok(Ok((n, r))) => {
                ops += n;
                repairs += r;
            }
            Ok(Err(e)) => {
                let word = if matches!(e, RunError::Blocked(_)) {
                    "blocked"
                } else {
                    "error"
                };
                let _ = say(&stdout, &format!("{word} {e}"));
                return Err(e);
            }
            Err(_) => return Err(RunError::Client("a client thread panicked".into())),
        }
    }
    say(&stdout, &format!("done {ops} {repairs}"))
}

fn say(stdout: &Mutex<std::io::Stdout>, line: &str) -> Result<(), RunError> {
    let mut out = stdout.lock().unwrap_or_else(|p| p.into_inner());
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .map_err(|e| RunError::Client(format!("cannot write to the runner: {e}")))
}

/// A fabric client of the run's memory nodes (the first is the primary).
pub(super) async fn connect(endpoint: &Endpoint) -> Result<Client, RunError> {
    let fabric = |e: String| RunError::Client(format!("cannot reach the memory nodes: {e}"));
    match endpoint {
        Endpoint::Shm(paths) => {
            let (t, map) = ShmTransport::attach(paths).map_err(|e| fabric(e.to_string()))?;
            Ok(Client::new(map, t.into()))
        }
        Endpoint::Tcp(addrs) => {
            let (t, map) = TcpTransport::discover(addrs)
                .await
                .map_err(|e| fabric(e.to_string()))?;
            Ok(Client::new(map, t.into()))
        }
    }
}

/// The index of the run, opened as `owner`.
pub(super) async fn open(spec: &RunSpec, owner: u16) -> Result<IndexClient, RunError> {
    open_on(connect(&spec.endpoint).await?, spec, owner).await
}

/// The index of the run, opened as `owner` over `fabric`.
async fn open_on(mut fabric: Client, spec: &RunSpec, owner: u16) -> Result<IndexClient, RunError> {
    let heap = Heap::open(&mut fabric, REGION)
        .await
        .map_err(|e| RunError::Client(format!("cannot open the heap: {e}")))?;
    let config = TxConfig::default();
    let index = |e: IndexError| RunError::Client(format!("cannot open the index: {e}"));
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
    lease: Option<&'a Validity>,
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
    let Thread {
        client,
        global,
        fault,
        lease,
    } = me;
    // No op starts, and none is acknowledged, once the control-plane lease
    // may have lapsed (it cannot be renewed, say): the owner id may be
    // someone else's by then.
    let lapsed =
        || RunError::Client("control-plane lease lapsed: this client's owner ids may be another's".into());
    let holds = || lease.is_none_or(Validity::holds);
    let e = &spec.experiment;
    let w = e.workload().map_err(|e| RunError::Client(e.to_string()))?;
    let lanes = u64::from(e.cluster.clients * e.cluster.threads_per_client);
    let keyspace = Keyspace::in_lane(
        WorkloadSpec {
            workload: w.workload,
            distribution: w.distribution,
            records: w.keys,
            seed: e.seed,
        },
        u64::from(global),
        lanes,
    )
    .map_err(|e| RunError::Client(e.to_string()))?;
    let mut generator = keyspace.generator(global as usize);
    let path = history_path(&spec.out_dir, client, global);
    let file = std::fs::File::create(&path)
        .map_err(|e| RunError::Client(format!("cannot create {}: {e}", path.display())))?;
    let mut history = BufWriter::new(file);
    let io = |e: std::io::Error| RunError::Client(format!("cannot write {}: {e}", path.display()));

    // The common start, on this process's monotonic clock.
    let behind = Duration::from_nanos(unix_ns().saturating_sub(t0_ns));
    let t0 = Instant::now().checked_sub(behind).unwrap_or_else(Instant::now);
    let deadline = t0 + e.duration;
    let bucket_ns = u128::from(spec.bucket_us) * 1000;
    let (mut bucket, mut in_bucket, mut total) = (0u64, 0u64, 0u64);
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let b = (now.duration_since(t0).as_nanos() / bucket_ns) as u64;
        if b != bucket {
            if in_bucket > 0 {
                history.flush().map_err(io)?;
                say(stdout, &format!("b {bucket} {in_bucket}"))?;
            }
            bucket = b;
            in_bucket = 0;
        }
        let op = generator.next_op();
        if !holds() {
            return Err(lapsed());
        }
        let start_ns = unix_ns();
        let wrote = match index.run(op).await {
            Ok(w) => w,
            Err(e) if fault.is_some_and(|f| f.crashed().is_some()) => {
                // Told to die: now, mid-operation, as `kill -9` would.
                let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
                return Err(RunError::Client(format!("injected crash: {e}")));
            }
            Err(e @ DriveError::Index(IndexError::Blocked(_) | IndexError::TooManyAttempts(_))) => {
                return Err(RunError::Blocked(format!("{op:?} failed: {e}")));
            }
            Err(e) => return Err(RunError::Client(format!("{op:?} failed: {e}"))),
        };
        // An update of an absent key writes nothing.
        let write = match op {
            _ if !wrote => None,
            Op::Insert { key, value } => Some((WriteKind::Insert, key, value)),
            Op::Update { key, value } => Some((WriteKind::Update, key, value)),
            Op::Read { .. } | Op::Scan { .. } => None,
        };
        if write.is_some() && !holds() {
            return Err(lapsed());
        }
        if let Some((kind, key, value)) = write {
            let w = Write {
                client,
                thread: global,
                seq: generator.generated(),
                kind,
                key,
                value,
                start_ns,
                ack_ns: unix_ns(),
            };
            serde_json::to_writer(&mut history, &w).map_err(|e| io(e.into()))?;
            history.write_all(b"\n").map_err(io)?;
        }
        in_bucket += 1;
        total += 1;
    }
    history.flush().map_err(io)?;
    if in_bucket > 0 {
        say(stdout, &format!("b {bucket} {in_bucket}"))?;
    }
    Ok(total)
}

/// Where thread `global` of `client` writes its history.
pub(super) fn history_path(dir: &Path, client: u32, global: u32) -> PathBuf {
    dir.join(format!("history-c{client}-t{global}.jsonl"))
}
