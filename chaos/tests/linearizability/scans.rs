//! Scans, read as the gets they imply: each entry a read of its key, each
//! other key the scan covered a read of absence, all within the scan's
//! interval. A scan covers its keys from `from` up to its last entry, or to
//! the end of the index when it returned fewer entries than it asked for.

use super::*;

#[test]
fn a_scan_that_sees_acknowledged_writes_is_linearizable() {
    accepted(&[
        "1 invoke put k3 30",
        "1 ok put k3",
        "1 invoke put k5 50",
        "1 ok put k5",
        "2 invoke scan k1 4",
        "2 ok scan k1 4 =3:30,5:50",
    ]);
}

#[test]
fn a_scan_returning_an_overwritten_value_is_rejected() {
    rejected(&[
        "1 invoke put k3 30",
        "1 ok put k3",
        "1 invoke put k3 31",
        "1 ok put k3",
        "2 invoke scan k1 4",
        "2 ok scan k1 4 =3:30",
    ]);
}

#[test]
fn a_scan_returning_a_value_nobody_wrote_is_rejected() {
    rejected(&["2 invoke scan k1 4", "2 ok scan k1 4 =3:30"]);
}

#[test]
fn a_scan_missing_a_key_present_throughout_is_rejected() {
    // Key 3 lies between the scan's start and its last entry.
    rejected(&[
        "1 invoke put k3 30",
        "1 ok put k3",
        "1 invoke put k5 50",
        "1 ok put k5",
        "2 invoke scan k1 4",
        "2 ok scan k1 4 =5:50",
    ]);
    // Fewer entries than asked for: the scan read to the end, past key 5.
    rejected(&[
        "1 invoke put k5 50",
        "1 ok put k5",
        "2 invoke scan k1 4",
        "2 ok scan k1 4 =",
    ]);
}

#[test]
fn a_full_scan_says_nothing_past_its_last_entry() {
    accepted(&[
        "1 invoke put k3 30",
        "1 ok put k3",
        "1 invoke put k5 50",
        "1 ok put k5",
        "2 invoke scan k1 1",
        "2 ok scan k1 1 =3:30",
    ]);
}

#[test]
fn a_scan_says_nothing_below_its_start() {
    accepted(&[
        "1 invoke put k3 30",
        "1 ok put k3",
        "2 invoke scan k4 4",
        "2 ok scan k4 4 =",
    ]);
}

#[test]
fn a_scan_concurrent_with_a_write_may_see_either_side() {
    for seen in ["=3:30", "=3:31"] {
        let done = format!("2 ok scan k1 4 {seen}");
        accepted(&[
            "1 invoke put k3 30",
            "1 ok put k3",
            "1 invoke put k3 31",
            "2 invoke scan k1 4",
            &done,
            "1 ok put k3",
        ]);
    }
    // A delete in flight: present or absent.
    for seen in ["=3:30", "="] {
        let done = format!("2 ok scan k1 4 {seen}");
        accepted(&[
            "1 invoke put k3 30",
            "1 ok put k3",
            "1 invoke delete k3",
            "2 invoke scan k1 4",
            &done,
            "1 ok delete k3 true",
        ]);
    }
}

#[test]
fn a_scan_is_not_a_snapshot_but_each_key_is_read_once() {
    // Two writes, in order, on keys 3 and 5; the scan overlaps both. It may
    // see the later write and miss the earlier (it read key 3 before the
    // first write, key 5 after the second): per-key reads allow it.
    accepted(&[
        "2 invoke scan k1 4",
        "1 invoke put k3 30",
        "1 ok put k3",
        "1 invoke put k5 50",
        "1 ok put k5",
        "2 ok scan k1 4 =5:50",
    ]);
}

#[test]
fn unknown_scans_constrain_nothing() {
    accepted(&[
        "1 invoke put k3 30",
        "1 ok put k3",
        "2 invoke scan k1 4",
        "2 info scan k1 4",
        "3 invoke scan k1 4",
    ]);
}

