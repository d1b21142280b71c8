//! How a tool reaches memory: the one `--transport` enum of every command
//! and experiment file. What each tool accepts is its own check
//! ([`TransportKind::require`]): a chaos run's clients are processes, so
//! `local` is not for them; `bench txn` has no tcp server.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A way to reach a memory node.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// An in-process memory node; verbs run on the calling thread.
    Local,
    /// A memory image in /dev/shm mapped by every client (the CXL model).
    Shm,
    /// A memory-node server over loopback tcp, one connection per client.
    Tcp,
    /// A memory-node server on an RDMA device, one queue pair per client
    /// (binaries built with `--features rdma`; soft-RoCE or a NIC).
    Rdma,
}

/// A transport a tool does not run on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{what} cannot run on {got}: only on {}", names(allowed))]
pub struct UnsupportedTransport {
    /// The tool or setting that refused it.
    pub what: &'static str,
    /// What was asked for.
    pub got: TransportKind,
    /// What it runs on.
    pub allowed: &'static [TransportKind],
}

fn names(ts: &[TransportKind]) -> String {
    ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(" or ")
}

impl TransportKind {
    /// Every transport, in the order `--help` lists them.
    pub const ALL: [TransportKind; 4] = [
        TransportKind::Local,
        TransportKind::Shm,
        TransportKind::Tcp,
        TransportKind::Rdma,
    ];

    /// The name flags, files and reports use.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Local => "local",
            TransportKind::Shm => "shm",
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        }
    }

    /// `self` if `what` runs on it, else the error that says what it runs on.
    pub fn require(
        self,
        what: &'static str,
        allowed: &'static [TransportKind],
    ) -> Result<TransportKind, UnsupportedTransport> {
        if allowed.contains(&self) {
            Ok(self)
        } else {
            Err(UnsupportedTransport {
                what,
                got: self,
                allowed,
            })
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn flag_file_and_report_names_agree() {
        for t in TransportKind::ALL {
            let flag = t.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(flag.as_deref(), Some(t.name()));
            let json = serde_json_name(t);
            assert_eq!(json, t.name());
            assert_eq!(t.to_string(), t.name());
        }
    }

    fn serde_json_name(t: TransportKind) -> String {
        #[derive(Serialize, Deserialize)]
        struct W {
            t: TransportKind,
        }
        let s = toml::to_string(&W { t }).unwrap_or_default();
        let back: W = toml::from_str(&s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(back.t, t);
        s.trim().trim_start_matches("t = ").trim_matches('"').to_owned()
    }

    #[test]
    fn a_refused_transport_says_what_is_accepted() {
        const SHM_TCP: &[TransportKind] = &[TransportKind::Shm, TransportKind::Tcp];
        assert_eq!(
            TransportKind::Tcp.require("chaos run", SHM_TCP),
            Ok(TransportKind::Tcp)
        );
        let e = TransportKind::Local.require("chaos run", SHM_TCP).unwrap_err();
        assert_eq!(e.to_string(), "chaos run cannot run on local: only on shm or tcp");
    }
}
