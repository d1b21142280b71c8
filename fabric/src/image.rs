//! The layout of a memory node's image: one header page that describes the
//! regions, then the regions, each page-aligned.
//!
//! The same layout is used in anonymous memory, in a `/dev/shm` file (so that
//! `shm` clients can attach knowing only the path) and in a `--persist` file
//! (so that a restarted node finds its regions where it left them).
//!
//! Header, little-endian u64 words:
//!
//! | word | field                                            |
//! |------|--------------------------------------------------|
//! | 0    | magic `KNTSUGI1`                                  |
//! | 1    | layout version                                   |
//! | 2    | epoch (updated in place with atomics)            |
//! | 3    | node id                                          |
//! | 4    | region count                                     |
//! | 5    | image bytes (header included)                    |
//! | 6, 7 | image id (low word, high word), random at creation |
//! | 8..  | region entries, 5 words each: id, offset, size, replica generation, access key |
//!
//! The image id is what makes an image itself, not its node: a node that
//! comes back with another id (restarted without its file, on a new tmpfs,
//! on a replaced disk) is a new, empty node whatever its endpoint, and its
//! old replicas are never served. The replica generation of an entry is the
//! generation the control plane named when this image last held the region
//! proven (`0`: allocated, not yet proven; [`GENERATION_RETIRED`]: retired,
//! its bytes free for another region); it and the access key are the
//! words of an entry that change, so each is written and read as one
//! atomic word.
//!
//! Regions that are held (not retired) never overlap. A retired region's
//! entry stays (entries are never removed while a node runs: a verb that
//! found one may still hold it, and its random key refuses it), and a
//! region placed later may take its bytes: a node that lost its replicas
//! (evicted while it was away) has room for new ones. A reader older than
//! retirement refuses such a table as corrupt, never misreads it.

use crate::addr::{AccessKey, NodeId, RegionId, ATOMIC_BYTES};

/// First word of every image.
pub const MAGIC: u64 = u64::from_le_bytes(*b"KNTSUGI1");
/// Bumped whenever this layout changes; an image of another version is refused.
/// Version 2 added the image id and the replica generations.
pub const LAYOUT_VERSION: u64 = 2;
/// The header occupies one page; regions start page-aligned.
pub const PAGE_BYTES: u64 = 4096;
/// Byte offset of the epoch word in the header.
pub const EPOCH_OFFSET: u64 = 2 * 8;
/// Byte offset of the region count in the header: a node that takes
/// regions while it serves writes the new entry first, then raises the
/// count with a CAS, so that an attached process that reads the count and
/// then the entries sees whole entries only.
pub const REGION_COUNT_OFFSET: u64 = 4 * 8;
/// Byte offset of the image id's low word; its high word follows.
pub const IMAGE_ID_OFFSET: u64 = 6 * 8;
const FIXED_WORDS: u64 = 8;
const ENTRY_WORDS: u64 = 5;
/// Regions one memory node can hold: as many entries as fit the header page
/// after the fixed words, rounded down to a power of two.
pub const REGIONS_PER_NODE_MAX: usize = 64;
const _: () = assert!(
    (FIXED_WORDS + ENTRY_WORDS * REGIONS_PER_NODE_MAX as u64) * 8 <= PAGE_BYTES,
    "region table must fit the header page"
);
/// The replica generation word of a retired entry: its region is not held
/// any more and its bytes may be given to another region.
pub const GENERATION_RETIRED: u64 = u64::MAX;
/// Smallest region: one atomic word. Regions are sized in whole words so that
/// every aligned word inside a region is inside it.
pub const REGION_BYTES_MIN: u64 = ATOMIC_BYTES;
/// Largest region. 48-bit offsets allow more; this bound keeps a typo in a
/// size (`1PiB`) from mapping absurd amounts of address space.
pub const REGION_BYTES_MAX: u64 = 1 << 40;

/// The identity of one memory image: 128 random bits drawn when the image is
/// made and kept in its header for its whole life (see the module docs).
/// Shown and parsed as 32 hex digits; 0 is never drawn ("no image").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageId(pub u128);

