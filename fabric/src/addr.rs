//! Addresses in disaggregated memory.
//!
//! A [`GlobalAddr`] names a byte inside a region, independent of which memory
//! node currently holds which replica of that region: routing happens late, in
//! the [`ClusterMap`](crate::ClusterMap), so that addresses stored inside DM stay
//! valid across promotions.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifies a region. Regions are replicated with an identical layout on
/// `1 + f` memory nodes.
pub type RegionId = u16;

/// Identifies a memory node in the cluster map.
pub type NodeId = u16;

/// The cluster map's version. Frames carry the client's epoch; a memory node
/// whose epoch is newer rejects them (fencing).
pub type Epoch = u64;

/// The access key a memory node checks on every verb (an RDMA `rkey`).
pub type AccessKey = u32;

/// Bits of a [`GlobalAddr`] given to the offset inside the region.
pub const OFFSET_BITS: u32 = 48;
/// Largest offset a [`GlobalAddr`] can carry.
pub const OFFSET_MAX: u64 = (1 << OFFSET_BITS) - 1;
/// CAS and FAA operate on words of this many bytes, aligned to this many bytes.
pub const ATOMIC_BYTES: u64 = 8;

/// A 64-bit address in DM: `region: u16 | offset: u48` (region in the high bits).
///
/// The null address (all zero) is region 0, offset 0; layouts reserve that
/// word for a header so that `GlobalAddr::NULL` never names live data.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GlobalAddr(u64);

impl GlobalAddr {
    /// Region 0, offset 0: by convention never the address of an object.
    pub const NULL: GlobalAddr = GlobalAddr(0);

    /// Builds an address.
    ///
    /// # Panics
    /// If `offset` does not fit in 48 bits: addresses are built by code that
    /// knows its region's size, so an overflow is a bug, not input.
    pub const fn new(region: RegionId, offset: u64) -> Self {
        assert!(offset <= OFFSET_MAX, "offset does not fit in 48 bits");
        GlobalAddr(((region as u64) << OFFSET_BITS) | offset)
    }

    /// Reinterprets a raw 64-bit word (for example one read from DM).
    pub const fn from_raw(raw: u64) -> Self {
        GlobalAddr(raw)
    }

    /// The raw 64-bit encoding, suitable for storing in DM.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The region part.
    pub const fn region(self) -> RegionId {
        (self.0 >> OFFSET_BITS) as RegionId
    }

    /// The byte offset inside the region.
    pub const fn offset(self) -> u64 {
        self.0 & OFFSET_MAX
    }

    /// The address `bytes` further into the same region.
    ///
    /// # Panics
    /// If the result leaves the 48-bit offset space.
    pub const fn add(self, bytes: u64) -> Self {
        GlobalAddr::new(self.region(), self.offset() + bytes)
    }

    /// True when the address is aligned for CAS and FAA.
    pub const fn is_atomic_aligned(self) -> bool {
        self.offset() % ATOMIC_BYTES == 0
    }
}

impl fmt::Debug for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{:#x}", self.region(), self.offset())
    }
}

impl fmt::Display for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Which replica(s) of a region a verb is aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Replica {
    /// The primary (first in the region's replica list).
    #[default]
    Primary,
    /// The `i`-th backup (0-based, in replica-list order after the primary).
    Backup(u8),
    /// Every replica, primary first; the verb becomes one verb per replica.
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_puts_region_in_the_high_16_bits() {
        let a = GlobalAddr::new(0xBEEF, 0x0000_1234_5678_9ABC);
        assert_eq!(a.raw(), 0xBEEF_1234_5678_9ABC);
        assert_eq!(a.region(), 0xBEEF);
        assert_eq!(a.offset(), 0x1234_5678_9ABC);
        assert_eq!(GlobalAddr::from_raw(a.raw()), a);
    }

    #[test]
    fn extremes_round_trip() {
        let a = GlobalAddr::new(u16::MAX, OFFSET_MAX);
        assert_eq!(a.raw(), u64::MAX);
        assert_eq!((a.region(), a.offset()), (u16::MAX, OFFSET_MAX));
        assert_eq!(GlobalAddr::NULL.raw(), 0);
        assert_eq!(GlobalAddr::new(1, 8).add(16), GlobalAddr::new(1, 24));
    }

    #[test]
    #[should_panic(expected = "48 bits")]
    fn offset_overflow_is_a_bug() {
        let _ = GlobalAddr::new(0, OFFSET_MAX + 1);
    }

    #[test]
    fn alignment() {
        assert!(GlobalAddr::new(3, 64).is_atomic_aligned());
        assert!(!GlobalAddr::new(3, 65).is_atomic_aligned());
    }
}
