//! Values as operators read them: sizes in binary units, leases and times
//! in humantime, commands as short sentences.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use control_plane::state::{ClientState, Command, OwnerBlock};

/// A byte count in the largest binary unit that keeps it at least 1, exact
/// when it divides evenly (sizes are usually given as `64MiB`), else to one
/// decimal.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = 0;
    while unit + 1 < UNITS.len() && n >> (10 * (unit + 1)) > 0 {
        unit += 1;
    }
    let scale = 1u64 << (10 * unit);
    if n % scale == 0 {
        format!("{} {}", n / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", n as f64 / scale as f64, UNITS[unit])
    }
}

/// Milliseconds as humantime (`1s`, `250ms`).
pub fn millis(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// A time in ms since the Unix epoch, as RFC 3339 (UTC, seconds).
pub fn time(at_ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(at_ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// An owner-id block as the ids it holds: `7`, or `7-10`.
pub fn owners(block: OwnerBlock) -> String {
    match block.count {
        0 => "-".to_owned(),
        1 => block.first.to_string(),
        n => format!("{}-{}", block.first, u32::from(block.first) + u32::from(n) - 1),
    }
}

/// A client's state; an expiry says how long ago, since that is what
/// decides whether recovery has had time to roll its logs.
pub fn client_state(state: ClientState, now: SystemTime) -> String {
    match state {
        ClientState::Live => "live".to_owned(),
        ClientState::Expired { at_ms, .. } => {
            let at = UNIX_EPOCH + Duration::from_millis(at_ms);
            match now.duration_since(at) {
                // Whole seconds: milliseconds of an age are noise.
                Ok(age) => format!(
                    "expired {} ago",
                    humantime::format_duration(Duration::from_secs(age.as_secs()))
                ),
                Err(_) => format!("expired at {}", time(at_ms)),
            }
        }
    }
}

/// A command as a sentence, for the audit trail.
pub fn command(c: &Command) -> String {
    match c {
        Command::RegisterMemNode {
            endpoint,
            capacity_bytes,
            image,
        } => match image {
            Some(image) => format!(
                "register memory node {endpoint} ({}, image {image})",
                bytes(*capacity_bytes)
            ),
            None => format!("register memory node {endpoint} ({})", bytes(*capacity_bytes)),
        },
        Command::ReplaceImage { id, image } => {
            format!("memory node {id} is back with another image ({image}): declare it dead, refill its replicas")
        }
        Command::ReplicaUnproven { region, node, found } => format!(
            "memory node {node} holds region {region} at generation {found}, not the map's: drop and refill it"
        ),
        Command::ActivateMemNode { id } => format!("activate memory node {id}"),
        Command::SuspectMemNode { id } => format!("suspect memory node {id}"),
        Command::DeclareMemNodeDead { id } => format!("declare memory node {id} dead"),
        Command::DrainMemNode { id } => format!("drain memory node {id}"),
        Command::RemoveMemNode { id } => format!("remove memory node {id}"),
        Command::CreateRegion { size_bytes, replicas } => {
            format!(
                "create a region of {} with {replicas} replicas",
                bytes(*size_bytes)
            )
        }
        Command::PromoteBackup { region, node, .. } => {
            format!("promote the backup of region {region} on node {node}")
        }
        Command::ClaimRestore { region, client } => {
            format!("claim the restore of region {region} for client {client}")
        }
        Command::ReplicaProven {
            region,
            node,
            generation,
            followed_epoch,
        } => format!(
            "node {node} proves its replica of region {region} at generation {generation} (followed the old \
             cluster to epoch {followed_epoch})"
        ),
        Command::ReleaseRestore { region, client } => {
            format!("give back client {client}'s claim on the restore of region {region}")
        }
        Command::AddBackup { region, node } => {
            format!("start a new replica of region {region} on node {node}")
        }
        Command::FenceCopy { region, node } => {
            format!("fence region {region} for a copy into node {node}")
        }
        Command::JoinBackup { region, node } => {
            format!("join node {node}'s copied replica of region {region}")
        }
        Command::EvictReplica { region, node } => {
            format!("evict dead node {node}'s replica of region {region}")
        }
        Command::DeclareRegionLost { region } => {
            format!("declare region {region} lost (its only copy died)")
        }
        Command::DropRegion { region } => format!("drop region {region} and free its nodes"),
        Command::RemoveBackup { region, node } => {
            format!("remove the backup of region {region} on node {node}")
        }
        Command::MemNodeEpoch { id, epoch } => format!("memory node {id} fences at epoch {epoch}"),
        Command::MemNodeFence { id, seq } => {
            format!("memory node {id} refuses the clients expired by fence {seq}")
        }
        Command::RegionRestored { region } => {
            format!("region {region} restored (after a promotion or a join)")
        }
        Command::ReplicaReady { region, node } => {
            format!("node {node} has allocated its replica of region {region}")
        }
        Command::CreateIndex {
            name,
            kind,
            variant,
            size_bytes,
            replicas,
            client,
        } => format!(
            "create {variant} {kind} {name:?} ({}, {replicas} replicas) for client {client}",
            bytes(*size_bytes)
        ),
        Command::ClaimIndex { name, client } => format!("client {client} takes over creating index {name:?}"),
        Command::IndexReady { name, client } => format!("client {client} has created index {name:?}"),
        Command::RegisterClient {
            name,
            owner_ids,
            lease_ms,
        } => format!(
            "register client {name:?} ({owner_ids} owner ids, lease {})",
            millis(*lease_ms)
        ),
        Command::ExpireClient { id } => format!("expire client {id}"),
        Command::ForgetClient { id, .. } => format!("forget client {id}"),
        Command::ClaimReclaim { id, by } => format!("claim client {id}'s reclaim for client {by}"),
        Command::DeregisterClient { id } => format!("client {id} leaves (its logs are done)"),
        Command::SetMaintenance { id, on: true } => format!("memory node {id} enters maintenance"),
        Command::SetMaintenance { id, on: false } => format!("memory node {id} leaves maintenance"),
        Command::Restore { .. } => "restore the state of a snapshot".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1000), "1000 B");
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn owner_blocks_and_states_read_as_ranges_and_ages() {
        assert_eq!(owners(OwnerBlock { first: 7, count: 1 }), "7");
        assert_eq!(owners(OwnerBlock { first: 7, count: 4 }), "7-10");
        let expired = ClientState::Expired { at_ms: 1_000, seq: 1 };
        let now = UNIX_EPOCH + Duration::from_millis(91_500);
        assert_eq!(client_state(expired, now), "expired 1m 30s ago");
        assert_eq!(client_state(ClientState::Live, now), "live");
        assert_eq!(millis(1500), "1s 500ms");
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
    }
}
