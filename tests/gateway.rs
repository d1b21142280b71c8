//! `kintsugi serve`: the Redis-protocol gateway driven by clients no one
//! here wrote (redis-cli and redis-benchmark from Debian's redis-tools,
//! the `redis` crate), and a gateway `kill -9`ed under redis-benchmark's
//! load with the data checked through another gateway of the same index.
//!
//! Needs `redis-cli` and `redis-benchmark` on the PATH (`apt-get install
//! redis-tools`; `.ci/run` installs them).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::launch::{Launch, Process};
use harness::local::{LocalCluster, LocalClusterSpec};
use support::local::exe;

const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Fails the test, saying how to get them, when redis-tools is missing: a
/// test that skips itself would pass on a machine that checks nothing.
fn require_redis_tools() {
    for tool in ["redis-cli", "redis-benchmark"] {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "{tool} is not installed: apt-get install -y redis-tools (.ci/run installs it)"
        );
    }
}

/// A gateway process serving `args` on a free port; its port.
fn gateway(name: &str, args: &[&str]) -> (Process, u16) {
    let mut p = Launch::new(exe(), name)
        .args(["serve", "--resp", "127.0.0.1:0"])
        .args(args)
        .forward_stderr(format!("[{name}] "))
        .spawn()
        .unwrap();
    let addr = p.await_listening(START_TIMEOUT).unwrap();
    let port = addr.rsplit(':').next().unwrap().parse().unwrap();
    (p, port)
}

