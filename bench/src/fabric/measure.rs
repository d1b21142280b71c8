//! Counting round trips and sampling their latency without distorting the count.
//!
//! `Instant::now()` costs 20-40 ns, as much as the 8-byte CAS it would time.
//! So the throughput loop reads the clock only around every N-th round trip
//! ([`SAMPLE_EVERY_INLINE`] for local and shm, [`SAMPLE_EVERY_TCP`] for tcp,
//! whose round trips take microseconds) and checks the deadline with that same
//! reading; the N-1 round trips between two samples run untouched. Baselines
//! are sampled exactly the same way, so both phases pay the same clock tax.
//! Every sample still includes one clock read, which bounds how small a
//! percentile can be.

use std::time::{Duration, Instant};

use crate::error::Context;
use fabric::Stats;
use hdrhistogram::Histogram;

/// local and shm: one round trip in this many is timed.
pub const SAMPLE_EVERY_INLINE: u64 = 1024;
/// tcp: every round trip is timed (a clock read is noise next to a socket).
pub const SAMPLE_EVERY_TCP: u64 = 1;
/// Untimed round trips each client runs before the clock starts, to fault in
/// pages, fill caches and open windows.
pub const WARMUP_ROUND_TRIPS: u64 = 256;

/// Latencies in nanoseconds, 1 ns to 1 min, 3 significant digits.
pub fn histogram() -> crate::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).context("cannot create a latency histogram")
}

/// Records one round trip's latency.
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
}

/// What one client (thread or task) did in a phase.
#[derive(Debug)]
pub struct Run {
    /// Round trips this client completed after its warm-up.
    pub round_trips: u64,
    /// From the common start to this client's last round trip.
    pub elapsed: Duration,
    /// Latency of the sampled round trips, in nanoseconds.
    pub latency: Histogram<u64>,
    /// CASes that found another value than the one this client last wrote
    /// (only on memory someone else also touches).
    pub cas_failures: u64,
    /// Fabric counters of this client; `None` for a baseline.
    pub stats: Option<Stats>,
}

/// Runs `round_trip` until `deadline`, timing every `every`-th call; returns
/// the round trips done and the time from `start` to the last one.
pub fn timed_loop(
    start: Instant,
    deadline: Instant,
    every: u64,
    latency: &mut Histogram<u64>,
    mut round_trip: impl FnMut(),
) -> (u64, Duration) {
    let mut done = 0u64;
    loop {
        for _ in 1..every {
            round_trip();
        }
        let t0 = Instant::now();
        round_trip();
        let t1 = Instant::now();
        record(latency, t1 - t0);
        done += every;
        if t1 >= deadline {
            return (done, t1 - start);
        }
    }
}

/// A phase: every client's run, merged.
#[derive(Debug)]
pub struct Phase {
    /// Round trips of every client together.
    pub round_trips: u64,
    /// Verbs in each round trip (`--batch`).
    pub verbs_per_round_trip: u64,
    /// Payload bytes each round trip moves (READ or WRITE data, 8 per atomic).
    pub bytes_per_round_trip: u64,
    /// The longest client run: rates are totals over this wall time.
    pub elapsed: Duration,
    /// Every client's sampled round-trip latencies, in nanoseconds.
    pub latency: Histogram<u64>,
    /// CASes that found a value their client had not written (0 unless someone
    /// else uses the region).
    pub cas_failures: u64,
    /// Every client's fabric counters added up; `None` for a baseline.
    pub stats: Option<Stats>,
}

impl Phase {
    /// Every client's run added up; the elapsed time is the longest one's.
    pub fn merge(
        runs: Vec<Run>,
        verbs_per_round_trip: u64,
        bytes_per_round_trip: u64,
    ) -> crate::Result<Self> {
        let mut phase = Phase {
            round_trips: 0,
            verbs_per_round_trip,
            bytes_per_round_trip,
            elapsed: Duration::ZERO,
            latency: histogram()?,
            cas_failures: 0,
            stats: None,
        };
        for run in runs {
            phase.round_trips += run.round_trips;
            phase.elapsed = phase.elapsed.max(run.elapsed);
            phase
                .latency
                .add(&run.latency)
                .context("cannot merge latency histograms")?;
            phase.cas_failures += run.cas_failures;
            if let Some(s) = run.stats {
                *phase.stats.get_or_insert_with(Stats::default) += s;
            }
        }
        Ok(phase)
    }

    /// Round trips per second over the phase's wall time.
    pub fn round_trips_per_sec(&self) -> f64 {
        self.round_trips as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Verbs per second over the phase's wall time.
    pub fn verbs_per_sec(&self) -> f64 {
        self.round_trips_per_sec() * self.verbs_per_round_trip as f64
    }

    /// Payload megabytes (10^6) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.round_trips_per_sec() * self.bytes_per_round_trip as f64 / 1e6
    }

    /// The `q` quantile (0 to 1) of the sampled round-trip latency, in
    /// microseconds.
    pub fn percentile_us(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1e3
    }

    /// Round trips timed: the latency samples.
    pub fn samples(&self) -> u64 {
        self.latency.len()
    }
}

pub use crate::threads::StartGate;

/// Runs `threads` OS threads named `{name}-{i}` (to tell phases apart in a
/// profile), each calling `body(i, gate)`, and collects their runs. `body`
/// must call `gate.wait()` exactly once, after its setup and even when that
/// failed, and start its clock after it.
pub fn on_threads<F>(name: &str, threads: usize, body: F) -> crate::Result<Vec<Run>>
where
    F: Fn(usize, &StartGate) -> crate::Result<Vec<Run>> + Sync,
{
    let per_thread = crate::threads::on_threads(name, threads, body)?;
    Ok(per_thread.into_iter().flatten().collect())
}
