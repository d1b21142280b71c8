//! The command line of `kintsugi fabric bench` and its validation into a [`Plan`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use fabric::{RegionId, ATOMIC_BYTES, BATCH_BYTES_MAX, VERBS_PER_BATCH_MAX, VERB_BYTES_MAX};
use harness::TransportKind;

use crate::cli::units::{parse_bytes, parse_duration};
use bench::fabric::plan::{OpArg, Plan, Target};
use bench::fabric::workload::Workload;

/// Most client threads a run may start (the tcp memory node serves at most
/// `fabric::server::CONNECTIONS_MAX` connections, one per thread).
const THREADS_MAX: usize = fabric::server::CONNECTIONS_MAX;
/// Most concurrent batches per thread (tcp only).
const OUTSTANDING_MAX: usize = 1024;

/// Arguments of `kintsugi fabric bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
What runs:
  Two phases of --duration each, one after the other. Phase 1 drives the fabric: every thread has its
  own Client (a fork), reuses one Batch, and executes round trips of --batch verbs of --op, each verb on
  its own --size bytes; threads (and, on tcp, tasks) touch disjoint, cache-line aligned addresses, so
  CAS is uncontended and always succeeds. Phase 2 is the raw baseline for the same work:
    local  plain AtomicU64 compare_exchange / fetch_add and copy_nonoverlapping on an anonymous
           mapping of the same size, same threads, same addresses, --batch ops per \"round trip\";
    shm    the same, on the same memory image file, mapped again by this process;
    tcp    a bare tokio TCP echo on loopback: the client sends frames of exactly the size of the
           fabric's request frame for this batch and the server answers with frames of the fabric's
           response size, over one connection per thread with --outstanding frames in flight.
  The ratio is fabric verbs/s / baseline verbs/s (for tcp: echo frames/s x --batch); 1.0 is parity.

Latency:
  Reading the clock costs 20-40 ns, as much as an 8-byte CAS, so local and shm time only every 1024th
  round trip (tcp every one); the baseline is timed the same way. Percentiles include one clock read.

The bench writes into the region it uses: point --addr or --shm only at a scratch memory node.

Examples:
  kintsugi fabric bench --op cas
  kintsugi fabric bench --transport shm --op read --size 1KiB --threads 2 --duration 3s
  kintsugi fabric bench --transport tcp --batch 16 --outstanding 8 --json
  kintsugi fabric bench --transport tcp --addr 127.0.0.1:7100 --op write --size 256")]
pub struct BenchArgs {
    /// How verbs reach memory: local (in-process memory node), shm (a mapped memory image, the CXL
    /// model) or tcp (a memory-node server).
    #[arg(long, value_enum, default_value_t = TransportKind::Local)]
    pub transport: TransportKind,
    /// tcp only: the running memory node to measure (`kintsugi memnode --listen ADDR`). Without it a
    /// memory node server is started in this process on 127.0.0.1 for the run.
    #[arg(long, value_name = "ADDR")]
    pub addr: Option<String>,
    /// shm only: the memory image of a running node (`kintsugi memnode --shm PATH`) to attach to.
    /// Without it a fresh image is created in a temporary directory under /dev/shm for the run.
    #[arg(long, value_name = "PATH")]
    pub shm: Option<PathBuf>,
    /// With --addr or --shm: the region to use (default: the first region the node holds).
    #[arg(long, value_name = "ID")]
    pub region: Option<RegionId>,
    /// The verb every batch is made of.
    #[arg(long, value_enum, default_value_t = OpArg::Read)]
    pub op: OpArg,
    /// Bytes per verb (e.g. 8, 1024, 1KiB). CAS and FAA are 8-byte verbs: 8 is the only size allowed.
    #[arg(long, value_name = "BYTES", default_value = "8", value_parser = parse_bytes)]
    pub size: u64,
    /// Verbs per batch; one batch is one round trip.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub batch: usize,
    /// Client threads, each with its own Client (and, on tcp, its own connection).
    #[arg(long, value_name = "T", default_value_t = 1)]
    pub threads: usize,
    /// tcp only: batches in flight per thread (K tasks with forked clients pipelining on the thread's
    /// connection). local and shm complete verbs inline, so their depth is always 1.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub outstanding: usize,
    /// How long each of the two phases runs (e.g. 5s, 200ms).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl BenchArgs {
    /// Checks every combination and says what is wrong in terms of the flags.
    pub fn validate(self) -> anyhow::Result<Plan> {
        let BenchArgs {
            transport,
            addr,
            shm,
            region,
            op,
            size,
            batch,
            threads,
            outstanding,
            duration,
            json,
        } = self;
        if addr.is_some() && !matches!(transport, TransportKind::Tcp | TransportKind::Rdma) {
            bail!(
                "--addr names a tcp or rdma memory node; it needs --transport tcp or rdma (got --transport {})",
                transport.name()
            );
        }
        if shm.is_some() && transport != TransportKind::Shm {
            bail!(
                "--shm names a memory image to map; it needs --transport shm (got --transport {})",
                transport.name()
            );
        }
        if region.is_some() && addr.is_none() && shm.is_none() {
            bail!("--region picks a region of an existing node; it needs --addr or --shm");
        }
        if op.is_atomic() && size != ATOMIC_BYTES {
            bail!(
                "--op {} is an 8-byte atomic verb: --size must be 8 (got {size})",
                op.name()
            );
        }
        if size == 0 || size > u64::from(VERB_BYTES_MAX) {
            bail!("--size must be between 1 and {VERB_BYTES_MAX} bytes per verb (got {size})");
        }
        if batch == 0 || batch > VERBS_PER_BATCH_MAX {
            bail!("--batch must be between 1 and {VERBS_PER_BATCH_MAX} verbs (fabric::VERBS_PER_BATCH_MAX), got {batch}");
        }
        if !op.is_atomic() && batch as u64 * size > BATCH_BYTES_MAX {
            bail!(
                "--batch {batch} x --size {size} = {} bytes per round trip, over the fabric's {BATCH_BYTES_MAX}-byte batch limit (fabric::BATCH_BYTES_MAX)",
                batch as u64 * size
            );
        }
        if threads == 0 || threads > THREADS_MAX {
            bail!("--threads must be between 1 and {THREADS_MAX}, got {threads}");
        }
        if transport == TransportKind::Rdma && outstanding > 1 {
            bail!("--outstanding {outstanding}: the rdma transport runs one batch per queue pair at a time; use --threads for concurrency");
        }
        if outstanding == 0 || outstanding > OUTSTANDING_MAX {
            bail!("--outstanding must be between 1 and {OUTSTANDING_MAX}, got {outstanding}");
        }
        if duration.is_zero() {
            bail!("--duration must be longer than zero");
        }
        let (target, depth) = match transport {
            TransportKind::Local => (Target::Local, 1),
            TransportKind::Shm => (Target::Shm(shm), 1),
            TransportKind::Tcp => (Target::Tcp(addr), outstanding),
            // One queue pair per node and transport: a thread's outstanding
            // batches would wait on each other.
            TransportKind::Rdma => (Target::Rdma(addr), 1),
        };
        let size = u32::try_from(size)?;
        Ok(Plan {
            transport,
            target,
            region,
            work: Workload::new(op, size, batch),
            threads,
            outstanding,
            depth,
            duration,
            json,
        })
    }
}
