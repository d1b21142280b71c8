//! One run of an rTX scenario: a fresh cluster, the parties that run the
//! same read-all, rewrite-all transaction, how each is stopped and goes on,
//! and the checks made at each acknowledgement.

use harness::{Memory, MemorySpec, TransportKind};
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};
use fabric::{AnyTransport, BaseTransport, Client, ClusterMap, FabricError, FaultPlan, Faulty, Replica};
use txn::{Heap, HeapConfig, OwnerId, TxClient, TxConfig, TxError, TxObj};

use super::check;
use crate::crash_points::{Mode, SURVIVOR_SKEW_MS};

pub(super) use harness::layout::REGION;
const REGION_BYTES: u64 = 2 << 20;
/// Creates the objects and runs nothing else.
const SETUP: OwnerId = 1;
/// Finishes the logs of parties that stopped for good, as the recovery
/// module does for an expired client.
const RECOVERY: OwnerId = 5;
/// Meets every object once at the end (repairing what is left) and reads
/// the final state.
const CHECKER: OwnerId = 6;
/// Log slots of the heap: every owner above has one.
pub(super) const OWNER_SLOTS: u16 = 8;
/// The generation the objects are created with.
pub(super) const OLD: u64 = 0;
/// The generation a dropped victim writes when it runs its transaction again.
const VICTIM_AGAIN: u64 = 4;

/// Who runs a transaction in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Party {
    /// The client stopped first; its clock is right.
    Victim,
    /// Meets what the victim left; its clock is past every victim lease.
    Repairer,
    /// Commits while others are stopped; its clock is past the repairer's.
    Third,
}

impl Party {
    fn owner(self) -> OwnerId {
        match self {
            Party::Victim => 2,
            Party::Repairer => 3,
            Party::Third => 4,
        }
    }

    fn generation(self) -> u64 {
        match self {
            Party::Victim => 1,
            Party::Repairer => 2,
            Party::Third => 3,
        }
    }

    fn skew_ms(self) -> i64 {
        match self {
            Party::Victim => 0,
            Party::Repairer => SURVIVOR_SKEW_MS,
            Party::Third => 2 * SURVIVOR_SKEW_MS,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Party::Victim => "victim",
            Party::Repairer => "repairer",
            Party::Third => "third client",
        }
    }
}

/// How a party is stopped at its stop point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// It crashes and never comes back.
    Crash,
    /// It pauses until resumed.
    Pause,
    /// Its connections drop; it goes on later with its transaction again.
    Dropped,
}

impl Stop {
    pub fn after(mode: Mode) -> Stop {
        match mode {
            Mode::Crash => Stop::Crash,
            Mode::Pause => Stop::Pause,
        }
    }
}

/// One object's data: which transaction wrote it, with a check word that
/// makes torn or misplaced data visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(super) struct Cell {
    pub generation: u64,
    index: u64,
    check: u64,
}

impl Cell {
    fn new(generation: u64, index: usize) -> Self {
        let index = index as u64;
        Cell {
            generation,
            index,
            check: Self::check_of(generation, index),
        }
    }

    fn check_of(generation: u64, index: u64) -> u64 {
        (generation.wrapping_mul(0x9E37_79B9_7F4A_7C15)) ^ index ^ 0x6b69_6e74_7375_6769
    }

    pub fn is_sound(&self, index: usize) -> bool {
        self.index == index as u64 && self.check == Self::check_of(self.generation, self.index)
    }
}

/// A fresh cluster with `n` objects of generation [`OLD`].
pub(super) struct World {
    pub map: ClusterMap,
    pub base: AnyTransport,
    pub heap: Heap,
    pub objs: Vec<TxObj<Cell>>,
    /// The memory nodes (tcp, rdma: their servers, stopped when the world goes).
    _memory: Memory,
}

fn config() -> TxConfig {
    TxConfig {
        attempts_max: super::ATTEMPTS_MAX,
        // Nobody here waits for a lease in real time (the clocks that must
        // see one expire run ahead): a blocked party only yields between
        // attempts, and gives up after `ATTEMPTS_MAX` of them.
        backoff_min: std::time::Duration::ZERO,
        backoff_max: std::time::Duration::ZERO,
        ..TxConfig::default()
    }
}

