//! What a client process knows of the owner ids being reclaimed, and the
//! quiescence it reports back: epoch-based reclamation with the control
//! plane's reclaim sequence as the epoch.
//!
//! A commit frees the blocks it replaced into the committer's free list,
//! whatever chunk they lie in. When an owner id D is reclaimed
//! (`crate::reclaim`), the blocks of D's chunks that no meta names are
//! handed to the id's next holder, so no live client may keep one of them:
//!
//! - The control plane numbers each client expiry (and each forgetting)
//!   with its *reclaim sequence*, and tells every live client, on each
//!   lease renewal, the sequence and which owner ids are *announced*
//!   (expired, not yet forgotten) since which sequence number
//!   ([`ReclaimView::update`]).
//! - Each [`TxClient`](crate::TxClient) runs its transactions, repairs and
//!   creations in *sections*. A section is pinned, at its first data block
//!   allocation, at the sequence it knows then (`ReclaimView::pin`), and
//!   stays pinned to its end; then it *catches up*: for each owner id announced since its last catch-up,
//!   it reads which chunks are the id's, drops every block of them from its
//!   free list and parked blocks, and from then on drops every block of
//!   them its commits free (they are *doomed*), until the id is forgotten.
//! - The process reports as *quiesced* the oldest pin of a section in
//!   flight, or the sequence it knows when none is
//!   ([`ReclaimView::quiesced`]). A reclaim of D, announced at sequence s,
//!   runs only once every live client reports at least s.
//!
//! Then no live client holds a block of D's chunks that a reclaim can find
//! free: a section pinned before s ended before the reclaim began (what it
//! freed is dropped at the next catch-up, before any allocation), and a
//! section pinned at or after s drops what it frees of D's chunks. A
//! section that allocates nothing is never pinned: it frees nothing either
//! (a commit frees the blocks it replaced only after it allocated their
//! successors), so read-only transactions cost nothing here. A block
//! of D's chunks unlinked after the reclaim's scan, by a section that began
//! before the id was forgotten, is dropped too and found by the reclaim of
//! the id's next holder: that is the only leak, bounded by the commits that
//! overlap a reclaim.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::word::OwnerId;

/// Reclaim events a view keeps for sections that have not caught up yet.
/// One per client expiry and one per forgetting: a process that falls
/// this far behind would have been expired itself long before.
pub const EVENTS_MAX: usize = 4096;

/// A pin value meaning "no section in flight".
const IDLE: u64 = u64::MAX;

/// Owner ids [`first`, `first + count`) of one expired client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerRange {
    /// The first id.
    pub first: OwnerId,
    /// How many ids.
    pub count: u16,
}

impl OwnerRange {
    /// Whether `owner` is one of them.
    pub fn contains(self, owner: OwnerId) -> bool {
        owner >= self.first && u32::from(owner) < u32::from(self.first) + u32::from(self.count)
    }
}

/// Owner ids announced for reclaim, and since which reclaim sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Announced {
    /// The ids.
    pub owners: OwnerRange,
    /// The sequence number of their client's expiry.
    pub seq: u64,
}

/// One change of the announced set, at a sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimEvent {
    /// The ids are announced: their chunks are doomed from here on.
    Announced(Announced),
    /// The announcement is over (the ids were forgotten): their reclaim is
    /// over, their chunks are their next holder's. An announcement of the
    /// same ids at another sequence number is another announcement.
    Forgotten(Announced),
    /// Events this holder had not seen were dropped ([`EVENTS_MAX`]): it
    /// gives up every block it holds (a leak, never a double allocation)
    /// and forgets every announcement; the ones still current follow.
    Lost,
}

#[derive(Debug, Default)]
struct Inner {
    announced: Vec<Announced>,
    /// Events by sequence number, oldest first.
    events: VecDeque<(u64, ReclaimEvent)>,
    pins: Vec<Weak<Pin>>,
    /// Events up to this sequence number were dropped past
    /// [`EVENTS_MAX`] before every holder saw them.
    lost_upto: u64,
}

/// One section holder's pin (`ReclaimView::pin`). Aligned to two cache
/// lines: the pins of a process's clients are written on every writing
/// transaction, from different threads, and must not share a line.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Pin {
    /// The sequence its section in flight is pinned at, or [`IDLE`].
    pinned: AtomicU64,
    /// The sequence it has caught up to.
    seen: AtomicU64,
}

impl Pin {
    /// The sequence its holder has caught up to.
    pub(crate) fn seen(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }
}

/// A client process's view of the reclaims, shared by its transaction
/// clients (module docs).
#[derive(Debug, Default)]
pub struct ReclaimView {
    /// The control plane's reclaim sequence, as last heard: stored under
    /// `inner`'s lock after the events it numbers, read without it by
    /// [`ReclaimView::pin`] (a pin on every writing transaction must not
    /// contend on a lock).
    seq: AtomicU64,
    inner: Mutex<Inner>,
}

