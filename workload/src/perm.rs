//! Seeded bijections of `b`-bit integers, and cycle walking to restrict them
//! to a smaller domain.
//!
//! A [`Perm`] is three rounds of `x ^= k; x *= M (mod 2^b); x ^= x >> s`,
//! each of which is a bijection of `[0, 2^b)`, so the whole is one too, with
//! an exact inverse. It is not cryptographic; it only has to spread
//! consecutive inputs over the domain and differ from seed to seed.
//!
//! Cycle walking turns a permutation of a set `S` into a permutation of a
//! subset `D ⊂ S`: apply it until the result lands in `D`. Starting from a
//! point of `D`, the walk follows the point's cycle, which comes back to the
//! start (in `D`) at the latest, so it terminates, and distinct starts give
//! distinct ends. When `D` is at least half of `S` the expected number of
//! steps is below two.

/// Odd multipliers (from SplitMix64 and Moremur); any odd constants make a
/// bijection, these also mix well.
const MULTIPLIERS: [u64; ROUNDS] = [
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
];
const ROUNDS: usize = 3;

/// The SplitMix64 finaliser: a good 64-bit mixer, used to derive round keys
/// and stream seeds (not itself seeded).
pub(crate) const fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The inverse of odd `m` modulo 2^64 (Newton's iteration: 3, 6, 12, 24,
/// 48, 96 correct bits).
const fn inverse_mod_2_64(m: u64) -> u64 {
    let mut inv = m;
    let mut i = 0;
    while i < 5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(inv)));
        i += 1;
    }
    inv
}

const INVERSES: [u64; ROUNDS] = [
    inverse_mod_2_64(MULTIPLIERS[0]),
    inverse_mod_2_64(MULTIPLIERS[1]),
    inverse_mod_2_64(MULTIPLIERS[2]),
];

/// A seeded bijection of `[0, 2^bits)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Perm {
    keys: [u64; ROUNDS],
    mask: u64,
    shift: u32,
}

impl Perm {
    /// A permutation of `[0, 2^bits)` (`bits <= 64`) chosen by `seed`.
    pub(crate) const fn new(bits: u32, seed: u64) -> Self {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let shift = if bits >= 64 { 32 } else { bits.div_ceil(2) };
        let k0 = splitmix64(seed);
        let k1 = splitmix64(k0);
        let k2 = splitmix64(k1);
        Self {
            keys: [k0 & mask, k1 & mask, k2 & mask],
            mask,
            shift,
        }
    }

    /// A permutation of `[0, 2^b)` for the smallest `b` with `2^b >= n`,
    /// for walking onto `[0, n)` with [`Perm::below`].
    pub(crate) const fn covering(n: u64, seed: u64) -> Self {
        let bits = if n <= 1 { 0 } else { 64 - (n - 1).leading_zeros() };
        Self::new(bits, seed)
    }

    /// The image of `x` (which must be below `2^bits`).
    #[inline]
    pub(crate) fn forward(&self, mut x: u64) -> u64 {
        for (key, m) in self.keys.iter().zip(MULTIPLIERS) {
            x = ((x ^ key).wrapping_mul(m)) & self.mask;
            x ^= x >> self.shift;
        }
        x
    }

    /// The preimage of `y`: `inverse(forward(x)) == x`.
    #[inline]
    pub(crate) fn inverse(&self, mut y: u64) -> u64 {
        for (key, inv) in self.keys.iter().zip(INVERSES).rev() {
            // Undo `x ^= x >> s`: x = y ^ y>>s ^ y>>2s ^ ...
            let mut t = y >> self.shift;
            while t != 0 {
                y ^= t;
                t >>= self.shift;
            }
            y = (y.wrapping_mul(inv) & self.mask) ^ key;
        }
        y
    }

    /// Cycle walking onto `[0, n)`: for `x < n <= 2^bits` the result is
    /// below `n`, and `x -> below(x, n)` is a bijection of `[0, n)`.
    #[inline]
    pub(crate) fn below(&self, x: u64, n: u64) -> u64 {
        let mut y = self.forward(x);
        while y >= n {
            y = self.forward(y);
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverses_are_inverses() {
        for (m, inv) in MULTIPLIERS.iter().zip(INVERSES) {
            assert_eq!(m.wrapping_mul(inv), 1);
        }
    }

    #[test]
    fn small_domains_are_permuted() {
        for bits in 0..=12 {
            let perm = Perm::new(bits, 7);
            let size = 1u64 << bits;
            let mut seen = vec![false; size as usize];
            for x in 0..size {
                let y = perm.forward(x);
                assert!(y < size);
                assert!(!seen[y as usize], "bits {bits}: {y} hit twice");
                seen[y as usize] = true;
                assert_eq!(perm.inverse(y), x);
            }
        }
    }

    #[test]
    fn below_is_a_bijection_of_the_prefix() {
        for n in [1u64, 2, 3, 5, 17, 100, 1000, 1025] {
            let perm = Perm::covering(n, 99);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = perm.below(x, n);
                assert!(y < n);
                assert!(!seen[y as usize], "n {n}: {y} hit twice");
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn full_width_round_trips() {
        let perm = Perm::new(64, 1);
        for x in [0, 1, 2, u64::MAX, u64::MAX - 1, 0x8000_0000_0000_0000, 12345] {
            assert_eq!(perm.inverse(perm.forward(x)), x);
        }
    }
}
