//! Leases of memory nodes and clients, judged by the leader.
//!
//! Renewals are frequent and carry no decision, so they stay out of the log:
//! the leader notes when it last heard from each memory node and client, in
//! memory. Only the decisions go through Raft: a memory node becomes active
//! (it was heard), suspect (one lease of silence) or dead (two); a client is
//! expired (one of its own leases of silence). A refused decision changes
//! nothing, so proposing one twice is harmless, but the driver in
//! [`crate::member`] proposes them one at a time, recomputing before each,
//! and keeps the one in flight as [`Liveness::pending`] until the state
//! shows it applied or the term ends: a decision whose commit timed out is
//! not proposed again beside it. While a holder's death or expiry is in
//! flight, its renewals are refused (503), so no holder hears "renewed"
//! from a leader that is about to declare it gone.
//!
//! Renewals are tagged with the term of the leader that heard them; taking
//! office in a term keeps only that term's (heard between the election and
//! the judge noticing it), so nothing heard in an earlier office can revive
//! a node that has since fallen silent.
//!
//! The grace rule: renewals are heard only by the leader, so a new leader
//! knows nothing of what its predecessor heard. It counts every lease from
//! the moment it took office, never from earlier, and so declares nobody
//! dead or expired before one full lease has passed under it. A client that
//! renewed at the old leader an instant before the change is therefore
//! judged no earlier than it would have been by the old leader.
//!
//! The same holds for a client that registers while the office is under
//! way: a client the office's first judgement did not see is counted from
//! the first judgement that sees it, as if that were a renewal, so it too
//! gets one full lease to renew for the first time (counting from the
//! office would expire a client that registered late in it before its first
//! renewal could arrive).
//!
//! The deafness rule: a leader whose own process stalled (its judge did not
//! run for [`Liveness::deaf_after`], so neither, probably, did the handlers
//! that note renewals) cannot tell the holders' silence from its own
//! deafness. It judges as if it had just taken office: one full lease from
//! when it hears again, as the grace rule gives a new leader. Without this,
//! a leader stalled for two leases declares every memory node dead at once.
//!
//! This module is pure (time is an argument) so tests can walk it through
//! any schedule.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::state::{ClientId, ClientState, Command, ControlState, MemNodeId, MemNodeState};

/// A Raft term.
pub type Term = u64;

/// Leases of silence after which the leader declares a memory node dead
/// (one makes it suspect). What a node may count on: it cannot be declared
/// dead, and so replaced, before this many leases have passed since it sent
/// its last granted renewal ([`memnode_serves_until`]).
pub const MEMNODE_DEAD_LEASES: u32 = 2;

/// Until when a memory node whose renewal, sent at `sent`, was granted a
/// `lease` may serve verbs: short of [`MEMNODE_DEAD_LEASES`] leases after
/// `sent` by a quarter lease, the margin for the node's and the leader's
/// clocks running at different rates. The leader counts silence from when
/// it heard the renewal, no earlier than `sent`, and declares the node dead
/// only after `MEMNODE_DEAD_LEASES` leases of it; a promotion comes later
/// still. So a node that stops serving by then never serves beside its
/// replacement, and one whose renewal is merely late (an election, a busy
/// machine) keeps serving. 2 x 250 ms leases: until 437.5 ms after `sent`.
pub fn memnode_serves_until(sent: Instant, lease: Duration) -> Instant {
    sent + memnode_serving_after_renewal(lease)
}

/// How long past a granted renewal's sending a memory node holding `lease`
/// serves ([`memnode_serves_until`]).
pub fn memnode_serving_after_renewal(lease: Duration) -> Duration {
    lease * MEMNODE_DEAD_LEASES - lease / 4
}

