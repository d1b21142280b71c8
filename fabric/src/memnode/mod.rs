//! The memory node: regions in one image, and the checks every verb passes
//! before it touches them.
//!
//! A memory node is passive: this code is all its CPU does. The `tcp` server
//! calls it on behalf of remote clients; the `local` and `shm` transports call
//! it directly from the client thread (in the CXL model the checks stand for
//! what the memory controller and IOMMU enforce).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::addr::{AccessKey, Epoch, NodeId, RegionId, ATOMIC_BYTES};
use crate::admission::{AdmissionKey, FenceView, Gate};
use crate::error::{FabricError, NodeError};
use crate::image::{
    Header, ImageId, RegionEntry, EPOCH_OFFSET, PAGE_BYTES, REGIONS_PER_NODE_MAX, REGION_BYTES_MAX,
    REGION_BYTES_MIN,
};
use crate::memory::{PageAccess, PrefetchRange, SharedMemory};
use crate::region_table::RegionTable;

mod placement;
use crate::verb::{Completions, Op, OpKind, Outcome, VerbError, BATCH_BYTES_MAX};

/// A region to create: id and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionSpec {
    /// Region id.
    pub id: RegionId,
    /// Size in bytes (a multiple of 8).
    pub size: u64,
}

/// What a client must know of a region to address it on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionDescriptor {
    /// Region id.
    pub id: RegionId,
    /// Size in bytes.
    pub size: u64,
    /// Access key.
    pub key: AccessKey,
}

/// What a client learns from a node when it attaches or says hello.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDescriptor {
    /// The node's id.
    pub node: NodeId,
    /// The node's epoch now.
    pub epoch: Epoch,
    /// Its regions.
    pub regions: Vec<RegionDescriptor>,
}

/// Where a node placed by the control plane keeps its image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Memory of this process only (clients reach it over tcp).
    Anonymous,
    /// A new file (normally under `/dev/shm`) that `shm` clients on this
    /// host map; removed when the node stops.
    Shm(PathBuf),
    /// A file kept across restarts, regions and contents included.
    Persist(PathBuf),
}

/// A memory node's regions and their guard.
#[derive(Debug)]
pub struct MemoryNode {
    memory: SharedMemory,
    node: NodeId,
    /// The image's identity (`crate::image`): what the node registers with,
    /// so that the control plane tells this image from another under the
    /// same endpoint.
    image: ImageId,
    regions: RegionTable,
    /// Serialises region appends ([`MemoryNode::add_region`]) and the
    /// re-reading of an attached image's table.
    append: std::sync::Mutex<()>,
    /// A `--shm` image is volatile memory that happens to have a name: it is
    /// removed when its node stops. Persistent and attached images are kept.
    remove_on_drop: Option<PathBuf>,
    /// Until when this node serves verbs ([`MemoryNode::hold_lease_until`]).
    lease: ServingLease,
    /// Run by [`MemoryNode::advance_epoch`] once the epoch rose: what a
    /// server whose clients bypass this node's CPU (rdma) does to fence them.
    fences: FenceHooks,
    /// Who may connect and whose batches still run (`crate::admission`):
    /// a batch holds it read while its verbs run, so that once a new fence
    /// view is taken ([`MemoryNode::follow_fence`] returns) no verb of a
    /// client it fences runs, even one whose check came just before.
    gate: std::sync::RwLock<Gate>,
    /// Run by [`MemoryNode::follow_fence`] with the new gate, before it
    /// returns: what a server whose clients bypass this node's CPU (rdma)
    /// does to cut off the clients it no longer admits.
    fence_hooks: GateHooks,
}

/// Callbacks [`MemoryNode::follow_fence`] runs with the gate it took.
#[derive(Default)]
struct GateHooks(std::sync::Mutex<Vec<GateHook>>);

type GateHook = Box<dyn Fn(&Gate) + Send + Sync>;

impl std::fmt::Debug for GateHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |h| h.len());
        write!(f, "GateHooks({n})")
    }
}

