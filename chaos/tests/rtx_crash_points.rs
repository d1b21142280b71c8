//! Every crash and pause point of rTX transactions writing 1, 2, 3 and 8
//! objects, with one and two replicas, leaves nothing behind that a survivor
//! cannot repair, and no mix of old and new values.

use chaos::crash_points::{rtx, Mode};

#[tokio::test]
async fn no_crash_or_pause_point_violates_rtx() {
    let report = rtx::explore(&rtx::Options::default()).await.unwrap();
    assert_eq!(report.scenarios.len(), 8);
    for s in &report.scenarios {
        assert!(s.verbs > 0, "{}", s.scenario);
        assert_eq!(
            s.crash_points,
            2 * s.verbs,
            "{}: one crash and one pause run per verb",
            s.scenario
        );
    }
    assert!(report.details.is_empty(), "violations: {:#?}", report.details);
    assert_eq!(report.violations, 0);
}

#[tokio::test]
async fn exploration_is_deterministic() {
    let options = rtx::Options {
        objects: vec![2],
        replicas: vec![2],
        modes: vec![Mode::Crash],
    };
    let a = rtx::explore(&options).await.unwrap();
    let b = rtx::explore(&options).await.unwrap();
    assert_eq!(a, b);
}
