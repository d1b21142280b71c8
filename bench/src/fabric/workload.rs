//! The work both phases do: which addresses a client touches, and how big
//! the tcp frames for one batch are.
//!
//! Every client (a thread, or a task on tcp) owns one *slot*: `batch` verbs
//! on consecutive `stride`-byte cells (`size` rounded up to 8 bytes), the slot
//! starting on its own cache line. Slots never overlap, so CAS is
//! uncontended and the memory baseline can replay the very same address
//! pattern. Each round trip touches the same cells again: the bench measures
//! the path to memory, not cache misses.

use fabric::wire;
use fabric::{Completions, Op, OpKind, Outcome, PayloadRange, ATOMIC_BYTES};

use super::plan::OpArg;

const CACHE_LINE: u64 = 64;
const PAGE: u64 = 4096;

/// What one round trip does, and where.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// The verb every batch is made of (`--op`).
    pub op: OpArg,
    /// Bytes per verb.
    pub size: u32,
    /// Verbs per round trip.
    pub batch: usize,
}

impl Workload {
    /// Round trips of `batch` verbs of `op`, `size` bytes each.
    pub fn new(op: OpArg, size: u32, batch: usize) -> Self {
        Workload { op, size, batch }
    }

    /// Distance between the cells of one slot.
    pub fn stride(&self) -> u64 {
        u64::from(self.size).div_ceil(ATOMIC_BYTES) * ATOMIC_BYTES
    }

    /// Bytes of one slot, rounded up to a cache line.
    pub fn slot_bytes(&self) -> u64 {
        (self.batch as u64 * self.stride()).div_ceil(CACHE_LINE) * CACHE_LINE
    }

    /// Region offset of cell `verb` of slot `slot`.
    pub fn offset(&self, slot: usize, verb: usize) -> u64 {
        slot as u64 * self.slot_bytes() + verb as u64 * self.stride()
    }

    /// Region bytes that `slots` clients need, in whole pages.
    pub fn region_bytes(&self, slots: usize) -> u64 {
        (slots as u64 * self.slot_bytes()).div_ceil(PAGE).max(1) * PAGE
    }

    /// Payload bytes one round trip moves (READ or WRITE data, 8 per atomic).
    pub fn bytes_per_round_trip(&self) -> u64 {
        self.batch as u64 * u64::from(self.size)
    }

    /// Sizes, length prefix included, of the tcp request frame that carries
    /// one batch and of the response frame that answers it, taken from the
    /// fabric's own encoder so that the echo baseline moves the same bytes.
    pub fn frame_sizes(&self) -> (usize, usize) {
        let payload = vec![0u8; self.bytes_per_round_trip() as usize];
        let ops: Vec<Op> = (0..self.batch)
            .map(|i| Op {
                node: 1,
                region: 1,
                key: 0,
                offset: self.offset(0, i),
                kind: match self.op {
                    OpArg::Read => OpKind::Read { len: self.size },
                    OpArg::Write => OpKind::Write {
                        data: PayloadRange {
                            start: i as u32 * self.size,
                            len: self.size,
                        },
                    },
                    OpArg::Cas => OpKind::Cas { expect: 0, new: 1 },
                    OpArg::Faa => OpKind::Faa { add: 1 },
                },
            })
            .collect();
        let mut request = Vec::new();
        wire::encode_batch(&mut request, 1, 1, u64::MAX, ops.iter(), &payload);
        let mut out = Completions::default();
        for _ in 0..self.batch {
            match self.op {
                OpArg::Read => {
                    out.push_read(self.size);
                }
                OpArg::Write => out.push(Ok(Outcome::Done)),
                OpArg::Cas | OpArg::Faa => out.push(Ok(Outcome::Old(0))),
            }
        }
        let mut response = Vec::new();
        wire::encode_completions(&mut response, 1, &out);
        (request.len(), response.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_disjoint_and_aligned() {
        let w = Workload::new(OpArg::Read, 100, 3);
        assert_eq!(w.stride(), 104);
        assert_eq!(w.slot_bytes(), 320);
        assert_eq!(w.offset(1, 0), 320);
        assert_eq!(w.offset(1, 2), 320 + 208);
        assert!(w.offset(0, 2) + 100 <= w.offset(1, 0));
        assert_eq!(w.region_bytes(13), 8192);
        let cas = Workload::new(OpArg::Cas, 8, 1);
        assert_eq!(cas.slot_bytes(), 64);
        assert_eq!(cas.region_bytes(1), 4096);
    }

    #[test]
    fn frame_sizes_follow_the_wire_format() {
        // header 4 + kind 1 + id 8 + epoch 8 + deadline 8 + count 2; op 15 +
        // operand.
        let cas = Workload::new(OpArg::Cas, 8, 2);
        assert_eq!(cas.frame_sizes(), (31 + 2 * 31, 4 + 11 + 2 * 9));
        let read = Workload::new(OpArg::Read, 1024, 1);
        assert_eq!(read.frame_sizes(), (31 + 19, 4 + 11 + 5 + 1024));
        let write = Workload::new(OpArg::Write, 1024, 1);
        assert_eq!(write.frame_sizes(), (31 + 19 + 1024, 4 + 11 + 1));
    }
}
