//! A DTX log: one per transaction, in half of its owner's log slot.
//!
//! The owner's slot (`crate::log::LOG_SLOT_BYTES`, one per owner id, found
//! by recovery from the owner ids as rTX's are) is split into two halves
//! used in turn, so that a transaction's release, sent in the background
//! with the next transaction's first batch, never shares a half with that
//! transaction's log.
//!
//! ```text
//! word 0     header    LogHeader: LOCKING | COMMITTED | DONE | ABORT, tick = the lock word's lease tick
//! word 1     checksum  the lock word L the transaction locks with (owner | lease)
//! word 2     count     entries
//! word 3+4i  record    GlobalAddr of the record
//! word 4+4i  len       its data bytes
//! word 5+4i  undo      GlobalAddr of its undo image (version word + data), 0 before it is written
//! word 6+4i  adopted   0, or the lock word of a dead transaction whose lock this one took over
//! ```
//!
//! A LOCKING log names every record the transaction may have locked before
//! it takes the lock (the log write precedes the CAS on the primary, in one
//! batch). COMMITTED is written on each replica after that replica's undo
//! images, invisible marks and data: a transaction is committed when every
//! replica holds COMMITTED (or DONE) with its checksum, and aborted
//! otherwise. As with rTX's logs, every lock word an owner uses is unique
//! (`crate::lease`), so a checksum names one transaction.
//!
//! Only recovery writes DONE (a committed log it finished) and ABORT (an
//! uncommitted one it rolled back): the owner leaves a released log as it
//! is, and the next transaction but one overwrites it. Neither mark can
//! change the decision a later recoverer takes from the headers (DONE only
//! follows COMMITTED on every replica), so a recoverer stopped after any
//! verb is finished by the next one.

use fabric::GlobalAddr;

use crate::log::LOG_SLOT_BYTES;
use crate::word::{LockWord, LogHeader, LogState};
use fabric::le_word_at;

/// Bytes of one half of a slot: one DTX log.
pub const HALF_BYTES: u64 = LOG_SLOT_BYTES / 2;
const HEADER_WORDS: usize = 3;
const ENTRY_WORDS: usize = 4;
/// Most records one DTX transaction may lock: as many entries as fit a
/// half. Index operations lock a handful (a leaf split: leaf and parent).
pub const ENTRIES_MAX: usize = (HALF_BYTES as usize / 8 - HEADER_WORDS) / ENTRY_WORDS;
/// Byte offset of the header word in a half.
pub const HEADER_OFFSET: u64 = 0;

/// The half a transaction uses: 0 or 1, alternately.
pub fn half_addr(slot: GlobalAddr, parity: u8) -> GlobalAddr {
    assert!(parity < 2, "a slot has two halves");
    slot.add(u64::from(parity) * HALF_BYTES)
}

/// The states a DTX half may hold: its own two, and the marks recovery
/// leaves (DONE: finished committed, ABORT: rolled back).
fn is_dtx_log_state(s: LogState) -> bool {
    s.is_dtx() || matches!(s, LogState::Done | LogState::Abort)
}

/// Whether a log in `state` still needs recovery: its transaction may hold
/// locks or have records invisible.
pub fn is_unfinished(state: LogState) -> bool {
    state.is_dtx()
}

/// One record a DTX transaction locked (or may have).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtxEntry {
    /// The record.
    pub record: GlobalAddr,
    /// Its data bytes.
    pub len: u32,
    /// Its undo image, once written: the version word and data as they
    /// were before this transaction.
    pub undo: Option<GlobalAddr>,
    /// The lock word of a dead transaction whose lock on this record this
    /// one took over (recovery), if any.
    pub adopted: Option<LockWord>,
}

/// A decoded DTX log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DtxLog {
    /// LOCKING, COMMITTED, DONE or ABORT.
    pub header: LogHeader,
    /// The lock word of the transaction that wrote it.
    pub checksum: LockWord,
    /// The records.
    pub entries: Vec<DtxEntry>,
}

impl DtxLog {
    /// Bytes the log occupies when encoded.
    pub fn encoded_len(&self) -> usize {
        (HEADER_WORDS + ENTRY_WORDS * self.entries.len()) * 8
    }

