//! `ctl snapshot`, `ctl check` and `ctl members transfer-leader`: the
//! commands that act on the cluster as a whole.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use control_plane::api::{ControlClient, Snapshot, StateDigest, SNAPSHOT_BYTES_MAX};
use control_plane::config::read_bounded;
use control_plane::raft::MemberId;
use control_plane::tls::scheme;

use super::{show, tables, text, Api};

/// Rounds `check` asks every member before it gives up finding them at one
/// applied index: a quiet cluster agrees at once; one under a stream of
/// commands moves on between two reads, which a few rounds ride out.
const CHECK_ROUNDS_MAX: u32 = 50;

/// Pause between `check`'s rounds: about one commit.
const CHECK_PAUSE: Duration = Duration::from_millis(20);

/// `ctl snapshot save FILE`.
pub(super) async fn save(api: &Api, file: &Path, json: bool) -> anyhow::Result<()> {
    let snapshot = api.call(|c| async move { c.snapshot().await }).await?;
    // Compact: what `restore` reads is bounded (SNAPSHOT_BYTES_MAX).
    let encoded = serde_json::to_vec(&snapshot).context("encoding the snapshot")?;
    if encoded.len() > SNAPSHOT_BYTES_MAX / 10 * 9 {
        tracing::warn!(
            bytes = encoded.len(),
            max = SNAPSHOT_BYTES_MAX,
            "the snapshot is near the largest a restore accepts"
        );
    }
    // Written beside the target and renamed over it: a crash leaves the old
    // file or the new one, never half of one.
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    tmp.write_all(&encoded)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.persist(file)
        .with_context(|| format!("renaming the snapshot to {}", file.display()))?;
    let summary = serde_json::json!({
        "file": file.display().to_string(),
        "bytes": encoded.len(),
        "member": snapshot.member,
        "last_applied": snapshot.last_applied,
        "state_hash": snapshot.state_hash,
        "epoch": snapshot.state.epoch,
        "memnodes": snapshot.state.memnodes.len(),
        "regions": snapshot.state.regions.len(),
        "clients": snapshot.state.clients.len(),
        "indexes": snapshot.state.indexes.len(),
    });
    show(json, &summary, |_| {
        format!(
            "saved {} to {}: the state of leader {} at log index {}, map epoch {}, {} memory nodes, {} \
             regions, {} clients, {} indexes (state hash {})",
            text::bytes(encoded.len() as u64),
            file.display(),
            snapshot.member,
            snapshot.last_applied.map_or("-".to_owned(), |i| i.to_string()),
            snapshot.state.epoch,
            snapshot.state.memnodes.len(),
            snapshot.state.regions.len(),
            snapshot.state.clients.len(),
            snapshot.state.indexes.len(),
            snapshot.state_hash
        )
    })
}

/// `ctl snapshot restore FILE`.
pub(super) async fn restore(api: &Api, file: &Path, json: bool) -> anyhow::Result<()> {
    let bytes = read_bounded(file, SNAPSHOT_BYTES_MAX as u64)
        .with_context(|| format!("reading the snapshot {}", file.display()))?;
    let snapshot: Snapshot = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{} is not a snapshot written by `ctl snapshot save`",
            file.display()
        )
    })?;
    let snapshot = &snapshot;
    let outcome = api.call(|c| async move { c.restore(snapshot).await }).await?;
    show(json, &outcome, tables::outcome)
}

/// `ctl members transfer-leader ID`.
pub(super) async fn transfer_leader(api: &Api, to: MemberId, json: bool) -> anyhow::Result<()> {
    let moved = api.call(|c| async move { c.transfer_leader(to).await }).await?;
    show(json, &moved, |m| {
        if m.from == m.to {
            format!("member {} already leads (term {})", m.to, m.term)
        } else {
            format!(
                "member {} leads now (term {}), taken over from member {} in {} ms",
                m.to, m.term, m.from, m.took_ms
            )
        }
    })
}

/// `ctl check`: asks every member for its applied index and state digest
/// until all that answer stand at one index, then compares the digests.
pub(super) async fn check(api: &Api, json: bool) -> anyhow::Result<ExitCode> {
    let status = api.call(|c| async move { c.status().await }).await?;
    // Members are named by host:port; they speak the scheme the endpoint
    // that answered speaks.
    let tls = api
        .clients
        .get(api.answering.get())
        .is_some_and(|c| c.endpoint().starts_with("https://"));
    let members = status
        .members
        .iter()
        .map(|m| {
            let url = format!("{}://{}", scheme(tls), m.addr);
            ControlClient::with_tls(&url, Some(api.token.clone()), api.tls.as_ref()).map(|c| (m.id, c))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows: Vec<(MemberId, Result<StateDigest, String>)> = Vec::new();
    for round in 0..CHECK_ROUNDS_MAX {
        rows.clear();
        for (id, client) in &members {
            let answer = tokio::time::timeout(api.timeout, client.check()).await;
            let row = match answer {
                Ok(Ok(d)) => Ok(d),
                Ok(Err(e)) => Err(format!("{:#}", anyhow::Error::new(e))),
                Err(_) => Err(format!(
                    "no answer within {}",
                    humantime::format_duration(api.timeout)
                )),
            };
            rows.push((*id, row));
        }
        let mut applied = rows
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .map(|d| d.last_applied);
        let first = applied.next();
        if applied.all(|a| Some(a) == first) || round + 1 == CHECK_ROUNDS_MAX {
            break;
        }
        tokio::time::sleep(CHECK_PAUSE).await;
    }
    let answered: Vec<&StateDigest> = rows.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    let one_index = answered
        .windows(2)
        .all(|w| w[0].last_applied == w[1].last_applied);
    let agree = one_index && answered.windows(2).all(|w| w[0].state_hash == w[1].state_hash);
    let unreachable: Vec<MemberId> = rows
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(id, _)| *id)
        .collect();
    let verdict = if answered.is_empty() {
        "no member answered".to_owned()
    } else if !one_index {
        format!(
            "the members did not stand at one applied index in {CHECK_ROUNDS_MAX} rounds: not compared (commands \
             keep arriving; try again)"
        )
    } else if agree {
        format!(
            "{} members agree at log index {}{}",
            answered.len(),
            answered[0].last_applied.map_or("-".to_owned(), |i| i.to_string()),
            if unreachable.is_empty() {
                String::new()
            } else {
                format!("; not reached: {unreachable:?}")
            }
        )
    } else {
        "the members' states DIFFER at the same log index".to_owned()
    };
    let report = serde_json::json!({
        "agree": agree && !answered.is_empty(),
        "verdict": verdict,
        "members": rows.iter().map(|(id, r)| match r {
            Ok(d) => serde_json::to_value(d).unwrap_or_default(),
            Err(why) => serde_json::json!({ "member": id, "error": why }),
        }).collect::<Vec<_>>(),
    });
    show(json, &report, |_| format!("{}\n{verdict}", tables::check(&rows)))?;
    Ok(if agree && !answered.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