impl ReclaimView {
    /// A view that knows of no reclaim yet.
    pub fn new() -> Arc<Self> {
        Arc::new(ReclaimView::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it left nothing half-written that matters:
        // every update replaces whole fields.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in what a lease renewal said: the control plane's reclaim
    /// sequence and the announced ids. An answer older than one already
    /// taken (from a member that has not applied as far) is ignored.
    pub fn update(&self, seq: u64, announced: &[Announced]) {
        let mut inner = self.lock();
        if seq < self.seq.load(Ordering::SeqCst) {
            return;
        }
        let mut fresh: Vec<(u64, ReclaimEvent)> = Vec::new();
        for a in announced {
            if !inner.announced.contains(a) {
                // At its own sequence number: a section pinned at or after
                // it must know of it.
                fresh.push((a.seq.min(seq), ReclaimEvent::Announced(*a)));
            }
        }
        for b in &inner.announced {
            if !announced.contains(b) {
                fresh.push((seq, ReclaimEvent::Forgotten(*b)));
            }
        }
        fresh.sort_by_key(|&(s, _)| s);
        let last = inner.events.back().map_or(0, |&(s, _)| s);
        for (s, e) in fresh {
            // Events stay ordered: one that surfaces late (it cannot, from
            // a consistent state) is taken at the latest known number,
            // where every section that did not see it still catches it.
            inner.events.push_back((s.max(last), e));
        }
        self.seq.store(seq, Ordering::SeqCst);
        inner.announced = announced.to_vec();
        let oldest_seen = inner
            .pins
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| p.seen.load(Ordering::Acquire))
            .min()
            .unwrap_or(seq);
        while inner.events.front().is_some_and(|&(s, _)| s <= oldest_seen) {
            inner.events.pop_front();
        }
        while inner.events.len() > EVENTS_MAX {
            // A holder this far behind catches up from the announced set
            // alone (`events_to` says how): conservative, never unsafe.
            if let Some((s, _)) = inner.events.pop_front() {
                inner.lost_upto = inner.lost_upto.max(s);
            }
        }
        inner.pins.retain(|p| p.strong_count() > 0);
    }

    /// A pin for one section holder, registered with the view, and the
    /// owner ids announced now, which the holder must doom before its first
    /// allocation (their later forgetting comes as an event). The pin
    /// starts caught up to the current sequence otherwise: a holder made
    /// now holds no block yet.
    pub(crate) fn register(&self) -> (Arc<Pin>, Vec<Announced>) {
        let mut inner = self.lock();
        let pin = Arc::new(Pin {
            pinned: AtomicU64::new(IDLE),
            seen: AtomicU64::new(self.seq.load(Ordering::SeqCst)),
        });
        inner.pins.push(Arc::downgrade(&pin));
        let announced = inner.announced.clone();
        (pin, announced)
    }

    /// Pins the section of `pin`'s holder at the current sequence, which it
    /// returns. Lock-free: it stores the pin, then reads the sequence again
    /// and pins anew if it moved. In the one total order of these SeqCst
    /// accesses, a [`ReclaimView::quiesced`] that read the sequence at s
    /// and then missed this pin read it before the pin was stored, so the
    /// re-read after the store sees s or later: no quiescence is reported
    /// past a pin that is then kept.
    pub(crate) fn pin(&self, pin: &Pin) -> u64 {
        let mut seq = self.seq.load(Ordering::SeqCst);
        loop {
            pin.pinned.store(seq, Ordering::SeqCst);
            let now = self.seq.load(Ordering::SeqCst);
            if now == seq {
                return seq;
            }
            seq = now;
        }
    }

    /// Ends the section of `pin`'s holder.
    pub(crate) fn unpin(&self, pin: &Pin) {
        pin.pinned.store(IDLE, Ordering::Release);
    }

    /// The sequence number this process has quiesced to: no section of it
    /// in flight began before it.
    pub fn quiesced(&self) -> u64 {
        let inner = self.lock();
        let seq = self.seq.load(Ordering::SeqCst);
        inner
            .pins
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| p.pinned.load(Ordering::SeqCst))
            .filter(|&p| p != IDLE)
            .fold(seq, u64::min)
    }

    /// The control plane's reclaim sequence, as last heard.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// What `pin`'s holder must process to catch up from the sequence it
    /// has seen to `upto`, in order; [`ReclaimView::caught_up`] records it
    /// once processed. If the view
    /// dropped events it needs (it was past [`EVENTS_MAX`] behind), every
    /// id announced now comes back as announced again: re-dooming and
    /// purging what is not doomed is a leak, never a double allocation.
    pub(crate) fn events_to(&self, pin: &Pin, upto: u64) -> Vec<ReclaimEvent> {
        let inner = self.lock();
        let seen = pin.seen.load(Ordering::Acquire);
        if upto <= seen {
            return Vec::new();
        }
        let mut out: Vec<ReclaimEvent> = Vec::new();
        if seen < inner.lost_upto {
            out.push(ReclaimEvent::Lost);
            // The announcements current now stand for every one it missed:
            // those since forgotten have nothing of its left to doom.
            out.extend(inner.announced.iter().map(|&a| ReclaimEvent::Announced(a)));
            return out;
        }
        out.extend(
            inner
                .events
                .iter()
                .filter(|&&(s, _)| s > seen && s <= upto)
                .map(|&(_, e)| e),
        );
        out
    }

