//! The deploy assets (`deploy/systemd`, `deploy/compose`, `deploy/k8s`)
//! against the real binary and against each other:
//!
//! - every `kintsugi` command line in the units, the compose file, the
//!   manifests and the scripts names subcommands and flags that the
//!   binary's `--help` lists, and every daemon's command line, with the
//!   config file it is given, passes the binary's `--print-config`;
//! - every YAML file parses; every Kubernetes object has apiVersion, kind
//!   and a name, and its references resolve (kustomization resources,
//!   Secret and ConfigMap keys, selectors, headless Services, the
//!   ServiceMonitor, the PodDisruptionBudget);
//! - every config (example TOMLs, the compose configs, the TOMLs inside
//!   ConfigMaps and Secrets) parses, with keys that are the daemon's flags
//!   (the control plane's through its own `Settings` parser);
//! - health checks and probes ask `/healthz` on the port the daemon's
//!   metrics listener is given;
//! - placeholder tokens are marked as such, and every caller's token is one
//!   the control plane's config grants the role the caller needs.
//!
//! No network and no daemon: file reads and `kintsugi ... --help` /
//! `--print-config` only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use control_plane::config::{Role, Settings};
use serde_norway::Value;

mod cli;
mod compose;
mod configs;
mod k8s;
mod systemd;
mod yaml;

use cli::*;
use configs::*;
use yaml::*;

pub(crate) const SYSTEMD: &str = "deploy/systemd";
pub(crate) const COMPOSE: &str = "deploy/compose";
pub(crate) const K8S: &str = "deploy/k8s";

/// Marks every placeholder secret, so that none passes for a real one.
pub(crate) const PLACEHOLDER: &str = "CHANGE-ME";

/// The daemons, as the subcommands that run them.
pub(crate) const DAEMONS: [&str; 3] = ["control", "memnode", "serve"];

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Files under `dir`, recursively, sorted.
pub(crate) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

pub(crate) fn name_of(path: &Path) -> String {
    path.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn is_yaml(path: &Path) -> bool {
    let n = name_of(path);
    n.ends_with(".yaml") || n.ends_with(".yml")
}
