//! Leases of memory nodes and clients, judged by the leader.
//!
//! Renewals are frequent and carry no decision, so they stay out of the log:
//! the leader notes when it last heard from each memory node and client, in
//! memory. Only the decisions go through Raft: a memory node becomes active
//! (it was heard), suspect (one lease of silence) or dead (two); a client is
//! expired (one of its own leases of silence). A refused decision changes
//! nothing, so proposing one twice is harmless, but the driver in
//! [`crate::member`] proposes them one at a time and re-reads the state
//! between, so each is proposed once.
//!
//! The grace rule: renewals are heard only by the leader, so a new leader
//! knows nothing of what its predecessor heard. It counts every lease from
//! the moment it took office, never from earlier, and so declares nobody
//! dead or expired before one full lease has passed under it. A client that
//! renewed at the old leader an instant before the change is therefore
//! judged no earlier than it would have been by the old leader.
//!
//! This module is pure (time is an argument) so tests can walk it through
//! any schedule.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::state::{ClientId, ClientState, Command, ControlState, MemNodeId, MemNodeState};

/// What the leader has heard, and since when it has been listening.
#[derive(Debug)]
pub struct Liveness {
    memnode_lease: Duration,
    /// When this member took office; `None` while it does not lead.
    since: Option<Instant>,
    memnodes: HashMap<MemNodeId, Instant>,
    clients: HashMap<ClientId, Instant>,
}

impl Liveness {
    /// A tracker that does not lead yet; memory nodes hold leases of
    /// `memnode_lease` (clients carry their own lease length).
    pub fn new(memnode_lease: Duration) -> Self {
        assert!(!memnode_lease.is_zero(), "a zero lease lapses as it is granted");
        Liveness {
            memnode_lease,
            since: None,
            memnodes: HashMap::new(),
            clients: HashMap::new(),
        }
    }

    /// This member took office at `now`: every lease counts from here.
    /// Renewals it noted since it last followed stay: they reached it as
    /// leader (the API sends renewals only to the leader), just before it
    /// noticed its own election.
    pub fn lead(&mut self, now: Instant) {
        self.since = Some(now);
    }

    /// This member no longer leads: what it heard will be heard again by
    /// the next leader.
    pub fn follow(&mut self) {
        self.since = None;
        self.memnodes.clear();
        self.clients.clear();
    }

    /// True between [`Liveness::lead`] and [`Liveness::follow`].
    pub fn is_leading(&self) -> bool {
        self.since.is_some()
    }

    /// Memory node `id` renewed its lease at `now`.
    pub fn renew_memnode(&mut self, id: MemNodeId, now: Instant) {
        self.memnodes.insert(id, now);
    }

    /// Client `id` renewed its lease at `now`.
    pub fn renew_client(&mut self, id: ClientId, now: Instant) {
        self.clients.insert(id, now);
    }

