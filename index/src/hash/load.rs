//! Bulk load: builds every subtable locally at the depth the key count
//! needs and writes them whole, for benchmarks that need millions of keys in
//! seconds. Loading is exclusive: no other client may use the table meanwhile.

use fabric::{Batch, GlobalAddr, Replica, VERB_BYTES_MAX};

use super::layout::{
    dir_hash, encode_kv, fingerprint, Geometry, Header, Slot, BUCKET_BYTES, DIR_DEPTH_MAX, KV_BYTES,
    SLOTS_PER_BUCKET,
};
use super::split::full_slots;
use super::{dir_bytes, words_bytes, Engine, HashTable};
use crate::error::IndexError;

/// The fill a bulk load aims at: about what a split leaves behind, so that
/// inserts after the load do not all split at once.
pub const LOAD_FILL: f64 = 0.6;
/// KV blocks written per round trip: one WRITE of `VERB_BYTES_MAX`.
const KVS_PER_WRITE: usize = VERB_BYTES_MAX as usize / KV_BYTES as usize;

/// What a bulk load built.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct HashLoadReport {
    /// Entries loaded.
    pub keys: u64,
    /// Subtables written.
    pub subtables: u64,
    /// Their local depth.
    pub depth: u8,
    /// Keys per slot.
    pub load_factor: f64,
    /// DM bytes of subtables, KV blocks and directory, per key.
    pub bytes_per_key: f64,
}

impl HashTable {
    /// Loads `entries` (distinct keys, any order) into this empty table.
    /// `progress` is called with the number of entries written so far,
    /// about once per megabyte.
    pub async fn bulk_load(
        &mut self,
        entries: &[(u64, u64)],
        mut progress: impl FnMut(u64),
    ) -> Result<HashLoadReport, IndexError> {
        self.check_empty().await?;
        let g = self.geometry;
        let max = self.info.config.dir_depth;
        let mut depth = load_depth(entries.len() as u64, g.slots()).map_or(max, |d| d.min(max));
        // KV blocks first: their offsets go into the slots.
        let region = self.heap.region();
        let mut kv_at = Vec::with_capacity(entries.len());
        for (n, chunk) in entries.chunks(KVS_PER_WRITE).enumerate() {
            let bytes: Vec<u8> = chunk.iter().flat_map(|&(k, v)| encode_kv(k, v)).collect();
            let at = self.alloc_kv(bytes.len() as u32).await?;
            let mut batch = Batch::new();
            let h = batch.on(Replica::All).write(GlobalAddr::new(region, at), &bytes);
            self.fabric().execute(&mut batch).await?;
            batch.done(h).map_err(IndexError::Verb)?;
            kv_at.extend((0..chunk.len() as u64).map(|i| at + i * u64::from(KV_BYTES)));
            progress(((n + 1) * KVS_PER_WRITE).min(entries.len()) as u64);
        }
        // Place every key; a subtable that overflows takes the next depth.
        let subtables = loop {
            match place(g, depth, entries, &kv_at) {
                Some(s) => break s,
                None if depth < max => depth += 1,
                None => return Err(IndexError::Full(0)),
            }
        };
        let mut refs = Vec::with_capacity(subtables.len());
        for data in &subtables {
            refs.push(self.write_subtable(data).await?);
        }
        let dir: Vec<u64> = (0..1u64 << max)
            .map(|e| refs[(e & ((1 << depth) - 1)) as usize])
            .collect();
        self.write_dir(&dir).await?;
        self.reload_dir().await?;
        let bytes = subtables.len() as u64 * g.subtable_bytes()
            + entries.len() as u64 * u64::from(KV_BYTES)
            + u64::from(dir_bytes(max));
        let keys = entries.len() as u64;
        Ok(HashLoadReport {
            keys,
            subtables: subtables.len() as u64,
            depth,
            load_factor: keys as f64 / (subtables.len() as u64 * g.slots()) as f64,
            bytes_per_key: bytes as f64 / keys.max(1) as f64,
        })
    }

