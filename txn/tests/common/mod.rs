//! Helpers shared by the txn integration tests: a cluster with a formatted
//! heap, clients with injected faults, and raw views of what is in DM (meta
//! words per replica, log slots, data) read with fabric verbs, outside any
//! transaction.

#![allow(dead_code)]

use std::sync::Arc;

use fabric::{
    BaseTransport, Batch, Client, FaultPlan, Faulty, GlobalAddr, LocalTransport, RegionSpec, Replica,
};
use txn::log::{Log, LOG_SLOT_BYTES};
use txn::word::{LogHeader, LogState};
use txn::{DataPtr, Heap, HeapConfig, LockWord, OwnerId, TxClient, TxConfig, TxObj};

/// The region every test heap lives in.
pub const REGION: u16 = 1;
/// Bytes of that region on every node.
pub const REGION_BYTES: u64 = 4 << 20;
/// The owner id that creates objects for a test and runs nothing else (the
/// last log slot of a default heap).
pub const SETUP_OWNER: OwnerId = 255;
/// A clock skew that makes every lease taken in real time look expired at
/// once (and every lease taken with it look live for a minute).
pub const SKEW_MS: i64 = 60_000;

/// An in-process cluster of `replicas` memory nodes holding one region
/// (replication factor `replicas`), formatted as a heap.
pub struct Cluster {
    /// A client without faults (setup, inspection).
    pub fabric: Client,
    /// The heap.
    pub heap: Heap,
}

impl Cluster {
    /// A cluster with replication factor `replicas`.
    pub async fn new(replicas: u16) -> Cluster {
        let (t, map) = LocalTransport::cluster(
            replicas,
            &[RegionSpec {
                id: REGION,
                size: REGION_BYTES,
            }],
        )
        .unwrap();
        let mut fabric = Client::new(map, t.into());
        let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
            .await
            .unwrap();
        Cluster { fabric, heap }
    }

    /// A cluster of `replicas` memory nodes served over tcp on loopback,
    /// in this runtime, until it ends.
    pub async fn new_tcp(replicas: u16) -> Cluster {
        let regions = [RegionSpec {
            id: REGION,
            size: REGION_BYTES,
        }];
        let mut addrs = Vec::new();
        for id in 1..=replicas {
            let node = Arc::new(fabric::MemoryNode::anonymous(id, &regions).unwrap());
            let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
            tokio::spawn(fabric::server::serve(listener, node, std::future::pending()));
            addrs.push(addr.to_string());
        }
        let (t, map) = fabric::TcpTransport::discover(&addrs).await.unwrap();
        let mut fabric = Client::new(map, t.into());
        let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
            .await
            .unwrap();
        Cluster { fabric, heap }
    }

    /// A transaction client as `owner`, without faults.
    pub fn client(&self, owner: OwnerId) -> TxClient {
        self.client_with(owner, TxConfig::default())
    }

    /// A transaction client as `owner` with `config`, without faults.
    pub fn client_with(&self, owner: OwnerId, config: TxConfig) -> TxClient {
        TxClient::new(self.fabric.fork(), self.heap, owner, config).unwrap()
    }

    /// A transaction client as `owner` whose fabric runs `plan`, and the
    /// handle on its faults.
    pub fn faulty(&self, owner: OwnerId, plan: FaultPlan) -> (TxClient, Arc<Faulty<BaseTransport>>) {
        self.faulty_with(owner, plan, TxConfig::default())
    }

    /// Same, with `config`.
    pub fn faulty_with(
        &self,
        owner: OwnerId,
        plan: FaultPlan,
        config: TxConfig,
    ) -> (TxClient, Arc<Faulty<BaseTransport>>) {
        let (t, faults) = self.fabric.transport().clone().with_faults(plan);
        let fabric = Client::new(self.fabric.map().clone(), t);
        (TxClient::new(fabric, self.heap, owner, config).unwrap(), faults)
    }

    /// A DTX client as `owner`, without faults.
    pub fn dtx(&self, owner: OwnerId) -> txn::dtx::DtxClient {
        txn::dtx::DtxClient::new(self.fabric.fork(), self.heap, owner, TxConfig::default()).unwrap()
    }

