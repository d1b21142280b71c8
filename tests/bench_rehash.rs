//! `kintsugi bench rehash` end to end on tiny tables: structure and
//! correctness of the report, never timings.

mod support;

use support::{kintsugi, path_str};

/// Fields every row carries, with the kind of value.
const NUMBERS: [&str; 14] = [
    "keys",
    "grow_ms",
    "grow_start_ms",
    "grow_end_ms",
    "splits",
    "round_trips",
    "cas",
    "bytes_read",
    "bytes_written",
    "insert_ops_per_sec_before",
    "insert_ops_per_sec_during",
    "insert_ops_per_sec_after",
    "load_factor_before_grow",
    "bucket_ms",
];

fn assert_sound(r: &serde_json::Value) {
    for key in NUMBERS {
        assert!(r[key].as_f64().is_some(), "{key} in {r}");
    }
    let variant = r["variant"].as_str().unwrap();
    assert_eq!(r["check_ok"], true, "{variant}: {r}");
    assert_eq!(r["check_keys"], r["expected_keys"], "{variant}");
    assert_eq!(r["duplicates"], 0, "{variant}");
    assert!(r["violations"].as_array().unwrap().is_empty(), "{variant}");
    // Not compared with the subtables: an inserter may split one the
    // grower was about to, which then counts as the inserter's.
    assert!(r["splits"].as_u64().unwrap() > 0, "{variant}: {r}");
    assert!(r["grow_end_ms"].as_f64().unwrap() >= r["grow_start_ms"].as_f64().unwrap());
    assert!(r["round_trips"].as_u64().unwrap() > 0 && r["bytes_read"].as_u64().unwrap() > 0);
}

#[test]
fn rehash_grows_every_variant_while_clients_insert() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rehash.json");
    let (code, stdout, stderr) = kintsugi(&[
        "bench",
        "rehash",
        "--variant",
        "optimal,rtx,dtx",
        "--keys",
        "20000",
        "--groups",
        "64",
        "--threads",
        "2",
        "--phase",
        "50ms",
        "--transport",
        "local",
        "--json",
        path_str(&json),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("rehash time: optimal"), "{stdout}");
    assert!(stdout.contains("rehash time: dtx"), "{stdout}");
    assert!(stdout.contains("ins/s during"), "{stdout}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let variants: Vec<&str> = rows.iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["optimal", "rtx", "dtx"]);
    for r in &rows {
        assert_sound(r);
        let variant = &r["variant"];
        assert_eq!(r["keys"], 20_000, "{variant}");
        assert_eq!(r["inserting_threads"], 2, "{variant}");
        // Filled until a subtable split: more keys than loaded.
        assert!(r["fill_keys"].as_u64().unwrap() > 0, "{variant}: {r}");
        assert!(r["fill_splits"].as_u64().unwrap() > 0, "{variant}: {r}");
        // The inserters inserted, and the table holds what they did.
        let inserts = r["inserts"].as_u64().unwrap();
        assert!(inserts > 0, "{variant}: {r}");
        assert_eq!(
            r["check_keys"].as_u64().unwrap(),
            r["keys_before_grow"].as_u64().unwrap() + inserts,
            "{variant}"
        );
        // The timeline: [ms, ops] pairs in bucket order, adding up to the inserts.
        let timeline = r["timeline"].as_array().unwrap();
        assert!(!timeline.is_empty(), "{variant}");
        let mut last = -1.0;
        let mut total = 0.0;
        for pair in timeline {
            let pair = pair.as_array().unwrap();
            assert_eq!(pair.len(), 2, "{variant}: {pair:?}");
            let (ms, ops) = (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap());
            assert!(ms > last, "{variant}: buckets in order");
            last = ms;
            total += ops;
        }
        assert_eq!(
            total as u64, inserts,
            "{variant}: the timeline counts every insert"
        );
    }
}

/// A tiny bulk-loaded table grown with nobody inserting.
const TINY_ALONE: [&str; 10] = [
    "bench",
    "rehash",
    "--keys",
    "5000",
    "--groups",
    "16",
    "--fill",
    "load",
    "--threads",
    "0",
];

#[test]
fn rehash_alone_prints_json_on_stdout() {
    let mut args = TINY_ALONE.to_vec();
    args.extend(["--variant", "rtx", "--transport", "shm", "--json", "-"]);
    let (code, stdout, stderr) = kintsugi(&args);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["variant"], "rtx");
    assert_sound(r);
    assert_eq!(r["fill_keys"], 0, "--fill load adds nothing");
    assert_eq!(r["inserts"], 0);
    assert_eq!(r["check_keys"], 5_000);
    // Alone, the grow splits each bulk-loaded subtable exactly once.
    assert_eq!(r["splits"], r["subtables_before_grow"]);
}

