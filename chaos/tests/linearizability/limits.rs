//! The search caps, and which keys the cross-check confirms.

use super::*;

/// A key with many concurrent writes and reads that no order explains: the
/// search must try many orders before giving up.
fn hard_history(writers: u64) -> Vec<Event> {
    let mut lines: Vec<String> = (1..=writers).map(|w| format!("{w} invoke put {w}")).collect();
    // Reads see the writes in one order, then go back to the first.
    for w in 1..=writers {
        lines.push("100 invoke get".into());
        lines.push(format!("100 ok get {w}"));
    }
    lines.push("100 invoke get".into());
    lines.push("100 ok get 1".into());
    lines.extend((1..=writers).map(|w| format!("{w} ok put {w}")));
    h(&lines.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn search_cap_reports_unknown_never_linearizable() {
    let history = hard_history(6);
    let limits = Limits {
        max_steps_per_key: 20,
        cross_check_max_steps_per_key: 20,
        ..Limits::default()
    };
    let report = check_with_limits(&history, &absent, &limits).expect("well-formed");
    assert_eq!(report.verdict, Verdict::Unknown, "{report}");
    assert_eq!(
        (
            report.unknown_keys,
            report.linearizable_keys,
            report.disagreement_count
        ),
        (1, 0, 0)
    );
    let detail = &report.unknown[0];
    assert_eq!(detail.verdicts.primary, Verdict::Unknown);
    assert_eq!(
        detail.verdicts.cross_check,
        CrossCheck::Ran {
            verdict: Verdict::Unknown
        }
    );
    // With the default cap both finish, and reject it.
    let report = check(&history, &absent).expect("well-formed");
    assert_eq!(report.verdict, Verdict::NotLinearizable, "{report}");
    assert_eq!(report.disagreement_count, 0);
}

#[test]
fn keys_over_the_cross_check_limit_are_skipped_and_counted() {
    let history = h(&[
        "1 invoke put 1",
        "1 ok put 1",
        "1 invoke get",
        "1 ok get 1",
        "1 invoke get k2",
        "1 ok get k2 nil",
    ]);
    let limits = Limits {
        cross_check_max_ops: 1,
        ..Limits::default()
    };
    let report = check_with_limits(&history, &absent, &limits).expect("well-formed");
    assert_eq!(report.verdict, Verdict::Linearizable, "{report}");
    assert_eq!(report.cross_check_skipped, 1);
    assert_eq!(report.skipped[0].0, 0);
}

// ---- seeded random histories ----

#[test]
fn only_the_listed_rejected_keys_are_cross_checked() {
    let mut lines = Vec::new();
    for key in 0..3 {
        lines.push(format!("1 invoke get k{key}"));
        lines.push(format!("1 ok get k{key} 5"));
    }
    let history = h(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    let limits = Limits {
        max_reported_keys: 1,
        ..Limits::default()
    };
    let report = check_with_limits(&history, &absent, &limits).expect("well-formed");
    assert_eq!(report.verdict, Verdict::NotLinearizable, "{report}");
    assert_eq!((report.non_linearizable_keys, report.cross_check_skipped), (3, 2));
    assert_eq!(
        report.non_linearizable[0].verdicts.cross_check,
        CrossCheck::Ran {
            verdict: Verdict::NotLinearizable
        }
    );
}
