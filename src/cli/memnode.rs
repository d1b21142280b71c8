//! `kintsugi memnode`: a memory node process.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use cluster::{placement, Members};
use fabric::{Backing, MemoryNode, NodeId, RegionSpec};

use super::telemetry::{self, Health, Probe};
use super::units::{parse_bytes, parse_duration, parse_region};

/// Arguments of `kintsugi memnode`.
#[derive(clap::Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "\
Once serving, prints one line to stdout: `listening ADDR` (the bound address, useful with port 0);
with --metrics-listen, a second: `metrics ADDR`.
Stops cleanly on Ctrl-C or SIGTERM: closes connections, syncs a --persist image, removes a --shm image.

Two ways to get regions:
  --region ID:SIZE     the node holds these from the start (embedded use, benchmarks);
  --control A,B,C      with no --region: the node registers, and allocates what the control plane
                       places on it (`ctl region create`, or an index a client opens), up to
                       --capacity; it follows the map and fences verbs of older epochs.

Admission: the node serves only connections whose HELLO presents a credential.
  with --control       the control plane issues credentials to registered clients and hands the
                       node the key to check them; clients whose lease expired are refused.
  without --control    the key is derived from KINTSUGI_CLUSTER_SECRET, and clients present a
                       credential derived from the same secret (`cluster ycsb --memnodes`,
                       `fabric bench` read it too); --insecure-open serves anyone instead.

Examples:
  kintsugi memnode --listen 127.0.0.1:7100 --control 127.0.0.1:7401,127.0.0.1:7402 --capacity 4GiB
  kintsugi memnode --listen 127.0.0.1:7100 --control 127.0.0.1:7401 --shm /dev/shm/kintsugi-mn1
  kintsugi memnode --listen 127.0.0.1:7100 --region 1:1GiB
  kintsugi memnode --listen 127.0.0.1:7100 --region 1:64MiB --region 2:64MiB --shm /dev/shm/kintsugi-mn1
  kintsugi memnode --listen 127.0.0.1:7100 --region 1:256MiB --persist /var/lib/kintsugi/mn1.img
  kintsugi memnode --listen 127.0.0.1:7100 --region 1:1GiB --control 127.0.0.1:7401   # registers, renews"
)]
pub struct MemnodeArgs {
    /// TOML file of these flags by their long names (`metrics_listen = "0.0.0.0:9101"`); flags
    /// typed on the command line override it. Unknown keys are errors.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration (file, flags and defaults; tokens redacted) as TOML and
    /// exit.
    #[arg(long)]
    print_config: bool,
    /// Address to serve verbs on (tcp), e.g. 127.0.0.1:7100; port 0 picks a free one.
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// A region to hold, as ID:SIZE (sizes like 4096, 64MiB, 1GiB). Repeat for more. Without
    /// any, the node takes its regions from the control plane (--control).
    #[arg(long = "region", value_name = "ID:SIZE", value_parser = parse_region, required_unless_present = "control")]
    regions: Vec<RegionSpec>,
    /// Bytes offered to the regions the control plane places here (no --region); reserved as
    /// address space, memory is used only as regions are written.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, default_value = "1GiB", conflicts_with = "regions")]
    capacity: u64,
    /// Also publish the regions as a memory image at PATH (e.g. under /dev/shm) that
    /// `shm` clients on this host map directly. Removed when the node stops.
    #[arg(long, value_name = "PATH", conflicts_with = "persist")]
    shm: Option<PathBuf>,
    /// Back the regions with FILE so that their contents survive a restart (the
    /// persistent-memory model; FLUSH verbs msync). Restarting with the same FILE
    /// requires the same --region flags. shm clients may map FILE too.
    #[arg(long, value_name = "FILE")]
    persist: Option<PathBuf>,
    /// This node's id in the cluster map, with --region (a placed node gets its id from the
    /// control plane).
    #[arg(long, default_value_t = 1)]
    id: NodeId,
    /// Start at this map epoch at least (clients with an older map are refused).
    #[arg(long, default_value_t = 1)]
    epoch: u64,
    /// Control-plane members (HOST:PORT, comma-separated or repeated) to register with (or find
    /// this node's record by its endpoint, after a restart) and renew this node's lease at,
    /// every third of the lease; naming several survives a member's death.
    #[arg(long, value_name = "HOST:PORT", value_delimiter = ',')]
    control: Vec<String>,
    /// Bearer token for --control.
    #[arg(long, env = super::control::TOKEN_ENV, hide_env_values = true)]
    control_token: Option<String>,
    /// The endpoint to register: where clients reach this node (default: the --shm image's
    /// path for a placed node with --shm, so that clients on this host map it; else the
    /// bound address).
    #[arg(long, value_name = "HOST:PORT", requires = "control")]
    advertise: Option<String>,
    /// Also serve the regions over RDMA (with --region): register them with the device
    /// (KINTSUGI_RDMA_DEVICE names it, else the first) and listen for rdma clients' queue-pair
    /// set-up at HOST:PORT (`fabric bench --transport rdma --addr HOST:PORT`). Needs a binary
    /// built with `--features rdma`.
    #[arg(long, value_name = "HOST:PORT", requires = "regions")]
    rdma: Option<String>,
    /// Serve Prometheus `/metrics` and an unauthenticated `/healthz` on ADDR, a listener of its
    /// own (off unless given). Healthy: serving, and with --control its lease renewed.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// With --region and no --control: serve every connection without a credential. For a node
    /// reached only from its own host; anyone who reaches the port reads and writes every region.
    #[arg(long, conflicts_with = "control")]
    insecure_open: bool,
    /// Admitted connections served at once; further HELLOs are refused with the reason.
    #[arg(long, value_name = "N", default_value_t = fabric::server::CONNECTIONS_MAX)]
    max_connections: usize,
    /// Connections that have not presented a credential yet, at once; a new one closes the
    /// oldest, so that silent sockets cannot lock clients out.
    #[arg(long, value_name = "N", default_value_t = fabric::server::UNAUTHENTICATED_MAX)]
    max_unauthenticated: usize,
    /// How long a new connection has to send its HELLO.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    hello_timeout: std::time::Duration,
    /// How long an admitted connection may stay silent before it is closed (its client
    /// connects again at its next batch).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    idle_timeout: std::time::Duration,
    /// Serve the data port over TLS only, with this certificate chain (PEM, naming the host
    /// clients dial); with --tls-key. The node registers its endpoint as tls://HOST:PORT, and
    /// every client of the cluster follows the map: it checks the certificate against the
    /// control plane's CA (KINTSUGI_CA_FILE, or a member's [tls] ca).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

impl MemnodeArgs {
    /// The data port's TLS, if asked for: the certificate and key read and
    /// checked to match.
    fn tls(&self) -> anyhow::Result<Option<std::sync::Arc<rustls::ServerConfig>>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let tls = control_plane::tls::ServerTls::load_pair(cert, key).context("--tls-cert/--tls-key")?;
        Ok(Some(tls.config()))
    }