impl ImageId {
    /// A fresh id: random, never 0.
    pub fn random() -> ImageId {
        loop {
            let id: u128 = rand::random();
            if id != 0 {
                return ImageId(id);
            }
        }
    }

    /// Its two header words, low first.
    pub fn words(self) -> [u64; 2] {
        [self.0 as u64, (self.0 >> 64) as u64]
    }

    /// From its two header words, low first.
    pub fn from_words(low: u64, high: u64) -> ImageId {
        ImageId(u128::from(low) | (u128::from(high) << 64))
    }
}

impl std::fmt::Display for ImageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::str::FromStr for ImageId {
    type Err = String;
    fn from_str(s: &str) -> Result<ImageId, String> {
        if s.len() != 32 {
            return Err(format!("an image id is 32 hex digits, not {:?}", s));
        }
        u128::from_str_radix(s, 16)
            .map(ImageId)
            .map_err(|e| format!("an image id is 32 hex digits: {e}"))
    }
}

impl serde::Serialize for ImageId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ImageId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ImageId, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One region as the header records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionEntry {
    /// Region id.
    pub id: RegionId,
    /// Byte offset of the region inside the image.
    pub image_offset: u64,
    /// Region size in bytes.
    pub size: u64,
    /// Access key verbs must present.
    pub key: AccessKey,
}

/// The header of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The image's identity.
    pub image: ImageId,
    /// Epoch at encoding time (live value is read atomically from the image).
    pub epoch: u64,
    /// The node's id.
    pub node: NodeId,
    /// Regions, in image order.
    pub regions: Vec<RegionEntry>,
    /// Total bytes of the image.
    pub image_bytes: u64,
}

/// Why an image header could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Not a kintsugi image.
    #[error("not a kintsugi memory image (bad magic)")]
    BadMagic,
    /// Written by another layout version.
    #[error("memory image has layout version {found}, this build reads {LAYOUT_VERSION}")]
    Version {
        /// Version found.
        found: u64,
    },
    /// Fields that contradict each other or the file size.
    #[error("memory image header is corrupt: {0}")]
    Corrupt(&'static str),
}

impl Header {
    /// Lays out regions of the given `(id, size, key)` back to back after the
    /// header page, each starting on a page boundary.
    ///
    /// # Panics
    /// On more than [`REGIONS_PER_NODE_MAX`] regions or a size outside
    /// [`REGION_BYTES_MIN`]..=[`REGION_BYTES_MAX`]: callers validate input first.
    pub fn layout(node: NodeId, epoch: u64, regions: &[(RegionId, u64, AccessKey)]) -> Header {
        assert!(regions.len() <= REGIONS_PER_NODE_MAX);
        let mut offset = PAGE_BYTES;
        let mut entries = Vec::with_capacity(regions.len());
        for &(id, size, key) in regions {
            assert!((REGION_BYTES_MIN..=REGION_BYTES_MAX).contains(&size));
            assert!(size % ATOMIC_BYTES == 0);
            entries.push(RegionEntry {
                id,
                image_offset: offset,
                size,
                key,
            });
            offset += size.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        }
        Header {
            image: ImageId::random(),
            epoch,
            node,
            regions: entries,
            image_bytes: offset,
        }
    }

    /// A header with no region yet and room for `capacity_bytes` of them
    /// (rounded up to whole pages): a node whose regions the control plane
    /// places while it serves.
    ///
    /// # Panics
    /// If the capacity is above `REGIONS_PER_NODE_MAX` × `REGION_BYTES_MAX`
    /// (callers validate it first).
    pub fn with_capacity(node: NodeId, epoch: u64, capacity_bytes: u64) -> Header {
        assert!(capacity_bytes <= REGIONS_PER_NODE_MAX as u64 * REGION_BYTES_MAX);
        Header {
            image: ImageId::random(),
            epoch,
            node,
            regions: Vec::new(),
            image_bytes: PAGE_BYTES + capacity_bytes.div_ceil(PAGE_BYTES) * PAGE_BYTES,
        }
    }

