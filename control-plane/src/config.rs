//! A member's settings, read from TOML: the cluster secret, the bearer
//! tokens, and the timings (Raft's and the leases'), written as humantime
//! durations (`150ms`, `2s`).
//!
//! ```toml
//! cluster_secret = "a-long-random-string-shared-by-members"
//!
//! [[tokens]]
//! name = "ops"          # recorded as the actor of every command it sends
//! token = "another-long-random-string"
//! role = "admin"        # may also form the cluster and change members
//!                       # ("operator", the default: commands; "client": only
//!                       # registering, renewing and opening indexes)
//!
//! [timing]
//! heartbeat = "50ms"
//! election_timeout_min = "150ms"
//! election_timeout_max = "300ms"
//! memnode_lease = "1s"
//! client_lease = "1s"
//! ```
//!
//! Every member of a cluster should carry the same secret, tokens and
//! timings: a write sent to a follower is forwarded to the leader with the
//! caller's token, and leases are judged by whichever member leads.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::network::{ClusterSecret, SecretError};
use crate::state::{LEASE_MS_MAX, LEASE_MS_MIN, NAME_BYTES_MAX};
use crate::tls::TlsSection;

/// Environment variable a member reads the cluster secret from when it is
/// started without a settings file, and launchers set for their members.
pub const SECRET_ENV: &str = "KINTSUGI_CLUSTER_SECRET";
/// Environment variable holding a bearer token: the one token a member
/// without a settings file accepts, and the one its callers (`kintsugi ctl`,
/// memory nodes, chaos clients) send.
pub const TOKEN_ENV: &str = "KINTSUGI_TOKEN";

/// Shortest bearer token accepted, in bytes, for the reason
/// [`crate::network::SECRET_BYTES_MIN`] gives for the cluster secret.
pub const TOKEN_BYTES_MIN: usize = 16;

/// Tokens one member accepts: each is compared on every request.
pub const TOKENS_MAX: usize = 64;

/// Longest configuration file read, in bytes: a handful of tokens and
/// timings fit in a few KiB; the bound keeps a wrong path (a disk image,
/// `/dev/zero`) from being read whole.
pub const CONFIG_BYTES_MAX: u64 = 1 << 20;

/// Why [`read_bounded`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// It holds more than `max` bytes.
    #[error("more than {max} bytes")]
    TooLarge {
        /// The bound.
        max: u64,
    },
}

/// Reads at most `max` bytes of `path`, refusing a longer file. Bounded by
/// reading, not by the length the file reports: a FIFO or a `/proc` file
/// reports none. What every file an operator names (configs, PEM files,
/// snapshots) is read with.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge { max });
    }
    Ok(bytes)
}

/// Longest `timing.commit_timeout`: a write unanswered for this long has met
/// a cluster that needs an operator, not more patience.
pub const COMMIT_TIMEOUT_MAX: Duration = Duration::from_secs(600);

/// What a member runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Shared by the members: authenticates Raft RPCs and forwarded writes.
    #[serde(with = "secret_string")]
    pub cluster_secret: ClusterSecret,
    /// Bearer tokens of operators and clients.
    pub tokens: Vec<Token>,
    /// Raft and lease timings.
    #[serde(default)]
    pub timing: Timing,
    /// What the leader's recovery coordinator does.
    #[serde(default)]
    pub recovery: RecoverySection,
    /// HTTPS for the API and Raft traffic (every member alike); plain HTTP
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    /// The member daemon's own flags (`kintsugi control`'s `[member]`:
    /// id, listen, advertise, data_dir, metrics_listen), read and checked
    /// by the binary; the members of one cluster differ only here and in
    /// their `[tls]` files.
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub member: toml::Table,
}

/// `[recovery]`: the coordinator that acts on the leader's decisions
/// (crate `recovery`, run by `kintsugi control` while it leads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoverySection {
    /// Run it: evict dead nodes' replicas, rebuild promoted primaries,
    /// roll the logs of expired clients and free their ids.
    pub enabled: bool,
    /// Also make new replicas, on spare nodes, for regions that lost some.
    pub rereplicate: bool,
}

