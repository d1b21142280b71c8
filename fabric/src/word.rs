//! Little-endian words of bytes read from DM: the one reader every layer
//! decodes lock words, pointers, log headers and node fields with.
//!
//! A READ returns exactly the bytes asked for, so a word past the end of
//! what a caller holds is a bug of the caller's length, never input to
//! trust: [`le_word`] reads it as 0, which every checked layout (a
//! checksum, a magic word, a version pair) then refuses, and no panic
//! depends on what a memory node sent. [`le_word_at`] says `None` instead,
//! for decoders that report a short buffer themselves.

use crate::addr::ATOMIC_BYTES;

/// The little-endian word (the [`ATOMIC_BYTES`] a CAS or FAA works on) at
/// byte `at` of `bytes`; `None` if fewer bytes than that are there.
#[inline]
pub fn le_word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(ATOMIC_BYTES as usize)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// The little-endian word at byte `at` of `bytes`, 0 past the end
/// ([`le_word_at`]). Inlined across crates: B+tree nodes and hash
/// buckets decode dozens of words per read on the verb path.
#[inline]
pub fn le_word(bytes: &[u8], at: usize) -> u64 {
    le_word_at(bytes, at).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_little_endian_and_short_input_is_none_or_zero() {
        let b = [1, 0, 0, 0, 0, 0, 0, 0x80, 2, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(le_word(&b, 0), 0x8000_0000_0000_0001);
        assert_eq!(le_word(&b, 8), 2);
        assert_eq!(le_word_at(&b, 9), None);
        assert_eq!(le_word(&b, 9), 0);
        assert_eq!(le_word_at(&b, usize::MAX - 3), None);
        assert_eq!(le_word_at(&[], 0), None);
    }
}