    /// Where the next region goes: page-aligned after the last one.
    pub fn next_free(regions: &[RegionEntry]) -> u64 {
        regions.last().map_or(PAGE_BYTES, |r| {
            r.image_offset + r.size.div_ceil(PAGE_BYTES) * PAGE_BYTES
        })
    }

    /// The lowest page-aligned offset where `size` bytes fit in an image of
    /// `image_bytes` without overlapping any of `held` (the regions not
    /// retired), the header page excluded: first fit. `None`: no room.
    pub fn first_fit(held: &[RegionEntry], size: u64, image_bytes: u64) -> Option<u64> {
        let mut taken: Vec<(u64, u64)> = held
            .iter()
            .map(|r| {
                (
                    r.image_offset,
                    r.image_offset + r.size.div_ceil(PAGE_BYTES) * PAGE_BYTES,
                )
            })
            .collect();
        taken.sort_unstable();
        let mut at = PAGE_BYTES;
        for (start, end) in taken {
            if at.checked_add(size).is_some_and(|e| e <= start) {
                break;
            }
            at = at.max(end);
        }
        at.checked_add(size).filter(|&end| end <= image_bytes).map(|_| at)
    }

    /// Whether `a` and `b` share a byte.
    pub fn overlap(a: &RegionEntry, b: &RegionEntry) -> bool {
        a.image_offset < b.image_offset + b.size && b.image_offset < a.image_offset + a.size
    }

    /// Byte offset of entry `i` of the region table in the header page.
    pub fn entry_offset(i: usize) -> u64 {
        assert!(i < REGIONS_PER_NODE_MAX);
        (FIXED_WORDS + i as u64 * ENTRY_WORDS) * 8
    }

    /// Byte offset of entry `i`'s access key: its last word, one of the
    /// two words of an entry that change (a region placed here again is
    /// re-keyed), so it is written and read as one atomic word.
    pub fn key_offset(i: usize) -> u64 {
        Self::entry_offset(i) + (ENTRY_WORDS - 1) * 8
    }

    /// Byte offset of entry `i`'s replica generation: the other word that
    /// changes (module docs), written and read as one atomic word.
    pub fn generation_offset(i: usize) -> u64 {
        Self::entry_offset(i) + (ENTRY_WORDS - 2) * 8
    }

    /// Bytes of one region entry.
    pub const ENTRY_BYTES: usize = (ENTRY_WORDS * 8) as usize;

