//! The sequential specification of one key, shared by both checkers: they
//! must judge against the same semantics for their verdicts to be
//! comparable (the cross-check is of the searches, not of this table, which
//! the known-verdict tests pin down instead).

use super::event::{Function, OpResult};
use super::history::{Operation, Outcome};

/// What an op returns in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ret {
    /// get: the value, `None` when absent.
    Value(Option<u64>),
    /// put: nothing.
    Put,
    /// insert/update/delete: whether it wrote.
    Wrote(bool),
}

/// Applies `f` to a key holding `state`: the next state and the return.
pub(crate) fn step(state: Option<u64>, f: Function, value: Option<u64>) -> (Option<u64>, Ret) {
    match f {
        // A scan reaches the checkers only as the gets it implies
        // (`history::operations`); it reads.
        Function::Get | Function::Scan => (state, Ret::Value(state)),
        // A put/insert/update without a value never gets here: history
        // pairing rejects it. `state` keeps the model total anyway.
        Function::Put => (value.or(state), Ret::Put),
        Function::Insert if state.is_none() => (value, Ret::Wrote(true)),
        Function::Update if state.is_some() => (value.or(state), Ret::Wrote(true)),
        Function::Insert | Function::Update => (state, Ret::Wrote(false)),
        Function::Delete => (None, Ret::Wrote(state.is_some())),
    }
}

/// The return an op's completion recorded; `None` when unknown (info or
/// pending), in which case any return is accepted.
pub(crate) fn observed(op: &Operation) -> Option<Ret> {
    let Outcome::Ok { result, .. } = op.outcome else {
        return None;
    };
    // History pairing rejects results of the wrong kind; ops built by hand
    // may still carry one, and get a return their function never produces,
    // so they are never linearizable rather than silently accepted.
    Some(match (op.f, result) {
        (Function::Put, _) => Ret::Put,
        (Function::Get, Some(OpResult::Value(value))) => Ret::Value(value),
        (Function::Get, _) => Ret::Put,
        (_, Some(OpResult::Wrote(wrote))) => Ret::Wrote(wrote),
        (_, _) => Ret::Value(None),
    })
}
