//! `kintsugi ctl`: the operator's client of the control plane. It talks to
//! the first member of its list that it reaches; that member forwards writes
//! to the leader, so any member will do.

mod args;
mod operations;
pub(super) mod tables;
mod text;

use std::cell::Cell;
use std::future::Future;
use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use control_plane::api::{ClientError, ControlClient, MemberInfo};
use control_plane::config::millis;
use control_plane::state::{Command, MemNodeId, Region};
use control_plane::tls::{ClientTls, CA_FILE_ENV};
use fabric::RegionId;
use serde::Serialize;

use self::args::{
    ClientCommand, CtlCommand, IndexCommand, MembersCommand, MemnodeCommand, RegionCommand, SnapshotCommand,
    Switch,
};
use super::control::TOKEN_ENV;
use super::units::parse_duration;

/// Environment variable naming the members to talk to (comma-separated) when no `--endpoints`
/// is given.
pub const ENDPOINT_ENV: &str = "KINTSUGI_ENDPOINT";

/// How often `init` looks for the new cluster's leader: elections take a
/// few hundred milliseconds at the default timings.
const ELECTION_POLL: Duration = Duration::from_millis(20);

/// Arguments of `kintsugi ctl`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Every command needs a bearer token (--token or KINTSUGI_TOKEN) that the members accept.
Any member answers: reads come from its applied state, which may trail the leader's by the
newest commits; writes are forwarded to the leader. The members of --endpoints are tried in
turn, from the one that answered last: one that is down (connection refused or not accepted)
received nothing, so even a write goes on to the next. Errors go to stderr with exit code 1.
The options above go before the command (`memnode register` has an --endpoint of its own).
A cluster with TLS is reached at https:// endpoints, trusting --ca-file (or KINTSUGI_CA_FILE).

Examples:
  export KINTSUGI_ENDPOINT=127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 KINTSUGI_TOKEN=ops-token-0123456789
  kintsugi ctl init
  kintsugi ctl members add 2 127.0.0.1:7402
  kintsugi ctl status
  kintsugi ctl members transfer-leader 2
  kintsugi ctl memnode register --endpoint 10.0.0.5:7100 --capacity 64GiB
  kintsugi ctl memnode maintenance 0 on
  kintsugi ctl region create --size 1GiB --replicas 2
  kintsugi ctl region promote 1 2
  kintsugi ctl region lost
  kintsugi ctl region drop 3 --confirm
  kintsugi ctl client register --name loader --owner-ids 8 --lease 2s
  kintsugi ctl snapshot save cluster.json
  kintsugi ctl check
  kintsugi ctl --json memnode list | jq '.[] | select(.state != \"active\")'
  kintsugi ctl audit --limit 20")]
pub struct CtlArgs {
    /// Members' API addresses (HOST:PORT, http:// or https://), comma-separated or repeated:
    /// each is tried in turn until one answers, so a member that is down is passed over. A
    /// follower forwards writes to the leader, so none is special.
    #[arg(
        long = "endpoints",
        visible_alias = "endpoint",
        env = ENDPOINT_ENV,
        value_delimiter = ',',
        default_value = "127.0.0.1:7401",
        value_name = "URL[,URL...]"
    )]
    endpoints: Vec<String>,
    /// Bearer token; the member records the token's name as the actor of every change.
    #[arg(long, env = TOKEN_ENV, hide_env_values = true)]
    token: Option<String>,
    /// PEM file of the CA that signed the members' certificates, for https:// endpoints (with
    /// it, an endpoint without a scheme is https).
    #[arg(long, env = CA_FILE_ENV, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Print the API's answer as JSON instead of tables, for scripts.
    #[arg(long)]
    json: bool,
    /// Stop waiting for an answer after this long. A write may still commit afterwards, so
    /// check with `status` before repeating it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "90s")]
    timeout: Duration,
    #[command(subcommand)]
    command: CtlCommand,
}