/// What the leader has heard, and since when it has been listening.
#[derive(Debug)]
pub struct Liveness {
    memnode_lease: Duration,
    /// When this member took office, and in which term; `None` while it
    /// does not lead.
    office: Option<(Instant, Term)>,
    memnodes: HashMap<MemNodeId, (Instant, Term)>,
    /// When each memory node was last found in maintenance, or first seen
    /// unheard by this office: its silence counts from then at the earliest.
    excused: HashMap<MemNodeId, Instant>,
    clients: HashMap<ClientId, (Instant, Term)>,
    /// Whether this office has judged: clients unheard at its first
    /// judgement count from the office, those first seen later from then.
    judged: bool,
    pending: Option<Command>,
    /// How far each client reported it has quiesced (`txn::quiesce`), the
    /// highest heard. Kept across terms: a client's report never goes
    /// back, so an old one is only less than it could be.
    quiesced: HashMap<ClientId, u64>,
}

impl Liveness {
    /// A tracker that does not lead yet; memory nodes hold leases of
    /// `memnode_lease` (clients carry their own lease length).
    pub fn new(memnode_lease: Duration) -> Self {
        assert!(!memnode_lease.is_zero(), "a zero lease lapses as it is granted");
        Liveness {
            memnode_lease,
            office: None,
            memnodes: HashMap::new(),
            excused: HashMap::new(),
            clients: HashMap::new(),
            judged: false,
            pending: None,
            quiesced: HashMap::new(),
        }
    }

    /// This member took office in `term` at `now`: every lease counts from
    /// here. Renewals heard in this term before (by this member as leader,
    /// just before the judge noticed its election) stay; older ones go.
    pub fn lead(&mut self, now: Instant, term: Term) {
        self.office = Some((now, term));
        self.memnodes.retain(|_, &mut (_, t)| t == term);
        self.clients.retain(|_, &mut (_, t)| t == term);
        self.judged = false;
        self.pending = None;
    }

    /// This member no longer leads: what it heard will be heard again by
    /// the next leader.
    pub fn follow(&mut self) {
        self.office = None;
        self.memnodes.clear();
        self.clients.clear();
        self.pending = None;
    }

    /// The term this member took office in, between [`Liveness::lead`] and
    /// [`Liveness::follow`].
    pub fn office_term(&self) -> Option<Term> {
        self.office.map(|(_, term)| term)
    }

    /// Memory node `id` renewed its lease at `now`, heard by the leader of
    /// `term`.
    pub fn renew_memnode(&mut self, id: MemNodeId, now: Instant, term: Term) {
        self.memnodes.insert(id, (now, term));
    }

    /// Client `id` renewed its lease at `now`, heard by the leader of `term`.
    pub fn renew_client(&mut self, id: ClientId, now: Instant, term: Term) {
        self.clients.insert(id, (now, term));
    }

    /// Client `id` reported that no section of it in flight began before
    /// reclaim sequence number `seq`.
    pub fn report_quiesced(&mut self, id: ClientId, seq: u64) {
        let q = self.quiesced.entry(id).or_default();
        *q = (*q).max(seq);
    }

    /// How far client `id` last reported it has quiesced, if it did.
    pub fn quiesced(&self, id: ClientId) -> Option<u64> {
        self.quiesced.get(&id).copied()
    }

    /// The longest the judge may go between the end of one judgement and
    /// the start of the next and still trust what it heard meanwhile: half
    /// a memory-node lease (it judges every `lease_check`, far less).
    pub fn deaf_after(&self) -> Duration {
        self.memnode_lease / 2
    }

    /// The judge runs again at `now` after `gap` without judging (the
    /// deafness rule, module docs): past [`Liveness::deaf_after`], every
    /// lease counts from `now`, as if this office began now. Returns whether
    /// it did.
    pub fn resume_after(&mut self, now: Instant, gap: Duration) -> bool {
        let Some((_, term)) = self.office else {
            return false;
        };
        if gap <= self.deaf_after() {
            return false;
        }
        self.office = Some((now, term));
        // Clients first seen from here count from here too.
        self.judged = false;
        true
    }

    /// The decision being committed, if any.
    pub fn pending(&self) -> Option<&Command> {
        self.pending.as_ref()
    }

