//! Slot CASes reach the backups (rtx): a slot is the one word of RACE
//! hashing that changes in place, so without this a backup keeps the slots
//! of the load and a promotion loses every write since (issue 22).
//!
//! The primary decides, as for every word of the heap (`docs/txn.md` §8): a
//! writer CASes the primary's slot first (its `publish`), and once that CAS
//! won, before the write is acknowledged, brings every backup's slot to it:
//! a CAS from the old value to the new one, which is all it takes when no
//! other writer of the slot is in between. A backup found holding something
//! else is *converged*: the primary's slot is read after the backup's value
//! was seen, and the backup CASed from what it held to that. So a backup
//! only ever moves to a value the primary held after the one it replaces,
//! never back (a CAS from a value seen earlier fails once anyone moved it
//! on), and never to a value the primary did not hold; and once the writer
//! is done every backup holds its value or a later one of the primary's.
//!
//! What this does not give: a reader of the primary may see a slot value
//! that no backup holds yet (its writer is between the two steps); a
//! promotion in that window loses a value that was read though never
//! acknowledged. And a writer stopped between the two steps leaves the
//! backups behind until the slot's next writer, or a split (its rTX writes
//! the new subtable to every replica), or a re-replication copies it.

use fabric::{Batch, GlobalAddr, Replica};

use crate::error::IndexError;
use crate::hash::layout::{word, Slot};
use crate::hash::HashTable;

/// Rounds of converging one backup's slot: each round that fails saw
/// another writer move the backup forward, so only a slot written faster
/// than a round trip outruns it; then the write reports `TooManyAttempts`.
const CONVERGE_ROUNDS_MAX: u32 = 64;

impl HashTable {
    /// Backups of this table's region (0 without replication).
    fn backups(&mut self) -> usize {
        let region = self.heap.region();
        self.fabric()
            .map()
            .region(region)
            .map_or(0, |r| r.replicas.len().saturating_sub(1))
    }

    /// After this client's CAS of the primary's slot at `at` from `old` to
    /// `new` won: brings every backup's slot there to `new` or to a later
    /// value of the primary's (module docs). Optimal tables and unreplicated
    /// regions have nothing to do.
    pub(crate) async fn replicate_slot(
        &mut self,
        at: GlobalAddr,
        old: Slot,
        new: Slot,
    ) -> Result<(), IndexError> {
        if self.info.variant != crate::btree::Variant::Rtx {
            return Ok(());
        }
        let backups = self.backups();
        if backups == 0 {
            return Ok(());
        }
        self.stats.slot_replications += 1;
        let mut batch = Batch::new();
        let hs: Vec<_> = (0..backups)
            .map(|b| batch.on(Replica::Backup(b as u8)).cas(at, old.0, new.0))
            .collect();
        self.fabric().execute(&mut batch).await?;
        let mut behind = Vec::new();
        for (b, h) in hs.into_iter().enumerate() {
            let found = batch.old_value(h).map_err(IndexError::Verb)?;
            if found != old.0 && found != new.0 {
                behind.push((b, found));
            }
        }
        for (b, found) in behind {
            self.converge_slot(at, b, found).await?;
        }
        Ok(())
    }

    /// Brings every backup's words to the primary's wherever they differ,
    /// over every subtable the directory names (each word as
    /// `converge_slot` moves one, so live writers may run beside it): what
    /// a writer stopped between its primary CAS and its backups' left
    /// behind. Recovery runs it when a promotion is restored and after a
    /// dead client's logs are finished; the chaos checker before it
    /// compares the replicas. Returns the words moved.
    pub async fn converge_backups(&mut self) -> Result<u64, IndexError> {
        if self.info.variant != crate::btree::Variant::Rtx {
            return Ok(0);
        }
        let backups = self.backups();
        if backups == 0 {
            return Ok(0);
        }
        self.reload_dir().await?;
        let mut subs = self.dir.clone();
        subs.sort_unstable();
        subs.dedup();
        let bytes = self.subtable_bytes();
        let len = u32::try_from(bytes)
            .ok()
            .filter(|&l| l <= fabric::VERB_BYTES_MAX)
            .ok_or_else(|| {
                IndexError::Corrupt(format!("a subtable of {bytes} bytes is more than one READ"))
            })?;
        let mut moved = 0;
        for sub in subs {
            self.data_of.remove(&sub);
            let loc = self.locate(sub).await?;
            let mut batch = Batch::new();
            let h = batch.on(Replica::All).read(loc.base, len);
            self.fabric().execute(&mut batch).await?;
            let copies = (0..=backups)
                .map(|i| batch.read_result_of(h, i).map(<[u8]>::to_vec))
                .collect::<Result<Vec<_>, _>>()
                .map_err(IndexError::Verb)?;
            for (b, copy) in copies.iter().enumerate().skip(1) {
                for w in 0..copy.len() / 8 {
                    let (primary, backup) = (word(&copies[0], w), word(copy, w));
                    if primary != backup {
                        self.converge_slot(loc.base.add(w as u64 * 8), b - 1, backup)
                            .await?;
                        moved += 1;
                    }
                }
            }
        }
        Ok(moved)
    }

    /// Moves backup `b`'s slot at `at`, seen holding `seen`, to the
    /// primary's value read after it, until a CAS lands or it already holds
    /// that.
    async fn converge_slot(&mut self, at: GlobalAddr, b: usize, mut seen: u64) -> Result<(), IndexError> {
        self.stats.slot_convergences += 1;
        let mut batch = Batch::new();
        for _ in 0..CONVERGE_ROUNDS_MAX {
            batch.clear();
            let p = batch.read(at, 8);
            self.fabric().execute(&mut batch).await?;
            let primary = word(batch.read_result(p).map_err(IndexError::Verb)?, 0);
            if primary == seen {
                return Ok(());
            }
            batch.clear();
            let c = batch.on(Replica::Backup(b as u8)).cas(at, seen, primary);
            self.fabric().execute(&mut batch).await?;
            let found = batch.old_value(c).map_err(IndexError::Verb)?;
            if found == seen || found == primary {
                return Ok(());
            }
            seen = found;
            tokio::task::yield_now().await;
        }
        Err(IndexError::TooManyAttempts(CONVERGE_ROUNDS_MAX))
    }
}