/// Callbacks run with the new epoch each time it rises, before
/// [`MemoryNode::advance_epoch`] returns: once they return, no verb of a
/// client at an older epoch may run (what the caller then acts on).
#[derive(Default)]
struct FenceHooks(std::sync::Mutex<Vec<FenceHook>>);

type FenceHook = Box<dyn Fn(Epoch) + Send + Sync>;

impl std::fmt::Debug for FenceHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |h| h.len());
        write!(f, "FenceHooks({n})")
    }
}

/// How long a node that keeps a lease with the control plane may serve
/// verbs: until the instant its keeper gives with each granted renewal
/// (`cluster::placement` gives the last instant the control plane cannot
/// yet have declared it dead, by this process's monotonic clock), and from
/// its first grant on once it expects one. A node past it may have been
/// declared dead and its regions promoted elsewhere and written: what it
/// holds may be stale, and a batch a client sent before the promotion may
/// still be waiting in its socket (a node paused past its lease finds them
/// when it resumes). It serves again once a renewal is granted; a node
/// declared dead is refused that and fences its old clients first
/// (`cluster::placement`). A node that keeps no lease (tests, a node with
/// no control plane) serves always.
///
/// Where the node's CPU does not see the verbs (the `shm` transport) this
/// is not enforced; there the epoch fence alone refuses old maps.
#[derive(Debug)]
struct ServingLease {
    /// What `until_ns` counts from.
    base: Instant,
    /// Nanoseconds after `base` the lease ends; [`ServingLease::NONE`] while
    /// no lease was ever granted.
    until_ns: AtomicU64,
}

impl ServingLease {
    const NONE: u64 = u64::MAX;

    fn new() -> Self {
        ServingLease {
            base: Instant::now(),
            until_ns: AtomicU64::new(Self::NONE),
        }
    }

    fn hold_until(&self, until: Instant) {
        let ns = (until.saturating_duration_since(self.base).as_nanos() as u64).min(Self::NONE - 1);
        // A later grant never shortens an earlier one (renewals are
        // sequential anyway); the first replaces NONE.
        let _ = self
            .until_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                Some(if current == Self::NONE {
                    ns
                } else {
                    current.max(ns)
                })
            });
    }

    fn serving(&self) -> bool {
        let until = self.until_ns.load(Ordering::Acquire);
        until == Self::NONE || (self.base.elapsed().as_nanos() as u64) < until
    }
}

impl MemoryNode {
    /// A node whose regions live in this process only.
    pub fn anonymous(node: NodeId, regions: &[RegionSpec]) -> Result<Self, NodeError> {
        let header = Header::layout(node, 1, &with_fresh_keys(regions)?);
        let memory = SharedMemory::anonymous(header.image_bytes as usize)
            .map_err(|e| NodeError::Map(e, header.image_bytes))?;
        Ok(Self::initialised(memory, header, None))
    }

    /// A node whose image is a new file at `path` (normally under `/dev/shm`)
    /// that `shm` clients attach to. The file is removed when the node is
    /// dropped. Refuses to overwrite an existing file: it may belong to a
    /// live node.
    pub fn create_shm(path: &Path, node: NodeId, regions: &[RegionSpec]) -> Result<Self, NodeError> {
        Self::create_shm_image(path, Header::layout(node, 1, &with_fresh_keys(regions)?))
    }

    /// A node whose image is the file at `path`, kept across restarts. If the
    /// file exists its regions must be exactly `regions` (ids and sizes), and
    /// their contents, keys and epoch are taken over; otherwise it is created.
    /// Returns the node and whether an existing image was reopened.
    pub fn open_persistent(
        path: &Path,
        node: NodeId,
        regions: &[RegionSpec],
    ) -> Result<(Self, bool), NodeError> {
        if !path.exists() {
            let header = Header::layout(node, 1, &with_fresh_keys(regions)?);
            let memory = create_image_file(path, &header)?;
            memory
                .flush(0, PAGE_BYTES as usize)
                .map_err(|source| io_error("cannot flush", path, source))?;
            return Ok((Self::initialised(memory, header, None), false));
        }
        let me = Self::attach(path)?;
        let found: Vec<RegionSpec> = me
            .regions
            .entries()
            .map(|r| RegionSpec {
                id: r.id,
                size: r.size,
            })
            .collect();
        if found != regions {
            return Err(NodeError::Regions(format!(
                "{} holds regions {} but {} were asked for; use the same --region flags or another file",
                path.display(),
                describe(&found),
                describe(regions)
            )));
        }
        if me.node != node {
            return Err(NodeError::Regions(format!(
                "{} belongs to memory node {}, not {node}",
                path.display(),
                me.node
            )));
        }
        Ok((me, true))
    }

