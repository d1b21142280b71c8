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
//! [`HintCache`] is shared by every client of a process (as Sherman shares
//! its index cache per compute node). It is dense and needs no tags: metas
//! are 16-byte objects that are never freed, so `meta >> 4` names one object
//! for good, and the cache keeps one 16-byte slot per meta in pages that
//! mirror 64 KiB of meta address space (4,096 metas, one heap chunk of the
//! default size). A hot tree's hints take 16 bytes per node, packed four to
//! a cache line, where a hashed slot per node would take a line each.
//!
//! A hint is only ever an optimisation: a stale or missing one costs a round
//! trip, never correctness, because every use validates it remotely by the
//! rule above. But a hint must be a pair that was read together, so a slot
//! is one 128-bit atomic: a reader never takes one put's version with
//! another's pointer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use portable_atomic::AtomicU128;

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

/// Where one hint is kept: a 128-bit atomic holding `version << 64 | data
/// pointer`, 0 = no hint (no data pointer is ever 0: offset 0 is a heap
/// header). One atomic, so that a reader never pairs one put's version
/// with another's pointer: a hint must be a pair read together. The
/// process-wide [`HintCache`] is made of them, and so can any cache that
/// keeps hints where its reader already looks (the B+tree keeps its
/// leaves' in their cached parents).
#[derive(Debug, Default)]
pub struct HintSlot(AtomicU128);

impl HintSlot {
    /// The hint held, if any.
    pub fn get(&self) -> Option<MetaHint> {
        let word = self.0.load(Ordering::Acquire);
        (word != 0).then(|| MetaHint {
            version: (word >> 64) as u64,
            dptr: DataPtr::from_raw(word as u64),
        })
    }

    /// Holds `hint` from now on (a later put wins).
    pub fn put(&self, hint: MetaHint) {
        debug_assert_ne!(hint.dptr.raw(), 0, "no data block lives at offset 0");
        self.0.store(
            u128::from(hint.version) << 64 | u128::from(hint.dptr.raw()),
            Ordering::Release,
        );
    }
}

/// Metas per page: 64 KiB of meta address space, one default heap chunk.
const PAGE_METAS: u64 = 4096;

/// Bits of a meta address below the page number (16-byte metas, 4,096 a page).
const PAGE_SHIFT: u32 = 16;

/// Table positions probed for a page before giving up on it: a page that
/// finds no place gets no hints (a round trip more per read, nothing worse).
const PROBES_MAX: usize = 8;

/// Pages of a cache made by [`HintCache::default`]: hints for 1 M objects,
/// 64 MiB when every page is taken.
pub const HINT_PAGES_DEFAULT: usize = 1024;

/// One page: the page number + 1 it holds (0 = free), and its slots, one
/// per meta.
#[derive(Debug, Default)]
struct Page {
    key: AtomicU64,
    slots: OnceLock<Box<[HintSlot]>>,
}

/// The [`MetaHint`]s of a process, by meta address, shared by its clients
/// (clone the `Arc` it lives in).
#[derive(Debug)]
pub struct HintCache {
    /// Open addressing, linear probing, never shrinks.
    pages: Box<[Page]>,
    /// 64 - log2(pages.len()): a multiplicative hash keeps its top bits.
    shift: u32,
}

impl Default for HintCache {
    fn default() -> Self {
        HintCache::with_pages(HINT_PAGES_DEFAULT)
    }
}

impl HintCache {
    /// A cache of `pages` pages (rounded up to a power of two) of 4,096
    /// metas each: at most 64 KiB per page, taken when first written.
    pub fn with_pages(pages: usize) -> HintCache {
        let pages = pages.max(1).next_power_of_two();
        HintCache {
            pages: (0..pages).map(|_| Page::default()).collect(),
            shift: 64 - pages.trailing_zeros(),
        }
    }

    /// A cache sized for about `objects` live metas, with room for the
    /// partly used pages that allocators leave (one run of metas per tree
    /// level at load, one chunk at a time per client).
    pub fn for_objects(objects: u64) -> HintCache {
        /// Pages beyond twice the dense need: the partly used ones.
        const PAGES_SLACK: u64 = 64;
        let pages = objects
            .div_ceil(PAGE_METAS)
            .saturating_mul(2)
            .saturating_add(PAGES_SLACK);
        HintCache::with_pages(usize::try_from(pages).unwrap_or(usize::MAX))
    }

