//! RACE hashing's bit layouts and hash functions: the one definition of
//! every word the table keeps in DM.
//!
//! ```text
//! slot            fingerprint: 8 (63..56) | kv_len: 8 (55..48) | ptr: 48 (47..0)
//!                 0 = empty; a full slot has ptr != 0. kv_len is the KV
//!                 block's length in words.
//! bucket header   locked: 1 (63) | owner: 15 (62..48) | local_depth: 8 (47..40)
//!                 | suffix: 40 (39..0)
//! bucket          64 bytes: the header, then SLOTS_PER_BUCKET slots
//! KV block        key, value, check = kv_check(key, value): 3 words, written
//!                 once before a slot publishes it, never changed or reused;
//!                 the check is odd, so a written block ends in a nonzero
//!                 word (a sealed block, `txn::BlockAllocator::sealed`)
//! subtable        `groups` bucket groups of three buckets [main, overflow,
//!                 main]; main bucket i sits at i/2*3 + 2*(i&1), and its
//!                 combined bucket (main + the group's overflow, 128 bytes,
//!                 read in one READ) starts at i/2*3 + (i&1)
//! directory       2^dir_depth words, each a subtable ref; entry i names the
//!                 subtable whose (local_depth, suffix) covers suffix i
//! ```
//!
//! A key is placed by three hashes of it: `dir_hash` picks the subtable (its
//! low bits are the suffix) and gives the fingerprint (its high byte);
//! `bucket_hash(key, 0)` and `bucket_hash(key, 1)` pick the two candidate
//! main buckets inside the subtable. A subtable covers the keys whose suffix
//! ends in its `suffix` over `local_depth` bits; every bucket header carries
//! that pair, so a client that followed a stale directory entry finds out
//! from the buckets it read anyway.

/// Bytes per bucket: one cache line, as in FUSEE.
pub const BUCKET_BYTES: u64 = 64;
/// Slots per bucket: a bucket is a header word and seven slots.
pub const SLOTS_PER_BUCKET: usize = 7;
/// Buckets per group: `[main, overflow, main]`.
pub const BUCKETS_PER_GROUP: u64 = 3;
/// Bytes of a combined bucket (main + overflow), read in one READ.
pub const COMBINED_BYTES: u32 = 2 * BUCKET_BYTES as u32;
/// Bytes of a KV block: key, value, check.
pub const KV_BYTES: u32 = 24;
/// Bytes of a KV block's key: its first word, what a split READs.
pub const KEY_BYTES: u32 = 8;
/// A KV block's length in words, as a slot's `kv_len` records it.
pub const KV_WORDS: u64 = KV_BYTES as u64 / 8;
/// Largest directory depth: 2^16 entries are a 512 KiB directory, still one
/// READ (a verb carries at most 1 MiB) and one rTX object.
pub const DIR_DEPTH_MAX: u8 = 16;
/// Largest subtable, in groups: 2^10 groups are 192 KiB, so that an rTX
/// rehash's commit batch (two subtables and the largest directory) stays
/// within a batch's 1 MiB.
pub const GROUPS_MAX: u32 = 1 << 10;

use crate::mix::fmix;
use fabric::le_word;

const PTR_MASK: u64 = (1 << 48) - 1;
const SUFFIX_BITS: u32 = 40;
const SUFFIX_MASK: u64 = (1 << SUFFIX_BITS) - 1;
const LOCKED_BIT: u64 = 1 << 63;
const OWNER_MASK: u64 = (1 << 15) - 1;

/// The hash that picks a key's subtable (low bits) and fingerprint (high byte).
pub fn dir_hash(key: u64) -> u64 {
    fmix(key ^ 0x5241_4345_6469_7221)
}

/// The hash that picks a key's candidate main bucket `which` (0 or 1).
pub fn bucket_hash(key: u64, which: usize) -> u64 {
    const SEEDS: [u64; 2] = [0x6b69_6e74_7375_6731, 0x2d72_6163_652d_6832];
    fmix(key ^ SEEDS[which & 1])
}

/// A key's fingerprint: the high byte of its directory hash.
pub fn fingerprint(key: u64) -> u8 {
    (dir_hash(key) >> 56) as u8
}

/// The check word of a KV block: tells a real block from anything else a
/// wrong pointer could land on.
pub fn kv_check(key: u64, value: u64) -> u64 {
    fmix(key ^ fmix(value ^ 0x6b76_2d62_6c6f_636b)) | 1
}

