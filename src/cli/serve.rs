//! `kintsugi serve --resp ADDR`: the Redis-protocol gateway on a named
//! index of a running cluster, or of an embedded one (a control-plane
//! member and a memory node started for the purpose, removed at exit).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gateway::{Gateway, GatewayControl, Handle, Keyspace, Settings, TokenCheck};
use harness::local::{ClusterFile, LocalCluster, LocalClusterSpec};
use harness::TransportKind;

use super::telemetry::{self, Health, Probe};

/// Arguments of `kintsugi serve`.
#[derive(clap::Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "\
Without --cluster or --dir, an embedded cluster is started in a temporary directory (one
control-plane member and one memory node on shm, replication 1) and removed at exit: a one-command
try. With --cluster or --dir, the gateway joins that cluster as a client; several gateways may serve
one index, and a gateway killed mid-write leaves only locks and logs that the others repair.

Every Redis key lives in a bucket the index maps the key's 64-bit hash to; every write is one rTX
(MSET's keys together, INCR's read and write together). Commands: GET, SET [NX|XX], DEL, EXISTS,
MGET, MSET, INCR, INCRBY, DECR, DECRBY, SCAN [MATCH] [COUNT], DBSIZE, PING, ECHO, INFO, COMMAND,
CLIENT SETNAME|GETNAME|ID, SELECT 0, CONFIG GET, AUTH, HELLO [2|3], QUIT. docs/gateway.md has the
limits (keys up to 4 KiB, values up to 28 KiB, 31 keys per write) and the design.

AUTH takes any token of the cluster (client or admin role) as the password; it is required by
default with --cluster or --dir and off for an embedded cluster (--auth/--no-auth override).

Prints `listening ADDR` on stdout once it serves (and `metrics ADDR` with --metrics-listen).