    /// Records `decision` as being committed.
    pub fn set_pending(&mut self, decision: Command) {
        self.pending = Some(decision);
    }

    /// Forgets the pending decision once `state` shows it applied.
    pub fn settle(&mut self, state: &ControlState) {
        let applied = match self.pending {
            None => return,
            Some(Command::ActivateMemNode { id }) => state
                .memnodes
                .get(&id)
                .is_none_or(|n| n.state != MemNodeState::Joining && n.state != MemNodeState::Suspect),
            Some(Command::SuspectMemNode { id }) => state
                .memnodes
                .get(&id)
                .is_none_or(|n| n.state != MemNodeState::Active),
            Some(Command::DeclareMemNodeDead { id }) => state
                .memnodes
                .get(&id)
                .is_none_or(|n| n.state == MemNodeState::Dead),
            Some(Command::ExpireClient { id }) => state
                .clients
                .get(&id)
                .is_none_or(|c| c.state != ClientState::Live),
            // The judge proposes nothing else.
            Some(_) => true,
        };
        if applied {
            self.pending = None;
        }
    }

    /// True while memory node `id`'s death is being committed.
    pub fn memnode_going(&self, id: MemNodeId) -> bool {
        self.pending == Some(Command::DeclareMemNodeDead { id })
    }

    /// True while client `id`'s expiry is being committed.
    pub fn client_going(&self, id: ClientId) -> bool {
        self.pending == Some(Command::ExpireClient { id })
    }

    /// The decisions due at `now` given the applied `state`, in a stable
    /// order (memory nodes by id, then clients by id). Empty unless leading.
    ///
    /// Also forgets renewals of memory nodes and clients the state no
    /// longer knows, so the tables stay as small as the state.
    pub fn decisions(&mut self, now: Instant, state: &ControlState) -> Vec<Command> {
        let Some((since, term)) = self.office else {
            return Vec::new();
        };
        self.memnodes.retain(|id, _| state.memnodes.contains_key(id));
        self.excused.retain(|id, _| state.memnodes.contains_key(id));
        self.clients.retain(|id, _| state.clients.contains_key(id));
        self.quiesced.retain(|id, _| state.clients.contains_key(id));
        // Silence is counted from the last renewal, or from taking office
        // when that is later (the grace rule).
        let silence =
            |heard: Option<Instant>| now.saturating_duration_since(heard.map_or(since, |h| h.max(since)));
        // Only what this office heard counts (see the module docs).
        let this_term = |e: Option<&(Instant, Term)>| e.filter(|&&(_, t)| t == term).map(|&(at, _)| at);
        let lease = self.memnode_lease;
        let mut out = Vec::new();
        for n in state.memnodes.values() {
            if n.maintenance {
                // Not judged while in maintenance; once out of it, its
                // silence counts from the last judgement that excused it.
                self.excused.insert(n.id, now);
                continue;
            }
            let heard = this_term(self.memnodes.get(&n.id));
            if heard.is_none() {
                // Unheard in this office: counted from the office if there
                // at its first judgement, else from when first seen (a node
                // a restore brought in, which never renewed here), as for
                // clients.
                let first = if self.judged { now } else { since };
                self.excused.entry(n.id).or_insert(first);
            }
            let quiet = silence(heard.max(self.excused.get(&n.id).copied()));
            let id = n.id;
            match n.state {
                // Only a renewal activates: an excuse is no sign of life.
                MemNodeState::Joining | MemNodeState::Suspect
                    if heard.is_some() && silence(heard) < lease =>
                {
                    out.push(Command::ActivateMemNode { id });
                }
                MemNodeState::Active if quiet >= lease => out.push(Command::SuspectMemNode { id }),
                MemNodeState::Suspect if quiet >= lease * MEMNODE_DEAD_LEASES => {
                    out.push(Command::DeclareMemNodeDead { id });
                }
                _ => {}
            }
        }
        for c in state.clients.values() {
            if c.state != ClientState::Live {
                continue;
            }
            // Unheard in this office: there when it began, or first seen
            // now (see the module docs).
            let heard = match this_term(self.clients.get(&c.id)) {
                Some(at) => at,
                None => {
                    let first = if self.judged { now } else { since };
                    self.clients.insert(c.id, (first, term));
                    first
                }
            };
            let quiet = silence(Some(heard));
            if quiet >= Duration::from_millis(c.lease_ms) {
                out.push(Command::ExpireClient { id: c.id });
            }
        }
        self.judged = true;
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
            clock_ms: 0,
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
                image: None,
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

    /// A node serves no later than the leader can declare it dead, even
    /// when the leader heard its renewal the instant it was sent.
    #[test]
    fn a_memnode_stops_serving_before_it_can_be_declared_dead() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        l.lead(t0, 1);
        l.renew_client(0, t0 + ms(10_000), 1);
        let sent = t0 + ms(50);
        l.renew_memnode(0, sent, 1);
        apply(&mut s, Command::ActivateMemNode { id: 0 });
        apply(&mut s, Command::SuspectMemNode { id: 0 });
        let serves_until = memnode_serves_until(sent, LEASE);
        assert_eq!(serves_until, sent + ms(175), "2 leases less a quarter");
        assert!(
            l.decisions(serves_until, &s).is_empty(),
            "not dead while it may serve"
        );
        assert_eq!(
            l.decisions(sent + LEASE * MEMNODE_DEAD_LEASES, &s),
            vec![Command::DeclareMemNodeDead { id: 0 }]
        );
    }