    /// `pin`'s holder has processed everything up to `upto`.
    pub(crate) fn caught_up(&self, pin: &Pin, upto: u64) {
        pin.seen.fetch_max(upto, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catch_up(v: &ReclaimView, pin: &Pin, upto: u64) -> Vec<ReclaimEvent> {
        let events = v.events_to(pin, upto);
        v.caught_up(pin, upto);
        events
    }

    /// Ids [`first`, `first + count`) announced at `seq`.
    fn announced(first: OwnerId, count: u16, seq: u64) -> Announced {
        Announced {
            owners: range(first, count),
            seq,
        }
    }

    fn range(first: OwnerId, count: u16) -> OwnerRange {
        OwnerRange { first, count }
    }

    #[test]
    fn a_section_in_flight_holds_quiescence_back_and_an_idle_holder_does_not() {
        let v = ReclaimView::new();
        v.update(3, &[]);
        let (a, _) = v.register();
        let (b, _) = v.register();
        assert_eq!(v.quiesced(), 3, "nobody in a section");
        assert_eq!(v.pin(&a), 3);
        v.update(5, &[announced(8, 2, 5)]);
        assert_eq!(v.quiesced(), 3, "a's section began before the announcement");
        assert_eq!(v.pin(&b), 5);
        assert_eq!(v.quiesced(), 3);
        v.unpin(&a);
        assert_eq!(v.quiesced(), 5, "only b's section, which knows");
        v.unpin(&b);
        assert_eq!(v.quiesced(), 5);
    }

    #[test]
    fn catching_up_yields_announcements_then_forgettings_once_each() {
        let v = ReclaimView::new();
        v.update(1, &[]);
        let (a, _) = v.register();
        let d = announced(4, 1, 2);
        v.update(2, &[d]);
        v.update(4, &[]);
        assert_eq!(
            catch_up(&v, &a, 4),
            vec![ReclaimEvent::Announced(d), ReclaimEvent::Forgotten(d)]
        );
        assert_eq!(catch_up(&v, &a, 4), vec![], "seen");
        // Only up to the pin: a later announcement waits for the next section.
        let e = announced(9, 3, 6);
        v.update(6, &[e]);
        assert_eq!(catch_up(&v, &a, 5), vec![]);
        assert_eq!(catch_up(&v, &a, 6), vec![ReclaimEvent::Announced(e)]);
    }

    #[test]
    fn the_same_ids_announced_again_are_another_announcement() {
        let v = ReclaimView::new();
        let (a, _) = v.register();
        let first = announced(4, 2, 1);
        let again = announced(4, 2, 3);
        v.update(1, &[first]);
        // Forgotten at 2 and expired again at 3, heard in one renewal.
        v.update(3, &[again]);
        let events = catch_up(&v, &a, 3);
        assert!(events.contains(&ReclaimEvent::Announced(again)), "{events:?}");
        assert!(events.contains(&ReclaimEvent::Forgotten(first)), "{events:?}");
    }

    #[test]
    fn a_holder_that_fell_past_the_event_limit_gives_up_what_it_holds() {
        let v = ReclaimView::new();
        let (idle, _) = v.register();
        let mut seq = 0;
        for i in 0..=EVENTS_MAX as u64 / 2 {
            seq += 1;
            let d = announced((i % 100) as u16, 1, seq);
            v.update(seq, &[d]);
            seq += 1;
            v.update(seq, &[]);
        }
        let current = announced(7, 1, seq + 1);
        v.update(seq + 1, &[current]);
        assert!(v.lock().events.len() <= EVENTS_MAX);
        assert_eq!(
            catch_up(&v, &idle, seq + 1),
            vec![ReclaimEvent::Lost, ReclaimEvent::Announced(current)]
        );
    }

    #[test]
    fn stale_answers_are_ignored_and_caught_up_events_are_pruned() {
        let v = ReclaimView::new();
        let (a, _) = v.register();
        let d = announced(4, 1, 7);
        v.update(7, &[d]);
        v.update(6, &[]);
        assert_eq!(v.seq(), 7);
        assert_eq!(catch_up(&v, &a, 7), vec![ReclaimEvent::Announced(d)]);
        v.update(8, &[d]);
        assert!(v.lock().events.is_empty(), "every holder saw it");
        assert!(range(4, 1).contains(4) && !range(4, 1).contains(5));
        assert!(range(u16::MAX, 1).contains(u16::MAX));
    }
}
