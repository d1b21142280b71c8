//! Meta hints: what a client last saw of an object's meta, so that a read
//! can fetch the data block and validate it in one round trip instead of
//! reading the meta first.
//!
//! # The hint rule
//!
//! A [`MetaHint`] is a version and a data pointer read **together**, with
//! the lock word unlocked at that version. If the meta is later read (after
//! a READ of the hinted block) and is still exactly `unlocked(version)` with
//! the hinted pointer, the block read in between was the object's committed
//! data, however old the hint was. Why: a pointer moves only while the
//! object is locked, and every lock that moved it is released at a higher
//! version (a commit releases at `version + 1`, a log-less repair at a
//! version floor above it, a logged repair rolls forward to `old + 1`);
//! a lock released at the same version (a rollback, a repaired INIT/ABORT
//! log) never moved the pointer. Versions are 63 bits and never wrap. So an
//! unchanged unlocked version means no pointer move started and ended in
//! between, and an unchanged unlocked word cannot hide one in progress.
//! Blocks are freed only after the pointer left them, so the block was
//! live throughout.
//!
//! The same rule makes a lock CAS from `unlocked(version)` a validation of
//! the hinted pointer: if it wins, the pointer is the hinted one and stays
//! so under the lock ([`crate::Tx::read_locked`]).
//!
//! A pointer alone is weaker: its version is 16 bits and wraps after 65,536
//! installs, so pointer equality proves nothing unchanged over a long time.
//! Readers that only have a pointer validate it within one short window.
//!
//! # The cache
//!
//! [`HintCache`] is direct-mapped and shared by every client of a process
//! (as Sherman shares its index cache per compute node): a slot holds one
//! object's hint and a colliding object overwrites it. A hint is only ever
//! an optimisation: a stale or missing one costs a round trip, never
//! correctness, because every use validates it remotely by the rule above.
//! But a hint must be a pair that was read together: a slot is a seqlock,
//! so a reader never takes one object's version with another's pointer.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::OnceLock;

use fabric::GlobalAddr;

use crate::word::{DataPtr, LockWord};

/// An object's meta as last seen unlocked: its version and data pointer,
/// read together (see the module docs for what that guarantees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaHint {
    /// The unlocked lock word's version.
    pub version: u64,
    /// The data pointer read with it.
    pub dptr: DataPtr,
}

impl MetaHint {
    /// The hint in a meta read from DM (lock word, data pointer), if the
    /// meta is unlocked; `None` when it is locked.
    pub fn from_meta(lock: LockWord, dptr: DataPtr) -> Option<MetaHint> {
        (!lock.is_locked()).then(|| MetaHint {
            version: lock.version(),
            dptr,
        })
    }

    /// The lock word the hint saw.
    pub fn lock_word(self) -> LockWord {
        LockWord::unlocked(self.version)
    }

    /// True when a meta read after the hinted block still shows exactly
    /// this hint: the block read was committed data (the hint rule).
    pub fn validates(self, lock: LockWord, dptr: DataPtr) -> bool {
        lock == self.lock_word() && dptr == self.dptr
    }
}

/// Slots per lazily allocated chunk: 4,096 × 32 bytes = 128 KiB, so a
/// cache costs memory in proportion to what it holds.
const CHUNK_SLOTS: usize = 4096;

/// Slots of a cache made by [`HintCache::default`]: one per leaf of a
/// B+tree of about 40 M keys (1 M × 32 bytes = 32 MiB when full). Larger
/// trees share slots and miss more, never err.
pub const HINT_SLOTS_DEFAULT: usize = 1 << 20;

/// One slot: a seqlock around (meta address + 1, version, pointer). The
/// tag is offset by one so that a zeroed slot holds nothing.
#[derive(Debug, Default)]
struct Slot {
    seq: AtomicU64,
    tag: AtomicU64,
    version: AtomicU64,
    dptr: AtomicU64,
}

/// A direct-mapped cache of [`MetaHint`]s by meta address, shared by the
/// clients of one process (clone the `Arc` it lives in).
#[derive(Debug)]
pub struct HintCache {
    chunks: Box<[OnceLock<Box<[Slot]>>]>,
    /// 64 - log2(slots): a multiplicative hash keeps its top bits.
    shift: u32,
}

impl Default for HintCache {
    fn default() -> Self {
        HintCache::with_slots(HINT_SLOTS_DEFAULT)
    }
}

impl HintCache {
    /// A cache of `slots` slots (rounded up to a power of two, at least one
    /// chunk). Memory is taken a chunk at a time, when first written.
    pub fn with_slots(slots: usize) -> HintCache {
        let slots = slots.max(CHUNK_SLOTS).next_power_of_two();
        let chunks = (0..slots / CHUNK_SLOTS).map(|_| OnceLock::new()).collect();
        HintCache {
            chunks,
            shift: 64 - slots.trailing_zeros(),
        }
    }

    /// Slots in the cache.
    pub fn slots(&self) -> usize {
        self.chunks.len() * CHUNK_SLOTS
    }