/// redis-cli's output (trimmed) for one command.
fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn connect(port: u16, token: Option<&str>) -> redis::Connection {
    let url = match token {
        Some(t) => format!("redis://:{t}@127.0.0.1:{port}/"),
        None => format!("redis://127.0.0.1:{port}/"),
    };
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn query<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<T> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

/// Every key matching `pattern`, by a full SCAN with `count` per call.
fn scan_all(con: &mut redis::Connection, pattern: &str, count: usize) -> Vec<String> {
    let mut cursor = "0".to_owned();
    let mut keys = Vec::new();
    loop {
        let (next, mut page): (String, Vec<String>) = query(
            con,
            &["SCAN", &cursor, "MATCH", pattern, "COUNT", &count.to_string()],
        )
        .unwrap();
        keys.append(&mut page);
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
}

/// The sum of the integer values of every key matching `pattern`.
fn sum_of(con: &mut redis::Connection, pattern: &str) -> i64 {
    let keys = scan_all(con, pattern, 100);
    keys.iter().map(|k| query::<i64>(con, &["GET", k]).unwrap()).sum()
}

/// redis-benchmark's CSV rows: test name → requests per second.
fn benchmark(port: u16, args: &[&str]) -> BTreeMap<String, f64> {
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "--csv"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "redis-benchmark {args:?}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: BTreeMap<String, f64> = bench::resp::run::parse_csv(&text).into_iter().collect();
    assert!(!rows.is_empty(), "no rows in redis-benchmark's output: {text}");
    rows
}

/// Sends raw bytes, returns what comes back until the gateway closes the
/// connection (or `deadline`).
fn raw(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // A write into a closed connection fails: what was read before counts.
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// Before AUTH a connection may send a few KiB, not the 512 KiB requests
/// an authenticated one may: 10,000 unauthenticated connections cannot
/// pin gigabytes.
#[test]
fn a_connection_that_sends_too_much_before_auth_is_closed_with_the_reason() {
    let (_g, port) = gateway("serve", &["--handles", "1", "--auth"]);
    let value = "v".repeat(8 * 1024);
    let set = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n{value}\r\n", value.len());
    let out = String::from_utf8_lossy(&raw(port, set.as_bytes())).into_owned();
    assert!(out.contains("too much sent before AUTH"), "{out:?}");
    // A small request before AUTH is answered as ever.
    let out = String::from_utf8_lossy(&raw(port, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nQUIT\r\n"))
        .into_owned();
    assert!(out.starts_with("-NOAUTH"), "{out:?}");
}

#[test]
fn redis_clients_on_an_embedded_btree_gateway() {
    redis_clients_on_an_embedded_gateway("btree");
}

#[test]
fn redis_clients_on_an_embedded_hash_gateway() {
    redis_clients_on_an_embedded_gateway("hash");
}

fn redis_clients_on_an_embedded_gateway(kind: &str) {
    require_redis_tools();
    let (_g, port) = gateway("serve", &["--handles", "4", "--kind", kind]);

    // redis-cli, RESP2.
    assert_eq!(cli(port, &["PING"]), "PONG");
    assert_eq!(cli(port, &["SET", "greeting", "hello"]), "OK");
    assert_eq!(cli(port, &["GET", "greeting"]), "hello");
    assert_eq!(cli(port, &["SET", "greeting", "again", "NX"]), "");
    assert_eq!(cli(port, &["SET", "absent", "x", "XX"]), "");
    assert_eq!(cli(port, &["GET", "absent"]), "");
    assert_eq!(cli(port, &["SET", "greeting", "hi", "XX"]), "OK");
    assert_eq!(cli(port, &["GET", "greeting"]), "hi");
    assert_eq!(
        cli(port, &["INCR", "greeting"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cli(port, &["GET"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert!(cli(port, &["FLUSHALL"]).starts_with("ERR unknown command 'FLUSHALL'"));
    assert!(cli(port, &["SET", "k", "v", "EX", "10"]).contains("no expiry"));
    assert_eq!(cli(port, &["CLIENT", "SETNAME", "tester"]), "OK");
    assert_eq!(cli(port, &["ECHO", "echo"]), "echo");
    assert!(cli(port, &["INFO", "kintsugi"]).contains("round_trips_per_op:"));
    assert_eq!(
        cli(port, &["COMMAND", "COUNT"]),
        gateway::command::TABLE.len().to_string()
    );
    // An oversized value, as `-x` sends it: refused, nothing written.
    let big = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c {} /dev/zero | tr '\\0' a | redis-cli -p {port} -x SET big",
            gateway::bucket::VALUE_BYTES_MAX + 1
        ))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&big.stdout).contains("larger than the limit"),
        "{big:?}"
    );
    assert_eq!(cli(port, &["EXISTS", "big"]), "0");
    // RESP3.
    let hello = cli(port, &["-3", "HELLO", "3"]);
    assert!(hello.contains("proto") && hello.contains('3'), "{hello}");
    assert_eq!(cli(port, &["-3", "GET", "greeting"]), "hi");

    // A Redis library.
    let mut con = connect(port, None);
    let name: Option<String> = query(&mut con, &["CLIENT", "GETNAME"]).unwrap();
    assert_eq!(name, None);
    let pairs: Vec<(String, String)> = (0..20).map(|i| (format!("m:{i}"), format!("v{i}"))).collect();
    let mut mset = redis::cmd("MSET");
    for (k, v) in &pairs {
        mset.arg(k).arg(v);
    }
    let () = mset.query(&mut con).unwrap();
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg("m:0")
        .arg("nope")
        .arg("m:19")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, vec![Some("v0".into()), None, Some("v19".into())]);
    assert_eq!(
        query::<i64>(&mut con, &["EXISTS", "m:1", "m:1", "nope"]).unwrap(),
        2
    );
    assert_eq!(query::<i64>(&mut con, &["DEL", "m:1", "m:2", "nope"]).unwrap(), 2);
    assert_eq!(query::<i64>(&mut con, &["INCRBY", "n", "40"]).unwrap(), 40);
    assert_eq!(query::<i64>(&mut con, &["DECRBY", "n", "-2"]).unwrap(), 42);
    let too_many: Vec<String> = (0..=gateway::keyspace::WRITE_KEYS_MAX)
        .map(|i| format!("t:{i}"))
        .collect();
    let mut c = redis::cmd("MSET");
    for k in &too_many {
        c.arg(k).arg("x");
    }
    let refused: redis::RedisResult<()> = c.query(&mut con);
    assert!(refused.unwrap_err().to_string().contains("keys in one command"));
    assert_eq!(
        query::<i64>(&mut con, &["EXISTS", "t:0"]).unwrap(),
        0,
        "a refused MSET wrote nothing"
    );

    // A value that outgrows its bucket's class, then shrinks: forwards.
    for len in [10usize, 2000, 20_000, 5] {
        let v = "x".repeat(len);
        let () = redis::cmd("SET").arg("grows").arg(&v).query(&mut con).unwrap();
        let back: String = query(&mut con, &["GET", "grows"]).unwrap();
        assert_eq!(back.len(), len);
    }

    // SCAN: every key once, MATCH filters, small COUNTs page.
    for i in 0..300 {
        let () = redis::cmd("SET")
            .arg(format!("scan:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let found: BTreeSet<String> = scan_all(&mut con, "scan:*", 7).into_iter().collect();
    let want: BTreeSet<String> = (0..300).map(|i| format!("scan:{i}")).collect();
    assert_eq!(found, want);
    let all = scan_all(&mut con, "*", 50);
    assert_eq!(
        all.len(),
        all.iter().collect::<BTreeSet<_>>().len(),
        "a key returned twice"
    );
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).unwrap(), all.len() as i64);

    // A pipeline: 1,000 commands in one write, answered in order.
    let mut pipe = redis::pipe();
    for i in 0..500 {
        pipe.cmd("SET")
            .arg(format!("p:{i}"))
            .arg(i)
            .cmd("INCR")
            .arg(format!("p:{i}"));
    }
    let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
    assert_eq!(replies.len(), 1000);
    for (i, r) in replies.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert_eq!(r, &redis::Value::Int((i / 2) as i64 + 1));
    }

    // redis-benchmark, pipelined: every INCR acknowledged is counted once.
    let rows = benchmark(
        port,
        &[
            "-t",
            "set,get,incr,mset",
            "-r",
            "1000",
            "-n",
            "4000",
            "-c",
            "10",
            "-P",
            "16",
        ],
    );
    for test in ["SET", "GET", "INCR", "MSET (10 keys)"] {
        assert!(
            rows.get(test).is_some_and(|&rps| rps > 0.0),
            "{test} missing: {rows:?}"
        );
    }
    assert_eq!(sum_of(&mut con, "counter:*"), 4000);

    // Hostile bytes: an error and a closed connection, and the gateway
    // serves the others.
    let reply = raw(port, b"*1\r\n$x\r\n");
    assert!(
        String::from_utf8_lossy(&reply).starts_with("-ERR Protocol error"),
        "{reply:?}"
    );
    let mut flood = b"*2\r\n$3\r\nGET\r\n$999999999\r\n".to_vec();
    flood.extend(std::iter::repeat_n(b'a', gateway::resp::REQUEST_BYTES_MAX + 1));
    let reply = raw(port, &flood);
    assert!(
        String::from_utf8_lossy(&reply).contains("request longer than"),
        "{reply:?}"
    );
    assert_eq!(cli(port, &["GET", "greeting"]), "hi");
    let quit = raw(port, b"PING\r\nQUIT\r\nPING\r\n");
    assert_eq!(quit, b"+PONG\r\n+OK\r\n");
}

/// A cluster of one member and one memory node on shm, replication 1,
/// client leases of 1 s.
fn small_cluster(dir: &Path) -> LocalCluster {
    let text = format!(
        "dir = {dir:?}\n[control]\nmembers = 1\n[memory]\nnodes = 1\ncapacity = \"1GiB\"\ntransport = \"shm\"\n\
         [indexes]\nreplicas = 1\n[timing]\nclient_lease = \"1s\"\n"
    );
    let spec = LocalClusterSpec::parse(&text, "test").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(LocalCluster::up(exe(), &spec, |_| {})).unwrap()
}

/// Kills the child when dropped.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// redis-benchmark's SET, INCR and MSET on 200 keys through `port`, 20
/// connections at `pipeline` deep, until it is dropped.
fn load(port: u16, token: &str, pipeline: u32) -> Background {
    let child = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-a",
            token,
            "-t",
            "set,incr,mset",
            "-r",
            "200",
        ])
        .args(["-n", "100000000", "-c", "20", "-P", &pipeline.to_string(), "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Background(child)
}

/// What a checked writer did: per counter, INCRs sent and acknowledged;
/// per MSET group, the last sequence number sent and acknowledged.
#[derive(Debug, Default)]
struct Ledger {
    incr_sent: BTreeMap<String, i64>,
    incr_acked: BTreeMap<String, i64>,
    group_sent: BTreeMap<usize, i64>,
    group_acked: BTreeMap<usize, i64>,
    acked: u64,
}

const GROUPS: usize = 4;
const GROUP_KEYS: usize = 10;

/// INCRs on 8 counters and MSETs of whole groups through `port` until an
/// error (the gateway's death) or `stop`.
fn checked_writer(run: u32, port: u16, token: String, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let mut con = connect(port, Some(&token));
    let mut seq = 0i64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let counter = format!("ctr{run}:{}", seq % 8);
        *ledger
            .lock()
            .unwrap()
            .incr_sent
            .entry(counter.clone())
            .or_default() += 1;
        if query::<i64>(&mut con, &["INCR", &counter]).is_err() {
            return;
        }
        {
            let mut l = ledger.lock().unwrap();
            *l.incr_acked.entry(counter).or_default() += 1;
            l.acked += 1;
        }
        let g = (seq as usize) % GROUPS;
        ledger.lock().unwrap().group_sent.insert(g, seq);
        let mut mset = redis::cmd("MSET");
        for k in 0..GROUP_KEYS {
            mset.arg(format!("grp{run}:{g}:{k}")).arg(seq);
        }
        if mset.query::<()>(&mut con).is_err() {
            return;
        }
        let mut l = ledger.lock().unwrap();
        l.group_acked.insert(g, seq);
        l.acked += 1;
    }
}

/// Checks what `ledger` says was acknowledged against what `port` serves
/// now, writes every key of redis-benchmark's keyspace and every counter
/// through it (meeting whatever locks a dead gateway left).
fn check_through(run: u32, port: u16, token: &str, ledger: &Ledger) {
    let mut con = connect(port, Some(token));
    for (counter, &sent) in &ledger.incr_sent {
        let acked = ledger.incr_acked.get(counter).copied().unwrap_or(0);
        let now: Option<i64> = query(&mut con, &["GET", counter]).unwrap();
        let now = now.unwrap_or(0);
        assert!(
            acked <= now && now <= sent,
            "{counter}: {now}, acknowledged {acked}, sent {sent}"
        );
    }
    for g in 0..GROUPS {
        let mut mget = redis::cmd("MGET");
        for k in 0..GROUP_KEYS {
            mget.arg(format!("grp{run}:{g}:{k}"));
        }
        let values: Vec<Option<i64>> = mget.query(&mut con).unwrap();
        let first = values[0];
        assert!(
            values.iter().all(|v| *v == first),
            "group {g} is torn: {values:?}"
        );
        let acked = ledger.group_acked.get(&g).copied();
        let sent = ledger.group_sent.get(&g).copied();
        match (first, acked) {
            (None, Some(a)) => panic!("group {g} acknowledged at {a} is gone"),
            (Some(v), Some(a)) => assert!(
                a <= v && Some(v) <= sent,
                "group {g}: {v}, acknowledged {a}, sent {sent:?}"
            ),
            _ => {}
        }
    }
    // Every key is writable again: a lock the dead gateway held is
    // repaired by the write that meets it.
    for i in 0..200 {
        let key = format!("key:{i:012}");
        let () = redis::cmd("SET").arg(&key).arg("after").query(&mut con).unwrap();
    }
    for c in 0..8 {
        let _: i64 = query(&mut con, &["INCR", &format!("ctr{run}:{c}")]).unwrap();
        let _: i64 = query(&mut con, &["DECR", &format!("ctr{run}:{c}")]).unwrap();
    }
    let all = scan_all(&mut con, "*", 100);
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).unwrap(), all.len() as i64);
}

/// Waits until the control plane no longer holds client `name` live.
fn await_expired(file: &harness::local::ClusterFile, name: &str) {
    let members = kintsugi::cluster::Members::new(&file.control, &file.token).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let clients = runtime
            .block_on(members.call("listing clients", |c| async move { c.clients().await }))
            .unwrap();
        let live = clients
            .iter()
            .any(|c| c.name == name && c.state == kintsugi::control_plane::state::ClientState::Live);
        if !live {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} is still live a minute after its death"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `what` until it holds, at most a minute.
fn await_that(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !holds() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_gateway_killed_under_load_leaves_nothing_another_cannot_repair() {
    require_redis_tools();
    let dir = tempfile::tempdir().unwrap();
    let cluster = small_cluster(dir.path());
    let file = cluster.file.clone();
    let cdir = dir.path().to_str().unwrap().to_owned();
    let token = file.client_token.clone();

    // Two gateways of one index; AUTH with the cluster's tokens.
    let (mut a, port_a) = gateway("gw-a", &["--dir", &cdir, "--index", "shared", "--name", "gw-a"]);
    let (_b, port_b) = gateway("gw-b", &["--dir", &cdir, "--index", "shared", "--name", "gw-b"]);
    assert_eq!(cli(port_b, &["GET", "k"]), "NOAUTH Authentication required.");
    assert!(cli(port_b, &["AUTH", "not-a-token"]).starts_with("WRONGPASS"));
    assert_eq!(cli(port_b, &["-a", &token, "--no-auth-warning", "PING"]), "PONG");
    assert_eq!(
        cli(
            port_b,
            &["-a", &file.token, "--no-auth-warning", "SET", "admin", "1"]
        ),
        "OK"
    );

    // redis-benchmark's load and a checked writer on A; A killed -9 once
    // both are under way.
    let bench = load(port_a, &token, 4);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ledger, stop, token) = (ledger.clone(), stop.clone(), token.clone());
        std::thread::spawn(move || checked_writer(1, port_a, token, ledger, stop))
    };
    let mut watch = connect(port_a, Some(&token));
    await_that("load on gateway A", || {
        let info: String = query(&mut watch, &["INFO", "stats"]).unwrap_or_default();
        let commands = info
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        commands > 5000 && ledger.lock().unwrap().acked > 200
    });
    a.kill().unwrap();
    writer.join().unwrap();
    drop(bench);
    await_expired(&file, "gw-a");
    check_through(1, port_b, &token, &ledger.lock().unwrap());

    // A gateway that dies right after taking a lock, mid-write, under the
    // same load: the survivor's writes meet and repair what it left.
    let (mut c, port_c) = gateway(
        "gw-c",
        &[
            "--dir",
            &cdir,
            "--index",
            "shared",
            "--name",
            "gw-c",
            "--die-after",
            "300ms",
        ],
    );
    let _bench = load(port_c, &token, 1);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let writer = {
        let (ledger, stop, token) = (ledger.clone(), stop.clone(), token.clone());
        std::thread::spawn(move || checked_writer(2, port_c, token, ledger, stop))
    };
    let status = c.wait().unwrap();
    assert!(!status.success(), "gw-c was to die by SIGKILL: {status:?}");
    writer.join().unwrap();
    await_expired(&file, "gw-c");
    check_through(2, port_b, &token, &ledger.lock().unwrap());
    let info = cli(port_b, &["-a", &token, "--no-auth-warning", "INFO", "kintsugi"]);
    eprintln!("survivor's counters:\n{info}");
    // The gateways stop before the cluster (declared first, dropped last).
}

/// A gateway paused past its lease (its client expired meanwhile) joins
/// again as a new client and serves what it served before; once its control
/// plane is gone for good it exits with the reason instead of logging for
/// ever.
#[test]
fn a_gateway_that_lost_its_lease_joins_again_and_exits_once_the_control_plane_is_gone() {
    require_redis_tools();
    let dir = tempfile::tempdir().unwrap();
    let cluster = small_cluster(dir.path());
    let cdir = dir.path().to_str().unwrap().to_owned();
    let name = "gw-rejoin";
    let (mut g, port) = gateway(
        name,
        &[
            "--dir",
            &cdir,
            "--index",
            "rejoin",
            "--name",
            name,
            "--no-auth",
            "--rejoin-timeout",
            "3s",
        ],
    );
    assert_eq!(cli(port, &["SET", "before", "1"]), "OK");
    g.signal(nix::sys::signal::Signal::SIGSTOP).unwrap();
    await_expired(&cluster.file, name);
    g.signal(nix::sys::signal::Signal::SIGCONT).unwrap();
    await_that("the gateway serves again as a new client", || {
        cli(port, &["SET", "after", "2"]) == "OK"
    });
    assert_eq!(cli(port, &["GET", "before"]), "1");
    assert_eq!(cli(port, &["PING"]), "PONG");
    // The control plane and the memory node go away for good.
    drop(cluster);
    // (Within its rejoin timeout of 3 s after two leases of silence; the
    // bound only turns a gateway that never exits into a failure.)
    await_that("the gateway gives up and exits", || !g.alive());
}

/// `serve --tls-cert --tls-key`: RESP over TLS (what `redis-cli --tls
/// --cacert` speaks) is served; a plain connection to that port gets no
/// reply, only a close.
#[test]
fn a_gateway_with_tls_serves_resp_over_tls_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("gw.pem"), dir.path().join("gw-key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let (_g, port) = gateway(
        "serve-tls",
        &[
            "--handles",
            "1",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut s = rustls::StreamOwned::new(tls, tcp);
    s.write_all(
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nQUIT\r\n",
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(out.starts_with("+OK\r\n$2\r\nv1\r\n"), "{out:?}");
    // Plain RESP to a TLS port: not a handshake; closed, nothing served.
    let plain = String::from_utf8_lossy(&raw(port, b"*1\r\n$4\r\nPING\r\n")).into_owned();
    assert!(!plain.contains("PONG"), "{plain:?}");
}
