//! Statistical and concurrency tests of the generators. Every stream is
//! seeded, so each number below is fixed and the tests are deterministic;
//! the tolerances only leave room for a different (still seeded) stream.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::*;

fn keyspace(workload: Workload, distribution: Distribution, records: u64, seed: u64) -> Arc<Keyspace> {
    match Keyspace::new(WorkloadSpec {
        workload,
        distribution,
        records,
        seed,
    }) {
        Ok(k) => k,
        Err(e) => panic!("valid spec rejected: {e}"),
    }
}

fn share(count: u64, total: u64) -> f64 {
    count as f64 / total as f64
}

#[test]
fn mixes_match_table_1_over_100k_ops() {
    const OPS: u64 = 100_000;
    for workload in Workload::ALL {
        for distribution in Distribution::ALL {
            let ks = keyspace(workload, distribution, 10_000, 1);
            let mut counts: HashMap<OpKind, u64> = HashMap::new();
            for op in ks.generator(0).take(OPS as usize) {
                *counts.entry(op.kind()).or_default() += 1;
            }
            let mix = workload.mix();
            for (kind, percent) in [
                (OpKind::Read, mix.read),
                (OpKind::Update, mix.update),
                (OpKind::Insert, mix.insert),
                (OpKind::Scan, mix.scan),
            ] {
                let got = share(counts.get(&kind).copied().unwrap_or(0), OPS);
                let want = f64::from(percent) / 100.0;
                assert!(
                    (got - want).abs() < 0.01,
                    "{workload}/{distribution} {kind}: {got:.4} vs {want}"
                );
                if percent == 0 {
                    assert_eq!(got, 0.0, "{workload}/{distribution} has no {kind}");
                }
            }
            assert_eq!(ks.inserted(), counts.get(&OpKind::Insert).copied().unwrap_or(0));
        }
    }
}

#[test]
fn zipf_is_skewed_and_scrambled() {
    const RECORDS: u64 = 100_000;
    const OPS: u64 = 500_000;
    let ks = keyspace(Workload::C, Distribution::Zipf, RECORDS, 2);
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for op in ks.generator(0).take(OPS as usize) {
        *counts.entry(op.key()).or_default() += 1;
    }
    let mut by_popularity: Vec<(u64, u64)> = counts.into_iter().collect();
    by_popularity.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));

    // The hottest key gets 1/ζ(n) of the requests: 7.8% for n = 100k.
    let zeta = ks.zipf().map_or(0.0, |z| z.zeta());
    let hottest = share(by_popularity[0].1, OPS);
    assert!(
        (hottest - 1.0 / zeta).abs() < 0.005,
        "hottest {hottest:.4} vs {:.4}",
        1.0 / zeta
    );
    // The top 1% of keys get well over 40% (about 60% for θ = 0.99).
    let top: u64 = by_popularity
        .iter()
        .take((RECORDS / 100) as usize)
        .map(|&(_, c)| c)
        .sum();
    assert!(share(top, OPS) > 0.4, "top 1% got {:.3}", share(top, OPS));

    // Hot keys are spread over the record indices and the key space.
    let map = ks.key_map();
    let hot: Vec<u64> = by_popularity.iter().take(100).map(|&(k, _)| k).collect();
    let indices: Vec<u64> = hot.iter().filter_map(|&k| map.index(k)).collect();
    assert_eq!(indices.len(), 100);
    assert!(indices.iter().all(|&i| i < RECORDS));
    let (lo, hi) = (indices.iter().min().copied(), indices.iter().max().copied());
    assert!(
        hi.unwrap_or(0) - lo.unwrap_or(0) > RECORDS / 2,
        "hot indices {lo:?}..{hi:?}"
    );
    let quarters: HashSet<u64> = hot.iter().map(|k| k >> 62).collect();
    assert_eq!(quarters.len(), 4, "hot keys all in {quarters:?}");
}

#[test]
fn uniform_covers_every_record_evenly() {
    const RECORDS: u64 = 1000;
    let ks = keyspace(Workload::C, Distribution::Uniform, RECORDS, 3);
    let mut counts = vec![0u32; RECORDS as usize];
    for op in ks.generator(0).take(100_000) {
        match ks.key_map().index(op.key()) {
            Some(i) if i < RECORDS => counts[i as usize] += 1,
            other => panic!("read of an unloaded key (index {other:?})"),
        }
    }
    let (min, max) = (counts.iter().min().copied(), counts.iter().max().copied());
    assert!(
        min >= Some(50) && max <= Some(160),
        "per-key reads in {min:?}..={max:?} (expect ~100)"
    );
}

#[test]
fn scans_cover_1_to_100_keys_from_loaded_keys() {
    for distribution in Distribution::ALL {
        let ks = keyspace(Workload::E, distribution, 10_000, 4);
        let mut lengths = [0u32; MAX_SCAN_LENGTH + 1];
        let (mut scans, mut total) = (0u64, 0u64);
        for op in ks.generator(0).take(100_000) {
            if let Op::Scan { start, count } = op {
                assert!((1..=MAX_SCAN_LENGTH).contains(&count), "scan of {count}");
                assert!(matches!(ks.key_map().index(start), Some(i) if i < 10_000));
                lengths[count] += 1;
                scans += 1;
                total += count as u64;
            }
        }
        let mean = total as f64 / scans as f64;
        assert!(
            (mean - 50.5).abs() < 0.5,
            "{distribution}: mean scan length {mean:.2}"
        );
        assert!(
            lengths[1..].iter().all(|&n| n > 0),
            "{distribution}: some length never drawn"
        );
    }
}

