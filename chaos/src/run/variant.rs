//! One variant's run, in phases: start the cluster (control plane and
//! memory nodes, [`super::cluster`]) and load the index; run the clients
//! (start, ready, go, faults, gather); settle (reap, wait for the control
//! plane to expire the dead); judge (check, forget the dead, outcome).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::ChildStdin;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use control_plane::config::TOKEN_ENV;
use control_plane::state::{Client as Lease, OWNER_ID_END};
use harness::launch::{Launch, StopBy};
use harness::{ClientLine, LineError, RunnerLine, TransportKind};
use index::btree::BTree;
use index::hash::{HashConfig, HashTable};
use index::Variant;
use nix::sys::signal::Signal;
use tokio::runtime::Runtime;

use super::check::{check_index, CheckOutcome};
use super::client::connect;
use super::cluster::{start_control, start_memnodes, Procs};
use super::control::{self, ControlOutcome};
use super::dtx_recovery;
use super::{
    unix_ms, unix_ns, ClientOutcome, Endpoint, Fate, Options, RunError, RunSpec, VariantOutcome, BUCKET_US,
    GRACE, LOADER, READY_TIMEOUT,
};
use crate::experiment::{Experiment, FaultKind, IndexKind};
use workload::load_entries;
use workload::timeline::effect;

/// Ops one client thread can complete per second, an upper bound by
/// transport: on shm above what one thread does (about 1 M of the
/// cheapest ops); over loopback tcp every op takes at least one round trip
/// of more than 10 µs.
fn ops_per_thread_second_max(t: TransportKind) -> u64 {
    match t {
        TransportKind::Local | TransportKind::Shm => 1_000_000,
        TransportKind::Tcp | TransportKind::Rdma => 100_000,
    }
}
/// Bytes one write can leave behind in the region at most: a new 1 KiB
/// B+tree node or KV block with its meta, and slack for its log.
const BYTES_PER_WRITE_MAX: u64 = 1100;
/// Bytes per loaded key: its entry, its share of nodes or buckets.
const BYTES_PER_KEY: u64 = 256;
/// Fixed part of a region: heap header, log slots, owner table, slack.
const REGION_BASE_BYTES: u64 = 512 << 20;
/// Largest region a run asks for: address space, reserved and not
/// committed (memory nodes map it MAP_NORESERVE; shm images are sparse).
const REGION_BYTES_MAX: u64 = 64 << 30;
/// B+tree fill of the bulk load: room for inserts without splitting every leaf at once.
const LOAD_FILL: f64 = 0.7;
/// How long a client told to die at its next swapping CAS has before it is
/// SIGKILLed wherever it is (a workload without writes takes no lock).
const DIE_WAIT: Duration = Duration::from_millis(100);
/// How often the live progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// What a client's stdout said, or that it closed.
enum Event {
    Line(ClientLine),
    Malformed(LineError),
    Closed,
}

/// Ops the run's clients can complete at most, over the duration and one
/// second more.
fn ops_max(e: &Experiment) -> u64 {
    let threads = u64::from(e.cluster.clients * e.cluster.threads_per_client);
    threads * (e.duration.as_secs() + 1) * ops_per_thread_second_max(e.cluster.transport)
}

/// The region a run needs: what the load takes plus what the workload can
/// write (reads write nothing), bounded by [`REGION_BYTES_MAX`].
fn region_bytes(e: &Experiment) -> u64 {
    let mix = e.workload().map_or(100, |w| {
        let m = w.workload.mix();
        u64::from(m.update + m.insert)
    });
    let writes = ops_max(e) * mix / 100;
    let bytes = REGION_BASE_BYTES + e.workload.keys * BYTES_PER_KEY + writes * BYTES_PER_WRITE_MAX;
    bytes.min(REGION_BYTES_MAX).next_multiple_of(1 << 20)
}

/// Progress lines of one variant's run.
struct Say<'a> {
    e: &'a Experiment,
    variant: Variant,
    progress: bool,
}

impl Say<'_> {
    fn say(&self, s: impl std::fmt::Display) {
        if self.progress {
            eprintln!("chaos run: {}: {}: {s}", self.e.name, self.variant);
        }
    }
}

