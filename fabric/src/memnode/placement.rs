//! A live image's region table: regions the control plane places on a
//! node while it serves (appended, re-keyed when placed again, retired when
//! not proven) and the replica generation each is held at (design.md §1b).
//! The verb path only reads what this module writes.

use crate::addr::{AccessKey, RegionId, ATOMIC_BYTES};
use crate::error::NodeError;
use crate::image::{
    Header, ImageId, RegionEntry, GENERATION_RETIRED, PAGE_BYTES, REGIONS_PER_NODE_MAX, REGION_BYTES_MAX,
    REGION_BYTES_MIN, REGION_COUNT_OFFSET,
};

use super::{validate, MemoryNode, RegionSpec};

impl MemoryNode {
    /// Takes region `id` of `size` bytes guarded by `key` into the image,
    /// after the last region: what a node placed by the control plane does
    /// when the map gives it a replica. Idempotent: a region already held
    /// with the same size and key is `Ok(false)`; a new one is `Ok(true)`.
    /// The entry is in the image header before the region count names it,
    /// so `shm` clients attached to the image find it
    /// (`MemoryNode::check` re-reads the table on a miss).
    pub fn add_region(&self, id: RegionId, size: u64, key: AccessKey) -> Result<bool, NodeError> {
        let _append = self.append.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = self.regions.find(id) {
            let now = self.regions.find_keyed(id).map(|(_, k)| k);
            if e.size == size && now == Some(key) {
                return Ok(false);
            }
            if e.size == size {
                // Placed here again after this node lost its replica (it
                // was declared dead and came back): the control plane
                // gave the new replica a new key, and recovery copies it
                // afresh. Verbs with the old key are refused from now on.
                // Retired meanwhile, its bytes may be another region's.
                if self.is_retired(id) {
                    let e = *e;
                    if let Some(other) = self.held().into_iter().find(|h| Header::overlap(h, &e)) {
                        return Err(NodeError::Regions(format!(
                            "region {id} was retired here and its bytes given to region {}: it can be \
                             placed here again once this node restarts",
                            other.id
                        )));
                    }
                    let at =
                        self.regions.entries().position(|x| x.id == id).ok_or_else(|| {
                            NodeError::Regions(format!("region {id} vanished from the table"))
                        })?;
                    // Allocated again, not proven: what it held is never served.
                    self.memory
                        .write(Header::generation_offset(at) as usize, &0u64.to_le_bytes());
                }
                let (i, old) = self
                    .regions
                    .entries()
                    .position(|x| x.id == id)
                    .zip(now)
                    .ok_or_else(|| NodeError::Regions(format!("region {id} vanished from the table")))?;
                self.memory
                    .cas(Header::key_offset(i) as usize, u64::from(old), u64::from(key));
                self.regions.rekey(id, key);
                if self.memory.is_file_backed() {
                    self.memory
                        .flush(0, PAGE_BYTES as usize)
                        .map_err(|e| NodeError::Map(e, PAGE_BYTES))?;
                }
                return Ok(true);
            }
            return Err(NodeError::Regions(format!(
                "region {id} is held here with {} bytes and another key; the map asks for {size} bytes",
                e.size
            )));
        }
        validate(&[RegionSpec { id, size }])?;
        let all: Vec<RegionEntry> = self.regions.entries().copied().collect();
        if all.len() >= REGIONS_PER_NODE_MAX {
            return Err(NodeError::Regions(format!(
                "memory node {} has {REGIONS_PER_NODE_MAX} region entries already (retired ones count \
                 until it restarts)",
                self.node
            )));
        }
        // After every entry while there is room, so that a retired
        // region's bytes stay its own for as long as they can (it may be
        // placed here again); else the first gap the held regions leave.
        let image_bytes = self.memory.len() as u64;
        let held = self.held();
        let after_all = Header::next_free(&all);
        let image_offset = match after_all.checked_add(size).filter(|&end| end <= image_bytes) {
            Some(_) => after_all,
            None => Header::first_fit(&held, size, image_bytes).ok_or_else(|| {
                let used: u64 = held.iter().map(|h| h.size.div_ceil(PAGE_BYTES) * PAGE_BYTES).sum();
                NodeError::Regions(format!(
                    "memory node {} has no {size} contiguous bytes free for region {id} ({} of {} bytes held)",
                    self.node,
                    used,
                    image_bytes.saturating_sub(PAGE_BYTES)
                ))
            })?,
        };
        // A retired region's bytes hold what it held: a new region starts
        // zeroed, as one on never-used bytes does.
        if image_offset < after_all {
            self.zero(image_offset, size);
        }
        let entry = RegionEntry {
            id,
            image_offset,
            size,
            key,
        };
        let i = all.len();
        self.memory
            .write(Header::entry_offset(i) as usize, &Header::encode_entry(&entry));
        let seen = self
            .memory
            .cas(REGION_COUNT_OFFSET as usize, i as u64, i as u64 + 1);
        assert_eq!(seen, i as u64, "another process appended to this node's image");
        self.regions.push(entry);
        if self.memory.is_file_backed() {
            self.memory
                .flush(0, PAGE_BYTES as usize)
                .map_err(|e| NodeError::Map(e, PAGE_BYTES))?;
        }
        Ok(true)
    }

