//! The structural checker: every key in exactly one slot, in the subtable
//! its hash selects and in one of its two candidate combined buckets; every
//! directory entry naming the subtable that covers it; every header of a
//! subtable equal; no lock held (bucket headers for optimal, subtable and
//! directory metas for rtx, their pointer records for dtx, which must be
//! visible too). Run it with no writer active.

use fabric::le_word;
use std::collections::{BTreeMap, HashMap};

use fabric::{GlobalAddr, Replica};

use super::layout::{decode_kv, dir_hash, fingerprint, Header, Slot, BUCKET_BYTES, KV_BYTES};
use super::split::{full_slots, read_block};
use super::HashTable;
use crate::btree::Variant;
use crate::error::IndexError;

/// Violations listed before the checker stops collecting them.
const VIOLATIONS_MAX: usize = 100;

/// What [`HashTable::check`] found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HashCheckReport {
    /// Distinct subtables the directory names.
    pub subtables: u64,
    /// Keys found.
    pub keys: u64,
    /// Slots in all subtables.
    pub slots: u64,
    /// What is wrong (at most `VIOLATIONS_MAX`).
    pub violations: Vec<String>,
    /// Locks found held (each also a violation), counted past
    /// `VIOLATIONS_MAX` too.
    pub locks_held: u64,
}

impl HashCheckReport {
    /// Whether the table is sound.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Keys per slot.
    pub fn load_factor(&self) -> f64 {
        if self.slots == 0 {
            0.0
        } else {
            self.keys as f64 / self.slots as f64
        }
    }

    fn violation(&mut self, v: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(v);
        }
    }

    fn held_lock(&mut self, v: String) {
        self.locks_held += 1;
        self.violation(v);
    }
}

impl HashTable {
    /// Checks the whole table (reading all of it).
    pub async fn check(&mut self) -> Result<HashCheckReport, IndexError> {
        Ok(self.walk().await?.0)
    }

    /// Every `(key, value)` in the table, by key (for tests and the chaos
    /// checks; reads the whole table).
    pub async fn entries(&mut self) -> Result<BTreeMap<u64, u64>, IndexError> {
        Ok(self.walk().await?.1)
    }

    /// Repairs every expired lock on the directory and the subtables, as
    /// the next client to meet each would (rtx). rTX repairs on demand, and
    /// the common path never reads the directory's lock: a split that died
    /// between releasing its subtable and the directory leaves that lock
    /// until the next split, or until this sweep (the recovery module's, or
    /// a checker's before `check`). Returns the locks repaired; optimal has
    /// nothing to repair with, and nobody but recovery (its log) acts on a
    /// dtx lock.
    pub async fn repair_expired_locks(&mut self) -> Result<usize, IndexError> {
        if self.info.variant != Variant::Rtx {
            return Ok(0);
        }
        let subs = self.subtables().await?;
        let mut objs = vec![self.dir_obj()];
        objs.extend(subs.into_iter().map(|s| self.sub_obj(s)));
        let mut repaired = 0;
        for obj in objs {
            let lock = self.read_guard(obj.meta).await?.lock;
            let now = self.now_tick();
            if let super::Engine::Rtx(c) = &mut self.engine {
                if lock.is_locked()
                    && lock.is_expired(now)
                    && c.repair(obj, lock).await? == txn::RepairOutcome::Repaired
                {
                    repaired += 1;
                }
            }
        }
        self.data_of.clear();
        self.reload_dir().await?;
        Ok(repaired)
    }

    /// After a promotion, once every DTX log is finished: frees every lock
    /// word still held on the new primary (a dtx table's directory and
    /// subtable records: stale words a re-replication copied; see
    /// `txn::dtx::DtxClient::free_stale_locks`). Returns the locks freed;
    /// 0 for the other variants. Only for a promoter, with nobody else
    /// acting on the region.
    pub async fn free_stale_locks(&mut self) -> Result<u32, IndexError> {
        if self.info.variant != Variant::Dtx {
            return Ok(0);
        }
        let mut records = vec![self.dir_record()];
        records.extend(self.subtables().await?.into_iter().map(HashTable::sub_record));
        match &mut self.engine {
            super::Engine::Dtx(c) => Ok(c.free_stale_locks(&records).await?),
            _ => Ok(0),
        }
    }

