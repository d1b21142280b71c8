//! The HTTP listeners' limits: what a connection may cost a member (or a
//! daemon's metrics port) before and after it has said who it is.
//!
//! `axum::serve` has none: a socket that sends half a request line and
//! then nothing holds a task and a file descriptor for ever, and there is
//! no bound on how many do. Here every connection waits for a permit of
//! [`CONNECTIONS_MAX`] (over it, it is closed at once and counted), must
//! send a whole request head within [`HEADER_READ_TIMEOUT`] and in at most
//! [`HEADER_BYTES_MAX`] bytes (the bearer token is a header: this is the
//! pre-auth timeout and budget; a body is bounded by
//! `api::API_BODY_BYTES_MAX`), and a keep-alive connection idle as long is
//! closed (hyper arms the same timer while it waits for the next request
//! head). A long-poll (`GET /v1/map?wait=`) is a request in flight, not
//! idle.

use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

/// Connections served at once: far above members, memory nodes and client
/// processes (one pooled connection or a few each), far below the file
/// descriptors a process gets.
pub const CONNECTIONS_MAX: usize = 1024;
/// A request head (and so its token) must arrive within this; a keep-alive
/// connection idle this long is closed. Renewals come every third of a
/// lease, so a live client's connection is never idle that long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a request head may take in bytes: a token, a content type and
/// a few more headers fit many times over.
pub const HEADER_BYTES_MAX: usize = 64 << 10;
/// How long connections may finish their requests once the listener stops:
/// as long as a map long-poll, which returns at once when a member stops.
pub const DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` in plain HTTP/1.1 with the limits above,
/// until `stopped` turns true (then in-flight requests get [`DRAIN`]).
/// `what` names the listener in logs and in the refused-connections metric.
pub fn serve(
    listener: TcpListener,
    router: axum::Router,
    stopped: watch::Receiver<bool>,
    what: &'static str,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let permits = std::sync::Arc::new(Semaphore::new(CONNECTIONS_MAX));
        let mut connections = tokio::task::JoinSet::new();
        let mut on_stop = stopped.clone();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = async { drop(on_stop.wait_for(|&s| s).await) } => break,
            };
            // Reap finished connections so the set stays small.
            while connections.try_join_next().is_some() {}
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was taken: the listener itself goes on.
                    tracing::warn!(listener = what, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                crate::metrics::http_connection_refused(what);
                tracing::warn!(listener = what, %peer, "at {CONNECTIONS_MAX} connections: closing a new one");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let service = TowerToHyperService::new(router.clone());
            let mut on_stop = stopped.clone();
            connections.spawn(async move {
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .max_buf_size(HEADER_BYTES_MAX);
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(listener = what, %peer, error = %e, "connection ended");
                        }
                    }
                    () = async { drop(on_stop.wait_for(|&s| s).await) } => {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout(DRAIN, conn).await;
                    }
                }
                drop(permit);
            });
        }
        let _ = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    })
}
