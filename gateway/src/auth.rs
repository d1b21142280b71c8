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
/// How long a password the control plane refused is refused again without
/// asking: wrong passwords, guessed or retried in a loop, cost the control
/// plane one request per password and ten seconds, not one per attempt. A
/// token added to the members' settings meanwhile works after as long.
pub const REFUSAL_TTL: Duration = Duration::from_secs(10);

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
    /// The negative cache: passwords refused lately.
    refused: Mutex<HashMap<Vec<u8>, Instant>>,
    /// Control-plane requests made to check passwords.
    asked: std::sync::atomic::AtomicU64,
}

impl TokenCheck {
    /// Checks against the members at `endpoints`.
    pub fn new(endpoints: Vec<String>) -> TokenCheck {
        TokenCheck {
            endpoints,
            accepted: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            asked: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Control-plane requests made so far to check passwords.
    pub fn asked(&self) -> u64 {
        self.asked.load(std::sync::atomic::Ordering::Relaxed)
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
        if recent(&self.refused, password, REFUSAL_TTL) {
            return Ok(Verdict::Bad);
        }
        self.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
                remember(&self.accepted, password);
                Ok(Verdict::Good)
            }
            Err(e) if e.refused_with(401) || e.refused_with(403) => {
                remember(&self.refused, password);
                Ok(Verdict::Bad)
            }
            Err(e) => Err(e),
        }
    }

    fn remembered(&self, password: &[u8]) -> bool {
        recent(&self.accepted, password, VERDICT_TTL)
    }
}

/// Whether `password` is in `cache` since less than `ttl`.
fn recent(cache: &Mutex<HashMap<Vec<u8>, Instant>>, password: &[u8], ttl: Duration) -> bool {
    lock_map(cache).get(password).is_some_and(|at| at.elapsed() < ttl)
}

/// Puts `password` in `cache` now, clearing it first when full.
fn remember(cache: &Mutex<HashMap<Vec<u8>, Instant>>, password: &[u8]) {
    let mut c = lock_map(cache);
    if c.len() >= VERDICTS_MAX {
        c.clear();
    }
    c.insert(password.to_vec(), Instant::now());
}

fn lock_map(m: &Mutex<HashMap<Vec<u8>, Instant>>) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Instant>> {
    // A panic while holding it left a map of plain values: still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A control-plane member that refuses every token (401) and counts
    /// the requests it gets.
    async fn refusing_member() -> (String, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let asked = Arc::new(AtomicU64::new(0));
        let counted = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        let Ok(n) = s.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        req.extend_from_slice(&buf[..n]);
                        if req.windows(4).any(|w| w == b"\r\n\r\n") {
                            counted.fetch_add(1, Ordering::Relaxed);
                            req.clear();
                            let body = br#"{"error":"unknown bearer token"}"#;
                            let head = format!(
                                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                                body.len()
                            );
                            let _ = s.write_all(head.as_bytes()).await;
                            let _ = s.write_all(body).await;
                        }
                    }
                });
            }
        });
        (addr, asked)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_password_tried_again_and_again_costs_the_control_plane_one_request() {
        let (member, requests) = refusing_member().await;
        let check = TokenCheck::new(vec![member]);
        for _ in 0..100 {
            assert_eq!(
                check.check(b"wrong-password-0123456789").await.unwrap(),
                Verdict::Bad
            );
        }
        assert_eq!(check.asked(), 1);
        assert_eq!(requests.load(Ordering::Relaxed), 1);
        // Another wrong password is asked about once too.
        assert_eq!(
            check.check(b"another-wrong-one-0123456789").await.unwrap(),
            Verdict::Bad
        );
        assert_eq!(check.asked(), 2);
        // Too long, empty or not UTF-8: refused without asking.
        assert_eq!(
            check.check(&[b'x'; PASSWORD_BYTES_MAX + 1]).await.unwrap(),
            Verdict::Bad
        );
        assert_eq!(check.check(b"").await.unwrap(), Verdict::Bad);
        assert_eq!(check.check(&[0xff, 0xfe]).await.unwrap(), Verdict::Bad);
        assert_eq!(check.asked(), 2);
    }
}
