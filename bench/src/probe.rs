//! How far ahead of its clock a client's leases run.
//!
//! A lease should end `lease_ticks(n)` after the client's clock. But an
//! owner's lock words must differ from one transaction to the next (the log
//! checksum rule), and `TxClient` makes them differ by taking each lease at
//! least one lease tick (1/256 ms) after the previous one. A client that
//! takes lock words faster than that runs its leases ahead of the clock, by
//! at most `txn::LEAD_TICKS_MAX` (1 ms): beyond, it waits for its clock
//! (`TxStats::lease_waits`). Leases in whole ms used to run ahead without
//! bound (hours after a few seconds of an in-process bench), and a dead
//! client's locks would have stayed held for that long.
//!
//! The probe pre-locks one object (Opt2 `lock_now`, which takes a lease for
//! two objects), reads the lock word back and releases it. The lead is
//! measured against the longer of that lease and the lease of the client's
//! own transactions: a lease right after a longer one may end at the longer
//! one's end + 1 tick (that much is not lead).

use fabric::Batch;
use txn::{LockWord, RawObj, TxClient};

/// Attempts at pre-locking an object other clients may be writing.
const ATTEMPTS_MAX: u32 = 1000;

/// Lease ticks (1/256 ms) by which the lease `client` takes now ends after
/// `now + lease_ticks(max(2, write_set))`, where `write_set` is the objects
/// its transactions lock; `None` if the object stayed locked by others.
pub async fn lease_lead_ticks(
    client: &mut TxClient,
    obj: RawObj,
    write_set: usize,
) -> crate::Result<Option<i64>> {
    for _ in 0..ATTEMPTS_MAX {
        let mut tx = client.begin();
        let locked = tx.lock_now(obj).await;
        let mut lead = None;
        if locked.is_ok() {
            let c = tx.client();
            let expected = c.now_tick() + c.config().lease_ticks(write_set.max(2));
            let mut batch = Batch::new();
            let h = batch.read(obj.lock_addr(), 8);
            c.fabric().execute(&mut batch).await?;
            let lock = LockWord::from_raw(fabric::le_word(batch.read_result(h)?, 0));
            if lock.is_locked() && lock.owner() == c.owner() {
                lead = Some((lock.lease_tick() as i64 - expected as i64).max(0));
            }
        }
        tx.rollback().await?;
        match locked {
            Ok(()) => return Ok(lead),
            Err(e) if e.is_abort() => tokio::task::yield_now().await,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}
