//! Splitting a full subtable of local depth `d` and suffix `s` into itself
//! (depth `d+1`, suffix `s`) and a new one (depth `d+1`, suffix
//! `s | 1 << d`) that takes the entries whose directory hash has bit `d` set.
//! An entry keeps its (bucket, slot) position in whichever half it goes to,
//! so no placement can fail.
//!
//! optimal, the original resize (1, 3, 5, 6, 8 one batch each; 2's key
//! READs, 4 and 7 one entry per round trip unless batched, see below):
//! ```text
//! 1 lock    CAS every bucket header (d, s) -> locked (d, s)
//! 2         READ the subtable; READ the KV block of every slot (for its key)
//! 3         WRITE the new subtable, empty, headers locked (d+1, s|1<<d)
//! 4 move    CAS each moving entry into the new subtable
//! 5         WRITE the directory entries of s|1<<d
//! 6         CAS every old header locked (d, s) -> locked (d+1, s)
//! 7 move    CAS each moved entry out of the old subtable
//! 8 unlock  CAS every header of both to unlocked
//! ```
//! Two CASes per entry moved and two per bucket. A splitter that dies
//! anywhere leaves headers locked: writers of the subtable wait for good.
//!
//! The per-entry verbs (the key READs of 2, the CASes of 4 and 7) go one
//! per round trip by default, each awaited before the next, as the
//! original resize moves entries one at a time: that is the rTX paper's
//! baseline ("2 CASes for each KV-pair migrated"), and what the public RACE
//! implementations we read do. With every header locked no writer races
//! them, so they can be batched
//! ([`HashTable::set_split_entries_per_round_trip`]): a stronger baseline
//! than the paper's, which the rehash benchmark measures too.
//!
//! rtx: one rTX. Pre-lock the subtable and READ it (Opt2), READ the KV
//! blocks, write the kept half over it, create the new half, write the
//! directory; commit (logged: two objects, plus one created). The replaced
//! block is retired, never reused, because a writer's slot CAS may still
//! land in it. A splitter that dies is repaired by the next client that
//! meets the expired lock.
//!
//! dtx: one DTX transaction over the two pointer records (FORD: lock the
//! pointer, then fetch the record). Lock the subtable's record and read
//! its pointer (one batch), READ the block and the KV blocks' keys, write
//! both halves to fresh blocks, lock the directory's record, READ the
//! directory and write it to a fresh block; the commit swings both
//! pointers and creates the new subtable's record; the release follows at
//! once (a writer waits on the subtable's lock). Subtable blocks are never
//! reused (raw chunks), so a writer's CAS into the replaced block lands in
//! memory nobody reuses. A splitter that dies blocks writers of the
//! subtable until recovery rolls its log back; the fresh subtable blocks of
//! a rolled-back split leak.
//!
//! Directory blocks are reused: each client writes its directories into a
//! ring of two blocks of its own, never into the one the pointer names now
//! (it writes only under the directory's lock, so the pointer cannot move
//! meanwhile, and a rollback restores the pointer its dead holder saw, which
//! was not that holder's target either). Every split rewriting the whole
//! directory out of place would otherwise cost a directory per split for
//! good: 2^depth of them over a grow. So a reader reads the directory's
//! record again in the batch that READs the block, after it, and takes the
//! block only if the record did not change (versions only grow: no commit
//! came in between, so the block it names was not rewritten meanwhile).

use fabric::le_word;
use fabric::{Batch, Client, GlobalAddr, Replica, VERBS_PER_BATCH_MAX};

use super::layout::{
    dir_entries, dir_hash, Geometry, Header, Slot, BUCKETS_PER_GROUP, BUCKET_BYTES, GROUPS_MAX, KEY_BYTES,
    SLOTS_PER_BUCKET,
};
use super::{Engine, HashTable, Loc};
use crate::error::IndexError;

/// The named crash point (`fabric::FaultPlan::crash_points`) an optimal
/// split passes midway: after it copied the moving entries into the new
/// subtable and wrote the directory, before it touched the old subtable's
/// headers and entries. (An rtx split is a logged rTX: its midway point is
/// `txn::CRASH_AT_COMMIT_POINT`.)
pub const CRASH_SPLIT_MIDWAY: &str = "hash-split-midway";

// Every bucket header of the largest subtable is locked in one batch.
const _: () = assert!(GROUPS_MAX as u64 * BUCKETS_PER_GROUP <= VERBS_PER_BATCH_MAX as u64);

