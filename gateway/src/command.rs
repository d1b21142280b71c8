//! Requests parsed into commands: the command table (names, arities, key
//! positions: what `COMMAND` reports and what every arity check reads) and
//! each command's arguments, with Redis's own error texts.

use bytes::Bytes;

use crate::keyspace::Condition;
use crate::resp::Reply;

/// One entry of the command table: as `COMMAND INFO` describes a command.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis's arity: `n` exactly n arguments (the name included), `-n` at
    /// least n.
    pub arity: i64,
    /// Flags, as Redis names them.
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i64,
    /// Last key argument (-1: the last argument).
    pub last_key: i64,
    /// Step between keys.
    pub step: i64,
}

const fn spec(name: &'static str, arity: i64, flags: &'static [&'static str], keys: (i64, i64, i64)) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const NONE: (i64, i64, i64) = (0, 0, 0);

/// Every command the gateway serves.
pub const TABLE: &[Spec] = &[
    spec("get", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("set", -3, &["write", "denyoom"], (1, 1, 1)),
    spec("del", -2, &["write"], (1, -1, 1)),
    spec("exists", -2, &["readonly", "fast"], (1, -1, 1)),
    spec("mget", -2, &["readonly", "fast"], (1, -1, 1)),
    spec("mset", -3, &["write", "denyoom"], (1, -1, 2)),
    spec("incr", 2, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("incrby", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("decr", 2, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("decrby", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("scan", -2, &["readonly"], NONE),
    spec("dbsize", 1, &["readonly"], NONE),
    spec("ping", -1, &["fast", "stale"], NONE),
    spec("echo", 2, &["fast"], NONE),
    spec("info", -1, &["stale"], NONE),
    spec("command", -1, &["stale"], NONE),
    spec("client", -2, &["stale"], NONE),
    spec("config", -2, &["admin", "stale"], NONE),
    spec("select", 2, &["fast", "stale"], NONE),
    spec("auth", -2, &["noauth", "fast", "stale"], NONE),
    spec("hello", -1, &["noauth", "fast", "stale"], NONE),
    spec("quit", -1, &["noauth", "fast", "stale"], NONE),
];

/// The table's entry for `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    TABLE
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// A parsed request.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `GET key`.
    Get(Bytes),
    /// `SET key value [NX|XX]`.
    Set {
        /// The key.
        key: Bytes,
        /// The value.
        value: Bytes,
        /// NX, XX or neither.
        condition: Condition,
    },
    /// `DEL key...`.
    Del(Vec<Bytes>),
    /// `EXISTS key...`.
    Exists(Vec<Bytes>),
    /// `MGET key...`.
    MGet(Vec<Bytes>),
    /// `MSET key value...`.
    MSet(Vec<(Bytes, Bytes)>),
    /// `INCR`, `INCRBY`, `DECR`, `DECRBY`: the key and what to add.
    IncrBy(Bytes, i64),
    /// `SCAN cursor [MATCH pattern] [COUNT n]`.
    Scan {
        /// Where to go on from (0: the start).
        cursor: u64,
        /// MATCH.
        pattern: Option<Bytes>,
        /// COUNT (default 10).
        count: usize,
    },
    /// `DBSIZE`.
    DbSize,
    /// `PING [message]`.
    Ping(Option<Bytes>),
    /// `ECHO message`.
    Echo(Bytes),
    /// `INFO [section]`.
    Info(Option<String>),
    /// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS`.
    Command(CommandQuery),
    /// `CLIENT SETNAME name`.
    ClientSetName(Bytes),
    /// `CLIENT GETNAME`.
    ClientGetName,
    /// `CLIENT ID`.
    ClientId,
    /// `CONFIG GET parameter...`: the few that tools ask for
    /// ([`config_get`]); nothing is settable.
    ConfigGet(Vec<Bytes>),
    /// `SELECT db`: only 0 exists.
    Select(i64),
    /// `AUTH [user] password`.
    Auth {
        /// The user (only `default` exists).
        user: Option<Bytes>,
        /// The password: a cluster token.
        password: Bytes,
    },
    /// `HELLO [protover [AUTH user password] [SETNAME name]]`.
    Hello {
        /// The protocol asked for.
        protover: Option<i64>,
        /// AUTH's user and password.
        auth: Option<(Bytes, Bytes)>,
        /// SETNAME's name.
        setname: Option<Bytes>,
    },
    /// `QUIT`.
    Quit,
}

/// What `COMMAND` was asked.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandQuery {
    /// Every command's info.
    All,
    /// How many commands.
    Count,
    /// The info of the named ones.
    Info(Vec<Bytes>),
    /// Docs: none are kept (an empty map; redis-cli then has no hints).
    Docs,
}

impl Command {
    /// Whether the command needs the index (and a handle from the pool).
    pub fn needs_index(&self) -> bool {
        matches!(
            self,
            Command::Get(_)
                | Command::Set { .. }
                | Command::Del(_)
                | Command::Exists(_)
                | Command::MGet(_)
                | Command::MSet(_)
                | Command::IncrBy(..)
                | Command::Scan { .. }
                | Command::DbSize
        )
    }

    /// Whether an unauthenticated connection may run it.
    pub fn allowed_before_auth(&self) -> bool {
        matches!(self, Command::Auth { .. } | Command::Hello { .. } | Command::Quit)
    }
}

/// Parses a request (`args[0]` the name); an error is the reply to send.
pub fn parse(args: &[Bytes]) -> Result<Command, Reply> {
    let Some(spec) = lookup(&args[0]) else {
        return Err(unknown(args));
    };
    let n = args.len() as i64;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return Err(Reply::err(format!(
            "wrong number of arguments for '{}' command",
            spec.name
        )));
    }
    let a = &args[1..];
    Ok(match spec.name {
        "get" => Command::Get(a[0].clone()),
        "set" => parse_set(a)?,
        "del" => Command::Del(a.to_vec()),
        "exists" => Command::Exists(a.to_vec()),
        "mget" => Command::MGet(a.to_vec()),
        "mset" => {
            if a.len() % 2 != 0 {
                return Err(Reply::err("wrong number of arguments for 'mset' command"));
            }
            Command::MSet(a.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect())
        }
        "incr" => Command::IncrBy(a[0].clone(), 1),
        "decr" => Command::IncrBy(a[0].clone(), -1),
        "incrby" => Command::IncrBy(a[0].clone(), int(&a[1])?),
        "decrby" => {
            let by = int(&a[1])?;
            Command::IncrBy(a[0].clone(), by.checked_neg().ok_or_else(not_integer)?)
        }
        "scan" => parse_scan(a)?,
        "dbsize" => Command::DbSize,
        "ping" => match a.len() {
            0 => Command::Ping(None),
            1 => Command::Ping(Some(a[0].clone())),
            _ => return Err(Reply::err("wrong number of arguments for 'ping' command")),
        },
        "echo" => Command::Echo(a[0].clone()),
        "info" => Command::Info(a.first().map(|s| String::from_utf8_lossy(s).to_lowercase())),
        "command" => Command::Command(match a.first().map(|s| s.to_ascii_lowercase()) {
            None => CommandQuery::All,
            Some(s) if s == b"count" => CommandQuery::Count,
            Some(s) if s == b"info" => CommandQuery::Info(a[1..].to_vec()),
            Some(s) if s == b"docs" => CommandQuery::Docs,
            Some(_) => return Err(subcommand(args)),
        }),
        "client" => match (a[0].to_ascii_lowercase().as_slice(), a.len()) {
            (b"setname", 2) => {
                if a[1].iter().any(|&b| b <= b' ' || b > b'~') {
                    return Err(Reply::err(
                        "Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                Command::ClientSetName(a[1].clone())
            }
            (b"getname", 1) => Command::ClientGetName,
            (b"id", 1) => Command::ClientId,
            _ => return Err(subcommand(args)),
        },
        "config" => match a[0].to_ascii_lowercase().as_slice() {
            b"get" if a.len() >= 2 => Command::ConfigGet(a[1..].to_vec()),
            _ => return Err(subcommand(args)),
        },
        "select" => Command::Select(int(&a[0])?),
        "auth" => match a.len() {
            1 => Command::Auth {
                user: None,
                password: a[0].clone(),
            },
            2 => Command::Auth {
                user: Some(a[0].clone()),
                password: a[1].clone(),
            },
            _ => return Err(Reply::err("syntax error")),
        },
        "hello" => parse_hello(a)?,
        "quit" => Command::Quit,
        other => unreachable!("{other} is in the table but not parsed"),
    })
}

fn parse_set(a: &[Bytes]) -> Result<Command, Reply> {
    let mut condition = Condition::Always;
    for opt in &a[2..] {
        let opt = opt.to_ascii_uppercase();
        condition = match (opt.as_slice(), condition) {
            (b"NX", Condition::Always | Condition::IfAbsent) => Condition::IfAbsent,
            (b"XX", Condition::Always | Condition::IfPresent) => Condition::IfPresent,
            (b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" | b"GET", _) => {
                return Err(Reply::err(format!(
                    "SET {} is not supported: kintsugi keys have no expiry",
                    String::from_utf8_lossy(&opt)
                )))
            }
            _ => return Err(Reply::err("syntax error")),
        };
    }
    Ok(Command::Set {
        key: a[0].clone(),
        value: a[1].clone(),
        condition,
    })
}

fn parse_scan(a: &[Bytes]) -> Result<Command, Reply> {
    let cursor = std::str::from_utf8(&a[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Reply::err("invalid cursor"))?;
    let (mut pattern, mut count) = (None, 10usize);
    let mut rest = a[1..].iter();
    while let Some(opt) = rest.next() {
        let value = rest.next().ok_or_else(|| Reply::err("syntax error"))?;
        match opt.to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(value.clone()),
            b"COUNT" => {
                let n = int(value)?;
                if n < 1 {
                    return Err(Reply::err("syntax error"));
                }
                count = usize::try_from(n).unwrap_or(usize::MAX);
            }
            b"TYPE" => {
                if !value.eq_ignore_ascii_case(b"string") {
                    // Every key is a string: another type matches nothing.
                    pattern = Some(Bytes::from_static(b"[]"));
                }
            }
            _ => return Err(Reply::err("syntax error")),
        }
    }
    Ok(Command::Scan {
        cursor,
        pattern,
        count,
    })
}

fn parse_hello(a: &[Bytes]) -> Result<Command, Reply> {
    let Some(first) = a.first() else {
        return Ok(Command::Hello {
            protover: None,
            auth: None,
            setname: None,
        });
    };
    let protover = std::str::from_utf8(first)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err("Protocol version is not an integer or out of range"))?;
    let (mut auth, mut setname) = (None, None);
    let mut i = 1;
    while i < a.len() {
        match a[i].to_ascii_uppercase().as_slice() {
            b"AUTH" if i + 2 < a.len() => {
                auth = Some((a[i + 1].clone(), a[i + 2].clone()));
                i += 3;
            }
            b"SETNAME" if i + 1 < a.len() => {
                setname = Some(a[i + 1].clone());
                i += 2;
            }
            _ => {
                return Err(Reply::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&a[i])
                )))
            }
        }
    }
    Ok(Command::Hello {
        protover: Some(protover),
        auth,
        setname,
    })
}

fn int(b: &Bytes) -> Result<i64, Reply> {
    crate::keyspace::parse_i64(b).ok_or_else(not_integer)
}

fn not_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

fn unknown(args: &[Bytes]) -> Reply {
    let shown: String = args[1..]
        .iter()
        .take(8)
        .map(|a| format!("'{}' ", String::from_utf8_lossy(&a[..a.len().min(64)])))
        .collect();
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {shown}",
        String::from_utf8_lossy(&args[0][..args[0].len().min(64)])
    ))
}

fn subcommand(args: &[Bytes]) -> Reply {
    Reply::err(format!(
        "unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(&args[1][..args[1].len().min(64)]),
        String::from_utf8_lossy(&args[0]).to_uppercase()
    ))
}

/// What `CONFIG GET` reports: what redis-benchmark and client libraries
/// read at start. No RDB snapshots and no append-only file: durability is
/// the memory nodes' replication, not the gateway's.
pub const CONFIG: &[(&str, &str)] = &[("save", ""), ("appendonly", "no"), ("databases", "1")];

/// `CONFIG GET`'s reply: the parameters that match any of `patterns`.
pub fn config_get(patterns: &[Bytes]) -> Reply {
    Reply::Map(
        CONFIG
            .iter()
            .filter(|(name, _)| {
                patterns
                    .iter()
                    .any(|p| crate::glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
            })
            .map(|(name, value)| (Reply::bulk(*name), Reply::bulk(*value)))
            .collect(),
    )
}

/// `COMMAND INFO`'s entry for `spec`.
pub fn info(spec: &Spec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Int(spec.arity),
        Reply::Array(
            spec.flags
                .iter()
                .map(|f| Reply::Simple((*f).to_owned()))
                .collect(),
        ),
        Reply::Int(spec.first_key),
        Reply::Int(spec.last_key),
        Reply::Int(spec.step),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    fn error_of(s: &str) -> String {
        match parse(&req(s)) {
            Err(Reply::Error(e)) => e,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn commands_parse() {
        assert_eq!(parse(&req("get k")), Ok(Command::Get("k".into())));
        assert_eq!(
            parse(&req("SET k v nx")),
            Ok(Command::Set {
                key: "k".into(),
                value: "v".into(),
                condition: Condition::IfAbsent
            })
        );
        assert_eq!(parse(&req("decrby k 5")), Ok(Command::IncrBy("k".into(), -5)));
        assert_eq!(
            parse(&req("mset a 1 b 2")),
            Ok(Command::MSet(vec![
                ("a".into(), "1".into()),
                ("b".into(), "2".into())
            ]))
        );
        assert_eq!(
            parse(&req("scan 17 MATCH key:* COUNT 100")),
            Ok(Command::Scan {
                cursor: 17,
                pattern: Some("key:*".into()),
                count: 100
            })
        );
        assert!(matches!(
            parse(&req("hello 3 AUTH default tok SETNAME me")),
            Ok(Command::Hello {
                protover: Some(3),
                auth: Some(_),
                setname: Some(_)
            })
        ));
    }

    #[test]
    fn errors_say_what_redis_says() {
        assert_eq!(error_of("get"), "ERR wrong number of arguments for 'get' command");
        assert_eq!(
            error_of("mset a 1 b"),
            "ERR wrong number of arguments for 'mset' command"
        );
        assert!(error_of("flushall now")
            .starts_with("ERR unknown command 'flushall', with args beginning with: 'now'"));
        assert_eq!(error_of("set k v nx xx"), "ERR syntax error");
        assert!(error_of("set k v ex 10").contains("no expiry"));
        assert_eq!(
            error_of("incrby k x"),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error_of("decrby k -9223372036854775808"),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(error_of("scan -1"), "ERR invalid cursor");
        assert_eq!(error_of("scan 0 COUNT 0"), "ERR syntax error");
        assert!(error_of("client kill x").starts_with("ERR unknown subcommand 'kill'"));
        assert!(error_of("client setname a\nb").contains("cannot contain spaces"));
    }

    #[test]
    fn the_table_is_consistent() {
        for s in TABLE {
            assert_eq!(s.name, s.name.to_lowercase());
            assert!(s.arity != 0);
            assert_eq!(TABLE.iter().filter(|t| t.name == s.name).count(), 1, "{}", s.name);
            // Every name in the table parses (with enough arguments), and
            // what runs before AUTH is what the table flags `noauth`.
            let mut args = vec![Bytes::from_static(s.name.as_bytes())];
            args.extend(std::iter::repeat_n(
                Bytes::from_static(b"1"),
                s.arity.unsigned_abs() as usize - 1,
            ));
            if let Ok(c) = parse(&args) {
                assert_eq!(c.allowed_before_auth(), s.flags.contains(&"noauth"), "{}", s.name);
            }
        }
    }
}
