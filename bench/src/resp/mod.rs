//! `kintsugi bench resp`: redis-benchmark against the Redis-protocol
//! gateway (`kintsugi serve`, B+tree and hash, rtx, each on an embedded
//! cluster) and against Debian's `redis-server` on the same machine, in
//! the same run, rounds alternating between the targets; medians and the
//! gateway's throughput as a ratio of Redis's.

pub mod plan;
pub mod report;
pub mod run;
