//! Histories of known verdicts, accepted and rejected.

use super::*;

#[test]
fn empty_history_is_linearizable() {
    accepted(&[]);
}

#[test]
fn sequential_history_is_linearizable() {
    accepted(&[
        "1 invoke get",
        "1 ok get nil",
        "1 invoke put 5",
        "1 ok put 5",
        "2 invoke get",
        "2 ok get 5",
        "2 invoke insert 6",
        "2 ok insert 6 false",
        "1 invoke update 7",
        "1 ok update 7 true",
        "2 invoke get",
        "2 ok get 7",
        "1 invoke delete",
        "1 ok delete true",
        "1 invoke delete",
        "1 ok delete false",
        "2 invoke update 8",
        "2 ok update 8 false",
        "2 invoke insert 9",
        "2 ok insert 9 true",
        "1 invoke get",
        "1 ok get 9",
    ]);
}

#[test]
fn concurrent_writes_a_read_may_see_either() {
    for seen in ["1", "2"] {
        let read = format!("3 ok get {seen}");
        accepted(&[
            "1 invoke put 1",
            "2 invoke put 2",
            "3 invoke get",
            &read,
            "1 ok put",
            "2 ok put",
        ]);
    }
    // Two reads during both writes may see them in opposite orders only if
    // the writes are ordered between them; seeing 2, then 1, then 2 again
    // needs three changes from two writes.
    rejected(&[
        "1 invoke put 1",
        "2 invoke put 2",
        "3 invoke get",
        "3 ok get 2",
        "3 invoke get",
        "3 ok get 1",
        "3 invoke get",
        "3 ok get 2",
        "1 ok put",
        "2 ok put",
    ]);
}

#[test]
fn stale_read_after_acknowledged_write_is_rejected() {
    rejected(&[
        "1 invoke put 1",
        "1 ok put 1",
        "1 invoke put 2",
        "1 ok put 2",
        "2 invoke get",
        "2 ok get 1",
    ]);
    // The same read while the second write is in flight is fine.
    accepted(&[
        "1 invoke put 1",
        "1 ok put 1",
        "1 invoke put 2",
        "2 invoke get",
        "2 ok get 1",
        "1 ok put 2",
    ]);
}

#[test]
fn read_of_a_value_never_written_is_rejected() {
    rejected(&["1 invoke put 1", "1 ok put 1", "2 invoke get", "2 ok get 42"]);
    rejected(&["2 invoke get", "2 ok get 42"]);
}

#[test]
fn lost_acknowledged_write_caught_by_final_read_is_rejected() {
    rejected(&[
        "1 invoke insert 7",
        "1 ok insert 7 true",
        "2 invoke get",
        "2 ok get nil",
    ]);
    rejected(&[
        "1 invoke put 7",
        "1 ok put 7",
        "1 invoke update 8",
        "1 ok update 8 true",
        "2 invoke get",
        "2 ok get 7",
    ]);
}

#[test]
fn insert_returning_false_on_an_absent_key_is_rejected() {
    rejected(&["1 invoke insert 7", "1 ok insert 7 false"]);
    rejected(&[
        "1 invoke put 1",
        "1 ok put",
        "1 invoke delete",
        "1 ok delete true",
        "2 invoke insert 3",
        "2 ok insert 3 false",
    ]);
    // A concurrent insert explains it.
    accepted(&[
        "1 invoke insert 1",
        "2 invoke insert 2",
        "2 ok insert 2 false",
        "1 ok insert 1 true",
    ]);
}

#[test]
fn info_write_later_read_is_accepted() {
    accepted(&["1 invoke put 1", "1 info put 1", "2 invoke get", "2 ok get 1"]);
    // It may take effect long after its info: after a later write, even.
    accepted(&[
        "1 invoke put 1",
        "1 info put 1",
        "2 invoke put 2",
        "2 ok put 2",
        "2 invoke get",
        "2 ok get 2",
        "2 invoke get",
        "2 ok get 1",
    ]);
}

#[test]
fn info_write_never_seen_is_accepted() {
    accepted(&[
        "1 invoke put 1",
        "1 info put 1",
        "2 invoke get",
        "2 ok get nil",
        "2 invoke get",
        "2 ok get nil",
    ]);
    accepted(&[
        "1 invoke delete",
        "2 invoke put 3",
        "2 ok put 3",
        "2 invoke get",
        "2 ok get 3",
    ]);
}

#[test]
fn info_write_cannot_take_effect_before_its_invocation() {
    rejected(&["2 invoke get", "2 ok get 1", "1 invoke put 1", "1 info put 1"]);
    // Once taken effect, it cannot be undone: 1, then absent again, needs a delete.
    rejected(&[
        "1 invoke put 1",
        "1 info put 1",
        "2 invoke get",
        "2 ok get 1",
        "2 invoke get",
        "2 ok get nil",
    ]);
}