    async fn walk(&mut self) -> Result<(HashCheckReport, BTreeMap<u64, u64>), IndexError> {
        let mut report = HashCheckReport::default();
        let mut entries = BTreeMap::new();
        self.reload_dir().await?;
        let g = self.geometry;
        let depth = self.info.config.dir_depth;
        let region = self.heap.region();
        if self.guarded() {
            let guard = self.read_guard(self.info.dir).await?;
            if !guard.is_free() {
                report.held_lock(format!("the directory is locked: {guard:?}"));
            }
        }
        let mut subs: HashMap<u64, Vec<u64>> = HashMap::new();
        for (i, &sub) in self.dir.iter().enumerate() {
            subs.entry(sub).or_default().push(i as u64);
        }
        let mut order: Vec<_> = subs.into_iter().collect();
        order.sort();
        let mut seen: HashMap<u64, (u64, usize)> = HashMap::new();
        for (sub, dir_indexes) in order {
            report.subtables += 1;
            report.slots += g.slots();
            let base = if self.guarded() {
                let guard = self.read_guard(GlobalAddr::from_raw(sub)).await?;
                if !guard.is_free() {
                    report.held_lock(format!("subtable {sub:#x} is locked: {guard:?}"));
                }
                GlobalAddr::new(region, guard.dptr.offset())
            } else {
                GlobalAddr::from_raw(sub)
            };
            let data = read_block(self.fabric(), base, g.subtable_bytes()).await?;
            let header = Header(le_word(&data, 0));
            if header.is_locked() {
                report.held_lock(format!("subtable {sub:#x} is locked by owner {}", header.owner()));
            }
            for b in 1..g.buckets() {
                let h = Header(le_word(&data, ((b * BUCKET_BYTES / 8) as usize) * 8));
                if h != header {
                    report.violation(format!(
                        "subtable {sub:#x}: bucket {b} has header {:#x}, bucket 0 {:#x}",
                        h.0, header.0
                    ));
                    break;
                }
            }
            let (ld, suffix) = (header.local_depth(), header.suffix());
            if ld > depth {
                report.violation(format!(
                    "subtable {sub:#x} has local depth {ld} above the directory's {depth}"
                ));
                continue;
            }
            let mut covered: Vec<u64> = self.covered(ld, suffix).collect();
            covered.sort_unstable();
            if covered != dir_indexes {
                report.violation(format!(
                    "subtable {sub:#x} (depth {ld}, suffix {suffix:#x}) is named by {} directory entries, covers {}",
                    dir_indexes.len(),
                    covered.len()
                ));
            }
            let slots = full_slots(g, &data);
            let mut batch = fabric::Batch::new();
            // Every replica's copy of each KV block a slot names: the
            // block was written to every replica before any slot named it
            // (`ops::read_view`), so copies that differ are a replica left
            // behind (a dropped WRITE, say), which comparing the slots
            // alone does not see.
            let replicas = if self.guarded() {
                self.fabric()
                    .map()
                    .region(region)
                    .map_or(1, |r| r.replicas.len())
                    .max(1)
            } else {
                1
            };
            for chunk in slots.chunks(fabric::VERBS_PER_BATCH_MAX / replicas) {
                batch.clear();
                let hs: Vec<_> = chunk
                    .iter()
                    .map(|(_, s)| {
                        let at = GlobalAddr::new(region, s.ptr());
                        if replicas > 1 {
                            batch.on(Replica::All).read(at, KV_BYTES)
                        } else {
                            batch.read(at, KV_BYTES)
                        }
                    })
                    .collect();
                self.fabric().execute(&mut batch).await?;
                for (&(offset, slot), h) in chunk.iter().zip(hs) {
                    let b = batch.read_result(h).map_err(IndexError::Verb)?;
                    for r in 1..batch.completions(h).len() {
                        if batch.read_result_of(h, r).map_err(IndexError::Verb)? != b {
                            report.violation(format!(
                                "subtable {sub:#x} slot at {offset}: the KV block at {:#x} differs on replica {r}",
                                slot.ptr()
                            ));
                        }
                    }
                    let Some((key, value)) = decode_kv(b) else {
                        report.violation(format!(
                            "subtable {sub:#x} slot at {offset}: KV block check fails"
                        ));
                        continue;
                    };
                    self.check_slot(&mut report, sub, header, offset, slot, key);
                    report.keys += 1;
                    if let Some((other, at)) = seen.insert(key, (sub, offset as usize)) {
                        report.violation(format!(
                            "key {key} is in two slots: {other:#x}+{at} and {sub:#x}+{offset}"
                        ));
                    }
                    entries.insert(key, value);
                }
            }
        }
        Ok((report, entries))
    }

    fn check_slot(
        &self,
        report: &mut HashCheckReport,
        sub: u64,
        header: Header,
        offset: u64,
        slot: Slot,
        key: u64,
    ) {
        let g = self.geometry;
        if slot.fingerprint() != fingerprint(key) || slot.kv_len() != super::layout::KV_WORDS {
            report.violation(format!(
                "key {key}: slot {:#x} has the wrong fingerprint or length",
                slot.0
            ));
        }
        if !header.covers(dir_hash(key)) {
            report.violation(format!(
                "key {key} is in subtable {sub:#x}, which does not cover it"
            ));
        }
        let bucket = offset / BUCKET_BYTES;
        let candidate = (0..2).any(|w| {
            let start = g.combined_start(g.main_bucket(key, w));
            bucket == start || bucket == start + 1
        });
        if !candidate {
            report.violation(format!(
                "key {key} is in bucket {bucket}, outside its two combined buckets"
            ));
        }
    }
}
