//! Phase 2 for local and shm: the same work done on raw memory.
//!
//! The same threads, the same slots, the same cells, the same kind of
//! memory: an anonymous mapping of the region's size for local (what an
//! in-process memory node is made of), and for shm the very image file the
//! fabric used, mapped again, at the region's offset in it. A "round trip"
//! is `--batch` plain operations: `AtomicU64::compare_exchange` /
//! `fetch_add` (SeqCst, as the memory node uses) for CAS / FAA, and
//! `copy_nonoverlapping` into / out of a per-thread buffer for READ / WRITE.

use std::fs::OpenOptions;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};
use fabric::image::{Header, PAGE_BYTES};
use fabric::RegionId;
use memmap2::{MmapOptions, MmapRaw};

use super::args::{OpArg, Plan};
use super::measure::{self, on_threads, Run, WARMUP_ROUND_TRIPS};
use super::workload::Workload;

/// Which memory the baseline runs on.
#[derive(Clone, Debug)]
pub enum Memory {
    /// Fresh anonymous memory of this many bytes.
    Anonymous(u64),
    /// A region of a memory image file.
    Image { path: PathBuf, region: RegionId },
}

impl Memory {
    pub fn describe(&self, op: OpArg) -> String {
        let what = match op {
            OpArg::Cas => "AtomicU64::compare_exchange",
            OpArg::Faa => "AtomicU64::fetch_add",
            OpArg::Read | OpArg::Write => "copy_nonoverlapping",
        };
        match self {
            Memory::Anonymous(_) => format!("{what} on an anonymous mapping"),
            Memory::Image { .. } => format!("{what} on the same image file, mapped directly"),
        }
    }
}

/// A mapped byte range the baseline works in.
struct Mapping {
    map: MmapRaw,
    /// Where the region starts in the mapping, and its size.
    base: usize,
    len: usize,
}

impl Mapping {
    fn open(memory: &Memory) -> anyhow::Result<Self> {
        match memory {
            Memory::Anonymous(bytes) => {
                let len = usize::try_from(*bytes)?;
                let map = MmapOptions::new()
                    .len(len)
                    .map_anon()
                    .with_context(|| format!("cannot map {len} bytes of anonymous memory"))?;
                Ok(Mapping {
                    map: MmapRaw::from(map),
                    base: 0,
                    len,
                })
            }
            Memory::Image { path, region } => open_image_region(path, *region),
        }
    }

    /// The address of byte `offset` of the region, checked against its end.
    fn at(&self, offset: u64, len: u64) -> anyhow::Result<*mut u8> {
        if offset.checked_add(len).is_none_or(|end| end > self.len as u64) {
            bail!(
                "baseline cell {offset}+{len} is outside the {}-byte region",
                self.len
            );
        }
        // SAFETY: `base + offset + len` is inside the mapping (the region lies
        // inside it, checked when mapped, and the cell inside the region).
        Ok(unsafe { self.map.as_mut_ptr().add(self.base + offset as usize) })
    }
}

fn open_image_region(path: &Path, region: RegionId) -> anyhow::Result<Mapping> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open memory image {}", path.display()))?;
    let file_bytes = file.metadata()?.len();
    let mut page = vec![0u8; PAGE_BYTES as usize];
    file.read_exact(&mut page)
        .with_context(|| format!("cannot read the header of {}", path.display()))?;
    let header = Header::decode(&page, file_bytes).with_context(|| path.display().to_string())?;
    let entry = header
        .regions
        .iter()
        .find(|r| r.id == region)
        .with_context(|| format!("{} holds no region {region}", path.display()))?;
    let map = MmapOptions::new()
        .map_raw(&file)
        .with_context(|| format!("cannot map {}", path.display()))?;
    // The header was checked against the file size; check against the mapping too.
    let end = entry.image_offset.checked_add(entry.size);
    if end.is_none_or(|end| end > map.len() as u64) {
        bail!(
            "region {region} of {} lies past the end of the file",
            path.display()
        );
    }
    Ok(Mapping {
        map,
        base: usize::try_from(entry.image_offset)?,
        len: usize::try_from(entry.size)?,
    })
}