    /// A node in maintenance is never judged, however long it is silent;
    /// out of it, its silence counts from the last judgement that excused
    /// it, and only a renewal makes it active again.
    #[test]
    fn a_node_in_maintenance_is_not_judged_and_counts_afresh_after() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        l.lead(t0, 1);
        l.renew_client(0, t0 + ms(100_000), 1);
        l.renew_memnode(0, t0, 1);
        apply(&mut s, Command::ActivateMemNode { id: 0 });
        apply(&mut s, Command::SetMaintenance { id: 0, on: true });
        assert!(
            l.decisions(t0 + ms(10_000), &s).is_empty(),
            "excused for 100 leases"
        );
        apply(&mut s, Command::SetMaintenance { id: 0, on: false });
        assert!(
            l.decisions(t0 + ms(10_050), &s).is_empty(),
            "half a lease after the last excuse"
        );
        assert_eq!(
            l.decisions(t0 + ms(10_100), &s),
            vec![Command::SuspectMemNode { id: 0 }]
        );
        apply(&mut s, Command::SuspectMemNode { id: 0 });
        apply(&mut s, Command::SetMaintenance { id: 0, on: true });
        assert!(
            l.decisions(t0 + ms(20_000), &s).is_empty(),
            "not activated by an excuse"
        );
        l.renew_memnode(0, t0 + ms(20_010), 1);
        assert_eq!(
            l.decisions(t0 + ms(20_020), &s),
            Vec::<Command>::new(),
            "in maintenance, not even a renewal is judged"
        );
        apply(&mut s, Command::SetMaintenance { id: 0, on: false });
        assert_eq!(
            l.decisions(t0 + ms(20_030), &s),
            vec![Command::ActivateMemNode { id: 0 }]
        );
    }

    /// A node a restore brings in is active but never renewed with this
    /// leader: its silence counts from when it is first seen, not from the
    /// office, however long the leader has led.
    #[test]
    fn a_node_first_seen_late_counts_from_then() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        l.lead(t0, 1);
        let empty = ControlState::default();
        assert!(l.decisions(t0 + ms(10), &empty).is_empty());
        let mut s = state();
        l.renew_client(0, t0 + ms(100_000), 1);
        apply(&mut s, Command::ActivateMemNode { id: 0 });
        let seen = t0 + ms(10_000);
        assert!(l.decisions(seen, &s).is_empty(), "not suspected on sight");
        assert!(l.decisions(seen + ms(99), &s).is_empty());
        assert_eq!(
            l.decisions(seen + LEASE, &s),
            vec![Command::SuspectMemNode { id: 0 }]
        );
    }

    #[test]
    fn a_follower_decides_nothing() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        assert!(l.decisions(t0 + ms(10_000), &state()).is_empty());
        l.lead(t0, 1);
        l.follow();
        assert_eq!(l.office_term(), None);
        assert!(l.decisions(t0 + ms(10_000), &state()).is_empty());
    }

    #[test]
    fn a_new_leader_waits_one_full_lease_before_expiring_a_silent_client() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let s = state();
        l.lead(t0, 1);
        assert!(l.decisions(t0 + ms(99), &s).is_empty(), "within the grace lease");
        assert_eq!(
            l.decisions(t0 + ms(100), &s),
            vec![Command::ExpireClient { id: 0 }]
        );
    }

    #[test]
    fn a_client_registered_late_in_an_office_gets_a_full_lease_from_when_it_is_first_seen() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let empty = ControlState::default();
        l.lead(t0, 1);
        assert!(l.decisions(t0 + ms(5_000), &empty).is_empty());
        // Registered 5 s into the office; the judge first sees it at 5,010 ms.
        let s = state();
        assert!(l.decisions(t0 + ms(5_010), &s).is_empty(), "not expired on sight");
        assert!(
            l.decisions(t0 + ms(5_109), &s).is_empty(),
            "within its first lease"
        );
        assert_eq!(
            l.decisions(t0 + ms(5_110), &s),
            vec![Command::ExpireClient { id: 0 }],
            "silent for one lease since first seen"
        );
        // A renewal in time keeps it.
        let mut l = Liveness::new(LEASE);
        l.lead(t0, 1);
        assert!(l.decisions(t0 + ms(5_000), &empty).is_empty());
        assert!(l.decisions(t0 + ms(5_010), &s).is_empty());
        l.renew_client(0, t0 + ms(5_050), 1);
        assert!(l.decisions(t0 + ms(5_149), &s).is_empty());
    }

    #[test]
    fn a_client_there_when_the_office_began_counts_from_the_office_even_if_judged_late() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        l.lead(t0, 1);
        // The first judgement comes a whole lease after taking office.
        assert_eq!(
            l.decisions(t0 + ms(100), &state()),
            vec![Command::ExpireClient { id: 0 }]
        );
    }

    #[test]
    fn a_new_term_drops_first_sightings_and_counts_from_its_own_office() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let empty = ControlState::default();
        let s = state();
        l.lead(t0, 1);
        assert!(l.decisions(t0, &empty).is_empty());
        assert!(l.decisions(t0 + ms(50), &s).is_empty(), "first seen at 50 ms");
        l.follow();
        l.lead(t0 + ms(60), 2);
        assert!(!l.clients.contains_key(&0), "the old office's sighting is gone");
        assert!(l.decisions(t0 + ms(159), &s).is_empty());
        assert_eq!(
            l.decisions(t0 + ms(160), &s),
            vec![Command::ExpireClient { id: 0 }],
            "one lease after the new office began"
        );
    }

    #[test]
    fn renewals_keep_a_client_live_and_one_heard_before_office_does_not_shorten_grace() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        // Heard long before taking office: the grace rule counts from office.
        l.lead(t0 + ms(500), 1);
        l.renew_client(0, t0, 1);
        assert!(l.decisions(t0 + ms(599), &s).is_empty());
        for i in 1..=10 {
            l.renew_client(0, t0 + ms(500 + 50 * i), 1);
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
    fn a_judge_that_was_itself_stalled_gives_every_holder_a_full_lease_again() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        apply(&mut s, Command::ActivateMemNode { id: 0 });
        l.lead(t0, 1);
        l.renew_memnode(0, t0 + ms(1_000), 1);
        l.renew_client(0, t0 + ms(1_000), 1);
        assert!(l.decisions(t0 + ms(1_010), &s).is_empty());
        // A short gap is an ordinary late tick: what was heard stands.
        assert!(!l.resume_after(t0 + ms(1_040), ms(30)));
        // The process stalls 400 ms (4 leases): nothing was heard, by no
        // fault of the holders.
        let back = t0 + ms(1_410);
        assert!(l.resume_after(back, ms(400)));
        assert!(
            l.decisions(back, &s).is_empty(),
            "without the rule: node dead, client expired"
        );
        // Renewals arriving now keep them; silence past a lease from `back` does not.
        l.renew_client(0, back + ms(20), 1);
        assert!(l.decisions(back + ms(99), &s).is_empty());
        assert_eq!(
            l.decisions(back + ms(100), &s),
            vec![Command::SuspectMemNode { id: 0 }]
        );
        // Not leading: nothing to resume.
        l.follow();
        assert!(!l.resume_after(back + ms(10_000), ms(10_000)));
    }

    #[test]
    fn a_memnode_is_activated_when_heard_then_suspect_then_dead() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        l.lead(t0, 1);
        l.renew_client(0, t0 + ms(10_000), 1); // keep the client out of the picture
        assert!(
            l.decisions(t0 + ms(50), &s).is_empty(),
            "joining and unheard: nothing"
        );
        l.renew_memnode(0, t0 + ms(50), 1);
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
        l.renew_memnode(0, t0 + ms(200), 1);
        assert_eq!(
            l.decisions(t0 + ms(210), &s),
            vec![Command::ActivateMemNode { id: 0 }]
        );
    }

    #[test]
    fn renewals_heard_in_an_earlier_office_revive_nobody() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        let mut s = state();
        l.lead(t0, 1);
        l.renew_client(0, t0 + ms(10_000), 1);
        l.renew_memnode(0, t0, 1);
        apply(&mut s, Command::ActivateMemNode { id: 0 });
        apply(&mut s, Command::SuspectMemNode { id: 0 });
        // Office again in term 3 without having followed in between (the
        // judge missed its loss of the lead): term 1's renewal is void.
        l.lead(t0 + ms(10_000), 3);
        l.renew_client(0, t0 + ms(10_000), 3);
        assert!(
            l.decisions(t0 + ms(10_010), &s).is_empty(),
            "no activation from term 1's renewal"
        );
        // Heard in this term: it comes back.
        l.renew_memnode(0, t0 + ms(10_020), 3);
        assert_eq!(
            l.decisions(t0 + ms(10_030), &s),
            vec![Command::ActivateMemNode { id: 0 }]
        );
    }

    #[test]
    fn a_pending_decision_settles_once_applied_and_marks_its_holder() {
        let mut l = Liveness::new(LEASE);
        let mut s = state();
        l.set_pending(Command::ExpireClient { id: 0 });
        assert!(l.client_going(0) && !l.memnode_going(0));
        l.settle(&s);
        assert!(l.pending().is_some(), "not applied yet");
        apply(&mut s, Command::ExpireClient { id: 0 });
        l.settle(&s);
        assert_eq!(l.pending(), None);
        l.set_pending(Command::DeclareMemNodeDead { id: 0 });
        assert!(l.memnode_going(0));
        l.lead(Instant::now(), 2);
        assert_eq!(l.pending(), None, "a new office starts with nothing in flight");
    }

    #[test]
    fn forgets_renewals_of_what_the_state_no_longer_knows() {
        let mut l = Liveness::new(LEASE);
        let t0 = Instant::now();
        l.lead(t0, 1);
        l.renew_client(7, t0, 1);
        l.renew_memnode(9, t0, 1);
        let s = state();
        let _ = l.decisions(t0, &s);
        assert!(!l.clients.contains_key(&7) && !l.memnodes.contains_key(&9));
        // Client 0 was first seen there; once the state forgets it, so does the judge.
        assert!(l.clients.contains_key(&0));
        let _ = l.decisions(t0 + ms(1), &ControlState::default());
        assert!(l.clients.is_empty());
    }
}