impl Default for RecoverySection {
    fn default() -> Self {
        RecoverySection {
            enabled: true,
            rereplicate: true,
        }
    }
}

/// A bearer token and the name it acts under.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Token {
    /// Who holds it: the actor of the commands it sends, in the audit trail.
    pub name: String,
    /// The token itself: `Authorization: Bearer <token>`.
    pub token: String,
    /// What it may do.
    #[serde(default)]
    pub role: Role,
}

/// What a token may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads, commands and renewals: what operators of memory nodes,
    /// regions and clients, and the nodes and clients themselves, need.
    #[default]
    Operator,
    /// Only what a client process needs: reads, registering itself,
    /// renewing, opening (and creating) named indexes. What a service's
    /// processes should carry.
    Client,
    /// Also forms the cluster and changes its membership. Adding a member
    /// makes the leader send it the log with the cluster secret, so only a
    /// token trusted with the secret may do it.
    Admin,
}

/// Never prints the token itself.
impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("role", &self.role)
            .finish()
    }
}

/// Timings. The defaults elect a new leader well within a second of the old
/// one's death and judge leases at a tenth of their length.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// How often the leader sends (empty) appends to its followers.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// A follower that hears nothing for a random time between these two
    /// starts an election.
    #[serde(with = "humantime_serde")]
    pub election_timeout_min: Duration,
    /// See `election_timeout_min`.
    #[serde(with = "humantime_serde")]
    pub election_timeout_max: Duration,
    /// A memory node unheard for this long becomes suspect, and for twice
    /// this long is declared dead.
    #[serde(with = "humantime_serde")]
    pub memnode_lease: Duration,
    /// Lease of a client that registers without naming one.
    #[serde(with = "humantime_serde")]
    pub client_lease: Duration,
    /// How often the leader compares leases with the clock.
    #[serde(with = "humantime_serde")]
    pub lease_check: Duration,
    /// How long a write may wait to be committed before the caller is told
    /// its outcome is unknown (a leader cut off from its majority never
    /// commits).
    #[serde(with = "humantime_serde")]
    pub commit_timeout: Duration,
    /// Longest wait of one map long-poll.
    #[serde(with = "humantime_serde")]
    pub watch_max: Duration,
}

impl Timing {
    /// Longest wait for a new member to catch up as a learner: it may replay
    /// a long log or stream a snapshot, so far longer than one commit, but
    /// not forever (an unreachable learner never catches up).
    pub fn catch_up_timeout(&self) -> Duration {
        self.commit_timeout * 12
    }

    /// Longest wait for a whole membership change: the catch-up, then one
    /// commit to promote the learner.
    pub fn membership_timeout(&self) -> Duration {
        self.catch_up_timeout() + self.commit_timeout
    }

    /// The longest election these timings plan for: a split vote's second
    /// round (two `election_timeout_max`) and a heartbeat for the new leader
    /// to be heard. Measured: 0.54 to 0.57 s at the default 150 to 300 ms.
    pub fn election_bound(&self) -> Duration {
        self.election_timeout_max * 2 + self.heartbeat
    }

    /// How long a memory node keeps serving after a leader dies, at worst:
    /// it renews every third of its lease and serves until
    /// `liveness::memnode_serves_until` of its last granted renewal.
    pub fn memnode_window(&self) -> Duration {
        let lease = self.memnode_lease;
        // What a renewal grants, less the renewal period.
        crate::liveness::memnode_serving_after_renewal(lease).saturating_sub(lease / 3)
    }

