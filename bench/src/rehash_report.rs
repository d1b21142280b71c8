//! `kintsugi bench rehash` results: one row per variant (also the JSON
//! array element), a table, and optimal's grow time over rtx's (or, with
//! `--kill-grower`, each variant's time from the kill to normal throughput).

use std::fmt::Write as _;

use index::hash::{HashCheckReport, HashLoadReport};
use index::Variant;
use serde::Serialize;

use crate::common::median;
use crate::format::{micros, thousands};
use crate::rehash_plan::Plan;
use crate::rehash_run::{Grow, Inserts};

/// How the table was before the grow.
pub struct Loaded {
    /// What the bulk load built.
    pub load: HashLoadReport,
    /// Keys the fill inserted after the bulk load, and the splits it made.
    pub fill_inserted: u64,
    /// Subtable splits the fill's inserts made.
    pub fill_splits: u64,
    /// Subtables when the timed part started.
    pub subtables: u64,
    /// Keys per slot when the timed part started.
    pub load_factor: f64,
    /// Whether a fill client or inserter stopped at the run's key limit.
    pub limit_reached: bool,
    /// Inserts of fresh keys that found them present (a bug if any).
    pub duplicates: u64,
}

/// One variant's run.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(Default))]
pub struct Row {
    /// Which run of the variant (`--rounds`), from 1.
    pub round: usize,
    /// The variant grown (optimal or rtx).
    pub variant: String,
    /// Where the memory was (`--transport`).
    pub transport: &'static str,
    /// Keys bulk-loaded (--keys).
    pub keys: u64,
    /// Bucket groups per subtable (`--groups`).
    pub groups: u32,
    /// Directory depth: room for at most 2^dir_depth subtables.
    pub dir_depth: u8,
    /// The bulk load's subtable depth.
    pub load_depth: u8,
    /// How full the table was made before the grow (`--fill`: split or load).
    pub fill: &'static str,
    /// Keys the fill added until the first split, and its splits.
    pub fill_keys: u64,
    /// Subtable splits the fill made.
    pub fill_splits: u64,
    /// Keys and subtables when the timed part started, and keys per slot.
    pub keys_before_grow: u64,
    /// Subtables when the timed part started.
    pub subtables_before_grow: u64,
    /// Keys per slot when the timed part started.
    pub load_factor_before_grow: f64,
    /// Client threads inserting during the timed part (`--threads`).
    pub inserting_threads: usize,
    /// optimal: entries a split handles per round trip (1: the original
    /// resize; rtx rows carry it too, and ignore it).
    pub optimal_entries_per_round_trip: usize,

    /// Wall time of `HashTable::grow`.
    pub grow_ms: f64,
    /// When it started and ended, from when the inserters started.
    pub grow_start_ms: f64,
    /// When the grow ended (or the grower died), in ms from when the inserters
    /// started.
    pub grow_end_ms: f64,
    /// Splits the grower made, and its verbs during the grow.
    pub splits: u64,
    /// Round trips the grower made during the grow.
    pub round_trips: u64,
    /// READ verbs the grower issued during the grow.
    pub reads: u64,
    /// WRITE verbs the grower issued during the grow.
    pub writes: u64,
    /// CAS verbs the grower issued during the grow.
    pub cas: u64,
    /// Bytes the grower's READs asked for during the grow.
    pub bytes_read: u64,
    /// Bytes the grower's WRITEs carried during the grow.
    pub bytes_written: u64,
    /// The grower's retries (lost races, stale directory) and, rtx, its
    /// aborted attempts and repairs.
    pub grower_retries: u64,
    /// rtx: the grower's aborted attempts.
    pub grower_aborts: u64,
    /// rtx: the grower's repairs of other owners' transactions.
    pub grower_repairs: u64,

    /// Inserts completed during the timed part.
    pub inserts: u64,
    /// Inserts per second before the grow started.
    pub insert_ops_per_sec_before: f64,
    /// Inserts per second while the grower grew the table.
    pub insert_ops_per_sec_during: f64,
    /// Inserts per second from the grow's end until the inserters stopped.
    pub insert_ops_per_sec_after: f64,
    /// The longest run of timeline buckets in which no insert completed.
    pub insert_stall_ms: f64,
    /// Splits the inserters made themselves, and writes of theirs that met
    /// a split and had to be settled after it.
    pub inserter_splits: u64,
    /// Inserters' writes that met a split and were settled after it.
    pub inserts_settled: u64,
    /// Whether inserting stopped early at the run's key limit.
    pub key_limit_reached: bool,

