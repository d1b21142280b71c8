//! `--metrics-listen ADDR`: a listener of its own (as etcd's
//! `--listen-metrics-urls`) beside a daemon's, serving Prometheus
//! `GET /metrics` and an unauthenticated `GET /healthz`.
//!
//! The libraries record through the `metrics` facade; this module installs
//! the one Prometheus recorder of the process (idempotent: members of one
//! test process share it, their series told apart by `member`), describes
//! every crate's metrics, and renders them on each scrape. Requests carry
//! no body that is read, and the answers are small, so the listener costs
//! little whoever reaches it.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use anyhow::Context;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use control_plane::member::Member;
use fabric::metrics::MetricDef;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use openraft::ServerState;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Upper bounds of the buckets of every `_seconds` histogram: 100 µs (a
/// local commit) to 10 s (past any commit timeout), so that Prometheus can
/// aggregate quantiles across members with `histogram_quantile`.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How often histogram samples are folded into their buckets between
/// scrapes, so that an unscraped process does not keep every sample.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The text exposition format's content type.
const EXPOSITION_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a daemon is fit to serve, as `/healthz` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// 200, with what was checked.
    Ok(String),
    /// 503, with the reason.
    Unavailable(String),
}

/// A daemon's health, judged on each `/healthz`.
pub type HealthCheck = Arc<dyn Fn() -> Health + Send + Sync>;
/// Sets a daemon's sampled gauges; run before each `/metrics` render.
pub type Sampler = Arc<dyn Fn() + Send + Sync>;

/// What the listener serves about one daemon.
#[derive(Clone)]
pub struct Probe {
    /// `memnode`, `control` or `gateway`: named in `/healthz`.
    pub daemon: &'static str,
    /// What `/healthz` answers.
    pub health: HealthCheck,
    /// Gauges read from the daemon at scrape time, if any.
    pub sample: Option<Sampler>,
}

/// Every metric the libraries define.
pub fn all_metrics() -> impl Iterator<Item = &'static MetricDef> {
    fabric::metrics::ALL
        .iter()
        .chain(control_plane::metrics::ALL)
        .chain(gateway::metrics::ALL)
        .chain(recovery::metrics::ALL)
}

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();
static INSTALLING: Mutex<()> = Mutex::new(());

/// Installs the process's Prometheus recorder, once, and describes every
/// metric; later calls return the same handle.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    if let Some(h) = RECORDER.get() {
        return Ok(h.clone());
    }
    let _one = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(h) = RECORDER.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
        .context("histogram buckets")?
        .install_recorder()
        .context("cannot install the Prometheus recorder (another recorder is installed)")?;
    all_metrics().for_each(MetricDef::describe);
    Ok(RECORDER.get_or_init(|| handle).clone())
}

/// With `addr`, installs the recorder and binds the metrics listener:
/// before the daemon starts, so that a port in use is reported first and
/// handles the daemon takes record from the start.
pub async fn listen(addr: Option<&str>) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    install()?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    Ok(Some(listener))
}

/// The metrics listener of a daemon, served in a task until
/// [`Serving::stop`] or drop.
#[derive(Debug)]
pub struct Serving {
    addr: std::net::SocketAddr,
    /// Taken by [`Serving::stop`].
    task: Option<JoinHandle<()>>,
}

impl Serving {
    /// Prints `metrics ADDR` on stdout: after the daemon's `listening`
    /// line, which launchers read first.
    pub fn announce(&self) -> anyhow::Result<()> {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", harness::ServerLine::Metrics(self.addr.to_string()))?;
        out.flush()?;
        Ok(())
    }

    /// Stops serving, without waiting (as dropping it does).
    pub fn abort(&self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }

