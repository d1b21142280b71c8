//! Phase 2 for tcp: a bare tokio TCP echo moving the fabric's frame sizes.
//!
//! The server (its own multi-thread runtime, like the in-process memory
//! node) reads length-prefixed frames and answers each with a frame of the
//! fabric's response size whose first 8 body bytes repeat the request's (as
//! the memory node repeats the request id); like the memory node it buffers
//! answers and flushes only when no further request is buffered. Each client
//! thread has one connection and its own current-thread runtime, and keeps
//! `--outstanding` frames in flight with one writer and one reader joined in
//! a single task: no channels, no per-request wakeups. The writer stamps a
//! sampled frame with its send time; the reader times it when the echo comes
//! back and stops the run at the deadline.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::error::Context;
use fabric::wire::FRAME_BYTES_MAX;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

use super::measure::{self, on_threads, Run, WARMUP_ROUND_TRIPS};
use super::plan::Plan;

/// Socket buffer per direction, as the fabric's client and server use.
const IO_BUFFER_BYTES: usize = 64 * 1024;
/// Bytes of a frame's length prefix.
const PREFIX: usize = 4;
/// Body bytes that carry the send stamp (the fabric's request id slot).
const STAMP: usize = 8;

/// A running echo server; stops when dropped.
pub struct EchoServer {
    runtime: Option<Runtime>,
    addr: SocketAddr,
}

impl EchoServer {
    /// Starts a server on 127.0.0.1 answering every frame with
    /// `response_bytes` (length prefix included), on `runtime`.
    pub fn start(runtime: Runtime, response_bytes: usize) -> crate::Result<Self> {
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .context("cannot listen on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        runtime.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(async move {
                            if let Err(e) = echo_connection(stream, response_bytes).await {
                                tracing::warn!(error = %e, "echo connection dropped");
                            }
                        });
                    }
                    Err(e) => tracing::warn!(error = %e, "echo accept failed"),
                }
            }
        });
        Ok(EchoServer {
            runtime: Some(runtime),
            addr,
        })
    }

    /// The address the server listens on (127.0.0.1, a port of the system's
    /// choosing).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn echo_connection(stream: TcpStream, response_bytes: usize) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let mut reader = BufReader::with_capacity(IO_BUFFER_BYTES, r);
    let mut writer = BufWriter::with_capacity(IO_BUFFER_BYTES, w);
    let mut body = Vec::new();
    let mut response = vec![0u8; response_bytes];
    response[..PREFIX].copy_from_slice(&((response_bytes - PREFIX) as u32).to_le_bytes());
    loop {
        let len = match reader.read_u32_le().await {
            Ok(len) => len as usize,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        if !(STAMP..=FRAME_BYTES_MAX).contains(&len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad echo frame length",
            ));
        }
        body.resize(len, 0);
        reader.read_exact(&mut body).await?;
        response[PREFIX..PREFIX + STAMP].copy_from_slice(&body[..STAMP]);
        writer.write_all(&response).await?;
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
    }
}

/// One thread's connection to the echo server.
struct EchoClient {
    reader: BufReader<OwnedReadHalf>,
    writer: BufWriter<OwnedWriteHalf>,
    request: Vec<u8>,
    body: Vec<u8>,
}

/// How a pipelined run ends.
struct Stop {
    /// Stop once this many frames were answered.
    frames: u64,
    /// Stop at the first sampled answer at or after this instant.
    deadline: Instant,
}