    /// `--kill-grower`: the grower died midway through its first split
    /// (why, and when, from when the inserters started).
    pub grower_killed: Option<String>,
    /// `--kill-grower`: when the grower died, in ms from when the inserters
    /// started.
    pub kill_ms: Option<f64>,
    /// From the kill to normal insert throughput (`workload::timeline::recovery`); `None`
    /// when it was not reached before the run ended.
    pub recovery_ms: Option<f64>,
    /// dtx: when recovery rolled the dead grower's log, in ms from when
    /// the inserters started (`--recover-after` after the kill).
    pub rolled_ms: Option<f64>,
    /// Inserters that gave up on a subtable the dead grower left locked,
    /// and locks of others the inserters repaired (rtx).
    pub inserters_blocked: u64,
    /// rtx: locks of others the inserters repaired.
    pub inserter_repairs: u64,
    /// Expired locks the sweep before the check repaired (rtx): what no
    /// inserter met before the run ended.
    pub sweep_repairs: u64,

    /// The end-of-run check.
    pub check_ok: bool,
    /// Keys the check found in the table.
    pub check_keys: u64,
    /// Keys loaded and inserted: what the table should hold.
    pub expected_keys: u64,
    /// Inserts of a fresh key (fill and timed part) that found it present; a
    /// bug if any.
    pub duplicates: u64,
    /// Structural violations the check found.
    pub violations: Vec<String>,

    /// The throughput timeline: `[bucket start in ms, inserts completed in
    /// the bucket]`, from when the inserters started until they stopped.
    pub bucket_ms: f64,
    /// One `[ms, inserts]` pair per bucket of `bucket_ms`.
    pub timeline: Vec<[f64; 2]>,
}

impl Row {
    /// The row of one variant's run (round 1: the caller sets the round);
    /// `expected_keys` is what the table should hold.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        variant: Variant,
        plan: &Plan,
        loaded: &Loaded,
        grow: &Grow,
        inserts: &Inserts,
        check: &HashCheckReport,
        expected_keys: u64,
    ) -> Row {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let rate = |ops: u64, d: std::time::Duration| {
            if d.is_zero() {
                0.0
            } else {
                ops as f64 / d.as_secs_f64()
            }
        };
        let bucket_ms = ms(plan.bucket);
        // Buckets up to the stop; the last inserts finish just after it.
        let buckets = (grow.stop.as_nanos() / plan.bucket.as_nanos().max(1)) as usize + 1;
        let mut timeline = inserts.timeline.clone();
        timeline.resize(buckets.max(timeline.len()), 0);
        let stall = if plan.threads == 0 {
            0
        } else {
            longest_zero_run(&timeline[..buckets.min(timeline.len())])
        };
        let fabric = grow.fabric;
        let recovery_ms = grow.killed.as_ref().and_then(|_| {
            let kill_bucket = (grow.end.as_nanos() / plan.bucket.as_nanos().max(1)) as usize;
            workload::timeline::recovery(&timeline[..buckets.min(timeline.len())], kill_bucket, 1.0)
                .map(|b| (b as f64 * bucket_ms - ms(grow.end)).max(0.0))
        });
        Row {
            round: 1,
            variant: variant.to_string(),
            transport: plan.transport.name(),
            keys: plan.keys,
            groups: plan.config.groups,
            dir_depth: plan.config.dir_depth,
            load_depth: loaded.load.depth,
            fill: plan.fill.name(),
            fill_keys: loaded.fill_inserted,
            fill_splits: loaded.fill_splits,
            keys_before_grow: plan.keys + loaded.fill_inserted,
            subtables_before_grow: loaded.subtables,
            load_factor_before_grow: loaded.load_factor,
            inserting_threads: plan.threads,
            optimal_entries_per_round_trip: plan.optimal_entries_per_round_trip,
            grow_ms: ms(grow.time()),
            grow_start_ms: ms(grow.start),
            grow_end_ms: ms(grow.end),
            splits: grow.splits,
            round_trips: fabric.round_trips,
            reads: fabric.reads,
            writes: fabric.writes,
            cas: fabric.cas,
            bytes_read: fabric.bytes_read,
            bytes_written: fabric.bytes_written,
            grower_retries: grow.stats.retries,
            grower_aborts: grow.aborts,
            grower_repairs: grow.repairs,
            inserts: inserts.inserted,
            insert_ops_per_sec_before: rate(inserts.per_phase[0], grow.start),
            insert_ops_per_sec_during: rate(inserts.per_phase[1], grow.time()),
            insert_ops_per_sec_after: rate(inserts.per_phase[2], grow.stop.saturating_sub(grow.end)),
            insert_stall_ms: stall as f64 * bucket_ms,
            inserter_splits: inserts.splits,
            inserts_settled: inserts.settled,
            key_limit_reached: loaded.limit_reached,
            grower_killed: grow.killed.clone(),
            kill_ms: grow.killed.as_ref().map(|_| ms(grow.end)),
            recovery_ms,
            rolled_ms: grow.rolled.map(ms),
            inserters_blocked: inserts.blocked,
            inserter_repairs: inserts.repairs,
            sweep_repairs: 0,
            check_ok: check.is_ok() && check.keys == expected_keys && loaded.duplicates == 0,
            check_keys: check.keys,
            expected_keys,
            duplicates: loaded.duplicates,
            violations: check.violations.clone(),
            bucket_ms,
            timeline: timeline
                .iter()
                .enumerate()
                .map(|(i, &n)| [i as f64 * bucket_ms, n as f64])
                .collect(),
        }
    }

    /// Whether a failed check is what the run shows rather than a fault:
    /// optimal cannot repair a dead splitter's locks.
    pub fn check_may_fail(&self) -> bool {
        self.grower_killed.is_some() && self.variant == Variant::Optimal.to_string()
    }

    /// Why the check failed (empty when it passed).
    pub fn check_problem(&self) -> String {
        let mut p = Vec::new();
        if !self.violations.is_empty() {
            p.push(format!(
                "{} violation(s), first: {}",
                self.violations.len(),
                self.violations[0]
            ));
        }
        if self.check_keys != self.expected_keys {
            p.push(format!(
                "the table holds {} keys, {} were loaded and inserted",
                self.check_keys, self.expected_keys
            ));
        }
        if self.duplicates > 0 {
            p.push(format!(
                "{} insert(s) of a fresh key answered 'present'",
                self.duplicates
            ));
        }
        p.join("; ")
    }
}