    /// Stops serving and waits until the task, and what its probe holds,
    /// are gone.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Serves `probe` on `listener` in a task (announced separately: a daemon
/// may serve `/healthz` before it has its own address to print).
pub fn spawn(listener: TcpListener, probe: Probe) -> anyhow::Result<Serving> {
    let addr = listener.local_addr().context("cannot read the metrics address")?;
    tracing::info!(%addr, daemon = probe.daemon, "serving /metrics and /healthz");
    let task = tokio::spawn(async move {
        if let Err(e) = serve(listener, probe).await {
            tracing::error!(error = %e, "the metrics listener failed");
        }
    });
    Ok(Serving {
        addr,
        task: Some(task),
    })
}

/// [`spawn`] and [`Serving::announce`] for a control-plane member: healthy
/// while its Raft runs and it knows a leader.
pub fn spawn_for_member(listener: TcpListener, member: &Member) -> anyhow::Result<Serving> {
    let raft = member.raft().clone();
    let id = member.id();
    let health: HealthCheck = Arc::new(move || {
        let metrics = raft.metrics();
        let m = metrics.borrow();
        if let Err(fatal) = &m.running_state {
            return Health::Unavailable(format!("raft stopped: {fatal}"));
        }
        match (m.state, m.current_leader) {
            (ServerState::Shutdown, _) => Health::Unavailable("raft is shut down".into()),
            (_, None) => Health::Unavailable(format!(
                "member {id} knows no leader (term {}): an election is under way, it is cut off, or the \
                 cluster is not initialised",
                m.current_term
            )),
            (state, Some(leader)) => Health::Ok(format!(
                "member {id}: {state:?}, leader {leader}, term {}",
                m.current_term
            )),
        }
    });
    let serving = spawn(
        listener,
        Probe {
            daemon: "control",
            health,
            sample: None,
        },
    )?;
    serving.announce()?;
    Ok(serving)
}

/// Serves `GET /metrics` and `GET /healthz` on `listener`; any other path
/// is 404. Runs until the task is dropped.
pub async fn serve(listener: TcpListener, probe: Probe) -> std::io::Result<()> {
    let handle = install().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    let upkeep = handle.clone();
    let metrics_probe = probe.clone();
    let router = Router::new()
        .route(
            "/metrics",
            get(move || {
                let probe = metrics_probe.clone();
                let handle = handle.clone();
                async move { render(&handle, &probe) }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let probe = probe.clone();
                async move { healthz(&probe) }
            }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: GET /metrics or /healthz\n") });
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The control plane's listener limits (connections, head timeout and
    // budget, idle): a scraper port is as reachable as the API.
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let mut serving = control_plane::listener::serve(listener, router, stopped, "metrics");
    loop {
        tokio::select! {
            done = &mut serving => {
                return done.map_err(|e| std::io::Error::other(format!("the metrics listener stopped: {e}")));
            }
            _ = tick.tick() => upkeep.run_upkeep(),
        }
    }
}

fn render(handle: &PrometheusHandle, probe: &Probe) -> Response {
    if let Some(sample) = &probe.sample {
        sample();
    }
    ([(header::CONTENT_TYPE, EXPOSITION_CONTENT_TYPE)], handle.render()).into_response()
}

fn healthz(probe: &Probe) -> Response {
    let (status, body) = match (probe.health)() {
        Health::Ok(detail) => (
            StatusCode::OK,
            serde_json::json!({"status": "ok", "daemon": probe.daemon, "detail": detail}),
        ),
        Health::Unavailable(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "unavailable", "daemon": probe.daemon, "reason": reason}),
        ),
    };
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 request to `addr`; the status code and the whole
    /// answer (headers and body).
    async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("send");
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.expect("read");
        let code = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status line");
        (code, answer)
    }

