//! One variant's run: control plane and memory nodes ([`super::cluster`]),
//! load, clients, faults, gathering, check, leases settled.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use control_plane::api::ControlClient;
use control_plane::config::TOKEN_ENV;
use control_plane::state::OWNER_ID_END;
use index::btree::BTree;
use index::hash::{HashConfig, HashTable};
use index::Variant;
use nix::sys::signal::{kill, Signal};
use txn::{Heap, HeapConfig};

use super::check::check_index;
use super::client::connect;
use super::cluster::{pid, start_member, start_memnodes, Member, Procs, STOP_WITH_PARENT_ENV};
use super::control::{self, LeaseKeeper};
use super::{
    unix_ms, unix_ns, ClientOutcome, Endpoint, Fate, Options, RunError, RunSpec, VariantOutcome, BUCKET_US,
    GRACE, LOADER, READY_TIMEOUT, REGION,
};
use crate::experiment::{Experiment, FaultKind, IndexKind};
use crate::timeline::effect;
use workload::load_entries;

/// Chunk of the heap each client allocates from at a time.
const CHUNK_BYTES: u64 = 64 * 1024;
/// Ops per thread-second the region is sized for: above what one thread
/// does on shm. Memory is committed only where touched.
const OPS_PER_THREAD_SECOND_MAX: u64 = 1_000_000;
/// Largest region a run asks for (address space; see above).
const REGION_BYTES_MAX: u64 = 64 << 30;
/// B+tree fill of the bulk load: room for inserts without splitting every leaf at once.
const LOAD_FILL: f64 = 0.7;
/// How long a client told to die at its next swapping CAS has before it is
/// SIGKILLed wherever it is (a workload without writes takes no lock).
const DIE_WAIT: Duration = Duration::from_millis(100);
/// How often the live progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// What a client's stdout said.
enum Event {
    Ready,
    Bucket(u64, u64),
    Done(u64),
    Blocked,
    Error(String),
    Closed,
}

fn region_bytes(e: &Experiment) -> u64 {
    let threads = u64::from(e.cluster.clients * e.cluster.threads_per_client);
    let ops = threads * (e.duration.as_secs() + 1) * OPS_PER_THREAD_SECOND_MAX;
    let bytes = (512 << 20) + e.workload.keys * 256 + ops * 1100;
    bytes.min(REGION_BYTES_MAX).next_multiple_of(1 << 20)
}

