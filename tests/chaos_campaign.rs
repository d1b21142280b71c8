//! `kintsugi chaos campaign` end to end: a short campaign of every local-
//! cluster fault kind on each index (real processes: three control-plane
//! members, five memory nodes), every history checked for linearizability;
//! and the same campaign with a replica's writes dropped, or with memory
//! nodes that serve a wiped image, which must fail and print the command
//! that reproduces the seed. The long campaigns (100 seeds a kind) are
//! commands in docs/chaos.md. Asserts verdicts and checks, never timings.

mod support;

use std::path::{Path, PathBuf};
use support::{kintsugi, path_str};

const KINDS: [&str; 10] = [
    "kill-memnode",
    "restart-memnode",
    "pause-memnode",
    "kill-control-leader",
    "clock-skew",
    "partition",
    "wipe-memnode",
    "pause-control-leader",
    "transfer-leader",
    "snapshot-restore",
];

/// The shipped campaign file of `index`, shortened, written in `dir`.
fn campaign_file(dir: &Path, index: &str) -> PathBuf {
    shortened(dir, &format!("campaign-{index}"))
}

/// `deploy/experiments/NAME.toml` (a campaign's shape: 3 s, 2,000 keys)
/// shortened to 2 s and 1,000 keys, written in `dir`.
fn shortened(dir: &Path, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("deploy/experiments/{name}.toml")),
    )
    .unwrap();
    assert!(text.contains("duration = \"3s\"") && text.contains("keys = 2000"));
    let text = text
        .replace("duration = \"3s\"", "duration = \"2s\"")
        .replace("keys = 2000", "keys = 1000");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// `kintsugi chaos campaign --experiment FILE ARGS... [--out OUT]`.
fn campaign(file: &Path, args: &[&str], out: Option<&Path>) -> (i32, String, String) {
    let mut all = vec!["chaos", "campaign", "--experiment", path_str(file)];
    all.extend_from_slice(args);
    if let Some(out) = out {
        all.extend_from_slice(&["--out", path_str(out)]);
    }
    kintsugi(&all)
}

/// One seed of each kind; every row must pass with its checks run.
fn every_kind_passes(index: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign_file(dir.path(), index);
    for (i, kind) in KINDS.iter().enumerate() {
        let out = dir.path().join(kind);
        let seed = (i + 1).to_string();
        let args = ["--seeds", "1", "--first-seed", &seed, "--kinds", kind];
        let (code, stdout, stderr) = campaign(&file, &args, Some(&out));
        assert_eq!(code, 0, "{index} {kind}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("1 of 1 seed(s) passed"), "{stdout}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("campaign.json")).unwrap()).unwrap();
        let row = &report["rows"][0];
        assert_eq!(row["passed"], true, "{row}");
        assert!(row["ops"].as_u64().unwrap() > 0, "{row}");
        assert!(
            row["faults"].as_array().unwrap().iter().any(|f| {
                let f = f.as_str().unwrap();
                f.starts_with(kind) || (*kind == "restart-memnode" && f.starts_with("kill-memnode"))
            }),
            "{kind}: {row}"
        );
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("seed-{seed}")).join("summary.json")).unwrap(),
        )
        .unwrap();
        let check = &summary["check"];
        let lin = &check["linearizability"];
        assert_eq!(
            lin["keys_checked"], 1000,
            "every key is read back and checked: {lin}"
        );
        assert!(lin["ok"].as_u64().unwrap() > 1000, "{lin}");
        for k in ["non_linearizable_keys", "unknown_keys", "disagreement_count"] {
            assert_eq!(lin[k], 0, "{k}: {lin}");
        }
        assert_eq!(check["lost"], 0, "{check}");
        assert_eq!(check["replicas"]["differences"], 0, "{check}");
        // A passing seed keeps no images or history (they are for failures).
        assert!(!out.join(format!("seed-{seed}")).join("history.jsonl").exists());
    }
}

#[test]
fn a_short_campaign_of_every_fault_kind_passes_on_the_btree() {
    every_kind_passes("btree");
}

#[test]
fn a_short_campaign_of_every_fault_kind_passes_on_the_hash_table() {
    every_kind_passes("hash");
}

#[test]
fn a_campaign_with_a_replicas_writes_dropped_fails_and_names_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign_file(dir.path(), "btree");
    let out = dir.path().join("out");
    let args = [
        "--seeds",
        "1",
        "--first-seed",
        "7",
        "--kinds",
        "clock-skew",
        "--sabotage",
        "drop-backup-writes",
    ];
    let (code, stdout, stderr) = campaign(&file, &args, Some(&out));
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("seed 7 FAILED"), "{stdout}");
    let repro = format!(
        "reproduce: kintsugi chaos campaign --experiment {} --seeds 1 --first-seed 7 --kinds clock-skew --sabotage drop-backup-writes",
        path_str(&file)
    );
    assert!(stdout.contains(&repro), "{stdout}");
    // The backup missed every client write: the replicas differ.
    assert!(stdout.contains("replica difference"), "{stdout}");
    // A failed seed keeps what a reader needs.
    assert!(out.join("seed-7").join("history.jsonl").exists());
}

