//! Making a new replica while clients write (re-replication).
//!
//! 1. `add_backup`: the new replica is allocated on a spare node, beside
//!    the replicas clients write (they route by those alone).
//! 2. [`copy_replica`]: the region is copied from the primary, chunk by
//!    chunk, while clients keep writing the others. Only the copy writes
//!    the new replica, so the checksum of each chunk written is exactly
//!    what it holds.
//! 3. `join_backup`: the replica joins the ones clients write, at a new
//!    epoch, and the region leaves their map; once every replica's node
//!    fences at that epoch, no write of the copy's time is in flight.
//! 4. [`catch_up`]: every chunk of the primary whose checksum differs from
//!    the copy's is written again (with no checksums, after a coordinator
//!    took over, the two replicas are compared whole). Then
//!    `region_restored` puts the region back in the map: the write-blocking
//!    window is steps 3 and 4.
//!
//! The replica ends equal to the primary byte for byte, lock words
//! included (they are primary-only and meaningless on a backup, so this is
//! more than needed).

use std::time::{Duration, Instant};

use control_plane::state::MemNodeId;
use fabric::{Batch, Client, GlobalAddr, PageAccess, RegionId, Replica};

use crate::RecoveryError;

/// Bytes copied per round trip: the largest batch a transport carries
/// (`fabric::BATCH_BYTES_MAX`), so a copy is one READ and one WRITE per
/// MiB.
pub const COPY_CHUNK_BYTES: u64 = fabric::BATCH_BYTES_MAX;

/// What [`copy_replica`] did.
#[derive(Clone, Debug)]
pub struct Copied {
    /// The region.
    pub region: RegionId,
    /// The new replica's node.
    pub node: MemNodeId,
    /// Bytes copied.
    pub bytes: u64,
    /// How long it took.
    pub elapsed: Duration,
    /// The checksum of each chunk as written.
    sums: Vec<u32>,
}