Examples:
  kintsugi serve                                  # embedded, on 127.0.0.1:6380
  redis-cli -p 6380 set greeting hello
  redis-benchmark -p 6380 -t set,get,incr,mset -r 100000 -n 100000 -c 50
  kintsugi cluster up --detach && kintsugi serve --dir kintsugi-cluster --index sessions --kind hash"
)]
pub struct ServeArgs {
    /// TOML file of these flags by their long names (`metrics_listen = "0.0.0.0:9101"`); flags
    /// typed on the command line override it. Unknown keys are errors.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration (file, flags and defaults; tokens redacted) as TOML and
    /// exit.
    #[arg(long)]
    print_config: bool,
    /// Where to serve RESP.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:6380")]
    resp: SocketAddr,
    /// Control-plane endpoints of the cluster to serve (HOST:PORT,...).
    #[arg(long, value_name = "ENDPOINTS", value_delimiter = ',', conflicts_with = "dir")]
    cluster: Vec<String>,
    /// The client token to join --cluster with.
    #[arg(long, env = "KINTSUGI_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A `kintsugi cluster up` directory: endpoints, client token and replication from its
    /// cluster.json.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The index to serve (created, rtx, if missing).
    #[arg(long, default_value = "redis")]
    index: String,
    /// Its kind: btree (SCAN is a range scan) or hash (SCAN reads the whole table per call).
    #[arg(long, value_enum, default_value = "btree")]
    kind: Kind,
    /// Index operations run at once: each is an index handle with an owner id of its own.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    handles: u16,
    /// Replicas of a new index's region, primary included (default: the cluster's with --dir, 3
    /// with --cluster, 1 embedded).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=16))]
    replicas: Option<u8>,
    /// Bytes of a new index's region (keys, values and the index's nodes).
    #[arg(long, value_parser = super::units::parse_bytes, default_value = "1GiB")]
    index_bytes: u64,
    /// Require AUTH with a cluster token before index commands.
    #[arg(long, conflicts_with = "no_auth")]
    auth: bool,
    /// Serve without AUTH (the default for an embedded cluster).
    #[arg(long)]
    no_auth: bool,
    /// The name the gateway registers under (`ctl client list`).
    #[arg(long, default_value = "gateway")]
    name: String,
    /// Test hook: the process SIGKILLs itself right after its first lock-taking CAS past this
    /// (dies mid-write, holding a lock).
    #[arg(long, hide = true, value_parser = super::units::parse_duration)]
    die_after: Option<Duration>,
    /// Serve Prometheus `/metrics` and an unauthenticated `/healthz` on ADDR, a listener of its
    /// own (off unless given). Healthy: the gateway's cluster lease holds.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// After losing its cluster lease (paused, cut off, or the control plane gone), the gateway
    /// joins again as a new client, answering `-TRYAGAIN` meanwhile; if it cannot within this
    /// long, it exits with the reason (a supervisor restarts it).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = super::units::parse_duration)]
    rejoin_timeout: Duration,
    /// Serve RESP over TLS only, with this certificate chain (PEM); with --tls-key. Clients
    /// connect with `redis-cli --tls --cacert CA.pem`; the handshake counts against the time a
    /// connection has to AUTH.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// The cluster client the gateway holds now: replaced when it joins again.
type Membership = Arc<cluster::Membership>;

/// What the gateway serves from, made again under each new client.
struct Served {
    index: String,
    kind: Kind,
    handles: u16,
}

async fn keyspaces(
    client: &cluster::Cluster,
    kind: Kind,
    index: &str,
    handles: u16,
) -> anyhow::Result<Vec<Keyspace>> {
    let mut keyspaces = Vec::with_capacity(usize::from(handles));
    for _ in 0..handles {
        let handle = match kind {
            Kind::Btree => Handle::Tree(client.btree(index).await?),
            Kind::Hash => Handle::Table(client.hash(index).await?),
        };
        keyspaces.push(Keyspace::new(handle, index)?);
    }
    Ok(keyspaces)
}

/// Keeps the gateway a member for the process's life: once its lease is
/// lost (or uncertain past two leases: a control plane gone, a long pause),
/// it marks the gateway unavailable, joins again as a new client (the old
/// one's ids are expired and rolled by recovery, as for any dead client;
/// `cluster::membership`), and gives the gateway the new keyspaces. Returns
/// an error only when it cannot join again within the rejoin timeout.
async fn keep_membership(membership: Membership, control: GatewayControl, served: Served) -> anyhow::Error {
    loop {
        let why = membership.lost().await;
        tracing::warn!(%why, "the gateway lost its cluster lease: joining again as a new client");
        control.unavailable(format!(
            "the gateway lost its cluster lease ({why}) and is joining again"
        ));
        let joined = membership
            .rejoin_with(&why, async |c| {
                keyspaces(c, served.kind, &served.index, served.handles)
                    .await
                    .map_err(|e| cluster::ClusterError::Map(format!("{e:#}")))
            })
            .await;
        let (client, keyspaces) = match joined {
            Ok(joined) => joined,
            Err(e) => return anyhow::Error::new(e).context("the gateway cannot serve any more"),
        };
        drop(control.replace(keyspaces).await);
        tracing::info!(
            client = client.id(),
            "the gateway joined the cluster again and serves"
        );
        eprintln!("joined the cluster again as client {}", client.id());
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Kind {
    Btree,
    Hash,
}

/// Where the gateway's cluster is.
struct Joined {
    endpoints: Vec<String>,
    token: String,
    replicas: u8,
    /// Kept until the gateway stops (its drop stops the processes), with
    /// its temporary directory.
    embedded: Option<(LocalCluster, tempfile::TempDir)>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !args.cluster.is_empty() && args.token.is_none() {
        anyhow::bail!("--cluster needs --token (or KINTSUGI_TOKEN): a client token of that cluster");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args))
}

async fn join(args: &ServeArgs) -> anyhow::Result<Joined> {
    if let Some(dir) = &args.dir {
        let file = ClusterFile::read(dir)?;
        return Ok(Joined {
            endpoints: file.control,
            token: file.client_token,
            replicas: args.replicas.unwrap_or(file.replicas),
            embedded: None,
        });
    }
    if let Some(token) = &args.token {
        if !args.cluster.is_empty() {
            return Ok(Joined {
                endpoints: args.cluster.clone(),
                token: token.clone(),
                replicas: args.replicas.unwrap_or(3),
                embedded: None,
            });
        }
    }
    let work = tempfile::Builder::new()
        .prefix("kintsugi-serve-")
        .tempdir()
        .context("cannot create a temporary directory for the embedded cluster")?;
    let mut spec = LocalClusterSpec {
        dir: work.path().to_path_buf(),
        ..LocalClusterSpec::default()
    };
    spec.control.members = 1;
    spec.memory.nodes = 1;
    spec.memory.transport = TransportKind::Shm;
    spec.memory.capacity = "8GiB".into();
    spec.indexes.replicas = 1;
    spec.validate()?;
    let exe = std::env::current_exe().context("cannot find the kintsugi binary")?;
    eprintln!("starting an embedded cluster in {} ...", work.path().display());
    let cluster = LocalCluster::up(&exe, &spec, |step| tracing::info!("{step}")).await?;
    Ok(Joined {
        endpoints: cluster.file.control.clone(),
        token: cluster.file.client_token.clone(),
        replicas: args.replicas.unwrap_or(1),
        embedded: Some((cluster, work)),
    })
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let shutdown = super::memnode::shutdown_signal()?;
    // Bound first: a port in use is reported before anything is started.
    let listener = tokio::net::TcpListener::bind(args.resp)
        .await
        .with_context(|| format!("cannot listen on {}", args.resp))?;
    let metrics = telemetry::listen(args.metrics_listen.as_deref()).await?;
    let joined = join(&args).await?;
    let require_auth = if args.auth {
        true
    } else if args.no_auth {
        false
    } else {
        joined.embedded.is_none()
    };
    let options = cluster::ClusterOptions {
        name: args.name.clone(),
        owner_ids: args.handles,
        replicas: joined.replicas,
        index_bytes: args.index_bytes,
        faults: args.die_after.map(|_| fabric::FaultPlan::default()),
        ..cluster::ClusterOptions::default()
    };
    let membership: Membership = Arc::new(
        cluster::Membership::join(&joined.endpoints, &joined.token, options, args.rejoin_timeout)
            .await
            .context("cannot join the cluster")?,
    );
    let client = membership.current();
    let kind = match args.kind {
        Kind::Btree => "btree",
        Kind::Hash => "hash",
    };
    let keyspaces = keyspaces(&client, args.kind, &args.index, args.handles).await?;
    let gateway = Gateway::new(
        keyspaces,
        TokenCheck::new(joined.endpoints.clone()),
        Settings {
            index: args.index.clone(),
            kind: kind.into(),
            require_auth,
        },
    );
    let gateway = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => gateway.with_tls(
            control_plane::tls::ServerTls::load_pair(cert, key)
                .context("--tls-cert/--tls-key")?
                .config(),
        ),
        _ => gateway,
    };
    let control = gateway.control();
    let metrics = metrics
        .map(|l| telemetry::spawn(l, probe(&membership, &control)))
        .transpose()?;
    let what = Served {
        index: args.index.clone(),
        kind: args.kind,
        handles: args.handles,
    };
    let addr = listener
        .local_addr()
        .context("cannot read the listening address")?;
    eprintln!(
        "serving RESP on {addr}: index {:?} ({kind}, rtx), {} handles, AUTH {} (client {}, control plane {})",
        args.index,
        args.handles,
        if require_auth { "required" } else { "off" },
        client.id(),
        joined.endpoints.join(",")
    );
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", harness::line::ServerLine::Listening(addr.to_string()))?;
        out.flush()?;
    }
    if let Some(m) = &metrics {
        m.announce()?;
    }
    if let (Some(after), Some(faults)) = (args.die_after, client.faults().cloned()) {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            super::die_after_next_lock(&faults);
        });
    }
    drop(client);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let served = tokio::spawn(gateway.serve(listener, stopped));
    let gave_up = tokio::select! {
        () = shutdown => None,
        e = keep_membership(membership.clone(), control, what) => Some(e),
    };
    let _ = stop.send(true);
    let keyspaces = served.await.context("the gateway's task failed")?;
    drop(keyspaces);
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
    if let Some(e) = gave_up {
        drop(joined.embedded);
        return Err(e);
    }
    Arc::into_inner(membership)
        .context("the cluster client is still shared at shutdown")?
        .close()
        .await
        .context("cannot leave the cluster")?;
    drop(joined.embedded);
    eprintln!("gateway stopped");
    Ok(ExitCode::SUCCESS)
}

