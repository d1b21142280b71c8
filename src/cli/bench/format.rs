//! Numbers for people: thousands separators, microseconds, percentages.

/// A count or rate with thousands separators, rounded to an integer.
pub fn thousands(x: f64) -> String {
    let n = x.round().max(0.0) as u64;
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Microseconds with 3 significant-ish digits.
pub fn micros(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 1000.0 {
        format!("{us:.1}")
    } else {
        thousands(us)
    }
}

/// A fraction as a percentage; tiny non-zero ones keep a digit that shows it.
pub fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p == 0.0 {
        "0%".to_owned()
    } else if p < 0.01 {
        format!("{p:.3}%")
    } else {
        format!("{p:.2}%")
    }
}

/// Milliseconds as ms or s.
pub fn millis(ms: i64) -> String {
    if ms.abs() < 10_000 {
        format!("{ms}ms")
    } else {
        format!("{:.0}s", ms as f64 / 1e3)
    }
}

/// A duration in whole units where it has them (`8ms`, `100µs`).
pub fn duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(micros(1.234), "1.23");
        assert_eq!(micros(123.45), "123.5");
        assert_eq!(micros(12_345.0), "12,345");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.00001), "0.001%");
        assert_eq!(percent(0.475), "47.50%");
        assert_eq!(millis(12), "12ms");
        assert_eq!(millis(1_561_255), "1561s");
    }
}