/// The longest run of zeros in `v`.
fn longest_zero_run(v: &[u64]) -> usize {
    let (mut best, mut run) = (0, 0);
    for &x in v {
        run = if x == 0 { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// Every row of a run, in the order they ran.
#[derive(Clone, Debug)]
pub struct RehashReport {
    /// One per variant and round.
    pub rows: Vec<Row>,
}

impl RehashReport {
    /// The rows as a JSON array.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.rows).unwrap_or_else(|e| format!("\"cannot encode: {e}\""))
    }

    /// The table.
    pub fn table(&self) -> String {
        table(&self.rows)
    }

    /// Why the run failed its end-of-run checks, if it did (a check that
    /// may fail, optimal's after a killed grower, does not count).
    pub fn failure(&self) -> Option<String> {
        let failed: Vec<String> = self
            .rows
            .iter()
            .filter(|r| !r.check_ok && !r.check_may_fail())
            .map(|r| format!("{}: {}", r.variant, r.check_problem()))
            .collect();
        (!failed.is_empty()).then(|| format!("the end-of-run check failed: {}", failed.join("; ")))
    }
}

/// The table of a run: the grow, the inserts meanwhile, the kill (if
/// any), the notes, then recovery or the grow ratio.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let rounds = rows.iter().map(|r| r.round).max().unwrap_or(1);
    grow_section(&mut s, rows, rounds);
    insert_section(&mut s, rows, rounds);
    kill_section(&mut s, rows, rounds);
    notes_section(&mut s, rows, rounds);
    recovery_section(&mut s, rows, rounds);
    s
}

/// A row's name: with several rounds, which round too.
fn label(r: &Row, rounds: usize) -> String {
    if rounds > 1 {
        format!("{} #{}", r.variant, r.round)
    } else {
        r.variant.clone()
    }
}

/// The grow: keys, load, subtables, time, verbs and bytes.
fn grow_section(s: &mut String, rows: &[Row], rounds: usize) {
    let _ = writeln!(
        s,
        "{:<12} {:>11} {:>6} {:>9} {:>10} {:>7} {:>8} {:>10} {:>9} {:>9} {:>9}",
        "variant",
        "keys",
        "load",
        "subtables",
        "grow ms",
        "splits",
        "RT",
        "READs",
        "CAS",
        "MiB read",
        "MiB write"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<12} {:>11} {:>5.1}% {:>9} {:>10} {:>7} {:>8} {:>10} {:>9} {:>9} {:>9}",
            label(r, rounds),
            thousands(r.keys_before_grow as f64),
            r.load_factor_before_grow * 100.0,
            thousands(r.subtables_before_grow as f64),
            micros(r.grow_ms),
            thousands(r.splits as f64),
            thousands(r.round_trips as f64),
            thousands(r.reads as f64),
            thousands(r.cas as f64),
            mib(r.bytes_read),
            mib(r.bytes_written),
        );
    }
}

