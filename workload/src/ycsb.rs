//! The YCSB core workloads as the rTX paper uses them (Table 1), and their
//! request distributions.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Longest scan: scan lengths are uniform in `[1, MAX_SCAN_LENGTH]`.
pub const MAX_SCAN_LENGTH: usize = 100;

/// A YCSB core workload, with the operation mix of the rTX paper's Table 1.
///
/// Parsed case-insensitively from `"a"` ... `"e"` and `"insert"` (or
/// `"load"`); displayed lowercase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Update heavy: 50% read, 50% update.
    A,
    /// Read mostly: 90% read, 10% update (the rTX paper's Table 1; stock
    /// YCSB B is 95/5).
    B,
    /// Read only: 100% read.
    C,
    /// Read latest: 95% read, 5% insert; reads favour the latest inserts
    /// whatever the [`Distribution`].
    D,
    /// Short ranges: 95% scan, 5% insert; scans cover `[1, 100]` keys.
    E,
    /// Inserts only (YCSB's load phase; the rTX paper's Figures 14 and 15).
    /// Not one of [`Workload::ALL`].
    Insert,
}

/// Percentages of each operation in a workload (they sum to 100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mix {
    /// Point reads of an existing key.
    pub read: u32,
    /// Overwrites of an existing key.
    pub update: u32,
    /// Inserts of a new key.
    pub insert: u32,
    /// Range scans from an existing key.
    pub scan: u32,
}

impl Workload {
    /// All five, in order.
    pub const ALL: [Workload; 5] = [Workload::A, Workload::B, Workload::C, Workload::D, Workload::E];

    /// The operation mix (Table 1 of the rTX paper).
    pub const fn mix(self) -> Mix {
        let (read, update, insert, scan) = match self {
            Workload::A => (50, 50, 0, 0),
            Workload::B => (90, 10, 0, 0),
            Workload::C => (100, 0, 0, 0),
            Workload::D => (95, 0, 5, 0),
            Workload::E => (0, 0, 5, 95),
            Workload::Insert => (0, 0, 100, 0),
        };
        Mix {
            read,
            update,
            insert,
            scan,
        }
    }

    /// Whether the workload inserts new keys (D, E and Insert).
    pub const fn inserts(self) -> bool {
        self.mix().insert > 0
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::D => "d",
            Workload::E => "e",
            Workload::Insert => "insert",
        })
    }
}

impl FromStr for Workload {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "a" => Ok(Workload::A),
            "b" => Ok(Workload::B),
            "c" => Ok(Workload::C),
            "d" => Ok(Workload::D),
            "e" => Ok(Workload::E),
            "insert" | "load" => Ok(Workload::Insert),
            _ => Err(ParseError::Workload(s.to_owned())),
        }
    }
}

/// How existing keys are chosen for reads, updates and scan starts.
///
/// Parsed case-insensitively from `"uniform"`, `"zipf"` or `"zipfian"`;
/// displayed as `uniform` / `zipf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every loaded record equally likely.
    Uniform,
    /// YCSB's scrambled Zipfian with θ = 0.99: popularity by rank follows
    /// Zipf's law and ranks are mapped to records by a seeded permutation,
    /// so hot keys are spread over the key space.
    Zipf,
}

impl Distribution {
    /// Both, in order.
    pub const ALL: [Distribution; 2] = [Distribution::Uniform, Distribution::Zipf];
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipf => "zipf",
        })
    }
}

impl FromStr for Distribution {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "uniform" => Ok(Distribution::Uniform),
            "zipf" | "zipfian" => Ok(Distribution::Zipf),
            _ => Err(ParseError::Distribution(s.to_owned())),
        }
    }
}

/// A workload or distribution name that is not one of the known ones.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not `a`..`e`.
    #[error("unknown YCSB workload {0:?}: expected one of a, b, c, d, e")]
    Workload(String),
    /// Not `uniform`, `zipf` or `zipfian`.
    #[error("unknown request distribution {0:?}: expected uniform, zipf or zipfian")]
    Distribution(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_are_table_1() {
        for w in Workload::ALL {
            let m = w.mix();
            assert_eq!(m.read + m.update + m.insert + m.scan, 100, "{w}");
        }
        assert_eq!(
            Workload::B.mix(),
            Mix {
                read: 90,
                update: 10,
                insert: 0,
                scan: 0
            }
        );
        assert!(Workload::D.inserts() && Workload::E.inserts() && !Workload::A.inserts());
    }

    #[test]
    fn workloads_parse_and_display() {
        for w in Workload::ALL {
            assert_eq!(w.to_string().parse::<Workload>(), Ok(w));
            assert_eq!(w.to_string().to_uppercase().parse::<Workload>(), Ok(w));
        }
        let err = "f".parse::<Workload>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown YCSB workload \"f\": expected one of a, b, c, d, e"
        );
        assert!("".parse::<Workload>().is_err());
        assert!("ab".parse::<Workload>().is_err());
    }

    #[test]
    fn distributions_parse_and_display() {
        for d in Distribution::ALL {
            assert_eq!(d.to_string().parse::<Distribution>(), Ok(d));
        }
        assert_eq!("Zipfian".parse::<Distribution>(), Ok(Distribution::Zipf));
        assert_eq!("UNIFORM".parse::<Distribution>(), Ok(Distribution::Uniform));
        let err = "latest".parse::<Distribution>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown request distribution \"latest\": expected uniform, zipf or zipfian"
        );
    }
}
