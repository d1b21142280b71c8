//! Keys and values: a seeded bijection from record indices to 8-byte keys.
//!
//! Record `i` (loaded records are `0..records`, inserts during a run take
//! `records`, `records + 1`, ...) has key [`KeyMap::key`]`(i)`: a seeded
//! bijective mix of `i`, so keys are spread over the whole `u64` range rather
//! than sequential, and never `0` or `u64::MAX`, which indexes may reserve
//! as sentinels. The map is a permutation of `u64` walked around those two
//! values (see the `perm` module), so it is exactly invertible:
//! [`KeyMap::index`] tells a checker which record a key belongs to.

use std::iter::FusedIterator;
use std::ops::Range;

use super::perm::{splitmix64, Perm};

/// Indices wrap with this period: there are `2^64 - 2` usable keys.
const PERIOD: u64 = u64::MAX - 1;

/// Salt separating the value stream from the key permutation.
const VALUE_SALT: u64 = 0x5641_4c55_4553_2d2d;

/// The bijection between record indices and keys for one seed.
///
/// Cheap to copy (four words); `key` costs three multiply-xorshift rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMap {
    perm: Perm,
    value_salt: u64,
}

impl KeyMap {
    /// The key map of `seed`.
    pub const fn new(seed: u64) -> Self {
        Self {
            perm: Perm::new(64, seed),
            value_salt: splitmix64(seed ^ VALUE_SALT),
        }
    }

    /// The key of record `i`: never `0` nor `u64::MAX`, distinct for
    /// distinct `i < 2^64 - 2` (indices wrap with that period).
    #[inline]
    pub fn key(&self, i: u64) -> u64 {
        let mut x = if i >= PERIOD { i - PERIOD } else { i } + 1;
        loop {
            x = self.perm.forward(x);
            if x != 0 && x != u64::MAX {
                return x;
            }
        }
    }

    /// The record index whose key is `key` (`key(index(k)) == k`), or `None`
    /// for the reserved keys `0` and `u64::MAX`.
    pub fn index(&self, key: u64) -> Option<u64> {
        if key == 0 || key == u64::MAX {
            return None;
        }
        let mut x = key;
        loop {
            x = self.perm.inverse(x);
            if x != 0 && x != u64::MAX {
                return Some(x - 1);
            }
        }
    }

    /// An 8-byte value for `key`, a deterministic mix of the seed, the key
    /// and `version`. Bulk loads use [`KeyMap::load_value`] (version 0); an
    /// [`OpGenerator`](super::OpGenerator) uses a mix of its thread index
    /// and op sequence number.
    #[inline]
    pub fn value(&self, key: u64, version: u64) -> u64 {
        splitmix64(key ^ self.value_salt ^ splitmix64(version))
    }

    /// The value a record is loaded with: `value(key, 0)`.
    #[inline]
    pub fn load_value(&self, key: u64) -> u64 {
        self.value(key, 0)
    }

    /// The keys of records `indices`, in index order (not key order).
    /// Split the range to load in parallel.
    pub fn keys(&self, indices: Range<u64>) -> LoadKeys {
        LoadKeys {
            map: *self,
            next: indices.start,
            end: indices.end.max(indices.start),
        }
    }
}

/// The keys of the `records` loaded records of `seed`, in index order: a
/// deterministic function of `(records, seed)`. O(1) to create, a few
/// nanoseconds per key.
pub fn load_keys(records: u64, seed: u64) -> LoadKeys {
    KeyMap::new(seed).keys(0..records)
}

/// The keys of [`load_keys`] sorted ascending, for bulk-building ordered
/// indexes. Costs O(n log n) time and 8 bytes per record (800 MB and a few
/// seconds for 100M records).
pub fn sorted_keys(records: u64, seed: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = load_keys(records, seed).collect();
    keys.sort_unstable();
    keys
}

/// The `(key, loaded value)` pairs of [`sorted_keys`]: what a bulk load of
/// an ordered index takes.
pub fn load_entries(records: u64, seed: u64) -> Vec<(u64, u64)> {
    let map = KeyMap::new(seed);
    sorted_keys(records, seed)
        .into_iter()
        .map(|k| (k, map.load_value(k)))
        .collect()
}

