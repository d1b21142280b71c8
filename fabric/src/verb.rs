//! One-sided verbs as a transport sees them: already routed to one memory
//! node, with the access key the node will check, and their completions.

use std::ops::Range;

use thiserror::Error;

use crate::addr::{AccessKey, NodeId, RegionId};

/// Largest number of verbs in one batch (after `Replica::All` expansion).
/// An RDMA send queue has a bounded depth, and the tcp frame size follows
/// from it; 4096 is well past any index operation's need (a B+tree split is
/// a few dozen verbs).
pub const VERBS_PER_BATCH_MAX: usize = 4096;
/// Largest READ or WRITE payload one verb may carry.
pub const VERB_BYTES_MAX: u32 = 1 << 20;
/// Largest sum of READ lengths, and separately of WRITE lengths, in one batch.
/// Bounds the memory a memory node spends on one request and one answer.
pub const BATCH_BYTES_MAX: u64 = 1 << 20;

/// The kind of a verb, for counters and error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerbKind {
    /// Copy bytes from DM.
    Read,
    /// Copy bytes into DM.
    Write,
    /// 8-byte compare-and-swap.
    Cas,
    /// 8-byte fetch-and-add.
    Faa,
    /// Make a written range durable (msync on a persistent region).
    Flush,
}

/// What a routed verb does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Read `len` bytes.
    Read {
        /// Bytes to read.
        len: u32,
    },
    /// Write the bytes at `data` in the batch's payload buffer.
    Write {
        /// Where the bytes sit in the payload buffer.
        data: PayloadRange,
    },
    /// Compare-and-swap an aligned 8-byte word.
    Cas {
        /// Value the word must hold for the swap to happen.
        expect: u64,
        /// Value stored when it does.
        new: u64,
    },
    /// Fetch-and-add on an aligned 8-byte word (wrapping).
    Faa {
        /// Added to the word.
        add: u64,
    },
    /// Make `len` bytes durable.
    Flush {
        /// Bytes to flush.
        len: u32,
    },
}

impl OpKind {
    /// The kind, without its operands.
    pub fn kind(&self) -> VerbKind {
        match self {
            OpKind::Read { .. } => VerbKind::Read,
            OpKind::Write { .. } => VerbKind::Write,
            OpKind::Cas { .. } => VerbKind::Cas,
            OpKind::Faa { .. } => VerbKind::Faa,
            OpKind::Flush { .. } => VerbKind::Flush,
        }
    }

    /// True when this is a CAS and `completion` says it swapped (the old
    /// value was the one it expected).
    pub(crate) fn cas_swapped(&self, completion: &Completion) -> bool {
        matches!((self, completion), (OpKind::Cas { expect, .. }, Ok(Outcome::Old(old))) if old == expect)
    }

    /// Bytes of memory the verb touches.
    pub fn len(&self) -> u64 {
        match self {
            OpKind::Read { len } | OpKind::Flush { len } => u64::from(*len),
            OpKind::Write { data } => u64::from(data.len),
            OpKind::Cas { .. } | OpKind::Faa { .. } => crate::addr::ATOMIC_BYTES,
        }
    }

    /// True for verbs that touch no bytes (a zero-length READ or WRITE).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A byte range inside a batch's payload (WRITE data) or result buffer (READ data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PayloadRange {
    /// First byte.
    pub start: u32,
    /// Number of bytes.
    pub len: u32,
}

impl PayloadRange {
    /// As a `usize` range for slicing.
    pub fn range(self) -> Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// A verb routed to one replica: what a transport executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The memory node that holds the replica.
    pub node: NodeId,
    /// The region.
    pub region: RegionId,
    /// Access key of the region on that node.
    pub key: AccessKey,
    /// Byte offset inside the region.
    pub offset: u64,
    /// What to do there.
    pub kind: OpKind,
}

