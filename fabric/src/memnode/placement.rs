//! A live image's region table: regions the control plane places on a
//! node while it serves (appended, re-keyed when placed again, retired when
//! not proven) and the replica generation each is held at (design.md §1b).
//! The verb path only reads what this module writes.

use crate::addr::{AccessKey, RegionId, ATOMIC_BYTES};
use crate::error::NodeError;
use crate::image::{
    Header, ImageId, RegionEntry, PAGE_BYTES, REGIONS_PER_NODE_MAX, REGION_BYTES_MAX, REGION_BYTES_MIN,
    REGION_COUNT_OFFSET,
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
        let held: Vec<RegionEntry> = self.regions.entries().copied().collect();
        if held.len() >= REGIONS_PER_NODE_MAX {
            return Err(NodeError::Regions(format!(
                "memory node {} holds {REGIONS_PER_NODE_MAX} regions already",
                self.node
            )));
        }
        let image_offset = Header::next_free(&held);
        let image_bytes = self.memory.len() as u64;
        if image_offset.checked_add(size).is_none_or(|end| end > image_bytes) {
            return Err(NodeError::Regions(format!(
                "memory node {} has {} bytes free, region {id} needs {size}",
                self.node,
                image_bytes.saturating_sub(image_offset)
            )));
        }
        let entry = RegionEntry {
            id,
            image_offset,
            size,
            key,
        };
        let i = held.len();
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
    /// holds (every verb to it is refused) and its replica generation set
    /// to 0 (not proven). What a node does with a replica its image does
    /// not hold at the generation the control plane names: placed here
    /// again, it is re-keyed and refilled. `false` if it is not held.
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
        drop(_append);
        self.set_replica_generation(id, 0)?;
        Ok(true)
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
            let w = |k: usize| u64::from_le_bytes(words[k * 8..k * 8 + 8].try_into().unwrap_or_default());
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
            let fits = entry.image_offset >= Header::next_free(&held)
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
    /// region here, 0 while it was allocated and not yet proven. `None`
    /// when the image holds no such region.
    pub fn replica_generation(&self, id: RegionId) -> Option<u64> {
        let i = self.regions.entries().position(|e| e.id == id)?;
        Some(self.memory.load(Header::generation_offset(i) as usize))
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