/// Iterator over the keys of a range of record indices (see [`KeyMap::keys`]).
#[derive(Clone, Debug)]
pub struct LoadKeys {
    map: KeyMap,
    next: u64,
    end: u64,
}

impl Iterator for LoadKeys {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.next >= self.end {
            return None;
        }
        let key = self.map.key(self.next);
        self.next += 1;
        Some(key)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        match usize::try_from(left) {
            Ok(n) => (n, Some(n)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl DoubleEndedIterator for LoadKeys {
    fn next_back(&mut self) -> Option<u64> {
        if self.next >= self.end {
            return None;
        }
        self.end -= 1;
        Some(self.map.key(self.end))
    }
}

impl ExactSizeIterator for LoadKeys {}
impl FusedIterator for LoadKeys {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_million_keys_are_distinct_valid_and_invertible() {
        let map = KeyMap::new(42);
        let mut keys: Vec<u64> = map.keys(0..1_000_000).collect();
        for (i, &k) in keys.iter().enumerate() {
            assert!(k != 0 && k != u64::MAX, "key({i}) = {k:#x} is reserved");
            assert_eq!(map.index(k), Some(i as u64));
        }
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 1_000_000);
    }

    #[test]
    fn keys_are_spread_not_sequential() {
        let keys: Vec<u64> = load_keys(10_000, 3).collect();
        // Each of the 16 top-nibble buckets holds ~625 keys.
        let mut buckets = [0u32; 16];
        for k in &keys {
            buckets[(k >> 60) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| (500..750).contains(&b)), "{buckets:?}");
        let ascending = keys.windows(2).filter(|w| w[0] < w[1]).count();
        assert!((4_500..5_500).contains(&ascending), "{ascending}");
    }

    #[test]
    fn reserved_keys_are_walked_around() {
        // Find the index that the bare permutation would send to 0 (resp.
        // u64::MAX) and check that the walk moves it elsewhere, invertibly.
        for seed in 0..8 {
            let map = KeyMap::new(seed);
            for reserved in [0, u64::MAX] {
                let x = map.perm.inverse(reserved);
                if x == 0 || x == u64::MAX {
                    continue; // not an index's starting point
                }
                let i = x - 1;
                let k = map.key(i);
                assert!(k != 0 && k != u64::MAX);
                assert_eq!(map.index(k), Some(i));
            }
            assert_eq!(map.index(0), None);
            assert_eq!(map.index(u64::MAX), None);
        }
    }

    #[test]
    fn key_set_depends_on_seed_and_count_only() {
        let a: Vec<u64> = load_keys(1000, 5).collect();
        let b: Vec<u64> = load_keys(1000, 5).collect();
        let c: Vec<u64> = load_keys(1000, 6).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // A longer load extends a shorter one.
        let longer: Vec<u64> = load_keys(2000, 5).collect();
        assert_eq!(&longer[..1000], &a[..]);
        // Reverse iteration and partitioned ranges give the same keys.
        let mut back: Vec<u64> = load_keys(1000, 5).rev().collect();
        back.reverse();
        assert_eq!(back, a);
        let map = KeyMap::new(5);
        let parts: Vec<u64> = map.keys(0..400).chain(map.keys(400..1000)).collect();
        assert_eq!(parts, a);
        assert_eq!(load_keys(1000, 5).len(), 1000);
    }

    #[test]
    fn sorted_keys_are_the_load_keys_sorted() {
        let sorted = sorted_keys(5000, 9);
        assert!(sorted.windows(2).all(|w| w[0] < w[1]));
        let mut loaded: Vec<u64> = load_keys(5000, 9).collect();
        loaded.sort_unstable();
        assert_eq!(sorted, loaded);
    }

    #[test]
    fn indices_wrap_with_the_period() {
        let map = KeyMap::new(11);
        assert_eq!(map.key(PERIOD), map.key(0));
        assert_eq!(map.key(u64::MAX), map.key(1));
        assert_eq!(map.index(map.key(PERIOD - 1)), Some(PERIOD - 1));
    }

    #[test]
    fn values_are_deterministic_and_versioned() {
        let map = KeyMap::new(1);
        let k = map.key(0);
        assert_eq!(map.value(k, 3), KeyMap::new(1).value(k, 3));
        assert_ne!(map.value(k, 3), map.value(k, 4));
        assert_eq!(map.load_value(k), map.value(k, 0));
    }
}
