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
//! idle. A member with `[tls]` is served by the same loop ([`serve_tls`]),
//! its handshake within the head timeout and inside the connection's permit.

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
    serve_with(listener, router, stopped, what, None)
}

/// [`serve`] over TLS (HTTP/1.1 inside): the same cap, and the handshake
/// within [`HEADER_READ_TIMEOUT`] in the connection's own task and permit,
/// so a client that connects and never shakes hands holds a slot no longer
/// than one that never sends its head.
pub fn serve_tls(
    listener: TcpListener,
    router: axum::Router,
    stopped: watch::Receiver<bool>,
    what: &'static str,
    tls: std::sync::Arc<rustls::ServerConfig>,
) -> JoinHandle<()> {
    serve_with(
        listener,
        router,
        stopped,
        what,
        Some(tokio_rustls::TlsAcceptor::from(tls)),
    )
}

fn serve_with(
    listener: TcpListener,
    router: axum::Router,
    stopped: watch::Receiver<bool>,
    what: &'static str,
    tls: Option<tokio_rustls::TlsAcceptor>,
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
            let on_stop = stopped.clone();
            let tls = tls.clone();
            connections.spawn(async move {
                match tls {
                    None => serve_connection(stream, service, on_stop, what, peer).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => serve_connection(stream, service, on_stop, what, peer).await,
                            Ok(Err(e)) => tracing::debug!(listener = what, %peer, error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!(listener = what, %peer, "no TLS handshake within the head timeout"),
                        }
                    }
                }
                drop(permit);
            });
        }
        let _ = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    })
}

/// One connection's requests, with the head timeout and budget, until it
/// ends or the listener stops (then [`DRAIN`]).
async fn serve_connection<S>(
    stream: S,
    service: TowerToHyperService<axum::Router>,
    mut on_stop: watch::Receiver<bool>,
    what: &'static str,
    peer: std::net::SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::tls::{ClientTls, ServerTls};

    /// Over TLS: a socket that connects and never shakes hands is closed
    /// within the head timeout (it held a permit, as a silent plain socket
    /// does), and a client that trusts the CA is served meanwhile.
    #[tokio::test]
    async fn a_tls_connection_that_never_shakes_hands_is_closed_and_others_are_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).expect("write");
        std::fs::write(&key_path, key.serialize_pem()).expect("write");
        let server = ServerTls::load_pair(&cert_path, &key_path).expect("server tls");
        let client = ClientTls::from_pem(cert.pem().as_bytes(), "cert.pem").expect("client tls");

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "served" }));
        let (stop, stopped) = watch::channel(false);
        let served = serve_tls(listener, router, stopped, "test", server.config());

        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&client.data_path_config()));
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let mut tls = connector.connect(name, tcp).await.expect("handshake");
        tls.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("served"),
            "{answer}"
        );

        let mut rest = Vec::new();
        let closed = tokio::time::timeout(HEADER_READ_TIMEOUT * 3, silent.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "a socket that never shakes hands is closed");
        stop.send_replace(true);
        served.await.expect("the listener stops");
    }
}
