//! How far ahead of its clock a client's leases run.
//!
//! A lease should end `lease_ms(n)` after the client's clock. But an owner's
//! lock words must differ from one transaction to the next (the log checksum
//! rule), and `TxClient` makes them differ by taking each lease at least 1 ms
//! after the previous one. A client that commits more than once per
//! millisecond thus runs its leases ahead of the clock, without bound: its
//! locks cannot expire while it is alive (no false expiry, whatever the
//! drift), and after it dies they stay held for that long.
//!
//! The probe pre-locks one object (Opt2 `lock_now`, which takes a lease for
//! two objects), reads the lock word back and releases it.

use fabric::Batch;
use txn::{LockWord, RawObj, TxClient};

/// Attempts at pre-locking an object other clients may be writing.
const ATTEMPTS_MAX: u32 = 1000;

/// Milliseconds by which the lease `client` takes now ends after
/// `now + lease_ms(2)`; `None` if the object stayed locked by others.
pub async fn lease_lead_ms(client: &mut TxClient, obj: RawObj) -> anyhow::Result<Option<i64>> {
    for _ in 0..ATTEMPTS_MAX {
        let mut tx = client.begin();
        let locked = tx.lock_now(obj).await;
        let mut lead = None;
        if locked.is_ok() {
            let c = tx.client();
            let expected = c.fabric().now_ms() + c.config().lease_ms(2);
            let mut batch = Batch::new();
            let h = batch.read(obj.lock_addr(), 8);
            c.fabric().execute(&mut batch).await?;
            let mut word = [0u8; 8];
            word.copy_from_slice(batch.read_result(h)?);
            let lock = LockWord::from_raw(u64::from_le_bytes(word));
            if lock.is_locked() && lock.owner() == c.owner() {
                lead = Some((lock.lease_ms() as i64 - expected as i64).max(0));
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