    /// A DTX client as `owner` whose fabric runs `plan`, and the handle on
    /// its faults.
    pub fn dtx_faulty(
        &self,
        owner: OwnerId,
        plan: FaultPlan,
    ) -> (txn::dtx::DtxClient, Arc<Faulty<BaseTransport>>) {
        let (t, faults) = self.fabric.transport().clone().with_faults(plan);
        let fabric = Client::new(self.fabric.map().clone(), t);
        let c = txn::dtx::DtxClient::new(fabric, self.heap, owner, TxConfig::default()).unwrap();
        (c, faults)
    }

    /// A client whose clock runs `SKEW_MS` ahead: every lease taken in real
    /// time looks expired to it.
    pub fn skewed(&self, owner: OwnerId) -> TxClient {
        self.skewed_by(owner, SKEW_MS)
    }

    /// A client whose clock runs `ms` ahead.
    pub fn skewed_by(&self, owner: OwnerId, ms: i64) -> TxClient {
        self.faulty(owner, skew(ms)).0
    }

    /// The replication factor.
    pub fn replicas(&self) -> usize {
        self.fabric.map().region(REGION).unwrap().replicas.len()
    }

    /// Creates one u64 object per value, through `SETUP_OWNER`.
    pub async fn accounts(&self, values: &[u64]) -> Vec<TxObj<u64>> {
        self.accounts_of(SETUP_OWNER, values).await
    }

    /// Objects holding `values`, created by owner id `owner`: their first
    /// blocks lie in its chunks.
    pub async fn accounts_of(&self, owner: u16, values: &[u64]) -> Vec<TxObj<u64>> {
        let mut c = self.client(owner);
        let mut objs = Vec::new();
        for v in values {
            objs.push(c.create(v).await.unwrap());
        }
        objs
    }

    /// The meta words of `obj` on replica `i` (0 = primary).
    pub async fn meta_on(&self, obj: TxObj<u64>, i: usize) -> (LockWord, DataPtr) {
        let mut f = self.fabric.fork();
        let mut b = Batch::new();
        let h = b.on(Replica::All).read(obj.meta(), 16);
        f.execute(&mut b).await.unwrap();
        let bytes = b.read_result_of(h, i).unwrap();
        (
            LockWord::from_raw(word(bytes, 0)),
            DataPtr::from_raw(word(bytes, 8)),
        )
    }

    /// The meta words of `obj` on the primary.
    pub async fn meta(&self, obj: TxObj<u64>) -> (LockWord, DataPtr) {
        self.meta_on(obj, 0).await
    }

    /// The lock word of `obj` on the primary.
    pub async fn lock(&self, obj: TxObj<u64>) -> LockWord {
        self.meta(obj).await.0
    }

    /// The value `obj` holds on replica `i`, following that replica's pointer.
    pub async fn value_on(&self, obj: TxObj<u64>, i: usize) -> u64 {
        let (_, dptr) = self.meta_on(obj, i).await;
        self.block_on(dptr.offset(), i).await
    }

    /// The value `obj` holds on the primary.
    pub async fn value(&self, obj: TxObj<u64>) -> u64 {
        self.value_on(obj, 0).await
    }

    /// The u64 in the data block at `offset` on replica `i`.
    pub async fn block_on(&self, offset: u64, i: usize) -> u64 {
        let mut f = self.fabric.fork();
        let mut b = Batch::new();
        let h = b.on(Replica::All).read(GlobalAddr::new(REGION, offset), 8);
        f.execute(&mut b).await.unwrap();
        word(b.read_result_of(h, i).unwrap(), 0)
    }

    /// Asserts that every replica of `obj` points at a block holding the
    /// primary's value, and returns it.
    pub async fn replicated_value(&self, obj: TxObj<u64>) -> u64 {
        let v = self.value(obj).await;
        for i in 1..self.replicas() {
            assert_eq!(
                self.value_on(obj, i).await,
                v,
                "replica {i} of {obj:?} disagrees with the primary"
            );
        }
        v
    }