    /// The decisions due at `now` given the applied `state`, in a stable
    /// order (memory nodes by id, then clients by id). Empty unless leading.
    ///
    /// Also forgets renewals of memory nodes and clients the state no
    /// longer knows, so the tables stay as small as the state.
    pub fn decisions(&mut self, now: Instant, state: &ControlState) -> Vec<Command> {
        let Some(since) = self.since else {
            return Vec::new();
        };
        self.memnodes.retain(|id, _| state.memnodes.contains_key(id));
        self.clients.retain(|id, _| state.clients.contains_key(id));
        // Silence is counted from the last renewal, or from taking office
        // when that is later (the grace rule).
        let silence =
            |heard: Option<Instant>| now.saturating_duration_since(heard.map_or(since, |h| h.max(since)));
        let lease = self.memnode_lease;
        let mut out = Vec::new();
        for n in state.memnodes.values() {
            let heard = self.memnodes.get(&n.id).copied();
            let quiet = silence(heard);
            let id = n.id;
            match n.state {
                MemNodeState::Joining | MemNodeState::Suspect if heard.is_some() && quiet < lease => {
                    out.push(Command::ActivateMemNode { id });
                }
                MemNodeState::Active if quiet >= lease => out.push(Command::SuspectMemNode { id }),
                MemNodeState::Suspect if quiet >= 2 * lease => {
                    out.push(Command::DeclareMemNodeDead { id });
                }
                _ => {}
            }
        }
        for c in state.clients.values() {
            if c.state != ClientState::Live {
                continue;
            }
            let quiet = silence(self.clients.get(&c.id).copied());
            if quiet >= Duration::from_millis(c.lease_ms) {
                out.push(Command::ExpireClient { id: c.id });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Outcome, Request};

    const LEASE: Duration = Duration::from_millis(100);

    fn apply(state: &mut ControlState, command: Command) -> Outcome {
        let req = Request {
            at_ms: 0,
            actor: "test".into(),
            nonce: 1,
            command,
        };
        state.apply(&req).expect("applies")
    }

    /// A state with memory node 0 (joining) and client 0 (lease 100 ms).
    fn state() -> ControlState {
        let mut s = ControlState::default();
        apply(
            &mut s,
            Command::RegisterMemNode {
                endpoint: "mn0:1".into(),
                capacity_bytes: 1 << 20,
            },
        );
        apply(
            &mut s,
            Command::RegisterClient {
                name: "c".into(),
                owner_ids: 1,
                lease_ms: 100,
            },
        );
        s
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_follower_decides_nothing() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        assert!(l.decisions(t0 + ms(10_000), &state()).is_empty());
        l.lead(t0);
        l.follow();
        assert!(!l.is_leading());
        assert!(l.decisions(t0 + ms(10_000), &state()).is_empty());
    }

    #[test]
    fn a_new_leader_waits_one_full_lease_before_expiring_a_silent_client() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let s = state();
        l.lead(t0);
        assert!(l.decisions(t0 + ms(99), &s).is_empty(), "within the grace lease");
        assert_eq!(
            l.decisions(t0 + ms(100), &s),
            vec![Command::ExpireClient { id: 0 }]
        );
    }

    #[test]
    fn renewals_keep_a_client_live_and_one_heard_before_office_does_not_shorten_grace() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        // Heard long before taking office: the grace rule counts from office.
        l.lead(t0 + ms(500));
        l.renew_client(0, t0);
        assert!(l.decisions(t0 + ms(599), &s).is_empty());
        for i in 1..=10 {
            l.renew_client(0, t0 + ms(500 + 50 * i));
            assert!(l.decisions(t0 + ms(500 + 50 * i + 99), &s).is_empty());
        }
        let last = t0 + ms(1000);
        assert_eq!(
            l.decisions(last + ms(100), &s),
            vec![Command::ExpireClient { id: 0 }]
        );
        // Once the decision is applied it is not proposed again.
        apply(&mut s, Command::ExpireClient { id: 0 });
        assert!(l.decisions(last + ms(10_000), &s).is_empty());
    }

    #[test]
    fn a_memnode_is_activated_when_heard_then_suspect_then_dead() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        l.lead(t0);
        l.renew_client(0, t0 + ms(10_000)); // keep the client out of the picture
        assert!(
            l.decisions(t0 + ms(50), &s).is_empty(),
            "joining and unheard: nothing"
        );
        l.renew_memnode(0, t0 + ms(50));
        assert_eq!(
            l.decisions(t0 + ms(60), &s),
            vec![Command::ActivateMemNode { id: 0 }]
        );
        apply(&mut s, Command::ActivateMemNode { id: 0 });
        assert!(l.decisions(t0 + ms(149), &s).is_empty());
        assert_eq!(
            l.decisions(t0 + ms(150), &s),
            vec![Command::SuspectMemNode { id: 0 }]
        );
        apply(&mut s, Command::SuspectMemNode { id: 0 });
        assert!(l.decisions(t0 + ms(249), &s).is_empty());
        assert_eq!(
            l.decisions(t0 + ms(250), &s),
            vec![Command::DeclareMemNodeDead { id: 0 }]
        );
        // A suspect that is heard again comes back.
        l.renew_memnode(0, t0 + ms(200));
        assert_eq!(
            l.decisions(t0 + ms(210), &s),
            vec![Command::ActivateMemNode { id: 0 }]
        );
    }

    #[test]
    fn forgets_renewals_of_what_the_state_no_longer_knows() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        l.lead(t0);
        l.renew_client(7, t0);
        l.renew_memnode(9, t0);
        let _ = l.decisions(t0, &state());
        assert!(l.clients.is_empty() && l.memnodes.is_empty());
    }
}