#[test]
fn d_reads_mostly_hit_the_latest_inserts() {
    const RECORDS: u64 = 100_000;
    const OPS: usize = 100_000;
    let ks = keyspace(Workload::D, Distribution::Uniform, RECORDS, 5);
    let map = *ks.key_map();
    let mut gen = ks.generator(0);
    let (mut reads, mut of_inserted, mut of_newest_percent) = (0u64, 0u64, 0u64);
    let mut inserted: HashSet<u64> = HashSet::new();
    for _ in 0..OPS {
        let count = ks.key_count();
        match gen.next_op() {
            Op::Read { key } => {
                let i = map.index(key).unwrap_or(u64::MAX);
                assert!(i < count, "read of index {i}, only {count} handed out");
                reads += 1;
                if i >= RECORDS {
                    assert!(inserted.contains(&key), "read of an inserted key never inserted");
                    of_inserted += 1;
                }
                if i >= count - count / 100 {
                    of_newest_percent += 1;
                }
            }
            Op::Insert { key, .. } => {
                assert_eq!(map.index(key), Some(count));
                inserted.insert(key);
            }
            other => panic!("D generated {other:?}"),
        }
    }
    // ~5k inserts against 100k loaded records: about two thirds of
    // the reads hit an inserted key, and about 60% the newest 1% of keys.
    assert!(
        share(of_inserted, reads) > 0.55,
        "{:.3} of reads hit inserts",
        share(of_inserted, reads)
    );
    assert!(
        share(of_newest_percent, reads) > 0.5,
        "{:.3} hit the newest 1%",
        share(of_newest_percent, reads)
    );

    // D ignores the request distribution: Zipf gives the same stream.
    let uniform: Vec<Op> = keyspace(Workload::D, Distribution::Uniform, RECORDS, 5)
        .generator(0)
        .take(1000)
        .collect();
    let zipf: Vec<Op> = keyspace(Workload::D, Distribution::Zipf, RECORDS, 5)
        .generator(0)
        .take(1000)
        .collect();
    assert_eq!(uniform, zipf);
}

#[test]
fn same_seed_same_stream() {
    for workload in Workload::ALL {
        for distribution in Distribution::ALL {
            let run = |seed: u64, thread: usize| -> Vec<Op> {
                keyspace(workload, distribution, 50_000, seed)
                    .generator(thread)
                    .take(10_000)
                    .collect()
            };
            let first = run(9, 3);
            assert_eq!(first, run(9, 3), "{workload}/{distribution}");
            assert_ne!(
                first,
                run(9, 4),
                "{workload}/{distribution}: threads share a stream"
            );
            assert_ne!(
                first,
                run(10, 3),
                "{workload}/{distribution}: seeds share a stream"
            );
        }
    }
}

#[test]
fn values_are_deterministic_and_fresh_per_op() {
    let ks = keyspace(Workload::A, Distribution::Uniform, 10, 6);
    let values: Vec<u64> = ks
        .generator(0)
        .take(10_000)
        .filter_map(|op| match op {
            Op::Update { value, .. } => Some(value),
            _ => None,
        })
        .collect();
    let distinct: HashSet<u64> = values.iter().copied().collect();
    assert_eq!(distinct.len(), values.len(), "an update reused a value");
}

#[test]
fn concurrent_inserts_get_distinct_keys() {
    const RECORDS: u64 = 1000;
    const THREADS: usize = 4;
    const OPS: usize = 25_000;
    for workload in [Workload::D, Workload::E] {
        let ks = keyspace(workload, Distribution::Zipf, RECORDS, 7);
        let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let mut gen = ks.generator(t);
                    s.spawn(move || {
                        let mut inserts = Vec::new();
                        for _ in 0..OPS {
                            match gen.next_op() {
                                Op::Insert { key, .. } => inserts.push(key),
                                op => assert!(op.key() != 0 && op.key() != u64::MAX),
                            }
                        }
                        inserts
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let all: Vec<u64> = per_thread.concat();
        assert!(
            all.len() > THREADS * OPS / 25,
            "{workload}: only {} inserts",
            all.len()
        );
        assert_eq!(ks.inserted(), all.len() as u64);
        let mut indices: Vec<u64> = all.iter().filter_map(|&k| ks.key_map().index(k)).collect();
        indices.sort_unstable();
        let expected: Vec<u64> = (RECORDS..RECORDS + all.len() as u64).collect();
        assert_eq!(
            indices, expected,
            "{workload}: inserted indices not exactly the next ones"
        );
        assert!(all.iter().all(|&k| k != 0 && k != u64::MAX));
    }
}

#[test]
fn generated_keys_are_never_reserved() {
    for workload in Workload::ALL {
        let ks = keyspace(workload, Distribution::Zipf, 1_000, 8);
        for op in ks.generator(0).take(20_000) {
            assert!(op.key() != 0 && op.key() != u64::MAX, "{workload}: {op:?}");
        }
    }
}

#[test]
fn tiny_keyspaces_work() {
    for workload in Workload::ALL {
        for distribution in Distribution::ALL {
            let ks = keyspace(workload, distribution, 1, 0);
            let only = ks.key_map().key(0);
            for op in ks.generator(0).take(1000) {
                if !matches!(op, Op::Insert { .. }) && workload != Workload::D {
                    assert_eq!(op.key(), only);
                }
            }
        }
    }
}

#[test]
fn bad_specs_are_rejected() {
    for records in [0, MAX_RECORDS + 1] {
        let spec = WorkloadSpec {
            workload: Workload::A,
            distribution: Distribution::Uniform,
            records,
            seed: 0,
        };
        match Keyspace::new(spec) {
            Err(e) => assert_eq!(e, SpecError::Records(records)),
            Ok(_) => panic!("{records} records accepted"),
        }
    }
    assert_eq!(
        SpecError::Records(0).to_string(),
        "record count 0 out of range: must be in 1..=281474976710656"
    );
}
