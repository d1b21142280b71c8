//! The memory a bench runs on: fresh memory nodes ([`harness::Memory`],
//! in-process or shm images), an rTX heap formatted in their one region, the
//! objects the transactions update, and a transaction client per owner id.
//!
//! Owner id [`LOADER`] creates the objects and, at the end, reads them back
//! for the check; the clients under test are [`FIRST_WORKER`] onwards.

use crate::error::Context;
use fabric::{Client, FaultPlan, OFFSET_MAX};
use harness::layout::CHUNK_BYTES;
use harness::{Memory, MemorySpec};
use txn::{Heap, OwnerId, RawObj, TxClient, TxConfig};

use crate::common::Common;

pub use harness::layout::{FIRST_WORKER, LOADER};
/// Room for blocks that repairs and fenced commits leave behind, for
/// chunk tails, and for slack. Memory is only committed where it is touched,
/// so this costs address space, not RAM.
const HEADROOM_BYTES: u64 = 512 << 20;

/// Generates the object sizes a bench can create (each one a byte array that
/// `bytemuck` knows as plain data) and the function creating one of them.
macro_rules! object_sizes {
    ($($n:literal),*) => {
        /// Object sizes `--object-bytes` accepts.
        pub const OBJECT_BYTES: &[u32] = &[$($n),*];

        /// Creates a zeroed object of `bytes` bytes, one of [`OBJECT_BYTES`].
        async fn create_sized(c: &mut TxClient, bytes: u32) -> crate::Result<RawObj> {
            match bytes {
                $($n => Ok(c.create(&[0u8; $n]).await?.raw()),)*
                _ => crate::bail!("objects of {bytes} bytes are not supported"),
            }
        }
    };
}
object_sizes!(8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096);

/// A fresh cluster with a formatted heap.
pub struct Cluster {
    /// Forked (or re-made with faults) for every client.
    fabric: Client,
    /// The heap in the cluster's region, where every client's transactions run.
    pub heap: Heap,
    /// Where the memory is, for the report.
    pub origin: String,
    _memory: Memory,
}

/// How large the region must be for `objects` objects and `clients` clients.
pub fn region_bytes(
    objects: usize,
    object_bytes: u32,
    clients: usize,
    write_set: usize,
) -> crate::Result<u64> {
    let block = u64::from(object_bytes).next_multiple_of(8);
    let fixed = 8192 + (clients as u64 + 2) * txn::log::LOG_SLOT_BYTES;
    // Metas and data of every object, twice (blocks freed by one client are
    // reused by that client only), and a few chunks of new blocks per client.
    let bytes = (objects as u64)
        .checked_mul(2 * (txn::META_BYTES + block))
        .and_then(|b| b.checked_add(clients as u64 * (4 * CHUNK_BYTES + 2 * write_set as u64 * block)))
        .and_then(|b| b.checked_add(fixed + HEADROOM_BYTES))
        .filter(|&b| b <= OFFSET_MAX)
        .with_context(|| format!("{objects} objects of {object_bytes} bytes do not fit one region"))?;
    Ok(bytes.next_multiple_of(4096))
}

impl Cluster {
    /// Memory nodes holding one region of `region_bytes`, and a heap in it
    /// with a log slot for the loader and each of `clients`.
    pub async fn new(common: &Common, region_bytes: u64, clients: usize) -> crate::Result<Cluster> {
        let memory = Memory::start(&MemorySpec {
            replicas: common.replicas,
            ..MemorySpec::single(common.transport, region_bytes)
        })?;
        let mut fabric = memory
            .inline_client()?
            .with_context(|| format!("bench txn cannot run on {}", common.transport))?;
        let owner_slots = u16::try_from(clients + usize::from(FIRST_WORKER))
            .ok()
            .filter(|&s| s <= txn::word::OWNER_MAX)
            .with_context(|| format!("{clients} clients are more than there are owner ids"))?;
        let heap = harness::layout::format_heap(&mut fabric, owner_slots)
            .await
            .context("cannot format the heap")?;
        Ok(Cluster {
            fabric,
            heap,
            origin: memory.origin().to_owned(),
            _memory: memory,
        })
    }

    /// A transaction client as `owner`. With `clock_skew_ms`, its clock is
    /// off by that much (fault injection; its verbs then take the transport's
    /// async path, which for local and shm still completes at once).
    pub fn client(
        &self,
        owner: OwnerId,
        config: TxConfig,
        clock_skew_ms: Option<i64>,
    ) -> crate::Result<TxClient> {
        let fabric = match clock_skew_ms {
            None => self.fabric.fork(),
            Some(skew) => {
                let plan = FaultPlan {
                    clock_skew_ms: skew,
                    ..FaultPlan::default()
                };
                let (transport, _faults) = self.fabric.transport().clone().with_faults(plan);
                Client::new(self.fabric.map().clone(), transport)
            }
        };
        TxClient::new(fabric, self.heap, owner, config)
            .with_context(|| format!("cannot run as owner {owner}"))
    }

    /// A DTX client as `owner` (the baseline of `bench smallbank` and
    /// `bench tatp`).
    pub fn dtx_client(&self, owner: OwnerId, config: TxConfig) -> crate::Result<txn::dtx::DtxClient> {
        txn::dtx::DtxClient::new(self.fabric.fork(), self.heap, owner, config)
            .with_context(|| format!("cannot run dtx as owner {owner}"))
    }

    /// A plain fabric client, for reading words no transaction reads (lock
    /// words, in the end-of-run checks).
    pub fn fabric(&self) -> Client {
        self.fabric.fork()
    }

    /// Creates `objects` zeroed objects of `bytes` bytes as [`LOADER`] (one
    /// round trip each), and returns them with the loader's client.
    pub async fn load(&self, objects: usize, bytes: u32) -> crate::Result<(TxClient, Vec<RawObj>)> {
        let mut loader = self.client(LOADER, TxConfig::default(), None)?;
        let mut made = Vec::with_capacity(objects);
        for i in 0..objects {
            let obj = create_sized(&mut loader, bytes)
                .await
                .with_context(|| format!("cannot create object {i} of {objects}"))?;
            made.push(obj);
        }
        Ok((loader, made))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_size_can_be_created() {
        let common = Common {
            transport: harness::TransportKind::Local,
            replicas: 2,
            object_bytes: 64,
            seed: 1,
            json: false,
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let bytes = region_bytes(OBJECT_BYTES.len(), 4096, 1, 1).unwrap();
            let cluster = Cluster::new(&common, bytes, 1).await.unwrap();
            let mut loader = cluster.client(LOADER, TxConfig::default(), None).unwrap();
            for &b in OBJECT_BYTES {
                let obj = create_sized(&mut loader, b).await.unwrap();
                assert_eq!(obj.len, b);
            }
            assert!(create_sized(&mut loader, 40).await.is_err());
        });
    }
}
