//! A DTX record's layout: two header words, then the data inline.
//!
//! ```text
//! R + 0   lock      0: free | LockWord::locked(owner, lease): held       primary only
//! R + 8   version   LockWord::unlocked(v): visible at v                   every replica
//!                   LockWord::locked(owner, lease): being written by that lock's holder
//! R + 16  data      `len` bytes                                           every replica
//! ```
//!
//! Both header words reuse [`LockWord`]: no new bit layout. The lock word is
//! FORD's: a constant "free" (0) lets a lock be taken blind, by a CAS from 0
//! in the same batch as the READ of the record (hitchhiking). Lock words
//! live on the primary only, as rTX's do (a promotion rebuilds them). The
//! version is replicated: a record's data changes in place only while its
//! version word is invisible (the writer's lock word), and becomes visible
//! again only at a higher version, so a reader that sees the same visible
//! version before and after its data read has read committed data.

use fabric::GlobalAddr;

use crate::word::LockWord;

/// Bytes of a record's header: the lock word and the version word.
pub const HEADER_BYTES: u64 = 16;
/// Offset of the lock word in a record.
pub const LOCK_OFFSET: u64 = 0;
/// Offset of the version word in a record.
pub const VERSION_OFFSET: u64 = 8;
/// Offset of the data in a record.
pub const DATA_OFFSET: u64 = HEADER_BYTES;
/// The lock word of a free record: FORD's blind lock CAS expects it.
pub const FREE: u64 = 0;
/// Records are 16-byte aligned, so that both header words are aligned for
/// the atomics and the data for 8-byte fields.
pub const RECORD_ALIGN: u64 = 16;

/// Where a record is and how much data it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// The record's first byte (its lock word).
    pub addr: GlobalAddr,
    /// Data bytes after the header.
    pub len: u32,
}

impl Record {
    /// The record at `addr` holding `len` data bytes.
    ///
    /// # Panics
    /// If `addr` is not [`RECORD_ALIGN`]-aligned: records are placed by
    /// this crate's allocator, so a misaligned one is a bug, not input.
    pub fn new(addr: GlobalAddr, len: u32) -> Self {
        assert_eq!(
            addr.offset() % RECORD_ALIGN,
            0,
            "record {addr:?} is not 16-byte aligned"
        );
        Record { addr, len }
    }

    /// The lock word's address (the primary's is the one that counts).
    pub fn lock_addr(self) -> GlobalAddr {
        self.addr.add(LOCK_OFFSET)
    }

    /// The version word's address.
    pub fn version_addr(self) -> GlobalAddr {
        self.addr.add(VERSION_OFFSET)
    }

    /// The data's address.
    pub fn data_addr(self) -> GlobalAddr {
        self.addr.add(DATA_OFFSET)
    }

    /// Bytes the whole record takes: header and data.
    pub fn bytes(self) -> u64 {
        HEADER_BYTES + u64::from(self.len)
    }
}

/// A record's version word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Committed data, at this version.
    Visible(u64),
    /// Being written in place by the holder of this lock word.
    Invisible(LockWord),
}

impl Version {
    /// From a word read from DM.
    pub fn from_raw(raw: u64) -> Self {
        let w = LockWord::from_raw(raw);
        if w.is_locked() {
            Version::Invisible(w)
        } else {
            Version::Visible(w.version())
        }
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        match self {
            Version::Visible(v) => LockWord::unlocked(v).raw(),
            Version::Invisible(l) => {
                assert!(l.is_locked(), "an invisible version names a held lock word");
                l.raw()
            }
        }
    }
}

/// A header as written when a record is created: free, visible at
/// `version`.
pub fn created_header(version: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[..8].copy_from_slice(&FREE.to_le_bytes());
    h[8..].copy_from_slice(&Version::Visible(version).raw().to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_is_bit_exact() {
        let r = Record::new(GlobalAddr::new(3, 0x1000), 1024);
        assert_eq!(r.lock_addr(), GlobalAddr::new(3, 0x1000));
        assert_eq!(r.version_addr(), GlobalAddr::new(3, 0x1008));
        assert_eq!(r.data_addr(), GlobalAddr::new(3, 0x1010));
        assert_eq!(r.bytes(), 1040);
        // Free is the unlocked word at version 0: a blind CAS expects 0.
        assert_eq!(FREE, LockWord::unlocked(0).raw());
        let h = created_header(7);
        assert_eq!(h[..8], [0; 8]);
        assert_eq!(u64::from_le_bytes(h[8..].try_into().unwrap()), 7);
    }

    #[test]
    #[should_panic(expected = "not 16-byte aligned")]
    fn a_misaligned_record_is_a_bug() {
        Record::new(GlobalAddr::new(1, 8), 8);
    }

    #[test]
    fn version_words_round_trip() {
        let held = LockWord::locked(9, 0xABCDEF);
        for v in [
            Version::Visible(0),
            Version::Visible(crate::word::VERSION_MAX),
            Version::Invisible(held),
        ] {
            assert_eq!(Version::from_raw(v.raw()), v);
        }
        assert_eq!(Version::Visible(5).raw(), 5);
        assert_eq!(Version::Invisible(held).raw(), held.raw());
        assert_eq!(
            Version::from_raw(1 << 63 | 0x1234),
            Version::Invisible(LockWord::from_raw(1 << 63 | 0x1234))
        );
    }
}
