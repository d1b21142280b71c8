//! Numbers for people: thousands separators, microseconds, percentages, lease ticks as ms.

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

/// Lease ticks (1/256 ms) as milliseconds with two decimals (`8.10ms`).
pub fn tick_millis(ticks: i64) -> String {
    format!("{:.2}ms", txn::lease::ms_from_ticks(ticks))
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
        assert_eq!(tick_millis(2074), "8.10ms");
        assert_eq!(tick_millis(0), "0.00ms");
        assert_eq!(tick_millis(256), "1.00ms");
    }
}