/// `--rounds 3` runs each variant three times, in reversed order in the
/// even round; optimal's split takes one round trip per entry unless told
/// to batch, and the same verbs either way.
#[test]
fn rehash_rounds_alternate_the_variants_and_report_the_median_ratio() {
    let args = |rounds: &'static str, entries: &'static str| {
        let mut a = TINY_ALONE.to_vec();
        a.extend(["--rounds", rounds, "--optimal-entries-per-round-trip", entries]);
        a
    };
    let (code, stdout, stderr) = kintsugi(&args("3", "1"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("rehash time over 3 of 3 rounds"), "{stdout}");
    assert!(stdout.contains("the original resize"), "{stdout}");
    assert!(stdout.contains("rtx #2"), "{stdout}");
    let order: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("bench rehash: round "))
        .collect();
    assert_eq!(
        order,
        [
            "1 of 3: optimal",
            "1 of 3: rtx",
            "2 of 3: rtx",
            "2 of 3: optimal",
            "3 of 3: optimal",
            "3 of 3: rtx"
        ]
    );

    let json = |entries| {
        let mut a = args("1", entries);
        a.extend(["--variant", "optimal", "--json", "-"]);
        let (code, stdout, stderr) = kintsugi(&a);
        assert_eq!(code, 0, "{stderr}");
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
        rows[0].clone()
    };
    let (one, batched) = (json("1"), json("4096"));
    assert_eq!(one["optimal_entries_per_round_trip"], 1);
    assert_eq!(one["cas"], batched["cas"]);
    assert_eq!(one["reads"], batched["reads"]);
    let rt = |r: &serde_json::Value| r["round_trips"].as_u64().unwrap();
    assert!(
        rt(&one) > rt(&batched) + 2 * one["splits"].as_u64().unwrap(),
        "{one} {batched}"
    );
}

/// A grower killed midway through its first split: rtx's locks are
/// repaired (by an inserter that met them or by the sweep before the check)
/// and the table checks out; dtx's are rolled back by recovery after
/// `--recover-after`, and the table checks out; optimal's stay, and its
/// failed check is reported without failing the command.
#[test]
fn rehash_with_a_killed_grower_is_repaired_by_rtx_and_recovered_for_dtx() {
    let (code, stdout, stderr) = kintsugi(&[
        "bench",
        "rehash",
        "--variant",
        "optimal,rtx,dtx",
        "--recover-after",
        "50ms",
        "--keys",
        "20000",
        "--groups",
        "16",
        "--threads",
        "1",
        "--phase",
        "30ms",
        "--transport",
        "local",
        "--kill-grower",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let (optimal, rtx, dtx) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!(
        optimal["grower_killed"], "at crash point hash-split-midway",
        "{optimal}"
    );
    assert_eq!(rtx["grower_killed"], "at crash point tx-commit-point", "{rtx}");
    assert_eq!(dtx["grower_killed"], "at crash point dtx-before-commit", "{dtx}");
    assert!(
        stderr.contains("recovery rolled the dead grower's log"),
        "{stderr}"
    );
    assert_eq!(dtx["check_ok"], true, "{dtx}");
    assert_eq!(
        dtx["inserter_repairs"], 0,
        "nobody but recovery acts on a DTX lock: {dtx}"
    );
    let (kill, rolled) = (
        dtx["kill_ms"].as_f64().unwrap(),
        dtx["rolled_ms"].as_f64().unwrap(),
    );
    assert!(rolled >= kill + 50.0, "rolled --recover-after the kill: {dtx}");
    assert!(rtx["rolled_ms"].is_null() && optimal["rolled_ms"].is_null());
    for r in &rows {
        // Killed in its first split, which therefore did not count.
        assert_eq!(r["splits"], 0, "{r}");
        assert!(r["kill_ms"].as_f64().is_some(), "{r}");
        assert!(r["inserters_blocked"].as_u64().unwrap() <= 1, "{r}");
        assert!(r.get("recovery_ms").is_some(), "{r}");
    }

    assert_eq!(rtx["check_ok"], true, "{rtx}");
    assert_eq!(rtx["inserters_blocked"], 0, "{rtx}");
    let repairs = rtx["inserter_repairs"].as_u64().unwrap() + rtx["sweep_repairs"].as_u64().unwrap();
    assert!(repairs >= 1, "the dead grower's rTX was repaired: {rtx}");

    assert_eq!(optimal["check_ok"], false, "{optimal}");
    assert_eq!(optimal["inserter_repairs"], 0);
    assert_eq!(optimal["sweep_repairs"], 0);
    let violations = optimal["violations"].as_array().unwrap();
    assert!(
        violations
            .iter()
            .any(|v| v.as_str().unwrap().contains("locked by owner")),
        "{optimal}"
    );
}

#[test]
fn rehash_refuses_bad_arguments() {
    for (args, needle) in [
        (vec!["bench", "rehash", "--keys", "0"], "--keys"),
        (vec!["bench", "rehash", "--groups", "0"], "--groups"),
        (vec!["bench", "rehash", "--variant", "ford"], "variant"),
        (vec!["bench", "rehash", "--bucket", "10us"], "--bucket"),
        (
            vec!["bench", "rehash", "--keys", "1000000", "--dir-depth", "9"],
            "--dir-depth",
        ),
        (vec!["bench", "rehash", "--transport", "infiniband"], "transport"),
        (
            vec!["bench", "rehash", "--kill-grower", "--threads", "0"],
            "--kill-grower",
        ),
    ] {
        let (code, _, stderr) = kintsugi(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    // Without the rdma feature, rdma is refused saying how to get it.
    if !cfg!(feature = "rdma") {
        let (code, _, stderr) = kintsugi(&["bench", "rehash", "--transport", "rdma"]);
        assert_ne!(code, 0);
        assert!(stderr.contains("--features rdma"), "{stderr}");
    }
}
