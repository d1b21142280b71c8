//! Crash and pause points of RACE hash operations (an insert with room, an
//! update, a delete, an insert that splits its subtable): none violates the
//! rtx variant, nor the dtx variant once recovery has rolled the victim's
//! log (a paused dtx victim is fenced first); the optimal variant, whose
//! splits lock every bucket header, shows blocked survivors and stray copies
//! after a dead splitter.

use chaos::crash_points::hash::{self, Scenario};
use chaos::crash_points::Mode;
use index::Variant;

fn options(variant: Variant) -> hash::Options {
    hash::Options {
        variant,
        modes: vec![Mode::Crash, Mode::Pause],
    }
}

#[tokio::test]
async fn the_split_scenario_splits_and_the_others_do_not() {
    for variant in [Variant::Rtx, Variant::Optimal, Variant::Dtx] {
        for scenario in Scenario::ALL {
            let dry = hash::dry_run(variant, scenario).await.unwrap();
            assert!(dry.verbs > 0, "{variant} {scenario:?}");
            let want = u64::from(scenario == Scenario::InsertSplit);
            assert_eq!(
                dry.splits, want,
                "{variant} {scenario:?}: splits of the fault-free run"
            );
        }
    }
}

/// Explores `variant` and asserts every scenario ran once per verb in each
/// mode, the split verb by verb, with no violation: a violation is a bug in
/// index::hash or the variant's transactions.
async fn explores_without_violations(variant: Variant) {
    let report = hash::explore(&options(variant)).await.unwrap();
    assert_eq!(report.target, format!("hash/{variant}"));
    assert_eq!(report.scenarios.len(), Scenario::ALL.len());
    assert!(report
        .scenarios
        .iter()
        .all(|s| s.crash_points == 2 * s.verbs && s.verbs > 0));
    let split = &report.scenarios[3];
    assert_eq!(split.scenario, Scenario::InsertSplit.name());
    assert!(
        split.verbs > report.scenarios[0].verbs,
        "the split is explored verb by verb: {split:?}"
    );
    assert_eq!(report.violations, 0, "violations: {:#?}", report.details);
}

#[tokio::test]
async fn rtx_operations_survive_every_crash_and_pause_point() {
    explores_without_violations(Variant::Rtx).await;
}

#[tokio::test]
async fn dtx_operations_survive_every_crash_and_fenced_pause_once_recovered() {
    explores_without_violations(Variant::Dtx).await;
}

#[tokio::test]
async fn optimal_splits_are_not_crash_tolerant() {
    let report = hash::explore(&options(Variant::Optimal)).await.unwrap();
    assert!(report.violations > 0);
    let blocked = report.details.iter().any(|v| v.what.contains("stays locked"));
    let stray = report.details.iter().any(|v| v.what.contains("is in two slots"));
    assert!(
        blocked,
        "a splitter dead while holding the headers blocks writers"
    );
    assert!(
        stray,
        "a splitter dead between its moves leaves keys in two slots"
    );
    // Only the split takes locks: the common path is lock-free in both variants.
    assert!(report
        .scenarios
        .iter()
        .filter(|s| s.scenario != Scenario::InsertSplit.name())
        .all(|s| s.violating_runs == 0));
}