    /// Stops serving region `id`: it is re-keyed with a random key nobody
    /// holds (every verb to it is refused) and its entry marked retired
    /// ([`GENERATION_RETIRED`]: not proven, and its bytes free for a region
    /// placed later, `crate::image`). What a node does with a replica its
    /// image does not hold at the generation the control plane names, or
    /// one the map no longer places here: placed here again, it is
    /// re-keyed and refilled. `false` if it is not held.
    pub fn retire_region(&self, id: RegionId) -> Result<bool, NodeError> {
        let _append = self.append.lock().unwrap_or_else(|p| p.into_inner());
        let Some(((i, _), old)) = self
            .regions
            .entries()
            .enumerate()
            .find(|(_, e)| e.id == id)
            .zip(self.regions.find_keyed(id).map(|(_, k)| k))
        else {
            return Ok(false);
        };
        let mut key: AccessKey = rand::random();
        while key == old {
            key = rand::random();
        }
        self.memory
            .cas(Header::key_offset(i) as usize, u64::from(old), u64::from(key));
        self.regions.rekey(id, key);
        // After the re-key: no verb reaches the bytes once they are free.
        self.memory.write(
            Header::generation_offset(i) as usize,
            &GENERATION_RETIRED.to_le_bytes(),
        );
        drop(_append);
        if self.memory.is_file_backed() {
            self.memory
                .flush(0, PAGE_BYTES as usize)
                .map_err(|e| NodeError::Map(e, PAGE_BYTES))?;
        }
        Ok(true)
    }

    /// Whether region `id`'s entry is retired (its bytes free).
    pub fn is_retired(&self, id: RegionId) -> bool {
        self.regions
            .entries()
            .position(|e| e.id == id)
            .is_some_and(|i| self.memory.load(Header::generation_offset(i) as usize) == GENERATION_RETIRED)
    }

    /// The entries not retired: the regions whose bytes are taken.
    fn held(&self) -> Vec<RegionEntry> {
        self.regions
            .entries()
            .enumerate()
            .filter(|(i, _)| self.memory.load(Header::generation_offset(*i) as usize) != GENERATION_RETIRED)
            .map(|(_, e)| *e)
            .collect()
    }

    /// Zeroes `size` bytes of the image at `offset`, a word at a time.
    fn zero(&self, offset: u64, size: u64) {
        const STRIDE: usize = 1 << 20;
        let zeros = vec![0u8; STRIDE];
        let (mut at, end) = (offset as usize, (offset + size) as usize);
        while at < end {
            let n = STRIDE.min(end - at);
            self.memory.write(at, &zeros[..n]);
            at += n;
        }
    }