pub fn run(args: CtlArgs) -> anyhow::Result<ExitCode> {
    // An empty variable is as good as none: the member would only answer 401.
    let token = args
        .token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow::anyhow!("no bearer token: pass --token or set {TOKEN_ENV}"))?;
    let endpoints: Vec<String> = args
        .endpoints
        .iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    anyhow::ensure!(!endpoints.is_empty(), "--endpoints names no member");
    let tls = match &args.ca_file {
        Some(path) => Some(ClientTls::load(path).context("--ca-file")?),
        None => None,
    };
    if let Some(tls) = &tls {
        // `region promote` joins the cluster as a client through the
        // cluster crate, which trusts the process's CA.
        ClientTls::set_process_default(tls.clone());
    }
    let clients = endpoints
        .iter()
        .map(|e| {
            // Given a CA, a bare HOST:PORT means the cluster speaks TLS.
            let e = match (&tls, e.contains("://")) {
                (Some(_), false) => format!("https://{e}"),
                _ => e.clone(),
            };
            ControlClient::with_tls(&e, Some(token.clone()), tls.as_ref())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let api = Api {
        clients,
        answering: Cell::new(0),
        token,
        tls,
        timeout: args.timeout,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(execute(&api, args.command, args.json))
}

/// The members' clients with the bound on every call, failover, and errors
/// worded for operators.
struct Api {
    clients: Vec<ControlClient>,
    /// The client that answered last: asked first next time, so a member
    /// found down is passed over once, not on every call.
    answering: Cell<usize>,
    token: String,
    tls: Option<ClientTls>,
    timeout: Duration,
}

impl Api {
    /// Asks `call` of each member in turn, from the one that answered
    /// last, until one is reached: a member that is down (connection
    /// refused or not accepted) received nothing, so even a write may go
    /// to the next. Any answer, a refusal included, is final.
    async fn call<T, F, Fut>(&self, call: F) -> anyhow::Result<T>
    where
        F: Fn(ControlClient) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let first = self.answering.get();
        let mut down = Vec::new();
        for i in 0..self.clients.len() {
            let at = (first + i) % self.clients.len();
            let client = &self.clients[at];
            let endpoint = client.endpoint();
            match tokio::time::timeout_at(deadline, call(client.clone())).await {
                Ok(Ok(answer)) => {
                    self.answering.set(at);
                    if !down.is_empty() {
                        // Once per run: the operator learns a member is down.
                        tracing::warn!(
                            answered = endpoint,
                            "passed over unreachable member(s): {}",
                            down.join("; ")
                        );
                    }
                    return Ok(answer);
                }
                Ok(Err(e)) if e.is_unreachable() => {
                    // `{:#}` prints the chain down to the root cause, such
                    // as a refused connection.
                    down.push(format!("{endpoint}: {:#}", anyhow::Error::new(e)));
                }
                Ok(Err(e @ ClientError::Http { .. })) => {
                    let e = anyhow::Error::new(e);
                    anyhow::bail!("lost the control plane at {endpoint}: {e:#}")
                }
                // A refusal's status and message say all there is.
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => anyhow::bail!(
                    "no answer from {endpoint} within {}; a write may still commit: check `kintsugi ctl \
                     status` before repeating it",
                    humantime::format_duration(self.timeout)
                ),
            }
        }
        anyhow::bail!("cannot reach any control-plane member:\n  {}", down.join("\n  "))
    }

    async fn write(&self, command: Command, json: bool) -> anyhow::Result<()> {
        let outcome = self
            .call(|c| {
                let command = command.clone();
                async move { c.command(&command).await }
            })
            .await?;
        show(json, &outcome, tables::outcome)
    }

    /// Every endpoint, for a client of the cluster started from here.
    fn endpoints(&self) -> Vec<String> {
        self.clients.iter().map(|c| c.endpoint().to_owned()).collect()
    }
}

async fn execute(api: &Api, command: CtlCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        CtlCommand::Init { members } => init(api, members, json).await?,
        CtlCommand::Status => show(
            json,
            &api.call(|c| async move { c.status().await }).await?,
            tables::status,
        )?,
        CtlCommand::Members { command } => members(api, command, json).await?,
        CtlCommand::Memnode { command } => memnode(api, command, json).await?,
        CtlCommand::Region { command } => region(api, command, json).await?,
        CtlCommand::Client { command } => client(api, command, json).await?,
        CtlCommand::Index {
            command: IndexCommand::List,
        } => show(
            json,
            &api.call(|c| async move { c.indexes().await }).await?[..],
            tables::indexes,
        )?,
        CtlCommand::Snapshot {
            command: SnapshotCommand::Save { file },
        } => operations::save(api, &file, json).await?,
        CtlCommand::Snapshot {
            command: SnapshotCommand::Restore { file },
        } => operations::restore(api, &file, json).await?,
        CtlCommand::Check => return operations::check(api, json).await,
        CtlCommand::Audit { limit } => show(
            json,
            &api.call(|c| async move { c.audit(limit).await }).await?[..],
            tables::audit,
        )?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Formed, a cluster still has to elect its leader, and until then every
/// write is refused; so `init` returns once there is one, and the next
/// command (usually `members add`) finds it.
async fn init(api: &Api, members: Vec<MemberInfo>, json: bool) -> anyhow::Result<()> {
    let mut status = api
        .call(|c| {
            let members = members.clone();
            async move { c.init(members).await }
        })
        .await?;
    let deadline = tokio::time::Instant::now() + api.timeout;
    while status.leader.is_none() {
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the cluster is formed but elected no leader within {}: are its other members running \
                 and reachable?",
                humantime::format_duration(api.timeout)
            );
        }
        tokio::time::sleep(ELECTION_POLL).await;
        status = api.call(|c| async move { c.status().await }).await?;
    }
    show(json, &status, tables::status)
}