    /// What to register: `endpoint`, as `tls://endpoint` when served over TLS.
    fn registered(&self, endpoint: String) -> String {
        if self.tls_cert.is_some() {
            format!("{}{endpoint}", fabric::transport::TLS_SCHEME)
        } else {
            endpoint
        }
    }

    /// The server's limits, checked.
    fn limits(&self) -> anyhow::Result<fabric::server::Limits> {
        anyhow::ensure!(self.max_connections > 0, "--max-connections must be at least 1");
        anyhow::ensure!(
            self.max_unauthenticated > 0,
            "--max-unauthenticated must be at least 1"
        );
        anyhow::ensure!(!self.hello_timeout.is_zero(), "--hello-timeout must be above 0");
        anyhow::ensure!(!self.idle_timeout.is_zero(), "--idle-timeout must be above 0");
        Ok(fabric::server::Limits {
            connections_max: self.max_connections,
            unauthenticated_max: self.max_unauthenticated,
            hello_timeout: self.hello_timeout,
            idle_timeout: self.idle_timeout,
        })
    }
}

/// What a node with its own regions admits: the control plane's credentials
/// with --control, the cluster secret's without, or anyone if told so.
fn own_gate(args: &MemnodeArgs) -> anyhow::Result<fabric::Gate> {
    if !args.control.is_empty() {
        return Ok(fabric::Gate::placed());
    }
    if args.insecure_open {
        tracing::warn!(
            listen = %args.listen,
            "--insecure-open: serving every connection without a credential"
        );
        return Ok(fabric::Gate::open());
    }
    let secret = std::env::var(control_plane::config::SECRET_ENV).map_err(|_| {
        anyhow::anyhow!(
            "a memory node without --control checks credentials with a key derived from the cluster secret: \
             set {} (at least 16 visible ASCII characters; its clients need the same), or pass \
             --insecure-open to serve anyone who reaches {}",
            control_plane::config::SECRET_ENV,
            args.listen
        )
    })?;
    let secret =
        control_plane::network::ClusterSecret::new(secret).context(control_plane::config::SECRET_ENV)?;
    Ok(fabric::Gate::keyed(secret.admission_key()))
}

