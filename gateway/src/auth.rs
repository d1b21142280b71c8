//! AUTH: a password is a cluster token, and only the control plane knows
//! which tokens are good. The gateway asks it (an authenticated status
//! read with the presented token) and remembers a good answer for
//! [`VERDICT_TTL`], so that a token removed from the members' settings
//! stops working soon after, and a connection storm does not become a
//! control-plane storm.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cluster::{ClusterError, Members};

/// How long a token the control plane accepted is taken without asking
/// again.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);

/// Tokens remembered at once: past this the memory is cleared (each is
/// then asked about again).
pub const VERDICTS_MAX: usize = 1024;

/// Failed AUTHs one connection may make before it is closed.
pub const FAILURES_MAX: u32 = 5;

/// Longest password looked at: a token is far shorter; longer ones are
/// refused without asking.
pub const PASSWORD_BYTES_MAX: usize = 1024;

/// What a presented password turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A token of the cluster.
    Good,
    /// Not one.
    Bad,
}

/// Checks passwords against the control plane's tokens.
#[derive(Debug)]
pub struct TokenCheck {
    endpoints: Vec<String>,
    accepted: Mutex<HashMap<Vec<u8>, Instant>>,
}

impl TokenCheck {
    /// Checks against the members at `endpoints`.
    pub fn new(endpoints: Vec<String>) -> TokenCheck {
        TokenCheck {
            endpoints,
            accepted: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `password` is a token of the cluster; an error if the
    /// control plane could not be asked.
    pub async fn check(&self, password: &[u8]) -> Result<Verdict, ClusterError> {
        if password.is_empty() || password.len() > PASSWORD_BYTES_MAX {
            return Ok(Verdict::Bad);
        }
        let Ok(token) = std::str::from_utf8(password) else {
            return Ok(Verdict::Bad);
        };
        if self.remembered(password) {
            return Ok(Verdict::Good);
        }
        let members = match Members::new(&self.endpoints, token) {
            Ok(m) => m,
            // A token that cannot be a header value is no token.
            Err(ClusterError::Refused { .. }) => return Ok(Verdict::Bad),
            Err(e) => return Err(e),
        };
        match members
            .call("checking an AUTH token", |c| async move { c.status().await })
            .await
        {
            Ok(_) => {
                let mut accepted = self.lock();
                if accepted.len() >= VERDICTS_MAX {
                    accepted.clear();
                }
                accepted.insert(password.to_vec(), Instant::now());
                Ok(Verdict::Good)
            }
            Err(e) if e.refused_with(401) || e.refused_with(403) => Ok(Verdict::Bad),
            Err(e) => Err(e),
        }
    }

    fn remembered(&self, password: &[u8]) -> bool {
        self.lock()
            .get(password)
            .is_some_and(|at| at.elapsed() < VERDICT_TTL)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Instant>> {
        // A panic while holding it left a map of plain values: still usable.
        self.accepted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
