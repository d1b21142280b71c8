//! The bytes behind a memory node: one `mmap`, anonymous or file-backed,
//! touched only through atomic accesses.
//!
//! This is the only module with `unsafe`. The mapping is shared with other
//! threads, other processes (the `shm` transport) and remote clients (the
//! `tcp` server), so no Rust reference to its bytes is ever formed: every
//! access goes through a raw pointer as a relaxed or sequentially consistent
//! atomic. Bulk READ and WRITE are copied word by word with relaxed atomics;
//! they are therefore not atomic as a whole, which is exactly the DM model
//! (a concurrent READ may see a torn object and must detect it).
//!
//! Invariant: every access is bounds-checked here with `assert!`, even though
//! the memory node checks every verb first. The node's checks produce error
//! completions; these asserts are what keep memory safety independent of them.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use memmap2::{MmapOptions, MmapRaw};

const WORD: usize = 8;

/// What pages are mapped in for ahead of use: a mapping populated for
/// reading is cheaper to set up (no page is marked dirty), and enough for
/// a process that only reads through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageAccess {
    /// Loads only.
    Read,
    /// Loads and stores.
    Write,
}

/// A mapping shared with whoever else maps the same file.
pub(crate) struct SharedMemory {
    map: MmapRaw,
    file: Option<File>,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("len", &self.len())
            .field("file_backed", &self.file.is_some())
            .finish()
    }
}

impl SharedMemory {
    /// Zeroed private memory (for the in-process transport and tcp-only nodes).
    pub(crate) fn anonymous(len: usize) -> io::Result<Self> {
        // MAP_NORESERVE: reserve address space without committing it, so a
        // region sized for the worst case is refused by nothing but the
        // pages actually touched (the heuristic overcommit check refuses
        // one mapping larger than RAM + swap with ENOMEM otherwise).
        let map = MmapOptions::new().len(len).no_reserve_swap().map_anon()?;
        Ok(SharedMemory {
            map: MmapRaw::from(map),
            file: None,
        })
    }

