//! Every kind of rTX scenario, at every verb of every stopped party, with
//! write sets of 1, 2, 3 and 8 objects and one to three replicas, leaves
//! nothing behind that the others and recovery cannot finish, no mix of old
//! and new values, no acknowledged commit lost or missing from a replica,
//! and replicas that agree word for word. One test per kind, so that they
//! run side by side.

use chaos::crash_points::rtx::{self, Kind};
use chaos::crash_points::{Mode, Report};

async fn explore(kind: Kind) -> Report {
    let options = rtx::Options {
        kinds: vec![kind],
        ..rtx::Options::default()
    };
    let report = rtx::explore(&options).await.unwrap();
    assert_eq!(report.scenarios.len(), 12, "objects 1, 2, 3, 8 at rf 1, 2, 3");
    assert!(report.details.is_empty(), "violations: {:#?}", report.details);
    assert_eq!(report.violations, 0);
    assert_eq!(report.kinds.len(), 1);
    assert_eq!(report.kinds[0].kind, kind.name());
    assert_eq!(report.kinds[0].runs, report.crash_points);
    report
}

#[tokio::test]
async fn no_crash_or_pause_of_the_owner_violates_rtx() {
    for s in explore(Kind::Owner).await.scenarios {
        assert!(s.verbs > 0, "{}", s.scenario);
        assert_eq!(
            s.crash_points,
            2 * s.verbs,
            "{}: one crash and one pause run per verb",
            s.scenario
        );
    }
}

#[tokio::test]
async fn no_crash_or_pause_of_the_repairer_violates_rtx() {
    for s in explore(Kind::Repairer).await.scenarios {
        // Per victim verb and mode, one run per repairer verb, and one more
        // in which the repairer finished first.
        assert!(s.crash_points > 2 * s.verbs, "{}", s.scenario);
    }
}

#[tokio::test]
async fn no_resume_order_violates_rtx() {
    for s in explore(Kind::ResumeOrder).await.scenarios {
        // Per pair of pause points: with and without a third client, each
        // party resumed first.
        assert_eq!(s.crash_points % 4, 0, "{}", s.scenario);
        assert!(s.crash_points > 4 * s.verbs, "{}", s.scenario);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_dropped_connection_violates_rtx() {
    for s in explore(Kind::DroppedConnection).await.scenarios {
        assert_eq!(s.crash_points, 2 * s.verbs, "{}: each order per verb", s.scenario);
    }
}

#[tokio::test]
async fn exploration_is_deterministic() {
    let options = rtx::Options {
        objects: vec![2],
        replicas: vec![2],
        modes: vec![Mode::Crash, Mode::Pause],
        kinds: vec![Kind::Owner, Kind::Repairer, Kind::ResumeOrder],
        ..rtx::Options::default()
    };
    let a = rtx::explore(&options).await.unwrap();
    let b = rtx::explore(&options).await.unwrap();
    assert_eq!(a, b);
}

/// Every kind over rdma (the soft-RoCE VM runs it: `deploy/rdma-vm/test.sh`).
/// Emulated RDMA costs 0.1 to 0.3 s per run, and the defaults make 187,722
/// runs, so `KINTSUGI_RDMA_CRASH_POINTS` chooses a scope:
/// - `quick` (CI): rf 1 and 2 with 1 and 3 objects for owner and
///   dropped-connection, rf 1 with 1 object for repairer and resume-order;
/// - `full` (unset): every shape for owner and dropped-connection, rf 1 and 2
///   with 1 and 2 objects for repairer and resume-order;
/// - `all`: the defaults for every kind (hours under TCG).
#[cfg(feature = "rdma")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_crash_point_over_rdma_violates_rtx() {
    let scope = std::env::var("KINTSUGI_RDMA_CRASH_POINTS").unwrap_or_else(|_| "full".into());
    for kind in Kind::ALL {
        let mut options = rtx::Options {
            kinds: vec![kind],
            transport: harness::TransportKind::Rdma,
            ..rtx::Options::default()
        };
        let quadratic = matches!(kind, Kind::Repairer | Kind::ResumeOrder);
        match (scope.as_str(), quadratic) {
            ("all", _) | ("full", false) => {}
            ("quick", false) => (options.replicas, options.objects) = (vec![1, 2], vec![1, 3]),
            ("full", true) => (options.replicas, options.objects) = (vec![1, 2], vec![1, 2]),
            ("quick", true) => (options.replicas, options.objects) = (vec![1], vec![1]),
            (other, _) => panic!("KINTSUGI_RDMA_CRASH_POINTS={other}: quick, full or all"),
        }
        let report = rtx::explore(&options).await.unwrap();
        assert!(report.details.is_empty(), "violations: {:#?}", report.details);
        assert_eq!(report.violations, 0);
        assert!(report.crash_points > 0, "{}", kind.name());
        eprintln!(
            "rdma, {} ({scope}): {} scenarios, {} crash points, 0 violations",
            kind.name(),
            report.scenarios.len(),
            report.crash_points
        );
    }
}
