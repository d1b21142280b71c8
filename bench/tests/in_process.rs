//! Benchmarks run in process, as a library user runs them: a plan in, a
//! typed report out. Short runs on in-process memory; the assertions are on
//! correctness and verb counts, never on timings.

use std::time::Duration;

use bench::common::Common;
use bench::fabric::plan::{OpArg, Plan, Target};
use bench::fabric::workload::Workload;
use bench::txn_plan::TxnPlan;
use harness::TransportKind;

#[test]
fn bench_txn_reports_every_commit_counted_and_checked() {
    let plan = TxnPlan {
        objects: 64,
        write_set: 2,
        threads: 2,
        duration: Duration::from_millis(50),
        common: Common {
            transport: TransportKind::Local,
            replicas: 2,
            object_bytes: 64,
            seed: 7,
            json: true,
        },
    };
    let report = bench::txn_run::run(&plan).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.failure(), None);
    assert!(report.check.ok(), "{}", report.check.describe(plan.objects));
    // Every committed transaction incremented write_set counters by one.
    assert_eq!(
        report.check.expected,
        report.total.committed_total * plan.write_set as u64
    );
    assert!(report.total.commits > 0);
    let json: serde_json::Value = serde_json::from_str(&report.json().to_string()).unwrap_or_default();
    assert_eq!(json["transport"], "local");
    assert!(report.table().contains("commits"));
}

#[test]
fn fabric_bench_counts_batch_verbs_per_round_trip_on_every_inline_transport() {
    for transport in [TransportKind::Local, TransportKind::Shm] {
        let plan = Plan {
            transport,
            target: if transport == TransportKind::Shm {
                Target::Shm(None)
            } else {
                Target::Local
            },
            region: None,
            work: Workload::new(OpArg::Cas, 8, 4),
            threads: 1,
            outstanding: 1,
            depth: 1,
            duration: Duration::from_millis(30),
            json: false,
        };
        let report = bench::fabric::run(&plan).unwrap_or_else(|e| panic!("{transport}: {e}"));
        assert_eq!(report.fabric.verbs_per_round_trip, 4, "{transport}");
        assert!(
            report.fabric.round_trips > 0 && report.baseline.round_trips > 0,
            "{transport}"
        );
        // This run alone uses the region: no CAS finds a value it did not write.
        assert_eq!(
            report.fabric.cas_failures + report.baseline.cas_failures,
            0,
            "{transport}"
        );
        let stats = report
            .fabric
            .stats
            .as_ref()
            .unwrap_or_else(|| panic!("{transport}: no stats"));
        assert_eq!(stats.round_trips, report.fabric.round_trips, "{transport}");
        assert_eq!(
            stats.cas,
            4 * report.fabric.round_trips,
            "{transport}: one CAS per verb"
        );
        assert_eq!(stats.verbs(), stats.cas, "{transport}: nothing but the CASes");
    }
}
