//! An owner committing far faster than once per millisecond (the in-process
//! transport commits a single object in a few µs) keeps its lock words
//! unique and its leases within `lease + LEAD_TICKS_MAX` of its clock.
//!
//! With leases in whole ms and each lease at least 1 ms after the owner's
//! last, 20,000 such commits pushed the owner's leases 20 s ahead of its
//! clock (hours after a 5 s bench), so its locks would have outlived its
//! crash by that much. Leases are now 1/256 ms ticks, and an owner more than
//! `LEAD_TICKS_MAX` ahead waits for its clock (`txn::lease`).

mod common;

use std::time::Instant;

use common::Cluster;
use txn::{LockWord, LEAD_TICKS_MAX, TICKS_PER_MS};

const OWNER: u16 = 1;
const COMMITS: usize = 20_000;
/// Slack for a wall clock stepped back during the test (NTP): the bound
/// holds exactly on a clock that does not go backwards.
const TOLERANCE_TICKS: u64 = TICKS_PER_MS / 4;

#[tokio::test]
async fn a_fast_owner_keeps_its_leases_unique_and_close_to_its_clock() {
    let cluster = Cluster::new(1).await;
    let objs = cluster.accounts(&[0; 8]).await;
    let mut c = cluster.client(OWNER);
    let lease_ticks = c.config().lease_ticks(1);
    let bound = |now_tick: u64, lease_ticks: u64| now_tick + lease_ticks + LEAD_TICKS_MAX + TOLERANCE_TICKS;

    let start = Instant::now();
    let start_tick = c.now_tick();
    let mut last_tick = 0;
    let mut lead_max_ticks = 0;
    for i in 0..COMMITS {
        let obj = objs[i % objs.len()];
        c.run(async |tx| {
            let v = tx.read(obj).await?;
            tx.write(obj, &(v + 1)).await
        })
        .await
        .unwrap();
        // One Opt1 commit takes exactly one lock word, (OWNER, last_lock_tick).
        let tick = c.last_lock_tick();
        assert!(
            tick > last_tick,
            "commit {i}: lock word lease {tick} after {last_tick}: lock words of an owner must never repeat"
        );
        let now_tick = c.now_tick();
        assert!(
            tick <= bound(now_tick, lease_ticks),
            "commit {i}: lease {tick} is {} ticks past now + lease",
            tick - now_tick - lease_ticks
        );
        lead_max_ticks = lead_max_ticks.max(tick.saturating_sub(now_tick + lease_ticks));
        last_tick = tick;
    }
    let elapsed = start.elapsed();
    let stats = c.stats();
    assert_eq!(stats.commits, COMMITS as u64);
    assert_eq!(stats.aborts, 0);
    // Strictly increasing ends, one per commit: COMMITS distinct lock words,
    // the last at least COMMITS - 1 ticks after the first; so the clock has
    // moved by all but LEAD_TICKS_MAX of them (the owner waited for it when
    // it committed faster than one per tick: `lease_waits`).
    assert!(last_tick >= start_tick + lease_ticks + COMMITS as u64 - 1);
    let elapsed_ticks = c.now_tick() - start_tick;
    assert!(elapsed_ticks + LEAD_TICKS_MAX + TOLERANCE_TICKS >= COMMITS as u64 - 1);
    eprintln!(
        "{COMMITS} commits in {elapsed:?} ({:.0}/s); lead at most {lead_max_ticks} ticks; waited {} times",
        COMMITS as f64 / elapsed.as_secs_f64(),
        stats.lease_waits
    );

    // The lock word in DM is the one the client says it took: pre-lock an
    // object (a lease for two objects), read its meta, release.
    let obj = objs[0];
    let mut tx = c.begin();
    tx.lock_now(obj.raw()).await.unwrap();
    let now_tick = tx.client().now_tick();
    let word = cluster.lock(obj).await;
    let lease2_ticks = tx.client().config().lease_ticks(2);
    tx.rollback().await.unwrap();
    assert_eq!(word, LockWord::locked(OWNER, c.last_lock_tick()));
    assert!(word.lease_tick() > last_tick);
    assert!(
        word.lease_tick() <= bound(now_tick, lease2_ticks),
        "{word:?} at {now_tick}"
    );
    assert!(!word.is_expired(now_tick), "a live owner's lock is not expired");
    assert!(
        word.is_expired(bound(now_tick, lease2_ticks)),
        "and expires within the bound"
    );
}
