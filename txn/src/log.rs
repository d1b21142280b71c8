//! An rTX log slot: one per owner id, in the heap's log array, rewritten by
//! each logged transaction of that owner.
//!
//! ```text
//! word 0   header   state: 16 | lease_tick: 48        (see `LogHeader`)
//! word 1   checksum the lock word the owner locked with (owner | lease)
//! word 2   count    number of entries
//! word 3.. entries  4 words each: meta addr, old data ptr, new data ptr, old lock version
//! ```
//!
//! The checksum is what makes slot reuse safe: a repairer that found lock
//! word `L` reads the owner's slot and acts on it only if its checksum is
//! `L`. The owner's leases strictly increase, so a later transaction of the
//! same owner never carries the same checksum.

use fabric::GlobalAddr;

use crate::word::{DataPtr, LockWord, LogHeader};
use fabric::{le_word, le_word_at};

/// Bytes of one log slot.
pub const LOG_SLOT_BYTES: u64 = 2048;
const HEADER_WORDS: usize = 3;
const ENTRY_WORDS: usize = 4;
/// Most objects one logged transaction may write: as many entries as fit a
/// slot. Index operations write a handful (a B+tree split at every level of a
/// deep tree is still far below this).
pub const LOG_ENTRIES_MAX: usize = (LOG_SLOT_BYTES as usize / 8 - HEADER_WORDS) / ENTRY_WORDS;
/// Byte offset of the header word in a slot (the CAS target).
pub const HEADER_OFFSET: u64 = 0;

/// One write-set entry as logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// The TXObj's meta address.
    pub meta: GlobalAddr,
    /// The data pointer before the transaction.
    pub old: DataPtr,
    /// The data pointer the transaction installs.
    pub new: DataPtr,
    /// The object's unlocked version before the transaction locked it.
    pub old_version: u64,
}

/// A decoded log slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    /// State and commit lease.
    pub header: LogHeader,
    /// The lock word of the transaction that wrote it.
    pub checksum: LockWord,
    /// The write set.
    pub entries: Vec<LogEntry>,
}

impl Log {
    /// Bytes this log occupies when encoded.
    pub fn encoded_len(&self) -> usize {
        (HEADER_WORDS + ENTRY_WORDS * self.entries.len()) * 8
    }

    /// Encodes into `buf` (cleared first).
    ///
    /// # Panics
    /// With more than [`LOG_ENTRIES_MAX`] entries: the commit path refuses
    /// such write sets before logging.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        assert!(self.entries.len() <= LOG_ENTRIES_MAX);
        buf.clear();
        let mut put = |w: u64| buf.extend_from_slice(&w.to_le_bytes());
        put(self.header.raw());
        put(self.checksum.raw());
        put(self.entries.len() as u64);
        for e in &self.entries {
            put(e.meta.raw());
            put(e.old.raw());
            put(e.new.raw());
            put(e.old_version);
        }
    }

    /// Decodes a slot read from DM. `None` if it does not hold a valid log
    /// (never written, or garbage): a repairer then treats the lock as
    /// log-less.
    pub fn decode(bytes: &[u8]) -> Option<Log> {
        let word = |i: usize| le_word_at(bytes, i * 8);
        let header = LogHeader::from_raw(word(0)?)?;
        // A DTX log (`crate::dtx::log`) in the slot is not rTX's to act on.
        if header.state().is_dtx() {
            return None;
        }
        let checksum = LockWord::from_raw(word(1)?);
        let count = usize::try_from(word(2)?).ok()?;
        if count > LOG_ENTRIES_MAX {
            return None;
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let b = HEADER_WORDS + i * ENTRY_WORDS;
            entries.push(LogEntry {
                meta: GlobalAddr::from_raw(word(b)?),
                old: DataPtr::from_raw(word(b + 1)?),
                new: DataPtr::from_raw(word(b + 2)?),
                old_version: word(b + 3)?,
            });
        }
        Some(Log {
            header,
            checksum,
            entries,
        })
    }
}

/// The owner ids in `owners` whose log slot in `heap` a promotion must
/// finish, read in one round trip: a log not finished (INIT, ABORT or
/// DOING) on some replica, or a header that differs between replicas (a
/// log WRITE that reached some replicas only, which `finish_owner_log`
/// copies whole from the primary). Finishing a slot that is empty or DONE
/// everywhere changes nothing.
pub async fn unfinished(
    heap: &crate::Heap,
    client: &mut fabric::Client,
    owners: std::ops::Range<crate::OwnerId>,
) -> Result<Vec<crate::OwnerId>, crate::TxError> {
    let mut batch = fabric::Batch::new();
    let mut reads = Vec::with_capacity(owners.len());
    for owner in owners {
        let at = heap.log_slot(owner)?.add(HEADER_OFFSET);
        reads.push((owner, batch.on(fabric::Replica::All).read(at, 8)));
    }
    client.execute(&mut batch).await?;
    let mut open = Vec::new();
    for (owner, h) in reads {
        let mut raws = Vec::with_capacity(batch.completions(h).len());
        for r in 0..batch.completions(h).len() {
            raws.push(le_word(
                batch.read_result_of(h, r).map_err(crate::TxError::Verb)?,
                0,
            ));
        }
        // A header that does not decode is left to `finish_owner_log`,
        // which says what is wrong with it.
        let finished = |raw: &u64| LogHeader::from_raw(*raw).is_some_and(LogHeader::is_finished);
        if !raws.iter().all(finished) || raws.iter().any(|r| *r != raws[0]) {
            open.push(owner);
        }
    }
    Ok(open)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::word::LogState;

    #[test]
    fn log_round_trips_and_is_bit_exact() {
        let log = Log {
            header: LogHeader::new(LogState::Init, 0),
            checksum: LockWord::locked(5, 1234),
            entries: vec![
                LogEntry {
                    meta: GlobalAddr::new(1, 4096),
                    old: DataPtr::new(1, 8192),
                    new: DataPtr::new(2, 9216),
                    old_version: 7,
                },
                LogEntry {
                    meta: GlobalAddr::new(1, 4112),
                    old: DataPtr::new(0, 10240),
                    new: DataPtr::new(1, 11264),
                    old_version: 0,
                },
            ],
        };
        let mut buf = Vec::new();
        log.encode(&mut buf);
        assert_eq!(buf.len(), log.encoded_len());
        assert_eq!(buf.len(), (3 + 8) * 8);
        assert_eq!(&buf[0..8], &(1u64 << 48).to_le_bytes());
        assert_eq!(&buf[8..16], &LockWord::locked(5, 1234).raw().to_le_bytes());
        assert_eq!(&buf[16..24], &2u64.to_le_bytes());
        assert_eq!(&buf[24..32], &GlobalAddr::new(1, 4096).raw().to_le_bytes());
        let mut slot = buf.clone();
        slot.resize(LOG_SLOT_BYTES as usize, 0xEE);
        assert_eq!(Log::decode(&slot), Some(log));
    }

    #[test]
    fn garbage_is_not_a_log() {
        assert_eq!(Log::decode(&[0xFF; 64]), None);
        let mut buf = vec![0u8; 24];
        buf[16..24].copy_from_slice(&1000u64.to_le_bytes());
        assert_eq!(Log::decode(&buf), None, "count past the limit");
        assert_eq!(LOG_ENTRIES_MAX, 63);
    }
}