impl EchoClient {
    async fn connect(addr: SocketAddr, request_bytes: usize) -> crate::Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to the echo server at {addr}"))?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let mut request = vec![0u8; request_bytes];
        request[..PREFIX].copy_from_slice(&((request_bytes - PREFIX) as u32).to_le_bytes());
        Ok(EchoClient {
            reader: BufReader::with_capacity(IO_BUFFER_BYTES, r),
            writer: BufWriter::with_capacity(IO_BUFFER_BYTES, w),
            request,
            body: Vec::new(),
        })
    }

    /// Keeps `depth` frames in flight until `stop`; every `every`-th frame is
    /// timed. Returns the frames answered and the time from `start` to the last.
    async fn pipeline(
        &mut self,
        depth: usize,
        stop: Stop,
        start: Instant,
        every: u64,
        latency: &mut Histogram<u64>,
    ) -> crate::Result<(u64, Duration)> {
        let window = Semaphore::new(depth);
        // Both halves run in this one task (join!, not spawn), so plain
        // cells suffice. The writer checks `stopped` and counts `sent` with no
        // await in between, so once the reader sets `stopped`, `sent` is final.
        let stopped = Cell::new(false);
        let sent = Cell::new(0u64);
        let EchoClient {
            reader,
            writer,
            request,
            body,
        } = self;
        let write_side = async {
            loop {
                window.acquire().await.context("echo window closed")?.forget();
                if stopped.get() || sent.get() == stop.frames {
                    break;
                }
                sent.set(sent.get() + 1);
                let stamp = if sent.get() % every == 0 {
                    // +1: a zero stamp means "not timed".
                    start.elapsed().as_nanos() as u64 + 1
                } else {
                    0
                };
                request[PREFIX..PREFIX + STAMP].copy_from_slice(&stamp.to_le_bytes());
                writer.write_all(request).await?;
                if window.available_permits() == 0 {
                    writer.flush().await?;
                }
            }
            writer.flush().await?;
            Ok::<_, crate::BenchError>(())
        };
        let read_side = async {
            let mut received = 0u64;
            let mut last = start;
            while !(stopped.get() && received == sent.get()) {
                let len = reader
                    .read_u32_le()
                    .await
                    .context("echo server closed the connection")? as usize;
                if !(STAMP..=FRAME_BYTES_MAX).contains(&len) {
                    crate::bail!("echo server sent a frame of {len} bytes");
                }
                body.resize(len, 0);
                reader.read_exact(body).await?;
                received += 1;
                window.add_permits(1);
                let mut stamp = [0u8; STAMP];
                stamp.copy_from_slice(&body[..STAMP]);
                let stamp = u64::from_le_bytes(stamp);
                if stamp != 0 {
                    last = Instant::now();
                    let sent_at = start + Duration::from_nanos(stamp - 1);
                    measure::record(latency, last.saturating_duration_since(sent_at));
                    if last >= stop.deadline {
                        stopped.set(true);
                    }
                }
                if received == stop.frames {
                    stopped.set(true);
                }
            }
            Ok::<_, crate::BenchError>((received, last - start))
        };
        let (w, r) = tokio::join!(write_side, read_side);
        w?;
        r
    }
}

/// Runs the echo baseline against `server` with the plan's threads and depth.
pub fn run(plan: &Plan, server: &EchoServer, frames: (usize, usize)) -> crate::Result<Vec<Run>> {
    let every = plan.sample_every();
    let addr = server.addr();
    on_threads("baseline", plan.threads, |_, gate| {
        let setup = (|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start an async runtime")?;
            let client = rt.block_on(async {
                let mut c = EchoClient::connect(addr, frames.0).await?;
                let warm = Stop {
                    frames: WARMUP_ROUND_TRIPS * plan.depth as u64,
                    deadline: Instant::now() + Duration::from_secs(3600),
                };
                c.pipeline(
                    plan.depth,
                    warm,
                    Instant::now(),
                    every,
                    &mut measure::histogram()?,
                )
                .await?;
                Ok::<_, crate::BenchError>(c)
            })?;
            Ok::<_, crate::BenchError>((rt, client))
        })();
        gate.wait();
        let (rt, mut client) = setup?;
        let mut latency = measure::histogram()?;
        let start = Instant::now();
        let stop = Stop {
            frames: u64::MAX,
            deadline: start + plan.duration,
        };
        let (round_trips, elapsed) =
            rt.block_on(client.pipeline(plan.depth, stop, start, every, &mut latency))?;
        Ok(vec![Run {
            round_trips,
            elapsed,
            latency,
            cas_failures: 0,
            stats: None,
        }])
    })
}