/// Runs `variant` of `e` on fresh processes.
pub fn run_variant(e: &Experiment, variant: Variant, o: &Options) -> Result<VariantOutcome, RunError> {
    let dir = o.out.join(variant.to_string());
    std::fs::create_dir_all(&dir).map_err(|err| RunError::io(&dir, err))?;
    let say = |s: String| {
        if o.progress {
            eprintln!("chaos run: {}: {variant}: {s}", e.name);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| RunError::Index(format!("cannot start a runtime: {err}")))?;
    let mut procs = Procs::default();
    let member = if e.cluster.control_plane {
        let m = start_member(o, &dir, &mut procs)?;
        let api = control::api(&m.addr, &m.token)?;
        rt.block_on(control::form(&api, &m.addr))?;
        say(format!("control plane up at {}", m.addr));
        Some((m, api))
    } else {
        None
    };
    let endpoint = start_memnodes(
        e,
        variant,
        region_bytes(e),
        o,
        &dir,
        member.as_ref().map(|(m, _)| m),
        &mut procs,
    )?;
    if let Some((_, api)) = &member {
        rt.block_on(control::wait_memnodes(api, e.cluster.memory_nodes as usize))?;
    }
    say(format!(
        "{} memory node(s) up ({endpoint:?}); loading {} keys ...",
        e.cluster.memory_nodes, e.workload.keys
    ));
    let (loader, keeper) = lease(member.as_ref(), "loader", e, LOADER)?;
    rt.block_on(load(e, variant, &endpoint, loader))?;
    if let Some(k) = keeper {
        k.stop()?;
    }

    let spec = RunSpec {
        experiment: e.clone(),
        variant,
        endpoint: endpoint.clone(),
        out_dir: dir.clone(),
        bucket_us: BUCKET_US,
        first_client_owner: LOADER + 1,
        control: member.as_ref().map(|(m, _)| m.addr.clone()),
    };
    let spec_path = dir.join("run-spec.json");
    let json = serde_json::to_string_pretty(&spec).map_err(|err| RunError::Process(err.to_string()))?;
    std::fs::write(&spec_path, json).map_err(|err| RunError::io(&spec_path, err))?;

    let (tx, rx) = channel();
    let mut stdins = Vec::new();
    for c in 0..e.cluster.clients {
        let token = member.as_ref().map(|(m, _)| m.token.as_str());
        let (child, stdin) = start_client(o, &spec_path, &dir, c, token, tx.clone())?;
        procs.clients.push(child);
        stdins.push(stdin);
    }
    drop(tx);
    wait_ready(&rx, e.cluster.clients)?;
    say(format!(
        "{} client process(es) ready; running for {:?}",
        e.cluster.clients, e.duration
    ));

    let t0_ns = unix_ns();
    let t0 = Instant::now();
    for (c, stdin) in stdins.iter_mut().enumerate() {
        writeln!(stdin, "go {t0_ns}")
            .and_then(|_| stdin.flush())
            .map_err(|err| RunError::Process(format!("cannot start client {c}: {err}")))?;
    }
    let mut state = Gather::new(e);
    schedule(e, &procs, &mut stdins, t0, &rx, &mut state, o.progress)?;
    let deadline = t0 + e.duration + GRACE;
    while state.running() && Instant::now() < deadline {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((c, ev)) => state.take(c, ev),
            Err(_) => break,
        }
    }
    // Reaped here, so that nothing signals their (reusable) pids again.
    for (c, mut child) in procs.clients.drain(..).enumerate() {
        if state.fates[c].is_none() {
            // Still in an op: blocked behind a lock nobody will release.
            let _ = kill(pid(&child), Signal::SIGCONT);
            let _ = child.kill();
            state.fates[c] = Some(Fate::Blocked);
            state.died_ms[c] = Some(unix_ms());
        }
        let _ = child.wait();
    }
    // Lines the clients wrote before they ended.
    while let Ok((c, ev)) = rx.try_recv() {
        state.take(c, ev);
    }
    if o.progress {
        eprintln!();
    }
    // Every client has a fate by now: it ended, or it was found blocked.
    let fates: Vec<Fate> = state.fates.iter().flatten().cloned().collect();
    say(format!(
        "clients ended: {fates:?}; checking with a fresh client ..."
    ));

    let threads = e.cluster.threads_per_client;
    let dead_clients: Vec<u32> = (0..e.cluster.clients)
        .filter(|&c| fates[c as usize] != Fate::Finished)
        .collect();
    let dead: HashSet<u32> = dead_clients
        .iter()
        .flat_map(|&c| (0..threads).map(move |t| c * threads + t))
        .collect();
    let dead_names: Vec<String> = dead_clients.iter().map(|&c| control::client_name(c)).collect();
    // Without a control plane: the loader is 1, client threads follow, the
    // checker is the last of `owner_ids()`.
    let last_owner = u16::try_from(e.owner_ids()).map_err(|x| RunError::Index(x.to_string()))?;
    let (checker, keeper) = lease(member.as_ref(), "checker", e, last_owner)?;
    let leases = match &member {
        Some((_, api)) => {
            say(format!(
                "waiting for the control plane to expire {} dead client(s) ...",
                dead_names.len()
            ));
            Some(rt.block_on(control::wait_expired(
                api,
                &dead_names,
                e.cluster.client_lease,
                Instant::now(),
            ))?)
        }
        None => None,
    };
    // The owner ids of the dead: leased from the control plane, or laid out
    // from the first client's (`client.rs`).
    let dead_owners: Vec<u16> = match &leases {
        Some(clients) => clients
            .iter()
            .filter(|c| dead_names.contains(&c.name))
            .flat_map(|c| c.owners.first..c.owners.first + c.owners.count)
            .collect(),
        None => {
            let per = u16::try_from(threads).unwrap_or(u16::MAX);
            dead_clients
                .iter()
                .flat_map(|&c| {
                    let first = spec.first_client_owner + (c as u16) * per;
                    first..first + per
                })
                .collect()
        }
    };
    let check = rt.block_on(check_index(&spec, checker, &dead, &dead_owners))?;
    // The checker acted under its owner id throughout, or the run fails.
    if let Some(k) = keeper {
        k.stop()?;
    }
    let control_plane = match (&member, leases) {
        (Some((_, api)), Some(leases)) => {
            // The checker repaired what the dead left (as recovery does), so
            // their owner ids may go to others now; unless the check found
            // anything wrong (optimal cannot be repaired: a new holder of the
            // owner id would seem to own the dead one's locks).
            let forgotten = if check.is_ok() {
                rt.block_on(control::forget_dead(api, &leases, &dead_names))?
            } else {
                Vec::new()
            };
            Some(rt.block_on(control::outcome(api, &leases, &forgotten, &state.died_ms))?)
        }
        _ => None,
    };
    drop(procs);

    let expect_violations = e.index.expect_violations.contains(&variant);
    let timeline = state.timeline;
    let buckets = (e.duration.as_micros() / u128::from(BUCKET_US)) as usize;
    let ops: u64 = timeline.iter().sum();
    let mut live = f64::from(e.cluster.clients);
    let mut faults = Vec::new();
    for (i, f) in e.faults.iter().enumerate() {
        let at = (f.at.as_micros() / u128::from(BUCKET_US)) as usize;
        let until = e
            .faults
            .get(i + 1)
            .map_or(buckets, |n| (n.at.as_micros() / u128::from(BUCKET_US)) as usize);
        let share_before = live;
        if f.kind == FaultKind::KillClient {
            live -= 1.0;
        }
        faults.push(effect(
            &timeline,
            BUCKET_US as f64 / 1000.0,
            (&f.kind.to_string(), f.client),
            at,
            until,
            live / share_before,
        ));
    }
    let clients = (0..e.cluster.clients as usize)
        .map(|c| ClientOutcome {
            client: c as u32,
            ops: state.ops[c],
            repairs: state.repairs[c],
            fate: fates[c].clone(),
            paused: e
                .faults
                .iter()
                .any(|f| f.client == c as u32 && f.kind == FaultKind::PauseClient),
        })
        .collect::<Vec<_>>();
    let clients_ok = clients
        .iter()
        .zip(&state.killed)
        .all(|(c, &killed)| c.fate == if killed { Fate::Killed } else { Fate::Finished });
    let passed = clients_ok && check.is_ok();
    say(if passed { "checks passed" } else { "checks FAILED" }.to_owned());
    Ok(VariantOutcome {
        variant,
        ops,
        ops_per_sec: ops as f64 / e.duration.as_secs_f64(),
        timeline,
        faults,
        clients,
        check,
        control_plane,
        expect_violations,
        passed,
    })
}