    /// The log slot of `owner` on the primary, decoded (`None`: never written).
    pub async fn log(&self, owner: OwnerId) -> Option<Log> {
        let mut f = self.fabric.fork();
        let mut b = Batch::new();
        let h = b.read(self.heap.log_slot(owner).unwrap(), LOG_SLOT_BYTES as u32);
        f.execute(&mut b).await.unwrap();
        Log::decode(b.read_result(h).unwrap())
    }

    /// The state and checksum of `owner`'s log slot.
    pub async fn log_state(&self, owner: OwnerId) -> (LogState, LockWord) {
        let log = self.log(owner).await.expect("a decodable log slot");
        (log.header.state(), log.checksum)
    }

    /// The log header words of `owner`'s slot on every replica.
    pub async fn log_headers(&self, owner: OwnerId) -> Vec<LogHeader> {
        let mut f = self.fabric.fork();
        let mut b = Batch::new();
        let h = b.on(Replica::All).read(self.heap.log_slot(owner).unwrap(), 8);
        f.execute(&mut b).await.unwrap();
        (0..self.replicas())
            .map(|i| LogHeader::from_raw(word(b.read_result_of(h, i).unwrap(), 0)).unwrap())
            .collect()
    }

    /// Asserts that no object of `objs` is locked on the primary.
    pub async fn assert_unlocked(&self, objs: &[TxObj<u64>]) {
        for &o in objs {
            let l = self.lock(o).await;
            assert!(!l.is_locked(), "{o:?} is left locked: {l:?}");
        }
    }

    /// The values of `objs`, read in one transaction by a fresh client.
    pub async fn read_all(&self, owner: OwnerId, objs: &[TxObj<u64>]) -> Vec<u64> {
        let mut c = self.client(owner);
        let objs = objs.to_vec();
        c.run(async |tx| {
            let mut out = Vec::with_capacity(objs.len());
            for &o in &objs {
                out.push(tx.read(o).await?);
            }
            Ok(out)
        })
        .await
        .unwrap()
    }
}

/// A fault plan that only skews the clock.
pub fn skew(ms: i64) -> FaultPlan {
    FaultPlan {
        clock_skew_ms: ms,
        ..FaultPlan::default()
    }
}

/// A fault plan that crashes after the `n`-th verb.
pub fn crash_after(n: u64) -> FaultPlan {
    FaultPlan {
        crash_after_verbs: Some(n),
        ..FaultPlan::default()
    }
}

/// A fault plan that pauses after the `n`-th verb until resumed.
pub fn pause_after(n: u64) -> FaultPlan {
    FaultPlan {
        pause_after_verbs: Some(n),
        ..FaultPlan::default()
    }
}

/// A little-endian word of READ bytes (the fabric's one reader).
pub use fabric::le_word as word;

/// True when `e` is the fabric telling a client that fault injection
/// crashed it.
pub fn is_crash(e: &txn::TxError) -> bool {
    matches!(e, txn::TxError::Fabric(fabric::FabricError::Crashed { .. }))
}

/// Where a fresh client's verbs fall in its first transaction, a
/// read-modify-write of `n` objects it did not create, at replication
/// factor `rf`: the count of verbs issued at the end of each step, for
/// `FaultPlan::crash_after_verbs` / `pause_after_verbs`. Derived from
/// commit.rs's RT1..RT4; each test asserts the DM state it expects at the
/// chosen point, so a wrong mark fails loudly.
#[derive(Clone, Copy, Debug)]
pub struct Marks {
    /// Execution: READ meta + READ data per object.
    pub exec: u64,
    /// After the first data block allocation (the client's first chunk:
    /// [`first_chunk_verbs`]).
    pub alloc: u64,
    /// After RT1's first lock CAS (data and log written).
    pub first_lock: u64,
    /// After RT1: data and log written, every lock held.
    pub rt1: u64,
    /// After RT3 (log DOING); equal to `rt1` without a log.
    pub rt3: u64,
    /// After RT4's first pointer CAS: object 0's on the primary, except in
    /// a replicated Opt1 commit, where the backups' come first.
    pub first_ptr: u64,
    /// After the last verb of the commit.
    pub end: u64,
}