/// Runs `variant` of `e` on fresh processes.
pub fn run_variant(e: &Experiment, variant: Variant, o: &Options) -> Result<VariantOutcome, RunError> {
    let dir = o.out.join(variant.to_string());
    std::fs::create_dir_all(&dir).map_err(|err| RunError::io(&dir, err))?;
    let say = Say {
        e,
        variant,
        progress: o.progress,
    };
    let rt = super::runtime()?;
    let mut procs = Procs::default();
    let spec = start_cluster(e, variant, o, &dir, &rt, &mut procs, &say)?;
    let (state, dtx_rolled) = run_clients(e, o, &spec, &mut procs, &say)?;
    let dead = Dead::of(e, &state);
    let (check, control_plane) = judge(e, &spec, &rt, &procs, &state, &dead, &say)?;
    drop(procs);
    let mut outcome = outcome(e, variant, state, check, control_plane, &say);
    outcome.dtx_rolled = dtx_rolled;
    Ok(outcome)
}

/// Phase 1: the control plane (if any) and the memory nodes up, the index
/// loaded; writes the spec the client processes read.
fn start_cluster(
    e: &Experiment,
    variant: Variant,
    o: &Options,
    dir: &Path,
    rt: &Runtime,
    procs: &mut Procs,
    say: &Say<'_>,
) -> Result<RunSpec, RunError> {
    let control = if e.cluster.control_plane {
        let addr = rt.block_on(start_control(o, dir, procs))?;
        say.say(format_args!("control plane up at {addr}"));
        Some(addr)
    } else {
        None
    };
    let endpoint = start_memnodes(e, variant, region_bytes(e), o, dir, procs)?;
    if let Some(api) = procs.api() {
        rt.block_on(control::wait_memnodes(api, e.cluster.memory_nodes as usize))?;
    }
    say.say(format_args!(
        "{} memory node(s) up ({endpoint:?}); loading {} keys ...",
        e.cluster.memory_nodes, e.workload.keys
    ));
    let (loader, keeper) = lease(procs, "loader", e, LOADER)?;
    rt.block_on(load(e, variant, &endpoint, loader, procs.credential()))?;
    if let Some(k) = keeper {
        k.stop().map_err(|e| RunError::Control(e.to_string()))?;
    }
    let spec = RunSpec {
        experiment: e.clone(),
        variant,
        endpoint,
        out_dir: dir.to_owned(),
        bucket_us: BUCKET_US,
        first_client_owner: LOADER + 1,
        control,
        credential: procs.credential(),
    };
    let json = serde_json::to_string_pretty(&spec).map_err(RunError::json("run-spec.json"))?;
    let path = spec.path();
    std::fs::write(&path, json).map_err(|err| RunError::io(&path, err))?;
    Ok(spec)
}

/// Phase 2: the client processes started and made ready, one common
/// start, the faults applied while their lines are gathered, and every
/// client reaped after the duration and [`GRACE`] (one still in an op then
/// is blocked behind a lock nobody will release: killed).
fn run_clients(
    e: &Experiment,
    o: &Options,
    spec: &RunSpec,
    procs: &mut Procs,
    say: &Say<'_>,
) -> Result<(Gather, Vec<dtx_recovery::Rolled>), RunError> {
    let (tx, rx) = channel();
    let mut stdins = Vec::new();
    for c in 0..e.cluster.clients {
        stdins.push(start_client(o, spec, c, procs, tx.clone())?);
    }
    drop(tx);
    wait_ready(&rx, e.cluster.clients)?;
    say.say(format_args!(
        "{} client process(es) ready; running for {:?}",
        e.cluster.clients, e.duration
    ));
    let t0_ns = unix_ns();
    let t0 = Instant::now();
    // dtx: nobody repairs a dead client's locks online; the runner rolls
    // its logs after its quarantine, as recovery's coordinator would.
    let recoverer = match (spec.variant, procs.member()) {
        (Variant::Dtx, Some(member)) => {
            let fixed = u16::try_from(e.owner_ids()).unwrap_or(u16::MAX);
            let (owner, keeper) = lease(procs, "dtx-recovery", e, fixed)?;
            let r =
                dtx_recovery::Recoverer::start(member, spec, owner, t0_ns / 1_000_000, procs.credential())?;
            Some((r, keeper))
        }
        _ => None,
    };
    for (c, stdin) in stdins.iter_mut().enumerate() {
        writeln!(stdin, "{}", RunnerLine::Go { t0_ns })
            .and_then(|_| stdin.flush())
            .map_err(|source| RunError::Io {
                what: format!("cannot start client {c}"),
                source,
            })?;
    }
    let mut state = Gather::new(e);
    schedule(e, procs, &mut stdins, t0, &rx, &mut state, o.progress)?;
    let deadline = t0 + e.duration + GRACE;
    while state.running() && Instant::now() < deadline {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((c, ev)) => state.take(c, ev),
            Err(_) => break,
        }
    }
    reap(procs, &mut state);
    // Lines the clients wrote before they ended.
    while let Ok((c, ev)) = rx.try_recv() {
        state.take(c, ev);
    }
    if o.progress {
        eprintln!();
    }
    say.say(format_args!(
        "clients ended: {:?}; checking with a fresh client ...",
        state.fates.iter().flatten().collect::<Vec<_>>()
    ));
    let mut rolled = Vec::new();
    if let Some((r, keeper)) = recoverer {
        rolled = r.finish()?;
        if let Some(k) = keeper {
            k.stop().map_err(|e| RunError::Control(e.to_string()))?;
        }
        for r in &rolled {
            say.say(format_args!(
                "client {}'s DTX logs rolled at {:.0} ms (expired at {:.0} ms): {} back, {} forward, {} locks freed",
                r.client, r.rolled_at_ms, r.expired_at_ms, r.rolled_back, r.rolled_forward, r.released
            ));
        }
    }
    Ok((state, rolled))
}