/// Formats the heap, creates the index and bulk-loads it (owner [`LOADER`]).
async fn load(e: &Experiment, variant: Variant, endpoint: &Endpoint, owner: u16) -> Result<(), RunError> {
    let err = |what: &str, x: String| RunError::Index(format!("{what}: {x}"));
    let mut fabric = connect(endpoint).await?;
    // With a control plane, owner ids are whatever it hands out below its end.
    let owner_slots = if e.cluster.control_plane {
        OWNER_ID_END
    } else {
        u16::try_from(e.owner_ids() + 1).map_err(|x| err("owner ids", x.to_string()))?
    };
    let heap = Heap::format(
        &mut fabric,
        REGION,
        HeapConfig {
            owner_slots,
            chunk_bytes: CHUNK_BYTES,
        },
    )
    .await
    .map_err(|x| err("cannot format the heap", x.to_string()))?;
    let w = e.workload()?;
    let entries = load_entries(w.keys, e.seed);
    match e.index.kind {
        IndexKind::Btree => {
            let mut t = BTree::create(fabric, heap, variant, owner)
                .await
                .map_err(|x| err("cannot create the tree", x.to_string()))?;
            t.bulk_load(&entries, LOAD_FILL, |_| {})
                .await
                .map_err(|x| err("cannot load the tree", x.to_string()))?;
        }
        IndexKind::Hash => {
            let threads = u64::from(e.cluster.clients * e.cluster.threads_per_client);
            let inserts = if w.workload.inserts() {
                threads
                    * (e.duration.as_secs() + 1)
                    * OPS_PER_THREAD_SECOND_MAX
                    * u64::from(w.workload.mix().insert)
                    / 100
            } else {
                0
            };
            let config = HashConfig::for_keys(w.keys + inserts);
            let mut t = HashTable::create(fabric, heap, variant, owner, config)
                .await
                .map_err(|x| err("cannot create the table", x.to_string()))?;
            t.bulk_load(&entries, |_| {})
                .await
                .map_err(|x| err("cannot load the table", x.to_string()))?;
        }
    }
    Ok(())
}

