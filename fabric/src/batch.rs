//! Batches: verbs posted together and executed in one round trip.
//!
//! Build a batch with [`Batch::read`], [`Batch::write`], [`Batch::cas`],
//! [`Batch::faa`] and [`Batch::flush`] (aimed at the primary) or through
//! [`Batch::on`] for another replica target, execute it with
//! [`Client::execute`](crate::Client::execute), then read each verb's result
//! through the [`VerbHandle`] its push returned. A batch keeps its buffers
//! when cleared, so a client that reuses one allocates nothing per round trip.

use crate::addr::{GlobalAddr, RegionId, Replica};
use crate::error::FabricError;
use crate::map::{ClusterMap, ReplicaLoc};
use crate::verb::{
    Completion, Completions, Op, OpKind, Outcome, PayloadRange, VerbError, BATCH_BYTES_MAX,
    VERBS_PER_BATCH_MAX,
};

/// Names one verb of a batch, to read its result after execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbHandle(u32);

#[derive(Clone, Copy, Debug)]
struct Verb {
    addr: GlobalAddr,
    replica: Replica,
    kind: OpKind,
}

/// A list of verbs executed as one round trip.
#[derive(Debug, Default)]
pub struct Batch {
    verbs: Vec<Verb>,
    payload: Vec<u8>,
    /// Filled by routing: one op per (verb, replica).
    ops: Vec<Op>,
    /// Per verb: index of its first op, number of ops.
    spans: Vec<(u32, u32)>,
    pub(crate) out: Completions,
}

/// Pushes verbs aimed at one replica target; see [`Batch::on`].
pub struct On<'a> {
    batch: &'a mut Batch,
    replica: Replica,
}