    /// The id of the image in the file at `path`, `None` if there is no
    /// file: what a node registers with before it opens the image under
    /// the node id the control plane gives it.
    pub fn image_in(path: &Path) -> Result<Option<ImageId>, NodeError> {
        if !path.exists() {
            return Ok(None);
        }
        Ok(Some(Self::attach(path)?.image))
    }

    /// Maps an existing image (an `shm` client attaching to a node, or a
    /// persistent node restarting).
    pub fn attach(path: &Path) -> Result<Self, NodeError> {
        let memory = SharedMemory::open_file(path)
            .map_err(|source| io_error("cannot map memory image", path, source))?;
        if memory.len() < PAGE_BYTES as usize {
            return Err(NodeError::Header {
                path: path.to_owned(),
                source: crate::image::HeaderError::Corrupt("shorter than one page"),
            });
        }
        let mut page = vec![0u8; PAGE_BYTES as usize];
        memory.read(0, &mut page);
        let header = Header::decode(&page, memory.len() as u64).map_err(|source| NodeError::Header {
            path: path.to_owned(),
            source,
        })?;
        Ok(MemoryNode {
            memory,
            node: header.node,
            image: header.image,
            regions: RegionTable::new(&header.regions),
            append: std::sync::Mutex::new(()),
            remove_on_drop: None,
            lease: ServingLease::new(),
            fences: FenceHooks::default(),
            gate: std::sync::RwLock::new(Gate::open()),
            fence_hooks: GateHooks::default(),
        })
    }

    fn initialised(memory: SharedMemory, header: Header, remove_on_drop: Option<PathBuf>) -> Self {
        memory.write(0, &header.encode());
        MemoryNode {
            memory,
            node: header.node,
            image: header.image,
            regions: RegionTable::new(&header.regions),
            append: std::sync::Mutex::new(()),
            remove_on_drop,
            lease: ServingLease::new(),
            fences: FenceHooks::default(),
            gate: std::sync::RwLock::new(Gate::open()),
            fence_hooks: GateHooks::default(),
        }
    }

    /// A node with no region yet and `capacity_bytes` for the regions the
    /// control plane places on it ([`MemoryNode::add_region`]). A
    /// [`Backing::Persist`] image that exists is reopened with its regions,
    /// contents and epoch, and must belong to `node`. Returns the node and
    /// whether an existing image was reopened.
    pub fn placed(node: NodeId, capacity_bytes: u64, backing: &Backing) -> Result<(Self, bool), NodeError> {
        Self::placed_as(node, capacity_bytes, backing, None)
    }