impl Copied {
    /// Bytes per second.
    pub fn rate_bytes_per_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What [`catch_up`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaughtUp {
    /// Chunks compared.
    pub chunks: u64,
    /// Chunks written again because the primary's had changed.
    pub chunks_written: u64,
}

/// The backup index (0-based, after the primary) `node` has in `region`
/// of `fabric`'s map, which must be a full map.
fn backup_of(fabric: &Client, region: RegionId, node: MemNodeId) -> Result<u8, RecoveryError> {
    fabric
        .map()
        .region(region)
        .and_then(|r| r.replicas.iter().skip(1).position(|l| l.node == node))
        .and_then(|i| u8::try_from(i).ok())
        .ok_or(RecoveryError::NotSyncing { region, node })
}

fn region_bytes(fabric: &Client, region: RegionId, node: MemNodeId) -> Result<u64, RecoveryError> {
    fabric
        .map()
        .region(region)
        .map(|r| r.size)
        .ok_or(RecoveryError::NotSyncing { region, node })
}

fn verb_error(region: RegionId) -> impl Fn(fabric::VerbError) -> RecoveryError {
    move |e| RecoveryError::Verb {
        region,
        reason: e.to_string(),
    }
}

/// Copies `region` from its primary to the replica being made on `node`
/// (step 2 of the module docs); `fabric` routes by the full map.
/// `progress(done, total)` is called after every chunk.
pub async fn copy_replica(
    fabric: &mut Client,
    region: RegionId,
    node: MemNodeId,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<Copied, RecoveryError> {
    let backup = backup_of(fabric, region, node)?;
    let total = region_bytes(fabric, region, node)?;
    let start = Instant::now();
    // Part of the copy's time: this process's first touch of each page of
    // the two images would otherwise fault it in, page by page.
    fabric
        .populate(region, Replica::Primary, PageAccess::Read)
        .await?;
    fabric
        .populate(region, Replica::Backup(backup), PageAccess::Write)
        .await?;
    tracing::debug!(
        region,
        node,
        populate_ms = start.elapsed().as_millis() as u64,
        "both images mapped in"
    );
    let mut sums = Vec::with_capacity(total.div_ceil(COPY_CHUNK_BYTES) as usize);
    // Two batches, so that a chunk is written from the READ's own buffer.
    let (mut reads, mut writes) = (Batch::new(), Batch::new());
    let mut done = 0;
    while done < total {
        let len = (total - done).min(COPY_CHUNK_BYTES);
        let at = GlobalAddr::new(region, done);
        reads.clear();
        let h = reads.on(Replica::Primary).read(at, len as u32);
        fabric.execute(&mut reads).await?;
        let data = reads.read_result(h).map_err(verb_error(region))?;
        sums.push(crc32fast::hash(data));
        write_chunk(fabric, &mut writes, at, Replica::Backup(backup), data).await?;
        done += len;
        progress(done, total);
        yield_between_chunks().await;
    }
    Ok(Copied {
        region,
        node,
        bytes: total,
        elapsed: start.elapsed(),
        sums,
    })
}

/// Writes again every chunk of the primary that changed since `copied`
/// (step 4 of the module docs); with `copied` unknown (another
/// coordinator made the copy), compares the two replicas whole. The
/// region must be out of the clients' map and every node fenced.
pub async fn catch_up(
    fabric: &mut Client,
    region: RegionId,
    node: MemNodeId,
    copied: Option<&Copied>,
) -> Result<CaughtUp, RecoveryError> {
    let backup = backup_of(fabric, region, node)?;
    let total = region_bytes(fabric, region, node)?;
    let sums = copied.filter(|c| c.region == region && c.node == node && c.bytes == total);
    let mut out = CaughtUp::default();
    let mut batch = Batch::new();
    let mut data = Vec::with_capacity(COPY_CHUNK_BYTES as usize);
    let mut theirs = Vec::with_capacity(COPY_CHUNK_BYTES as usize);
    let mut done = 0;
    let mut chunk = 0;
    while done < total {
        let len = (total - done).min(COPY_CHUNK_BYTES);
        let at = GlobalAddr::new(region, done);
        read_chunk(fabric, &mut batch, at, len, Replica::Primary, &mut data).await?;
        let same = match sums {
            Some(c) => c.sums.get(chunk) == Some(&crc32fast::hash(&data)),
            None => {
                read_chunk(fabric, &mut batch, at, len, Replica::Backup(backup), &mut theirs).await?;
                theirs == data
            }
        };
        if !same {
            write_chunk(fabric, &mut batch, at, Replica::Backup(backup), &data).await?;
            out.chunks_written += 1;
        }
        out.chunks += 1;
        done += len;
        chunk += 1;
        yield_between_chunks().await;
    }
    Ok(out)
}

/// Lets the runtime's other tasks run between two chunks. Verbs of the
/// inline transports (local, shm) complete without ever yielding, so a copy
/// of gigabytes would hold its worker thread for seconds; in a control-plane
/// member the coordinator shares its runtime with Raft and the handlers that
/// note lease renewals, and a task parked on that worker (tokio's LIFO slot
/// is not stolen) would wait the copy out. Found by `bench recover` with a
/// 3 GiB region: the leader, deaf for the 2.8 s of a copy and its
/// catch-up, then declared every memory node dead at once.
async fn yield_between_chunks() {
    tokio::task::yield_now().await;
}

async fn read_chunk(
    fabric: &mut Client,
    batch: &mut Batch,
    at: GlobalAddr,
    len: u64,
    from: Replica,
    into: &mut Vec<u8>,
) -> Result<(), RecoveryError> {
    batch.clear();
    let h = batch.on(from).read(at, len as u32);
    fabric.execute(batch).await?;
    into.clear();
    into.extend_from_slice(batch.read_result(h).map_err(verb_error(at.region()))?);
    Ok(())
}

async fn write_chunk(
    fabric: &mut Client,
    batch: &mut Batch,
    at: GlobalAddr,
    to: Replica,
    data: &[u8],
) -> Result<(), RecoveryError> {
    batch.clear();
    let h = batch.on(to).write(at, data);
    fabric.execute(batch).await?;
    batch.done(h).map_err(verb_error(at.region()))
}