/// Serves `node` over rdma at `addr` until the returned server is dropped.
#[cfg(feature = "rdma")]
fn serve_rdma(node: &Arc<MemoryNode>, addr: &str) -> anyhow::Result<fabric::rdma::RdmaServer> {
    let server = fabric::rdma::RdmaServer::start(node.clone(), addr)
        .with_context(|| format!("cannot serve over rdma at {addr}"))?;
    eprintln!("memnode: serving over rdma, control channel at {}", server.addr());
    Ok(server)
}

#[cfg(not(feature = "rdma"))]
fn serve_rdma(_: &Arc<MemoryNode>, _: &str) -> anyhow::Result<()> {
    anyhow::bail!("--rdma: {}", harness::memory::NO_RDMA)
}

pub fn run(args: MemnodeArgs) -> anyhow::Result<ExitCode> {
    if args.regions.is_empty() {
        return run_placed(args);
    }
    fabric::validate_regions(&args.regions)?;
    let gate = own_gate(&args)?;
    let limits = args.limits()?;
    let tls = args.tls()?;
    let node = if let Some(path) = &args.persist {
        let (node, reopened) = MemoryNode::open_persistent(path, args.id, &args.regions)?;
        if reopened {
            tracing::info!(path = %path.display(), epoch = node.epoch(), "reopened persistent image");
        } else {
            tracing::info!(path = %path.display(), "created persistent image");
        }
        node
    } else if let Some(path) = &args.shm {
        MemoryNode::create_shm(path, args.id, &args.regions)?
    } else {
        MemoryNode::anonymous(args.id, &args.regions)?
    };
    node.advance_epoch(args.epoch);
    node.set_gate(gate);
    let node = Arc::new(node);
    let _rdma = args
        .rdma
        .as_deref()
        .map(|addr| serve_rdma(&node, addr))
        .transpose()?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Watch for signals before announcing the address: whoever reads the
        // `listening` line may send SIGTERM at once.
        let shutdown = shutdown_signal()?;
        let (listener, addr) = fabric::server::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let lease_lost = Arc::new(OnceLock::new());
        let metrics = telemetry::listen(args.metrics_listen.as_deref())
            .await?
            .map(|l| {
                telemetry::spawn(
                    l,
                    probe(Arc::new(OnceLock::from(node.clone())), lease_lost.clone()),
                )
            })
            .transpose()?;
        tracing::info!(
            node = node.id(),
            %addr,
            regions = ?args.regions.iter().map(|r| (r.id, r.size)).collect::<Vec<_>>(),
            epoch = node.epoch(),
            shm = ?args.shm.as_ref().or(args.persist.as_ref()),
            "memory node serving"
        );
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", harness::ServerLine::Listening(addr.to_string()))?;
        stdout.flush()?;
        drop(stdout);
        if let Some(m) = &metrics {
            m.announce()?;
        }
        let lease = if args.control.is_empty() {
            None
        } else {
            // Without a token every request is refused (401), and says so.
            let members = Members::new(&args.control, args.control_token.as_deref().unwrap_or_default())?;
            let endpoint = args.registered(args.advertise.clone().unwrap_or_else(|| addr.to_string()));
            let capacity_bytes = args.regions.iter().map(|r| r.size).sum();
            let registered = node.clone();
            Some(tokio::spawn(async move {
                if let Err(e) =
                    placement::keep_registered(members, endpoint, capacity_bytes, registered).await
                {
                    tracing::error!(error = %e, "no longer renewing this node's lease");
                    let _ = lease_lost.set(e.to_string());
                }
            }))
        };
        fabric::server::serve_tls(listener, node.clone(), limits, tls.clone(), shutdown).await?;
        if let Some(lease) = lease {
            lease.abort();
        }
        anyhow::Ok(())
    })?;

    if args.persist.is_some() {
        node.sync().context("cannot sync the persistent image")?;
    }
    tracing::info!(node = node.id(), "memory node stopped");
    Ok(ExitCode::SUCCESS)
}

