//! The one 64-bit mixer both indexes hash with.

/// 64-bit finaliser (splitmix64): cheap, and every input bit affects every
/// output bit, which is what torn-read checks and bucket choice both need.
pub(crate) fn fmix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
