//! `kintsugi control`: one control-plane member process.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use control_plane::config::{Role, Settings, Token};
use control_plane::member::{Leadership, Member, MemberOptions};
use control_plane::network::{ClusterSecret, Partition};
use control_plane::raft::MemberId;
use control_plane::tls::ClientTls;
use recovery::coordinator::{RECOVERY_CRASH_ENV, RECOVERY_CRASH_ONCE_ENV};
use recovery::{Coordinator, RecoveryOptions, Step, Stopped};
use std::sync::Arc;

pub use control_plane::config::{SECRET_ENV, TOKEN_ENV};

use super::telemetry;

/// Arguments of `kintsugi control`.
#[derive(clap::Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "\
Secrets: with --config FILE, the cluster secret and bearer tokens come from FILE (TOML):

  cluster_secret = \"at-least-16-visible-ascii-characters\"
  [[tokens]]
  name = \"ops\"
  token = \"another-16-or-more-characters\"
  role = \"admin\"                # may also init and change members; default \"operator\"
  [timing]                      # optional; humantime durations, defaults shown
  heartbeat = \"50ms\"
  election_timeout_min = \"150ms\"
  election_timeout_max = \"300ms\"
  memnode_lease = \"1s\"          # suspect after one lease of silence, dead after two
  client_lease = \"1s\"           # for clients that register without one
  lease_check = \"20ms\"
  commit_timeout = \"5s\"
  watch_max = \"60s\"             # longest map long-poll

  [tls]                         # optional: HTTPS for the API and Raft, every member alike
  cert = \"/etc/kintsugi/member-1.pem\"   # names this member's advertised host
  key = \"/etc/kintsugi/member-1-key.pem\"
  ca = \"/etc/kintsugi/ca.pem\"           # signed every member's certificate
  [member]                      # optional: this member's flags by long name
  id = 1
  listen = \"0.0.0.0:7401\"
  advertise = \"cp-1.example:7401\"
  data_dir = \"/var/lib/kintsugi/control\"
  metrics_listen = \"0.0.0.0:9401\"

Without --config, KINTSUGI_CLUSTER_SECRET and KINTSUGI_TOKEN supply one secret and one token
(named \"default\", role admin), with default timings. Every member of a cluster needs the same secret.

Once serving, prints `listening ADDR` to stdout (and `metrics ADDR` with --metrics-listen). A new
cluster is formed with `kintsugi ctl --endpoints ADDR init` on one member, then `kintsugi ctl
members add` for the others. docs/operations.md covers TLS, snapshots and the rest of operating it.
Stops cleanly on Ctrl-C or SIGTERM; its state stays in --data-dir for a restart.

Example (three members on one host):
  export KINTSUGI_CLUSTER_SECRET=cluster-secret-0123456789 KINTSUGI_TOKEN=ops-token-0123456789
  kintsugi control --id 1 --listen 127.0.0.1:7401 --data-dir /var/lib/kintsugi/cp1 &
  kintsugi control --id 2 --listen 127.0.0.1:7402 --data-dir /var/lib/kintsugi/cp2 &
  kintsugi control --id 3 --listen 127.0.0.1:7403 --data-dir /var/lib/kintsugi/cp3 &
  kintsugi ctl --endpoints 127.0.0.1:7401 init
  kintsugi ctl --endpoints 127.0.0.1:7401 members add 2 127.0.0.1:7402
  kintsugi ctl --endpoints 127.0.0.1:7401 members add 3 127.0.0.1:7403

One file per member instead (deploy/systemd/kintsugi-control@.service runs it this way):
  kintsugi control --config /etc/kintsugi/control-1.toml
  kintsugi control --config /etc/kintsugi/control-1.toml --print-config"
)]
pub struct ControlArgs {
    /// This member's Raft id (unique in the cluster; keep it with its data directory).
    #[arg(long)]
    id: MemberId,
    /// Address to serve Raft and the API on, e.g. 127.0.0.1:7401; port 0 picks a free one.
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// Address the other members and callers use, when it differs from --listen (e.g. when
    /// listening on 0.0.0.0).
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Directory of this member's Raft log and state (sled); created if missing.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// TOML file with the cluster secret, bearer tokens, timings, [tls] and, in [member], these
    /// flags by their long names (see below); flags typed here override [member]'s.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve Prometheus `/metrics` and an unauthenticated `/healthz` on ADDR, a listener of its
    /// own (off unless given). Healthy: Raft runs and a leader is known.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// Print the effective configuration (settings with secrets redacted, and [member]) as
    /// TOML and exit.
    #[arg(long)]
    print_config: bool,
}