    /// Creates (or truncates) `path` to `len` zero bytes and maps it shared.
    pub(crate) fn create_file(path: &Path, len: usize) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(len as u64)?;
        Self::map_file(file)
    }

    /// Maps an existing file, whole.
    pub(crate) fn open_file(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Self::map_file(file)
    }

    fn map_file(file: File) -> io::Result<Self> {
        let map = MmapOptions::new().map_raw(&file)?;
        Ok(SharedMemory {
            map,
            file: Some(file),
        })
    }

    /// Allocates every page of the mapping and maps it writable now, so
    /// that no later access takes a page fault: what registering memory
    /// with an RDMA NIC does (it pins every page). Linux only; elsewhere a
    /// no-op.
    pub(crate) fn populate(&self) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        self.map.advise(memmap2::Advice::PopulateWrite)?;
        Ok(())
    }

    /// [`SharedMemory::populate`] for the pages covering `len` bytes at
    /// `offset` (bounds asserted), mapped for `access`.
    pub(crate) fn populate_range(&self, offset: usize, len: usize, access: PageAccess) -> io::Result<()> {
        self.check(offset, len);
        #[cfg(target_os = "linux")]
        {
            // madvise takes page-aligned starts; the mapping is page-aligned.
            let page = crate::image::PAGE_BYTES as usize;
            let start = offset / page * page;
            let end = (offset + len).next_multiple_of(page).min(self.map.len());
            if end > start {
                let advice = match access {
                    PageAccess::Read => memmap2::Advice::PopulateRead,
                    PageAccess::Write => memmap2::Advice::PopulateWrite,
                };
                self.map.advise_range(advice, start, end - start)?;
            }
        }
        Ok(())
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The address of the first mapped byte, for registering the mapping
    /// with an RDMA device (which then reads and writes it itself).
    #[cfg(feature = "rdma")]
    pub(crate) fn base_addr(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// True when the bytes live in a file that outlives the process.
    pub(crate) fn is_file_backed(&self) -> bool {
        self.file.is_some()
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len()),
            "access {offset}+{len} outside mapping of {} bytes",
            self.len()
        );
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, WORD);
        assert!(offset % WORD == 0, "atomic access at unaligned offset {offset}");
        // SAFETY: the range is inside the live mapping (checked above) and
        // 8-byte aligned (the mapping is page-aligned and `offset` is a
        // multiple of 8). The mapping lives as long as `self`, which bounds the
        // returned reference. All accesses to this memory from this process go
        // through atomics; other processes mapping the file do the same.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u64>()) }
    }

    /// Atomic load of an aligned word.
    pub(crate) fn load(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::SeqCst)
    }

    /// Compare-and-swap on an aligned word; returns the previous value.
    pub(crate) fn cas(&self, offset: usize, expect: u64, new: u64) -> u64 {
        match self
            .word(offset)
            .compare_exchange(expect, new, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(old) | Err(old) => old,
        }
    }

    /// Fetch-and-add (wrapping) on an aligned word; returns the previous value.
    pub(crate) fn faa(&self, offset: usize, add: u64) -> u64 {
        self.word(offset).fetch_add(add, Ordering::SeqCst)
    }

    /// Starts loading `[offset, offset + len)` into the CPU cache without
    /// waiting for it. A NIC works on the verbs of one doorbell batch in
    /// parallel; prefetching the targets of the verbs ahead of the one
    /// running (in groups of `memnode::PREFETCH_GROUP_VERBS`) lets the CPU
    /// overlap their cache misses the same way, instead of taking them one
    /// verb after another. `write` asks for the lines in exclusive
    /// state, as a store needs them. Out-of-range requests do nothing.
    pub(crate) fn prefetch(&self, offset: usize, len: usize, write: bool) {
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return;
        }
        // SAFETY: `[offset - offset % LINE_BYTES, offset + len)` lies inside
        // the live mapping (checked above; the mapping is page-aligned).
        unsafe {
            prefetch_lines(
                self.map.as_ptr(),
                offset - offset % LINE_BYTES,
                offset + len,
                write,
            )
        };
    }

    /// [`SharedMemory::prefetch`] of every range, back to back: the
    /// prefetch instructions then sit in the core's reorder window together
    /// and their misses (and page walks) overlap, which they do not when
    /// each follows the bookkeeping of its verb.
    pub(crate) fn prefetch_all(&self, ranges: &[PrefetchRange]) {
        for r in ranges {
            self.prefetch(r.offset, r.len, r.write);
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the mapping.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) {
        if dst.len() == WORD && offset % WORD == 0 {
            // The most common READ (a key, a lock word) is one aligned word.
            dst.copy_from_slice(&self.load(offset).to_le_bytes());
            return;
        }
        self.check(offset, dst.len());
        let base = self.map.as_mut_ptr();
        let (head, words, tail) = split_aligned(offset, dst.len());
        for (i, b) in dst[..head].iter_mut().enumerate() {
            // SAFETY: `offset + i` < `offset + dst.len()`, inside the mapping
            // (checked above); a byte is always aligned; the reference does
            // not outlive this statement.
            *b = unsafe { AtomicU8::from_ptr(base.add(offset + i)) }.load(Ordering::Relaxed);
        }
        for (w, chunk) in dst[head..head + words * WORD].chunks_exact_mut(WORD).enumerate() {
            // SAFETY: in bounds as above; `offset + head` is a multiple of 8
            // by construction of `split_aligned` and the mapping is
            // page-aligned, so the word is 8-byte aligned.
            let v = unsafe { AtomicU64::from_ptr(base.add(offset + head + w * WORD).cast::<u64>()) }
                .load(Ordering::Relaxed);
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        let start = head + words * WORD;
        for (i, b) in dst[start..start + tail].iter_mut().enumerate() {
            // SAFETY: in bounds as above; bytes are always aligned.
            *b = unsafe { AtomicU8::from_ptr(base.add(offset + start + i)) }.load(Ordering::Relaxed);
        }
    }

    /// Copies `src` into the mapping starting at `offset`.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        let base = self.map.as_mut_ptr();
        let (head, words, tail) = split_aligned(offset, src.len());
        for (i, b) in src[..head].iter().enumerate() {
            // SAFETY: as in `read`.
            unsafe { AtomicU8::from_ptr(base.add(offset + i)) }.store(*b, Ordering::Relaxed);
        }
        for (w, chunk) in src[head..head + words * WORD].chunks_exact(WORD).enumerate() {
            let mut v = [0u8; WORD];
            v.copy_from_slice(chunk);
            // SAFETY: as in `read`: in bounds and 8-byte aligned.
            unsafe { AtomicU64::from_ptr(base.add(offset + head + w * WORD).cast::<u64>()) }
                .store(u64::from_le_bytes(v), Ordering::Relaxed);
        }
        let start = head + words * WORD;
        for (i, b) in src[start..start + tail].iter().enumerate() {
            // SAFETY: as in `read`.
            unsafe { AtomicU8::from_ptr(base.add(offset + start + i)) }.store(*b, Ordering::Relaxed);
        }
    }

    /// Makes `len` bytes at `offset` durable in the backing file (msync).
    /// Anonymous memory has nothing to flush to.
    pub(crate) fn flush(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len);
        if self.file.is_none() || len == 0 {
            return Ok(());
        }
        self.map.flush_range(offset, len)
    }
}

