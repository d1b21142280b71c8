//! One batch on one node's queue pair: each verb decided against the
//! node's region table (posted, or completed here with the error the node
//! would give), the posted ones chained into one work-request list with
//! only the last signalled, and that completion awaited.

use std::time::Instant;

use sideway::ibverbs::queue_pair::{PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags};

use super::{
    disconnected, lock, Conn, ATOMIC_AREA_BYTES, BUFFER_BYTES, COMPLETION_WAIT_MAX, IBV_WC_SUCCESS,
    READ_AREA_BYTES,
};
use crate::addr::{NodeId, ATOMIC_BYTES};
use crate::error::FabricError;
use crate::verb::{Op, OpKind, Outcome, VerbError, BATCH_BYTES_MAX};

/// What a batch asks of one node, decided before anything is posted.
#[derive(Clone, Copy)]
pub(super) enum Step {
    /// Posted: read the result from the buffer once complete.
    Posted(Posted),
    /// Decided without a verb (an error, `Flushed`, an empty verb).
    Decided(Result<Outcome, VerbError>),
    /// An empty READ: no bytes.
    EmptyRead,
}

#[derive(Clone, Copy)]
pub(super) enum Posted {
    Read { at: usize, len: u32 },
    Atomic { at: usize },
    Done,
}

/// The work request one checked verb becomes.
pub(super) struct Request {
    wr: Wr,
    step: Posted,
}

enum Wr {
    Read {
        rkey: u32,
        remote: u64,
        local: usize,
        len: u32,
    },
    Write {
        rkey: u32,
        remote: u64,
        local: usize,
        len: u32,
    },
    Cas {
        rkey: u32,
        remote: u64,
        local: usize,
        expect: u64,
        new: u64,
    },
    Faa {
        rkey: u32,
        remote: u64,
        local: usize,
        add: u64,
    },
}

/// Decides every verb of `mine` (the batch's ops to one node, in order)
/// against the node's table: a step per op, and the requests to post.
pub(super) fn plan(
    conn: &Conn,
    mine: &[(usize, &Op)],
    payload: &[u8],
    steps: &mut [Option<Step>],
) -> Result<Vec<Request>, Missing> {
    let mut requests = Vec::with_capacity(mine.len());
    let (mut read_at, mut atomic_at, mut write_at) =
        (0usize, READ_AREA_BYTES, READ_AREA_BYTES + ATOMIC_AREA_BYTES);
    let mut read_bytes = 0u64;
    let mut failed = false;
    for &(i, op) in mine {
        if failed {
            steps[i] = Some(Step::Decided(Err(VerbError::Flushed)));
            continue;
        }
        let region = match conn.regions.iter().find(|r| r.id == op.region) {
            Some(r) if r.key == op.key => r,
            _ => return Err(Missing),
        };
        let decided = op.check_extent(region.size).and_then(|()| {
            let remote = region.addr + op.offset;
            let rkey = region.rkey;
            Ok(match op.kind {
                OpKind::Read { len: 0 } => Err(Step::EmptyRead),
                OpKind::Read { len } => {
                    read_bytes += u64::from(len);
                    if read_bytes > BATCH_BYTES_MAX {
                        return Err(VerbError::TooLarge { len: read_bytes });
                    }
                    let r = Request {
                        wr: Wr::Read {
                            rkey,
                            remote,
                            local: read_at,
                            len,
                        },
                        step: Posted::Read { at: read_at, len },
                    };
                    read_at += len as usize;
                    Ok(r)
                }
                OpKind::Write { data } => {
                    let Some(bytes) = payload.get(data.range()) else {
                        return Err(VerbError::TooLarge { len: data.len.into() });
                    };
                    if bytes.is_empty() {
                        Err(Step::Decided(Ok(Outcome::Done)))
                    } else if write_at + bytes.len() > BUFFER_BYTES {
                        return Err(VerbError::TooLarge { len: data.len.into() });
                    } else {
                        conn.wire.buffer.put(write_at, bytes);
                        let r = Request {
                            wr: Wr::Write {
                                rkey,
                                remote,
                                local: write_at,
                                len: data.len,
                            },
                            step: Posted::Done,
                        };
                        write_at += bytes.len();
                        Ok(r)
                    }
                }
                OpKind::Cas { expect, new } => {
                    let r = Request {
                        wr: Wr::Cas {
                            rkey,
                            remote,
                            local: atomic_at,
                            expect,
                            new,
                        },
                        step: Posted::Atomic { at: atomic_at },
                    };
                    atomic_at += ATOMIC_BYTES as usize;
                    Ok(r)
                }
                OpKind::Faa { add } => {
                    let r = Request {
                        wr: Wr::Faa {
                            rkey,
                            remote,
                            local: atomic_at,
                            add,
                        },
                        step: Posted::Atomic { at: atomic_at },
                    };
                    atomic_at += ATOMIC_BYTES as usize;
                    Ok(r)
                }
                // The node's memory is volatile to a one-sided verb: a
                // FLUSH places the WRITEs before it (a 1-byte READ behind
                // them, which RC orders after them) but cannot msync.
                OpKind::Flush { len: 0 } => Err(Step::Decided(Ok(Outcome::Done))),
                OpKind::Flush { len } => {
                    let r = Request {
                        wr: Wr::Read {
                            rkey,
                            remote: remote + u64::from(len) - 1,
                            local: read_at,
                            len: 1,
                        },
                        step: Posted::Done,
                    };
                    read_at += 1;
                    Ok(r)
                }
            })
        });
        match decided {
            Ok(Ok(request)) => {
                steps[i] = Some(Step::Posted(request.step));
                requests.push(request);
            }
            Ok(Err(step)) => steps[i] = Some(step),
            Err(e) => {
                steps[i] = Some(Step::Decided(Err(e)));
                failed = true;
            }
        }
    }
    debug_assert!(read_at <= READ_AREA_BYTES + 1 && atomic_at <= READ_AREA_BYTES + ATOMIC_AREA_BYTES);
    Ok(requests)
}