/// The settings of `--config`, or of the environment.
pub(super) fn settings(config: Option<&PathBuf>) -> anyhow::Result<Settings> {
    if let Some(path) = config {
        return Settings::load(path).context("loading --config");
    }
    let secret = std::env::var(SECRET_ENV).map_err(|_| {
        anyhow::anyhow!("no --config given and {SECRET_ENV} is not set: a member needs a cluster secret")
    })?;
    let token = std::env::var(TOKEN_ENV).map_err(|_| {
        anyhow::anyhow!("no --config given and {TOKEN_ENV} is not set: a member needs a bearer token")
    })?;
    let secret = ClusterSecret::new(secret).context(SECRET_ENV)?;
    // The one token of a member without a config file must be able to form
    // the cluster.
    let tokens = vec![Token {
        name: "default".to_owned(),
        token,
        role: Role::Admin,
    }];
    Settings::new(secret, tokens).context(TOKEN_ENV)
}

pub fn run(args: ControlArgs) -> anyhow::Result<ExitCode> {
    let settings = settings(args.config.as_ref())?;
    if let Err(why) = settings.timing.election_outlasted() {
        // Not refused: chaos experiments choose short leases on purpose.
        tracing::warn!("{why}");
    }
    let recovery = recovery_plan(&settings)?;
    if let Some(tls) = &settings.tls {
        // This member's recovery coordinator reaches the cluster over
        // https, trusting the members' CA.
        ClientTls::set_process_default(ClientTls::load(&tls.ca).context("[tls] ca")?);
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let metrics = telemetry::listen(args.metrics_listen.as_deref()).await?;
        let tls_on = settings.tls.is_some();
        let options = MemberOptions {
            id: args.id,
            data_dir: args.data_dir.clone(),
            advertise: args.advertise.clone(),
            settings,
            partition: Partition::default(),
        };
        let member = Member::start(listener, options)
            .await
            .with_context(|| format!("starting member {} in {}", args.id, args.data_dir.display()))?;
        // Launchers read this line to learn the port (with --listen ...:0).
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "{}",
            harness::ServerLine::Listening(member.local_addr().to_string())
        )?;
        stdout.flush()?;
        drop(stdout);
        let metrics = metrics
            .map(|l| telemetry::spawn_for_member(l, &member))
            .transpose()?;
        let coordinator = recovery.map(|(token, options)| {
            let addr = args
                .advertise
                .clone()
                .unwrap_or_else(|| member.local_addr().to_string());
            let endpoint = format!("{}://{addr}", control_plane::tls::scheme(tls_on));
            tokio::spawn(recover_while_leading(
                endpoint,
                token,
                options,
                member.leadership(),
            ))
        });
        shutdown_signal().await?;
        tracing::info!("stopping");
        if let Some(c) = coordinator {
            c.abort();
        }
        if let Some(m) = metrics {
            m.abort();
        }
        member.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// The token and options of this member's recovery coordinator; `None`
/// when `[recovery] enabled = false`. A crash after a named step can be
/// injected for tests (the member aborts, as a `kill -9` would stop it).
fn recovery_plan(settings: &Settings) -> anyhow::Result<Option<(String, RecoveryOptions)>> {
    if !settings.recovery.enabled {
        return Ok(None);
    }
    let token = settings
        .tokens
        .iter()
        .find(|t| t.role != Role::Client)
        .map(|t| t.token.clone())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "recovery needs an operator or admin token in the config; or set [recovery] enabled = false"
            )
        })?;
    let crash = CrashPoints::from_env()?;
    let on_step: recovery::coordinator::StepHook = Arc::new(move |step, _, what| {
        if crash.now(step) {
            tracing::error!(%step, "{what}; crashing as {RECOVERY_CRASH_ENV} asks");
            std::process::abort();
        }
    });
    Ok(Some((
        token,
        RecoveryOptions {
            rereplicate: settings.recovery.rereplicate,
            on_step: Some(on_step),
            ..RecoveryOptions::default()
        },
    )))
}

