//! What the benchmarks share: the validated flags of `bench txn` and
//! `bench lease`, and helpers every bench uses (cores, seeds, load bars,
//! medians).

use harness::TransportKind;

/// The validated common flags.
#[derive(Clone, Copy, Debug)]
pub struct Common {
    /// Where the memory lives (`--transport`): local or shm.
    pub transport: TransportKind,
    /// Replicas of the region, primary included (`--replicas`).
    pub replicas: u16,
    /// Bytes of each object's data (`--object-bytes`); the first 8 are its
    /// counter.
    pub object_bytes: u32,
    /// Seed of the random choices (`--seed`): objects per transaction, clock
    /// skews.
    pub seed: u64,
    /// Print one JSON object on stdout instead of the table (`--json`).
    pub json: bool,
}

/// CPU cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The seed of random stream `stream` (a client, a clock) under `--seed`:
/// distinct streams get unrelated seeds (a SplitMix64 step).
pub fn seed_for(seed: u64, stream: u64) -> u64 {
    let mut z = seed.wrapping_add(stream.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `v` without repeats, in first-seen order (a flag given `a,b,a` runs a, b).
pub fn dedup<T: PartialEq>(v: Vec<T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// The progress bar of a bulk load of `keys` keys.
pub fn load_bar(keys: u64, prefix: String) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(keys);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} keys ({per_sec}, {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar
}

/// The median of a non-empty list (the mean of the middle two when even).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    debug_assert!(n > 0);
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_lists() {
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[0.9, 0.7, 0.8]), 0.8);
        assert_eq!(median(&[0.9, 0.6, 0.8, 0.7]), 0.75);
    }
}