/// Where an entry of a splitting subtable goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Keep,
    Move,
    /// Its key does not belong to the subtable at all: a stray copy left by
    /// a writer that died (optimal) and that no lookup can reach.
    Drop,
}

/// A full slot of a subtable being split.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Byte offset of the slot in the subtable.
    offset: u64,
    slot: Slot,
    fate: Fate,
}

impl HashTable {
    /// Splits every subtable once (the table doubles); returns how many
    /// splits this client made. What a full table's resize is in the
    /// paper's rehash experiment. Other clients may keep working meanwhile.
    pub async fn grow(&mut self) -> Result<u64, IndexError> {
        let subs = self.subtables().await?;
        let before = self.stats.splits;
        for sub in subs {
            let loc = self.locate(sub).await?;
            let header = Header(le_word(&read_block(self.fabric(), loc.base, 8).await?, 0));
            if header.is_locked() {
                continue;
            }
            self.split(loc, header).await?;
        }
        Ok(self.stats.splits - before)
    }

    /// Splits the subtable at `loc`, whose buckets a client saw with
    /// `header`. Returns once the subtable is split (by this client or
    /// another) or was found changed; the caller then looks again.
    pub(crate) async fn split(&mut self, loc: Loc, header: Header) -> Result<(), IndexError> {
        if header.local_depth() >= self.info.config.dir_depth {
            return Err(IndexError::Full(loc.sub));
        }
        match self.info.variant {
            crate::btree::Variant::Dtx => {
                if let Some(dir) = self.split_dtx(loc, header).await? {
                    return self.cache_dir(&dir);
                }
            }
            crate::btree::Variant::Optimal => self.split_optimal(loc, header).await?,
            crate::btree::Variant::Rtx => {
                if let Some(dir) = self.split_rtx(loc, header).await? {
                    // The directory this split committed: as fresh as a
                    // re-read, without the READ of the whole directory.
                    return self.cache_dir(&dir);
                }
            }
        }
        self.reload_dir().await
    }

    async fn split_optimal(&mut self, loc: Loc, header: Header) -> Result<(), IndexError> {
        let g = self.geometry;
        let owner = self.owner;
        let base = loc.base;
        let header_at = |b: u64| base.add(b * BUCKET_BYTES);
        let (d, s) = (header.local_depth(), header.suffix());
        let locked = header.locked_by(owner);

        // 1: lock every header (one batch: see the assertion on GROUPS_MAX); give back
        // what was taken if one is not as seen.
        let mut batch = Batch::new();
        let hs: Vec<_> = (0..g.buckets())
            .map(|b| (b, batch.cas(header_at(b), header.0, locked.0)))
            .collect();
        self.fabric().execute(&mut batch).await?;
        let mut won = Vec::with_capacity(hs.len());
        for (b, h) in hs {
            if batch.cas_succeeded(h).map_err(IndexError::Verb)? {
                won.push(b);
            }
        }
        if won.len() as u64 != g.buckets() {
            cas_all(
                self.fabric(),
                won.iter().map(|&b| (header_at(b), locked.0, header.0)),
                VERBS_PER_BATCH_MAX,
            )
            .await?;
            return Ok(());
        }

        // 2: the subtable and the key of every entry.
        let per_round_trip = self.split_entries_per_round_trip;
        let data = read_block(self.fabric(), base, g.subtable_bytes()).await?;
        let entries = self.entries_of(&data, d, s, per_round_trip).await?;

        // 3: the new subtable, locked.
        let new_suffix = s | 1 << d;
        let new_header = Header::new(d + 1, new_suffix).locked_by(owner);
        let new_at = GlobalAddr::new(
            self.heap.region(),
            self.alloc_data(g.subtable_bytes() as u32).await?,
        );
        let mut batch = Batch::new();
        let w = batch
            .on(Replica::All)
            .write(new_at, &g.empty_subtable(new_header));
        self.fabric().execute(&mut batch).await?;
        batch.done(w).map_err(IndexError::Verb)?;

        // 4: move in.
        let moving = entries.iter().filter(|e| e.fate == Fate::Move);
        cas_all(
            self.fabric(),
            moving.clone().map(|e| (new_at.add(e.offset), 0, e.slot.0)),
            per_round_trip,
        )
        .await?;

        // 5: the directory.
        let dir = self.info.dir;
        let depth = self.info.config.dir_depth;
        let mut batch = Batch::new();
        for e in dir_entries(depth, d + 1, new_suffix) {
            batch
                .on(Replica::All)
                .write(dir.add(e * 8), &new_at.raw().to_le_bytes());
            if batch.len() >= VERBS_PER_BATCH_MAX {
                self.fabric().execute(&mut batch).await?;
                batch.clear();
            }
        }
        self.fabric().execute(&mut batch).await?;
        // Moved entries are in both subtables, every header is locked.
        self.fabric().crash_point(CRASH_SPLIT_MIDWAY)?;

        // 6: the old subtable now covers half.
        let deeper = Header::new(d + 1, s).locked_by(owner);
        cas_all(
            self.fabric(),
            (0..g.buckets()).map(|b| (header_at(b), locked.0, deeper.0)),
            VERBS_PER_BATCH_MAX,
        )
        .await?;

        // 7: move out (and drop strays).
        let leaving = entries.iter().filter(|e| e.fate != Fate::Keep);
        cas_all(
            self.fabric(),
            leaving.map(|e| (base.add(e.offset), e.slot.0, 0)),
            per_round_trip,
        )
        .await?;

        // 8: unlock both.
        let unlock_new = (0..g.buckets()).map(|b| {
            (
                new_at.add(b * BUCKET_BYTES),
                new_header.0,
                new_header.unlocked().0,
            )
        });
        let unlock_old = (0..g.buckets()).map(|b| (header_at(b), deeper.0, deeper.unlocked().0));
        cas_all(self.fabric(), unlock_new.chain(unlock_old), VERBS_PER_BATCH_MAX).await?;
        self.stats.splits += 1;
        Ok(())
    }

