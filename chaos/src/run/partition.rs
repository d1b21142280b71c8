//! Network partitions for local-cluster runs, as in-path TCP proxies.
//!
//! Each link a partition may cut (a memory node's, or a client session's,
//! traffic to one control-plane member) goes through a [`Link`]: a proxy
//! on loopback that forwards bytes both ways while healed. Cut, it forwards
//! nothing and closes nothing: bytes sent meanwhile wait in the proxy
//! (and, once its buffer is full, in the kernel's), new connections are
//! accepted and held, and all of it flows again when the link heals. That
//! is what a partition looks like to TCP, which retransmits through one:
//! requests time out at the application, not with a reset.
//!
//! Why proxies and not network namespaces with veth pairs: every process
//! of a run talks on 127.0.0.1 today, and a proxy cuts exactly one
//! process's traffic to exactly one member without moving the others into
//! namespaces of their own, needs no root, no `ip` or `iptables` in CI, and
//! leaves nothing behind on the host when the run dies. The data path goes
//! through them too where a fault asks for it (`partition-data`,
//! `late-delivery`): a client session reaches each memory node through a
//! link of its own (`cluster::ClusterOptions::data_path_via`). What it
//! cannot cut is Raft between members.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes a proxy reads from one side before it writes them to the other.
const PROXY_READ_BYTES: usize = 64 << 10;

/// One proxied link: `addr` forwards to the upstream while healed.
#[derive(Debug)]
pub struct Link {
    /// Where the proxy listens (`127.0.0.1:port`): what the cut process is
    /// told the member's address is.
    pub addr: String,
    flow: watch::Sender<Flow>,
    /// The member's own address; moved by [`Link::retarget`].
    upstream: watch::Sender<String>,
    /// Bytes read from the cut-off side while cut: what the network held
    /// and delivered (or will deliver) at the heal.
    held: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    /// Starts a proxy to `upstream` (`host:port`), healed. Within a tokio
    /// runtime; not async, so that a synchronous hook can start one.
    pub fn start(upstream: String) -> std::io::Result<Link> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?.to_string();
        let (flow, watch) = watch::channel(Flow::Open);
        let (upstream, target) = watch::channel(upstream);
        let held = Arc::new(AtomicU64::new(0));
        let counted = held.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((down, _)) = listener.accept().await else {
                    continue;
                };
                let (mut target, watch, counted) = (target.clone(), watch.clone(), counted.clone());
                tokio::spawn(async move {
                    let _ = forward(down, &mut target, watch, counted).await;
                });
            }
        });
        Ok(Link {
            addr,
            flow,
            upstream,
            held,
            task,
        })
    }

    /// Points the link at another member address (a control plane
    /// restored from a snapshot in place of the old one): connections open
    /// now are closed, new ones go there. What a process configured with
    /// a DNS name or a virtual address sees when the name moves.
    pub fn retarget(&self, upstream: String) {
        self.upstream.send_replace(upstream);
    }

    /// Cuts the link (`true`) or heals it (`false`).
    pub fn set_cut(&self, cut: bool) {
        self.flow.send_replace(if cut { Flow::Cut } else { Flow::Open });
    }

    /// Holds what the cut-off side sends (`true`), or delivers it and
    /// opens the link (`false`); see [`Flow::Hold`].
    pub fn set_hold(&self, hold: bool) {
        self.flow.send_replace(if hold { Flow::Hold } else { Flow::Open });
    }

    /// Bytes the cut-off side sent while the link was cut, so far.
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a link lets through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flow {
    /// Both ways.
    #[default]
    Open,
    /// Answers flow back; what the cut-off side sends is held, and
    /// delivered when the link opens: a one-way delay, the `late-delivery`
    /// hold, in which every request a client sends is kept (a cut both
    /// ways may keep only an answer, the client then waiting on it and
    /// sending nothing).
    Hold,
    /// Nothing either way: a partition.
    Cut,
}

impl Flow {
    fn passes(self, from_cut_off_side: bool) -> bool {
        match self {
            Flow::Open => true,
            Flow::Hold => !from_cut_off_side,
            Flow::Cut => false,
        }
    }
}

/// Waits while the link keeps bytes going this way.
async fn healed(watch: &mut watch::Receiver<Flow>, from_cut_off_side: bool) -> std::io::Result<()> {
    watch
        .wait_for(|f| f.passes(from_cut_off_side))
        .await
        .map(|_| ())
        .map_err(|_| std::io::Error::other("the link is gone"))
}

async fn forward(
    down: TcpStream,
    target: &mut watch::Receiver<String>,
    mut watch: watch::Receiver<Flow>,
    held: Arc<AtomicU64>,
) -> std::io::Result<()> {
    // A connection made while cut is held until the link heals.
    healed(&mut watch, false).await?;
    let upstream = target.borrow_and_update().clone();
    let up = TcpStream::connect(&upstream).await?;
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let (down_r, down_w) = down.into_split();
    let (up_r, up_w) = up.into_split();
    let there = pump(down_r, up_w, watch.clone(), Some(held));
    let back = pump(up_r, down_w, watch, None);
    // Either side closing ends both: the other's half is dropped; so does
    // a retarget.
    tokio::select! {
        r = there => r,
        r = back => r,
        _ = target.changed() => Ok(()),
    }
}

