//! `kintsugi chaos crash-points` end to end.

mod support;

use support::kintsugi;

#[test]
fn rtx_crash_points_report_json_and_exit_zero() {
    let (code, stdout, stderr) = kintsugi(&[
        "chaos",
        "crash-points",
        "--target",
        "rtx",
        "--objects",
        "1,2",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["target"], "rtx");
    assert!(v["crash_points"].as_u64().unwrap() > 0);
    assert_eq!(v["violations"], 0);
}

#[test]
fn bad_arguments_are_refused() {
    let (code, _, stderr) = kintsugi(&["chaos", "crash-points", "--target", "rtx", "--objects", "0"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--objects 0"), "{stderr}");
    let (code, _, stderr) = kintsugi(&["chaos", "crash-points", "--target", "nope"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("invalid value"), "{stderr}");
}

#[test]
fn btree_crash_points_fail_only_where_tolerance_is_promised() {
    let (code, stdout, stderr) = kintsugi(&[
        "chaos",
        "crash-points",
        "--target",
        "btree",
        "--variant",
        "rtx",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (v["target"].as_str(), v["violations"].as_u64()),
        (Some("btree/rtx"), Some(0))
    );
    let (code, stdout, _) = kintsugi(&[
        "chaos",
        "crash-points",
        "--target",
        "btree",
        "--variant",
        "optimal",
        "--json",
    ]);
    assert_eq!(code, 0, "optimal's violations are reported, not failed on");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(v["violations"].as_u64().unwrap() > 0);
}

#[test]
fn hash_crash_points_fail_only_where_tolerance_is_promised() {
    let (code, stdout, stderr) = kintsugi(&[
        "chaos",
        "crash-points",
        "--target",
        "hash",
        "--variant",
        "rtx",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (v["target"].as_str(), v["violations"].as_u64()),
        (Some("hash/rtx"), Some(0))
    );
    assert_eq!(v["scenarios"].as_array().map(Vec::len), Some(4));
    let (code, stdout, _) = kintsugi(&[
        "chaos",
        "crash-points",
        "--target",
        "hash",
        "--variant",
        "optimal",
    ]);
    assert_eq!(code, 0, "optimal's violations are reported, not failed on");
    assert!(stdout.contains("VIOLATION owner insert that splits"), "{stdout}");
}