impl World {
    async fn new(replicas: u16, n: usize, transport: TransportKind) -> Result<World, String> {
        let memory = Memory::start(&MemorySpec {
            replicas,
            ..MemorySpec::single(transport, REGION_BYTES)
        })
        .map_err(|e| e.to_string())?;
        let first = memory.client().await.map_err(|e| e.to_string())?;
        let (map, base) = (first.map().clone(), first.transport().clone());
        let mut fabric = Client::new(map.clone(), base.clone());
        let heap_config = HeapConfig {
            owner_slots: OWNER_SLOTS,
            chunk_bytes: 16 * 1024,
        };
        let heap = Heap::format(&mut fabric, REGION, heap_config)
            .await
            .map_err(|e| e.to_string())?;
        let mut setup = TxClient::new(fabric, heap, SETUP, config()).map_err(|e| e.to_string())?;
        let mut objs = Vec::with_capacity(n);
        for i in 0..n {
            objs.push(
                setup
                    .create(&Cell::new(OLD, i))
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(World {
            map,
            base,
            heap,
            objs,
            _memory: memory,
        })
    }

    /// Verbs of the victim's transaction when nothing goes wrong.
    pub async fn victim_verbs(replicas: u16, n: usize, transport: TransportKind) -> Result<u64, String> {
        let w = World::new(replicas, n, transport).await?;
        let (victim, faults) = w.client(Party::Victim.owner(), FaultPlan::default())?;
        let (_, result) = rewrite_all(victim, w.objs.clone(), 1, Arc::default()).await;
        result.map_err(|e| format!("fault-free run failed: {e}"))?;
        Ok(faults.verbs_issued())
    }

    fn client(
        &self,
        owner: OwnerId,
        plan: FaultPlan,
    ) -> Result<(TxClient, Arc<Faulty<BaseTransport>>), String> {
        let (t, faults) = self.base.clone().with_faults(plan);
        let c = TxClient::new(Client::new(self.map.clone(), t), self.heap, owner, config())
            .map_err(|e| e.to_string())?;
        Ok((c, faults))
    }

    /// A client whose clock is past every lease any party takes.
    pub fn overseer(&self, owner: OwnerId) -> Result<TxClient, String> {
        let plan = FaultPlan {
            clock_skew_ms: 3 * SURVIVOR_SKEW_MS,
            ..FaultPlan::default()
        };
        Ok(self.client(owner, plan)?.0)
    }
}

/// The generation each object holds, read in `tx` (a torn or misplaced
/// cell as `u64::MAX`: validation tells whether the read counts).
async fn read_generations(tx: &mut txn::Tx<'_>, objs: &[TxObj<Cell>]) -> Result<Vec<u64>, TxError> {
    let mut read = Vec::with_capacity(objs.len());
    for (i, &o) in objs.iter().enumerate() {
        let cell = tx.read(o).await?;
        read.push(if cell.is_sound(i) {
            cell.generation
        } else {
            u64::MAX
        });
    }
    Ok(read)
}

/// Reads every object and rewrites it with `generation`. The reads of each
/// attempt are left in `seen` (a mix, or a torn cell as `u64::MAX`), so
/// that what a stopped party's commit read is known even if it never
/// returns.
async fn rewrite_all(
    mut c: TxClient,
    objs: Vec<TxObj<Cell>>,
    generation: u64,
    seen: Arc<Mutex<Option<Vec<u64>>>>,
) -> (TxClient, Result<(), TxError>) {
    let result = c
        .run(async move |tx| {
            let read = read_generations(tx, &objs).await?;
            *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(read);
            for (i, &o) in objs.iter().enumerate() {
                tx.write(o, &Cell::new(generation, i)).await?;
            }
            Ok(())
        })
        .await;
    (c, result)
}

/// A party's transaction, started.
pub(super) struct Handle {
    party: Party,
    generation: u64,
    faults: Arc<Faulty<BaseTransport>>,
    seen: Arc<Mutex<Option<Vec<u64>>>>,
    task: tokio::task::JoinHandle<(TxClient, Result<(), TxError>)>,
}

/// A party that stopped and will go on.
pub(super) enum Stopped {
    /// Paused in the middle of its transaction.
    Paused(Handle),
    /// Its transaction failed on a lost connection; it runs it again.
    Dropped(Party, Box<TxClient>),
}

/// What became of one transaction of a party.
#[derive(Clone, Debug)]
pub(super) struct Record {
    pub party: &'static str,
    pub owner: OwnerId,
    pub generation: u64,
    /// The generations its last attempt read.
    pub seen: Option<Vec<u64>>,
    /// Acknowledged (committed for sure), or not (it may have committed:
    /// a crash or a lost connection after its commit point).
    pub acknowledged: bool,
}

/// One run.
pub(super) struct Run {
    pub world: World,
    /// Violations found so far.
    pub found: Vec<String>,
    pub records: Vec<Record>,
    /// Parties paused right now.
    paused: Vec<Party>,
    /// Parties whose stop point was reached (they did not finish first).
    reached: Vec<Party>,
    /// Parties blocked by a paused one's live lock, to run again once
    /// everyone else went on.
    blocked: Vec<(Party, TxClient, u64)>,
    /// Owner ids stopped in the middle of something (crashed, failed, or
    /// cut off), which may have left a chunk recorded on some replicas only.
    interrupted: Vec<OwnerId>,
}

impl Run {
    pub async fn new(replicas: u16, n: usize, transport: TransportKind) -> Result<Run, String> {
        Ok(Run {
            world: World::new(replicas, n, transport).await?,
            found: Vec::new(),
            records: Vec::new(),
            paused: Vec::new(),
            reached: Vec::new(),
            blocked: Vec::new(),
            interrupted: Vec::new(),
        })
    }

    /// Starts `party`'s transaction with `plan` (its clock skew added).
    pub fn start(&mut self, party: Party, plan: FaultPlan) -> Handle {
        let plan = FaultPlan {
            clock_skew_ms: party.skew_ms(),
            ..plan
        };
        match self.world.client(party.owner(), plan) {
            Ok((client, faults)) => self.spawn(party, party.generation(), client, faults),
            Err(e) => {
                // Only a bad owner id fails here: a bug of this module.
                panic!("a client for {party:?}: {e}")
            }
        }
    }

    fn spawn(
        &self,
        party: Party,
        generation: u64,
        client: TxClient,
        faults: Arc<Faulty<BaseTransport>>,
    ) -> Handle {
        let seen = Arc::new(Mutex::new(None));
        let objs = self.world.objs.clone();
        let task = tokio::spawn(rewrite_all(client, objs, generation, seen.clone()));
        Handle {
            party,
            generation,
            faults,
            seen,
            task,
        }
    }

    /// Waits until `h` reaches its stop point, or finishes first.
    pub async fn stop(&mut self, h: Handle, stop: Stop) -> Result<Option<Stopped>, String> {
        if stop == Stop::Pause {
            let mut task = h.task;
            tokio::select! {
                () = h.faults.paused() => {
                    self.paused.push(h.party);
                    self.reached.push(h.party);
                    // What it read is known: a later acknowledgement may
                    // find its commit installed on top of what it read.
                    self.note(h.party, h.generation, &h.seen, false);
                    return Ok(Some(Stopped::Paused(Handle { task, ..h })));
                }
                done = &mut task => {
                    let (client, result) = done.map_err(|e| format!("{} panicked: {e}", h.party.name()))?;
                    self.ended(h.party, h.generation, &h.seen, client, result).await?;
                    return Ok(None);
                }
            }
        }
        let (client, result) = h
            .task
            .await
            .map_err(|e| format!("{} panicked: {e}", h.party.name()))?;
        match (&result, stop) {
            (Err(TxError::Fabric(FabricError::Crashed { .. })), Stop::Crash) => {
                self.reached.push(h.party);
                self.interrupted.push(h.party.owner());
                self.note(h.party, h.generation, &h.seen, false);
                Ok(None)
            }
            (Err(TxError::Fabric(FabricError::Disconnected { .. })), Stop::Dropped) => {
                self.reached.push(h.party);
                self.interrupted.push(h.party.owner());
                self.note(h.party, h.generation, &h.seen, false);
                Ok(Some(Stopped::Dropped(h.party, Box::new(client))))
            }
            _ => {
                self.ended(h.party, h.generation, &h.seen, client, result).await?;
                Ok(None)
            }
        }
    }

    /// True if `party` reached its stop point rather than finishing first.
    pub fn stopped_before_the_end(&self, party: Party) -> bool {
        self.reached.contains(&party)
    }

    /// Waits for a running party's transaction to end.
    pub async fn finish(&mut self, h: Handle) -> Result<(), String> {
        let (client, result) = h
            .task
            .await
            .map_err(|e| format!("{} panicked: {e}", h.party.name()))?;
        self.ended(h.party, h.generation, &h.seen, client, result).await
    }

    /// Lets stopped parties go on, one after the other, each to its end;
    /// then runs again those that a paused party's live lock blocked.
    pub async fn resume_in_order(&mut self, stopped: Vec<Stopped>) -> Result<(), String> {
        for s in stopped {
            match s {
                Stopped::Paused(h) => {
                    self.paused.retain(|&p| p != h.party);
                    h.faults.resume();
                    self.finish(h).await?;
                }
                Stopped::Dropped(party, client) => {
                    let faults = faults_of(&client)?;
                    let h = self.spawn(party, VICTIM_AGAIN, *client, faults);
                    self.finish(h).await?;
                }
            }
        }
        if self.paused.is_empty() {
            for (party, client, generation) in std::mem::take(&mut self.blocked) {
                let faults = faults_of(&client)?;
                let h = self.spawn(party, generation, client, faults);
                self.finish(h).await?;
            }
        }
        Ok(())
    }

    fn note(&mut self, party: Party, generation: u64, seen: &Mutex<Option<Vec<u64>>>, acknowledged: bool) {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(s) = &seen {
            if s.iter().any(|&g| g != s[0]) {
                self.found
                    .push(format!("{} read a mix of generations {s:?}", party.name()));
            }
        }
        self.records
            .retain(|r| !(r.owner == party.owner() && r.generation == generation));
        self.records.push(Record {
            party: party.name(),
            owner: party.owner(),
            generation,
            seen,
            acknowledged,
        });
    }

    /// A party's transaction returned.
    async fn ended(
        &mut self,
        party: Party,
        generation: u64,
        seen: &Mutex<Option<Vec<u64>>>,
        client: TxClient,
        result: Result<(), TxError>,
    ) -> Result<(), String> {
        match result {
            Ok(()) => {
                self.note(party, generation, seen, true);
                let mut found =
                    check::acknowledged_everywhere(&self.world, &self.records, generation, party.name())
                        .await?;
                found.extend(check::free_blocks_unnamed(&self.world, &client, party.name()).await?);
                self.found.extend(found);
            }
            Err(TxError::InDoubt(_)) => {
                // An Opt1 commit fenced while a backup held its pointer
                // (docs/txn.md §8): not acknowledged and not run again;
                // whichever way its repairer settles it is right.
                self.note(party, generation, seen, false);
                self.interrupted.push(party.owner());
            }
            Err(TxError::TooManyAborts { .. }) if !self.paused.is_empty() => {
                // A paused party holds a lock whose lease is live for this
                // one: waiting is right. It runs again once all went on.
                self.blocked.push((party, client, generation));
            }
            Err(e) => {
                self.note(party, generation, seen, false);
                self.interrupted.push(party.owner());
                self.found.push(format!("{} failed: {e}", party.name()));
            }
        }
        Ok(())
    }

    /// The end of a run: recovery finishes the logs of parties gone for
    /// good, a checker meets every object, and everything is checked.
    pub async fn judge(mut self) -> Result<Vec<String>, String> {
        for (party, _, _) in &self.blocked {
            self.found
                .push(format!("{} stayed blocked after everyone went on", party.name()));
        }
        let mut recovery = self.world.overseer(RECOVERY)?;
        for owner in [Party::Victim, Party::Repairer, Party::Third].map(Party::owner) {
            if let Err(e) = recovery.finish_owner_log(owner).await {
                self.found
                    .push(format!("recovery could not finish owner {owner}'s log: {e}"));
            }
        }
        let mut checker = self.world.overseer(CHECKER)?;
        let objs = self.world.objs.clone();
        let final_read = checker.run(async |tx| read_generations(tx, &objs).await).await;
        let final_read = match final_read {
            Ok(read) => read,
            Err(e) => {
                self.found
                    .push(format!("the checker could not read every object: {e}"));
                return Ok(self.found);
            }
        };
        if final_read.iter().any(|&g| g != final_read[0]) {
            self.found
                .push(format!("the objects hold a mix of generations {final_read:?}"));
        }
        self.found.extend(check::history(&self.records, final_read[0]));
        self.found
            .extend(check::replicas_agree(&self.world, &self.interrupted).await?);
        Ok(self.found)
    }
}

/// The fault handle of a party's client (every party runs with one).
fn faults_of(client: &TxClient) -> Result<Arc<Faulty<BaseTransport>>, String> {
    match client.fabric_ref().transport() {
        AnyTransport::Faulty(f) => Ok(f.clone()),
        AnyTransport::Base(_) => Err("a party's client runs without fault injection".into()),
    }
}

/// Reads `len` bytes at `addr` on every replica.
pub(super) async fn read_all(
    fabric: &mut Client,
    addr: fabric::GlobalAddr,
    len: u32,
) -> Result<Vec<Vec<u8>>, String> {
    fabric
        .read_range(addr, u64::from(len), Replica::All)
        .await
        .map_err(|e| e.to_string())
}
