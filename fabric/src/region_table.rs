//! A memory node's regions as a table that only grows: the fixed regions of
//! `--region` flags, or the regions the control plane places on the node
//! while it serves.
//!
//! Every verb looks its region up here, so a lookup takes no lock: entries
//! are written once ([`OnceLock`]) and published by a release store of the
//! length, which readers load with acquire. Appends are serialised by the
//! node. A region is never removed while the node runs (a backup dropped
//! from a region keeps its memory until the node restarts): so an entry a
//! reader found stays valid for as long as it holds the table.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::addr::{AccessKey, RegionId};
use crate::image::{RegionEntry, REGIONS_PER_NODE_MAX};

/// Up to [`REGIONS_PER_NODE_MAX`] entries, appended, never changed.
#[derive(Debug)]
pub(crate) struct RegionTable {
    slots: Box<[OnceLock<RegionEntry>]>,
    /// The key each region is reached with now. It starts as the entry's
    /// and changes when the region is placed on the node again after the
    /// node lost its replica ([`RegionTable::rekey`]): the only change an
    /// entry ever sees.
    keys: Box<[AtomicU32]>,
    len: AtomicUsize,
}

impl RegionTable {
    /// A table holding `entries`, in image order.
    ///
    /// # Panics
    /// On more than [`REGIONS_PER_NODE_MAX`] entries (headers are decoded
    /// and regions validated against that bound first).
    pub(crate) fn new(entries: &[RegionEntry]) -> RegionTable {
        assert!(entries.len() <= REGIONS_PER_NODE_MAX);
        let table = RegionTable {
            slots: (0..REGIONS_PER_NODE_MAX).map(|_| OnceLock::new()).collect(),
            keys: (0..REGIONS_PER_NODE_MAX).map(|_| AtomicU32::new(0)).collect(),
            len: AtomicUsize::new(0),
        };
        for &e in entries {
            table.push(e);
        }
        table
    }

    /// The entry of region `id`, if published.
    pub(crate) fn find(&self, id: RegionId) -> Option<&RegionEntry> {
        self.entries().find(|e| e.id == id)
    }

    /// The entry of region `id` with the key it is reached with now.
    pub(crate) fn find_keyed(&self, id: RegionId) -> Option<(&RegionEntry, AccessKey)> {
        let (i, e) = self.entries().enumerate().find(|(_, e)| e.id == id)?;
        Some((e, self.keys[i].load(Ordering::Acquire)))
    }

    /// Region `id` is reached with `key` from now on; `false` if it is not
    /// in the table.
    pub(crate) fn rekey(&self, id: RegionId, key: AccessKey) -> bool {
        match self.entries().position(|e| e.id == id) {
            Some(i) => {
                self.keys[i].store(key, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// The published entries, in image order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &RegionEntry> {
        let len = self.len.load(Ordering::Acquire);
        self.slots[..len].iter().filter_map(OnceLock::get)
    }

    /// How many entries are published.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Publishes `entry` after the last one. Callers serialise appends (the
    /// node holds its append lock) and check the bound first.
    ///
    /// # Panics
    /// If the table is full or an append raced this one: both are bugs of
    /// the caller.
    pub(crate) fn push(&self, entry: RegionEntry) {
        let at = self.len.load(Ordering::Acquire);
        assert!(at < REGIONS_PER_NODE_MAX, "region table full");
        self.keys[at].store(entry.key, Ordering::Release);
        assert!(self.slots[at].set(entry).is_ok(), "concurrent region appends");
        self.len.store(at + 1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: RegionId, at: u64) -> RegionEntry {
        RegionEntry {
            id,
            image_offset: at,
            size: 4096,
            key: 7,
        }
    }

    #[test]
    fn entries_are_found_once_published_and_in_order() {
        let t = RegionTable::new(&[entry(1, 4096)]);
        assert_eq!(t.find(1).map(|e| e.image_offset), Some(4096));
        assert!(t.find(2).is_none());
        t.push(entry(2, 8192));
        assert_eq!(t.len(), 2);
        assert_eq!(t.entries().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    #[should_panic(expected = "region table full")]
    fn the_table_is_bounded() {
        let t = RegionTable::new(&[]);
        for i in 0..=REGIONS_PER_NODE_MAX as u64 {
            t.push(entry(i as RegionId, 4096 * (i + 1)));
        }
    }
}
