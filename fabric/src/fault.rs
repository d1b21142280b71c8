//! Fault injection, as a transport that wraps another.
//!
//! Faults are those a client on disaggregated memory really suffers: it dies
//! between two verbs (after the N-th verb, or at a named point of its
//! protocol) leaving whatever it had written; one of its WRITEs is delayed in
//! the network past later verbs ("fly WRITE", rTX §4.2); its round trips are
//! slow; its clock is off.
//!
//! A crashed client never issues another verb: every later batch and crash
//! point fails with [`FabricError::Crashed`]. The wrapper is shared by all
//! forks of a client, so a crash kills the whole client, as a process crash
//! would.

use std::sync::Mutex;
use std::time::Duration;

use crate::addr::Epoch;
use crate::error::FabricError;
use crate::transport::Transport;
use crate::verb::{Completions, Op, OpKind, Outcome, PayloadRange};

/// What to inject. The default injects nothing.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Crash right after the client's N-th verb (counting from 1, each
    /// replica of an `All` verb separately). The batch holding that verb runs
    /// up to and including it; the client then sees `Crashed`.
    pub crash_after_verbs: Option<u64>,
    /// Stop right after the client's N-th verb until [`Faulty::resume`] is
    /// called (the rest of that batch runs after the resume): a client
    /// descheduled past its lease, suspected dead, that then carries on.
    /// Pauses once.
    pub pause_after_verbs: Option<u64>,
    /// Drop the client's connections right after its N-th verb: the batch
    /// holding that verb runs up to and including it, the rest of it is
    /// never sent, and the client sees `Disconnected` for that batch. It is
    /// not crashed: its next batch connects again (tcp reconnects; other
    /// transports have no connection to lose). Drops once.
    pub drop_after_verbs: Option<u64>,
    /// Crash when protocol code reaches any of these named points.
    pub crash_points: Vec<String>,
    /// Hold one WRITE back while later verbs run.
    pub fly_write: Option<FlyWrite>,
    /// Added to every round trip.
    pub latency_per_round_trip: Duration,
    /// Added to the client's clock, in milliseconds (may be negative).
    pub clock_skew_ms: i64,
}

/// Which WRITE to delay and for how long.
#[derive(Clone, Copy, Debug)]
pub struct FlyWrite {
    /// The client's N-th WRITE verb (counting from 1).
    pub nth_write: u64,
    /// It lands after this many further batches have executed (0: at the end
    /// of its own batch, after that batch's other verbs). The client
    /// sees it complete at once, as with an RDMA WRITE whose completion is
    /// reported before the data reaches memory.
    pub after_batches: u32,
}

#[derive(Debug, Default)]
struct Gate {
    paused: tokio::sync::Notify,
    resume: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    verbs: u64,
    writes: u64,
    crashed: Option<String>,
    /// The connection drop of the plan has happened.
    dropped: bool,
    flying: Option<Flying>,
    paused: bool,
    /// Crash right after the next CAS (see [`Faulty::arm_crash_after_next_cas`]).
    crash_after_next_cas: bool,
    /// Called once the next batch with a CAS has run (see
    /// [`Faulty::arm_after_next_cas`]).
    after_next_cas: Option<AfterCas>,
    /// Which swapping CASes fire `after_next_cas` (`None`: any), by their
    /// expected and new words.
    after_cas_filter: Option<fn(u64, u64) -> bool>,
}

/// What runs once the next batch holding a CAS has run.
struct AfterCas(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for AfterCas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterCas")
    }
}

#[derive(Debug)]
struct Flying {
    op: Op,
    data: Vec<u8>,
    epoch: Epoch,
    batches_left: u32,
}

/// A transport with faults injected.
#[derive(Debug)]
pub struct Faulty<T> {
    inner: T,
    plan: FaultPlan,
    state: Mutex<State>,
    gate: Gate,
    /// The clock skew now: the plan's at first, changed by
    /// [`Faulty::set_clock_skew_ms`] (a skew that starts mid-run). Read on
    /// every clock reading, so an atomic rather than the state's lock.
    skew_ms: std::sync::atomic::AtomicI64,
    /// The node whose WRITEs are acknowledged and never sent
    /// ([`Faulty::drop_writes_to`]), or [`NO_NODE`].
    drop_writes_to: std::sync::atomic::AtomicU32,
}

/// No node: nothing dropped.
const NO_NODE: u32 = u32::MAX;