    /// Why these timings let an election stop every memory node's verbs,
    /// if they do: a node's serving window does not outlast
    /// [`Timing::election_bound`], so while a new leader is elected no
    /// renewal is granted and every node stops serving. Warned about at
    /// start-up (chaos experiments choose such timings on purpose).
    pub fn election_outlasted(&self) -> Result<(), String> {
        let (window, bound) = (self.memnode_window(), self.election_bound());
        if window > bound {
            return Ok(());
        }
        // window = 1.75 lease - lease/3 = 17/12 lease.
        let lease_needed = bound * 12 / 17 + Duration::from_millis(1);
        Err(format!(
            "timing: a memory node serves at worst {} past a leader's death (memnode_lease {}), less than \
             an election may take ({}: two election_timeout_max and a heartbeat): every leader change may \
             stop every node's verbs until the new leader renews them. Raise memnode_lease above {} or \
             lower election_timeout_max",
            humantime::format_duration(round_ms(window)),
            humantime::format_duration(self.memnode_lease),
            humantime::format_duration(bound),
            humantime::format_duration(round_ms(lease_needed)),
        ))
    }
}

/// `d` to whole milliseconds, for messages.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(150),
            election_timeout_max: Duration::from_millis(300),
            memnode_lease: Duration::from_secs(1),
            client_lease: Duration::from_secs(1),
            lease_check: Duration::from_millis(20),
            commit_timeout: Duration::from_secs(5),
            watch_max: Duration::from_secs(60),
        }
    }
}

/// Why settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`CONFIG_BYTES_MAX`].
    #[error("{path} has more than {CONFIG_BYTES_MAX} bytes, the most a configuration file has")]
    TooLarge {
        /// The file.
        path: String,
    },
    /// Not TOML of the expected shape (toml names the line and the field).
    #[error("{0}")]
    Parse(#[from] toml::de::Error),
    /// The cluster secret is unusable.
    #[error("cluster_secret: {0}")]
    Secret(#[from] SecretError),
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

impl Settings {
    /// Settings with a secret and one token, default timings.
    pub fn new(cluster_secret: ClusterSecret, tokens: Vec<Token>) -> Result<Self, ConfigError> {
        let settings = Settings {
            cluster_secret,
            tokens,
            timing: Timing::default(),
            recovery: RecoverySection::default(),
            tls: None,
            member: toml::Table::new(),
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Parses and checks TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let settings: Settings = toml::from_str(text)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Reads, parses and checks a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let read_err = |source| ConfigError::Read {
            path: shown.clone(),
            source,
        };
        let bytes = match read_bounded(path, CONFIG_BYTES_MAX) {
            Ok(bytes) => bytes,
            Err(ReadError::Io(e)) => return Err(read_err(e)),
            Err(ReadError::TooLarge { .. }) => return Err(ConfigError::TooLarge { path: shown }),
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            read_err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                e.utf8_error(),
            ))
        })?;
        Self::from_toml(&text)
    }

    /// Checks what serde cannot: token shapes and timing relations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |s: String| Err(ConfigError::Invalid(s));
        if self.tokens.is_empty() {
            return invalid("tokens: at least one bearer token is needed".into());
        }
        if self.tokens.len() > TOKENS_MAX {
            return invalid(format!("tokens: at most {TOKENS_MAX} are accepted"));
        }
        for (i, t) in self.tokens.iter().enumerate() {
            if t.name.is_empty() || t.name.len() > NAME_BYTES_MAX || t.name.chars().any(char::is_control) {
                return invalid(format!(
                    "tokens[{i}].name must be 1 to {NAME_BYTES_MAX} bytes without control characters"
                ));
            }
            if t.token.len() < TOKEN_BYTES_MIN || !t.token.bytes().all(|b| b.is_ascii_graphic()) {
                return invalid(format!(
                    "tokens[{i}].token ({}) must be at least {TOKEN_BYTES_MIN} bytes of visible ASCII",
                    t.name
                ));
            }
            if self.tokens[..i].iter().any(|u| u.token == t.token) {
                return invalid(format!("tokens[{i}] ({}) repeats an earlier token", t.name));
            }
        }
        let t = &self.timing;
        if t.heartbeat.is_zero() || t.lease_check.is_zero() || t.commit_timeout.is_zero() {
            return invalid("timing: heartbeat, lease_check and commit_timeout must be above zero".into());
        }
        if t.election_timeout_min <= t.heartbeat {
            return invalid(format!(
                "timing: election_timeout_min ({}) must exceed heartbeat ({}), or followers \
                 start elections between heartbeats",
                humantime::format_duration(t.election_timeout_min),
                humantime::format_duration(t.heartbeat)
            ));
        }
        if t.election_timeout_max <= t.election_timeout_min {
            return invalid("timing: election_timeout_max must exceed election_timeout_min".into());
        }
        for (what, d) in [
            ("memnode_lease", t.memnode_lease),
            ("client_lease", t.client_lease),
        ] {
            let ms = d.as_millis();
            if ms < u128::from(LEASE_MS_MIN) || ms > u128::from(LEASE_MS_MAX) {
                return invalid(format!(
                    "timing: {what} must be {LEASE_MS_MIN} ms to {LEASE_MS_MAX} ms, not {}",
                    humantime::format_duration(d)
                ));
            }
        }
        // `membership_timeout` is 13 commit timeouts: keep that (and
        // every multiple taken of it) far from overflowing.
        if t.commit_timeout > COMMIT_TIMEOUT_MAX {
            return invalid(format!(
                "timing: commit_timeout must be at most {}",
                humantime::format_duration(COMMIT_TIMEOUT_MAX)
            ));
        }
        if t.watch_max.is_zero() {
            return invalid("timing: watch_max must be above zero".into());
        }
        Ok(())
    }

    /// The holder of `presented`, if it is one of the tokens. Every token is
    /// compared in full, so the time taken does not tell which one (or how
    /// much of one) matched.
    pub fn token_holder(&self, presented: &[u8]) -> Option<&Token> {
        let mut holder = None;
        for t in &self.tokens {
            if constant_time_eq(t.token.as_bytes(), presented) && holder.is_none() {
                holder = Some(t);
            }
        }
        holder
    }

    /// openraft's configuration for these timings.
    pub fn raft_config(&self) -> Result<openraft::Config, ConfigError> {
        let t = &self.timing;
        let config = openraft::Config {
            cluster_name: "kintsugi-control".to_owned(),
            heartbeat_interval: millis(t.heartbeat),
            election_timeout_min: millis(t.election_timeout_min),
            election_timeout_max: millis(t.election_timeout_max),
            // A control-plane command is a few hundred bytes of JSON: a
            // snapshot every 5,000 entries bounds both the log kept on disk
            // and the entries a restarted member replays.
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(5_000),
            max_in_snapshot_log_to_keep: 1_000,
            ..Default::default()
        };
        config
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("timing: {e}")))
    }
}