impl Op {
    /// The checks of a verb that follow from its region's size alone, in the
    /// order every transport decides them: per-verb size, bounds, alignment.
    /// (Region and key come first; the per-batch READ budget after.)
    pub(crate) fn check_extent(&self, region_size: u64) -> Result<(), VerbError> {
        let len = self.kind.len();
        if matches!(self.kind, OpKind::Read { .. } | OpKind::Write { .. }) && len > u64::from(VERB_BYTES_MAX)
        {
            return Err(VerbError::TooLarge { len });
        }
        if self.offset.checked_add(len).is_none_or(|end| end > region_size) {
            return Err(VerbError::OutOfBounds {
                offset: self.offset,
                len,
                size: region_size,
            });
        }
        if matches!(self.kind, OpKind::Cas { .. } | OpKind::Faa { .. })
            && self.offset % crate::addr::ATOMIC_BYTES != 0
        {
            return Err(VerbError::Misaligned { offset: self.offset });
        }
        Ok(())
    }
}

/// Why a memory node refused one verb. The node keeps serving; the verb had
/// no effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum VerbError {
    /// The node holds no region with this id.
    #[error("region {region} is not on this memory node")]
    UnknownRegion {
        /// The region asked for.
        region: RegionId,
    },
    /// `offset + len` runs past the end of the region.
    #[error("bytes {offset}..{offset}+{len} are outside the region ({size} bytes)")]
    OutOfBounds {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The region's size.
        size: u64,
    },
    /// CAS or FAA on an address that is not 8-byte aligned.
    #[error("atomic verb at offset {offset} is not 8-byte aligned")]
    Misaligned {
        /// Offset asked for.
        offset: u64,
    },
    /// The access key does not match the region's.
    #[error("access key does not match the region's")]
    BadKey,
    /// A READ or WRITE longer than [`VERB_BYTES_MAX`], or a batch past
    /// [`BATCH_BYTES_MAX`].
    #[error("verb of {len} bytes exceeds the per-verb or per-batch byte limit")]
    TooLarge {
        /// Length asked for.
        len: u64,
    },
    /// Not executed because an earlier verb to the same node in the same
    /// batch failed (as RDMA flushes a queue pair's work after an error).
    #[error("not executed: an earlier verb to the same memory node failed")]
    Flushed,
    /// The node could not make the range durable.
    #[error("flush to the persistent medium failed")]
    FlushFailed,
}

/// What a verb returned when it succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// READ: the bytes sit at this range of the batch's result buffer.
    Read(PayloadRange),
    /// WRITE or FLUSH done.
    Done,
    /// CAS or FAA: the word's value before the verb. A CAS succeeded iff
    /// this equals its `expect`.
    Old(u64),
}

/// One verb's completion.
pub type Completion = Result<Outcome, VerbError>;

/// Completions of a batch, in the order of its ops, and the bytes READs
/// brought back. Reused across batches to keep the verb path allocation-free.
#[derive(Debug, Default)]
pub struct Completions {
    completions: Vec<Completion>,
    // Grows to the largest batch seen and is never truncated, so that a READ
    // does not pay for zero-filling its buffer before copying into it.
    read_bytes: Vec<u8>,
    read_used: usize,
}

impl Completions {
    /// Forgets all completions, keeping capacity.
    pub fn clear(&mut self) {
        self.completions.clear();
        self.read_used = 0;
    }

    /// Number of completions.
    pub fn len(&self) -> usize {
        self.completions.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.completions.is_empty()
    }

    /// All completions, in op order.
    pub fn as_slice(&self) -> &[Completion] {
        &self.completions
    }

    /// Appends a completion that carries no bytes.
    pub fn push(&mut self, completion: Completion) {
        debug_assert!(!matches!(completion, Ok(Outcome::Read(_))));
        self.completions.push(completion);
    }

    /// Appends a READ completion of `len` bytes and returns the buffer the
    /// bytes must be copied into.
    pub fn push_read(&mut self, len: u32) -> &mut [u8] {
        let start = self.read_used;
        let end = start + len as usize;
        if self.read_bytes.len() < end {
            self.read_bytes.resize(end, 0);
        }
        self.read_used = end;
        self.completions.push(Ok(Outcome::Read(PayloadRange {
            start: start as u32,
            len,
        })));
        &mut self.read_bytes[start..end]
    }

    /// The bytes of a READ completion.
    pub fn read_data(&self, range: PayloadRange) -> &[u8] {
        &self.read_bytes[range.range()]
    }
}