/// Inserts before, during and after the grow, and the check.
fn insert_section(s: &mut String, rows: &[Row], rounds: usize) {
    if rows.iter().any(|r| r.inserting_threads > 0) {
        let _ = writeln!(
            s,
            "\n{:<12} {:>7} {:>12} {:>12} {:>12} {:>9} {:>7} {:>8} {:>6}",
            "variant",
            "threads",
            "ins/s before",
            "ins/s during",
            "ins/s after",
            "stall ms",
            "splits",
            "settled",
            "check"
        );
        for r in rows {
            let _ = writeln!(
                s,
                "{:<12} {:>7} {:>12} {:>12} {:>12} {:>9} {:>7} {:>8} {:>6}",
                label(r, rounds),
                r.inserting_threads,
                thousands(r.insert_ops_per_sec_before),
                thousands(r.insert_ops_per_sec_during),
                thousands(r.insert_ops_per_sec_after),
                micros(r.insert_stall_ms),
                thousands(r.inserter_splits as f64),
                thousands(r.inserts_settled as f64),
                if r.check_ok { "ok" } else { "FAILED" },
            );
        }
    } else {
        for r in rows {
            let _ = writeln!(
                s,
                "{}: check {}",
                label(r, rounds),
                if r.check_ok { "ok" } else { "FAILED" }
            );
        }
    }
}

/// A killed grower: when, how soon inserts recovered, who was blocked.
fn kill_section(s: &mut String, rows: &[Row], rounds: usize) {
    if rows.iter().any(|r| r.grower_killed.is_some()) {
        let _ = writeln!(
            s,
            "\n{:<12} {:>10} {:>13} {:>8} {:>8}",
            "variant", "killed at", "recovered in", "blocked", "repairs"
        );
        for r in rows {
            let _ = writeln!(
                s,
                "{:<12} {:>7} ms {:>13} {:>8} {:>8}",
                label(r, rounds),
                micros(r.kill_ms.unwrap_or(0.0)),
                r.recovery_ms
                    .map_or_else(|| "never".to_owned(), |m| format!("{} ms", micros(m))),
                format!("{}/{}", r.inserters_blocked, r.inserting_threads),
                thousands(r.inserter_repairs as f64),
            );
        }
    }
}

/// Failed checks and key limits, a line each.
fn notes_section(s: &mut String, rows: &[Row], rounds: usize) {
    for r in rows {
        if !r.check_ok && r.check_may_fail() {
            let _ = writeln!(
                s,
                "{}: the check failed, as expected after a dead optimal splitter (nothing can repair its locks): {}",
                label(r, rounds),
                r.check_problem()
            );
        } else if !r.check_ok {
            let _ = writeln!(s, "{}: the check failed: {}", label(r, rounds), r.check_problem());
        }
        if r.key_limit_reached {
            let _ = writeln!(
                s,
                "{}: inserting stopped at the run's key limit (a quarter of the directory's slots): \
                 rates after that point are low",
                label(r, rounds)
            );
        }
    }
}

/// Recovery after a kill, or the grow ratio of the variants.
fn recovery_section(s: &mut String, rows: &[Row], rounds: usize) {
    if rows.iter().any(|r| r.grower_killed.is_some()) {
        let _ = writeln!(s);
        for r in rows {
            if let (Some(rolled), Some(kill)) = (r.rolled_ms, r.kill_ms) {
                let _ = writeln!(
                    s,
                    "{}: recovery rolled the dead grower's DTX log back {} ms after the kill",
                    label(r, rounds),
                    micros(rolled - kill)
                );
            }
            let _ = match r.recovery_ms {
                Some(m) => writeln!(
                    s,
                    "{}: from the grower's kill to normal insert throughput: {} ms",
                    label(r, rounds),
                    micros(m)
                ),
                None => writeln!(
                    s,
                    "{}: insert throughput did not recover after the grower's kill ({} of {} inserters blocked)",
                    label(r, rounds),
                    r.inserters_blocked,
                    r.inserting_threads
                ),
            };
        }
    } else {
        let lines: Vec<String> = grow_ratio(rows)
            .into_iter()
            .chain(grow_ratio_to(rows, "dtx", ""))
            .collect();
        if !lines.is_empty() {
            let _ = writeln!(s);
        }
        for line in lines {
            let _ = writeln!(s, "{line}");
        }
    }
}