    #[tokio::test]
    async fn serves_metrics_and_health_and_nothing_else() {
        install().expect("install");
        install().expect("a second install is the same recorder");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let healthy = Arc::new(AtomicBool::new(true));
        let h = healthy.clone();
        let sampled = Arc::new(AtomicBool::new(false));
        let s = sampled.clone();
        let probe = Probe {
            daemon: "test",
            health: Arc::new(move || {
                if h.load(Ordering::SeqCst) {
                    Health::Ok("fine".into())
                } else {
                    Health::Unavailable("lease lapsed".into())
                }
            }),
            sample: Some(Arc::new(move || s.store(true, Ordering::SeqCst))),
        };
        let server = tokio::spawn(serve(listener, probe));
        metrics::counter!(fabric::metrics::MEMNODE_BATCHES).increment(3);
        metrics::histogram!(control_plane::metrics::COMMIT_SECONDS, "member" => "7").record(0.002);

        let (code, text) = request(addr, "GET", "/metrics").await;
        assert_eq!(code, 200, "{text}");
        assert!(text.contains("content-type: text/plain; version=0.0.4"), "{text}");
        assert!(
            text.contains("# TYPE kintsugi_memnode_batches_total counter"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("kintsugi_memnode_batches_total ")),
            "{text}"
        );
        assert!(
            text.contains(r#"kintsugi_control_commit_seconds_bucket{member="7",le="0.0025"} 1"#),
            "a histogram with buckets, not a summary: {text}"
        );
        assert!(
            sampled.load(Ordering::SeqCst),
            "the sampler ran before the render"
        );

        let (code, text) = request(addr, "GET", "/healthz").await;
        assert_eq!(code, 200, "{text}");
        assert!(
            text.contains(r#""status":"ok""#) && text.contains(r#""daemon":"test""#),
            "{text}"
        );
        healthy.store(false, Ordering::SeqCst);
        let (code, text) = request(addr, "GET", "/healthz").await;
        assert_eq!(code, 503, "{text}");
        assert!(text.contains(r#""reason":"lease lapsed""#), "{text}");

        let (code, _) = request(addr, "GET", "/v1/status").await;
        assert_eq!(code, 404);
        let (code, _) = request(addr, "POST", "/metrics").await;
        assert_eq!(code, 405);
        server.abort();
    }

    /// The value of the series `series` (name and labels exactly as
    /// rendered) in a scrape.
    fn value(scrape: &str, series: &str) -> Option<f64> {
        scrape
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_reports_raft_and_is_healthy_once_it_knows_a_leader() {
        use control_plane::api::ControlClient;
        use control_plane::config::{Role, Settings, Token};
        use control_plane::member::MemberOptions;
        use control_plane::network::{ClusterSecret, Partition};
        use control_plane::state::Command;

        const TOKEN: &str = "telemetry-test-token-0123456789";
        const WAIT: Duration = Duration::from_secs(60);
        install().expect("install");
        let dir = tempfile::tempdir().expect("dir");
        let settings = Settings::new(
            ClusterSecret::new("telemetry-test-secret-0123456789").expect("secret"),
            vec![Token {
                name: "tester".into(),
                token: TOKEN.into(),
                role: Role::Admin,
            }],
        )
        .expect("settings");
        let api = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let options = MemberOptions {
            id: 41,
            data_dir: dir.path().to_path_buf(),
            advertise: None,
            settings,
            partition: Partition::default(),
        };
        let member = Member::start(api, options).await.expect("member");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = spawn_for_member(listener, &member).expect("serve");

        let (code, text) = request(addr, "GET", "/healthz").await;
        assert_eq!(code, 503, "no leader before the cluster is formed: {text}");
        assert!(text.contains("knows no leader"), "{text}");

        let client =
            ControlClient::new(&member.local_addr().to_string(), Some(TOKEN.into())).expect("client");
        client.init(Vec::new()).await.expect("init");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (code, text) = request(addr, "GET", "/healthz").await;
            if code == 200 {
                assert!(text.contains("leader 41"), "{text}");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never healthy: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let register = Command::RegisterMemNode {
            endpoint: "127.0.0.1:1".into(),
            capacity_bytes: 1 << 20,
            image: None,
        };
        client.command(&register).await.expect("register");

        // The tables are sampled every STATE_SAMPLE_INTERVAL: wait for it.
        let deadline = tokio::time::Instant::now() + WAIT;
        let scrape = loop {
            let (code, scrape) = request(addr, "GET", "/metrics").await;
            assert_eq!(code, 200);
            if value(
                &scrape,
                r#"kintsugi_control_memnodes{member="41",state="joining"}"#,
            ) == Some(1.0)
            {
                break scrape;
            }
            assert!(tokio::time::Instant::now() < deadline, "never sampled: {scrape}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            value(&scrape, r#"kintsugi_raft_is_leader{member="41"}"#),
            Some(1.0),
            "{scrape}"
        );
        assert_eq!(
            value(&scrape, r#"kintsugi_raft_leader_id{member="41"}"#),
            Some(41.0)
        );
        assert_eq!(value(&scrape, r#"kintsugi_raft_voters{member="41"}"#), Some(1.0));
        assert!(value(&scrape, r#"kintsugi_raft_term{member="41"}"#) >= Some(1.0));
        let applied = value(&scrape, r#"kintsugi_raft_applied_index{member="41"}"#);
        assert!(
            applied >= Some(2.0),
            "the membership and the registration: {scrape}"
        );
        assert!(value(&scrape, r#"kintsugi_raft_commit_index{member="41"}"#) >= applied);
        // A joining node routes nothing yet: the epoch has not moved.
        assert_eq!(
            value(&scrape, r#"kintsugi_control_epoch{member="41"}"#),
            Some(0.0),
            "{scrape}"
        );
        assert_eq!(
            value(
                &scrape,
                r#"kintsugi_control_proposals_total{member="41",result="committed"}"#
            ),
            Some(1.0),
            "{scrape}"
        );
        assert_eq!(
            value(&scrape, r#"kintsugi_control_commit_seconds_count{member="41"}"#),
            Some(1.0)
        );
        served.stop().await;
        member.shutdown().await;
    }

    #[test]
    fn every_metric_is_valid_and_defined_once() {
        let all: Vec<MetricDef> = all_metrics().copied().collect();
        assert_eq!(fabric::metrics::check_table(&all), Ok(()));
    }
}