/// Reaps every client, so that nothing signals their (reusable) pids
/// again; one without a fate is still in an op: blocked, killed.
fn reap(procs: &mut Procs, state: &mut Gather) {
    for (c, mut client) in procs.clients.drain(..).enumerate() {
        if state.fates[c].is_none() {
            let _ = client.signal(Signal::SIGCONT);
            let _ = client.kill();
            state.fates[c] = Some(Fate::Blocked);
            state.died_ms[c] = Some(unix_ms());
        }
        let _ = client.wait();
    }
}

/// The clients that did not finish, their threads and their names.
struct Dead {
    clients: Vec<u32>,
    threads: HashSet<u32>,
    names: Vec<String>,
}

impl Dead {
    fn of(e: &Experiment, state: &Gather) -> Dead {
        let per = e.cluster.threads_per_client;
        let clients: Vec<u32> = (0..e.cluster.clients)
            .filter(|&c| state.fates[c as usize] != Some(Fate::Finished))
            .collect();
        Dead {
            threads: clients
                .iter()
                .flat_map(|&c| (0..per).map(move |t| c * per + t))
                .collect(),
            names: clients.iter().map(|&c| control::client_name(c)).collect(),
            clients,
        }
    }

    /// Their owner ids: leased from the control plane, or laid out from
    /// the first client's (`client.rs`).
    fn owners(&self, e: &Experiment, spec: &RunSpec, leases: Option<&[Lease]>) -> Vec<u16> {
        match leases {
            Some(clients) => clients
                .iter()
                .filter(|c| self.names.contains(&c.name))
                .flat_map(|c| c.owners.first..c.owners.first + c.owners.count)
                .collect(),
            None => {
                let per = u16::try_from(e.cluster.threads_per_client).unwrap_or(u16::MAX);
                self.clients
                    .iter()
                    .flat_map(|&c| {
                        let first = spec.first_client_owner + (c as u16) * per;
                        first..first + per
                    })
                    .collect()
            }
        }
    }
}

