//! A bucket: the rTX object that holds every Redis key whose 64-bit hash
//! is one index key, with their values.
//!
//! The index maps `hash(key)` to a [`BucketRef`]; the bucket keeps the
//! keys themselves, so two keys whose hashes collide live side by side
//! and a lookup compares whole keys. An rTX object's length is fixed when
//! it is created, so buckets come in size classes (64 B to 64 KiB, powers
//! of two) and carry their used length; a write that outgrows its class
//! creates a bucket of a larger class in the same transaction and leaves a
//! forward to it in the old one (the index entry never changes, so a write
//! is one rTX over buckets only). Each forward at least doubles the class:
//! a chain is at most [`FORWARDS_MAX`] long.
//!
//! ```text
//! BucketRef (the index's value):  bits 0..48 meta offset | 48..52 class | 52..64 zero
//! bucket bytes (class length):    u16 format | u16 entries | u32 used | u64 forward (BucketRef or 0)
//!                                 entries: u32 key_len | u32 value_len | key | value, packed
//!                                 zero padding to the class length
//! ```

use fabric::{GlobalAddr, RegionId};
use txn::{RawObj, META_BYTES};

/// The format number in every bucket's first field.
pub const FORMAT: u16 = 1;

/// Bytes of a bucket's header.
pub const HEADER_BYTES: usize = 16;

/// Bytes of an entry's lengths.
pub const ENTRY_HEADER_BYTES: usize = 8;

/// The smallest class: one short key and value with the header.
pub const CLASS_BYTES_MIN: u32 = 64;

/// Size classes: 64 B << 0..=10. The largest is a heap chunk
/// (`cluster::CHUNK_BYTES`): a bucket's block never spans chunks.
pub const CLASSES: u8 = 11;

/// The largest bucket.
pub const BUCKET_BYTES_MAX: u32 = CLASS_BYTES_MIN << (CLASSES - 1);

/// Longest key: a few of the largest entries must fit one bucket.
pub const KEY_BYTES_MAX: usize = 4096;

/// Largest value: with the longest key, half the largest bucket, so that
/// two colliding keys still fit.
pub const VALUE_BYTES_MAX: usize =
    (BUCKET_BYTES_MAX as usize / 2) - HEADER_BYTES - ENTRY_HEADER_BYTES - KEY_BYTES_MAX;

/// Longest forward chain: each forward goes to a class at least twice as
/// large.
pub const FORWARDS_MAX: usize = CLASSES as usize;

const OFFSET_BITS: u32 = 48;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const CLASS_SHIFT: u32 = OFFSET_BITS;
const CLASS_MASK: u64 = 0xf;
const RESERVED_SHIFT: u32 = 52;

/// Bytes of class `class`.
pub const fn class_bytes(class: u8) -> u32 {
    CLASS_BYTES_MIN << class
}

/// The smallest class that holds `len` bytes, if any does.
pub fn class_for(len: usize) -> Option<u8> {
    (0..CLASSES).find(|&c| class_bytes(c) as usize >= len)
}

/// What a malformed bucket or reference is.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BucketError {
    /// Bytes that are not a bucket this code writes.
    #[error("corrupt bucket: {0}")]
    Corrupt(String),
    /// A reference with reserved bits set, a class past the largest, or a
    /// misaligned meta.
    #[error("corrupt bucket reference {0:#x}")]
    BadRef(u64),
}

/// Where a bucket is: its meta's offset in the index's region and its
/// class. The index stores [`BucketRef::raw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BucketRef {
    offset: u64,
    class: u8,
}

impl BucketRef {
    /// The reference to the bucket whose meta is at `offset`, of `class`.
    pub fn new(offset: u64, class: u8) -> BucketRef {
        assert!(
            offset != 0 && offset <= OFFSET_MASK && offset % META_BYTES == 0,
            "meta offset {offset:#x}"
        );
        assert!(class < CLASSES, "class {class}");
        BucketRef { offset, class }
    }

    /// The reference to `obj` (a bucket: its length is a class).
    pub fn of(obj: RawObj) -> BucketRef {
        let class = class_for(obj.len as usize).filter(|&c| class_bytes(c) == obj.len);
        let Some(class) = class else {
            panic!("{obj:?} is not of a bucket class");
        };
        BucketRef::new(obj.meta.offset(), class)
    }

    /// The encoded reference.
    pub fn raw(self) -> u64 {
        self.offset | (u64::from(self.class) << CLASS_SHIFT)
    }

