//! INFO: Redis's sections that clients and tools read (server, clients,
//! stats, keyspace) and kintsugi's own: the index, the rTX counters and
//! the fabric's cost per operation.

use std::fmt::Write;
use std::time::Duration;

use crate::keyspace::Counters;
use crate::server::Settings;

/// The Redis version the gateway answers as: the command set and
/// replies follow Redis 7.0 (RESP3, HELLO, CLIENT, COMMAND DOCS).
pub const REDIS_VERSION: &str = "7.0.0";

/// What INFO reports, read at once.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// How the gateway serves.
    pub settings: Settings,
    /// Since it started.
    pub uptime: Duration,
    /// Connections open now.
    pub connected: u64,
    /// Connections accepted since it started.
    pub connections_received: u64,
    /// Connections refused (too many).
    pub connections_refused: u64,
    /// Requests parsed.
    pub commands: u64,
    /// Requests that ran on the index.
    pub index_commands: u64,
    /// Error replies.
    pub errors: u64,
    /// Writes whose outcome was unknown (cut off at their commit point).
    pub in_doubt: u64,
    /// Keyspaces (index handles, owner ids) in the pool.
    pub keyspaces: usize,
    /// Their counters, summed.
    pub counters: Counters,
}

const SECTIONS: &[&str] = &["server", "clients", "stats", "kintsugi"];

/// INFO's text for `section` (`None`, `all`, `default`, `everything`:
/// every section).
pub fn render(s: &Snapshot, section: Option<&str>) -> String {
    let all = matches!(section, None | Some("all" | "default" | "everything"));
    let mut out = String::new();
    for &name in SECTIONS {
        if !all && section != Some(name) {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        // Writing to a String cannot fail.
        let _ = match name {
            "server" => server(s, &mut out),
            "clients" => clients(s, &mut out),
            "stats" => stats(s, &mut out),
            _ => kintsugi(s, &mut out),
        };
    }
    out
}

fn server(s: &Snapshot, out: &mut String) -> std::fmt::Result {
    write!(
        out,
        "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\nkintsugi_version:{}\r\nprocess_id:{}\r\nuptime_in_seconds:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        s.uptime.as_secs()
    )
}

fn clients(s: &Snapshot, out: &mut String) -> std::fmt::Result {
    write!(
        out,
        "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n",
        s.connected,
        crate::server::CONNECTIONS_MAX
    )
}

fn stats(s: &Snapshot, out: &mut String) -> std::fmt::Result {
    write!(
        out,
        "# Stats\r\ntotal_connections_received:{}\r\nrejected_connections:{}\r\ntotal_commands_processed:{}\r\ntotal_error_replies:{}\r\n",
        s.connections_received, s.connections_refused, s.commands, s.errors
    )
}

fn kintsugi(s: &Snapshot, out: &mut String) -> std::fmt::Result {
    let c = &s.counters;
    let per_op = |n: u64| {
        if s.index_commands == 0 {
            0.0
        } else {
            n as f64 / s.index_commands as f64
        }
    };
    write!(
        out,
        "# Kintsugi\r\nindex:{}\r\nindex_kind:{}\r\nindex_variant:rtx\r\nkeyspaces:{}\r\nindex_commands:{}\r\n\
         rtx_commits:{}\r\nrtx_aborts:{}\r\nrtx_repairs:{}\r\nretries:{}\r\nwrites_in_doubt:{}\r\n\
         buckets_created:{}\r\nbuckets_grown:{}\r\nlock_free_reads:{}\r\nround_trips:{}\r\nverbs:{}\r\n\
         round_trips_per_op:{:.2}\r\nverbs_per_op:{:.2}\r\n",
        s.settings.index,
        s.settings.kind,
        s.keyspaces,
        s.index_commands,
        c.commits,
        c.aborts,
        c.repairs,
        c.retries,
        s.in_doubt,
        c.buckets_created,
        c.buckets_grown,
        c.lock_free_reads,
        c.round_trips,
        c.verbs,
        per_op(c.round_trips),
        per_op(c.verbs),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        Snapshot {
            settings: Settings {
                index: "kv".into(),
                kind: "btree".into(),
                require_auth: false,
            },
            uptime: Duration::from_secs(3),
            connected: 2,
            connections_received: 5,
            connections_refused: 0,
            commands: 10,
            index_commands: 4,
            errors: 1,
            in_doubt: 0,
            keyspaces: 8,
            counters: Counters {
                round_trips: 10,
                verbs: 22,
                repairs: 1,
                ..Counters::default()
            },
        }
    }

    #[test]
    fn sections() {
        let all = render(&snapshot(), None);
        for header in ["# Server", "# Clients", "# Stats", "# Kintsugi"] {
            assert!(all.contains(header), "{all}");
        }
        assert!(all.contains("redis_version:7.0.0\r\n"));
        assert!(all.contains("round_trips_per_op:2.50\r\n"));
        assert!(all.contains("rtx_repairs:1\r\n"));
        let one = render(&snapshot(), Some("kintsugi"));
        assert!(one.starts_with("# Kintsugi\r\n") && !one.contains("# Server"));
        assert_eq!(render(&snapshot(), Some("nosuch")), "");
    }
}
