//! The cross-check: stateright's `LinearizabilityTester`, a depth-first
//! search over per-process op sequences with no memoisation, written
//! independently of todc-utils.
//!
//! It supports in-flight ops natively (an invoke without a return may be
//! linearized, with any return, or left out), so info and pending ops are
//! given to it as exactly that: no +infinity adaptation as for the primary.
//!
//! Its costs shape the limits here: the search recurses once per op and
//! clones the remaining per-process histories at every level (memory
//! quadratic in the key's ops), so keys with more than
//! [`Limits::cross_check_max_ops`](super::Limits::cross_check_max_ops) ops
//! are skipped, and the search runs on a thread of its own with a stack of
//! [`CROSS_CHECK_STACK_BYTES`]. Without memoisation a non-linearizable
//! history can take exponential time, so a step budget applies
//! ([`CROSS_CHECK_MAX_STEPS_PER_KEY`](super::CROSS_CHECK_MAX_STEPS_PER_KEY)); stateright offers no way to stop its search, so the
//! model unwinds out of it (`resume_unwind`, which runs no panic hook) when
//! the budget is spent, and the verdict is [`Verdict::Unknown`].

use std::cell::Cell;
use std::rc::Rc;

use serde::Serialize;
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

use super::event::Function;
use super::history::Operation;
use super::model::{self, Ret};
use super::Verdict;

/// Stack of the thread the cross-check searches on: it recurses once per
/// op of the key, and a few hundred bytes a frame over
/// [`CROSS_CHECK_MAX_OPS`](super::CROSS_CHECK_MAX_OPS) ops is far below
/// this. Only touched pages are ever committed.
pub const CROSS_CHECK_STACK_BYTES: usize = 256 << 20;

/// What the cross-check concluded on a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CrossCheck {
    /// It ran to a verdict (possibly unknown: budget spent).
    Ran {
        /// Its verdict.
        verdict: Verdict,
    },
    /// It did not run on this key.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// The payload the model unwinds with when the budget is spent.
struct BudgetSpent;

/// The key's state in stateright's terms; the budget is shared by every
/// clone the search makes.
#[derive(Clone, Debug)]
struct KeyRef {
    state: Option<u64>,
    steps_left: Rc<Cell<u64>>,
}

impl SequentialSpec for KeyRef {
    type Op = (Function, Option<u64>);
    type Ret = Ret;

    fn invoke(&mut self, &(f, value): &Self::Op) -> Ret {
        let left = self.steps_left.get();
        if left == 0 {
            std::panic::resume_unwind(Box::new(BudgetSpent));
        }
        self.steps_left.set(left - 1);
        let (next, ret) = model::step(self.state, f, value);
        self.state = next;
        ret
    }
}

/// Checks one key's ops with stateright's `LinearizabilityTester`, starting
/// from `initial`, spending at most `max_steps` model steps. Keys of more
/// than `max_ops` ops are skipped.
pub fn check_key_stateright(
    ops: &[Operation],
    initial: Option<u64>,
    max_steps: u64,
    max_ops: usize,
) -> CrossCheck {
    if ops.len() > max_ops {
        return CrossCheck::Skipped {
            reason: format!(
                "{} ops, more than the cross-check's limit of {max_ops}",
                ops.len()
            ),
        };
    }
    let searched = std::thread::scope(|scope| {
        let search = std::thread::Builder::new()
            .name("lin-cross-check".into())
            .stack_size(CROSS_CHECK_STACK_BYTES)
            .spawn_scoped(scope, || search(ops, initial, max_steps))
            .map_err(|e| format!("cannot start the search thread: {e}"))?;
        match search.join() {
            Ok(result) => result,
            Err(payload) if payload.is::<BudgetSpent>() => Ok(Verdict::Unknown),
            // A panic of stateright's own is a bug there: not ours to hide.
            Err(payload) => std::panic::resume_unwind(payload),
        }
    });
    match searched {
        Ok(verdict) => CrossCheck::Ran { verdict },
        Err(reason) => CrossCheck::Skipped { reason },
    }
}

fn search(ops: &[Operation], initial: Option<u64>, max_steps: u64) -> Result<Verdict, String> {
    let steps_left = Rc::new(Cell::new(max_steps));
    let mut tester = LinearizabilityTester::new(KeyRef {
        state: initial,
        steps_left,
    });
    // Feeding events in history order is what gives the tester real time:
    // it notes, at each invoke, which ops had already returned.
    let mut points: Vec<(super::history::Stamp, Option<Ret>, usize)> = Vec::with_capacity(2 * ops.len());
    for (i, op) in ops.iter().enumerate() {
        points.push((op.invoke, None, i));
        if let (Some(at), Some(ret)) = (op.returned(), model::observed(op)) {
            points.push((at, Some(ret), i));
        }
    }
    points.sort_by_key(|&(at, _, _)| at);
    for (_, ret, i) in points {
        let op = &ops[i];
        let fed = match ret {
            None => tester.on_invoke(op.process, (op.f, op.value)).map(|_| ()),
            Some(ret) => tester.on_return(op.process, ret).map(|_| ()),
        };
        fed.map_err(|e| format!("stateright rejected the history: {e}"))?;
    }
    Ok(if tester.is_consistent() {
        Verdict::Linearizable
    } else {
        Verdict::NotLinearizable
    })
}
