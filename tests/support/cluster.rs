//! Helpers for tests of a local cluster driven through the client library:
//! polling for a condition, and a checkable YCSB-A load on its own task.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kintsugi::cluster::load::{LoadReport, LoadSpec};
use kintsugi::cluster::Membership;
use kintsugi::Cluster;

/// Polls `f` until it is `Some`, for at most `within`.
pub async fn eventually<T>(what: &str, within: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `cluster::load::run` on a task of its own, with its counter of
/// completed operations.
pub struct RunningLoad {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    /// The load's error, once it ended with one.
    failed: Arc<std::sync::Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<Result<LoadReport, kintsugi::ClusterError>>,
}

impl RunningLoad {
    /// Starts `spec` on `cluster`.
    pub fn start(cluster: &Arc<Cluster>, spec: &LoadSpec) -> RunningLoad {
        Self::start_on(Arc::new(Membership::of(cluster.clone())), spec)
    }

    /// Starts `spec` on the client `membership` holds, and on the next one
    /// when it joins again.
    pub fn start_on(membership: Arc<Membership>, spec: &LoadSpec) -> RunningLoad {
        let (stop, ops) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let failed = Arc::new(std::sync::Mutex::new(None));
        let task = {
            let (spec, stop, ops) = (spec.clone(), stop.clone(), ops.clone());
            let failed = failed.clone();
            tokio::spawn(async move {
                let run = kintsugi::cluster::load::run(membership, &spec, stop, ops).await;
                if let Err(e) = &run {
                    *failed.lock().unwrap() = Some(e.to_string());
                }
                run
            })
        };
        RunningLoad {
            stop,
            ops,
            failed,
            task,
        }
    }

    /// Waits (up to a minute) until `n` operations have completed in all.
    /// A load that ended meanwhile (an operation failed) fails the wait at
    /// once, with the load's own error: it will never get there.
    pub async fn beyond(&self, n: u64) {
        eventually("the load to go on", Duration::from_secs(60), async || {
            if let Some(e) = self.failed.lock().unwrap().as_ref() {
                let done = self.ops.load(Ordering::Relaxed);
                panic!("the load failed after {done} of {n} operations: {e}");
            }
            (self.ops.load(Ordering::Relaxed) >= n).then_some(())
        })
        .await
    }

    /// Waits until `n` more operations have completed.
    pub async fn more(&self, n: u64) {
        self.beyond(self.ops.load(Ordering::Relaxed) + n).await
    }

    /// Stops the load and returns its report.
    pub async fn stop(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap().unwrap()
    }
}