    /// Returns the directory bytes the split committed, or `None` when
    /// another client had split the subtable first.
    async fn split_rtx(&mut self, loc: Loc, header: Header) -> Result<Option<Vec<u8>>, IndexError> {
        let g = self.geometry;
        let obj = self.sub_obj(loc.sub);
        let dir_obj = self.dir_obj();
        let depth = self.info.config.dir_depth;
        let region = self.heap.region();
        let Engine::Rtx(c) = &mut self.engine else {
            unreachable!("split_rtx runs on the rtx variant only");
        };
        let split = c
            .run(async move |tx| {
                // Becomes the kept half, in place.
                let mut keep = tx.read_locked(obj).await?.to_vec();
                tx.retire_replaced(obj)?;
                let now = Header(le_word(&keep, 0));
                if now != header {
                    // Split by another client since: commit it unchanged.
                    return Ok(None);
                }
                let moved = halve(tx.client().fabric(), region, g, &mut keep, header).await?;
                let d = header.local_depth();
                let new_suffix = header.suffix() | 1 << d;
                tx.write_raw(obj, &keep).await?;
                let new = tx.create_raw(&moved).await?;
                let mut dir = tx.read_raw(dir_obj).await?.to_vec();
                for e in dir_entries(depth, d + 1, new_suffix) {
                    let at = e as usize * 8;
                    dir[at..at + 8].copy_from_slice(&new.meta.raw().to_le_bytes());
                }
                tx.write_raw(dir_obj, &dir).await?;
                Ok(Some(dir))
            })
            .await?;
        self.data_of.remove(&loc.sub);
        if split.is_some() {
            self.stats.splits += 1;
        }
        Ok(split)
    }