/// Phases 3 and 4: with a control plane, wait until it has expired the
/// dead; check with a fresh client (which repairs what the dead left, as
/// recovery does); then, if nothing was wrong, have the control plane
/// forget the dead, so their owner ids may go to others (not otherwise: a
/// lock optimal cannot repair would seem to be a new holder's).
fn judge(
    e: &Experiment,
    spec: &RunSpec,
    rt: &Runtime,
    procs: &Procs,
    state: &Gather,
    dead: &Dead,
    say: &Say<'_>,
) -> Result<(CheckOutcome, Option<ControlOutcome>), RunError> {
    // Without a control plane the checker is the last of `owner_ids()`.
    let last_owner = u16::try_from(e.owner_ids())
        .map_err(|_| RunError::Process(format!("{} owner ids are too many", e.owner_ids())))?;
    let (checker, keeper) = lease(procs, "checker", e, last_owner)?;
    let leases = match procs.api() {
        Some(api) => {
            say.say(format_args!(
                "waiting for the control plane to expire {} dead client(s) ...",
                dead.names.len()
            ));
            let expired = control::wait_expired(api, &dead.names, e.cluster.client_lease, Instant::now());
            Some(rt.block_on(expired)?)
        }
        None => None,
    };
    let dead_owners = dead.owners(e, spec, leases.as_deref());
    let check = rt.block_on(check_index(spec, checker, &dead.threads, &dead_owners))?;
    // The checker acted under its owner id throughout, or the run fails.
    if let Some(k) = keeper {
        k.stop().map_err(|e| RunError::Control(e.to_string()))?;
    }
    let control_plane = match (procs.api(), leases) {
        (Some(api), Some(leases)) => {
            let forgotten = if check.is_ok() {
                rt.block_on(control::forget_dead(api, &leases, &dead.names))?
            } else {
                Vec::new()
            };
            Some(rt.block_on(control::outcome(api, &leases, &forgotten, &state.died_ms))?)
        }
        _ => None,
    };
    Ok((check, control_plane))
}

/// Phase 5: the timeline's fault effects, the clients' fates, the verdict.
fn outcome(
    e: &Experiment,
    variant: Variant,
    state: Gather,
    check: CheckOutcome,
    control_plane: Option<ControlOutcome>,
    say: &Say<'_>,
) -> VariantOutcome {
    let timeline = state.timeline;
    let ops: u64 = timeline.iter().sum();
    let faults = fault_effects(e, &timeline);
    let clients = (0..e.cluster.clients as usize)
        .map(|c| ClientOutcome {
            client: c as u32,
            ops: state.ops[c],
            repairs: state.repairs[c],
            fate: state.fates[c].clone().unwrap_or(Fate::Blocked),
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
    say.say(if passed { "checks passed" } else { "checks FAILED" });
    VariantOutcome {
        variant,
        ops,
        ops_per_sec: ops as f64 / e.duration.as_secs_f64(),
        timeline,
        faults,
        clients,
        check,
        control_plane,
        dtx_rolled: Vec::new(),
        expect_violations: e.index.expect_violations.contains(&variant),
        passed,
    }
}

/// What each fault did to throughput, against the share of clients left.
fn fault_effects(e: &Experiment, timeline: &[u64]) -> Vec<workload::timeline::FaultEffect> {
    let buckets = (e.duration.as_micros() / u128::from(BUCKET_US)) as usize;
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
            timeline,
            BUCKET_US as f64 / 1000.0,
            (&f.kind.to_string(), f.client),
            at,
            until,
            live / share_before,
        ));
    }
    faults
}

/// Formats the heap, creates the index and bulk-loads it (owner [`LOADER`]).
async fn load(
    e: &Experiment,
    variant: Variant,
    endpoint: &Endpoint,
    owner: u16,
    credential: Option<fabric::Credential>,
) -> Result<(), RunError> {
    let mut fabric = connect(endpoint, credential).await?;
    // With a control plane, owner ids are whatever it hands out below its end.
    let owner_slots = if e.cluster.control_plane {
        OWNER_ID_END
    } else {
        u16::try_from(e.owner_ids() + 1).map_err(RunError::index("owner ids"))?
    };
    let heap = harness::layout::format_heap(&mut fabric, owner_slots)
        .await
        .map_err(RunError::index("cannot format the heap"))?;
    let w = e.workload()?;
    let entries = load_entries(w.keys, e.seed);
    match e.index.kind {
        IndexKind::Btree => {
            let mut t = BTree::create(fabric, heap, variant, owner)
                .await
                .map_err(RunError::index("cannot create the tree"))?;
            t.bulk_load(&entries, LOAD_FILL, |_| {})
                .await
                .map_err(RunError::index("cannot load the tree"))?;
        }
        IndexKind::Hash => {
            let inserts = ops_max(e) * u64::from(w.workload.mix().insert) / 100;
            let config = HashConfig::for_keys(w.keys + inserts);
            let mut t = HashTable::create(fabric, heap, variant, owner, config)
                .await
                .map_err(RunError::index("cannot create the table"))?;
            t.bulk_load(&entries, |_| {})
                .await
                .map_err(RunError::index("cannot load the table"))?;
        }
    }
    Ok(())
}