    /// Decodes what [`BucketRef::raw`] encoded; anything else is an error.
    pub fn from_raw(raw: u64) -> Result<BucketRef, BucketError> {
        let offset = raw & OFFSET_MASK;
        let class = ((raw >> CLASS_SHIFT) & CLASS_MASK) as u8;
        if raw >> RESERVED_SHIFT != 0 || class >= CLASSES || offset == 0 || offset % META_BYTES != 0 {
            return Err(BucketError::BadRef(raw));
        }
        Ok(BucketRef { offset, class })
    }

    /// The class.
    pub fn class(self) -> u8 {
        self.class
    }

    /// The object in `region`.
    pub fn obj(self, region: RegionId) -> RawObj {
        RawObj {
            meta: GlobalAddr::new(region, self.offset),
            len: class_bytes(self.class),
        }
    }
}

/// A bucket's content: its entries, or a forward to where they moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    forward: Option<BucketRef>,
}

impl Bucket {
    /// A bucket that says its entries moved to `to`.
    pub fn forwarding(to: BucketRef) -> Bucket {
        Bucket {
            entries: Vec::new(),
            forward: Some(to),
        }
    }

    /// Where the entries moved, if they did.
    pub fn forward(&self) -> Option<BucketRef> {
        self.forward
    }

    /// The entries, in the order they were first set.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `key`'s value.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets `key` to `value`; whether the key was there.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> bool {
        debug_assert!(self.forward.is_none(), "a forwarding bucket holds no entry");
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => {
                value.clone_into(v);
                true
            }
            None => {
                self.entries.push((key.to_vec(), value.to_vec()));
                false
            }
        }
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| k != key);
        self.entries.len() != before
    }

    /// Bytes of the encoding before padding.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES
            + self
                .entries
                .iter()
                .map(|(k, v)| ENTRY_HEADER_BYTES + k.len() + v.len())
                .sum::<usize>()
    }

    /// The encoding, padded to `len` bytes (a class, at least
    /// [`Bucket::encoded_len`]).
    pub fn encode(&self, len: u32) -> Vec<u8> {
        let used = self.encoded_len();
        assert!(used <= len as usize, "{used} bytes do not fit {len}");
        assert!(self.entries.len() <= usize::from(u16::MAX));
        let mut out = Vec::with_capacity(len as usize);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&((used - HEADER_BYTES) as u32).to_le_bytes());
        out.extend_from_slice(&self.forward.map_or(0, BucketRef::raw).to_le_bytes());
        for (k, v) in &self.entries {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
        out.resize(len as usize, 0);
        out
    }

    /// Decodes a bucket's bytes; anything this code does not write is an
    /// error (never a panic: the bytes come from DM).
    pub fn decode(bytes: &[u8]) -> Result<Bucket, BucketError> {
        let corrupt = |why: String| BucketError::Corrupt(why);
        if bytes.len() < HEADER_BYTES {
            return Err(corrupt(format!("{} bytes, shorter than a header", bytes.len())));
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let format = u16_at(0);
        if format != FORMAT {
            return Err(corrupt(format!("format {format}, not {FORMAT}")));
        }
        let count = usize::from(u16_at(2));
        let used = u32_at(4) as usize;
        let end = HEADER_BYTES
            .checked_add(used)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| corrupt(format!("{used} bytes of entries past its {} bytes", bytes.len())))?;
        let forward = match fabric::le_word(bytes, 8) {
            0 => None,
            raw => Some(BucketRef::from_raw(raw)?),
        };
        if forward.is_some() && count != 0 {
            return Err(corrupt("a forward with entries".into()));
        }
        let mut entries = Vec::with_capacity(count.min(bytes.len() / ENTRY_HEADER_BYTES));
        let mut at = HEADER_BYTES;
        for i in 0..count {
            if at + ENTRY_HEADER_BYTES > end {
                return Err(corrupt(format!("entry {i} past the used length")));
            }
            let (klen, vlen) = (u32_at(at) as usize, u32_at(at + 4) as usize);
            let start = at + ENTRY_HEADER_BYTES;
            let stop = start
                .checked_add(klen)
                .and_then(|s| s.checked_add(vlen))
                .filter(|&s| s <= end)
                .ok_or_else(|| corrupt(format!("entry {i} past the used length")))?;
            entries.push((
                bytes[start..start + klen].to_vec(),
                bytes[start + klen..stop].to_vec(),
            ));
            at = stop;
        }
        if at != end {
            return Err(corrupt(format!("{} bytes after the last entry", end - at)));
        }
        Ok(Bucket { entries, forward })
    }
}