/// The hash table's backups miss the KV blocks its slots name: the check
/// reads every replica's copy of each (the slots alone compare equal).
#[test]
fn a_hash_campaign_with_a_replicas_writes_dropped_fails_and_names_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign_file(dir.path(), "hash");
    let args = [
        "--seeds",
        "1",
        "--first-seed",
        "7",
        "--kinds",
        "clock-skew",
        "--sabotage",
        "drop-backup-writes",
    ];
    let out = dir.path().join("out");
    let (code, stdout, stderr) = campaign(&file, &args, Some(&out));
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("seed 7 FAILED"), "{stdout}");
    assert!(stdout.contains("--sabotage drop-backup-writes"), "{stdout}");
}

/// Memory nodes that serve a wiped image as if it held their replicas (as
/// they did before image identity, design.md §1b): a node wiped and
/// started again at once is taken back under its old record, never
/// declared dead, and serves zeroed replicas. The seed must fail, named.
#[test]
fn a_wipe_campaign_whose_nodes_serve_wiped_images_fails_and_names_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let file = shortened(dir.path(), "wipe-memnode-btree");
    // The wiped node must be back before its lease could lapse, or it is
    // declared dead for its silence and the sabotage shows nothing: a
    // lease of 2 s leaves seconds for a slow start on a loaded machine.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("memnode_lease = \"250ms\""));
    std::fs::write(
        &file,
        text.replace("memnode_lease = \"250ms\"", "memnode_lease = \"2s\""),
    )
    .unwrap();
    let out = dir.path().join("out");
    let args = ["--seeds", "1", "--first-seed", "3", "--sabotage", "serve-wiped"];
    let (code, stdout, stderr) = campaign(&file, &args, Some(&out));
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("seed 3 FAILED"), "{stdout}");
    let repro = format!(
        "reproduce: kintsugi chaos campaign --experiment {} --seeds 1 --first-seed 3 --sabotage serve-wiped",
        path_str(&file)
    );
    assert!(stdout.contains(&repro), "{stdout}");
    // Never declared dead: the wipe's phases did not come.
    assert!(
        stdout.contains("wipe-memnode") && stdout.contains("did not complete its phases"),
        "{stdout}"
    );
    assert!(out.join("seed-3").join("rtx").join("cluster").exists());
}

#[test]
fn a_campaign_refuses_kinds_it_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign_file(dir.path(), "btree");
    let (code, _, stderr) = campaign(&file, &["--kinds", "kill-client", "--dry-run"], None);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("kill-client") && stderr.contains("campaign.kinds"),
        "{stderr}"
    );
    let (code, _, stderr) = campaign(&file, &["--kinds", "meteor"], None);
    assert_ne!(code, 0);
    assert!(stderr.contains("'meteor' is not a fault kind"), "{stderr}");
    let (code, stdout, _) = campaign(&file, &["--seeds", "3", "--dry-run"], None);
    assert_eq!(code, 0);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("seed ")).count(),
        3,
        "{stdout}"
    );
}

/// The data-path kinds (`deploy/experiments/data-path-*.toml`), one seed
/// each, on the B+tree under rtx and the hash table under dtx (whose late
/// release is an unconditional WRITE). A late-delivery must have held some
/// of the old client's frames, had its heir take its owner ids, and had the
/// frames refused when the network delivered them.
#[test]
fn data_path_partitions_and_late_deliveries_pass_on_each_index() {
    let dir = tempfile::tempdir().unwrap();
    for (index, variant) in [("btree", "rtx"), ("hash", "dtx")] {
        let file =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("deploy/experiments/data-path-{index}.toml"));
        for kind in ["partition-data", "late-delivery"] {
            let out = dir.path().join(format!("{index}-{kind}"));
            let args = ["--seeds", "1", "--kinds", kind, "--variant", variant];
            let (code, stdout, stderr) = campaign(&file, &args, Some(&out));
            assert_eq!(code, 0, "{index} {variant} {kind}:\n{stdout}\n{stderr}");
            assert!(stdout.contains("1 of 1 seed(s) passed"), "{stdout}");
            let seed = out.join("seed-1");
            let summary: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(seed.join("summary.json")).unwrap()).unwrap();
            assert_eq!(summary["check"]["lost"], 0, "{summary}");
            let faults = summary["faults"].as_array().unwrap();
            assert!(faults.iter().all(|f| f["kind"] == kind), "{faults:?}");
            if kind == "late-delivery" {
                for f in faults {
                    let p = &f["phases"];
                    assert!(p["forgotten_ms"].is_number() && p["heir_ms"].is_number(), "{p}");
                    assert!(p["held_bytes"].as_u64().unwrap() > 0, "frames were held: {p}");
                }
                let logs = std::fs::read_dir(seed.join(variant).join("cluster"))
                    .unwrap()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("memnode-"))
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                    .map(|e| std::fs::read_to_string(e.path()).unwrap())
                    .collect::<String>();
                assert!(
                    logs.contains("is fenced"),
                    "a memory node refused the old client's late frames"
                );
            }
        }
    }
}