/// Splits `len` bytes at `offset` into a byte-wise head up to the first
/// 8-byte boundary, whole words, and a byte-wise tail.
fn split_aligned(offset: usize, len: usize) -> (usize, usize, usize) {
    let head = ((WORD - offset % WORD) % WORD).min(len);
    let words = (len - head) / WORD;
    (head, words, len - head - words * WORD)
}

/// Bytes of the mapping a verb will touch, for [`SharedMemory::prefetch_all`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PrefetchRange {
    /// First byte, from the start of the mapping.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    /// Ask for the lines in exclusive state (a store follows).
    pub write: bool,
}

/// Lines one prefetch asks for: a 1 KiB node; the hardware prefetcher
/// streams longer copies on its own.
const PREFETCH_LINES_MAX: usize = 16;

/// A cache line.
const LINE_BYTES: usize = 64;

/// Starts loading the cache lines of `[base + first, base + end)`, at most
/// [`PREFETCH_LINES_MAX`] of them, in exclusive state when `write` (as a
/// store needs them).
///
/// # Safety
///
/// `[base + first, base + end)` must lie inside one allocation, so that the
/// pointer arithmetic stays in it.
unsafe fn prefetch_lines(base: *const u8, first: usize, end: usize, write: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        for line in (first..end).step_by(LINE_BYTES).take(PREFETCH_LINES_MAX) {
            // SAFETY: `line` < `end`, inside the allocation (the caller's
            // contract).
            let p = unsafe { base.add(line) }.cast::<i8>();
            // SAFETY: a prefetch is a hint that changes cache state only: it
            // never faults and nothing the program reads depends on it.
            unsafe {
                if write {
                    _mm_prefetch::<_MM_HINT_ET0>(p);
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(p);
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, first, end, write);
}

/// Starts loading the cache lines of `items`, this process's own memory,
/// without waiting for them: for client-side structures a lookup will read
/// after work it can overlap with (the B+tree's leaf hints, read after the
/// binary search of their node). At most 16 lines, as
/// `SharedMemory::prefetch`.
pub fn prefetch_local<T>(items: &[T]) {
    // SAFETY: `[0, size_of_val(items))` is the slice itself.
    unsafe { prefetch_lines(items.as_ptr().cast(), 0, std::mem::size_of_val(items), false) };
}

/// Raw access to a mapped region, for benchmarks' baselines: what a verb
/// does to memory (a copy, an atomic), without the verb. Unlike
/// the memory node's `SharedMemory`, a cell's bytes are copied with `copy_nonoverlapping`,
/// as plain code would: the baseline is plain code on the same memory.
pub struct RawRegion {
    map: MmapRaw,
    /// Where the region starts in the mapping, and its size.
    base: usize,
    len: usize,
}

impl std::fmt::Debug for RawRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRegion").field("len", &self.len).finish()
    }
}

impl RawRegion {
    /// Fresh anonymous memory of `len` bytes (what an in-process memory
    /// node is made of).
    pub fn anonymous(len: usize) -> io::Result<RawRegion> {
        let map = MmapOptions::new().len(len).no_reserve_swap().map_anon()?;
        Ok(RawRegion {
            map: MmapRaw::from(map),
            base: 0,
            len,
        })
    }