impl<T: Transport> Faulty<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, plan: FaultPlan) -> Self {
        let plan_skew = plan.clock_skew_ms;
        Faulty {
            inner,
            plan,
            state: Mutex::new(State::default()),
            gate: Gate::default(),
            skew_ms: std::sync::atomic::AtomicI64::new(plan_skew),
            drop_writes_to: std::sync::atomic::AtomicU32::new(NO_NODE),
        }
    }

    /// From now on, every WRITE to `node` (`None`: none) is reported done
    /// and never sent: a replica's writes lost on the way, the sabotage a
    /// chaos campaign must catch (replicas that differ, data a promotion
    /// loses). Other verbs to the node, and every verb to other nodes, run.
    pub fn drop_writes_to(&self, node: Option<crate::NodeId>) {
        let n = node.map_or(NO_NODE, u32::from);
        self.drop_writes_to.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Puts the client's clock `ms` ahead of the real one (behind if
    /// negative) from now on.
    pub fn set_clock_skew_ms(&self, ms: i64) {
        self.skew_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a bug in this
        // module; the counters are still meaningful, so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Waits until the client has paused (see `FaultPlan::pause_after_verbs`).
    pub async fn paused(&self) {
        self.gate.paused.notified().await
    }

    /// Lets a paused client carry on.
    pub fn resume(&self) {
        self.gate.resume.notify_one()
    }

    /// From now on, crash right after the client's next CAS verb that
    /// swaps: a client that dies just after taking a lock (or publishing a
    /// slot), mid-operation. A CAS that fails (a lock lost to another
    /// client) leaves the crash armed, so the client never dies holding
    /// nothing by chance. Armed at run time (a plan is fixed at creation) by
    /// whoever decides that the client dies now, such as a chaos
    /// experiment's schedule.
    pub fn arm_crash_after_next_cas(&self) {
        self.state().crash_after_next_cas = true;
    }

    /// From now on, run `hook` once the client's next batch holding a CAS
    /// that swapped has run whole, in the thread that ran it: a client that
    /// stops just after taking a lock, mid-operation, and carries on when it
    /// can (a chaos experiment's pause-client raises SIGSTOP there).
    /// Replaces a hook not yet run.
    pub fn arm_after_next_cas(&self, hook: impl FnOnce() + Send + 'static) {
        let mut s = self.state();
        s.after_next_cas = Some(AfterCas(Box::new(hook)));
        s.after_cas_filter = None;
    }

    /// [`Faulty::arm_after_next_cas`], for the next swapping CAS whose
    /// expected and new words satisfy `which` only: a caller that knows
    /// what a lock word looks like stops the client right after it takes
    /// one (the fabric does not know lock words).
    pub fn arm_after_next_cas_where(
        &self,
        which: fn(u64, u64) -> bool,
        hook: impl FnOnce() + Send + 'static,
    ) {
        let mut s = self.state();
        s.after_next_cas = Some(AfterCas(Box::new(hook)));
        s.after_cas_filter = Some(which);
    }

    /// Why the client crashed, if it did.
    pub fn crashed(&self) -> Option<String> {
        self.state().crashed.clone()
    }

    /// Verbs that reached the inner transport (or are flying).
    pub fn verbs_issued(&self) -> u64 {
        self.state().verbs
    }

    /// True while a delayed WRITE has not landed.
    pub fn write_in_flight(&self) -> bool {
        self.state().flying.is_some()
    }

    /// Lands the delayed WRITE now, if one is in flight, even if the client
    /// has crashed since: a WRITE already in the network arrives whether or
    /// not its sender is alive.
    pub async fn land_flying_write(&self) -> Result<(), FabricError> {
        let flying = self.state().flying.take();
        match flying {
            Some(f) => self.land(f).await,
            None => Ok(()),
        }
    }

    async fn land(&self, f: Flying) -> Result<(), FabricError> {
        let op = Op {
            kind: OpKind::Write {
                data: PayloadRange {
                    start: 0,
                    len: f.data.len() as u32,
                },
            },
            ..f.op
        };
        let mut out = Completions::default();
        self.inner.execute(f.epoch, &[op], &f.data, &mut out).await
    }

    fn crash(&self, state: &mut State, reason: String) -> FabricError {
        tracing::debug!(%reason, "fault injection crashed the client");
        state.crashed = Some(reason.clone());
        FabricError::Crashed { reason }
    }
}

impl<T: Transport> Transport for Faulty<T> {
    async fn execute<'a>(
        &'a self,
        epoch: Epoch,
        ops: &'a [Op],
        payload: &'a [u8],
        out: &'a mut Completions,
    ) -> Result<(), FabricError> {
        if !self.plan.latency_per_round_trip.is_zero() {
            sleep(self.plan.latency_per_round_trip).await;
        }
        // A batch runs in one part, unless a crash is armed for the next CAS
        // that swaps: then it runs up to each CAS in turn, because whether a
        // CAS swaps is known only once it has run.
        let mut done = 0;
        let mut held_in_batch = false;
        let mut crash_after = None;
        let mut drop_after = None;
        let mut result = Ok(());
        while done < ops.len() {
            let part = self.plan_part(epoch, &ops[done..], payload)?;
            let end = done + part.run;
            held_in_batch |= part.held_at.is_some();
            result = self.run_part(epoch, &ops[done..end], payload, part, out).await;
            if let Some(n) = part.crash_after {
                crash_after = Some(format!("after verb {n}"));
                break;
            }
            if let Some(n) = part.drop_after {
                drop_after = Some((ops[end.max(1) - 1].node, n));
                break;
            }
            if result.is_err() {
                break;
            }
            debug_assert_eq!(out.len(), end, "one completion per op run");
            let cas = out.as_slice().get(end - 1);
            if part.ends_at_armed_cas && cas.is_some_and(|c| ops[end - 1].kind.cas_swapped(c)) {
                let mut s = self.state();
                s.crash_after_next_cas = false;
                crash_after = Some(format!("after verb {} (a CAS that swapped)", s.verbs));
                break;
            }
            done = end;
        }

        // A write held by an earlier batch lands after this one; one held by
        // this batch with no further batch to wait for lands right after
        // this batch's other verbs.
        let landing = {
            let mut s = self.state();
            match &mut s.flying {
                Some(f) if !held_in_batch => {
                    f.batches_left = f.batches_left.saturating_sub(1);
                    (f.batches_left == 0).then(|| s.flying.take()).flatten()
                }
                Some(f) if f.batches_left == 0 => s.flying.take(),
                _ => None,
            }
        };
        if let Some(f) = landing {
            // The delayed WRITE is not part of this batch, whose verbs have
            // run: if it is refused (its epoch is stale by now) or lost, it is
            // lost silently, as in the network, rather than making the caller
            // believe this batch failed and retry it.
            if let Err(e) = self.land(f).await {
                tracing::debug!(error = %e, "delayed WRITE did not land");
            }
        }
        if let Some(reason) = crash_after {
            let mut s = self.state();
            return Err(self.crash(&mut s, reason));
        }
        if let Some((node, n)) = drop_after {
            self.inner.drop_connections();
            tracing::debug!(verb = n, "fault injection dropped the client's connections");
            return Err(FabricError::Disconnected {
                node,
                reason: format!("dropped by fault injection after verb {n}"),
            });
        }
        result?;
        let mut swapped = ops
            .iter()
            .zip(out.as_slice())
            .filter(|(op, c)| op.kind.cas_swapped(c))
            .map(|(op, _)| op)
            .peekable();
        // The state is locked only for a batch that swapped something.
        if swapped.peek().is_some() {
            let hook = {
                let mut s = self.state();
                let fires = |op: &Op| match (op.kind, s.after_cas_filter) {
                    (OpKind::Cas { expect, new }, Some(which)) => which(expect, new),
                    _ => true,
                };
                if swapped.any(fires) {
                    s.after_next_cas.take()
                } else {
                    None
                }
            };
            if let Some(AfterCas(hook)) = hook {
                hook();
            }
        }
        Ok(())
    }

    fn crash_point(&self, name: &str) -> Result<(), FabricError> {
        let mut s = self.state();
        if let Some(reason) = &s.crashed {
            return Err(FabricError::Crashed {
                reason: reason.clone(),
            });
        }
        if self.plan.crash_points.iter().any(|p| p == name) {
            return Err(self.crash(&mut s, format!("at crash point {name}")));
        }
        Ok(())
    }

    fn clock_skew_ms(&self) -> i64 {
        self.skew_ms.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// How much of the rest of a batch runs next, and what happens to it.
#[derive(Clone, Copy, Debug)]
struct Part {
    /// Ops to run, from the start of the rest.
    run: usize,
    /// The WRITE among them held back in flight (fly WRITE).
    held_at: Option<usize>,
    /// The client crashes after this part: its verb count then.
    crash_after: Option<u64>,
    /// The client's connections drop after this part: its verb count then.
    drop_after: Option<u64>,
    /// The part ends at a CAS and a crash is armed for the next CAS that
    /// swaps: whether the client dies depends on that CAS's outcome.
    ends_at_armed_cas: bool,
}

impl<T: Transport> Faulty<T> {
    /// Decides, under the lock, which of `rest` run next; they then run
    /// without it. Counts them as issued.
    fn plan_part(&self, epoch: Epoch, rest: &[Op], payload: &[u8]) -> Result<Part, FabricError> {
        let mut s = self.state();
        if let Some(reason) = &s.crashed {
            return Err(FabricError::Crashed {
                reason: reason.clone(),
            });
        }
        let mut part = Part {
            run: rest.len(),
            held_at: None,
            crash_after: None,
            drop_after: None,
            ends_at_armed_cas: false,
        };
        if let Some(n) = self.plan.drop_after_verbs.filter(|_| !s.dropped) {
            let left = n.saturating_sub(s.verbs);
            if left >= 1 && left <= rest.len() as u64 {
                part.run = left as usize;
                part.drop_after = Some(n);
                s.dropped = true;
            }
        }
        if let Some(n) = self.plan.crash_after_verbs {
            let left = n.saturating_sub(s.verbs);
            if left <= rest.len() as u64 {
                part.run = left as usize;
                part.crash_after = Some(n);
            }
        }
        if s.crash_after_next_cas {
            if let Some(i) = rest[..part.run]
                .iter()
                .position(|op| matches!(op.kind, OpKind::Cas { .. }))
            {
                if i + 1 < part.run {
                    part.crash_after = None;
                }
                part.run = i + 1;
                part.ends_at_armed_cas = true;
            }
        }
        for (i, op) in rest[..part.run].iter().enumerate() {
            if let OpKind::Write { data } = op.kind {
                s.writes += 1;
                if let Some(fw) = self.plan.fly_write.filter(|fw| fw.nth_write == s.writes) {
                    part.held_at = Some(i);
                    s.flying = Some(Flying {
                        op: *op,
                        data: payload[data.range()].to_vec(),
                        epoch,
                        batches_left: fw.after_batches,
                    });
                }
            }
        }
        s.verbs += part.run as u64;
        Ok(part)
    }

    /// Runs one part of a batch, appending its completions to `out`.
    async fn run_part(
        &self,
        epoch: Epoch,
        ops: &[Op],
        payload: &[u8],
        part: Part,
        out: &mut Completions,
    ) -> Result<(), FabricError> {
        if let Some(k) = self.pause_at(part.run) {
            // Run up to the k-th verb, stop until resumed, then post the
            // rest; a crash falling in this part is handled by the caller
            // like any other. One fault per part: a WRITE this part would
            // have held back runs with it instead, so it must not also fly.
            if part.held_at.is_some() {
                self.state().flying = None;
            }
            let mut first = Completions::default();
            self.inner.execute(epoch, &ops[..k], payload, &mut first).await?;
            self.gate.paused.notify_one();
            self.gate.resume.notified().await;
            let mut rest = Completions::default();
            let r = self.inner.execute(epoch, &ops[k..], payload, &mut rest).await;
            append(&first, out);
            append(&rest, out);
            return r;
        }
        let dropped = self.drop_writes_to.load(std::sync::atomic::Ordering::Relaxed);
        let dropped = |op: &Op| u32::from(op.node) == dropped && matches!(op.kind, OpKind::Write { .. });
        match part.held_at {
            Some(h) => self.run_skipping(epoch, ops, payload, out, |i, _| i == h).await,
            None if ops.iter().any(dropped) => {
                self.run_skipping(epoch, ops, payload, out, |_, op| dropped(op))
                    .await
            }
            None => self.inner.execute(epoch, ops, payload, out).await,
        }
    }

    /// Runs `ops` but those `skip` names (a WRITE held back, or dropped),
    /// and reports each of those done, as the client sees it.
    async fn run_skipping(
        &self,
        epoch: Epoch,
        ops: &[Op],
        payload: &[u8],
        out: &mut Completions,
        skip: impl Fn(usize, &Op) -> bool,
    ) -> Result<(), FabricError> {
        let others: Vec<Op> = ops
            .iter()
            .enumerate()
            .filter(|&(i, op)| !skip(i, op))
            .map(|(_, op)| *op)
            .collect();
        let mut ran = Completions::default();
        let r = self.inner.execute(epoch, &others, payload, &mut ran).await;
        let mut from = ran.as_slice().iter();
        for (i, op) in ops.iter().enumerate() {
            if skip(i, op) {
                out.push(Ok(Outcome::Done));
                continue;
            }
            let Some(c) = from.next() else { break };
            match c {
                Ok(Outcome::Read(range)) => out.push_read(range.len).copy_from_slice(ran.read_data(*range)),
                other => out.push(*other),
            }
        }
        r
    }

    /// If the `len` verbs this batch runs cross the pause point, how many of
    /// them run before the pause. Marks the pause as taken.
    fn pause_at(&self, len: usize) -> Option<usize> {
        let k = self.plan.pause_after_verbs?;
        let mut s = self.state();
        // `verbs` already counts this batch.
        let before = s.verbs - len as u64;
        if s.paused || k <= before || k > s.verbs {
            return None;
        }
        s.paused = true;
        Some((k - before) as usize)
    }
}

fn append(from: &Completions, out: &mut Completions) {
    for c in from.as_slice() {
        match c {
            Ok(Outcome::Read(range)) => out.push_read(range.len).copy_from_slice(from.read_data(*range)),
            other => out.push(*other),
        }
    }
}

async fn sleep(d: Duration) {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep(d).await;
    } else {
        std::thread::sleep(d);
    }
}