    /// [`MemoryNode::placed`], where a new image takes the id `image` (one
    /// the node registered with before it knew its node id) and an
    /// existing one must have it.
    pub fn placed_as(
        node: NodeId,
        capacity_bytes: u64,
        backing: &Backing,
        image: Option<ImageId>,
    ) -> Result<(Self, bool), NodeError> {
        if !(PAGE_BYTES..=CAPACITY_BYTES_MAX).contains(&capacity_bytes) {
            return Err(NodeError::Regions(format!(
                "a placed node offers {PAGE_BYTES} to {CAPACITY_BYTES_MAX} bytes, not {capacity_bytes}"
            )));
        }
        let mut header = Header::with_capacity(node, 1, capacity_bytes);
        if let Some(image) = image {
            header.image = image;
        }
        let memory = match backing {
            Backing::Anonymous => SharedMemory::anonymous(header.image_bytes as usize)
                .map_err(|e| NodeError::Map(e, header.image_bytes))?,
            Backing::Shm(path) => return Self::create_shm_image(path, header).map(|n| (n, false)),
            Backing::Persist(path) if path.exists() => {
                let me = Self::attach(path)?;
                if me.node != node {
                    return Err(NodeError::Regions(format!(
                        "{} belongs to memory node {}, not {node}",
                        path.display(),
                        me.node
                    )));
                }
                if let Some(image) = image.filter(|&i| i != me.image) {
                    return Err(NodeError::Regions(format!(
                        "{} holds image {}, not {image}: it changed since it was read",
                        path.display(),
                        me.image
                    )));
                }
                return Ok((me, true));
            }
            Backing::Persist(path) => {
                let memory = create_image_file(path, &header)?;
                memory.write(0, &header.encode());
                memory
                    .flush(0, PAGE_BYTES as usize)
                    .map_err(|source| io_error("cannot flush", path, source))?;
                return Ok((Self::initialised(memory, header, None), false));
            }
        };
        Ok((Self::initialised(memory, header, None), false))
    }

