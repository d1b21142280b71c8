//! Every kind of DTX scenario, at every verb of every stopped party, with
//! 1, 2, 3 and 8 records and one to three replicas: once recovery has run,
//! nothing is left locked or invisible, the replicas agree, every
//! acknowledged transaction applied and no other one applied in part, and
//! a survivor can write everything; and the same after a crash followed by
//! the primary's death and a promotion. One test per kind, so that they run
//! side by side.

use chaos::crash_points::dtx::{self, Kind};
use chaos::crash_points::Report;

async fn explore(kind: Kind, records: Vec<usize>) -> Report {
    let options = dtx::Options {
        kinds: vec![kind],
        records,
        ..dtx::Options::default()
    };
    let report = dtx::explore(&options).await.unwrap();
    assert!(report.details.is_empty(), "violations: {:#?}", report.details);
    assert_eq!(report.violations, 0);
    assert_eq!(report.kinds.len(), 1);
    assert_eq!(report.kinds[0].kind, kind.name());
    report
}

#[tokio::test]
async fn no_crash_or_fenced_pause_of_the_owner_violates_dtx() {
    let report = explore(Kind::Owner, vec![1, 2, 3, 8]).await;
    assert_eq!(report.scenarios.len(), 12);
    for s in report.scenarios {
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
async fn no_crash_of_a_recoverer_violates_dtx() {
    // Quadratic in the verbs (every recoverer verb for every victim verb):
    // up to 3 records.
    let report = explore(Kind::Recoverer, vec![1, 2, 3]).await;
    for s in report.scenarios {
        assert!(s.crash_points > s.verbs, "{}", s.scenario);
    }
}

#[tokio::test]
async fn no_dropped_connection_violates_dtx() {
    let report = explore(Kind::DroppedConnection, vec![1, 2, 3, 8]).await;
    for s in report.scenarios {
        assert_eq!(s.crash_points, s.verbs, "{}", s.scenario);
    }
}

#[tokio::test]
async fn no_crash_before_a_promotion_violates_dtx() {
    // The victim crashes at each verb, then its primary dies: recovery on
    // the promoted backup takes the locks of invisible records again
    // before it finishes the log (2 and 3 replicas; 1 has no backup).
    let report = explore(Kind::Promotion, vec![1, 2, 3, 8]).await;
    assert_eq!(report.scenarios.len(), 8, "rf 2 and 3, four record counts");
    for s in report.scenarios {
        assert!(s.verbs > 0, "{}", s.scenario);
        assert_eq!(s.crash_points, s.verbs, "{}", s.scenario);
    }
}