    fn index(&self, meta: GlobalAddr) -> (usize, usize) {
        // Metas are 16-byte aligned; a multiplicative hash spreads the
        // chunk-strided addresses of one client's allocations.
        let i = ((meta.raw() >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        (i / CHUNK_SLOTS, i % CHUNK_SLOTS)
    }

    /// The hint for `meta`, if its slot holds one.
    pub fn get(&self, meta: GlobalAddr) -> Option<MetaHint> {
        let (c, i) = self.index(meta);
        let slot = &self.chunks[c].get()?[i];
        // Seqlock read (Boehm, "Can seqlocks get along with programming
        // language memory models?"): data loads between an acquire load of
        // the sequence and an acquire fence before loading it again.
        let before = slot.seq.load(Ordering::Acquire);
        let tag = slot.tag.load(Ordering::Relaxed);
        let version = slot.version.load(Ordering::Relaxed);
        let dptr = slot.dptr.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let after = slot.seq.load(Ordering::Relaxed);
        (before == after && before % 2 == 0 && tag == meta.raw().wrapping_add(1)).then_some(MetaHint {
            version,
            dptr: DataPtr::from_raw(dptr),
        })
    }

    /// Records `hint` for `meta`. Skipped if another writer holds the slot
    /// this instant: a hint is never worth waiting for.
    pub fn put(&self, meta: GlobalAddr, hint: MetaHint) {
        let (c, i) = self.index(meta);
        let slot = &self.chunks[c].get_or_init(|| (0..CHUNK_SLOTS).map(|_| Slot::default()).collect())[i];
        slot.write(|slot| {
            slot.tag.store(meta.raw().wrapping_add(1), Ordering::Relaxed);
            slot.version.store(hint.version, Ordering::Relaxed);
            slot.dptr.store(hint.dptr.raw(), Ordering::Relaxed);
        });
    }
}

impl Slot {
    /// Runs `store` as the seqlock's writer, or not at all if another
    /// writer holds the slot.
    fn write(&self, store: impl FnOnce(&Slot)) {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq % 2 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Orders the odd sequence before the data stores for any reader
        // that sees one of them (it then sees the sequence changed).
        fence(Ordering::Release);
        store(self);
        self.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn hint(version: u64, offset: u64) -> MetaHint {
        MetaHint {
            version,
            dptr: DataPtr::new((version % 65_536) as u16, offset),
        }
    }

    #[test]
    fn holds_what_was_put_and_nothing_else() {
        let cache = HintCache::with_slots(1);
        assert_eq!(cache.slots(), CHUNK_SLOTS);
        let a = GlobalAddr::new(1, 4096);
        assert_eq!(cache.get(a), None);
        cache.put(a, hint(3, 8192));
        assert_eq!(cache.get(a), Some(hint(3, 8192)));
        // Another address never reads a's hint, even in a's slot.
        for k in 1..(4 * CHUNK_SLOTS as u64) {
            let b = GlobalAddr::new(1, 4096 + 16 * k);
            assert_ne!(cache.get(b), Some(hint(3, 8192)));
        }
        // The zero address is a real address, not an empty slot.
        let zero = GlobalAddr::from_raw(0);
        assert_eq!(cache.get(zero), None);
        cache.put(zero, hint(1, 64));
        assert_eq!(cache.get(zero), Some(hint(1, 64)));
    }

    #[test]
    fn validates_only_the_exact_unlocked_word_and_pointer() {
        let h = hint(7, 1024);
        assert!(h.validates(LockWord::unlocked(7), h.dptr));
        assert!(!h.validates(LockWord::unlocked(8), h.dptr));
        assert!(!h.validates(LockWord::locked(3, 99), h.dptr));
        assert!(!h.validates(LockWord::unlocked(7), DataPtr::new(8, 1024)));
        assert_eq!(MetaHint::from_meta(LockWord::locked(3, 99), h.dptr), None);
        assert_eq!(MetaHint::from_meta(LockWord::unlocked(7), h.dptr), Some(h));
    }

    /// Writers store pairs whose fields agree (version == offset / 64);
    /// a reader must never see a mixed pair, on any slot.
    #[test]
    fn concurrent_readers_never_see_a_torn_pair() {
        let cache = Arc::new(HintCache::with_slots(CHUNK_SLOTS));
        let metas: Vec<GlobalAddr> = (0..64).map(|i| GlobalAddr::new(0, 16 * i)).collect();
        std::thread::scope(|s| {
            for w in 0..2u64 {
                let (cache, metas) = (cache.clone(), metas.clone());
                s.spawn(move || {
                    for n in 0..200_000u64 {
                        let v = n * 2 + w;
                        cache.put(metas[(n % 64) as usize], hint(v, v * 64));
                    }
                });
            }
            let (cache, metas) = (cache.clone(), metas.clone());
            s.spawn(move || {
                for n in 0..400_000usize {
                    if let Some(h) = cache.get(metas[n % 64]) {
                        assert_eq!(h.dptr.offset(), h.version * 64, "torn hint {h:?}");
                        assert_eq!(u64::from(h.dptr.ptr_version()), h.version % 65_536);
                    }
                }
            });
        });
    }
}