    fn create_shm_image(path: &Path, header: Header) -> Result<Self, NodeError> {
        if path.exists() {
            return Err(NodeError::Io {
                context: "refusing to overwrite existing memory image",
                path: path.to_owned(),
                source: std::io::ErrorKind::AlreadyExists.into(),
            });
        }
        let memory = create_image_file(path, &header)?;
        Ok(Self::initialised(memory, header, Some(path.to_owned())))
    }

    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.node
    }

    /// The node's epoch: batches from clients with an older map are refused.
    pub fn epoch(&self) -> Epoch {
        self.memory.load(EPOCH_OFFSET as usize)
    }

    /// Raises the epoch to `epoch` (never lowers it); returns the epoch now in
    /// force. Called when the control plane publishes a new map.
    pub fn advance_epoch(&self, epoch: Epoch) -> Epoch {
        let mut current = self.epoch();
        while current < epoch {
            let seen = self.memory.cas(EPOCH_OFFSET as usize, current, epoch);
            if seen == current {
                let hooks = self.fences.0.lock().unwrap_or_else(|p| p.into_inner());
                for hook in hooks.iter() {
                    hook(epoch);
                }
                return epoch;
            }
            current = seen;
        }
        current
    }

    /// Runs `fence` with the new epoch each time [`MemoryNode::advance_epoch`]
    /// raises it, before that returns. A server whose clients' verbs never
    /// pass this node's checks (rdma) revokes their access there.
    pub fn on_epoch_advance(&self, fence: impl Fn(Epoch) + Send + Sync + 'static) {
        self.fences
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(fence));
    }

    /// Every region this process knows, with where its bytes are mapped
    /// here: what an rdma server registers with its device.
    #[cfg(feature = "rdma")]
    pub(crate) fn mapped_regions(&self) -> Vec<(RegionDescriptor, usize)> {
        let base = self.memory.base_addr();
        self.regions
            .entries()
            .filter_map(|e| {
                let (_, key) = self.regions.find_keyed(e.id)?;
                let at = usize::try_from(e.image_offset).ok()?;
                Some((
                    RegionDescriptor {
                        id: e.id,
                        size: e.size,
                        key,
                    },
                    base + at,
                ))
            })
            .collect()
    }

    /// Allocates and maps every page of the image now, through this node's
    /// mapping, as registering memory with an RDMA NIC pins it: verbs then
    /// never wait for a page fault (a first touch of a tmpfs page costs
    /// about 3 µs here, more than a verb). Costs the image's whole size in
    /// memory at once, and about 0.7 s per GiB on tmpfs. Contents are
    /// unchanged.
    pub fn populate(&self) -> Result<(), NodeError> {
        self.memory
            .populate()
            .map_err(|e| NodeError::Populate(e, self.memory.len() as u64))
    }

    /// [`MemoryNode::populate`] for region `id` alone: what a node does
    /// with a region placed on it before it reports it ready, as an RDMA
    /// NIC pins a region registered with it, so that neither the clients'
    /// verbs nor a re-replication's copy into it wait for page faults.
    /// `access` says what this process will do through the mapping.
    pub fn populate_region(&self, id: RegionId, access: PageAccess) -> Result<(), NodeError> {
        let (e, _) = self
            .entry(id, |_| true)
            .ok_or_else(|| NodeError::Regions(format!("region {id} is not held here")))?;
        self.memory
            .populate_range(e.image_offset as usize, e.size as usize, access)
            .map_err(|err| NodeError::Populate(err, e.size))
    }

    /// Makes the whole image durable (msync); a no-op for anonymous memory.
    pub fn sync(&self) -> std::io::Result<()> {
        self.memory.flush(0, self.memory.len())
    }

    /// True when the image is a file (shm or persistent).
    pub fn is_file_backed(&self) -> bool {
        self.memory.is_file_backed()
    }

    /// What a client needs to address this node.
    pub fn descriptor(&self) -> NodeDescriptor {
        NodeDescriptor {
            node: self.node,
            epoch: self.epoch(),
            regions: self
                .regions
                .entries()
                .map(|r| RegionDescriptor {
                    id: r.id,
                    size: r.size,
                    key: self.regions.find_keyed(r.id).map_or(r.key, |(_, k)| k),
                })
                .collect(),
        }
    }

    /// Replaces what this node admits (a new node's is [`Gate::open`]:
    /// `kintsugi memnode` sets a guarded one before it serves).
    pub fn set_gate(&self, gate: Gate) {
        *self.gate_mut() = gate;
    }

    /// Takes the key credentials are checked with (a placed node receives
    /// it from its control plane).
    pub fn set_admission_key(&self, key: AdmissionKey) {
        self.gate_mut().set_key(key);
    }

    /// Follows `view` (unless the gate follows a newer one) and returns the
    /// sequence now followed. Once it returns, no batch of a client the view
    /// fences runs another verb here: batches hold the gate while they run,
    /// so this waits for those under way.
    pub fn follow_fence(&self, view: FenceView) -> Option<u64> {
        let mut g = self.gate_mut();
        if g.follow(view) {
            for hook in self
                .fence_hooks
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
            {
                hook(&g);
            }
        }
        g.view().map(|v| v.seq)
    }

    /// Runs `cut` with the gate each time [`MemoryNode::follow_fence`] takes
    /// a new view, before it returns: once `cut` returns, no client the gate
    /// no longer admits may reach this node's memory.
    pub fn on_fence(&self, cut: impl Fn(&Gate) + Send + Sync + 'static) {
        self.fence_hooks
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(cut));
    }

    /// The gate, read: held across a batch's check and its verbs.
    pub fn gate(&self) -> std::sync::RwLockReadGuard<'_, Gate> {
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    fn gate_mut(&self) -> std::sync::RwLockWriteGuard<'_, Gate> {
        self.gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// This node may serve verbs until `until` (by this process's clock),
    /// as its lease keeper judges from a granted renewal: it refuses every
    /// batch after it ([`FabricError::NodeLeaseLapsed`]) until a later
    /// instant is given. An instant already past makes a node that served
    /// freely (no lease kept yet) wait for its first grant.
    pub fn hold_lease_until(&self, until: Instant) {
        self.lease.hold_until(until);
    }

    /// Whether this node serves verbs now: its lease is current, or it
    /// keeps none.
    pub fn serving(&self) -> bool {
        self.lease.serving()
    }

    /// Fails with `StaleEpoch` if a batch from a client at `client_epoch`
    /// must be refused.
    pub fn check_epoch(&self, client_epoch: Epoch) -> Result<(), FabricError> {
        let node_epoch = self.epoch();
        if client_epoch < node_epoch {
            return Err(FabricError::StaleEpoch {
                node: self.node,
                client_epoch,
                node_epoch,
            });
        }
        Ok(())
    }

    /// Executes one verb, appending its completion. `batch_read_bytes`
    /// accumulates READ bytes across the batch's verbs to this node so that
    /// one batch cannot make the node produce more than [`BATCH_BYTES_MAX`].
    pub fn execute_op(&self, op: &Op, payload: &[u8], out: &mut Completions, batch_read_bytes: &mut u64) {
        let entry = match self.check(op) {
            Ok(entry) => entry,
            Err(e) => return out.push(Err(e)),
        };
        let at = (entry.image_offset + op.offset) as usize;
        match op.kind {
            OpKind::Read { len } => {
                *batch_read_bytes += u64::from(len);
                if *batch_read_bytes > BATCH_BYTES_MAX {
                    return out.push(Err(VerbError::TooLarge {
                        len: *batch_read_bytes,
                    }));
                }
                self.memory.read(at, out.push_read(len));
            }
            OpKind::Write { data } => {
                let Some(bytes) = payload.get(data.range()) else {
                    // The wire decoder and the batch builder both produce
                    // in-bounds payload ranges; anything else is a caller bug
                    // we still refuse to act on.
                    return out.push(Err(VerbError::TooLarge { len: data.len.into() }));
                };
                self.memory.write(at, bytes);
                out.push(Ok(Outcome::Done));
            }
            OpKind::Cas { expect, new } => out.push(Ok(Outcome::Old(self.memory.cas(at, expect, new)))),
            OpKind::Faa { add } => out.push(Ok(Outcome::Old(self.memory.faa(at, add)))),
            OpKind::Flush { len } => out.push(
                self.memory
                    .flush(at, len as usize)
                    .map(|()| Outcome::Done)
                    .map_err(|e| {
                        tracing::error!(node = self.node, error = %e, "flush failed");
                        VerbError::FlushFailed
                    }),
            ),
        }
    }

    /// Prefetches what the ops of `group` aimed at this node will touch
    /// (at most [`PREFETCH_GROUP_VERBS`] ops), their addresses worked out
    /// first and the prefetches then issued back to back
    /// (`SharedMemory::prefetch_all`). Ops for other nodes are skipped.
    /// Only the region lookup is needed: `execute_op` checks each verb when
    /// it runs, and a prefetch, bounded by the mapping itself, changes
    /// nothing a wrong verb could observe.
    pub(crate) fn prefetch_ops(&self, group: &[Op]) {
        debug_assert!(group.len() <= PREFETCH_GROUP_VERBS);
        let mut ranges = [PrefetchRange::default(); PREFETCH_GROUP_VERBS];
        let mut n = 0;
        for op in group.iter().filter(|op| op.node == self.node) {
            // A store needs its lines in exclusive state.
            let write = !matches!(op.kind, OpKind::Read { .. } | OpKind::Flush { .. });
            if let Some(r) = self.range_in_image(op.region, op.offset, op.kind.len(), write) {
                ranges[n] = r;
                n += 1;
            }
        }
        self.memory.prefetch_all(&ranges[..n]);
    }

    /// Prefetches `[offset, offset + len)` of `region` for reading.
    pub(crate) fn prefetch_range(&self, region: RegionId, offset: u64, len: u64) {
        if let Some(r) = self.range_in_image(region, offset, len, false) {
            self.memory.prefetch_all(&[r]);
        }
    }

    /// Where `[offset, offset + len)` of `region` is in the image, if the
    /// region is here and holds it.
    fn range_in_image(&self, region: RegionId, offset: u64, len: u64, write: bool) -> Option<PrefetchRange> {
        let entry = self.regions.find(region)?;
        // Past the region's end would be another region's memory: harmless
        // to a prefetch, but not what was asked for.
        if offset.checked_add(len).is_none_or(|end| end > entry.size) {
            return None;
        }
        Some(PrefetchRange {
            offset: usize::try_from(entry.image_offset.checked_add(offset)?).ok()?,
            len: usize::try_from(len).ok()?,
            write,
        })
    }

    /// Region `id`'s entry and the key it is reached with now. One that is
    /// missing, or whose key does not pass `current`, may have been taken
    /// (or placed here again under a new key) since this table was read, by
    /// the node of an attached image: the table is re-read, then decided.
    fn entry(&self, id: RegionId, current: impl Fn(AccessKey) -> bool) -> Option<(&RegionEntry, AccessKey)> {
        match self.regions.find_keyed(id) {
            Some(found) if current(found.1) => Some(found),
            _ => {
                self.refresh();
                self.regions.find_keyed(id)
            }
        }
    }

    /// The checks of one verb: region known, key, size limit, bounds, alignment.
    fn check(&self, op: &Op) -> Result<&RegionEntry, VerbError> {
        let (entry, key) = self
            .entry(op.region, |k| k == op.key)
            .ok_or(VerbError::UnknownRegion { region: op.region })?;
        if key != op.key {
            return Err(VerbError::BadKey);
        }
        op.check_extent(entry.size)?;
        Ok(entry)
    }
}