    /// Refuses a table that holds anything.
    async fn check_empty(&mut self) -> Result<(), IndexError> {
        self.reload_dir().await?;
        let first = self.dir[0];
        if self.dir.iter().any(|&s| s != first) {
            return Err(IndexError::Layout("bulk load needs an empty table".into()));
        }
        let loc = self.locate(first).await?;
        let len = self.geometry.subtable_bytes();
        let data = super::split::read_block(self.fabric(), loc.base, len).await?;
        if !full_slots(self.geometry, &data).is_empty() {
            return Err(IndexError::Layout("bulk load needs an empty table".into()));
        }
        Ok(())
    }

    /// Writes a new subtable; returns its ref.
    async fn write_subtable(&mut self, data: &[u8]) -> Result<u64, IndexError> {
        let heap = self.heap;
        match &mut self.engine {
            Engine::Rtx(c) => Ok(c.create_raw(data).await?.meta.raw()),
            Engine::Dtx(c) => {
                let block = super::write_block(c.fabric(), &mut self.alloc, heap, data).await?;
                Ok(c.create_raw(&super::pointer_bytes(block)).await?.addr.raw())
            }
            Engine::Optimal(c) => {
                let at = GlobalAddr::new(self.heap.region(), self.alloc.data(c, data.len() as u32).await?);
                let mut batch = Batch::new();
                let h = batch.on(Replica::All).write(at, data);
                c.execute(&mut batch).await?;
                batch.done(h).map_err(IndexError::Verb)?;
                Ok(at.raw())
            }
        }
    }

    /// Replaces the directory's contents.
    async fn write_dir(&mut self, dir: &[u64]) -> Result<(), IndexError> {
        let bytes = words_bytes(dir);
        let dir_obj = self.dir_obj();
        let dir_rec = self.dir_record();
        let at = self.info.dir;
        let heap = self.heap;
        match &mut self.engine {
            Engine::Dtx(c) => {
                let block = super::write_block(c.fabric(), &mut self.alloc, heap, &bytes).await?;
                let pointer = super::pointer_bytes(block);
                c.run(async move |tx| tx.write(dir_rec, &pointer).await).await?;
                c.release_pending().await?;
            }
            Engine::Rtx(c) => {
                c.run(async move |tx| tx.write_raw(dir_obj, &bytes).await).await?;
            }
            Engine::Optimal(c) => {
                let mut batch = Batch::new();
                let h = batch.on(Replica::All).write(at, &bytes);
                c.execute(&mut batch).await?;
                batch.done(h).map_err(IndexError::Verb)?;
            }
        }
        Ok(())
    }
}

/// The depth a bulk load starts at for `keys` keys in subtables of `slots`
/// slots: the smallest whose slots hold them at `LOAD_FILL`, or `None` past
/// the deepest directory.
pub fn load_depth(keys: u64, slots: u64) -> Option<u8> {
    (0..=DIR_DEPTH_MAX).find(|&d| keys as f64 <= slots as f64 * LOAD_FILL * (1u64 << d) as f64)
}

/// Builds the `2^depth` subtables of `entries` (KV block `kv_at[i]` for
/// entry i), or `None` if a key finds both its combined buckets full.
fn place(g: Geometry, depth: u8, entries: &[(u64, u64)], kv_at: &[u64]) -> Option<Vec<Vec<u8>>> {
    let n = 1usize << depth;
    let mut subs: Vec<Vec<u8>> = (0..n as u64)
        .map(|s| g.empty_subtable(Header::new(depth, s)))
        .collect();
    let mask = (1u64 << depth) - 1;
    for (&(key, _), &kv) in entries.iter().zip(kv_at) {
        let data = &mut subs[(dir_hash(key) & mask) as usize];
        let slot = Slot::new(fingerprint(key), kv);
        let free = |data: &[u8], start: u64| -> Vec<u64> {
            (start..start + 2)
                .flat_map(|b| (0..SLOTS_PER_BUCKET).map(move |s| Geometry::slot_offset(b, s)))
                .filter(|&o| data[o as usize..o as usize + 8].iter().all(|&x| x == 0))
                .collect()
        };
        let starts = [0, 1].map(|w| g.combined_start(g.main_bucket(key, w)));
        let (a, b) = (free(data, starts[0]), free(data, starts[1]));
        let pick = if b.len() > a.len() { b } else { a };
        let at = *pick.first()? as usize;
        debug_assert!(at as u64 % BUCKET_BYTES != 0, "a slot is never a header");
        data[at..at + 8].copy_from_slice(&slot.0.to_le_bytes());
    }
    Some(subs)
}