/// The index key of a Redis key: a fixed 64-bit hash (xxh3, seed 0:
/// every gateway of every version must agree), moved off the two values
/// an index reserves.
pub fn index_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key).clamp(1, u64::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_encoding() {
        let r = BucketRef::new(0x1234_5670, 3);
        assert_eq!(r.raw(), 0x0003_0000_1234_5670);
        assert_eq!(BucketRef::from_raw(r.raw()), Ok(r));
        assert_eq!(
            BucketRef::new(OFFSET_MASK & !0xf, CLASSES - 1).raw() >> RESERVED_SHIFT,
            0
        );
        for bad in [0, 0x10, 1 << 52, 0x000b_0000_0000_0010, 0x0001_0000_0000_0018] {
            let expect_ok = bad == 0x10;
            assert_eq!(BucketRef::from_raw(bad).is_ok(), expect_ok, "{bad:#x}");
        }
        let obj = r.obj(7);
        assert_eq!(
            (obj.meta.region(), obj.meta.offset(), obj.len),
            (7, 0x1234_5670, 512)
        );
        assert_eq!(BucketRef::of(obj), r);
    }

    #[test]
    fn classes() {
        assert_eq!(class_for(0), Some(0));
        assert_eq!(class_for(64), Some(0));
        assert_eq!(class_for(65), Some(1));
        assert_eq!(class_for(BUCKET_BYTES_MAX as usize), Some(CLASSES - 1));
        assert_eq!(class_for(BUCKET_BYTES_MAX as usize + 1), None);
        assert_eq!(BUCKET_BYTES_MAX, 64 * 1024);
        // The longest key and value fit twice (two colliding keys).
        let entry = ENTRY_HEADER_BYTES + KEY_BYTES_MAX + VALUE_BYTES_MAX;
        assert!(HEADER_BYTES + 2 * entry <= BUCKET_BYTES_MAX as usize);
    }

    #[test]
    fn bucket_encoding() {
        let mut b = Bucket::default();
        assert!(!b.set(b"key:1", b"xxx"));
        assert!(!b.set(b"k2", b""));
        assert!(b.set(b"key:1", b"yy"));
        let bytes = b.encode(64);
        assert_eq!(bytes.len(), 64);
        assert_eq!(&bytes[..8], &[1, 0, 2, 0, 25, 0, 0, 0]);
        assert_eq!(&bytes[8..16], &[0; 8]);
        assert_eq!(&bytes[16..24], &[5, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&bytes[24..31], b"key:1yy");
        assert_eq!(b.encoded_len(), 16 + 15 + 10);
        let back = Bucket::decode(&bytes).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.get(b"key:1"), Some(&b"yy"[..]));
        assert_eq!(back.get(b"key:"), None);
        let mut gone = back.clone();
        assert!(gone.remove(b"key:1"));
        assert!(!gone.remove(b"key:1"));
        assert_eq!(gone.len(), 1);

        let f = Bucket::forwarding(BucketRef::new(0x40, 2));
        let back = Bucket::decode(&f.encode(64)).unwrap();
        assert_eq!(back.forward(), Some(BucketRef::new(0x40, 2)));
        assert!(back.is_empty());
    }

    #[test]
    fn malformed_buckets_are_errors() {
        let mut b = Bucket::default();
        b.set(b"a", b"b");
        let good = b.encode(64);
        let mut cases = Vec::new();
        cases.push(vec![]);
        let mut bad_format = good.clone();
        bad_format[0] = 9;
        cases.push(bad_format);
        let mut long_used = good.clone();
        long_used[4] = 200;
        cases.push(long_used);
        let mut long_key = good.clone();
        long_key[16] = 100;
        cases.push(long_key);
        let mut extra_count = good.clone();
        extra_count[2] = 2;
        cases.push(extra_count);
        let mut forward_and_entries = good.clone();
        forward_and_entries[8] = 0x40;
        cases.push(forward_and_entries);
        let mut short_used = good.clone();
        short_used[4] = 11;
        cases.push(short_used);
        for (i, c) in cases.iter().enumerate() {
            assert!(Bucket::decode(c).is_err(), "case {i} decoded");
        }
        assert!(Bucket::decode(&good).is_ok());
    }

    /// xxh3_64(b"key:000000000001"), seed 0.
    const PINNED: u64 = 1_066_742_571_024_034_039;

    #[test]
    fn index_keys_avoid_reserved_values() {
        let k = index_key(b"key:000000000001");
        assert!(k > 0 && k < u64::MAX);
        assert_eq!(k, index_key(b"key:000000000001"));
        assert_ne!(k, index_key(b"key:000000000002"));
        // Pinned: gateways of every version must map keys alike.
        assert_eq!(index_key(b"key:000000000001"), PINNED);
    }
}