/// A duration in whole milliseconds, saturating: what leases and openraft's
/// settings are counted in.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Equality in time that depends only on the lengths.
pub(crate) fn constant_time_eq(expected: &[u8], presented: &[u8]) -> bool {
    if presented.len() != expected.len() {
        return false;
    }
    let diff = expected
        .iter()
        .zip(presented)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    // Keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// `serde(with)`: the secret as a plain string in TOML, checked on the way in.
mod secret_string {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::network::ClusterSecret;

    pub fn serialize<S: Serializer>(secret: &ClusterSecret, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(secret.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ClusterSecret, D::Error> {
        let s = String::deserialize(d)?;
        ClusterSecret::new(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
cluster_secret = "0123456789abcdef-secret"
[[tokens]]
name = "ops"
token = "ops-token-0123456789"
role = "admin"
[[tokens]]
name = "client"
token = "client-token-0123456789"
[timing]
memnode_lease = "2s"
"#;

    #[test]
    fn timings_whose_memory_node_lease_cannot_outlast_an_election_are_named() {
        let t = Timing::default();
        assert_eq!(t.election_bound(), Duration::from_millis(650));
        assert_eq!(round_ms(t.memnode_window()), Duration::from_millis(1416));
        assert_eq!(t.election_outlasted(), Ok(()));
        let short = Timing {
            memnode_lease: Duration::from_millis(250),
            ..Timing::default()
        };
        let why = short
            .election_outlasted()
            .expect_err("250 ms leases stop at an election");
        assert!(
            why.contains("serves at worst 354ms") && why.contains("(650ms") && why.contains("above 459ms"),
            "{why}"
        );
        let enough = Timing {
            memnode_lease: Duration::from_millis(459),
            ..Timing::default()
        };
        assert_eq!(enough.election_outlasted(), Ok(()));
    }

    #[test]
    fn parses_tokens_and_humantime_timings_with_defaults_for_the_rest() {
        let s = Settings::from_toml(GOOD).expect("valid");
        assert_eq!(s.timing.memnode_lease, Duration::from_secs(2));
        assert_eq!(s.timing.heartbeat, Timing::default().heartbeat);
        let holder = |t: &[u8]| s.token_holder(t).map(|t| (t.name.as_str(), t.role));
        assert_eq!(holder(b"ops-token-0123456789"), Some(("ops", Role::Admin)));
        assert_eq!(
            holder(b"client-token-0123456789"),
            Some(("client", Role::Operator))
        );
        assert_eq!(s.token_holder(b"ops-token-012345678"), None);
        assert_eq!(s.token_holder(b""), None);
        let raft = s.raft_config().expect("valid raft config");
        assert_eq!(raft.heartbeat_interval, 50);
        assert!(
            !format!("{s:?}").contains("ops-token-0123456789"),
            "tokens are redacted"
        );
        assert!(
            !format!("{s:?}").contains("0123456789abcdef-secret"),
            "secret is redacted"
        );
    }

    #[test]
    fn refuses_bad_settings_with_a_reason() {
        let cases = [
            (GOOD.replace("0123456789abcdef-secret", "short"), "cluster secret"),
            (
                GOOD.replace("ops-token-0123456789", "tiny"),
                "tokens[0].token (ops)",
            ),
            (
                GOOD.replace("client-token-0123456789", "ops-token-0123456789"),
                "repeats",
            ),
            (GOOD.replace("\"2s\"", "\"2 parsecs\""), "memnode_lease"),
            (GOOD.replace("\"2s\"", "\"2h\""), "memnode_lease must be"),
            (GOOD.replace("memnode_lease", "memnode_leash"), "unknown field"),
            (
                format!("{GOOD}heartbeat = \"500ms\"\n"),
                "election_timeout_min (150ms) must exceed heartbeat (500ms)",
            ),
            (
                "cluster_secret = \"0123456789abcdef-secret\"\ntokens = []".into(),
                "at least one",
            ),
        ];
        for (text, want) in cases {
            let err = Settings::from_toml(&text).expect_err(&text).to_string();
            assert!(err.contains(want), "{err:?} should mention {want:?}");
        }
    }

    #[test]
    fn a_bounded_read_stops_past_its_bound_whatever_the_file_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").expect("write");
        assert_eq!(read_bounded(&path, 5).expect("fits"), b"12345");
        assert!(matches!(
            read_bounded(&path, 4),
            Err(ReadError::TooLarge { max: 4 })
        ));
        // A file whose reported length is 0 (procfs) is still bounded.
        let proc = Path::new("/proc/self/status");
        if proc.exists() {
            assert!(matches!(
                read_bounded(proc, 8),
                Err(ReadError::TooLarge { max: 8 })
            ));
        }
    }

    #[test]
    fn load_names_the_file_and_bounds_its_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.toml");
        let err = Settings::load(&missing).expect_err("missing").to_string();
        assert!(err.contains("missing.toml"), "{err}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; CONFIG_BYTES_MAX as usize + 1]).expect("write");
        let err = Settings::load(&big).expect_err("too large").to_string();
        assert!(err.contains("more than"), "{err}");
        let good = dir.path().join("good.toml");
        std::fs::write(&good, GOOD).expect("write");
        assert_eq!(Settings::load(&good).expect("loads").tokens.len(), 2);
    }
}