#[test]
fn pending_write_is_treated_as_info() {
    let report = assert_verdict(
        &["1 invoke put 1", "2 invoke get", "2 ok get 1"],
        Verdict::Linearizable,
    );
    assert_eq!((report.pending, report.info, report.ops_checked), (1, 0, 2));
    accepted(&["1 invoke put 1", "2 invoke get", "2 ok get nil"]);
}

#[test]
fn info_and_pending_reads_are_dropped() {
    let report = assert_verdict(
        &["1 invoke get", "1 info get", "2 invoke get"],
        Verdict::Linearizable,
    );
    assert_eq!(
        (
            report.info,
            report.pending,
            report.ops_checked,
            report.keys_checked
        ),
        (1, 1, 0, 0)
    );
}

#[test]
fn failed_write_whose_value_is_read_is_rejected() {
    rejected(&["1 invoke put 1", "1 fail put 1", "2 invoke get", "2 ok get 1"]);
    let report = assert_verdict(
        &["1 invoke put 1", "1 fail put 1", "2 invoke get", "2 ok get nil"],
        Verdict::Linearizable,
    );
    assert_eq!((report.fail, report.ops_checked), (1, 1));
}

#[test]
fn delete_and_insert_interleavings() {
    // Concurrent delete and insert on a present key: insert false then delete
    // true, or delete true then insert true; both are possible.
    let present = ["0 invoke put 1", "0 ok put 1"];
    for outcome in [
        ["1 ok delete true", "2 ok insert 2 false"],
        ["1 ok delete true", "2 ok insert 2 true"],
    ] {
        let mut lines = present.to_vec();
        lines.extend(["1 invoke delete", "2 invoke insert 2"]);
        lines.extend(outcome);
        accepted(&lines);
    }
    // But not both writing false: one of them must find what it needs.
    let mut lines = present.to_vec();
    lines.extend([
        "1 invoke delete",
        "2 invoke insert 2",
        "1 ok delete false",
        "2 ok insert 2 false",
    ]);
    rejected(&lines);
    // Two concurrent deletes of a present key: exactly one removes it.
    accepted(&[
        "0 invoke put 1",
        "0 ok put 1",
        "1 invoke delete",
        "2 invoke delete",
        "1 ok delete false",
        "2 ok delete true",
    ]);
    rejected(&[
        "0 invoke put 1",
        "0 ok put 1",
        "1 invoke delete",
        "2 invoke delete",
        "1 ok delete true",
        "2 ok delete true",
    ]);
    // A delete acknowledged before an insert began leaves room for it.
    rejected(&[
        "0 invoke put 1",
        "0 ok put 1",
        "1 invoke delete",
        "1 ok delete true",
        "2 invoke insert 2",
        "2 ok insert 2 false",
    ]);
    // An info delete may explain a read of absent, and a later insert's success.
    accepted(&[
        "0 invoke put 1",
        "0 ok put 1",
        "1 invoke delete",
        "1 info delete",
        "2 invoke insert 2",
        "2 ok insert 2 true",
        "2 invoke get",
        "2 ok get 2",
    ]);
}

#[test]
fn initial_values_are_respected() {
    let history = h(&[
        "1 invoke update 5",
        "1 ok update 5 true",
        "1 invoke get k1",
        "1 ok get k1 nil",
    ]);
    let initial: BTreeMap<u64, u64> = [(0, 4)].into();
    let report = check(&history, &|k| initial.get(&k).copied()).expect("well-formed");
    assert_eq!(report.verdict, Verdict::Linearizable, "{report}");
    let report = check(&history, &absent).expect("well-formed");
    assert_eq!(report.verdict, Verdict::NotLinearizable, "{report}");
    assert_eq!(
        report.non_linearizable.iter().map(|d| d.key).collect::<Vec<_>>(),
        [0]
    );
}

#[test]
fn one_bad_key_among_good_ones_is_named() {
    let mut lines = Vec::new();
    let mut owned = Vec::new();
    for key in 0..10 {
        let read = if key == 7 {
            "2 ok get k7 99".to_string()
        } else {
            format!("2 ok get k{key} {key}")
        };
        owned.push([
            format!("1 invoke put k{key} {key}"),
            format!("1 ok put k{key}"),
            format!("2 invoke get k{key}"),
            read,
        ]);
    }
    for four in &owned {
        lines.extend(four.iter().map(String::as_str));
    }
    let report = assert_verdict(&lines, Verdict::NotLinearizable);
    assert_eq!(
        (
            report.keys_checked,
            report.linearizable_keys,
            report.non_linearizable_keys
        ),
        (10, 9, 1)
    );
    assert_eq!(report.non_linearizable.len(), 1);
    let detail = &report.non_linearizable[0];
    assert_eq!(detail.key, 7);
    // Key 7's events are lines 29 to 32 of the shorthand, 10 ns apart.
    assert_eq!(
        detail.ops,
        ["[290 .. 300] p1 put(7) -> ok", "[310 .. 320] p2 get -> 99"]
    );
    let text = report.to_string();
    assert!(text.contains("key 7 (not linearizable"), "{text}");
}