/// With a control plane: registers `name` for one owner id and keeps its
/// lease (losing it shows when the keeper stops). Without: owner id `fixed`.
fn lease(
    member: Option<&(Member, ControlClient)>,
    name: &str,
    e: &Experiment,
    fixed: u16,
) -> Result<(u16, Option<LeaseKeeper>), RunError> {
    let Some((m, _)) = member else {
        return Ok((fixed, None));
    };
    let (owners, keeper) = control::lease(&m.addr, &m.token, name, 1, e.cluster.client_lease, |_| {})?;
    Ok((owners.first, Some(keeper)))
}

fn start_client(
    o: &Options,
    spec: &Path,
    dir: &Path,
    c: u32,
    token: Option<&str>,
    tx: Sender<(usize, Event)>,
) -> Result<(Child, ChildStdin), RunError> {
    let log_path = dir.join(format!("client-{c}.log"));
    let log = std::fs::File::create(&log_path).map_err(|err| RunError::io(&log_path, err))?;
    // Its log is the run's record of what it did: not quieted.
    let mut cmd = Command::new(&o.exe);
    cmd.env(STOP_WITH_PARENT_ENV, std::process::id().to_string());
    cmd.args(["chaos", "client", "--spec"])
        .arg(spec)
        .arg("--client")
        .arg(c.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    if let Some(t) = token {
        cmd.env(TOKEN_ENV, t);
    }
    let mut child = cmd
        .spawn()
        .map_err(|err| RunError::Process(format!("cannot start client {c}: {err}")))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        return Err(RunError::Process(format!("client {c} has no pipes")));
    };
    let c = c as usize;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut words = line.split_whitespace();
            let ev = match (words.next(), words.next(), words.next()) {
                (Some("ready"), _, _) => Event::Ready,
                (Some("b"), Some(b), Some(n)) => match (b.parse(), n.parse()) {
                    (Ok(b), Ok(n)) => Event::Bucket(b, n),
                    _ => Event::Error(format!("bad line {line:?}")),
                },
                (Some("done"), _, r) => Event::Done(r.and_then(|r| r.parse().ok()).unwrap_or(0)),
                (Some("error"), _, _) => Event::Error(line["error".len()..].trim().to_owned()),
                (Some("blocked"), _, _) => Event::Blocked,
                _ => Event::Error(format!("bad line {line:?}")),
            };
            if tx.send((c, ev)).is_err() {
                return;
            }
        }
        let _ = tx.send((c, Event::Closed));
    });
    Ok((child, stdin))
}

fn wait_ready(rx: &Receiver<(usize, Event)>, clients: u32) -> Result<(), RunError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut ready = 0;
    while ready < clients {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((_, Event::Ready)) => ready += 1,
            Ok((c, Event::Error(e))) => return Err(RunError::Process(format!("client {c}: {e}"))),
            Ok((c, Event::Closed)) => {
                return Err(RunError::Process(format!(
                    "client {c} exited before it was ready (see client-{c}.log)"
                )))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(RunError::Process(format!(
                    "{} client(s) not ready after {READY_TIMEOUT:?}",
                    clients - ready
                )))
            }
        }
    }
    Ok(())
}

/// Ops and fates gathered from the clients' lines.
struct Gather {
    timeline: Vec<u64>,
    ops: Vec<u64>,
    repairs: Vec<u64>,
    fates: Vec<Option<Fate>>,
    killed: Vec<bool>,
    /// When the runner saw each client die (ms since the Unix epoch).
    died_ms: Vec<Option<u64>>,
}

impl Gather {
    fn new(e: &Experiment) -> Gather {
        let n = e.cluster.clients as usize;
        Gather {
            timeline: vec![0; (e.duration.as_micros() / u128::from(BUCKET_US)) as usize + 1],
            ops: vec![0; n],
            repairs: vec![0; n],
            fates: vec![None; n],
            killed: vec![false; n],
            died_ms: vec![None; n],
        }
    }