impl On<'_> {
    /// READ `len` bytes at `addr`.
    pub fn read(self, addr: GlobalAddr, len: u32) -> VerbHandle {
        self.batch.push(addr, self.replica, OpKind::Read { len })
    }

    /// WRITE `data` at `addr`.
    pub fn write(self, addr: GlobalAddr, data: &[u8]) -> VerbHandle {
        let start = self.batch.payload.len();
        self.batch.payload.extend_from_slice(data);
        let data = PayloadRange {
            start: u32::try_from(start).unwrap_or(u32::MAX),
            len: u32::try_from(data.len()).unwrap_or(u32::MAX),
        };
        self.batch.push(addr, self.replica, OpKind::Write { data })
    }

    /// CAS the 8-byte word at `addr` from `expect` to `new`.
    pub fn cas(self, addr: GlobalAddr, expect: u64, new: u64) -> VerbHandle {
        self.batch.push(addr, self.replica, OpKind::Cas { expect, new })
    }

    /// FAA `add` to the 8-byte word at `addr`.
    pub fn faa(self, addr: GlobalAddr, add: u64) -> VerbHandle {
        self.batch.push(addr, self.replica, OpKind::Faa { add })
    }

    /// Make `len` bytes at `addr` durable.
    pub fn flush(self, addr: GlobalAddr, len: u32) -> VerbHandle {
        self.batch.push(addr, self.replica, OpKind::Flush { len })
    }
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.verbs.clear();
        self.payload.clear();
        self.ops.clear();
        self.spans.clear();
        self.out.clear();
    }

    /// Verbs pushed (before `Replica::All` expansion).
    pub fn len(&self) -> usize {
        self.verbs.len()
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.verbs.is_empty()
    }

    /// Aims the next verb at `replica`.
    pub fn on(&mut self, replica: Replica) -> On<'_> {
        On { batch: self, replica }
    }

    /// READ from the primary.
    pub fn read(&mut self, addr: GlobalAddr, len: u32) -> VerbHandle {
        self.on(Replica::Primary).read(addr, len)
    }

    /// WRITE to the primary.
    pub fn write(&mut self, addr: GlobalAddr, data: &[u8]) -> VerbHandle {
        self.on(Replica::Primary).write(addr, data)
    }

    /// CAS on the primary.
    pub fn cas(&mut self, addr: GlobalAddr, expect: u64, new: u64) -> VerbHandle {
        self.on(Replica::Primary).cas(addr, expect, new)
    }

    /// FAA on the primary.
    pub fn faa(&mut self, addr: GlobalAddr, add: u64) -> VerbHandle {
        self.on(Replica::Primary).faa(addr, add)
    }

    /// FLUSH on the primary.
    pub fn flush(&mut self, addr: GlobalAddr, len: u32) -> VerbHandle {
        self.on(Replica::Primary).flush(addr, len)
    }

    fn push(&mut self, addr: GlobalAddr, replica: Replica, kind: OpKind) -> VerbHandle {
        let h = VerbHandle(u32::try_from(self.verbs.len()).unwrap_or(u32::MAX));
        self.verbs.push(Verb { addr, replica, kind });
        h
    }

    /// Resolves every verb to ops on concrete replicas and checks the batch
    /// limits. Called by the client right before execution.
    pub(crate) fn route(&mut self, map: &ClusterMap) -> Result<(), FabricError> {
        self.ops.clear();
        self.spans.clear();
        self.out.clear();
        if self.payload.len() as u64 > BATCH_BYTES_MAX {
            return Err(FabricError::BatchTooLarge {
                what: format!(
                    "{} bytes of WRITE data, at most {BATCH_BYTES_MAX}",
                    self.payload.len()
                ),
            });
        }
        // Consecutive verbs mostly share a target: route it once for them.
        let mut last: Option<(RegionId, Replica, &[ReplicaLoc])> = None;
        for v in &self.verbs {
            let replicas = match last {
                Some((region, replica, replicas)) if region == v.addr.region() && replica == v.replica => {
                    replicas
                }
                _ => {
                    let replicas = map.route(v.addr.region(), v.replica)?;
                    last = Some((v.addr.region(), v.replica, replicas));
                    replicas
                }
            };
            self.spans.push((self.ops.len() as u32, replicas.len() as u32));
            for r in replicas {
                self.ops.push(Op {
                    node: r.node,
                    region: v.addr.region(),
                    key: r.key,
                    offset: v.addr.offset(),
                    kind: v.kind,
                });
            }
        }
        if self.ops.len() > VERBS_PER_BATCH_MAX {
            return Err(FabricError::BatchTooLarge {
                what: format!("{} verbs, at most {VERBS_PER_BATCH_MAX}", self.ops.len()),
            });
        }
        Ok(())
    }

    /// The routed ops and the WRITE payload they point into.
    pub(crate) fn parts(&mut self) -> (&[Op], &[u8], &mut Completions) {
        (&self.ops, &self.payload, &mut self.out)
    }

    /// The routed ops of the last execution.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Completions of a verb: one per replica it was aimed at, primary first.
    ///
    /// # Panics
    /// If the batch has not been executed since the verb was pushed.
    pub fn completions(&self, h: VerbHandle) -> &[Completion] {
        let (start, count) = self.spans[h.0 as usize];
        &self.out.as_slice()[start as usize..(start + count) as usize]
    }

    /// The completion of a verb on its first (or only) replica.
    pub fn completion(&self, h: VerbHandle) -> Completion {
        self.completions(h)[0]
    }

    /// The bytes a READ brought back (from its first replica).
    pub fn read_result(&self, h: VerbHandle) -> Result<&[u8], VerbError> {
        self.read_result_of(h, 0)
    }

    /// The bytes a READ aimed at several replicas brought back from the
    /// `i`-th of them.
    pub fn read_result_of(&self, h: VerbHandle, i: usize) -> Result<&[u8], VerbError> {
        match self.completions(h)[i]? {
            Outcome::Read(range) => Ok(self.out.read_data(range)),
            other => panic!("verb {h:?} is not a READ: {other:?}"),
        }
    }

    /// The old value a CAS or FAA returned (from its first replica).
    pub fn old_value(&self, h: VerbHandle) -> Result<u64, VerbError> {
        self.old_value_of(h, 0)
    }

    /// The old value a CAS or FAA aimed at several replicas returned on the
    /// `i`-th of them.
    pub fn old_value_of(&self, h: VerbHandle, i: usize) -> Result<u64, VerbError> {
        match self.completions(h)[i]? {
            Outcome::Old(v) => Ok(v),
            other => panic!("verb {h:?} is not a CAS or FAA: {other:?}"),
        }
    }

    /// For a CAS: whether it swapped on every replica it was aimed at.
    pub fn cas_succeeded(&self, h: VerbHandle) -> Result<bool, VerbError> {
        let kind = self.verbs[h.0 as usize].kind;
        assert!(matches!(kind, OpKind::Cas { .. }), "verb {h:?} is not a CAS");
        let mut all = true;
        for c in self.completions(h) {
            (*c)?;
            all &= kind.cas_swapped(c);
        }
        Ok(all)
    }

    /// The first error completion of the last execution, if any verb failed.
    pub fn first_error(&self) -> Option<VerbError> {
        self.out.as_slice().iter().find_map(|c| c.err())
    }

    /// `Ok` when the verb succeeded on every replica it was aimed at.
    pub fn done(&self, h: VerbHandle) -> Result<(), VerbError> {
        for c in self.completions(h) {
            (*c)?;
        }
        Ok(())
    }
}
