//! Slot CASes reach the backups (rtx and dtx): a slot is the one word of RACE
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
//! One value repeats: the empty slot (a non-empty one names a KV block,
//! which is never published twice). So a deleter that finds a backup
//! already empty cannot tell "my delete is there" from "the insert I
//! delete has not reached it yet"; an inserter whose backup CAS from empty
//! landed therefore reads the primary once more and converges the backup
//! if the slot moved on meanwhile (a late insert would otherwise bring a
//! deleted key back on the backup).
//!
//! A backup that does not answer (its connection lost, the batch past its
//! deadline) is asked again until it answers or leaves the map, for up to
//! [`UNANSWERED_WAIT_MAX`]: a writer that gave up there left the backup
//! behind with no node dead, and nothing else brings it along (issue 47,
//! data-path-hash seeds 8, 127, 158, 283: a partition of one client's link
//! to a backup). Sending the CASes again is safe: the first batch can no
//! longer run once the client calls it lost (the node refuses it past its
//! deadline, `fabric::deadline`).
//!
//! What this does not give: a reader of the primary may see a slot value
//! that no backup holds yet (its writer is between the two steps); a
//! promotion in that window loses a value that was read though never
//! acknowledged. And a writer stopped between the two steps (dead, or a
//! backup unanswering past [`UNANSWERED_WAIT_MAX`] while its lease holds)
//! leaves the backups behind until the slot's next writer, or a split (its
//! transaction writes the new subtable to every replica), or a
//! re-replication copies it.

use fabric::le_word;
use fabric::{Batch, GlobalAddr, Replica};

use crate::error::IndexError;
use crate::hash::layout::Slot;
use crate::hash::split::read_block;
use crate::hash::HashTable;

/// Rounds of converging one backup's slot: each round that fails saw
/// another writer move the backup forward, so only a slot written faster
/// than a round trip outruns it; then the write reports `TooManyAttempts`.
const CONVERGE_ROUNDS_MAX: u32 = 64;

/// Most backups a region has (`fabric`'s replication limit, less the
/// primary): the handles of one slot's backup CASes live on the stack.
const BACKUPS_MAX: usize = fabric::REPLICAS_MAX - 1;

/// Times a slot's replication follows a map that moved under it with the
/// same primary (a replica joining, another leaving) before it gives up:
/// each move is a recovery step.
const MAP_MOVES_MAX: u32 = 8;

/// Rounds of a slot's replication that a backup whose lease may have lapsed
/// may refuse (`FabricError::NodeLeaseLapsed`), [`LAPSED_PAUSE`] apart:
/// [`fabric::NODE_LAPSE_WAIT_MAX`] in all.
const LAPSES_MAX: u32 = (fabric::NODE_LAPSE_WAIT_MAX.as_millis() / LAPSED_PAUSE.as_millis()) as u32;

/// Pause between replication rounds that a lapsed backup refused.
const LAPSED_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

/// How long a slot's replication asks again a backup that does not answer
/// (`FabricError::Disconnected`): as long as a cluster handle waits for the
/// map to move past an unanswering node (`cluster::MAP_WAIT`). A node dead
/// or evicted leaves the map well within it (the pinned round then says the
/// map moved); one still in the map after it renews its lease but serves
/// nothing, and the write is reported in doubt.
pub const UNANSWERED_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