/// Encodes a KV block.
pub fn encode_kv(key: u64, value: u64) -> [u8; KV_BYTES as usize] {
    let mut b = [0u8; KV_BYTES as usize];
    b[0..8].copy_from_slice(&key.to_le_bytes());
    b[8..16].copy_from_slice(&value.to_le_bytes());
    b[16..24].copy_from_slice(&kv_check(key, value).to_le_bytes());
    b
}

/// Decodes a KV block: `(key, value)`, or `None` if its check fails.
pub fn decode_kv(b: &[u8]) -> Option<(u64, u64)> {
    if b.len() < KV_BYTES as usize {
        return None;
    }
    let (key, value, check) = (le_word(b, 0), le_word(b, 8), le_word(b, 16));
    (check == kv_check(key, value)).then_some((key, value))
}

/// A slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Slot(pub u64);

impl Slot {
    /// The empty slot.
    pub const EMPTY: Slot = Slot(0);

    /// A slot naming the KV block at region offset `ptr` for a key with
    /// fingerprint `fp`.
    pub fn new(fp: u8, ptr: u64) -> Slot {
        assert!(
            ptr != 0 && ptr <= PTR_MASK,
            "KV pointer {ptr:#x} does not fit a slot"
        );
        Slot(u64::from(fp) << 56 | KV_WORDS << 48 | ptr)
    }

    /// Whether the slot is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The fingerprint.
    pub fn fingerprint(self) -> u8 {
        (self.0 >> 56) as u8
    }

    /// The KV block's length in words.
    pub fn kv_len(self) -> u64 {
        (self.0 >> 48) & 0xff
    }

    /// The KV block's region offset.
    pub fn ptr(self) -> u64 {
        self.0 & PTR_MASK
    }
}

/// A bucket header word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Header(pub u64);

impl Header {
    /// An unlocked header of a subtable with this depth and suffix.
    pub fn new(local_depth: u8, suffix: u64) -> Header {
        assert!(
            local_depth <= DIR_DEPTH_MAX,
            "local depth {local_depth} above the maximum"
        );
        assert!(
            suffix < 1u64 << local_depth,
            "suffix {suffix:#x} has more than {local_depth} bits"
        );
        Header(u64::from(local_depth) << SUFFIX_BITS | suffix)
    }

    /// The same header locked by `owner` (optimal's resize lock).
    pub fn locked_by(self, owner: u16) -> Header {
        Header(LOCKED_BIT | (u64::from(owner) & OWNER_MASK) << 48 | (self.0 & ((1 << 48) - 1)))
    }

    /// The same header unlocked.
    pub fn unlocked(self) -> Header {
        Header(self.0 & ((1 << 48) - 1))
    }

    /// Whether a resize holds the bucket.
    pub fn is_locked(self) -> bool {
        self.0 & LOCKED_BIT != 0
    }

    /// The owner id of the resize holding the bucket.
    pub fn owner(self) -> u16 {
        ((self.0 >> 48) & OWNER_MASK) as u16
    }

    /// The subtable's local depth.
    pub fn local_depth(self) -> u8 {
        ((self.0 >> SUFFIX_BITS) & 0xff) as u8
    }

    /// The subtable's suffix.
    pub fn suffix(self) -> u64 {
        self.0 & SUFFIX_MASK
    }

    /// Whether the subtable covers keys whose directory hash is `h`.
    pub fn covers(self, h: u64) -> bool {
        h & ((1u64 << self.local_depth()) - 1) == self.suffix()
    }
}

/// The shape of a subtable: how many groups it has. Every subtable of a
/// table has the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bucket groups per subtable.
    pub groups: u32,
}

impl Geometry {
    /// Main buckets (two per group).
    pub fn main_buckets(self) -> u64 {
        2 * u64::from(self.groups)
    }

    /// Buckets (three per group).
    pub fn buckets(self) -> u64 {
        BUCKETS_PER_GROUP * u64::from(self.groups)
    }

    /// Bytes of one subtable.
    pub fn subtable_bytes(self) -> u64 {
        self.buckets() * BUCKET_BYTES
    }

    /// Slots of one subtable.
    pub fn slots(self) -> u64 {
        self.buckets() * SLOTS_PER_BUCKET as u64
    }

    /// Key `key`'s candidate main bucket `which`.
    pub fn main_bucket(self, key: u64, which: usize) -> u64 {
        bucket_hash(key, which) % self.main_buckets()
    }

    /// The first bucket of main bucket `main`'s combined bucket.
    pub fn combined_start(self, main: u64) -> u64 {
        main / 2 * BUCKETS_PER_GROUP + (main & 1)
    }