    /// Pages the cache can hold.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Pages taken so far.
    pub fn pages_used(&self) -> usize {
        self.pages
            .iter()
            .filter(|p| p.key.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// The table positions page `key` may sit at.
    fn probes(&self, key: u64) -> impl Iterator<Item = &Page> {
        let home = key
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .checked_shr(self.shift)
            .unwrap_or(0) as usize;
        let mask = self.pages.len() - 1;
        (0..PROBES_MAX.min(self.pages.len())).map(move |i| &self.pages[(home + i) & mask])
    }

    /// The slot of `meta`; with `insert`, takes a page for it if needed.
    fn slot(&self, meta: GlobalAddr, insert: bool) -> Option<&HintSlot> {
        let key = (meta.raw() >> PAGE_SHIFT) + 1;
        let index = ((meta.raw() >> 4) % PAGE_METAS) as usize;
        for page in self.probes(key) {
            let mut held = page.key.load(Ordering::Acquire);
            if held == 0 && insert {
                held = match page
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => key,
                    Err(other) => other,
                };
            }
            if held == key {
                let slots = if insert {
                    page.slots
                        .get_or_init(|| (0..PAGE_METAS).map(|_| HintSlot::default()).collect())
                } else {
                    // Taken but not yet filled by its first writer: no hint.
                    page.slots.get()?
                };
                return Some(&slots[index]);
            }
            if held == 0 {
                // Pages are never freed, so a free position ends the probe.
                return None;
            }
        }
        None
    }

    /// The hint for `meta`, if one was put.
    pub fn get(&self, meta: GlobalAddr) -> Option<MetaHint> {
        self.slot(meta, false)?.get()
    }

    /// Records `hint` for `meta` (a later put wins). Dropped if the table
    /// has no place for the meta's page.
    pub fn put(&self, meta: GlobalAddr, hint: MetaHint) {
        if let Some(slot) = self.slot(meta, true) {
            slot.put(hint);
        }
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
        let cache = HintCache::with_pages(3);
        assert_eq!(cache.pages(), 4);
        let a = GlobalAddr::new(1, 4096);
        assert_eq!(cache.get(a), None);
        cache.put(a, hint(3, 8192));
        assert_eq!(cache.get(a), Some(hint(3, 8192)));
        cache.put(a, hint(4, 9216));
        assert_eq!(cache.get(a), Some(hint(4, 9216)), "a later put wins");
        // Neighbours in a's page and metas of other pages and regions
        // never read a's hint.
        for k in 1..(2 * PAGE_METAS) {
            assert_eq!(cache.get(GlobalAddr::new(1, 4096 + 16 * k)), None);
        }
        assert_eq!(cache.get(GlobalAddr::new(2, 4096)), None);
        // The zero address is a real meta address, not an empty slot.
        let zero = GlobalAddr::from_raw(0);
        assert_eq!(cache.get(zero), None);
        cache.put(zero, hint(1, 64));
        assert_eq!(cache.get(zero), Some(hint(1, 64)));
        assert_eq!(cache.pages_used(), 2, "a's page and the zero page");
    }

    #[test]
    fn a_full_table_drops_new_pages_and_keeps_old_hints() {
        let cache = HintCache::with_pages(2);
        let metas: Vec<GlobalAddr> = (0..8).map(|p| GlobalAddr::new(0, p << PAGE_SHIFT)).collect();
        for (i, &m) in metas.iter().enumerate() {
            cache.put(m, hint(i as u64 + 1, 64));
        }
        assert_eq!(cache.pages_used(), 2);
        let kept: Vec<usize> = (0..8).filter(|&i| cache.get(metas[i]).is_some()).collect();
        assert_eq!(kept.len(), 2, "only two pages fit: {kept:?}");
        for i in kept {
            assert_eq!(cache.get(metas[i]), Some(hint(i as u64 + 1, 64)));
        }
    }

    #[test]
    fn slots_are_lock_free_atomics() {
        assert!(
            AtomicU128::is_lock_free(),
            "a locked 128-bit atomic would serialise every hint"
        );
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
        let cache = Arc::new(HintCache::with_pages(1));
        let metas: Vec<GlobalAddr> = (0..64).map(|i| GlobalAddr::new(0, 16 * i)).collect();
        std::thread::scope(|s| {
            for w in 0..2u64 {
                let (cache, metas) = (cache.clone(), metas.clone());
                s.spawn(move || {
                    for n in 0..200_000u64 {
                        let v = n * 2 + w + 1;
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
