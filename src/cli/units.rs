//! Parsers for command-line values with units.

use std::time::Duration;

use fabric::RegionSpec;

/// A byte size such as `4096`, `64KiB`, `1GiB` or `1.5 MB`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size::parse_size(s).map_err(|e| format!("'{s}' is not a size ({e}); try 4096, 64KiB or 1GiB"))
}

/// A duration such as `5s`, `200ms` or `1m 30s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration ({e}); try 5s or 200ms"))
}

/// A region as `ID:SIZE`, e.g. `1:1GiB`.
pub fn parse_region(s: &str) -> Result<RegionSpec, String> {
    let (id, size) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}' is not ID:SIZE, e.g. 1:1GiB"))?;
    let id = id
        .trim()
        .parse::<u16>()
        .map_err(|_| format!("region id '{id}' is not a number from 0 to 65535"))?;
    let size = parse_bytes(size.trim())?;
    if size % 8 != 0 {
        return Err(format!("region size {size} is not a multiple of 8 bytes"));
    }
    Ok(RegionSpec { id, size })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_regions() {
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_region("3:1MiB"), Ok(RegionSpec { id: 3, size: 1 << 20 }));
        assert!(parse_region("3").is_err());
        assert!(parse_region("x:1MiB").is_err());
        assert!(parse_region("70000:1MiB").is_err());
        assert!(parse_region("1:13").is_err());
        assert!(parse_duration("200ms").is_ok());
        assert!(parse_duration("soon").is_err());
    }
}