/// A node whose regions the control plane places: register, make the
/// image under the id the control plane gave, serve, follow the map.
fn run_placed(args: MemnodeArgs) -> anyhow::Result<ExitCode> {
    let limits = args.limits()?;
    let tls = args.tls()?;
    let token = args
        .control_token
        .clone()
        .context("a node placed by the control plane needs --control-token (or KINTSUGI_TOKEN)")?;
    let backing = match (&args.persist, &args.shm) {
        (Some(p), _) => Backing::Persist(p.clone()),
        (None, Some(p)) => Backing::Shm(p.clone()),
        (None, None) => Backing::Anonymous,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let node = runtime.block_on(async {
        let shutdown = shutdown_signal()?;
        let (listener, addr) = fabric::server::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        // Served from before registration, which may wait for the control
        // plane: `/healthz` says so meanwhile (announced with the address
        // once registered: launchers read `listening` first).
        let placed = Arc::new(OnceLock::new());
        let lease_lost = Arc::new(OnceLock::new());
        let metrics = telemetry::listen(args.metrics_listen.as_deref())
            .await?
            .map(|l| telemetry::spawn(l, probe(placed.clone(), lease_lost.clone())))
            .transpose()?;
        let endpoint = match (&args.advertise, &args.shm) {
            (Some(a), _) => args.registered(a.clone()),
            (None, Some(p)) => p.display().to_string(),
            (None, None) => args.registered(addr.to_string()),
        };
        let members = Members::new(&args.control, &token)?;
        // The image's id is registered before the image is opened under
        // the node id the registration gives: a kept file's own, or a new
        // one's. A record that names another image is not this node's.
        let image = match &backing {
            Backing::Persist(path) => MemoryNode::image_in(path)?,
            _ => None,
        }
        .unwrap_or_else(fabric::ImageId::random);
        let id = tokio::select! {
            id = placement::register(&members, &endpoint, args.capacity, image) => id?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted before registering"),
        };
        let (node, reopened) = MemoryNode::placed_as(id, args.capacity, &backing, Some(image))?;
        // No client before the key and the first fence view arrive.
        node.set_gate(fabric::Gate::placed());
        let node = Arc::new(node);
        let _ = placed.set(node.clone());
        tracing::info!(
            node = id,
            %addr,
            %endpoint,
            capacity = args.capacity,
            reopened,
            %image,
            regions = node.descriptor().regions.len(),
            "memory node serving; regions are placed by the control plane"
        );
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", harness::ServerLine::Listening(addr.to_string()))?;
        stdout.flush()?;
        drop(stdout);
        if let Some(m) = &metrics {
            m.announce()?;
        }
        let admission = tokio::spawn(placement::follow_admission(members.clone(), id, node.clone()));
        let following = placement::follow_for_life(members, id, node.clone(), endpoint, args.capacity);
        let follower = tokio::spawn(async move {
            if let Err(e) = following.await {
                tracing::error!(error = %e, "no longer following the control plane");
                let _ = lease_lost.set(e.to_string());
            }
        });
        fabric::server::serve_tls(listener, node.clone(), limits, tls.clone(), shutdown).await?;
        follower.abort();
        admission.abort();
        anyhow::Ok(node)
    })?;
    if args.persist.is_some() {
        node.sync().context("cannot sync the persistent image")?;
    }
    tracing::info!(node = node.id(), "memory node stopped");
    Ok(ExitCode::SUCCESS)
}

/// What `/healthz` and the scrape's gauges read: the node once it exists
/// (a placed node registers first), and why its lease keeper stopped, if
/// it did. Healthy: it serves verbs, which for a node that keeps a lease
/// means a renewal was granted recently enough
/// (`MemoryNode::hold_lease_until`).
fn probe(node: Arc<OnceLock<Arc<MemoryNode>>>, lease_lost: Arc<OnceLock<String>>) -> Probe {
    let sampled = node.clone();
    Probe {
        daemon: "memnode",
        health: Arc::new(move || {
            let Some(n) = node.get() else {
                return Health::Unavailable("not serving yet: registering with the control plane".into());
            };
            if let Some(why) = lease_lost.get() {
                return Health::Unavailable(format!("no longer keeping its lease: {why}"));
            }
            if !n.serving() {
                return Health::Unavailable(
                    "its lease was not renewed in time: verbs are refused until the control plane grants \
                     a renewal"
                        .into(),
                );
            }
            Health::Ok(format!(
                "node {} serving {} regions at epoch {}",
                n.id(),
                n.descriptor().regions.len(),
                n.epoch()
            ))
        }),
        sample: Some(Arc::new(move || {
            if let Some(n) = sampled.get() {
                fabric::metrics::sample_node(n);
            }
        })),
    }
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled.
pub(super) fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received: stopping"),
            _ = int.recv() => tracing::info!("SIGINT received: stopping"),
        }
    })
}