/// Where this member's coordinator crashes.
struct CrashPoints {
    steps: Vec<Step>,
    once_in: Option<PathBuf>,
}

impl CrashPoints {
    fn from_env() -> anyhow::Result<CrashPoints> {
        let steps = match std::env::var(RECOVERY_CRASH_ENV) {
            Ok(s) if s.trim() == "each" => Step::ALL.to_vec(),
            Ok(s) => s
                .split(',')
                .map(|name| name.trim().parse())
                .collect::<Result<Vec<Step>, String>>()
                .map_err(|e| anyhow::anyhow!("{RECOVERY_CRASH_ENV}: {e}"))?,
            Err(_) => Vec::new(),
        };
        let once_in = std::env::var_os(RECOVERY_CRASH_ONCE_ENV).map(PathBuf::from);
        if let Some(dir) = &once_in {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("{RECOVERY_CRASH_ONCE_ENV}: cannot create {}", dir.display()))?;
        }
        Ok(CrashPoints { steps, once_in })
    }

    /// True if the member is to crash now, right after `step`.
    fn now(&self, step: Step) -> bool {
        if !self.steps.contains(&step) {
            return false;
        }
        match &self.once_in {
            None => true,
            // Creating the mark is the claim: exactly one member crashes.
            Some(dir) => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(dir.join(step.name()))
                .is_ok(),
        }
    }
}

/// Longest wait for a quorum to confirm this member leads before a copy
/// writes: a member that cannot get one that fast may be cut off from its
/// majority, and the copy is tried again after its backoff.
const LEADER_PROOF_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs a recovery coordinator whenever this member leads: it joins the
/// cluster as a client when the member takes office and leaves when the
/// office ends. A coordinator that cannot join yet (no memory node
/// registered) tries again.
async fn recover_while_leading(
    endpoint: String,
    token: String,
    options: RecoveryOptions,
    leadership: Leadership,
) {
    let mut options = options;
    let proof = leadership.clone();
    options.leader_proof = Some(Arc::new(move || {
        let proof = proof.clone();
        Box::pin(async move { proof.confirm(LEADER_PROOF_WAIT).await })
    }));
    let leading = move || leadership.holds();
    let pause = options.tick;
    let mut said = false;
    loop {
        while !leading() {
            tokio::time::sleep(pause).await;
        }
        match Coordinator::connect(&[endpoint.as_str()], &token, options.clone()).await {
            Ok(mut c) => {
                tracing::info!(client = c.cluster().id(), "leading: recovery coordinator started");
                said = false;
                match c.run(&leading).await {
                    Stopped::NotLeading => {
                        tracing::info!("no longer leading: recovery coordinator stopped");
                        if let Err(e) = c.step_down().await {
                            tracing::warn!(error = %e, "recovery coordinator did not leave cleanly");
                        }
                    }
                    // It issues no verb any more and cannot leave (leaving
                    // finishes its logs): dropped, it is expired already,
                    // and the new client this loop starts at once rolls it.
                    Stopped::LeaseLost(why) => {
                        tracing::warn!(reason = %why, "the recovery coordinator's lease was lost; joining again");
                        drop(c);
                    }
                }
            }
            Err(e) => {
                if !said {
                    tracing::info!(error = %e, "recovery coordinator cannot start yet; retrying");
                    said = true;
                }
                tokio::time::sleep(pause * 10).await;
            }
        }
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
