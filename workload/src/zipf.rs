//! The Zipfian generator of Gray et al. ("Quickly generating billion-record
//! synthetic databases", SIGMOD '94), as in YCSB's `ZipfianGenerator`.
//!
//! Rank `r` (0-based) is drawn with probability `(r + 1)^-θ / ζ(n, θ)` where
//! `ζ(n, θ) = Σ_{k=1..n} k^-θ`. Drawing is O(1) (one `powf`) given the
//! constants `ζ(n)`, `ζ(2)`, `α = 1/(1-θ)` and
//! `η = (1 - (2/n)^(1-θ)) / (1 - ζ(2)/ζ(n))`.
//!
//! **Cost.** `ζ(n)` is a sum of `n` powers: about 1 s of one core for
//! n = 100M. [`zeta`] spreads it over the machine's cores (deterministically:
//! fixed chunks added in a fixed order, so the result does not depend on the
//! core count). Compute it once per run and share the [`Zipfian`] (it is
//! `Copy`); when the item count grows, [`Zipfian::grow`] adds only the new
//! terms, as YCSB does.

use rand::Rng;

/// YCSB's Zipfian constant θ, used by the rTX paper's skewed workloads.
pub const YCSB_THETA: f64 = 0.99;

/// Terms per chunk of the ζ sum; chunks are the unit of parallelism and of
/// the (fixed) summation order.
const ZETA_CHUNK: u64 = 1 << 20;

/// `Σ_{k=from+1..=to} k^-θ` in ascending `k`.
fn zeta_terms(from: u64, to: u64, theta: f64) -> f64 {
    let mut sum = 0.0;
    for k in from + 1..=to {
        sum += (k as f64).powf(-theta);
    }
    sum
}

/// `ζ(n, θ) = Σ_{k=1..n} k^-θ`. O(n), run on all cores for large `n` with a
/// result independent of the number of cores.
pub fn zeta(n: u64, theta: f64) -> f64 {
    let chunks = n.div_ceil(ZETA_CHUNK);
    let chunk_sum = |c: u64| zeta_terms(c * ZETA_CHUNK, ((c + 1) * ZETA_CHUNK).min(n), theta);
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    let threads = threads.min(usize::try_from(chunks).unwrap_or(usize::MAX));
    if threads <= 1 {
        return (0..chunks).map(chunk_sum).sum();
    }
    let mut partial = vec![0.0f64; chunks as usize];
    let per_thread = partial.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for (t, slots) in partial.chunks_mut(per_thread).enumerate() {
            let first = (t * per_thread) as u64;
            scope.spawn(move || {
                for (c, slot) in slots.iter_mut().enumerate() {
                    *slot = chunk_sum(first + c as u64);
                }
            });
        }
    });
    partial.iter().sum()
}

/// A Zipfian distribution over ranks `0..items` (rank 0 the most popular).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    zetan: f64,
    /// `0.5^θ`, so that `ζ(2) = 1 + half_pow_theta`.
    half_pow_theta: f64,
    alpha: f64,
    eta: f64,
}

impl Zipfian {
    /// The distribution over `items` ranks with exponent `theta`; computes
    /// `ζ(items)`, O(items) (see the module docs).
    ///
    /// # Panics
    ///
    /// If `items == 0` or `theta` is not in `(0, 1)`.
    pub fn new(items: u64, theta: f64) -> Self {
        Self::with_zeta(items, theta, zeta(items, theta))
    }

    /// As [`Zipfian::new`] with `ζ(items, theta)` already known: O(1).
    ///
    /// # Panics
    ///
    /// If `items == 0` or `theta` is not in `(0, 1)`.
    pub fn with_zeta(items: u64, theta: f64, zetan: f64) -> Self {
        assert!(items > 0, "a Zipfian needs at least one item");
        assert!(theta > 0.0 && theta < 1.0, "Zipfian theta {theta} not in (0, 1)");
        let mut z = Self {
            items,
            theta,
            zetan,
            half_pow_theta: 0.5f64.powf(theta),
            alpha: 1.0 / (1.0 - theta),
            eta: 0.0,
        };
        z.eta = z.eta();
        z
    }

    fn eta(&self) -> f64 {
        let zeta2 = 1.0 + self.half_pow_theta;
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - zeta2 / self.zetan)
    }

    /// Number of ranks.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// `ζ(items, θ)`; the most popular rank has probability `1 / zeta()`.
    pub fn zeta(&self) -> f64 {
        self.zetan
    }

    /// Extends the distribution to `items` ranks, adding the new terms of
    /// `ζ` incrementally (O(items - self.items())). Does nothing if `items`
    /// is not larger.
    pub fn grow(&mut self, items: u64) {
        if items > self.items {
            self.zetan += zeta_terms(self.items, items, self.theta);
            self.items = items;
            self.eta = self.eta();
        }
    }

    /// Draws a rank in `0..items()`.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.items - 1);
        }
        // The float-to-int cast saturates (NaN becomes 0), and the clamp
        // keeps rounding at u -> 1 inside the range.
        let rank = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.items - 1)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn zeta_matches_the_plain_sum_and_is_parallel_safe() {
        let n = 3 * ZETA_CHUNK + 12_345;
        let plain = zeta_terms(0, n, YCSB_THETA);
        let chunked = zeta(n, YCSB_THETA);
        assert!((plain - chunked).abs() < 1e-9, "{plain} vs {chunked}");
        assert_eq!(zeta(n, YCSB_THETA), chunked);
        assert_eq!(zeta(1, YCSB_THETA), 1.0);
        assert_eq!(zeta(0, YCSB_THETA), 0.0);
    }

    #[test]
    fn grow_matches_a_fresh_computation() {
        let mut z = Zipfian::new(1000, YCSB_THETA);
        z.grow(5000);
        let fresh = Zipfian::new(5000, YCSB_THETA);
        assert!((z.zeta() - fresh.zeta()).abs() < 1e-9);
        assert!((z.eta - fresh.eta).abs() < 1e-9);
        z.grow(10);
        assert_eq!(z.items(), 5000);
    }

    #[test]
    fn rank_frequencies_follow_the_law() {
        let n = 1000;
        let z = Zipfian::new(n, YCSB_THETA);
        let mut rng = SmallRng::seed_from_u64(1);
        let draws = 1_000_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        // Ranks 0 and 1 are exact in Gray's method; later ranks follow the
        // law approximately (the method is an approximation for r >= 2).
        for (r, tolerance) in [(0usize, 0.02), (1, 0.03), (9, 0.15), (99, 0.3)] {
            let expected = ((r + 1) as f64).powf(-YCSB_THETA) / z.zeta() * draws as f64;
            let got = counts[r] as f64;
            assert!(
                (got - expected).abs() / expected < tolerance,
                "rank {r}: {got} vs {expected:.0}"
            );
        }
        assert!(
            counts.windows(2).take(20).all(|w| w[0] > w[1]),
            "{:?}",
            &counts[..21]
        );
    }

    #[test]
    fn tiny_domains_stay_in_range() {
        let mut rng = SmallRng::seed_from_u64(2);
        for n in 1..5 {
            let z = Zipfian::new(n, YCSB_THETA);
            for _ in 0..10_000 {
                assert!(z.sample(&mut rng) < n);
            }
        }
    }
}