/// With a control plane: registers `name` for one owner id and keeps its
/// lease (losing it shows when the keeper stops). Without: owner id `fixed`.
fn lease(
    procs: &Procs,
    name: &str,
    e: &Experiment,
    fixed: u16,
) -> Result<(u16, Option<cluster::Lease>), RunError> {
    let Some((addr, token)) = procs.member() else {
        return Ok((fixed, None));
    };
    let keeper = cluster::Lease::take(
        &[addr.to_owned()],
        token,
        name,
        1,
        Some(e.cluster.client_lease),
        |_| {},
    )
    .map_err(|e| RunError::Control(format!("taking an owner id for the {name}: {e}")))?;
    Ok((keeper.owners().first, Some(keeper)))
}

/// Starts client process `c` (its log is the run's record of what it
/// did: not quieted), and a thread that turns its stdout lines into
/// events on `tx`. Returns its stdin.
fn start_client(
    o: &Options,
    spec: &RunSpec,
    c: u32,
    procs: &mut Procs,
    tx: Sender<(usize, Event)>,
) -> Result<ChildStdin, RunError> {
    let mut launch = Launch::new(&o.exe, format!("client {c}"))
        .args(["chaos", "client", "--spec"])
        .arg(spec.path())
        .args(["--client", &c.to_string()])
        .log_to(spec.out_dir.join(format!("client-{c}.log")))
        .stdin_piped()
        .stop_by(StopBy::Kill)
        .env(control_plane::config::SECRET_ENV, procs.secret());
    if let Some((_, token)) = procs.member() {
        launch = launch.env(TOKEN_ENV, token);
    }
    let mut client = launch.spawn()?;
    let (Some(stdin), Some(stdout)) = (client.take_stdin(), client.take_stdout()) else {
        return Err(RunError::Process(format!("client {c} has no pipes")));
    };
    procs.clients.push(client);
    let c = c as usize;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let ev = match line.parse::<ClientLine>() {
                Ok(l) => Event::Line(l),
                Err(e) => Event::Malformed(e),
            };
            if tx.send((c, ev)).is_err() {
                return;
            }
        }
        let _ = tx.send((c, Event::Closed));
    });
    Ok(stdin)
}