/// One thread's cells as raw pointers, and its buffers.
struct MemWorker {
    op: OpArg,
    size: usize,
    cells: Vec<*mut u8>,
    expected: Vec<u64>,
    /// READ destination (`batch * size`, like a batch's result buffer) or
    /// WRITE source (`size`, written to every cell).
    buf: Vec<u8>,
    cas_failures: u64,
}

impl MemWorker {
    fn new(mapping: &Mapping, work: Workload, slot: usize) -> anyhow::Result<Self> {
        let size = work.size as usize;
        let cells = (0..work.batch)
            .map(|i| mapping.at(work.offset(slot, i), u64::from(work.size)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let buf = match work.op {
            OpArg::Read => vec![0; work.batch * size],
            _ => vec![slot as u8; size],
        };
        Ok(MemWorker {
            op: work.op,
            size,
            cells,
            expected: vec![0; work.batch],
            buf,
            cas_failures: 0,
        })
    }

    /// One "round trip": the batch's operations, back to back.
    #[inline(always)]
    fn round_trip(&mut self) {
        match self.op {
            OpArg::Read => {
                for (i, &cell) in self.cells.iter().enumerate() {
                    // SAFETY: `cell` points at `size` bytes inside the live
                    // mapping (checked by `Mapping::at`); this thread is the
                    // only one in this process touching its slot; the
                    // destination is this thread's own buffer.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            cell,
                            self.buf.as_mut_ptr().add(i * self.size),
                            self.size,
                        )
                    };
                }
                std::hint::black_box(&mut self.buf);
            }
            OpArg::Write => {
                for &cell in &self.cells {
                    // SAFETY: as for READ, with the roles swapped.
                    unsafe { std::ptr::copy_nonoverlapping(self.buf.as_ptr(), cell, self.size) };
                }
                std::hint::black_box(&mut self.buf);
            }
            OpArg::Cas => {
                for (&cell, e) in self.cells.iter().zip(&mut self.expected) {
                    match word(cell).compare_exchange(
                        *e,
                        e.wrapping_add(1),
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(old) => *e = old.wrapping_add(1),
                        Err(old) => {
                            *e = old;
                            self.cas_failures += 1;
                        }
                    }
                }
            }
            OpArg::Faa => {
                for &cell in &self.cells {
                    std::hint::black_box(word(cell).fetch_add(1, Ordering::SeqCst));
                }
            }
        }
    }
}

fn word<'a>(cell: *mut u8) -> &'a AtomicU64 {
    // SAFETY: atomic cells are 8 bytes, 8-aligned (slots start on cache
    // lines, cells are 8-byte strides, regions and mappings are page
    // aligned) and inside the mapping, which outlives every worker.
    unsafe { AtomicU64::from_ptr(cell.cast::<u64>()) }
}

/// Runs the baseline on `memory` with the plan's threads and slots.
pub fn run(plan: &Plan, memory: &Memory) -> anyhow::Result<Vec<Run>> {
    let mapping = Mapping::open(memory)?;
    let every = plan.sample_every();
    on_threads("baseline", plan.threads, |t, gate| {
        let setup = (|| {
            let mut w = MemWorker::new(&mapping, plan.work, t)?;
            for _ in 0..WARMUP_ROUND_TRIPS {
                w.round_trip();
            }
            w.cas_failures = 0;
            anyhow::Ok(w)
        })();
        gate.wait();
        let mut w = setup?;
        let mut latency = measure::histogram()?;
        let start = Instant::now();
        let (round_trips, elapsed) =
            measure::timed_loop(start, start + plan.duration, every, &mut latency, || {
                w.round_trip()
            });
        Ok(vec![Run {
            round_trips,
            elapsed,
            latency,
            cas_failures: w.cas_failures,
            stats: None,
        }])
    })
}