/// optimal's grow time over rtx's: for one round the two times, for
/// several the median of the rounds' ratios (each round's optimal over the
/// same round's rtx) and their range. `None` without both variants.
fn grow_ratio(rows: &[Row]) -> Option<String> {
    let first = rows.iter().find(|r| r.variant == "optimal" && r.round == 1)?;
    let baseline = match first.optimal_entries_per_round_trip {
        1 => "the original resize: one entry per round trip".to_owned(),
        n => format!("entries batched {n} per round trip"),
    };
    grow_ratio_to(rows, "optimal", &baseline)
}

/// `base`'s grow time over rtx's (`note` says what `base` ran), as
/// [`grow_ratio`] gives optimal's.
fn grow_ratio_to(rows: &[Row], base: &str, note: &str) -> Option<String> {
    let of = |v: &str, round: usize| rows.iter().find(|r| r.variant == v && r.round == round);
    let note = if note.is_empty() {
        String::new()
    } else {
        format!(" ({note})")
    };
    let rounds = rows.iter().map(|r| r.round).max()?;
    let pairs: Vec<(&Row, &Row)> = (1..=rounds)
        .filter_map(|round| Some((of(base, round)?, of("rtx", round)?)))
        .filter(|(_, r)| r.grow_ms > 0.0)
        .collect();
    match pairs.as_slice() {
        [] => None,
        [(o, r)] if rounds == 1 => Some(format!(
            "rehash time: {base} {} ms{note} / rtx {} ms = {:.2}x",
            micros(o.grow_ms),
            micros(r.grow_ms),
            o.grow_ms / r.grow_ms
        )),
        _ => {
            let ratios: Vec<f64> = pairs.iter().map(|(o, r)| o.grow_ms / r.grow_ms).collect();
            let times = |f: fn(&(&Row, &Row)) -> f64| median(&pairs.iter().map(f).collect::<Vec<_>>());
            Some(format!(
                "rehash time over {} of {rounds} rounds: {base} median {} ms{note} / rtx median {} ms; \
                 per round: median {:.2}x ({:.2}x-{:.2}x)",
                pairs.len(),
                micros(times(|(o, _)| o.grow_ms)),
                micros(times(|(_, r)| r.grow_ms)),
                median(&ratios),
                ratios.iter().copied().fold(f64::INFINITY, f64::min),
                ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, round: usize, grow_ms: f64) -> Row {
        Row {
            round,
            variant: variant.to_owned(),
            grow_ms,
            optimal_entries_per_round_trip: 1,
            ..Row::default()
        }
    }

    #[test]
    fn one_round_gives_both_times_and_their_ratio() {
        let rows = [row("optimal", 1, 800.0), row("rtx", 1, 200.0)];
        let line = grow_ratio(&rows).unwrap();
        assert!(line.contains("= 4.00x"), "{line}");
        assert!(line.contains("the original resize"), "{line}");
        assert_eq!(grow_ratio(&rows[..1]), None, "no rtx, no ratio");
    }

    #[test]
    fn rounds_give_the_median_of_per_round_ratios_and_their_range() {
        // Round 2 is slow for both: its ratio, not its times, is what counts.
        let rows = [
            row("optimal", 1, 800.0),
            row("rtx", 1, 200.0),
            row("rtx", 2, 600.0),
            row("optimal", 2, 1200.0),
            row("optimal", 3, 900.0),
            row("rtx", 3, 300.0),
        ];
        let line = grow_ratio(&rows).unwrap();
        assert!(line.contains("over 3 of 3 rounds"), "{line}");
        assert!(line.contains("median 3.00x (2.00x-4.00x)"), "{line}");
        assert!(line.contains("optimal median 900.0 ms"), "{line}");
        let table = table(&rows);
        assert!(table.contains("rtx #2"), "{table}");
    }

    #[test]
    fn longest_zero_run_counts_consecutive_zeros() {
        assert_eq!(longest_zero_run(&[]), 0);
        assert_eq!(longest_zero_run(&[1, 2, 3]), 0);
        assert_eq!(longest_zero_run(&[0, 1, 0, 0, 0, 2, 0, 0]), 3);
    }
}