impl HashTable {
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
        self.replicate_slot_pinned(at, old, new, None).await
    }

    /// [`HashTable::replicate_slot`] right after a publish, before this
    /// client's next batch: its map is still the one the publish's CAS was
    /// routed by (a client takes a newer map only when it executes a batch).
    /// If the map moved since and
    /// the region's primary with it, the CAS went to a node that is no
    /// longer the primary (a batch held up by a paused node, run when it
    /// resumed, say), and the primary that replaced it never saw it: the
    /// write is in doubt (`FabricError::MapMoved` inside
    /// `IndexError::InDoubt`), never acknowledged. A move that kept the
    /// primary (a backup joined or left) only changes the backups reached.
    pub(crate) async fn replicate_published(
        &mut self,
        at: GlobalAddr,
        old: Slot,
        new: Slot,
    ) -> Result<(), IndexError> {
        if self.backups() == 0 {
            return Ok(());
        }
        let (mut epoch, primary) = (self.fabric().epoch(), self.primary_node());
        let mut moves = 0;
        loop {
            match self.replicate_slot_pinned(at, old, new, Some(epoch)).await {
                Err(IndexError::Fabric(fabric::FabricError::MapMoved { now, .. }))
                    if self.primary_node() == primary && moves < MAP_MOVES_MAX =>
                {
                    moves += 1;
                    epoch = now;
                }
                Err(e @ IndexError::Fabric(fabric::FabricError::MapMoved { .. })) => {
                    return Err(IndexError::InDoubt(Box::new(e)));
                }
                done => return done,
            }
        }
    }

    /// Backups a slot CAS must reach: none for optimal tables and
    /// unreplicated regions.
    fn backups(&mut self) -> usize {
        if !self.guarded() {
            return 0;
        }
        let region = self.heap.region();
        self.fabric()
            .map()
            .region(region)
            .map_or(0, |r| r.replicas.len().saturating_sub(1))
    }

    /// The node of this table's region's primary in the map the client
    /// routes by now.
    fn primary_node(&mut self) -> Option<fabric::NodeId> {
        let region = self.heap.region();
        self.fabric()
            .map()
            .region(region)
            .and_then(|r| r.replicas.first().map(|l| l.node))
    }

    /// One slot's replication, sent again while a backup whose lease may
    /// have lapsed refuses it: that backup serves again once renewed, or
    /// leaves the map (a pinned round then says the map moved). The CASes
    /// are made to be sent again; giving up would leave that backup behind
    /// the primary for this slot, and nobody would bring it along.
    ///
    /// The same while this client's own lease is not certain
    /// (`FabricError::LeaseUncertain`: a renewal came late, nothing was
    /// issued): the primary already holds the new value and readers may
    /// have seen it. Giving up there left an in-doubt insert on the primary
    /// alone, both backups empty, until the slot's next writer
    /// (leader-during-recovery-hash seed 76: the sessions' renewals waited
    /// on a paused leader for 100 ms); a promotion then would have lost a
    /// value that was read. A lease lost for good waits out the bound and
    /// then fails as before.
    ///
    /// And the same while a backup does not answer, for up to
    /// [`UNANSWERED_WAIT_MAX`] (module docs).
    async fn replicate_slot_pinned(
        &mut self,
        at: GlobalAddr,
        old: Slot,
        new: Slot,
        pinned: Option<fabric::Epoch>,
    ) -> Result<(), IndexError> {
        let mut lapses = 0;
        let mut unanswered_since = None;
        loop {
            match self.replicate_slot_round(at, old, new, pinned).await {
                Err(IndexError::Fabric(
                    fabric::FabricError::NodeLeaseLapsed { .. } | fabric::FabricError::LeaseUncertain,
                )) if lapses < LAPSES_MAX => {
                    lapses += 1;
                    tokio::time::sleep(LAPSED_PAUSE).await;
                }
                Err(IndexError::Fabric(fabric::FabricError::Disconnected { .. }))
                    if unanswered_since
                        .get_or_insert_with(tokio::time::Instant::now)
                        .elapsed()
                        < UNANSWERED_WAIT_MAX =>
                {
                    self.stats.slot_replications_resent += 1;
                    tokio::time::sleep(LAPSED_PAUSE).await;
                }
                done => return done,
            }
        }
    }

    async fn replicate_slot_round(
        &mut self,
        at: GlobalAddr,
        old: Slot,
        new: Slot,
        pinned: Option<fabric::Epoch>,
    ) -> Result<(), IndexError> {
        let backups = self.backups();
        if backups == 0 {
            return Ok(());
        }
        debug_assert!(backups <= BACKUPS_MAX);
        self.stats.slot_replications += 1;
        let mut batch = self.fabric().take_batch();
        let mut hs = [None; BACKUPS_MAX];
        for (b, h) in hs.iter_mut().enumerate().take(backups) {
            *h = Some(batch.on(Replica::Backup(b as u8)).cas(at, old.0, new.0));
        }
        let r = match pinned {
            Some(epoch) => self.fabric().execute_pinned(&mut batch, epoch).await,
            None => self.fabric().execute(&mut batch).await,
        };
        let found = r.map_err(IndexError::from).and_then(|()| {
            let mut found = [0u64; BACKUPS_MAX];
            for (f, h) in found.iter_mut().zip(hs.iter().flatten()) {
                *f = batch.old_value(*h).map_err(IndexError::Verb)?;
            }
            Ok(found)
        });
        self.fabric().give_batch(batch);
        let found = found?;
        let found = &found[..backups];
        for (b, &f) in found.iter().enumerate() {
            if f != old.0 && f != new.0 {
                self.converge_slot(at, b, f).await?;
            }
        }
        // Ours landed from empty: if the primary moved on meanwhile, a
        // deleter may have taken our backup CAS's absence for its own
        // (module docs).
        if old.is_empty() && found.contains(&old.0) {
            let primary = le_word(&read_block(self.fabric(), at, 8).await?, 0);
            if primary != new.0 {
                for (b, _) in found.iter().enumerate().filter(|(_, &f)| f == old.0) {
                    self.converge_slot(at, b, new.0).await?;
                }
            }
        }
        Ok(())
    }

    /// Brings every backup's words to the primary's wherever they differ,
    /// over every subtable the directory names (each word as
    /// `converge_slot` moves one, so live writers may run beside it): what
    /// a writer stopped between its primary CAS and its backups' left
    /// behind. Recovery runs it when a promotion is restored and when a new
    /// replica is caught up, after a dead client's locks are swept; the
    /// chaos checker before it compares the replicas. Returns the words
    /// moved.
    pub async fn converge_backups(&mut self) -> Result<u64, IndexError> {
        if !self.guarded() {
            return Ok(0);
        }
        let bytes = self.subtable_bytes();
        let mut moved = 0;
        for sub in self.subtables().await? {
            self.data_of.remove(&sub);
            let loc = self.locate(sub).await?;
            let copies = self.fabric().read_range(loc.base, bytes, Replica::All).await?;
            tracing::debug!(
                sub,
                base = ?loc.base,
                replicas = copies.len(),
                differing = copies
                    .iter()
                    .skip(1)
                    .map(|c| (0..c.len() / 8).filter(|&w| le_word(c, w * 8) != le_word(&copies[0], w * 8)).count())
                    .sum::<usize>(),
                "converging a subtable's backups"
            );
            for (b, copy) in copies.iter().enumerate().skip(1) {
                for w in 0..copy.len() / 8 {
                    let (primary, backup) = (le_word(&copies[0], w * 8), le_word(copy, w * 8));
                    if primary != backup
                        && self
                            .converge_slot(loc.base.add(w as u64 * 8), b - 1, backup)
                            .await?
                    {
                        moved += 1;
                    }
                }
            }
        }
        Ok(moved)
    }

    /// Moves backup `b`'s slot at `at`, seen holding `seen`, to the
    /// primary's value read after it, until a CAS lands or it already holds
    /// that. Returns whether this call moved it.
    async fn converge_slot(&mut self, at: GlobalAddr, b: usize, seen: u64) -> Result<bool, IndexError> {
        let mut batch = self.fabric().take_batch();
        let moved = self.converge_rounds(&mut batch, at, b, seen).await;
        self.fabric().give_batch(batch);
        moved
    }

    async fn converge_rounds(
        &mut self,
        batch: &mut Batch,
        at: GlobalAddr,
        b: usize,
        mut seen: u64,
    ) -> Result<bool, IndexError> {
        for _ in 0..CONVERGE_ROUNDS_MAX {
            batch.clear();
            let p = batch.read(at, 8);
            self.fabric().execute(batch).await?;
            let primary = le_word(batch.read_result(p).map_err(IndexError::Verb)?, 0);
            if primary == seen {
                return Ok(false);
            }
            batch.clear();
            let c = batch.on(Replica::Backup(b as u8)).cas(at, seen, primary);
            self.fabric().execute(batch).await?;
            match batch.old_value(c).map_err(IndexError::Verb)? {
                found if found == seen => {
                    self.stats.slot_convergences += 1;
                    return Ok(true);
                }
                found if found == primary => return Ok(false),
                found => seen = found,
            }
            tokio::task::yield_now().await;
        }
        Err(IndexError::TooManyAttempts(CONVERGE_ROUNDS_MAX))
    }
}