    /// Returns the directory bytes the split committed, or `None` when
    /// another client had split the subtable first.
    async fn split_dtx(&mut self, loc: Loc, header: Header) -> Result<Option<Vec<u8>>, IndexError> {
        let g = self.geometry;
        let sub_bytes = g.subtable_bytes();
        let (sub_rec, dir_rec) = (HashTable::sub_record(loc.sub), self.dir_record());
        let depth = self.info.config.dir_depth;
        let region = self.heap.region();
        // The fresh blocks, taken before the transaction so that its
        // retries reuse them: nothing names them until the commit.
        let keep_at = GlobalAddr::new(region, self.alloc_data(sub_bytes as u32).await?);
        let moved_at = GlobalAddr::new(region, self.alloc_data(sub_bytes as u32).await?);
        let dir_len = super::dir_bytes(depth);
        let ring = match self.dir_ring {
            Some(ring) => ring,
            None => {
                let ring = [
                    GlobalAddr::new(region, self.alloc_data(dir_len).await?),
                    GlobalAddr::new(region, self.alloc_data(dir_len).await?),
                ];
                *self.dir_ring.insert(ring)
            }
        };
        let Engine::Dtx(c) = &mut self.engine else {
            unreachable!("split_dtx runs on the dtx variant only");
        };
        let split = c
            .run(async move |tx| {
                let block = pointed(tx.read_for_update(sub_rec).await?, region)?;
                let mut keep = read_block(tx.client().fabric(), block, sub_bytes)
                    .await
                    .map_err(as_tx)?;
                if Header(le_word(&keep, 0)) != header {
                    // Split by another client since: nothing to write.
                    return Ok(None);
                }
                let moved = halve(tx.client().fabric(), region, g, &mut keep, header).await?;
                let d = header.local_depth();
                let new_suffix = header.suffix() | 1 << d;
                let mut batch = Batch::new();
                let hs = [
                    batch.on(Replica::All).write(keep_at, &keep),
                    batch.on(Replica::All).write(moved_at, &moved),
                ];
                tx.client().fabric().execute(&mut batch).await?;
                for h in hs {
                    batch.done(h).map_err(txn::TxError::Verb)?;
                }
                let new = tx.create_raw(&super::pointer_bytes(moved_at)).await?;
                tx.write(sub_rec, &super::pointer_bytes(keep_at)).await?;
                let dir_block = pointed(tx.read_for_update(dir_rec).await?, region)?;
                let dir_at = if ring[0] == dir_block { ring[1] } else { ring[0] };
                let mut dir = read_block(tx.client().fabric(), dir_block, u64::from(dir_len))
                    .await
                    .map_err(as_tx)?;
                for e in dir_entries(depth, d + 1, new_suffix) {
                    let at = e as usize * 8;
                    dir[at..at + 8].copy_from_slice(&new.addr.raw().to_le_bytes());
                }
                let mut batch = Batch::new();
                let h = batch.on(Replica::All).write(dir_at, &dir);
                tx.client().fabric().execute(&mut batch).await?;
                batch.done(h).map_err(txn::TxError::Verb)?;
                tx.write(dir_rec, &super::pointer_bytes(dir_at)).await?;
                Ok(Some(dir))
            })
            .await;
        // Writers of the subtable wait on its lock: release now rather than
        // with this client's next batch.
        let released = c.release_pending().await;
        let split = split?;
        released?;
        self.data_of.remove(&loc.sub);
        if split.is_some() {
            self.stats.splits += 1;
        }
        Ok(split)
    }

    /// Every full slot of subtable bytes `data` (of depth `d`, suffix `s`)
    /// with where it goes, its key read `per_round_trip` entries at a time.
    async fn entries_of(
        &mut self,
        data: &[u8],
        d: u8,
        s: u64,
        per_round_trip: usize,
    ) -> Result<Vec<Entry>, IndexError> {
        let slots = full_slots(self.geometry, data);
        let region = self.heap.region();
        let keyed = slots.iter().map(|(_, s)| *s);
        let keys = read_keys(self.fabric(), region, keyed, per_round_trip).await?;
        Ok(slots
            .into_iter()
            .zip(keys)
            .map(|((offset, slot), key)| Entry {
                offset,
                slot,
                fate: fate(key, d, s),
            })
            .collect())
    }
}

/// rtx and dtx: splits subtable bytes `keep` (seen with `header`) in place
/// into the half that stays, and returns the half that moves (suffix
/// `s | 1 << d`), reading the key of every entry (a full batch a round
/// trip). Strays are dropped.
async fn halve(
    fabric: &mut Client,
    region: fabric::RegionId,
    g: Geometry,
    keep: &mut [u8],
    header: Header,
) -> Result<Vec<u8>, txn::TxError> {
    let (d, s) = (header.local_depth(), header.suffix());
    let slots = full_slots(g, keep);
    let keyed = slots.iter().map(|(_, s)| *s);
    let keys = read_keys(fabric, region, keyed, VERBS_PER_BATCH_MAX)
        .await
        .map_err(as_tx)?;
    let mut moved = g.empty_subtable(Header::new(d + 1, s | 1 << d));
    for b in 0..g.buckets() as usize {
        let at = b * BUCKET_BYTES as usize;
        keep[at..at + 8].copy_from_slice(&Header::new(d + 1, s).0.to_le_bytes());
    }
    for (&(offset, slot), key) in slots.iter().zip(keys) {
        let at = offset as usize;
        match fate(key, d, s) {
            Fate::Keep => {}
            Fate::Move => {
                keep[at..at + 8].fill(0);
                moved[at..at + 8].copy_from_slice(&slot.0.to_le_bytes());
            }
            Fate::Drop => keep[at..at + 8].fill(0),
        }
    }
    Ok(moved)
}