/// Copies `from` to `to`, holding each chunk while the link is cut (and
/// counting what it held in `held`).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut watch: watch::Receiver<Flow>,
    held: Option<Arc<AtomicU64>>,
) -> std::io::Result<()> {
    let from_cut_off_side = held.is_some();
    let mut buf = vec![0u8; PROXY_READ_BYTES];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        if let Some(held) = held
            .as_ref()
            .filter(|_| !watch.borrow().passes(from_cut_off_side))
        {
            held.fetch_add(n as u64, Ordering::Relaxed);
        }
        healed(&mut watch, from_cut_off_side).await?;
        to.write_all(&buf[..n]).await?;
    }
}

/// The links of one process to every member, in member order.
#[derive(Debug)]
pub struct Links(pub Vec<Link>);

impl Links {
    /// Proxies to each of `members`.
    pub fn start(members: &[String]) -> std::io::Result<Links> {
        let mut links = Vec::with_capacity(members.len());
        for m in members {
            links.push(Link::start(m.clone())?);
        }
        Ok(Links(links))
    }

    /// The proxies' addresses: the member list the process is given.
    pub fn addrs(&self) -> Vec<String> {
        self.0.iter().map(|l| l.addr.clone()).collect()
    }

    /// Points link `i` at `members[i]` ([`Link::retarget`]).
    pub fn retarget(&self, members: &[String]) {
        for (l, m) in self.0.iter().zip(members) {
            l.retarget(m.clone());
        }
    }

    /// Bytes held by every link while cut, so far.
    pub fn held_bytes(&self) -> u64 {
        self.0.iter().map(Link::held_bytes).sum()
    }

    /// Holds (or delivers) what goes through the links `which` (0-based;
    /// empty: all) from the cut-off side ([`Flow::Hold`]).
    pub fn set_hold(&self, which: &[usize], hold: bool) {
        for (i, l) in self.0.iter().enumerate() {
            if which.is_empty() || which.contains(&i) {
                l.set_hold(hold);
            }
        }
    }

    /// Cuts (or heals) the links to the members `which` (0-based; empty:
    /// all).
    pub fn set_cut(&self, which: &[usize], cut: bool) {
        for (i, l) in self.0.iter().enumerate() {
            if which.is_empty() || which.contains(&i) {
                l.set_cut(cut);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server: what the proxy forwards to.
    async fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, byte: u8) -> u8 {
        s.write_all(&[byte]).await.unwrap();
        let mut b = [0u8];
        s.read_exact(&mut b).await.unwrap();
        b[0]
    }

    #[tokio::test]
    async fn a_cut_link_holds_bytes_and_new_connections_until_it_heals() {
        let link = Link::start(echo().await).unwrap();
        let mut s = TcpStream::connect(&link.addr).await.unwrap();
        assert_eq!(round_trip(&mut s, 7).await, 7);

        link.set_cut(true);
        s.write_all(&[8]).await.unwrap();
        let mut held = TcpStream::connect(&link.addr).await.unwrap();
        held.write_all(&[9]).await.unwrap();
        // Nothing comes back while cut: a read that completes would be a
        // forwarded byte. Polled once after the runtime ran every task
        // that was ready (the proxy's included), not timed.
        let mut b = [0u8];
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
        let nothing = futures_poll_once(s.read(&mut b)).await;
        assert!(nothing.is_none(), "a byte crossed a cut link");
        assert_eq!(link.held_bytes(), 1, "the byte sent while cut is held");

        link.set_cut(false);
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(b[0], 8, "the byte sent while cut arrives after the heal");
        held.read_exact(&mut b).await.unwrap();
        assert_eq!(b[0], 9, "a connection made while cut is forwarded after the heal");
        assert_eq!(round_trip(&mut s, 10).await, 10);
    }

    /// An upstream that answers each byte with its value plus one, and
    /// says on `seen` each byte it got.
    async fn counter() -> (String, tokio::sync::mpsc::UnboundedReceiver<u8>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (tx, seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut b = [0u8];
                    while s.read_exact(&mut b).await.is_ok() {
                        let _ = tx.send(b[0]);
                        let _ = s.write_all(&[b[0] + 1]).await;
                    }
                });
            }
        });
        (addr, seen)
    }

    #[tokio::test]
    async fn a_held_link_keeps_what_the_cut_off_side_sends_and_lets_answers_through() {
        let (upstream, mut seen) = counter().await;
        let link = Link::start(upstream).unwrap();
        let mut s = TcpStream::connect(&link.addr).await.unwrap();
        s.write_all(&[1]).await.unwrap();
        assert_eq!(seen.recv().await, Some(1));
        // Sent, not yet answered: the answer still comes through the hold.
        link.set_hold(true);
        let mut b = [0u8];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(b[0], 2, "an answer crosses a held link");
        s.write_all(&[5]).await.unwrap();
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
        assert!(seen.try_recv().is_err(), "a request crossed a held link");
        assert_eq!(link.held_bytes(), 1);
        link.set_hold(false);
        assert_eq!(seen.recv().await, Some(5), "the held request is delivered");
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(b[0], 6);
    }

    /// Polls `f` once: `Some` if it was ready.
    async fn futures_poll_once<F: std::future::Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }
}