    /// Region `region` of the memory image at `path`, mapped again.
    pub fn image_region(path: &Path, region: crate::RegionId) -> Result<RawRegion, crate::NodeError> {
        use crate::NodeError;
        use std::io::Read;
        let io = |context: &'static str| {
            move |source| NodeError::Io {
                context,
                path: path.to_owned(),
                source,
            }
        };
        let bad = |what: String| NodeError::Regions(format!("{}: {what}", path.display()));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io("cannot open memory image"))?;
        let file_bytes = file.metadata().map_err(io("cannot stat"))?.len();
        let mut page = vec![0u8; crate::image::PAGE_BYTES as usize];
        file.read_exact(&mut page)
            .map_err(io("cannot read the header of"))?;
        let header = crate::image::Header::decode(&page, file_bytes).map_err(|source| NodeError::Header {
            path: path.to_owned(),
            source,
        })?;
        let entry = header
            .regions
            .iter()
            .find(|r| r.id == region)
            .ok_or_else(|| bad(format!("holds no region {region}")))?;
        let map = MmapOptions::new().map_raw(&file).map_err(io("cannot map"))?;
        // The header was checked against the file size; check against the mapping too.
        let end = entry.image_offset.checked_add(entry.size);
        if end.is_none_or(|end| end > map.len() as u64) {
            return Err(bad(format!("region {region} lies past the end of the file")));
        }
        let base = usize::try_from(entry.image_offset).map_err(|_| bad("offset too large".into()))?;
        let len = usize::try_from(entry.size).map_err(|_| bad("region too large".into()))?;
        Ok(RawRegion { map, base, len })
    }

    /// The region's size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `len` bytes at `offset` of the region, or `None` if they are
    /// not all inside it.
    pub fn cell(&self, offset: u64, len: usize) -> Option<RawCell<'_>> {
        let offset = usize::try_from(offset).ok()?;
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: `base + offset + len` is inside the mapping: the region
        // lies inside it (checked when mapped) and the cell inside the
        // region (checked above).
        let ptr = unsafe { self.map.as_mut_ptr().add(self.base + offset) };
        Some(RawCell {
            ptr,
            len,
            _region: std::marker::PhantomData,
        })
    }
}

/// Bytes of a [`RawRegion`], valid while it is. Its user keeps other
/// threads of the process off its bytes (each baseline thread has its own
/// cells); other processes may touch them, as they may any DM.
#[derive(Debug)]
pub struct RawCell<'a> {
    ptr: *mut u8,
    len: usize,
    _region: std::marker::PhantomData<&'a RawRegion>,
}