#[cfg(test)]
mod tests {
    use fabric::{Client, LocalTransport, RegionSpec};
    use txn::{Heap, HeapConfig};

    use super::*;
    use crate::hash::layout::BUCKET_BYTES;
    use crate::hash::HashConfig;
    use crate::Variant;

    /// Words of one bucket: its header, then its slots.
    const BUCKET_WORDS: usize = (BUCKET_BYTES / 8) as usize;

    const REGION: u16 = 1;

    async fn replicated_table(replicas: u16) -> HashTable {
        let spec = RegionSpec {
            id: REGION,
            size: 16 << 20,
        };
        let (t, map) = LocalTransport::cluster(replicas, &[spec]).unwrap();
        let mut fabric = Client::new(map, t.into());
        let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
            .await
            .unwrap();
        let config = HashConfig {
            groups: 4,
            dir_depth: 4,
        };
        HashTable::create(fabric, heap, Variant::Rtx, 1, config)
            .await
            .unwrap()
    }

    /// Every replica's words of every subtable, primary first.
    async fn subtable_copies(t: &mut HashTable) -> Vec<Vec<Vec<u8>>> {
        let bytes = t.subtable_bytes();
        let mut all = Vec::new();
        for sub in t.subtables().await.unwrap() {
            let base = t.locate(sub).await.unwrap().base;
            all.push(t.fabric().read_range(base, bytes, Replica::All).await.unwrap());
        }
        all
    }