impl Drop for MemoryNode {
    fn drop(&mut self) {
        if let Some(path) = &self.remove_on_drop {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove shm image");
            }
        }
    }
}

/// Largest capacity a placed node offers: as many largest regions as its
/// table holds.
pub const CAPACITY_BYTES_MAX: u64 = REGIONS_PER_NODE_MAX as u64 * REGION_BYTES_MAX;

/// Verbs whose lines a batch asks for together, as a NIC works on several
/// of a batch's verbs at once: the lines of verbs `[i + 2G, i + 3G)` are
/// requested back to back when verb `i` (a multiple of `G`) is about to
/// run. Back to back matters: `perf` puts the stall of random one-line
/// READs on the prefetch instruction itself (a TLB miss's page walk, by
/// all signs, on this VM's AMD EPYC), and prefetches that enter the
/// reorder window together overlap their stalls, where one prefetch per
/// verb, `G` verbs ahead, took them nearly one at a time. Grouping cut the
/// rtx rehash of a 3M-key hash table (`bench rehash --variant rtx --keys
/// 3000000 --threads 0`, median of 5) from 852 to 680 ms.
/// Two groups ahead covers a miss's latency with the verbs run meanwhile;
/// asking for a whole 4,096-verb batch up front did not (the copies
/// missed again).
const PREFETCH_GROUP_VERBS: usize = 16;