    /// Byte offset, inside a subtable, of bucket `bucket`'s slot `slot`.
    pub fn slot_offset(bucket: u64, slot: usize) -> u64 {
        bucket * BUCKET_BYTES + 8 * (1 + slot as u64)
    }

    /// An empty subtable's bytes, every header `header`.
    pub fn empty_subtable(self, header: Header) -> Vec<u8> {
        let mut b = vec![0u8; self.subtable_bytes() as usize];
        for i in 0..self.buckets() as usize {
            let at = i * BUCKET_BYTES as usize;
            b[at..at + 8].copy_from_slice(&header.0.to_le_bytes());
        }
        b
    }
}

/// The directory entries a subtable of `(local_depth, suffix)` covers.
pub fn dir_entries(dir_depth: u8, local_depth: u8, suffix: u64) -> impl Iterator<Item = u64> {
    let step = 1u64 << local_depth;
    (0..1u64 << (dir_depth - local_depth)).map(move |i| suffix + i * step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_fields_round_trip_and_empty_is_zero() {
        let s = Slot::new(0xab, 0x0000_1234_5678_9ab8);
        assert_eq!(s.0, 0xab03_1234_5678_9ab8);
        assert_eq!(
            (s.fingerprint(), s.kv_len(), s.ptr()),
            (0xab, KV_WORDS, 0x1234_5678_9ab8)
        );
        assert!(!s.is_empty());
        assert!(Slot::EMPTY.is_empty());
        assert_eq!(Slot::new(0, 8).0, 3 << 48 | 8);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_null_kv_pointer_is_not_a_slot() {
        Slot::new(1, 0);
    }

    #[test]
    fn header_fields_round_trip() {
        let h = Header::new(5, 0b10110);
        assert_eq!(h.0, 5 << 40 | 0b10110);
        assert!(!h.is_locked());
        let l = h.locked_by(0x7abc);
        assert_eq!(l.0, 1 << 63 | 0x7abc << 48 | 5 << 40 | 0b10110);
        assert!(l.is_locked());
        assert_eq!((l.owner(), l.local_depth(), l.suffix()), (0x7abc, 5, 0b10110));
        assert_eq!(l.unlocked(), h);
        assert!(h.covers(0xffff_ff00 | 0b10110));
        assert!(!h.covers(0b00110));
        assert!(Header::new(0, 0).covers(u64::MAX));
    }

    #[test]
    fn kv_blocks_round_trip_and_garbage_fails() {
        let b = encode_kv(42, 7);
        assert_eq!(decode_kv(&b), Some((42, 7)));
        assert_eq!(le_word(&b, 0), 42);
        assert_eq!(decode_kv(&[0u8; 24]), None);
        let mut torn = b;
        torn[8] ^= 1;
        assert_eq!(decode_kv(&torn), None);
    }

    #[test]
    fn a_written_kv_block_ends_in_a_nonzero_word() {
        // What makes KV blocks sealed: the next holder of an owner id
        // carves its chunk past the last nonzero word.
        for (k, v) in [(0, 0), (0, u64::MAX), (u64::MAX, 0), (42, 7)] {
            assert_ne!(le_word(&encode_kv(k, v), 16), 0);
        }
    }

    #[test]
    fn groups_are_main_overflow_main() {
        let g = Geometry { groups: 4 };
        assert_eq!((g.main_buckets(), g.buckets(), g.subtable_bytes()), (8, 12, 768));
        // Main buckets 0 and 1 share overflow bucket 1 of group 0.
        assert_eq!(g.combined_start(0), 0);
        assert_eq!(g.combined_start(1), 1);
        assert_eq!(g.combined_start(2), 3);
        assert_eq!(g.combined_start(3), 4);
        assert_eq!(g.combined_start(7), 10);
        assert_eq!(Geometry::slot_offset(1, 0), 72);
        let e = g.empty_subtable(Header::new(1, 1));
        assert_eq!(le_word(&e, 64), Header::new(1, 1).0);
        assert_eq!(le_word(&e, 72), 0);
    }

    #[test]
    fn a_subtable_covers_every_entry_of_its_suffix() {
        let e: Vec<u64> = dir_entries(3, 1, 1).collect();
        assert_eq!(e, vec![1, 3, 5, 7]);
        let all: Vec<u64> = dir_entries(2, 0, 0).collect();
        assert_eq!(all, vec![0, 1, 2, 3]);
        assert_eq!(dir_entries(4, 4, 9).collect::<Vec<_>>(), vec![9]);
    }
}