/// An index error inside a split's transaction body, as the transaction
/// layer's error the body must return.
fn as_tx(e: IndexError) -> txn::TxError {
    txn::TxError::BadObject(e.to_string())
}

/// The block a dtx pointer record's data names, in `region`.
fn pointed(data: &[u8], region: fabric::RegionId) -> Result<GlobalAddr, txn::TxError> {
    if data.len() != 8 {
        return Err(txn::TxError::BadObject(format!(
            "a pointer record holds {} bytes, not 8",
            data.len()
        )));
    }
    Ok(GlobalAddr::new(
        region,
        txn::DataPtr::from_raw(le_word(data, 0)).offset(),
    ))
}

fn fate(key: u64, d: u8, s: u64) -> Fate {
    let h = dir_hash(key);
    if !Header::new(d, s).covers(h) {
        Fate::Drop
    } else if h >> d & 1 == 1 {
        Fate::Move
    } else {
        Fate::Keep
    }
}

/// Every full slot of a subtable's bytes: `(byte offset, slot)`.
pub(crate) fn full_slots(g: Geometry, data: &[u8]) -> Vec<(u64, Slot)> {
    let mut out = Vec::new();
    for b in 0..g.buckets() {
        for s in 0..SLOTS_PER_BUCKET {
            let offset = Geometry::slot_offset(b, s);
            let slot = Slot(le_word(data, ((offset / 8) as usize) * 8));
            if !slot.is_empty() {
                out.push((offset, slot));
            }
        }
    }
    out
}

/// The keys of the KV blocks behind `slots`, in order, `per_round_trip`
/// (1..=`VERBS_PER_BATCH_MAX`) READs to a batch.
///
/// Each READ fetches the key word only: a split needs nothing else, and an
/// 8-byte READ never straddles two cache lines where a 24-byte block often
/// does. The block's check word is not needed to trust the key: a slot
/// publishes a block only after the block's WRITE completed, and blocks are
/// never changed or reused (the checker still verifies every check word).
pub(crate) async fn read_keys(
    fabric: &mut Client,
    region: fabric::RegionId,
    slots: impl Iterator<Item = Slot>,
    per_round_trip: usize,
) -> Result<Vec<u64>, IndexError> {
    debug_assert!((1..=VERBS_PER_BATCH_MAX).contains(&per_round_trip));
    let slots: Vec<Slot> = slots.collect();
    let mut keys = Vec::with_capacity(slots.len());
    let mut batch = fabric.take_batch();
    let mut handles = Vec::with_capacity(per_round_trip.min(slots.len()));
    for chunk in slots.chunks(per_round_trip) {
        batch.clear();
        handles.clear();
        handles.extend(
            chunk
                .iter()
                .map(|s| batch.read(GlobalAddr::new(region, s.ptr()), KEY_BYTES)),
        );
        fabric.execute(&mut batch).await?;
        for &h in &handles {
            keys.push(le_word(batch.read_result(h).map_err(IndexError::Verb)?, 0));
        }
    }
    fabric.give_batch(batch);
    Ok(keys)
}

/// READs `len` bytes at `at` (a subtable: within one verb's limit).
pub(crate) async fn read_block(fabric: &mut Client, at: GlobalAddr, len: u64) -> Result<Vec<u8>, IndexError> {
    let mut batch = Batch::new();
    let h = batch.read(at, len as u32);
    fabric.execute(&mut batch).await?;
    Ok(batch.read_result(h).map_err(IndexError::Verb)?.to_vec())
}

/// CASes `(addr, expect, new)` on the primary, `per_round_trip` to a batch
/// (1..=`VERBS_PER_BATCH_MAX`); a CAS that finds another value is left as
/// is (each step here expects what it did before).
async fn cas_all(
    fabric: &mut Client,
    cases: impl Iterator<Item = (GlobalAddr, u64, u64)>,
    per_round_trip: usize,
) -> Result<(), IndexError> {
    debug_assert!((1..=VERBS_PER_BATCH_MAX).contains(&per_round_trip));
    let mut batch = Batch::new();
    for (at, expect, new) in cases {
        batch.cas(at, expect, new);
        if batch.len() >= per_round_trip {
            fabric.execute(&mut batch).await?;
            batch.clear();
        }
    }
    fabric.execute(&mut batch).await?;
    Ok(())
}
