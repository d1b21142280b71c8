//! Phase 2 for local and shm: the same work done on raw memory.
//!
//! The same threads, the same slots, the same cells, the same kind of
//! memory: an anonymous mapping of the region's size for local (what an
//! in-process memory node is made of), and for shm the very image file the
//! fabric used, mapped again, at the region's offset in it. A "round trip"
//! is `--batch` plain operations: `AtomicU64::compare_exchange` /
//! `fetch_add` (SeqCst, as the memory node uses) for CAS / FAA, and
//! `copy_nonoverlapping` into / out of a per-thread buffer for READ / WRITE.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::Context;
use fabric::{RawCell, RawRegion, RegionId};

use super::measure::{self, on_threads, Run, WARMUP_ROUND_TRIPS};
use super::plan::{OpArg, Plan};
use super::workload::Workload;

/// Which memory the baseline runs on.
#[derive(Clone, Debug)]
pub enum Memory {
    /// Fresh anonymous memory of this many bytes.
    Anonymous(u64),
    /// A region of a memory image file.
    Image {
        /// The memory image file the fabric used.
        path: PathBuf,
        /// The region to map, at its offset in the file.
        region: RegionId,
    },
}

impl Memory {
    /// What a baseline round trip of `op` does and on which memory, for the
    /// report.
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

/// The region the baseline works in.
fn open(memory: &Memory) -> crate::Result<RawRegion> {
    match memory {
        Memory::Anonymous(bytes) => {
            let len = usize::try_from(*bytes)?;
            RawRegion::anonymous(len).with_context(|| format!("cannot map {len} bytes of anonymous memory"))
        }
        Memory::Image { path, region } => Ok(RawRegion::image_region(path, *region)?),
    }
}

/// One thread's cells, and its buffers.
struct MemWorker<'a> {
    op: OpArg,
    size: usize,
    /// READ and WRITE: the cells, copied whole.
    cells: Vec<RawCell<'a>>,
    /// CAS and FAA: the cells as words, checked once here, not in the
    /// timed loop.
    words: Vec<&'a AtomicU64>,
    expected: Vec<u64>,
    /// READ destination (`batch * size`, like a batch's result buffer) or
    /// WRITE source (`size`, written to every cell).
    buf: Vec<u8>,
    cas_failures: u64,
}

impl<'a> MemWorker<'a> {
    fn new(region: &'a RawRegion, work: Workload, slot: usize) -> crate::Result<Self> {
        let size = work.size as usize;
        let cells = (0..work.batch)
            .map(|i| {
                let offset = work.offset(slot, i);
                region.cell(offset, size).with_context(|| {
                    format!(
                        "baseline cell {offset}+{size} is outside the {}-byte region",
                        region.len()
                    )
                })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        let atomic = matches!(work.op, OpArg::Cas | OpArg::Faa);
        let words = if atomic {
            cells
                .iter()
                .map(|c| c.word().context("a baseline cell is not an aligned 8-byte word"))
                .collect::<crate::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let buf = match work.op {
            OpArg::Read => vec![0; work.batch * size],
            _ => vec![slot as u8; size],
        };
        Ok(MemWorker {
            op: work.op,
            size,
            cells,
            words,
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
                for (cell, dst) in self.cells.iter().zip(self.buf.chunks_exact_mut(self.size)) {
                    cell.copy_to(dst);
                }
                std::hint::black_box(&mut self.buf);
            }
            OpArg::Write => {
                for cell in &self.cells {
                    cell.copy_from(&self.buf);
                }
                std::hint::black_box(&mut self.buf);
            }
            OpArg::Cas => {
                for (w, e) in self.words.iter().zip(&mut self.expected) {
                    match w.compare_exchange(*e, e.wrapping_add(1), Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(old) => *e = old.wrapping_add(1),
                        Err(old) => {
                            *e = old;
                            self.cas_failures += 1;
                        }
                    }
                }
            }
            OpArg::Faa => {
                for w in &self.words {
                    std::hint::black_box(w.fetch_add(1, Ordering::SeqCst));
                }
            }
        }
    }
}

/// Runs the baseline on `memory` with the plan's threads and slots.
pub fn run(plan: &Plan, memory: &Memory) -> crate::Result<Vec<Run>> {
    let region = open(memory)?;
    let every = plan.sample_every();
    on_threads("baseline", plan.threads, |t, gate| {
        let setup = (|| {
            let mut w = MemWorker::new(&region, plan.work, t)?;
            for _ in 0..WARMUP_ROUND_TRIPS {
                w.round_trip();
            }
            w.cas_failures = 0;
            Ok::<_, crate::BenchError>(w)
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