impl<'a> RawCell<'a> {
    /// Copies the cell into `dst` (its length must be the cell's).
    #[inline(always)]
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len, "a copy takes the whole cell");
        // SAFETY: `ptr` points at `len` bytes inside the live mapping
        // (checked by `RawRegion::cell`; the borrow keeps the region
        // alive); the destination is a distinct, exclusively borrowed slice.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), self.len) };
    }

    /// Copies `src` (of the cell's length) into the cell.
    #[inline(always)]
    pub fn copy_from(&self, src: &[u8]) {
        assert_eq!(src.len(), self.len, "a copy fills the whole cell");
        // SAFETY: as for `copy_to`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr, self.len) };
    }

    /// The cell as an atomic word, if it is 8 bytes, 8-aligned; valid as
    /// long as the region is.
    pub fn word(&self) -> Option<&'a AtomicU64> {
        if self.len != WORD || (self.ptr as usize) % WORD != 0 {
            return None;
        }
        // SAFETY: 8 bytes, 8-aligned (checked above), inside the live
        // mapping; the mapping is only ever accessed atomically or by
        // copies the user keeps off this word.
        Some(unsafe { AtomicU64::from_ptr(self.ptr.cast::<u64>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_local_changes_nothing() {
        let v: Vec<u64> = (0..1000).collect();
        prefetch_local(&v);
        prefetch_local::<u64>(&[]);
        assert!(v.iter().copied().eq(0..1000));
    }

    #[test]
    fn raw_cells_are_bounded_copies_and_aligned_words() {
        let r = RawRegion::anonymous(4096).unwrap();
        assert!(r.cell(4090, 8).is_none() && r.cell(u64::MAX, 1).is_none());
        let c = r.cell(8, 8).unwrap();
        c.copy_from(&7u64.to_le_bytes());
        assert_eq!(c.word().unwrap().fetch_add(1, Ordering::SeqCst), 7);
        let mut out = [0; 8];
        c.copy_to(&mut out);
        assert_eq!(u64::from_le_bytes(out), 8);
        assert!(r.cell(4, 8).unwrap().word().is_none(), "misaligned");
        assert!(r.cell(8, 16).unwrap().word().is_none(), "not a word");
    }

    #[test]
    fn anonymous_memory_reserves_address_space_not_ram() {
        // Four times this machine's RAM: the heuristic overcommit check
        // (vm.overcommit_memory = 0, the default) refuses that as one
        // ordinary mapping, and accepts it as MAP_NORESERVE.
        let ram_kib: usize = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines().find_map(|l| {
                    l.strip_prefix("MemTotal:")?
                        .trim()
                        .strip_suffix("kB")?
                        .trim()
                        .parse()
                        .ok()
                })
            })
            .unwrap_or(1 << 20);
        let strict = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() == "2");
        let len = 4 * ram_kib * 1024;
        match SharedMemory::anonymous(len) {
            Ok(m) => {
                m.write(len - 8, &[1; 8]);
                let mut out = [0; 8];
                m.read(len - 8, &mut out);
                assert_eq!(out, [1; 8]);
            }
            // Strict accounting counts every mapping: refused, cleanly.
            Err(e) => assert!(strict, "{len} bytes of address space refused: {e}"),
        }
    }

    #[test]
    fn prefetch_changes_nothing_and_ignores_bad_ranges() {
        let m = SharedMemory::anonymous(4096).unwrap();
        m.write(0, &[7; 64]);
        for (offset, len, write) in [
            (0, 64, false),
            (4000, 96, true),
            (4095, 2, false),
            (usize::MAX, 1, true),
        ] {
            m.prefetch(offset, len, write);
        }
        let mut back = [0u8; 64];
        m.read(0, &mut back);
        assert_eq!(back, [7; 64]);
    }

    #[test]
    fn unaligned_copies_round_trip() {
        let m = SharedMemory::anonymous(4096).unwrap();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 100] {
            let src: Vec<u8> = (0..len as u8)
                .map(|b| b.wrapping_mul(37).wrapping_add(1))
                .collect();
            for start in 0..16 {
                m.write(0, &[0; 160]);
                m.write(start + 8, &src);
                let mut dst = vec![0u8; src.len()];
                m.read(start + 8, &mut dst);
                assert_eq!(dst, src, "start {start} len {len}");
                let mut around = vec![0u8; 160];
                m.read(0, &mut around);
                assert!(
                    around[..start + 8].iter().all(|&b| b == 0),
                    "wrote before the range"
                );
                assert!(
                    around[start + 8 + len..].iter().all(|&b| b == 0),
                    "wrote past the range"
                );
            }
        }
    }

    #[test]
    fn split_covers_the_range() {
        for offset in 0..20 {
            for len in 0..40 {
                let (h, w, t) = split_aligned(offset, len);
                assert_eq!(h + w * WORD + t, len);
                assert!(w == 0 || (offset + h) % WORD == 0);
                assert!(h < WORD && t < WORD || len < WORD);
            }
        }
    }

    #[test]
    fn words_are_little_endian_in_memory() {
        let m = SharedMemory::anonymous(4096).unwrap();
        m.write(8, &0x0102_0304_0506_0708u64.to_le_bytes());
        let mut b = [0u8; 8];
        m.read(8, &mut b);
        assert_eq!(b, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(m.cas(8, 0x0102_0304_0506_0708, 5), 0x0102_0304_0506_0708);
        assert_eq!(m.faa(8, 3), 5);
        assert_eq!(m.load(8), 8);
    }

    #[test]
    #[should_panic(expected = "outside mapping")]
    fn out_of_bounds_is_refused_even_past_the_node_checks() {
        let m = SharedMemory::anonymous(4096).unwrap();
        let mut b = [0u8; 16];
        m.read(4090, &mut b);
    }
}
