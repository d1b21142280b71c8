//! Every line two kintsugi processes exchange on a pipe, defined once:
//! each enum encodes with `Display` and parses with `FromStr`, and the
//! parser refuses anything that is not exactly one of its lines (a count
//! that does not parse is an error, never 0).
//!
//! | from → to               | enum            | lines                                   |
//! |-------------------------|-----------------|-----------------------------------------|
//! | server → its starter    | [`ServerLine`]  | `listening ADDR`, `metrics ADDR`        |
//! | chaos client → runner   | [`ClientLine`]  | `ready`, `b BUCKET OPS`, `done OPS REPAIRS`, `blocked TEXT`, `error TEXT` |
//! | runner → chaos client   | [`RunnerLine`]  | `go UNIX_NS`, `die`, `pause`            |

use std::fmt;
use std::str::FromStr;

/// A line that is none of the lines its reader expects.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("expected {expected}, got {line:?}")]
pub struct LineError {
    /// The lines the reader accepts.
    pub expected: &'static str,
    /// What it read (without its line end).
    pub line: String,
}

/// What a server (`kintsugi memnode`, `kintsugi control`) prints on stdout
/// once it serves: its bound address, useful with port 0. It is the
/// server's first line; a starter that reads anything else reports it.
/// With `--metrics-listen`, the metrics listener's address follows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerLine {
    /// `listening ADDR`.
    Listening(String),
    /// `metrics ADDR`: where `/metrics` and `/healthz` are served.
    Metrics(String),
}

/// What a chaos client process tells its runner on stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientLine {
    /// Every thread has opened the index.
    Ready,
    /// A thread completed `ops` ops in `bucket` (several lines of one
    /// bucket add up), said when it moves past the bucket.
    Bucket {
        /// Bucket number since the common start.
        bucket: u64,
        /// Ops completed in it.
        ops: u64,
    },
    /// The run is over: ops completed and locks of others repaired.
    Done {
        /// Ops of every thread.
        ops: u64,
        /// Repairs of every thread.
        repairs: u64,
    },
    /// An op gave up on a lock nobody released.
    Blocked(String),
    /// An op failed otherwise; the client exits 1.
    Error(String),
}

/// What a chaos runner tells a client process on stdin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerLine {
    /// Start: the common start time, in ns since the Unix epoch.
    Go {
        /// The start, Unix ns.
        t0_ns: u64,
    },
    /// Die right after the next CAS that swaps (a kill-client fault).
    Die,
    /// SIGSTOP the process right after the next CAS that swaps (a
    /// pause-client fault; the runner sends SIGCONT).
    Pause,
}

impl fmt::Display for ServerLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerLine::Listening(addr) => write!(f, "listening {addr}"),
            ServerLine::Metrics(addr) => write!(f, "metrics {addr}"),
        }
    }
}

impl FromStr for ServerLine {
    type Err = LineError;

    fn from_str(line: &str) -> Result<Self, LineError> {
        let bad = || LineError {
            expected: "`listening ADDR` or `metrics ADDR`",
            line: line.trim_end().to_owned(),
        };
        match words(line).as_slice() {
            ["listening", addr] => Ok(ServerLine::Listening((*addr).to_owned())),
            ["metrics", addr] => Ok(ServerLine::Metrics((*addr).to_owned())),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for ClientLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientLine::Ready => f.write_str("ready"),
            ClientLine::Bucket { bucket, ops } => write!(f, "b {bucket} {ops}"),
            ClientLine::Done { ops, repairs } => write!(f, "done {ops} {repairs}"),
            ClientLine::Blocked(text) => write!(f, "blocked {}", one_line(text)),
            ClientLine::Error(text) => write!(f, "error {}", one_line(text)),
        }
    }
}

impl FromStr for ClientLine {
    type Err = LineError;

    fn from_str(line: &str) -> Result<Self, LineError> {
        let bad = || LineError {
            expected: "`ready`, `b BUCKET OPS`, `done OPS REPAIRS`, `blocked TEXT` or `error TEXT`",
            line: line.trim_end().to_owned(),
        };
        let text = |word: &str| line.trim().strip_prefix(word).map(|t| t.trim().to_owned());
        match words(line).as_slice() {
            ["ready"] => Ok(ClientLine::Ready),
            ["b", b, n] => Ok(ClientLine::Bucket {
                bucket: b.parse().map_err(|_| bad())?,
                ops: n.parse().map_err(|_| bad())?,
            }),
            ["done", n, r] => Ok(ClientLine::Done {
                ops: n.parse().map_err(|_| bad())?,
                repairs: r.parse().map_err(|_| bad())?,
            }),
            ["blocked", ..] => text("blocked").map(ClientLine::Blocked).ok_or_else(bad),
            ["error", ..] => text("error").map(ClientLine::Error).ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for RunnerLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunnerLine::Go { t0_ns } => write!(f, "go {t0_ns}"),
            RunnerLine::Die => f.write_str("die"),
            RunnerLine::Pause => f.write_str("pause"),
        }
    }
}

