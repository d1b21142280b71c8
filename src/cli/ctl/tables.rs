//! The readable form of every answer: tables of records, and the status
//! page built from them.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::SystemTime;

use comfy_table::{presets, CellAlignment, Table};
use control_plane::api::{MemberInfo, StateDigest, Status};
use control_plane::raft::MemberId;
use control_plane::state::{
    AuditEntry, Client, ClientState, IndexRecord, IndexState, MemNode, Outcome, Region,
};

use super::text;

/// Rows of each table `status` shows; the lists show everything.
const STATUS_ROWS_MAX: usize = 10;

fn table(header: &[&str], right_aligned: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED).set_header(header);
    for &i in right_aligned {
        if let Some(column) = t.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// `leader` and `answering` mark the rows an operator looks for first.
pub fn members(members: &[MemberInfo], leader: Option<MemberId>, answering: Option<MemberId>) -> String {
    let mut t = table(&["id", "address", "kind", "notes"], &[0]);
    for m in members {
        let notes: Vec<&str> = [
            (leader == Some(m.id)).then_some("leader"),
            (answering == Some(m.id)).then_some("answered"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let kind = if m.voter { "voter" } else { "learner" };
        t.add_row(vec![
            m.id.to_string(),
            m.addr.clone(),
            kind.to_owned(),
            notes.join(", "),
        ]);
    }
    t.to_string()
}

pub fn memnodes(nodes: &[MemNode]) -> String {
    if nodes.is_empty() {
        return "no memory nodes".to_owned();
    }
    let mut t = table(
        &["id", "endpoint", "state", "capacity", "allocated", "image"],
        &[0, 3, 4],
    );
    for n in nodes {
        // The first 8 hex digits tell images apart at a glance; --json has all 32.
        let image = n
            .image
            .map_or_else(|| "-".to_owned(), |i| i.to_string()[..8].to_owned());
        t.add_row(vec![
            n.id.to_string(),
            n.endpoint.clone(),
            if n.maintenance {
                format!("{} (maintenance)", n.state)
            } else {
                n.state.to_string()
            },
            text::bytes(n.capacity_bytes),
            text::bytes(n.allocated_bytes),
            image,
        ]);
    }
    t.to_string()
}

pub fn regions(regions: &[Region]) -> String {
    if regions.is_empty() {
        return "no regions".to_owned();
    }
    let mut t = table(
        &["id", "size", "primary", "backups", "epoch", "allocated", "state"],
        &[0, 1, 2, 4],
    );
    for r in regions {
        let backups: Vec<String> = r.replicas.iter().skip(1).map(|l| l.node.to_string()).collect();
        let primary = r
            .replicas
            .first()
            .map_or_else(|| "-".to_owned(), |l| l.node.to_string());
        t.add_row(vec![
            r.id.to_string(),
            text::bytes(r.size_bytes),
            primary,
            if backups.is_empty() {
                "-".to_owned()
            } else {
                backups.join(", ")
            },
            r.epoch.to_string(),
            if r.ready() {
                "everywhere".to_owned()
            } else {
                let waiting: Vec<String> = r.pending.iter().map(ToString::to_string).collect();
                format!("waiting for {}", waiting.join(", "))
            },
            region_state(r),
        ]);
    }
    t.to_string()
}

/// Where a region is in its life, in a word or three: `lost` first, since
/// nothing else about a lost region matters any more.
fn region_state(r: &Region) -> String {
    let nodes = |l: &[control_plane::state::MemNodeId]| {
        l.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    if r.lost.is_some() {
        "lost (ctl region lost)".to_owned()
    } else if r.restoring {
        "restoring".to_owned()
    } else if let Some(n) = r.catching_up {
        format!("catching up {n}")
    } else if !r.syncing.is_empty() {
        let to: Vec<_> = r.syncing.iter().map(|l| l.node).collect();
        format!("copying to {}", nodes(&to))
    } else if r.replicas.len() < r.replication_target() {
        format!("degraded ({} of {})", r.replicas.len(), r.replication_target())
    } else {
        "whole".to_owned()
    }
}

/// `region lost`: each lost region, where it lived, what it held and why it
/// is lost, then what an operator does about it.
pub fn lost(regions: &[&Region], indexes: &[IndexRecord]) -> String {
    if regions.is_empty() {
        return "no lost regions".to_owned();
    }
    let mut t = table(&["id", "size", "replicas were on", "index", "why"], &[0, 1]);
    for r in regions {
        let on: Vec<String> = r.replicas.iter().map(|l| l.node.to_string()).collect();
        let names: Vec<String> = indexes
            .iter()
            .filter(|x| x.region == r.id)
            .map(|x| x.name.clone())
            .collect();
        t.add_row(vec![
            r.id.to_string(),
            text::bytes(r.size_bytes),
            on.join(", "),
            if names.is_empty() {
                "-".to_owned()
            } else {
                names.join(", ")
            },
            r.lost.clone().unwrap_or_default(),
        ]);
    }
    format!(
        "{t}\nA lost region's only copy died: its data is gone, and recovery leaves it alone. Clients of its \
         index wait and then fail; finishing an expired client's logs waits for it too. Restore the data \
         from elsewhere if there is a copy, then drop the region: `kintsugi ctl region drop ID --confirm` \
         frees its nodes (a dead node it names can then register again) and removes its index."
    )
}

/// What dropping `r` destroys, in words, for `region drop`.
pub fn drop_summary(r: &Region, indexes: &[IndexRecord]) -> String {
    let nodes: Vec<String> = r
        .replicas
        .iter()
        .chain(&r.syncing)
        .map(|l| l.node.to_string())
        .collect();
    let names: Vec<String> = indexes
        .iter()
        .filter(|x| x.region == r.id)
        .map(|x| format!("{:?}", x.name))
        .collect();
    let data = match &r.lost {
        Some(_) => "the record of a lost region (its data died with its only copy)",
        None => "its contents on every replica",
    };
    let mut out = format!(
        "{data}, {} freed on node(s) {}",
        text::bytes(r.size_bytes),
        nodes.join(", ")
    );
    match (&r.lost, names.is_empty()) {
        (_, true) => {}
        (Some(_), false) => out.push_str(&format!(", and index {} with it", names.join(", "))),
        (None, false) => out.push_str(&format!(
            "; but it holds index {}, which is not lost: the control plane refuses to drop it",
            names.join(", ")
        )),
    }
    out
}

pub fn indexes(indexes: &[IndexRecord]) -> String {
    if indexes.is_empty() {
        return "no indexes".to_owned();
    }
    let mut t = table(&["name", "kind", "variant", "region", "state", "created"], &[3]);
    for x in indexes {
        t.add_row(vec![
            x.name.clone(),
            x.kind.to_string(),
            x.variant.to_string(),
            x.region.to_string(),
            match x.state {
                IndexState::Ready => "ready".to_owned(),
                IndexState::Creating { client } => format!("being created by client {client}"),
            },
            text::time(x.created_at_ms),
        ]);
    }
    t.to_string()
}

pub fn clients(clients: &[Client]) -> String {
    if clients.is_empty() {
        return "no clients".to_owned();
    }
    let now = SystemTime::now();
    let mut t = table(&["id", "name", "owner ids", "lease", "state"], &[0]);
    for c in clients {
        t.add_row(vec![
            c.id.to_string(),
            c.name.clone(),
            text::owners(c.owners),
            text::millis(c.lease_ms),
            text::client_state(c.state, now),
        ]);
    }
    t.to_string()
}

pub fn audit(entries: &[AuditEntry]) -> String {
    if entries.is_empty() {
        return "no audit entries".to_owned();
    }
    let mut t = table(&["time", "actor", "command", "outcome"], &[]);
    for e in entries {
        t.add_row(vec![
            text::time(e.at_ms),
            e.actor.clone(),
            text::command(&e.command),
            e.outcome.clone(),
        ]);
    }
    t.to_string()
}

/// What a write produced: the record as it now is, in its table.
pub fn outcome(o: &Outcome) -> String {
    match o {
        Outcome::MemNode(n) => memnodes(std::slice::from_ref(n)),
        Outcome::Region(r) => regions(std::slice::from_ref(r)),
        Outcome::Client(c) => clients(std::slice::from_ref(c)),
        Outcome::Index(x) => indexes(std::slice::from_ref(x)),
        Outcome::Removed => "removed".to_owned(),
        Outcome::NoCommand => "applied; nothing changed".to_owned(),
        Outcome::Restored(r) => format!(
            "restored: {} memory nodes, {} regions, {} clients, {} indexes; map epoch {}",
            r.memnodes, r.regions, r.clients, r.indexes, r.epoch
        ),
    }
}

/// How many of each state, e.g. `2 active, 1 joining`: the line to read
/// before the table.
fn tally(states: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for s in states {
        *counts.entry(s).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    parts.join(", ")
}

/// One section of the status page: a count line, then at most
/// [`STATUS_ROWS_MAX`] rows, naming the command that lists the rest.
fn section<T>(
    out: &mut String,
    title: &str,
    items: &[T],
    states: String,
    list: &str,
    render: fn(&[T]) -> String,
) {
    if items.is_empty() {
        let _ = writeln!(out, "\n{title}: none");
        return;
    }
    let _ = writeln!(out, "\n{title}: {} ({states})", items.len());
    let shown = &items[..items.len().min(STATUS_ROWS_MAX)];
    let _ = writeln!(out, "{}", render(shown));
    if items.len() > shown.len() {
        let _ = writeln!(out, "... {} more: kintsugi ctl {list}", items.len() - shown.len());
    }
}

pub fn status(s: &Status) -> String {
    let mut out = String::new();
    let leader = match s.leader {
        Some(id) => match s.members.iter().find(|m| m.id == id) {
            Some(m) => format!("{id} at {}", m.addr),
            None => id.to_string(),
        },
        None => "unknown (an election may be under way)".to_owned(),
    };
    let position = |i: Option<u64>| i.map_or_else(|| "none".to_owned(), |i| i.to_string());
    let _ = writeln!(out, "member:  {} ({})", s.member, s.role);
    let _ = writeln!(out, "leader:  {leader}");
    let _ = writeln!(out, "term:    {}", s.term);
    let _ = writeln!(
        out,
        "log:     last index {}, applied {}",
        position(s.last_log_index),
        position(s.last_applied)
    );
    let _ = writeln!(out, "epoch:   {}", s.epoch);
    let _ = writeln!(out, "\nmembers: {}", s.members.len());
    let _ = writeln!(out, "{}", members(&s.members, s.leader, Some(s.member)));
    let memnode_states = tally(s.memnodes.iter().map(|n| n.state.to_string()));
    section(
        &mut out,
        "memory nodes",
        &s.memnodes,
        memnode_states,
        "memnode list",
        memnodes,
    );
    let replicas: usize = s.regions.iter().map(|r| r.replicas.len()).sum();
    // Saturating: the sizes come from the wire, and a sum that overflows is
    // a corrupt answer to show, not a reason to panic.
    let bytes = s
        .regions
        .iter()
        .fold(0u64, |sum, r| sum.saturating_add(r.size_bytes));
    let lost = s.regions.iter().filter(|r| r.lost.is_some()).count();
    // Degraded is a state (design.md §1b): serving, with fewer replicas than
    // asked for or one still being made.
    let degraded = s
        .regions
        .iter()
        .filter(|r| r.lost.is_none() && r.usable() && !r.whole())
        .count();
    let mut region_summary = format!("{} in total, {replicas} replicas", text::bytes(bytes));
    if degraded > 0 {
        region_summary.push_str(&format!(", {degraded} degraded (fewer replicas than asked)"));
    }
    if lost > 0 {
        region_summary.push_str(&format!(", {lost} LOST: kintsugi ctl region lost"));
    }
    section(
        &mut out,
        "regions",
        &s.regions,
        region_summary,
        "region list",
        regions,
    );
    let client_states = tally(s.clients.iter().map(|c| match c.state {
        ClientState::Live => "live".to_owned(),
        ClientState::Expired { .. } => "expired".to_owned(),
    }));
    section(
        &mut out,
        "clients",
        &s.clients,
        client_states,
        "client list",
        clients,
    );
    let index_states = tally(s.indexes.iter().map(|x| match x.state {
        IndexState::Ready => "ready".to_owned(),
        IndexState::Creating { .. } => "being created".to_owned(),
    }));
    section(
        &mut out,
        "indexes",
        &s.indexes,
        index_states,
        "index list",
        indexes,
    );
    // The page is printed with a newline of its own after it.
    out.truncate(out.trim_end().len());
    out
}

/// `ctl check`: each member's applied index and state digest.
pub fn check(rows: &[(MemberId, Result<StateDigest, String>)]) -> String {
    let mut t = table(&["member", "role", "applied", "epoch", "state hash"], &[0, 2, 3]);
    for (id, row) in rows {
        match row {
            Ok(d) => t.add_row(vec![
                id.to_string(),
                d.role.clone(),
                d.last_applied.map_or("-".to_owned(), |i| i.to_string()),
                d.epoch.to_string(),
                d.state_hash.to_string(),
            ]),
            Err(why) => t.add_row(vec![
                id.to_string(),
                "unreachable".to_owned(),
                String::new(),
                String::new(),
                why.clone(),
            ]),
        };
    }
    t.to_string()
}