/// Executes `ops` against in-process nodes, as one batch: the epoch of every
/// node involved is checked before any verb runs; verbs run in order; after a
/// verb fails, later verbs to the same node complete as `Flushed`.
pub(crate) fn execute_inline<'a>(
    node: impl Fn(NodeId) -> Option<&'a MemoryNode>,
    epoch: Epoch,
    ops: &[Op],
    payload: &[u8],
    out: &mut Completions,
) -> Result<(), FabricError> {
    let mut nodes = BatchNodes::default();
    for op in ops {
        if nodes.find(op.node).is_none() {
            let n = node(op.node).ok_or(FabricError::UnknownNode { node: op.node })?;
            if !n.serving() {
                return Err(FabricError::NodeLeaseLapsed { node: op.node });
            }
            n.check_epoch(epoch)?;
            nodes.add(op.node);
        }
    }
    const G: usize = PREFETCH_GROUP_VERBS;
    // Batches nearly always go to one node; verbs for the others in a group
    // are prefetched one by one.
    let prefetch_group = |group: &[Op]| {
        let Some(first) = group.first() else {
            return;
        };
        if let Some(n) = node(first.node) {
            n.prefetch_ops(group);
        }
        for op in group.iter().filter(|op| op.node != first.node) {
            if let Some(n) = node(op.node) {
                n.prefetch_ops(std::slice::from_ref(op));
            }
        }
    };
    ops.chunks(G).take(2).for_each(prefetch_group);
    // The node of the previous op: consecutive ops mostly share it.
    let mut current: Option<(NodeId, &MemoryNode)> = None;
    for (i, op) in ops.iter().enumerate() {
        if i % G == 0 {
            if let Some(group) = ops.get(i + 2 * G..) {
                prefetch_group(&group[..group.len().min(G)]);
            }
        }
        let state = nodes
            .find(op.node)
            .expect("every node was added by the epoch pass");
        if state.failed {
            out.push(Err(VerbError::Flushed));
            continue;
        }
        let n = match current {
            Some((id, n)) if id == op.node => n,
            _ => {
                let n = node(op.node).ok_or(FabricError::UnknownNode { node: op.node })?;
                current = Some((op.node, n));
                n
            }
        };
        n.execute_op(op, payload, out, &mut state.read_bytes);
        state.failed = matches!(out.as_slice().last(), Some(Err(_)));
    }
    Ok(())
}