/// Waits until every client said `ready`.
fn wait_ready(rx: &Receiver<(usize, Event)>, clients: u32) -> Result<(), RunError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut ready = 0;
    while ready < clients {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((_, Event::Line(ClientLine::Ready))) => ready += 1,
            Ok((c, Event::Line(ClientLine::Error(e)))) => {
                return Err(RunError::Process(format!("client {c}: {e}")))
            }
            Ok((c, Event::Malformed(source))) => {
                return Err(RunError::Line {
                    from: format!("client {c}"),
                    source,
                })
            }
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
            Event::Line(ClientLine::Bucket { bucket, ops }) => {
                if let Some(slot) = usize::try_from(bucket)
                    .ok()
                    .and_then(|b| self.timeline.get_mut(b))
                {
                    *slot += ops;
                }
                self.ops[c] += ops;
            }
            Event::Line(ClientLine::Done { repairs, .. }) => {
                self.fates[c] = Some(Fate::Finished);
                self.repairs[c] = repairs;
            }
            Event::Line(ClientLine::Error(e)) => self.fates[c] = Some(Fate::Failed(e)),
            Event::Malformed(e) => self.fates[c] = Some(Fate::Failed(e.to_string())),
            Event::Line(ClientLine::Blocked(_)) => self.fates[c] = Some(Fate::Blocked),
            Event::Closed if self.fates[c].is_none() => {
                self.died_ms[c] = Some(unix_ms());
                self.fates[c] = Some(if self.killed[c] {
                    Fate::Killed
                } else {
                    Fate::Failed("exited without `done`".into())
                });
            }
            Event::Line(ClientLine::Ready) | Event::Closed => {}
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
    let actions = fault_actions(e);
    let mut next = 0;
    let mut last_draw = Instant::now();
    loop {
        let now = t0.elapsed();
        while next < actions.len() && actions[next].0 <= now {
            let (_, c, ref action) = actions[next];
            match *action {
                Action::Tell(line) => {
                    let dies = line == RunnerLine::Die;
                    state.killed[c] |= dies;
                    // A client that already died of its own cannot hear it.
                    let _ = writeln!(stdins[c], "{line}").and_then(|_| stdins[c].flush());
                    if progress {
                        let what = if dies { "dies" } else { "pauses" };
                        eprintln!(
                            "\rchaos run: {:>7.3} s: client {c} {what} after its next CAS that swaps",
                            now.as_secs_f64()
                        );
                    }
                }
                Action::Signal(sig) => {
                    // The process may be gone already (it died at its CAS);
                    // an unreaped one still takes the signal.
                    procs.clients[c].signal(sig)?;
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
            draw_progress(e, t0, state);
        }
    }
}

/// What the runner does to a client at a time.
enum Action {
    Tell(RunnerLine),
    Signal(Signal),
}

/// The schedule's actions in time order. A line tells the client to stop
/// right after its next CAS that swaps (`die`: SIGKILL itself; `pause`:
/// SIGSTOP itself); the signal after it comes anyway, for a client that
/// takes no lock in time.
fn fault_actions(e: &Experiment) -> Vec<(Duration, usize, Action)> {
    let mut actions: Vec<(Duration, usize, Action)> = Vec::new();
    for f in &e.faults {
        let c = f.client as usize;
        match (f.kind, f.pause) {
            (FaultKind::KillClient, _) => {
                actions.push((f.at, c, Action::Tell(RunnerLine::Die)));
                actions.push((f.at + DIE_WAIT, c, Action::Signal(Signal::SIGKILL)));
            }
            (FaultKind::PauseClient, Some(p)) => {
                actions.push((f.at, c, Action::Tell(RunnerLine::Pause)));
                // Before the SIGCONT, however short the pause.
                let fallback = DIE_WAIT.min(p / 2);
                actions.push((f.at + fallback, c, Action::Signal(Signal::SIGSTOP)));
                actions.push((f.at + p, c, Action::Signal(Signal::SIGCONT)));
            }
            // Local-cluster faults are `run::replica`'s.
            (FaultKind::PauseClient, None)
            | (
                FaultKind::KillMemnode
                | FaultKind::RestartMemnode
                | FaultKind::PauseMemnode
                | FaultKind::KillControlLeader
                | FaultKind::ClockSkew
                | FaultKind::Partition
                | FaultKind::WipeMemnode
                | FaultKind::PauseControlLeader
                | FaultKind::TransferLeader
                | FaultKind::SnapshotRestore
                | FaultKind::PartitionData
                | FaultKind::LateDelivery,
                _,
            ) => {}
        }
    }
    actions.sort_by_key(|a| a.0);
    actions
}

/// The live progress line: ops per second over the last 250 ms.
fn draw_progress(e: &Experiment, t0: Instant, state: &Gather) {
    let b = (t0.elapsed().as_micros() / u128::from(BUCKET_US)) as usize;
    let recent = workload::timeline::mean(&state.timeline, b.saturating_sub(250)..b);
    eprint!(
        "\rchaos run: {:>7.3} s of {:?}: {:>10.0} ops/s over the last 250 ms, {} op(s) so far   ",
        t0.elapsed().as_secs_f64(),
        e.duration,
        recent * 1e6 / BUCKET_US as f64,
        state.ops.iter().sum::<u64>()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiment(transport: &str, ycsb: &str) -> Experiment {
        let text = format!(
            "name = \"t\"\nduration = \"8s\"\n[cluster]\nmemory_nodes = 3\ntransport = \"{transport}\"\n\
             clients = 6\nthreads_per_client = 2\n[index]\nkind = \"btree\"\nvariants = [\"rtx\"]\n\
             [workload]\nycsb = \"{ycsb}\"\nkeys = 200000\ndistribution = \"uniform\"\n"
        );
        toml::from_str(&text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_region_is_sized_by_what_the_workload_can_write() {
        // 6 clients x 2 threads x 8 s over tcp: each of three nodes asked
        // for 64 GiB before, which a 24 GiB machine refused.
        let a_tcp = region_bytes(&experiment("tcp", "a"));
        assert!(a_tcp <= 8 << 30, "{a_tcp}");
        // Reads write nothing: the load and the fixed part only.
        let c = region_bytes(&experiment("shm", "c"));
        assert_eq!(
            c,
            (REGION_BASE_BYTES + 200_000 * BYTES_PER_KEY).next_multiple_of(1 << 20)
        );
        // Fast transports can write more, up to the bound.
        let a_shm = region_bytes(&experiment("shm", "a"));
        assert!(a_shm > a_tcp && a_shm <= REGION_BYTES_MAX);
    }
}