    /// What a writer stopped between its primary CAS and its backups'
    /// leaves: a backup that missed a delete (it still names the block) and
    /// one that missed an insert (still empty). `converge_backups` brings
    /// both to the primary's words, and says how many it moved.
    #[tokio::test]
    async fn converge_backups_moves_every_backup_word_to_the_primarys() {
        let mut t = replicated_table(3).await;
        for key in 1..=20 {
            assert!(t.insert(key, key * 10).await.unwrap());
        }
        let subs = t.subtables().await.unwrap();
        assert_eq!(subs.len(), 1, "20 keys fit the first subtable");
        let base = t.locate(subs[0]).await.unwrap().base;
        let loaded = subtable_copies(&mut t).await.remove(0);
        assert!(
            loaded.iter().all(|c| c == &loaded[0]),
            "replicas equal after acknowledged writes"
        );
        // The slot key 21's insert fills, and the one key 7's delete clears.
        assert!(t.insert(21, 210).await.unwrap());
        let inserted = subtable_copies(&mut t).await.remove(0);
        assert!(t.delete(7).await.unwrap());
        let deleted = subtable_copies(&mut t).await.remove(0);
        let words = loaded[0].len() / 8;
        let filled = (0..words)
            .find(|&w| le_word(&loaded[0], w * 8) == 0 && le_word(&inserted[0], w * 8) != 0)
            .expect("the insert filled a slot");
        let cleared = (0..words)
            .find(|&w| le_word(&inserted[0], w * 8) != 0 && le_word(&deleted[0], w * 8) == 0)
            .expect("the delete cleared a slot");
        // Backup 0 missed the delete, backup 1 the insert.
        let held = le_word(&inserted[0], cleared * 8).to_le_bytes();
        let mut batch = t.fabric().take_batch();
        batch
            .on(Replica::Backup(0))
            .write(base.add(cleared as u64 * 8), &held);
        batch
            .on(Replica::Backup(1))
            .write(base.add(filled as u64 * 8), &0u64.to_le_bytes());
        t.fabric().execute(&mut batch).await.unwrap();
        t.fabric().give_batch(batch);
        let broken = subtable_copies(&mut t).await;
        assert_ne!(broken[0][1], broken[0][0]);
        assert_ne!(broken[0][2], broken[0][0]);

        assert_eq!(t.converge_backups().await.unwrap(), 2);
        let healed = subtable_copies(&mut t).await;
        for copies in &healed {
            assert!(
                copies.iter().all(|c| c == &copies[0]),
                "every backup equals the primary"
            );
        }
        assert_eq!(t.get(7).await.unwrap(), None);
        assert_eq!(t.get(21).await.unwrap(), Some(210));
        // Nothing left to move.
        assert_eq!(t.converge_backups().await.unwrap(), 0);
    }

