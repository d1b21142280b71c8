//! The subcommands of `kintsugi ctl` and the parsers of their values.

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use control_plane::api::{is_member_addr, MemberInfo, AUDIT_LIMIT_DEFAULT};
use control_plane::raft::MemberId;
use control_plane::state::{ClientId, MemNodeId};
use fabric::RegionId;

use crate::cli::units::{parse_bytes, parse_duration};

#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// Form a new cluster; run once, on one pristine member (the others join with `members add`).
    Init {
        /// A member of the new cluster, as ID=HOST:PORT; repeat for more. None: the addressed
        /// member alone.
        #[arg(long = "member", value_name = "ID=HOST:PORT", value_parser = parse_member)]
        members: Vec<MemberInfo>,
    },
    /// See who leads, how far this member has applied, and what the cluster holds.
    Status,
    /// Grow, shrink or inspect the Raft membership.
    Members {
        #[command(subcommand)]
        command: MembersCommand,
    },
    /// Add memory nodes, or take them out of placement.
    Memnode {
        #[command(subcommand)]
        command: MemnodeCommand,
    },
    /// Create regions and move their replica roles between memory nodes.
    Region {
        #[command(subcommand)]
        command: RegionCommand,
    },
    /// Hand out client ids, owner-id blocks and leases, and reclaim them.
    Client {
        #[command(subcommand)]
        command: ClientCommand,
    },
    /// Show the named indexes (`Cluster::btree("orders")` creates them on first open).
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Save the whole state to a file, or restore one into a new cluster.
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Compare the members' states: each one's digest at the same applied index (exit code 1
    /// if two differ).
    Check,
    /// Trace who changed what, oldest first, and whether it was refused.
    Audit {
        /// Newest entries to show.
        #[arg(long, default_value_t = AUDIT_LIMIT_DEFAULT)]
        limit: usize,
    },
}

