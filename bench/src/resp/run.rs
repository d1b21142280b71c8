//! Starts the targets, runs redis-benchmark against each in alternating
//! rounds, and collects requests per second.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::launch::{Launch, Process};

use super::plan::{RespPlan, Target};
use super::report::{RespReport, Sample};
use crate::error::{BenchError, Context, Result};

/// Longest wait for a target to serve.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A started target, stopped when dropped.
enum Server {
    Redis { _child: RedisServer },
    Gateway { _process: Process },
}

/// redis-server as a child, killed on drop.
struct RedisServer(Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the plan.
pub fn run(plan: &RespPlan) -> Result<RespReport> {
    for tool in ["redis-benchmark", "redis-server"] {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(BenchError::Msg(format!(
                "{tool} is not installed: apt-get install -y redis-tools redis-server"
            )));
        }
    }
    let mut servers = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for &t in &plan.targets {
        let (server, port) = start(plan, t).map_err(|e| e.context(format!("starting {}", t.name())))?;
        eprintln!("{} serves on 127.0.0.1:{port}", t.name());
        servers.insert(t, server);
        ports.insert(t, port);
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    for round in 0..plan.rounds {
        // Alternate: each round starts with the next target.
        let mut order = plan.targets.clone();
        let first = round as usize % order.len();
        order.rotate_left(first);
        for &t in &order {
            for &pipeline in &plan.pipelines {
                eprintln!(
                    "round {}/{}: {} -P {pipeline} ({:.0}s so far)",
                    round + 1,
                    plan.rounds,
                    t.name(),
                    started.elapsed().as_secs_f64()
                );
                let rows = benchmark(plan, ports[&t], pipeline)
                    .map_err(|e| e.context(format!("redis-benchmark against {}", t.name())))?;
                for (test, rps) in rows {
                    samples.push(Sample {
                        target: t,
                        test,
                        pipeline,
                        round,
                        requests_per_s: rps,
                    });
                }
            }
        }
    }
    let mut costs = BTreeMap::new();
    for (&t, &port) in &ports {
        if t.kind().is_some() {
            let info = info(port, "kintsugi").map_err(|e| e.context(format!("INFO of {}", t.name())))?;
            costs.insert(t, info);
        }
    }
    drop(servers);
    Ok(RespReport::new(plan.clone(), samples, costs))
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn start(plan: &RespPlan, target: Target) -> Result<(Server, u16)> {
    match target.kind() {
        None => {
            let port = free_port()?;
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot start redis-server")?;
            let server = RedisServer(child);
            let deadline = Instant::now() + START_TIMEOUT;
            while info(port, "server").is_err() {
                if Instant::now() > deadline {
                    return Err(BenchError::Msg(format!(
                        "redis-server did not serve on {port} within {START_TIMEOUT:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok((Server::Redis { _child: server }, port))
        }
        Some(kind) => {
            let mut p = Launch::new(&plan.exe, format!("gateway-{kind}"))
                .args([
                    "serve",
                    "--resp",
                    "127.0.0.1:0",
                    "--kind",
                    kind,
                    "--index",
                    "bench",
                ])
                .args(["--handles", &plan.handles.to_string()])
                .quiet()
                .spawn()
                .context("cannot start kintsugi serve")?;
            let addr = p
                .await_listening(START_TIMEOUT)
                .context("waiting for kintsugi serve")?;
            let port = addr
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| BenchError::Msg(format!("kintsugi serve said it listens on {addr:?}")))?;
            Ok((Server::Gateway { _process: p }, port))
        }
    }
}

/// One redis-benchmark run: test name → requests per second.
fn benchmark(plan: &RespPlan, port: u16, pipeline: u32) -> Result<Vec<(String, f64)>> {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--csv"])
        .args(["-t", &plan.tests.join(",")])
        .args(["-n", &plan.requests.to_string(), "-c", &plan.clients.to_string()])
        .args(["-P", &pipeline.to_string(), "-r", &plan.keyspace.to_string()])
        .stdin(Stdio::null())
        .output()
        .context("cannot run redis-benchmark")?;
    if !out.status.success() {
        return Err(BenchError::Msg(format!(
            "redis-benchmark failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rows = parse_csv(&text);
    if rows.len() != plan.tests.len() {
        return Err(BenchError::Msg(format!(
            "redis-benchmark printed {} rows for {} tests: {text}",
            rows.len(),
            plan.tests.len()
        )));
    }
    Ok(rows)
}

/// The rows of redis-benchmark's `--csv` output: test name and requests
/// per second (its first two columns; the header and anything unparsable
/// left out).
pub fn parse_csv(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let mut cells = l.split(',').map(|c| c.trim_matches('"'));
            Some((cells.next()?.to_owned(), cells.next()?.parse().ok()?))
        })
        .collect()
}

/// INFO `section` of the server on `port`, as `field → value`.
fn info(port: u16, section: &str) -> Result<BTreeMap<String, String>> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("INFO {section}\r\nQUIT\r\n").as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if !text.starts_with('$') {
        return Err(BenchError::Msg(format!("INFO answered {text:?}")));
    }
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}
