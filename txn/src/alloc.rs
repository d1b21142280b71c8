//! A client's allocator: carves the chunks it takes from the heap into
//! 16-byte metas and data blocks, and reuses data blocks its commits freed.
//!
//! Reuse is what makes the pointer versions necessary: a freed block may come
//! back as the data of the same object, and only the bumped `ptr_version`
//! (and the lock version) tell the two apart.

use std::collections::HashMap;

use fabric::{Client, GlobalAddr};

use crate::error::TxError;
use crate::heap::{ChunkKind, Heap};
use crate::obj::META_BYTES;
use crate::word::OwnerId;

/// Data blocks are 8-byte aligned and sized in words, so that every word of a
/// block can be read and CASed.
const BLOCK_ALIGN: u64 = 8;

#[derive(Debug, Default)]
struct Bump {
    next: u64,
    end: u64,
}

/// One owner's allocator.
#[derive(Debug)]
pub struct BlockAllocator {
    heap: Heap,
    owner: OwnerId,
    metas: Bump,
    data: Bump,
    free: HashMap<u64, Vec<u64>>,
}

impl BlockAllocator {
    /// An allocator for `owner` in `heap`; it takes chunks on demand.
    pub fn new(heap: Heap, owner: OwnerId) -> Self {
        BlockAllocator {
            heap,
            owner,
            metas: Bump::default(),
            data: Bump::default(),
            free: HashMap::new(),
        }
    }

    fn block_bytes(len: u32) -> u64 {
        u64::from(len).max(1).next_multiple_of(BLOCK_ALIGN)
    }

    /// A fresh 16-byte meta.
    pub async fn meta(&mut self, client: &mut Client) -> Result<GlobalAddr, TxError> {
        if self.metas.next + META_BYTES > self.metas.end {
            let c = self
                .heap
                .take_chunks(client, self.owner, 1, ChunkKind::Metas)
                .await?;
            self.metas.next = self.heap.chunk_offset(c);
            self.metas.end = self.metas.next + self.heap.chunk_bytes();
        }
        let at = self.metas.next;
        self.metas.next += META_BYTES;
        Ok(GlobalAddr::new(self.heap.region(), at))
    }

    /// A data block of at least `len` bytes; returns its offset.
    pub async fn data(&mut self, client: &mut Client, len: u32) -> Result<u64, TxError> {
        let bytes = Self::block_bytes(len);
        if let Some(offset) = self.free.get_mut(&bytes).and_then(Vec::pop) {
            return Ok(offset);
        }
        let chunk = self.heap.chunk_bytes();
        if bytes > chunk / 2 {
            // Large blocks get chunks of their own.
            let c = self
                .heap
                .take_chunks(client, self.owner, bytes.div_ceil(chunk), ChunkKind::Data)
                .await?;
            return Ok(self.heap.chunk_offset(c));
        }
        if self.data.next + bytes > self.data.end {
            // The tail of the old chunk is lost to this owner; it stays
            // recorded as its chunk, so reclamation finds it.
            let c = self
                .heap
                .take_chunks(client, self.owner, 1, ChunkKind::Data)
                .await?;
            self.data.next = self.heap.chunk_offset(c);
            self.data.end = self.data.next + chunk;
        }
        let at = self.data.next;
        self.data.next += bytes;
        Ok(at)
    }

    /// Offsets of the data blocks waiting for reuse (for checkers).
    pub fn free_offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.free.values().flatten().copied()
    }

    /// Returns a data block of `len` bytes for reuse. The caller guarantees
    /// no committed pointer refers to it any more.
    pub fn free(&mut self, offset: u64, len: u32) {
        self.free.entry(Self::block_bytes(len)).or_default().push(offset);
    }
}
