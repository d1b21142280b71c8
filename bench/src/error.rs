//! The benchmarks' one error type. A benchmark is orchestration over every
//! layer, so its failures come from all of them: each keeps its typed
//! source, wrapped, where a step names itself, in [`BenchError::Context`]
//! ([`Context::context`], as `anyhow`'s, but typed).

use std::fmt::Display;

/// A benchmark's result.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Why a benchmark could not run to its report.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Wrong by itself (a plan the run cannot carry out, a result that
    /// breaks an invariant): the message is all there is.
    #[error("{0}")]
    Msg(String),
    /// A step failed; `context` says which, `source` why.
    #[error("{context}: {source}")]
    Context {
        /// The step.
        context: String,
        /// Its failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file or the OS.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Memory could not be set up or reached.
    #[error(transparent)]
    Memory(#[from] harness::MemoryError),
    /// A control-plane member could not be started, formed or reached.
    #[error(transparent)]
    Control(#[from] harness::control::ControlError),
    /// A control-plane API call failed.
    #[error(transparent)]
    ControlApi(#[from] control_plane::api::ClientError),
    /// A verb or transport failed.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// A memory node or image failed.
    #[error(transparent)]
    Node(#[from] fabric::NodeError),
    /// A verb failed.
    #[error(transparent)]
    Verb(#[from] fabric::VerbError),
    /// A transaction failed.
    #[error(transparent)]
    Tx(#[from] txn::TxError),
    /// An index failed.
    #[error(transparent)]
    Index(#[from] index::IndexError),
    /// The YCSB driver stopped.
    #[error(transparent)]
    Drive(#[from] workload::driver::DriveError),
    /// The workload could not be built.
    #[error(transparent)]
    Workload(#[from] workload::SpecError),
    /// A JSON report could not be written.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A latency histogram refused a bound or a value.
    #[error(transparent)]
    Histogram(#[from] hdrhistogram::CreationError),
    /// A transport the benchmark does not run on.
    #[error(transparent)]
    Transport(#[from] harness::transport::UnsupportedTransport),
    /// A number did not fit its type.
    #[error(transparent)]
    Int(#[from] std::num::TryFromIntError),
}

impl BenchError {
    /// This error as the source of a failure of `context`.
    pub fn context<C: Display>(self, context: C) -> BenchError {
        BenchError::Context {
            context: context.to_string(),
            source: Box::new(self),
        }
    }
}

/// Adds what was being done to a failure, keeping it as the source.
pub trait Context<T> {
    /// Wraps the error with `context`.
    fn context<C: Display>(self, context: C) -> Result<T>;
    /// Wraps the error with the context `f` makes (only on failure).
    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T>;
}

impl<T, E> Context<T> for std::result::Result<T, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn context<C: Display>(self, context: C) -> Result<T> {
        self.map_err(|e| BenchError::Context {
            context: context.to_string(),
            source: Box::new(e),
        })
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.map_err(|e| BenchError::Context {
            context: f().to_string(),
            source: Box::new(e),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| BenchError::Msg(context.to_string()))
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.ok_or_else(|| BenchError::Msg(f().to_string()))
    }
}

/// A [`BenchError::Msg`] from a format string.
#[macro_export]
macro_rules! msg {
    ($($t:tt)*) => {
        $crate::error::BenchError::Msg(format!($($t)*))
    };
}

/// Returns a [`BenchError::Msg`] from a format string.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::msg!($($t)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn context_keeps_the_source() {
        let e = std::fs::read("/nonexistent/kintsugi")
            .context("cannot read the plan")
            .unwrap_err();
        assert!(e.to_string().starts_with("cannot read the plan: "), "{e}");
        assert!(e.source().is_some_and(|s| s.is::<std::io::Error>()));
        let e = None::<u8>.context("no region").unwrap_err();
        assert_eq!(e.to_string(), "no region");
    }
}
