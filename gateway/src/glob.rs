//! SCAN's MATCH patterns, as Redis reads them (`stringmatchlen`): `*`,
//! `?`, `[abc]`, `[^abc]`, `[a-z]`, and `\` to take the next byte as is,
//! on bytes. Written here rather than taken from a glob crate because
//! those read paths (separators, `[!...]`) and UTF-8, not Redis patterns.

/// Whether `key` matches `pattern`.
pub fn matches(pattern: &[u8], key: &[u8]) -> bool {
    // Iterative with one backtrack point per `*`: the last star's position
    // and the key position it has consumed up to. Linear in practice,
    // never exponential.
    let (mut p, mut k) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while k < key.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, k));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    k += 1;
                    continue;
                }
                b'[' => {
                    let (hit, next) = class(pattern, p, key[k]);
                    if hit {
                        p = next;
                        k += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == key[k] => {
                    p += 2;
                    k += 1;
                    continue;
                }
                // An escaped byte that differs.
                b'\\' if p + 1 < pattern.len() => {}
                c if c == key[k] => {
                    p += 1;
                    k += 1;
                    continue;
                }
                _ => {}
            }
        }
        // Mismatch: let the last star take one more byte.
        match star {
            Some((sp, sk)) => {
                star = Some((sp, sk + 1));
                p = sp + 1;
                k = sk + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The class `[...]` at `pattern[p]` against byte `c`: whether it matches
/// and where the pattern goes on (a class that never closes takes the
/// rest of the pattern, as in Redis).
fn class(pattern: &[u8], p: usize, c: u8) -> (bool, usize) {
    let mut i = p + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            hit |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (pattern[i].min(pattern[i + 2]), pattern[i].max(pattern[i + 2]));
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= pattern[i] == c;
            i += 1;
        }
    }
    let next = (i + 1).min(pattern.len());
    (hit != negate, next)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_patterns() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "anything"),
            ("key:*", "key:42"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("a\\*b", "a*b"),
            ("*:*:*", "a:b:c"),
            ("k[\\]]", "k]"),
        ];
        let no: &[(&str, &str)] = &[
            ("key:*", "kex:1"),
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("a\\*b", "axb"),
            ("abc", "abcd"),
            ("", "a"),
        ];
        for (p, k) in yes {
            assert!(matches(p.as_bytes(), k.as_bytes()), "{p} should match {k}");
        }
        for (p, k) in no {
            assert!(!matches(p.as_bytes(), k.as_bytes()), "{p} should not match {k}");
        }
    }

    #[test]
    fn many_stars_stay_fast() {
        let key = vec![b'a'; 4096];
        let mut pattern = b"*a".repeat(64);
        pattern.push(b'b');
        assert!(!matches(&pattern, &key));
    }
}