#[derive(Subcommand, Debug)]
pub enum MembersCommand {
    /// Add a member; waits until it has caught up, so a majority never depends on a laggard.
    Add {
        /// Its Raft id (the --id it was started with).
        id: MemberId,
        /// Where it listens, as HOST:PORT.
        addr: String,
        /// Replicate to it without counting it toward the majority.
        #[arg(long)]
        learner: bool,
    },
    /// Remove a member, e.g. before retiring its host.
    Remove {
        /// Its Raft id.
        id: MemberId,
    },
    /// Show the members as the addressed member knows them.
    List,
    /// Hand the leadership to another voter, e.g. before restarting the leader's host.
    TransferLeader {
        /// The voter to lead.
        id: MemberId,
    },
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Write the leader's state (memory nodes, regions, clients, indexes, audit) to FILE as JSON.
    Save {
        /// Where to write it (replaced if it exists).
        file: PathBuf,
    },
    /// Make FILE's state the state of a new cluster: run on a cluster formed with `init` that
    /// holds nothing yet (needs an admin token). Memory nodes of the snapshot that are still
    /// running must be pointed at the new cluster, or they are declared dead after their lease.
    Restore {
        /// A file written by `snapshot save`.
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum MemnodeCommand {
    /// Show memory nodes, to see where room and trouble are.
    List,
    /// Make a memory node known; it takes replicas once it has renewed its lease.
    Register {
        /// Where clients reach it: HOST:PORT for tcp, an image path for shm.
        #[arg(long)]
        endpoint: String,
        /// Bytes it offers to regions (4096, 64MiB, 1GiB, ...).
        #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
        capacity: u64,
    },
    /// Stop placing new replicas on a node, e.g. before maintenance; its replicas stay.
    Drain {
        /// The node.
        id: MemNodeId,
    },
    /// Put a node in or out of maintenance, for a planned restart: while in, it is not
    /// declared dead and no new replica is placed on it. Going in first moves each primary it
    /// holds to a backup (a planned promotion), then takes its backups out of the write set:
    /// their regions serve degraded while it restarts, and writes go on. Once out, recovery
    /// fills it again from the primaries. A region whose only copy it holds is unavailable
    /// while it is down.
    Maintenance {
        /// The node.
        id: MemNodeId,
        /// on or off.
        #[arg(value_enum)]
        mode: Switch,
    },
    /// Forget a node for good; refused while it still holds a replica.
    Remove {
        /// The node.
        id: MemNodeId,
    },
}

/// `on` or `off`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Turn it on.
    On,
    /// Turn it off.
    Off,
}

#[derive(Subcommand, Debug)]
pub enum RegionCommand {
    /// Create a region, placed on distinct active memory nodes with room.
    Create {
        /// Bytes, identical on every replica (4096, 64MiB, 1GiB, ...).
        #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
        size: u64,
        /// Replicas, primary included: 1 + f to survive f memory-node failures.
        #[arg(long, default_value_t = 2)]
        replicas: u8,
    },
    /// Show regions and where their replicas live.
    List,
    /// Make a backup the primary while clients keep working: roles swap at a new epoch, every
    /// replica's node fences it, the new primary's lock words and chunk counter are rebuilt and
    /// every log finished, then the region is published again. Needs the memory nodes reachable
    /// from here (their shm images, or tcp).
    Promote {
        /// The region.
        region: RegionId,
        /// The memory node holding the backup to promote.
        node: MemNodeId,
        /// Only finish a promotion of REGION that was left part-way (the region stays out of
        /// the clients' map until it is finished); NODE is ignored.
        #[arg(long)]
        resume: bool,
        /// Only commit the role change; the region stays out of the clients' map until
        /// `promote --resume` rebuilds it (for when the memory nodes are not reachable from here).
        #[arg(long, conflicts_with = "resume")]
        no_restore: bool,
    },
    /// Add a backup, e.g. to restore 1 + f replicas after a node died.
    AddBackup {
        /// The region.
        region: RegionId,
        /// An active memory node without a replica of it.
        node: MemNodeId,
    },
    /// Drop a backup, e.g. to empty a node before removing it.
    RemoveBackup {
        /// The region.
        region: RegionId,
        /// The memory node holding the backup.
        node: MemNodeId,
    },
    /// Show the regions recovery declared lost (their only copy died), why, and what to do.
    Lost,
    /// Remove a region for good and free its bytes on every node it was on, so that a dead node
    /// it named may register again. Its contents are destroyed. A region an index uses is
    /// dropped only once it is lost, and the index with it.
    Drop {
        /// The region.
        region: RegionId,
        /// Yes, destroy it: without this flag nothing is done.
        #[arg(long)]
        confirm: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Show clients, their owner ids and whether their leases hold.
    List,
    /// Register a client by hand, e.g. for a tool that renews its own lease.
    Register {
        /// A name for operators.
        #[arg(long)]
        name: String,
        /// Owner ids to reserve: one per coroutine the client runs.
        #[arg(long, default_value_t = 1)]
        owner_ids: u16,
        /// How long it may stay silent before it is declared expired (200ms, 1s, ...); default:
        /// the members' `timing.client_lease`.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        lease: Option<Duration>,
    },
    /// Declare a client expired now, e.g. when its host is known dead; recovery rolls its logs.
    Expire {
        /// The client.
        id: ClientId,
    },
    /// Free an expired client's owner ids once recovery has rolled its logs.
    Forget {
        /// The client.
        id: ClientId,
    },
}

/// A member as `ID=HOST:PORT`, a voter: a new cluster starts with voters only.
pub fn parse_member(s: &str) -> Result<MemberInfo, String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not ID=HOST:PORT, e.g. 1=127.0.0.1:7401"))?;
    let id = id
        .trim()
        .parse::<MemberId>()
        .map_err(|_| format!("member id '{id}' is not a non-negative number"))?;
    let addr = addr.trim();
    if !is_member_addr(addr) {
        return Err(format!("member address '{addr}' is not HOST:PORT"));
    }
    Ok(MemberInfo {
        id,
        addr: addr.to_owned(),
        voter: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_as_id_and_address() {
        let m = parse_member("2=127.0.0.1:7402").unwrap();
        assert_eq!((m.id, m.addr.as_str(), m.voter), (2, "127.0.0.1:7402", true));
        assert!(parse_member("cp-3.local:7403").is_err());
        assert!(parse_member("x=127.0.0.1:7402").is_err());
        assert!(parse_member("2=127.0.0.1").is_err());
        assert!(parse_member("2=:7402").is_err());
    }
}

#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Show each named index: kind, variant, region and whether it is ready.
    List,
}