    /// Encodes into `buf` (cleared first).
    ///
    /// # Panics
    /// With more than [`ENTRIES_MAX`] entries (the client refuses such a
    /// transaction before it logs), or a header that is not a DTX log's
    /// state, or a checksum that is not a held lock word.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        assert!(self.entries.len() <= ENTRIES_MAX);
        assert!(is_dtx_log_state(self.header.state()));
        assert!(self.checksum.is_locked());
        buf.clear();
        let mut put = |w: u64| buf.extend_from_slice(&w.to_le_bytes());
        put(self.header.raw());
        put(self.checksum.raw());
        put(self.entries.len() as u64);
        for e in &self.entries {
            put(e.record.raw());
            put(u64::from(e.len));
            put(e.undo.map_or(0, GlobalAddr::raw));
            put(e.adopted.map_or(0, LockWord::raw));
        }
    }

    /// Decodes a half read from DM. `None` unless it holds a DTX log:
    /// never written, an rTX log, or garbage.
    pub fn decode(bytes: &[u8]) -> Option<DtxLog> {
        let word = |i: usize| le_word_at(bytes, i * 8);
        let header = LogHeader::from_raw(word(0)?)?;
        let checksum = LockWord::from_raw(word(1)?);
        if !is_dtx_log_state(header.state()) || !checksum.is_locked() {
            return None;
        }
        let count = usize::try_from(word(2)?).ok()?;
        if count > ENTRIES_MAX {
            return None;
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let b = HEADER_WORDS + i * ENTRY_WORDS;
            let nonzero = |w: u64| (w != 0).then_some(w);
            entries.push(DtxEntry {
                record: GlobalAddr::from_raw(word(b)?),
                len: u32::try_from(word(b + 1)?).ok()?,
                undo: nonzero(word(b + 2)?).map(GlobalAddr::from_raw),
                adopted: nonzero(word(b + 3)?).map(LockWord::from_raw),
            });
        }
        Some(DtxLog {
            header,
            checksum,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> DtxLog {
        let l = LockWord::locked(5, 0x1_0000);
        DtxLog {
            header: LogHeader::of(LogState::Locking, l),
            checksum: l,
            entries: (0..n as u64)
                .map(|i| DtxEntry {
                    record: GlobalAddr::new(1, 0x1000 + 0x410 * i),
                    len: 1024,
                    undo: (i % 2 == 0).then(|| GlobalAddr::new(1, 0x8_0000 + 0x408 * i)),
                    adopted: (i == 1).then(|| LockWord::locked(9, 77)),
                })
                .collect(),
        }
    }

    #[test]
    fn a_half_holds_31_entries() {
        assert_eq!(HALF_BYTES, 1024);
        assert_eq!(ENTRIES_MAX, 31);
        let full = sample(ENTRIES_MAX);
        assert!(full.encoded_len() <= HALF_BYTES as usize);
        assert_eq!(
            half_addr(GlobalAddr::new(1, 4096), 1),
            GlobalAddr::new(1, 4096 + 1024)
        );
    }

    #[test]
    fn log_encoding_is_bit_exact_and_round_trips() {
        let log = sample(2);
        let mut buf = Vec::new();
        log.encode(&mut buf);
        assert_eq!(buf.len(), log.encoded_len());
        let word = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(
            word(0),
            (5 << 48) | 0x1_0000,
            "LOCKING, the lock word's lease tick"
        );
        assert_eq!(word(1), log.checksum.raw());
        assert_eq!(word(2), 2);
        assert_eq!(word(3), GlobalAddr::new(1, 0x1000).raw());
        assert_eq!(word(4), 1024);
        assert_eq!(word(5), GlobalAddr::new(1, 0x8_0000).raw());
        assert_eq!(word(6), 0, "not adopted");
        assert_eq!(word(8), 1024);
        assert_eq!(word(9), 0, "no undo image yet");
        assert_eq!(word(10), LockWord::locked(9, 77).raw());
        assert_eq!(DtxLog::decode(&buf), Some(log.clone()));
        // Decoding ignores what follows the entries (the rest of the half).
        buf.resize(HALF_BYTES as usize, 0xEE);
        assert_eq!(DtxLog::decode(&buf), Some(log));
    }

    #[test]
    fn what_is_not_a_dtx_log_decodes_to_none() {
        let mut buf = Vec::new();
        sample(1).encode(&mut buf);
        let with = |word: usize, value: u64| {
            let mut b = buf.clone();
            b[word * 8..word * 8 + 8].copy_from_slice(&value.to_le_bytes());
            DtxLog::decode(&b)
        };
        assert_eq!(with(0, 0), None, "an empty slot");
        assert_eq!(with(0, 1 << 48), None, "an rTX INIT log");
        assert_eq!(with(0, 3 << 48), None, "an rTX DOING log");
        assert_eq!(with(0, 9 << 48), None, "an unknown state");
        assert_eq!(with(1, 7), None, "a checksum that is no held lock word");
        assert_eq!(with(2, ENTRIES_MAX as u64 + 1), None, "too many entries");
        assert_eq!(with(4, u64::MAX), None, "a length past u32");
        assert!(with(0, (6 << 48) | 0x1_0000).is_some(), "COMMITTED");
        assert!(with(0, (4 << 48) | 0x1_0000).is_some(), "DONE");
        assert!(with(0, (2 << 48) | 0x1_0000).is_some(), "ABORT (rolled back)");
        assert_eq!(DtxLog::decode(&buf[..20]), None, "truncated");
    }

    #[test]
    fn an_rtx_log_never_decodes_a_dtx_half() {
        let mut buf = Vec::new();
        sample(3).encode(&mut buf);
        buf.resize(crate::log::LOG_SLOT_BYTES as usize, 0);
        assert_eq!(crate::log::Log::decode(&buf), None);
    }
}
