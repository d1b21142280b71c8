//! The layout every tool that formats memory for an index agrees on: which
//! region holds the heap, who loads it, how large its chunks are. A runner
//! and the client processes it starts must agree on these, so they are
//! defined once.

use fabric::{Client, RegionId};
use txn::{Heap, HeapConfig, OwnerId, TxError};

/// The region a benchmark's or a run's heap is formatted in: a fresh node
/// holds one region, and ids start at 1 (0 is no region).
pub const REGION: RegionId = 1;

/// The owner id that formats the heap, bulk-loads the index and, at the
/// end, checks it. Owner 0 is reserved (an unlocked lock word).
pub const LOADER: OwnerId = 1;

/// The first owner id of a client under test: every owner id above
/// [`LOADER`] is a worker's.
pub const FIRST_WORKER: OwnerId = LOADER + 1;

/// Heap chunk size: the txn default.
pub use txn::CHUNK_BYTES;

/// Formats the rTX heap in [`REGION`] with chunks of [`CHUNK_BYTES`] and a
/// log slot for each of `owner_slots` owner ids: the one layout a loader
/// writes and every client and checker of a run opens.
pub async fn format_heap(fabric: &mut Client, owner_slots: u16) -> Result<Heap, TxError> {
    let config = HeapConfig {
        owner_slots,
        chunk_bytes: CHUNK_BYTES,
    };
    Heap::format(fabric, REGION, config).await
}

// Region 0 names no region; owner 0 is an unlocked lock word.
const _: () = assert!(REGION != 0 && LOADER != 0 && FIRST_WORKER > LOADER);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_what_formatted_heaps_expect() {
        assert_eq!(CHUNK_BYTES, txn::HeapConfig::default().chunk_bytes);
    }
}