    /// Brings this process's region table up to the image's: an attached
    /// image (an `shm` client's) learns the regions its node took since.
    /// Entries that do not fit the image are ignored (and logged): verbs to
    /// them are refused as unknown regions.
    pub(super) fn refresh(&self) {
        let count = self.memory.load(REGION_COUNT_OFFSET as usize) as usize;
        // Keys first: an entry's key word is the one word that changes.
        for (i, e) in self.regions.entries().enumerate() {
            let key = self.memory.load(Header::key_offset(i) as usize);
            if let Ok(key) = AccessKey::try_from(key) {
                self.regions.rekey(e.id, key);
            }
        }
        if count <= self.regions.len() {
            return;
        }
        let _append = self.append.lock().unwrap_or_else(|p| p.into_inner());
        let image_bytes = self.memory.len() as u64;
        for i in self.regions.len()..count.min(REGIONS_PER_NODE_MAX) {
            let mut words = [0u8; Header::ENTRY_BYTES];
            self.memory.read(Header::entry_offset(i) as usize, &mut words);
            let w = |k: usize| crate::le_word(&words, k * 8);
            let held: Vec<RegionEntry> = self.regions.entries().copied().collect();
            let key_word = Header::ENTRY_BYTES / 8 - 1;
            let (Ok(id), Ok(key)) = (RegionId::try_from(w(0)), AccessKey::try_from(w(key_word))) else {
                tracing::warn!(
                    node = self.node,
                    entry = i,
                    "region entry out of range in the image"
                );
                return;
            };
            let entry = RegionEntry {
                id,
                image_offset: w(1),
                size: w(2),
                key,
            };
            // Held regions never overlap; a retired one's bytes may be the
            // new entry's (`crate::image`).
            let taken = held
                .iter()
                .enumerate()
                .filter(|(j, _)| {
                    self.memory.load(Header::generation_offset(*j) as usize) != GENERATION_RETIRED
                })
                .any(|(_, h)| Header::overlap(h, &entry));
            let fits = !taken
                && entry.image_offset >= PAGE_BYTES
                && entry.image_offset % PAGE_BYTES == 0
                && (REGION_BYTES_MIN..=REGION_BYTES_MAX).contains(&entry.size)
                && entry.size % ATOMIC_BYTES == 0
                && entry
                    .image_offset
                    .checked_add(entry.size)
                    .is_some_and(|end| end <= image_bytes)
                && held.iter().all(|e| e.id != id);
            if !fits {
                tracing::warn!(node = self.node, entry = i, "region entry does not fit the image");
                return;
            }
            self.regions.push(entry);
        }
    }

    /// The identity of the image this node serves from (`crate::image`).
    pub fn image_id(&self) -> ImageId {
        self.image
    }

    /// The replica generation this image holds region `id` at: the
    /// generation the control plane named when the node last proved the
    /// region here, 0 while it was allocated and not yet proven or once it
    /// was retired ([`MemoryNode::is_retired`]). `None` when the image
    /// holds no such region.
    pub fn replica_generation(&self, id: RegionId) -> Option<u64> {
        let i = self.regions.entries().position(|e| e.id == id)?;
        let g = self.memory.load(Header::generation_offset(i) as usize);
        Some(if g == GENERATION_RETIRED { 0 } else { g })
    }

    /// Records in the image that it holds region `id` at replica generation
    /// `generation` (flushed to a file-backed image before it returns, so a
    /// restart never finds a generation newer than its contents' record).
    /// `false` when the image holds no such region.
    pub fn set_replica_generation(&self, id: RegionId, generation: u64) -> Result<bool, NodeError> {
        let Some(i) = self.regions.entries().position(|e| e.id == id) else {
            return Ok(false);
        };
        let at = Header::generation_offset(i) as usize;
        let mut now = self.memory.load(at);
        loop {
            let seen = self.memory.cas(at, now, generation);
            if seen == now {
                break;
            }
            now = seen;
        }
        if self.memory.is_file_backed() {
            self.memory
                .flush(0, PAGE_BYTES as usize)
                .map_err(|e| NodeError::Map(e, PAGE_BYTES))?;
        }
        Ok(true)
    }
}