/// A verb named a region the table lacks, or another key: ask the node.
pub(super) struct Missing;

/// Posts `requests` as one chained list, the last one signalled; returns
/// the last one's work-request id, or `None` if there was nothing to post.
pub(super) fn post(node: NodeId, conn: &Conn, requests: &[Request]) -> Result<Option<u64>, FabricError> {
    let Some(last) = requests.len().checked_sub(1) else {
        return Ok(None);
    };
    let lkey = conn.wire.buffer.mr.lkey();
    let buffer = &conn.wire.buffer;
    let mut qp = lock(&conn.wire.qp);
    let mut guard = qp.start_post_send();
    for (i, r) in requests.iter().enumerate() {
        let flags = if i == last {
            WorkRequestFlags::Signaled
        } else {
            WorkRequestFlags::none()
        };
        let wr = guard.construct_wr(i as u64, flags);
        let (handle, local, len) = match r.wr {
            Wr::Read {
                rkey,
                remote,
                local,
                len,
            } => (wr.setup_read(rkey, remote), local, len),
            Wr::Write {
                rkey,
                remote,
                local,
                len,
            } => (wr.setup_write(rkey, remote), local, len),
            Wr::Cas {
                rkey,
                remote,
                local,
                expect,
                new,
            } => (
                wr.setup_atomic_compare_swap(rkey, remote, expect, new),
                local,
                ATOMIC_BYTES as u32,
            ),
            Wr::Faa {
                rkey,
                remote,
                local,
                add,
            } => (
                wr.setup_atomic_fetch_add(rkey, remote, add),
                local,
                ATOMIC_BYTES as u32,
            ),
        };
        // SAFETY: `[local, local + len)` lies in the registered buffer
        // (`plan` kept every area in bounds), which outlives the queue pair
        // (`Wire`'s field order); nothing else touches it until the
        // completion is polled.
        unsafe { handle.setup_sge(lkey, buffer.addr(local), len) };
    }
    guard
        .post()
        .map_err(|e| disconnected(node, format!("post failed: {e}")))?;
    Ok(Some(last as u64))
}

/// Polls `conn`'s completion queue until work request `last` completes.
pub(super) async fn wait(node: NodeId, conn: &Conn, last: u64) -> Result<(), FabricError> {
    let deadline = Instant::now() + COMPLETION_WAIT_MAX;
    loop {
        if let Ok(poller) = conn.cq.start_poll() {
            for wc in poller {
                if wc.status() != IBV_WC_SUCCESS {
                    let why = match conn.ended() {
                        Some(why) => why,
                        None => format!("work request {} failed with status {}", wc.wr_id(), wc.status()),
                    };
                    return Err(disconnected(node, why));
                }
                if wc.wr_id() == last {
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            return Err(disconnected(
                node,
                format!("no completion in {COMPLETION_WAIT_MAX:?}"),
            ));
        }
        tokio::task::yield_now().await;
    }
}

/// Plans `mine` with the verbs whose region the node does not hold (or
/// holds under another key) decided as the node decides them; the rest as
/// [`plan`] does.
pub(super) fn decide_missing(
    conn: &Conn,
    mine: &[(usize, &Op)],
    payload: &[u8],
    steps: &mut [Option<Step>],
) -> Vec<Request> {
    // The first verb the table cannot serve fails; verbs before it are
    // planned normally, the ones after it are flushed.
    let first_bad = mine
        .iter()
        .position(|(_, op)| !conn.regions.iter().any(|r| r.id == op.region && r.key == op.key))
        .unwrap_or(mine.len());
    let requests = plan(conn, &mine[..first_bad], payload, steps).unwrap_or_default();
    let earlier_failed = mine[..first_bad]
        .iter()
        .any(|(i, _)| matches!(steps[*i], Some(Step::Decided(Err(_)))));
    for (k, (i, op)) in mine.iter().enumerate().skip(first_bad) {
        steps[*i] = Some(Step::Decided(Err(if earlier_failed || k > first_bad {
            VerbError::Flushed
        } else if conn.regions.iter().any(|r| r.id == op.region) {
            VerbError::BadKey
        } else {
            VerbError::UnknownRegion { region: op.region }
        })));
    }
    requests
}
