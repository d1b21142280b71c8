//! An in-path proxy for tests of the data path: what a partition does to
//! a client's tcp links, as TCP sees it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// An in-path proxy that can hold what a client sends: the network of a
/// partition, as TCP sees it (the bytes wait, and flow when it heals).
pub struct HoldingProxy {
    /// Where clients connect instead of the node.
    pub addr: String,
    /// `true`: what clients send is held; `false`: it flows, the held
    /// bytes first.
    pub hold: watch::Sender<bool>,
    /// Bytes held so far.
    pub held: Arc<AtomicUsize>,
    /// The node's first answer after a release (`None`: it closed first).
    pub verdicts: mpsc::UnboundedReceiver<Option<Vec<u8>>>,
}

impl HoldingProxy {
    /// A proxy to the node at `upstream`, passing everything.
    pub async fn start(upstream: String) -> HoldingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (hold, holding) = watch::channel(false);
        let held = Arc::new(AtomicUsize::new(0));
        let (tx, verdicts) = mpsc::unbounded_channel();
        let counted = held.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let up = TcpStream::connect(&upstream).await.expect("upstream");
                tokio::spawn(relay(down, up, holding.clone(), counted.clone(), tx.clone()));
            }
        });
        HoldingProxy {
            addr,
            hold,
            held,
            verdicts,
        }
    }
}

async fn relay(
    down: TcpStream,
    up: TcpStream,
    mut holding: watch::Receiver<bool>,
    held: Arc<AtomicUsize>,
    verdicts: mpsc::UnboundedSender<Option<Vec<u8>>>,
) {
    let (mut down_r, mut down_w) = down.into_split();
    let (mut up_r, mut up_w) = up.into_split();
    let released = Arc::new(AtomicUsize::new(0));
    let seen = released.clone();
    // Node to client: forwarded as it comes; the first frame after a
    // release is the node's answer to what was held.
    tokio::spawn(async move {
        loop {
            let Ok(len) = up_r.read_u32_le().await else {
                if seen.load(Ordering::Acquire) > 0 {
                    let _ = verdicts.send(None);
                }
                return;
            };
            let mut body = vec![0; len as usize];
            if up_r.read_exact(&mut body).await.is_err() {
                return;
            }
            if seen.swap(0, Ordering::AcqRel) > 0 {
                let _ = verdicts.send(Some(body.clone()));
            }
            let mut frame = len.to_le_bytes().to_vec();
            frame.extend_from_slice(&body);
            let _ = down_w.write_all(&frame).await;
        }
    });
    let mut buf = vec![0u8; 64 << 10];
    let mut pending = Vec::new();
    loop {
        let n = tokio::select! {
            n = down_r.read(&mut buf) => n.unwrap_or(0),
            // Released: what was held goes on, as a healed network delivers it.
            _ = async { holding.wait_for(|h| !h).await.map(|_| ()) }, if !pending.is_empty() => {
                released.store(1, Ordering::Release);
                if up_w.write_all(&pending).await.is_err() {
                    return;
                }
                pending.clear();
                continue;
            }
        };
        if n == 0 {
            // The client went away; what is held stays until released.
            if !pending.is_empty() && holding.wait_for(|h| !h).await.is_ok() {
                released.store(1, Ordering::Release);
                let _ = up_w.write_all(&pending).await;
            }
            return;
        }
        let hold_now = *holding.borrow();
        if hold_now {
            pending.extend_from_slice(&buf[..n]);
            held.fetch_add(n, Ordering::AcqRel);
        } else if up_w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
