//! Client threads that set up, then start their clocks together.
//!
//! Each client is an OS thread with its own current-thread tokio runtime:
//! local and shm verbs complete inline, so a transaction only leaves the
//! thread when it backs off. Running more threads than cores is how the
//! lease bench gets real descheduling: a client preempted while it holds
//! locks is exactly the live-but-slow holder leases must tolerate.

use std::sync::{Condvar, Mutex};

use crate::error::Context;

/// A start line that, unlike `std::sync::Barrier`, can be opened early so
/// that a thread that failed to spawn does not leave the others waiting.
pub struct StartGate {
    /// Threads arrived, and whether the gate was opened early.
    state: Mutex<(usize, bool)>,
    opened: Condvar,
    expected: usize,
}

impl StartGate {
    fn new(expected: usize) -> Self {
        StartGate {
            state: Mutex::new((0, false)),
            opened: Condvar::new(),
            expected,
        }
    }

    /// Waits until every thread has arrived (or the gate was opened early).
    pub fn wait(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        while s.0 < self.expected && !s.1 {
            s = self.opened.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        self.opened.notify_all();
    }

    fn open(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.opened.notify_all();
    }
}

/// Runs `threads` OS threads named `{name}-{i}`, each calling `body(i, gate)`,
/// and returns their results in thread order, or the first error. `body` must
/// call `gate.wait()` exactly once, after its setup (even a failed one), and
/// start its clock after it.
pub fn on_threads<F, R>(name: &str, threads: usize, body: F) -> crate::Result<Vec<R>>
where
    F: Fn(usize, &StartGate) -> crate::Result<R> + Sync,
    R: Send,
{
    let gate = StartGate::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (body, gate) = (&body, &gate);
                let spawned = std::thread::Builder::new()
                    .name(format!("{name}-{t}"))
                    .spawn_scoped(s, move || body(t, gate))
                    .context("cannot start a bench thread");
                if spawned.is_err() {
                    gate.open();
                }
                spawned
            })
            .collect();
        let mut results = Vec::with_capacity(threads);
        let mut first_error = None;
        for h in handles {
            match h.and_then(|h| h.join().map_err(|_| crate::msg!("a bench thread panicked"))?) {
                Ok(r) => results.push(r),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    })
}

/// A runtime for one client thread.
pub fn runtime() -> crate::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start an async runtime")
}