/// The heap's next-chunk counter, on the primary.
pub async fn next_chunk(cluster: &Cluster) -> u64 {
    let mut f = cluster.fabric.fork();
    let mut b = Batch::new();
    let h = b.read(cluster.heap.next_chunk_addr(), 8);
    f.execute(&mut b).await.unwrap();
    word(b.read_result(h).unwrap(), 0)
}

/// Verbs of a client's first chunk of data blocks: the runs a reclaim left
/// its owner id taken (the head read, and zeroed on every replica), then
/// the FAA and the owner-table WRITE on every replica.
pub fn first_chunk_verbs(rf: u64) -> u64 {
    1 + rf + rf + rf
}

/// The marks of a transaction writing `n` objects at replication `rf`,
/// logged or not (Opt1).
pub fn marks(n: u64, rf: u64, logged: bool) -> Marks {
    let exec = 2 * n;
    let alloc = exec + first_chunk_verbs(rf);
    let rt1 = alloc + n * rf + if logged { rf } else { 0 } + n;
    let first_lock = rt1 - n + 1;
    let rt3 = if logged { rt1 + rf } else { rt1 };
    let first_ptr = rt3 + 1;
    let end = match (logged, rf) {
        // pointers + releases + DONE
        (true, 1) => rt3 + n + n + 1,
        // pointers on every replica; releases + DONE on every replica
        (true, _) => rt3 + rf * n + n + rf,
        // pointer + release
        (false, 1) => rt3 + 2,
        // backup pointers; primary pointer + release
        (false, _) => rt3 + (rf - 1) + 2,
    };
    Marks {
        exec,
        alloc,
        first_lock,
        rt1,
        rt3,
        first_ptr,
        end,
    }
}

/// The transaction the crash and pause tests interrupt: object 0 gives 10
/// to each other object (with one object, it gains 10). The sum of a
/// multi-object write set is unchanged whether it happened or not.
pub async fn spread(c: &mut TxClient, objs: Vec<TxObj<u64>>) -> Result<(), txn::TxError> {
    c.run(async move |tx| {
        let mut vals = Vec::with_capacity(objs.len());
        for &o in &objs {
            vals.push(tx.read(o).await?);
        }
        let n = objs.len() as u64;
        let first = if n == 1 {
            vals[0] + 10
        } else {
            vals[0] - 10 * (n - 1)
        };
        tx.write(objs[0], &first).await?;
        for (i, &o) in objs.iter().enumerate().skip(1) {
            tx.write(o, &(vals[i] + 10)).await?;
        }
        Ok(())
    })
    .await
}

/// The values `spread` leaves when it happened on top of `before`.
pub fn spread_values(before: &[u64]) -> Vec<u64> {
    let n = before.len() as u64;
    let mut v = before.to_vec();
    if n == 1 {
        v[0] += 10;
    } else {
        v[0] -= 10 * (n - 1);
        for x in &mut v[1..] {
            *x += 10;
        }
    }
    v
}

/// Adds 1 to every object in one transaction (the survivor's transaction).
pub async fn bump_all(c: &mut TxClient, objs: &[TxObj<u64>]) -> Result<(), txn::TxError> {
    let objs = objs.to_vec();
    c.run(async move |tx| {
        for &o in &objs {
            let v = tx.read(o).await?;
            tx.write(o, &(v + 1)).await?;
        }
        Ok(())
    })
    .await
}

/// A transaction task stopped by `FaultPlan::pause_after_verbs`.
pub struct Paused {
    /// The paused client's faults.
    pub faults: Arc<Faulty<BaseTransport>>,
    /// The task running the transaction.
    pub task: tokio::task::JoinHandle<Result<(), txn::TxError>>,
}

impl Paused {
    /// Resumes the client and waits for its transaction to commit.
    pub async fn finish(self) {
        self.faults.resume();
        self.task.await.unwrap().unwrap();
    }
}
