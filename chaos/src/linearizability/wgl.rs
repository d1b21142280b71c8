//! The primary checker: todc-utils' `WGLChecker` (Wing–Gong search with
//! Lowe's memoisation of (linearized set, state) pairs).
//!
//! Two things todc-utils cannot express directly, and how they are adapted:
//! - Its `Specification` has no `self`: the key's initial value and the
//!   search budget reach `init` and `apply` through thread-locals, set for
//!   the duration of one check on the calling thread.
//! - Its histories must be complete (`History::from_actions` panics on a
//!   call without a response). An info or pending op is given a response
//!   after every other event, i.e. a return time of +infinity, and the model
//!   accepts any result for it. Linearizing it after every completed op is
//!   the same as its never having happened, so "any time after its
//!   invocation, or never" is covered.
//!
//! The budget: every `apply` spends one step. Once the budget is spent
//! `apply` refuses every op, which makes the search backtrack to its root
//! without lifting anything more (at most one forward scan of the history
//! per op on the stack), and the verdict is [`Verdict::Unknown`]: a refused
//! search proves nothing.

use std::cell::Cell;

use todc_utils::linearizability::history::{Action, History};
use todc_utils::{Specification, WGLChecker};

use super::event::Function;
use super::history::{Operation, Stamp};
use super::model::{self, Ret};
use super::Verdict;

thread_local! {
    static INITIAL: Cell<Option<u64>> = const { Cell::new(None) };
    static STEPS_LEFT: Cell<u64> = const { Cell::new(0) };
    static EXHAUSTED: Cell<bool> = const { Cell::new(false) };
}

/// One op for todc-utils: what it does and, when known, what it returned.
#[derive(Clone, Debug)]
struct KeyOp {
    f: Function,
    value: Option<u64>,
    expected: Option<Ret>,
}

struct KeySpec;

impl Specification for KeySpec {
    type State = Option<u64>;
    type Operation = KeyOp;

    fn init() -> Self::State {
        INITIAL.with(Cell::get)
    }

    fn apply(op: &KeyOp, state: &Option<u64>) -> (bool, Option<u64>) {
        let left = STEPS_LEFT.with(Cell::get);
        if left == 0 {
            EXHAUSTED.with(|e| e.set(true));
            return (false, *state);
        }
        STEPS_LEFT.with(|s| s.set(left - 1));
        let (next, ret) = model::step(*state, op.f, op.value);
        match op.expected {
            Some(expected) if expected != ret => (false, *state),
            _ => (true, next),
        }
    }
}

/// Restores the thread-locals when a check ends, even by unwinding, so a
/// later check on the thread starts clean.
struct Scope;

impl Scope {
    fn enter(initial: Option<u64>, max_steps: u64) -> Scope {
        INITIAL.with(|c| c.set(initial));
        STEPS_LEFT.with(|c| c.set(max_steps));
        EXHAUSTED.with(|c| c.set(false));
        Scope
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        INITIAL.with(|c| c.set(None));
        STEPS_LEFT.with(|c| c.set(0));
        EXHAUSTED.with(|c| c.set(false));
    }
}

/// Checks one key's ops with todc-utils' Wing–Gong–Lowe search, starting
/// from `initial`, spending at most `max_steps` model steps.
pub fn check_key_wgl(ops: &[Operation], initial: Option<u64>, max_steps: u64) -> Verdict {
    if ops.is_empty() {
        // `History::from_actions` panics on an empty history; nothing to order.
        return Verdict::Linearizable;
    }
    // (when, is a response, op index): an op's response sorts after its
    // call, +infinity after every finite stamp.
    let mut points: Vec<(Option<Stamp>, bool, usize)> = Vec::with_capacity(2 * ops.len());
    for (i, op) in ops.iter().enumerate() {
        points.push((Some(op.invoke), false, i));
        points.push((op.returned(), true, i));
    }
    points.sort_by_key(|&(at, _, i)| (at.is_none(), at, i));
    // Each op is its own todc process, so its call and response pair up
    // whatever the real process ids are.
    let actions = points
        .into_iter()
        .map(|(_, is_response, i)| {
            let op = &ops[i];
            let key_op = KeyOp {
                f: op.f,
                value: op.value,
                expected: model::observed(op),
            };
            (
                i,
                if is_response {
                    Action::Response(key_op)
                } else {
                    Action::Call(key_op)
                },
            )
        })
        .collect();
    let _scope = Scope::enter(initial, max_steps);
    let linearizable = WGLChecker::<KeySpec>::is_linearizable(History::from_actions(actions));
    // A true verdict rests on a linearization found from accepted steps
    // only; a false one after refusals proves nothing.
    if linearizable {
        Verdict::Linearizable
    } else if EXHAUSTED.with(Cell::get) {
        Verdict::Unknown
    } else {
        Verdict::NotLinearizable
    }
}