    /// The words of one region entry, as [`Header::encode`] lays them out,
    /// with replica generation 0 (not yet proven).
    pub fn encode_entry(r: &RegionEntry) -> [u8; Self::ENTRY_BYTES] {
        let mut out = [0u8; Self::ENTRY_BYTES];
        for (i, w) in [u64::from(r.id), r.image_offset, r.size, 0, u64::from(r.key)]
            .iter()
            .enumerate()
        {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Encodes into the first page of an image.
    pub fn encode(&self) -> [u8; PAGE_BYTES as usize] {
        let mut page = [0u8; PAGE_BYTES as usize];
        let [image_low, image_high] = self.image.words();
        let words = [
            MAGIC,
            LAYOUT_VERSION,
            self.epoch,
            u64::from(self.node),
            self.regions.len() as u64,
            self.image_bytes,
            image_low,
            image_high,
        ];
        for (i, w) in words.iter().enumerate() {
            page[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        for (i, r) in self.regions.iter().enumerate() {
            let at = Self::entry_offset(i) as usize;
            page[at..at + Self::ENTRY_BYTES].copy_from_slice(&Self::encode_entry(r));
        }
        page
    }

    /// Decodes and validates a header page against the image's real size.
    pub fn decode(page: &[u8], file_bytes: u64) -> Result<Header, HeaderError> {
        if page.len() < PAGE_BYTES as usize {
            return Err(HeaderError::Corrupt("shorter than one page"));
        }
        let word = |i: u64| {
            let i = i as usize * 8;
            let mut b = [0u8; 8];
            b.copy_from_slice(&page[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if word(0) != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        if word(1) != LAYOUT_VERSION {
            return Err(HeaderError::Version { found: word(1) });
        }
        let node = NodeId::try_from(word(3)).map_err(|_| HeaderError::Corrupt("node id"))?;
        let image = ImageId::from_words(word(6), word(7));
        if image.0 == 0 {
            return Err(HeaderError::Corrupt("no image id"));
        }
        let count = word(4);
        if count > REGIONS_PER_NODE_MAX as u64 {
            return Err(HeaderError::Corrupt("too many regions"));
        }
        let image_bytes = word(5);
        if image_bytes > file_bytes {
            return Err(HeaderError::Corrupt("image larger than its file"));
        }
        let mut regions = Vec::with_capacity(count as usize);
        let mut held: Vec<RegionEntry> = Vec::with_capacity(count as usize);
        for r in 0..count {
            let base = FIXED_WORDS + r * ENTRY_WORDS;
            let id = RegionId::try_from(word(base)).map_err(|_| HeaderError::Corrupt("region id"))?;
            let key = AccessKey::try_from(word(base + ENTRY_WORDS - 1))
                .map_err(|_| HeaderError::Corrupt("region key"))?;
            let entry = RegionEntry {
                id,
                image_offset: word(base + 1),
                size: word(base + 2),
                key,
            };
            let end = entry.image_offset.checked_add(entry.size);
            if entry.image_offset < PAGE_BYTES
                || entry.image_offset % PAGE_BYTES != 0
                || !(REGION_BYTES_MIN..=REGION_BYTES_MAX).contains(&entry.size)
                || entry.size % ATOMIC_BYTES != 0
                || end.is_none_or(|end| end > image_bytes)
            {
                return Err(HeaderError::Corrupt("region table"));
            }
            if regions.iter().any(|e: &RegionEntry| e.id == id) {
                return Err(HeaderError::Corrupt("duplicate region id"));
            }
            // Held regions never overlap; a retired one's bytes may be
            // another's (module docs).
            if word(base + ENTRY_WORDS - 2) != GENERATION_RETIRED {
                if held.iter().any(|e| Header::overlap(e, &entry)) {
                    return Err(HeaderError::Corrupt("overlapping regions"));
                }
                held.push(entry);
            }
            regions.push(entry);
        }
        Ok(Header {
            image,
            epoch: word(2),
            node,
            regions,
            image_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_is_bit_exact() {
        let h = Header::layout(7, 3, &[(1, 4096, 0xAA), (9, 10_000, 0xBB)]);
        assert_eq!(h.regions[0].image_offset, 4096);
        assert_eq!(h.regions[1].image_offset, 8192);
        assert_eq!(h.image_bytes, 8192 + 12_288);
        let page = h.encode();
        assert_eq!(&page[0..8], b"KNTSUGI1");
        assert_eq!(page[EPOCH_OFFSET as usize], 3);
        assert_eq!(page[24], 7); // node id, word 3
        let image = h.image.words();
        assert_eq!(&page[48..56], &image[0].to_le_bytes()); // image id low, word 6
        assert_eq!(&page[56..64], &image[1].to_le_bytes()); // image id high, word 7
        assert_eq!(page[64], 1); // first region id, word 8
        assert_eq!(&page[64 + 24..64 + 32], &[0; 8], "a new entry's generation is 0");
        assert_eq!(page[64 + 32], 0xAA, "the key is the entry's fifth word");
        assert_eq!(Header::decode(&page, h.image_bytes).unwrap(), h);
    }

    #[test]
    fn a_retired_regions_bytes_are_free_and_held_ones_never_overlap() {
        let h = Header::layout(7, 3, &[(1, 8192, 0xAA), (2, 4096, 0xBB)]);
        let (one, two) = (h.regions[0], h.regions[1]);
        // First fit: after the held regions, or in a gap a retired one left.
        assert_eq!(
            Header::first_fit(&[one, two], 4096, 1 << 20),
            Some(4096 + 8192 + 4096)
        );
        assert_eq!(Header::first_fit(&[two], 8192, 1 << 20), Some(4096));
        assert_eq!(
            Header::first_fit(&[two], 12_288, 1 << 20),
            Some(4096 + 8192 + 4096)
        );
        assert_eq!(Header::first_fit(&[one, two], 1 << 20, 1 << 20), None);
        assert_eq!(Header::first_fit(&[], 4096, 8192), Some(4096));
        // A third region on the first's bytes: corrupt unless the first is
        // retired.
        let mut h3 = h.clone();
        h3.regions.push(RegionEntry {
            id: 3,
            image_offset: 4096,
            size: 8192,
            key: 0xCC,
        });
        let mut page = h3.encode();
        assert_eq!(
            Header::decode(&page, h3.image_bytes),
            Err(HeaderError::Corrupt("overlapping regions"))
        );
        let at = Header::generation_offset(0) as usize;
        page[at..at + 8].copy_from_slice(&GENERATION_RETIRED.to_le_bytes());
        assert_eq!(Header::decode(&page, h3.image_bytes).unwrap().regions, h3.regions);
    }

    #[test]
    fn image_ids_are_random_and_round_trip_as_hex() {
        let (a, b) = (ImageId::random(), ImageId::random());
        assert_ne!(a, b, "two images never share an id");
        let [low, high] = a.words();
        assert_eq!(ImageId::from_words(low, high), a);
        let shown = ImageId(0x0123_4567_89ab_cdef_0011_2233_4455_6677).to_string();
        assert_eq!(shown, "0123456789abcdef0011223344556677");
        assert_eq!(shown.parse::<ImageId>().unwrap().to_string(), shown);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<ImageId>(&json).unwrap(), a);
        assert!("12".parse::<ImageId>().is_err());
        assert!("zz23456789abcdef0011223344556677".parse::<ImageId>().is_err());
    }

    #[test]
    fn an_image_without_an_id_is_refused() {
        let h = Header::layout(1, 1, &[(1, 4096, 1)]);
        let mut page = h.encode();
        page[IMAGE_ID_OFFSET as usize..IMAGE_ID_OFFSET as usize + 16].fill(0);
        assert_eq!(
            Header::decode(&page, h.image_bytes),
            Err(HeaderError::Corrupt("no image id"))
        );
    }

    #[test]
    fn a_capacity_header_starts_empty_and_entries_land_where_encode_puts_them() {
        let mut h = Header::with_capacity(3, 1, 10_000);
        assert_eq!(h.image_bytes, 4096 + 12_288);
        assert_eq!(Header::next_free(&h.regions), 4096);
        assert_eq!(REGION_COUNT_OFFSET, 32);
        let e = RegionEntry {
            id: 5,
            image_offset: 4096,
            size: 4104,
            key: 0xCC,
        };
        h.regions.push(e);
        assert_eq!(Header::next_free(&h.regions), 4096 + 8192);
        let page = h.encode();
        let at = Header::entry_offset(0) as usize;
        assert_eq!(at, 64);
        assert_eq!(&page[at..at + Header::ENTRY_BYTES], &Header::encode_entry(&e));
        let key = Header::key_offset(0) as usize;
        assert_eq!((key, page[key]), (96, 0xCC), "the key is the entry's last word");
        assert_eq!(
            Header::generation_offset(0),
            88,
            "the generation is the word before it"
        );
        assert_eq!(Header::entry_offset(1), 64 + 40);
        assert_eq!(page[REGION_COUNT_OFFSET as usize], 1);
        assert_eq!(Header::decode(&page, h.image_bytes).unwrap(), h);
    }

    #[test]
    fn corrupt_headers_are_refused() {
        let h = Header::layout(1, 1, &[(1, 4096, 1)]);
        let mut page = h.encode();
        assert_eq!(
            Header::decode(&page, 100),
            Err(HeaderError::Corrupt("image larger than its file"))
        );
        page[8] = 9;
        assert_eq!(
            Header::decode(&page, h.image_bytes),
            Err(HeaderError::Version { found: 9 })
        );
        page[0] = 0;
        assert_eq!(Header::decode(&page, h.image_bytes), Err(HeaderError::BadMagic));
        let mut page = h.encode();
        page[8 * 8 + 8] = 1; // region offset 4097: unaligned
        assert!(Header::decode(&page, u64::MAX).is_err());
    }
}
