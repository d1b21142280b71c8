//! Crash and pause points of B+tree inserts (entry write, leaf split, leaf
//! and root split): none violates the rtx variant, nor the dtx variant once
//! recovery has rolled the victim's log (a paused dtx victim is fenced
//! before it resumes: DTX's quarantine); the optimal variant, which has no
//! fault tolerance, shows blocked clients and half splits.

use chaos::crash_points::{btree, Mode};
use index::btree::Variant;

fn options(variant: Variant) -> btree::Options {
    btree::Options {
        variant,
        modes: vec![Mode::Crash, Mode::Pause],
    }
}

#[tokio::test]
async fn rtx_inserts_survive_every_crash_and_pause_point() {
    let report = btree::explore(&options(Variant::Rtx)).await.unwrap();
    assert_eq!(report.scenarios.len(), 3);
    assert!(report
        .scenarios
        .iter()
        .all(|s| s.crash_points == 2 * s.verbs && s.verbs > 0));
    assert!(report.details.is_empty(), "violations: {:#?}", report.details);
}

#[tokio::test]
async fn dtx_inserts_survive_every_crash_and_fenced_pause_once_recovered() {
    let report = btree::explore(&options(Variant::Dtx)).await.unwrap();
    assert_eq!(report.scenarios.len(), 3);
    assert!(report
        .scenarios
        .iter()
        .all(|s| s.crash_points == 2 * s.verbs && s.verbs > 0));
    assert!(report.details.is_empty(), "violations: {:#?}", report.details);
}

#[tokio::test]
async fn optimal_inserts_are_not_crash_tolerant() {
    let report = btree::explore(&options(Variant::Optimal)).await.unwrap();
    assert!(report.violations > 0);
    let half_split = report
        .details
        .iter()
        .any(|v| v.what.contains("not linked into its parent"));
    let blocked = report
        .details
        .iter()
        .any(|v| v.what.contains("stays locked") || v.what.contains("is held"));
    assert!(
        half_split,
        "a crash between the writes of a split leaves it half done"
    );
    assert!(blocked, "a crash while holding a lock blocks the node");
}