impl FromStr for RunnerLine {
    type Err = LineError;

    fn from_str(line: &str) -> Result<Self, LineError> {
        let bad = || LineError {
            expected: "`go UNIX_NS`, `die` or `pause`",
            line: line.trim_end().to_owned(),
        };
        match words(line).as_slice() {
            ["go", t] => Ok(RunnerLine::Go {
                t0_ns: t.parse().map_err(|_| bad())?,
            }),
            ["die"] => Ok(RunnerLine::Die),
            ["pause"] => Ok(RunnerLine::Pause),
            _ => Err(bad()),
        }
    }
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// A free text on one line: a line break would start a line of its own
/// on the reader's side.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<L>(lines: &[L])
    where
        L: fmt::Display + FromStr<Err = LineError> + PartialEq + fmt::Debug,
    {
        for l in lines {
            let text = l.to_string();
            assert!(!text.contains('\n'), "{text:?}");
            assert_eq!(&text.parse::<L>().unwrap_or_else(|e| panic!("{e}")), l);
            // A reader gets the line with its end.
            assert_eq!(
                &format!("{text}\n").parse::<L>().unwrap_or_else(|e| panic!("{e}")),
                l
            );
        }
    }

    #[test]
    fn every_line_parses_back_to_itself() {
        round_trip(&[
            ServerLine::Listening("127.0.0.1:7100".into()),
            ServerLine::Metrics("127.0.0.1:9100".into()),
        ]);
        round_trip(&[
            ClientLine::Ready,
            ClientLine::Bucket { bucket: 0, ops: 0 },
            ClientLine::Bucket {
                bucket: 7,
                ops: u64::MAX,
            },
            ClientLine::Done { ops: 12, repairs: 3 },
            ClientLine::Blocked("insert failed: blocked on 1:4096".into()),
            ClientLine::Error("cannot open the heap".into()),
            ClientLine::Error(String::new()),
        ]);
        round_trip(&[
            RunnerLine::Go {
                t0_ns: 1_700_000_000_000_000_000,
            },
            RunnerLine::Die,
            RunnerLine::Pause,
        ]);
    }

    #[test]
    fn the_encoding_is_the_documented_text() {
        assert_eq!(
            ServerLine::Listening("[::1]:9".into()).to_string(),
            "listening [::1]:9"
        );
        assert_eq!(
            ServerLine::Metrics("[::1]:9".into()).to_string(),
            "metrics [::1]:9"
        );
        assert_eq!(ClientLine::Bucket { bucket: 4, ops: 10 }.to_string(), "b 4 10");
        assert_eq!(ClientLine::Done { ops: 5, repairs: 1 }.to_string(), "done 5 1");
        assert_eq!(RunnerLine::Go { t0_ns: 9 }.to_string(), "go 9");
        assert_eq!(ClientLine::Error("a\nb".into()).to_string(), "error a b");
    }

    #[test]
    fn malformed_lines_are_errors_not_zeroes() {
        for bad in [
            "",
            "listening",
            "listening a b",
            "metrics",
            "metrics a b",
            "LISTENING x",
            "serving 127.0.0.1:1",
        ] {
            assert!(bad.parse::<ServerLine>().is_err(), "{bad:?}");
        }
        for bad in [
            "",
            "ready now",
            "b",
            "b 1",
            "b x 2",
            "b 1 -2",
            "b 1 2 3",
            "done",
            "done 5",
            "done 5 x",
            "done x 1",
            "go 1",
            "ok",
            "blockedx",
            "errors 1",
        ] {
            let e = bad.parse::<ClientLine>().unwrap_err();
            assert_eq!(e.line, bad, "{bad:?}");
        }
        for bad in ["", "go", "go -1", "go 1 2", "go soon", "die now", "stop", "ready"] {
            assert!(bad.parse::<RunnerLine>().is_err(), "{bad:?}");
        }
    }
}