/// What one batch has done on each node it touches. A batch touches few
/// nodes (the replicas of a few regions), so the common case lives on the
/// stack and the verb path does not allocate.
#[derive(Default)]
struct BatchNodes {
    inline: [NodeState; BatchNodes::INLINE],
    inline_len: usize,
    spill: Vec<NodeState>,
}

#[derive(Clone, Copy, Default)]
struct NodeState {
    node: NodeId,
    /// A verb to this node failed: the rest complete as `Flushed`.
    failed: bool,
    /// READ bytes so far: the per-node, per-batch budget a tcp node enforces.
    read_bytes: u64,
}

impl BatchNodes {
    const INLINE: usize = 8;

    fn find(&mut self, node: NodeId) -> Option<&mut NodeState> {
        let inline = &mut self.inline[..self.inline_len];
        match inline.iter().position(|s| s.node == node) {
            Some(i) => Some(&mut inline[i]),
            None => self.spill.iter_mut().find(|s| s.node == node),
        }
    }

    fn add(&mut self, node: NodeId) {
        let state = NodeState {
            node,
            ..NodeState::default()
        };
        if self.inline_len < Self::INLINE {
            self.inline[self.inline_len] = state;
            self.inline_len += 1;
        } else {
            self.spill.push(state);
        }
    }
}

fn with_fresh_keys(regions: &[RegionSpec]) -> Result<Vec<(RegionId, u64, AccessKey)>, NodeError> {
    validate(regions)?;
    let mut rng = rand::thread_rng();
    Ok(regions.iter().map(|r| (r.id, r.size, rng.gen())).collect())
}

/// Checks a region list before anything is mapped.
pub fn validate(regions: &[RegionSpec]) -> Result<(), NodeError> {
    if regions.is_empty() {
        return Err(NodeError::Regions(
            "a memory node needs at least one region".into(),
        ));
    }
    if regions.len() > REGIONS_PER_NODE_MAX {
        return Err(NodeError::Regions(format!(
            "{} regions asked for, a node holds at most {REGIONS_PER_NODE_MAX}",
            regions.len()
        )));
    }
    for (i, r) in regions.iter().enumerate() {
        if regions[..i].iter().any(|o| o.id == r.id) {
            return Err(NodeError::Regions(format!("region {} given twice", r.id)));
        }
        if !(REGION_BYTES_MIN..=REGION_BYTES_MAX).contains(&r.size) || r.size % ATOMIC_BYTES != 0 {
            return Err(NodeError::Regions(format!(
                "region {} has size {} bytes; sizes must be multiples of 8 between {REGION_BYTES_MIN} and {REGION_BYTES_MAX}",
                r.id, r.size
            )));
        }
    }
    Ok(())
}

fn create_image_file(path: &Path, header: &Header) -> Result<SharedMemory, NodeError> {
    SharedMemory::create_file(path, header.image_bytes as usize)
        .map_err(|source| io_error("cannot create memory image", path, source))
}

fn io_error(context: &'static str, path: &Path, source: std::io::Error) -> NodeError {
    NodeError::Io {
        context,
        path: path.to_owned(),
        source,
    }
}

fn describe(regions: &[RegionSpec]) -> String {
    let parts: Vec<String> = regions.iter().map(|r| format!("{}:{}", r.id, r.size)).collect();
    format!("[{}]", parts.join(", "))
}