    /// A 3-replica table of 20 keys whose primary's CAS put `value` in slot
    /// 0 of a bucket no key filled (empty on every replica), its backups not
    /// yet told: the table, the slot's address and its word in the subtable.
    async fn published_on_the_primary_alone(value: u64) -> (HashTable, GlobalAddr, usize) {
        let mut t = replicated_table(3).await;
        for key in 1..=20 {
            assert!(t.insert(key, key).await.unwrap());
        }
        let base = {
            let subs = t.subtables().await.unwrap();
            t.locate(subs[0]).await.unwrap().base
        };
        let copies = subtable_copies(&mut t).await.remove(0);
        let buckets = copies[0].len() / BUCKET_WORDS;
        let w = (0..buckets)
            .map(|b| b * BUCKET_WORDS + 1)
            .find(|&w| copies.iter().all(|c| le_word(c, w * 8) == 0))
            .expect("an empty slot");
        let at = base.add(w as u64 * 8);
        let mut batch = t.fabric().take_batch();
        batch.cas(at, 0, value);
        t.fabric().execute(&mut batch).await.unwrap();
        t.fabric().give_batch(batch);
        (t, at, w)
    }

    /// A slot's replication whose batch loses its connection after one
    /// backup's CAS ran (the other backup's never sent: a partition of the
    /// link to it) sends the CASes again, and both backups end on the new
    /// value. Before, the write was reported in doubt and the second backup
    /// kept the old value with no node dead, until the slot's next writer
    /// (data-path-hash seeds 127, 283).
    #[tokio::test]
    async fn a_slot_replication_cut_off_from_a_backup_is_sent_again() {
        let value = 0x5f03_0000_0002_0000u64;
        let (mut t, at, w) = published_on_the_primary_alone(value).await;
        // The replication's batch: backup 0's CAS runs, then the
        // connection drops before backup 1's is sent.
        let map = t.fabric().map().clone();
        let (faulty, _) = t.fabric().transport().clone().with_faults(fabric::FaultPlan {
            drop_after_verbs: Some(1),
            ..fabric::FaultPlan::default()
        });
        *t.fabric() = Client::new(map, faulty);
        t.replicate_slot(at, Slot::EMPTY, Slot(value)).await.unwrap();
        assert_eq!(t.stats().slot_replications_resent, 1);
        let replicated = subtable_copies(&mut t).await.remove(0);
        for (r, copy) in replicated.iter().enumerate() {
            assert_eq!(le_word(copy, w * 8), value, "replica {r}");
        }
    }

    /// A writer whose own lease is not certain between its primary CAS and
    /// its backups' (a renewal came late: nothing is issued) waits for the
    /// renewal and finishes the replication. Before, the round failed at
    /// once and the write was reported in doubt with the value on the
    /// primary alone (leader-during-recovery-hash seed 76).
    #[tokio::test(start_paused = true)]
    async fn a_slot_replication_waits_out_its_own_late_renewal() {
        let value = 0x5f03_0000_0001_0000u64;
        // The primary's CAS landed...
        let (mut t, at, w) = published_on_the_primary_alone(value).await;
        // ...and now the lease this client issues under is not certain, until
        // a renewal lands 200 ms on.
        let map = t.fabric().map().clone();
        let mandate = fabric::Mandate::new(map, std::time::Instant::now());
        let transport = t.fabric().transport().clone();
        *t.fabric() = Client::under(mandate.clone(), transport);
        let renewal = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            mandate.extend(std::time::Instant::now() + std::time::Duration::from_secs(3600));
        });
        t.replicate_slot(at, Slot::EMPTY, Slot(value)).await.unwrap();
        renewal.await.unwrap();
        let replicated = subtable_copies(&mut t).await.remove(0);
        for (r, copy) in replicated.iter().enumerate() {
            assert_eq!(le_word(copy, w * 8), value, "replica {r}");
        }
    }
}