async fn members(api: &Api, command: MembersCommand, json: bool) -> anyhow::Result<()> {
    let changed = match command {
        MembersCommand::Add { id, addr, learner } => {
            api.call(|c| {
                let addr = addr.clone();
                async move { c.add_member(id, &addr, !learner).await }
            })
            .await?
        }
        MembersCommand::Remove { id } => api.call(|c| async move { c.remove_member(id).await }).await?,
        MembersCommand::TransferLeader { id } => return operations::transfer_leader(api, id, json).await,
        MembersCommand::List => {
            let s = api.call(|c| async move { c.status().await }).await?;
            return show(json, &s.members[..], |m| {
                tables::members(m, s.leader, Some(s.member))
            });
        }
    };
    // The answer is the new membership; who leads and who answered is in
    // `status`, which a change just made may not have reached yet.
    show(json, &changed[..], |m| tables::members(m, None, None))
}

async fn memnode(api: &Api, command: MemnodeCommand, json: bool) -> anyhow::Result<()> {
    let command = match command {
        MemnodeCommand::List => {
            return show(
                json,
                &api.call(|c| async move { c.memnodes().await }).await?[..],
                tables::memnodes,
            );
        }
        MemnodeCommand::Register { endpoint, capacity } => Command::RegisterMemNode {
            endpoint,
            capacity_bytes: capacity,
            image: None,
        },
        MemnodeCommand::Drain { id } => Command::DrainMemNode { id },
        MemnodeCommand::Maintenance { id, mode } => {
            if mode == Switch::On {
                move_primaries_off(api, id, json).await?;
            }
            Command::SetMaintenance {
                id,
                on: mode == Switch::On,
            }
        }
        MemnodeCommand::Remove { id } => Command::RemoveMemNode { id },
    };
    api.write(command, json).await
}

/// Before node `id` goes into maintenance: each region whose primary it
/// holds, with a backup on an active node, is moved there by a planned
/// promotion (`ctl region promote`), so that the node then holds backups
/// only, which maintenance takes out of the write set. A sole copy stays.
async fn move_primaries_off(api: &Api, id: MemNodeId, json: bool) -> anyhow::Result<()> {
    let status = api.call(|c| async move { c.status().await }).await?;
    let active: Vec<MemNodeId> = status
        .memnodes
        .iter()
        .filter(|n| n.state == control_plane::state::MemNodeState::Active && !n.maintenance && n.id != id)
        .map(|n| n.id)
        .collect();
    for r in status
        .regions
        .iter()
        .filter(|r| r.primary() == id && r.replicas.len() > 1)
    {
        let Some(heir) = r.replicas[1..]
            .iter()
            .map(|l| l.node)
            .find(|n| active.contains(n))
        else {
            anyhow::bail!(
                "region {} has its primary on node {id} and no backup on an active node to move it to",
                r.id
            );
        };
        eprintln!(
            "moving region {}'s primary from node {id} to node {heir} before maintenance",
            r.id
        );
        promote(api, r.id, heir, false, json).await?;
    }
    Ok(())
}

async fn region(api: &Api, command: RegionCommand, json: bool) -> anyhow::Result<()> {
    let command = match command {
        RegionCommand::List => {
            return show(
                json,
                &api.call(|c| async move { c.regions().await }).await?[..],
                tables::regions,
            );
        }
        RegionCommand::Create { size, replicas } => Command::CreateRegion {
            size_bytes: size,
            replicas,
        },
        RegionCommand::Promote {
            region,
            node,
            no_restore: true,
            ..
        } => Command::PromoteBackup {
            region,
            node,
            restorer: None,
        },
        RegionCommand::Promote {
            region, node, resume, ..
        } => return promote(api, region, node, resume, json).await,
        RegionCommand::AddBackup { region, node } => Command::AddBackup { region, node },
        RegionCommand::RemoveBackup { region, node } => Command::RemoveBackup { region, node },
        RegionCommand::Lost => {
            let status = api.call(|c| async move { c.status().await }).await?;
            let lost: Vec<&Region> = status.regions.iter().filter(|r| r.lost.is_some()).collect();
            return show(json, &lost[..], |l| tables::lost(l, &status.indexes));
        }
        RegionCommand::Drop { region, confirm } => return drop_region(api, region, confirm, json).await,
    };
    api.write(command, json).await
}

