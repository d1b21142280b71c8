//! What `kintsugi fabric bench` runs: a validated [`Plan`].

use std::path::PathBuf;
use std::time::Duration;

use fabric::RegionId;
use harness::TransportKind;

use super::workload::Workload;

/// `--op`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpArg {
    /// READ --size bytes per verb.
    Read,
    /// WRITE --size bytes per verb.
    Write,
    /// 8-byte compare-and-swap (always succeeds: each word is touched by one client only).
    Cas,
    /// 8-byte fetch-and-add.
    Faa,
}

impl OpArg {
    /// The flag's value, as reports and JSON print it.
    pub fn name(self) -> &'static str {
        match self {
            OpArg::Read => "read",
            OpArg::Write => "write",
            OpArg::Cas => "cas",
            OpArg::Faa => "faa",
        }
    }

    /// Whether the verb is an 8-byte atomic (CAS, FAA): 8 is its only size.
    pub fn is_atomic(self) -> bool {
        matches!(self, OpArg::Cas | OpArg::Faa)
    }
}

/// Where the memory under test comes from.
#[derive(Clone, Debug)]
pub enum Target {
    /// A fresh in-process memory node.
    Local,
    /// A fresh image in a temporary directory, or the image at this path.
    Shm(Option<PathBuf>),
    /// An in-process server, or the memory node at this address.
    Tcp(Option<String>),
    /// An in-process rdma server, or the rdma memory node whose control
    /// channel listens at this address.
    Rdma(Option<String>),
}

/// A validated run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// How verbs reach memory (`--transport`): local, shm, tcp or rdma.
    pub transport: TransportKind,
    /// The memory to measure: a fresh node, or the one `--shm` or `--addr`
    /// names.
    pub target: Target,
    /// Region to use on an existing node; `None` means its first region.
    pub region: Option<RegionId>,
    /// What each round trip does (`--op`, `--size`, `--batch`).
    pub work: Workload,
    /// Client threads (`--threads`), each with its own client (and, on tcp, its
    /// own connection).
    pub threads: usize,
    /// Asked for on the command line.
    pub outstanding: usize,
    /// In force: 1 for transports that complete inline.
    pub depth: usize,
    /// How long each of the two phases runs (`--duration`).
    pub duration: Duration,
    /// Print one JSON object on stdout instead of the table (`--json`).
    pub json: bool,
}

impl Plan {
    /// Clients that run at once: one per thread, times the depth on tcp.
    pub fn slots(&self) -> usize {
        self.threads * self.depth
    }

    /// Round trips between two timed ones (see the module docs of `measure`).
    pub fn sample_every(&self) -> u64 {
        match self.transport {
            TransportKind::Local | TransportKind::Shm => super::measure::SAMPLE_EVERY_INLINE,
            TransportKind::Tcp | TransportKind::Rdma => super::measure::SAMPLE_EVERY_TCP,
        }
    }
}