#[test]
fn scan_entries_must_be_what_a_scan_returns() {
    for (bad, why) in [
        ("2 ok scan k2 4 =1:10", "below"),
        ("2 ok scan k2 4 =5:10,3:10", "ascending"),
        ("2 ok scan k2 4 =3:10,3:11", "ascending"),
        ("2 ok scan k2 4 =3:10,5:10,6:1,7:1,8:1", "returned 5"),
        ("2 ok scan k2 4", "without entries"),
        ("2 ok scan k2 4 =3:10 7", "its entries"),
    ] {
        let e = check(&h(&["2 invoke scan k2 4", bad]), &absent)
            .map(|r| r.to_string())
            .expect_err(bad);
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
    let e = check(&h(&["1 invoke get k2", "1 ok get k2 =3:10"]), &absent).expect_err("a get with entries");
    assert!(e.to_string().contains("returns no entries"), "{e}");
}

#[test]
fn scan_entries_round_trip_through_jsonl() {
    let events = h(&["2 invoke scan k2 4", "2 ok scan k2 4 =3:10,5:11"]);
    let mut bytes = Vec::new();
    write_jsonl(&mut bytes, &events).expect("write");
    let text = String::from_utf8(bytes.clone()).expect("utf-8");
    assert!(
        text.contains(r#""f":"scan","key":2,"value":4,"entries":[[3,10],[5,11]]"#),
        "{text}"
    );
    assert_eq!(read_jsonl(&bytes[..]).expect("read"), events);
    let report = check(&events, &absent).expect("well-formed");
    assert_eq!(report.scan_reads, 2);
}

#[test]
fn random_constructed_histories_with_scans_are_linearizable() {
    let mut rng = StdRng::seed_from_u64(0x5ca4);
    for round in 0..150 {
        let events = random::constructed_with(&mut rng, 10, 4, 12, 20);
        assert!(
            events.iter().any(|e| e.f == Function::Scan),
            "round {round}: no scan drawn"
        );
        let report = check(&events, &absent).expect("well-formed");
        assert_eq!(report.verdict, Verdict::Linearizable, "round {round}: {report}");
        assert_eq!(report.disagreement_count, 0, "round {round}: {report}");
    }
}

#[test]
fn random_histories_with_a_stale_scan_entry_are_rejected() {
    // A write acknowledged before a scan begins, the scan returning the
    // value it overwrote.
    let mut rng = StdRng::seed_from_u64(0x5ca5);
    for round in 0..100 {
        let mut events = random::constructed_with(&mut rng, 6, 4, 0, 0);
        let end = events.iter().map(|e| e.time_ns).max().unwrap_or_default();
        let key = rng.gen_range(0..4);
        let (old, new) = (1_000_000 + 2 * round, 1_000_001 + 2 * round);
        let mut at = end + 1;
        let mut next = |f: Function, kind: EventType, value: Option<u64>| {
            at += 1;
            let mut e = Event::invoke(90, f, key, value, at);
            e.kind = kind;
            e
        };
        events.push(next(Function::Put, EventType::Invoke, Some(old)));
        events.push(next(Function::Put, EventType::Ok, Some(old)));
        events.push(next(Function::Put, EventType::Invoke, Some(new)));
        events.push(next(Function::Put, EventType::Ok, Some(new)));
        let mut invoke = next(Function::Scan, EventType::Invoke, Some(1));
        invoke.process = 91;
        let done = Event::scanned(91, key, 1, vec![(key, old)], invoke.time_ns + 1);
        events.extend([invoke, done]);
        let report = check(&events, &absent).expect("well-formed");
        assert_eq!(
            report.verdict,
            Verdict::NotLinearizable,
            "round {round}: {report}"
        );
        assert_eq!(report.disagreement_count, 0, "round {round}: {report}");
    }
}
