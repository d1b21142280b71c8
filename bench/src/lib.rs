//! Kintsugi's benchmarks as a library. Each is a plan (what to run,
//! validated), a run (real work on real memory nodes, processes or
//! threads) and a report (typed; the CLI prints it as a table or JSON), so
//! that a test can run a benchmark in process and look at its report.
//!
//! | benchmark       | plan               | run                 | report               |
//! |-----------------|--------------------|---------------------|----------------------|
//! | `fabric bench`  | [`fabric::plan`]   | [`fabric::run`]     | [`fabric::report`]   |
//! | `bench txn`     | [`txn_plan`]       | [`txn_run`]         | [`txn_report`]       |
//! | `bench lease`   | [`txn_plan`]       | [`lease_run`]       | [`lease_report`]     |
//! | `bench ycsb`    | [`ycsb_plan`]      | [`ycsb_run`] ([`ycsb_measure`]) | [`ycsb_report`] |
//! | `bench rehash`  | [`rehash_plan`]    | [`rehash_run`]      | [`rehash_report`]    |
//! | `bench control` | [`control_plan`]   | [`control_run`]     | [`control_report`]   |
//! | `bench promote` | [`promote_plan`]   | [`promote_run`]     | [`promote_report`]   |
//! | `bench recover` | [`recover_plan`]   | [`recover_run`]     | [`recover_report`]   |
//! | `bench smallbank`, `bench tatp` | [`oltp::plan`] | [`oltp::run`] ([`oltp::worker`]) | [`oltp::report`] |
//!
//! Shared: [`local_load`] (a local cluster under YCSB A, for `promote`
//! and `recover`), [`cluster`] (a heap of objects on fresh memory and a transaction
//! client per owner id), [`worker`] (one client's loop of transactions),
//! [`threads`] (client threads that start their clocks together),
//! [`check`] (every committed increment is there), [`probe`] (how far
//! ahead of the clock leases ran), [`poll`] (bounded calls and waits),
//! [`format`](mod@format) (numbers in tables), [`common`] (seeds, medians, load bars),
//! [`error`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod check;
pub mod cluster;
pub mod common;
pub mod control_plan;
pub mod control_report;
pub mod control_run;
pub mod error;
pub mod fabric;
pub mod format;
pub mod lease_report;
pub mod lease_run;
pub mod local_load;
pub mod oltp;
pub mod poll;
pub mod probe;
pub mod promote_plan;
pub mod promote_report;
pub mod promote_run;
pub mod recover_plan;
pub mod recover_report;
pub mod recover_run;
pub mod rehash_plan;
pub mod rehash_report;
pub mod rehash_run;
pub mod resp;
pub mod threads;
pub mod txn_plan;
pub mod txn_report;
pub mod txn_run;
pub mod worker;
pub mod ycsb_measure;
pub mod ycsb_plan;
pub mod ycsb_report;
pub mod ycsb_run;

pub use error::{BenchError, Result};