/// `/healthz` and the sampled gauges of a gateway: healthy while the
/// process's cluster lease holds (without it no index operation may run)
/// and it is not joining again. The probe reads the current client at each
/// call and keeps none: a scrape still being served at shutdown must not
/// keep `close` from taking the client back.
fn probe(membership: &Membership, control: &GatewayControl) -> Probe {
    let health = Arc::downgrade(membership);
    let sampled = Arc::downgrade(membership);
    let control = control.clone();
    Probe {
        daemon: "gateway",
        health: Arc::new(move || {
            if let Some(why) = control.why_unavailable() {
                return Health::Unavailable(why);
            }
            let Some(client) = health.upgrade().map(|m| m.current()) else {
                return Health::Unavailable("the gateway is stopping".into());
            };
            if client.lease_holds() {
                Health::Ok(format!(
                    "client {} holds its lease at map epoch {}",
                    client.id(),
                    client.epoch()
                ))
            } else {
                Health::Unavailable(match client.lease_lost() {
                    Some(why) => format!("the cluster lease was lost: {why}"),
                    None => "the cluster lease is not certain: no renewal was granted in time".into(),
                })
            }
        }),
        sample: Some(Arc::new(move || {
            if let Some(c) = sampled.upgrade().map(|m| m.current()) {
                gateway::metrics::sample(c.epoch(), c.lease_holds());
            }
        })),
    }
}