    fn take(&mut self, c: usize, ev: Event) {
        match ev {
            Event::Bucket(b, n) => {
                if let Some(slot) = usize::try_from(b).ok().and_then(|b| self.timeline.get_mut(b)) {
                    *slot += n;
                }
                self.ops[c] += n;
            }
            Event::Done(r) => {
                self.fates[c] = Some(Fate::Finished);
                self.repairs[c] = r;
            }
            Event::Error(e) => self.fates[c] = Some(Fate::Failed(e)),
            Event::Blocked => self.fates[c] = Some(Fate::Blocked),
            Event::Closed if self.fates[c].is_none() => {
                self.died_ms[c] = Some(unix_ms());
                self.fates[c] = Some(if self.killed[c] {
                    Fate::Killed
                } else {
                    Fate::Failed("exited without `done`".into())
                });
            }
            Event::Ready | Event::Closed => {}
        }
    }

    fn running(&self) -> bool {
        self.fates.iter().any(Option::is_none)
    }
}

/// Applies the faults at their times until the duration is over, taking
/// the clients' lines meanwhile and drawing a progress line.
fn schedule(
    e: &Experiment,
    procs: &Procs,
    stdins: &mut [ChildStdin],
    t0: Instant,
    rx: &Receiver<(usize, Event)>,
    state: &mut Gather,
    progress: bool,
) -> Result<(), RunError> {
    // A line tells the client to stop right after its next CAS that swaps
    // (`die`: SIGKILL itself; `pause`: SIGSTOP itself); the signal after it
    // comes anyway, for a client that takes no lock in time.
    enum Action {
        Tell(&'static str),
        Signal(Signal),
    }
    let mut actions: Vec<(Duration, usize, Action)> = Vec::new();
    for f in &e.faults {
        let c = f.client as usize;
        match (f.kind, f.pause) {
            (FaultKind::KillClient, _) => {
                actions.push((f.at, c, Action::Tell("die")));
                actions.push((f.at + DIE_WAIT, c, Action::Signal(Signal::SIGKILL)));
            }
            (FaultKind::PauseClient, Some(p)) => {
                actions.push((f.at, c, Action::Tell("pause")));
                // Before the SIGCONT, however short the pause.
                let fallback = DIE_WAIT.min(p / 2);
                actions.push((f.at + fallback, c, Action::Signal(Signal::SIGSTOP)));
                actions.push((f.at + p, c, Action::Signal(Signal::SIGCONT)));
            }
            (FaultKind::PauseClient, None) => {}
        }
    }
    actions.sort_by_key(|a| a.0);
    let mut next = 0;
    let mut last_draw = Instant::now();
    loop {
        let now = t0.elapsed();
        while next < actions.len() && actions[next].0 <= now {
            let (_, c, ref action) = actions[next];
            match *action {
                Action::Tell(word) => {
                    if word == "die" {
                        state.killed[c] = true;
                    }
                    // A client that already died of its own cannot hear it.
                    let _ = writeln!(stdins[c], "{word}").and_then(|_| stdins[c].flush());
                    if progress {
                        let what = if word == "die" { "dies" } else { "pauses" };
                        eprintln!(
                            "\rchaos run: {:>7.3} s: client {c} {what} after its next CAS that swaps",
                            now.as_secs_f64()
                        );
                    }
                }
                Action::Signal(sig) => {
                    // The process may be gone already (it died at its CAS);
                    // an unreaped one still takes the signal.
                    kill(pid(&procs.clients[c]), sig).map_err(|err| {
                        RunError::Process(format!("cannot send {sig} to client {c}: {err}"))
                    })?;
                    if progress && sig == Signal::SIGCONT {
                        eprintln!("\rchaos run: {:>7.3} s: client {c} resumed", now.as_secs_f64());
                    }
                }
            }
            next += 1;
        }
        if now >= e.duration {
            return Ok(());
        }
        let until = actions
            .get(next)
            .map_or(e.duration, |a| a.0)
            .min(e.duration)
            .min(now + PROGRESS_EVERY);
        match rx.recv_timeout(until.saturating_sub(now)) {
            Ok((c, ev)) => state.take(c, ev),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(until.saturating_sub(t0.elapsed())),
        }
        if progress && last_draw.elapsed() >= PROGRESS_EVERY {
            last_draw = Instant::now();
            let b = (t0.elapsed().as_micros() / u128::from(BUCKET_US)) as usize;
            let recent = crate::timeline::mean(&state.timeline, b.saturating_sub(250)..b);
            eprint!(
                "\rchaos run: {:>7.3} s of {:?}: {:>10.0} ops/s over the last 250 ms, {} op(s) so far   ",
                t0.elapsed().as_secs_f64(),
                e.duration,
                recent * 1e6 / BUCKET_US as f64,
                state.ops.iter().sum::<u64>()
            );
        }
    }
}
