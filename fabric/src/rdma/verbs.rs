//! The RDMA device as this crate uses it, on `sideway`: one device port,
//! its protection domain, memory regions, and reliable-connected (RC) queue
//! pairs with their set-up. Every `unsafe` of the rdma transport is here.

use std::sync::Arc;

use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{BasicCompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;

use super::RdmaError;
use crate::verb::VERBS_PER_BATCH_MAX;

/// Environment variable naming the device to use (`rxe0`, `mlx5_0`); the
/// first device the host lists otherwise.
pub const DEVICE_ENV: &str = "KINTSUGI_RDMA_DEVICE";
/// Environment variable giving the GID index to use; otherwise the first
/// RoCE v2 GID of port 1 (the first GID of any type if there is none).
pub const GID_INDEX_ENV: &str = "KINTSUGI_RDMA_GID_INDEX";
/// The vendor id soft-RoCE (`rdma_rxe`) reports.
const SOFT_ROCE_VENDOR_ID: u32 = 0x00ff_ffff;
/// The device port: one-port NICs, and the soft-RoCE test device, use 1.
const PORT: u8 = 1;
/// READs and atomics a queue pair may have outstanding at its peer: what
/// ConnectX NICs and rxe accept; more only queue at the requester.
const READ_ATOMIC_OUTSTANDING_MAX: u8 = 16;
/// Local ACK timeout exponent: 4.096 µs * 2^14 = 67 ms per try, well past a
/// loaded NIC's answer and short enough that a peer gone silent is found in
/// [`RETRY_COUNT`] tries (under half a second).
const ACK_TIMEOUT_EXPONENT: u8 = 14;
/// Retransmissions before a queue pair gives up on its peer (the IB maximum).
const RETRY_COUNT: u8 = 7;

pub use crate::rdma_control::QpEndpoint;

/// One opened device port and its protection domain.
pub struct Device {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    name: String,
    /// A device the kernel emulates (soft-RoCE), not a NIC.
    emulated: bool,
    gid_index: u8,
    gid: [u8; 16],
    lid: u16,
    mtu: Mtu,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("gid_index", &self.gid_index)
            .finish()
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> RdmaError {
    RdmaError::Device(format!("{what}: {e}"))
}

/// The device this process has open, shared by its servers and transports
/// (a device context and protection domain per process, not per connection).
static SHARED: std::sync::Mutex<std::sync::Weak<Device>> = std::sync::Mutex::new(std::sync::Weak::new());

impl Device {
    /// The process's device: the one open already, or [`Device::open_new`]'s.
    pub fn open() -> Result<Arc<Device>, RdmaError> {
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = shared.upgrade() {
            return Ok(d);
        }
        let d = Device::open_new()?;
        *shared = Arc::downgrade(&d);
        Ok(d)
    }

    /// Opens the device [`DEVICE_ENV`] names, or the first one, on port 1.
    fn open_new() -> Result<Arc<Device>, RdmaError> {
        let wanted = std::env::var(DEVICE_ENV).ok().filter(|s| !s.is_empty());
        let list = DeviceList::new().map_err(|e| err("cannot list RDMA devices", e))?;
        let mut names = Vec::new();
        let mut found = None;
        for d in list.iter() {
            let name = d.name();
            if found.is_none() && wanted.as_ref().is_none_or(|w| *w == name) {
                found = Some((
                    d.open().map_err(|e| err(&format!("cannot open {name}"), e))?,
                    name.clone(),
                ));
            }
            names.push(name);
        }
        let Some((ctx, name)) = found else {
            return Err(RdmaError::NoDevice(match wanted {
                Some(w) => format!("no RDMA device {w} (the host has: {})", names.join(", ")),
                None => "this host has no RDMA device (load rdma_rxe and `rdma link add` one, or see deploy/rdma-vm)"
                    .into(),
            }));
        };
        let port = ctx.query_port(PORT).map_err(|e| err("cannot query port 1", e))?;
        let gids = ctx
            .query_gid_table()
            .map_err(|e| err("cannot read the GID table", e))?;
        let on_port: Vec<_> = gids.iter().filter(|g| g.port_num() == u32::from(PORT)).collect();
        let chosen = match std::env::var(GID_INDEX_ENV).ok().filter(|s| !s.is_empty()) {
            Some(i) => {
                let i: u32 = i
                    .parse()
                    .map_err(|e| RdmaError::Device(format!("{GID_INDEX_ENV}={i}: {e}")))?;
                on_port
                    .iter()
                    .find(|g| g.gid_index() == i)
                    .ok_or_else(|| RdmaError::Device(format!("{name} port {PORT} has no GID index {i}")))?
            }
            None => on_port
                .iter()
                .find(|g| g.gid_type() == GidType::RoceV2)
                .or_else(|| on_port.first())
                .ok_or_else(|| RdmaError::Device(format!("{name} port {PORT} has no GID")))?,
        };
        let gid_index = u8::try_from(chosen.gid_index())
            .map_err(|_| RdmaError::Device(format!("GID index {} over 255", chosen.gid_index())))?;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| err("cannot allocate a protection domain", e))?;
        let vendor = ctx.query_device().map(|a| a.vendor_id()).unwrap_or_default();
        let emulated = vendor == SOFT_ROCE_VENDOR_ID || name.starts_with("rxe") || name.starts_with("siw");
        tracing::debug!(device = %name, gid_index, gid = %chosen.gid(), emulated, "RDMA device opened");
        Ok(Arc::new(Device {
            gid: chosen.gid().raw,
            lid: port.lid(),
            mtu: port.active_mtu(),
            ctx,
            pd,
            name,
            emulated,
            gid_index,
        }))
    }

    /// The device's name (`rxe0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device for a report: its name, and whether the kernel emulates it.
    pub fn describe(&self) -> String {
        if self.emulated {
            format!("{} (soft-RoCE, emulated by the kernel: rates say nothing of a NIC; round trips and verbs per op hold)", self.name)
        } else {
            self.name.clone()
        }
    }

    /// Registers `[addr, addr + len)` for one-sided access by peers (`remote`)
    /// or as this side's buffer for READ results and atomics' old values.
    ///
    /// # Safety
    ///
    /// The bytes must stay mapped for as long as the returned region lives
    /// (the device reads and writes them behind the compiler's back: only
    /// atomics or copies made after a completion may touch them here).
    pub unsafe fn register(
        &self,
        addr: usize,
        len: usize,
        remote: bool,
    ) -> Result<Arc<MemoryRegion>, RdmaError> {
        let access = if remote {
            AccessFlags::LocalWrite
                | AccessFlags::RemoteWrite
                | AccessFlags::RemoteRead
                | AccessFlags::RemoteAtomic
        } else {
            AccessFlags::LocalWrite
        };
        // SAFETY: the caller keeps the bytes mapped while the region lives.
        unsafe { self.pd.reg_mr(addr, len, access) }.map_err(|e| err("cannot register memory", e))
    }

    /// A completion queue for a queue pair of `side`.
    pub fn completion_queue(&self, side: Side) -> Result<Arc<BasicCompletionQueue>, RdmaError> {
        let mut b = self.ctx.create_cq_builder();
        b.setup_cqe(side.send_depth() + 1);
        b.build().map_err(|e| err("cannot create a completion queue", e))
    }

    /// A new RC queue pair of `side` completing into `cq`, in the INIT
    /// state, and its endpoint (with a random first PSN).
    pub fn queue_pair(
        &self,
        side: Side,
        cq: &Arc<BasicCompletionQueue>,
    ) -> Result<(BasicQueuePair, QpEndpoint), RdmaError> {
        let cq = GenericCompletionQueue::from(cq.clone());
        let mut b = self.pd.create_qp_builder();
        b.setup_max_send_wr(side.send_depth())
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(0)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq);
        let mut qp = b.build().map_err(|e| err("cannot create a queue pair", e))?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(PORT)
            .setup_access_flags(
                AccessFlags::LocalWrite
                    | AccessFlags::RemoteWrite
                    | AccessFlags::RemoteRead
                    | AccessFlags::RemoteAtomic,
            );
        qp.modify(&a)
            .map_err(|e| err("cannot move a queue pair to INIT", e))?;
        let endpoint = QpEndpoint {
            qpn: qp.qp_number(),
            psn: rand::random::<u32>() & 0x00ff_ffff,
            gid: self.gid,
            lid: self.lid,
        };
        Ok((qp, endpoint))
    }

    /// Connects `qp` (made by [`Device::queue_pair`] with endpoint `local`)
    /// to `remote`: INIT → RTR → RTS.
    pub fn connect(
        &self,
        qp: &mut BasicQueuePair,
        local: &QpEndpoint,
        remote: &QpEndpoint,
    ) -> Result<(), RdmaError> {
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(self.mtu.min_with(Mtu::Mtu4096))
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(READ_ATOMIC_OUTSTANDING_MAX)
            .setup_min_rnr_timer(12);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(PORT)
            .setup_service_level(0)
            .setup_grh_src_gid_index(self.gid_index)
            .setup_grh_dest_gid(&Gid { raw: remote.gid })
            .setup_grh_hop_limit(64);
        a.setup_address_vector(&ah);
        qp.modify(&a)
            .map_err(|e| err("cannot move a queue pair to RTR", e))?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(local.psn)
            .setup_timeout(ACK_TIMEOUT_EXPONENT)
            .setup_retry_cnt(RETRY_COUNT)
            .setup_rnr_retry(RETRY_COUNT)
            .setup_max_read_atomic(READ_ATOMIC_OUTSTANDING_MAX);
        qp.modify(&a)
            .map_err(|e| err("cannot move a queue pair to RTS", e))
    }
}

/// Which end of a connection a queue pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// A client's: posts whole batches.
    Client,
    /// A memory node's: only responds (one-sided verbs post nothing there).
    Node,
}

impl Side {
    /// Send-queue depth: a client posts up to a batch at once; a node's
    /// queue pair never posts (the device answers READs and atomics
    /// without work requests), and one slot keeps the verbs layer content.
    fn send_depth(self) -> u32 {
        match self {
            Side::Client => VERBS_PER_BATCH_MAX as u32,
            Side::Node => 1,
        }
    }
}

/// Moves `qp` to the error state: the device executes nothing more that
/// arrives on it (a node revoking a client) or is posted to it (a client
/// whose node revoked it: its posted work completes flushed at once).
pub fn revoke(qp: &mut BasicQueuePair) -> Result<(), RdmaError> {
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::Error);
    qp.modify(&a)
        .map_err(|e| err("cannot move a queue pair to ERR", e))
}

trait MinWith {
    fn min_with(self, other: Self) -> Self;
}

impl MinWith for Mtu {
    fn min_with(self, other: Mtu) -> Mtu {
        if (self as u32) <= (other as u32) {
            self
        } else {
            other
        }
    }
}