/// `region drop`: refused without `--confirm`, saying what it would
/// destroy; the control plane refuses the region of a live index.
async fn drop_region(api: &Api, region: RegionId, confirm: bool, json: bool) -> anyhow::Result<()> {
    let status = api.call(|c| async move { c.status().await }).await?;
    let r = status
        .regions
        .iter()
        .find(|r| r.id == region)
        .ok_or_else(|| anyhow::anyhow!("no region {region} (`kintsugi ctl region list` shows them)"))?;
    let what = tables::drop_summary(r, &status.indexes);
    if !confirm {
        anyhow::bail!(
            "not dropped: dropping region {region} destroys {what}. It cannot be undone; run again with \
             --confirm to drop it"
        );
    }
    let outcome = api
        .call(|c| async move { c.command(&Command::DropRegion { region }).await })
        .await?;
    show(json, &outcome, |_| format!("region {region} dropped: {what}"))
}

/// A planned promotion, run from here as a client of the cluster.
async fn promote(
    api: &Api,
    region: fabric::RegionId,
    node: MemNodeId,
    resume: bool,
    json: bool,
) -> anyhow::Result<()> {
    let options = cluster::ClusterOptions {
        name: format!("ctl-promote-{region}"),
        owner_ids: 1,
        ..cluster::ClusterOptions::default()
    };
    let endpoints = api.endpoints();
    let promoter = cluster::Cluster::connect_with(&endpoints, &api.token, options)
        .await
        .context("joining the cluster to promote")?;
    let done = if resume {
        promoter.finish_promotion(region).await
    } else {
        promoter.promote(region, node).await
    };
    let closed = promoter.close().await;
    let p = done?;
    closed?;
    if json {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{}",
            serde_json::json!({
                "region": p.region, "primary": p.primary, "epoch": p.epoch,
                "published_epoch": p.published_epoch, "lock_words": p.lock_words,
                "fenced_ms": ms(p.fenced), "restored_ms": ms(p.restored), "published_ms": ms(p.published),
            })
        );
    } else {
        println!(
            "region {} has primary {} (epoch {}): every replica fenced after {:.1} ms, {} lock words rebuilt \
             and every log finished after {:.1} ms, published at epoch {} after {:.1} ms",
            p.region,
            p.primary,
            p.epoch,
            p.fenced.as_secs_f64() * 1e3,
            p.lock_words,
            p.restored.as_secs_f64() * 1e3,
            p.published_epoch,
            p.published.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

async fn client(api: &Api, command: ClientCommand, json: bool) -> anyhow::Result<()> {
    let command = match command {
        ClientCommand::List => {
            return show(
                json,
                &api.call(|c| async move { c.clients().await }).await?[..],
                tables::clients,
            );
        }
        ClientCommand::Register { name, lease, .. } if lease.is_some_and(|l| l.is_zero()) => {
            anyhow::bail!("--lease must be above zero (leave it out for the cluster's default); client {name:?} not registered")
        }
        ClientCommand::Register {
            name,
            owner_ids,
            lease,
        } => Command::RegisterClient {
            name,
            owner_ids,
            // Saturates: the member refuses a lease that long with a clear message.
            lease_ms: lease.map_or(0, millis),
        },
        ClientCommand::Expire { id } => Command::ExpireClient { id },
        ClientCommand::Forget { id } => Command::ForgetClient { id, by: None },
    };
    api.write(command, json).await
}

/// Prints the answer: as JSON with `--json`, so that scripts see exactly
/// what the API said, else as `render` makes it readable.
fn show<T: Serialize + ?Sized>(
    json: bool,
    answer: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    let text = if json {
        serde_json::to_string_pretty(answer).context("encoding the answer as JSON")?
    } else {
        render(answer)
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        // A reader that stopped early (`| head`) wanted no more: not a failure.
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        written => written.context("writing to stdout"),
    }
}
