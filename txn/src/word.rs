//! The 64-bit words rTX keeps in DM, each with its one definition:
//! the lock word (LLLock), the versioned data pointer, and the log header.
//! All are stored as little-endian u64 words (`../shared/design.md` §3).

use fabric::OFFSET_MAX;

pub use crate::lease::LEASE_TICK_MAX;

/// Owner ids are 15 bits: they share the locked lock word with a 48-bit lease.
pub const OWNER_BITS: u32 = 15;
/// Largest owner id.
pub const OWNER_MAX: u16 = (1 << OWNER_BITS) - 1;
const LOCKED: u64 = 1 << 63;
/// Unlocked versions are 63 bits.
pub const VERSION_MAX: u64 = LOCKED - 1;

/// An owner id: one per client thread or coroutine, unique in the cluster.
pub type OwnerId = u16;

/// The LLLock word at the start of every TXObj meta.
///
/// ```text
///  63  62           48 47                                          0
/// +---+---------------+---------------------------------------------+
/// | 1 | owner (15 b)  | lease end, lease ticks (48 b)               |  locked
/// +---+---------------+---------------------------------------------+
/// | 0 |                 version (63 b)                              |  unlocked
/// +---+-------------------------------------------------------------+
/// ```
///
/// The lease end counts lease ticks (1/256 ms) since 2024-01-01T00:00:00Z
/// ([`crate::lease`]: [`TICKS_PER_MS`](crate::lease::TICKS_PER_MS),
/// [`LEASE_EPOCH_UNIX_MS`](crate::lease::LEASE_EPOCH_UNIX_MS); 48 bits last
/// until 2058-11-03). Unlocked, the word is the version, bumped by every
/// commit of the object, which is what defeats ABA when a data block is
/// reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockWord(u64);

impl LockWord {
    /// An unlocked word at `version`.
    pub fn unlocked(version: u64) -> Self {
        assert!(version <= VERSION_MAX, "version {version} does not fit 63 bits");
        LockWord(version)
    }

    /// A locked word held by `owner` until `lease_tick`.
    pub fn locked(owner: OwnerId, lease_tick: u64) -> Self {
        assert!(owner <= OWNER_MAX, "owner id {owner} does not fit 15 bits");
        assert!(
            lease_tick <= LEASE_TICK_MAX,
            "lease tick {lease_tick} does not fit 48 bits (after 2058-11-03?)"
        );
        LockWord(LOCKED | (u64::from(owner) << 48) | lease_tick)
    }

    /// From a word read from DM.
    pub fn from_raw(raw: u64) -> Self {
        LockWord(raw)
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// True when held.
    pub fn is_locked(self) -> bool {
        self.0 & LOCKED != 0
    }

    /// The holder (meaningful when locked).
    pub fn owner(self) -> OwnerId {
        ((self.0 >> 48) & u64::from(OWNER_MAX)) as OwnerId
    }

    /// The lease end in lease ticks (meaningful when locked).
    pub fn lease_tick(self) -> u64 {
        self.0 & LEASE_TICK_MAX
    }

    /// The version (meaningful when unlocked).
    pub fn version(self) -> u64 {
        self.0 & VERSION_MAX
    }

    /// True when locked and the lease ended at or before `now_tick`.
    pub fn is_expired(self, now_tick: u64) -> bool {
        self.is_locked() && now_tick >= self.lease_tick()
    }

    /// The version a log-less repair gives an object whose lock it stole:
    /// the stolen lease end in ticks, shifted into the high bits (48 + 15 =
    /// 63 bits: every floor is a valid version). The repairer cannot know the
    /// version before the lock, but this floor is above it as long as an
    /// object sees fewer than 2^15 commits per lease tick (3.9 µs; each
    /// commit is several round trips, so at most a few).
    pub fn version_floor(stolen: LockWord) -> u64 {
        debug_assert!(stolen.is_locked());
        stolen.lease_tick() << OWNER_BITS
    }

    /// The version every lock word of a promoted primary restarts at: lock
    /// words live on the primary only, so a backup's are as created, and
    /// versions must never go backwards (a meta hint of any age validates a
    /// block by its version, `docs/txn.md` §7a). Every version the lost
    /// primary held came from commits counting up from a floor of a lease
    /// that ended before `now_tick + PROMOTION_LEAD_TICKS` (leases, lead and
    /// any clock that ran ahead by less than that), so this is above them
    /// all, with the margin of [`LockWord::version_floor`].
    pub fn promotion_floor(now_tick: u64) -> u64 {
        (now_tick + PROMOTION_LEAD_TICKS).min(crate::lease::LEASE_TICK_MAX) << OWNER_BITS
    }
}

/// How far past the promoting clock a lease of the lost primary may have
/// ended: one hour of lease ticks, far beyond any lease (`op_time * n +
/// drift`, milliseconds), lead (1 ms) or clock skew a cluster runs with.
pub const PROMOTION_LEAD_TICKS: u64 = 3_600_000 * crate::lease::TICKS_PER_MS;

impl std::fmt::Debug for LockWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_locked() {
            write!(
                f,
                "Locked(owner {}, lease tick {})",
                self.owner(),
                self.lease_tick()
            )
        } else {
            write!(f, "Unlocked(v{})", self.version())
        }
    }
}

/// The data pointer in the second word of a TXObj meta:
/// `ptr_version: 16 | offset: 48`, in the meta's region. Every commit bumps
/// `ptr_version`, so CAS-installing a pointer is idempotent even when blocks
/// are reused (up to a 16-bit wrap-around; see `repair`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataPtr(u64);

impl DataPtr {
    /// A pointer to `offset` at `ptr_version`.
    pub fn new(ptr_version: u16, offset: u64) -> Self {
        assert!(offset <= OFFSET_MAX, "offset {offset} does not fit 48 bits");
        DataPtr((u64::from(ptr_version) << 48) | offset)
    }

    /// From a word read from DM.
    pub fn from_raw(raw: u64) -> Self {
        DataPtr(raw)
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The pointer version.
    pub fn ptr_version(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// Offset of the data block in the region.
    pub fn offset(self) -> u64 {
        self.0 & OFFSET_MAX
    }

    /// A pointer to `offset` whose version follows this one's.
    pub fn successor(self, offset: u64) -> Self {
        DataPtr::new(self.ptr_version().wrapping_add(1), offset)
    }
}

impl std::fmt::Debug for DataPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataPtr(v{} @ {:#x})", self.ptr_version(), self.offset())
    }
}

/// The state of an rTX log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogState {
    /// Never written, or freshly formatted.
    Empty,
    /// Executing or validating: a repairer may abort it.
    Init,
    /// Aborted; its locks may still be held and must be released.
    Abort,
    /// Committing under a lease; a repairer may take over once it expires.
    Doing,
    /// Finished (committed, or aborted with its locks released).
    Done,
    /// A DTX transaction taking its locks, its undo entries written
    /// (`crate::dtx::log`): aborted unless every replica says COMMITTED.
    Locking,
    /// A DTX transaction's undo images, invisible marks and data written
    /// on the replica that holds it; committed once every replica does.
    Committed,
}

impl LogState {
    fn code(self) -> u64 {
        match self {
            LogState::Empty => 0,
            LogState::Init => 1,
            LogState::Abort => 2,
            LogState::Doing => 3,
            LogState::Done => 4,
            LogState::Locking => 5,
            LogState::Committed => 6,
        }
    }

    /// Whether the state is one of DTX's (`crate::dtx`), which rTX never
    /// acts on.
    pub fn is_dtx(self) -> bool {
        matches!(self, LogState::Locking | LogState::Committed)
    }
}

/// The log header word: `state: 16 | tick: 48`, in lease ticks like a lock
/// word's. DOING: the commit lease end (who commits it, until when): even
/// for the owner's own commit, odd for a repairer's take-over. INIT, ABORT,
/// DONE: the lease end of the transaction's lock word (its checksum), which
/// makes every header word of one owner's transactions unique, so that a
/// CAS from a stale header never lands on a later transaction's log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LogHeader(u64);

impl LogHeader {
    /// A header in `state` with `lease_tick`.
    pub fn new(state: LogState, lease_tick: u64) -> Self {
        assert!(lease_tick <= LEASE_TICK_MAX);
        LogHeader((state.code() << 48) | lease_tick)
    }

    /// The INIT, ABORT or DONE header of the transaction that locks with
    /// `checksum`.
    pub fn of(state: LogState, checksum: LockWord) -> Self {
        debug_assert!(state != LogState::Doing && checksum.is_locked());
        LogHeader::new(state, checksum.lease_tick())
    }

    /// How far along a log's life `state` is: INIT, then ABORT or DOING
    /// (one of the two, decided on the primary), then DONE. A backup's
    /// header is only ever brought forward to the primary's.
    pub fn stage(self) -> u8 {
        match self.state() {
            LogState::Empty => 0,
            LogState::Init | LogState::Locking => 1,
            LogState::Abort | LogState::Doing | LogState::Committed => 2,
            LogState::Done => 3,
        }
    }

    /// From a word read from DM; `None` for an unknown state code.
    pub fn from_raw(raw: u64) -> Option<Self> {
        (raw >> 48 <= 6).then_some(LogHeader(raw))
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Whether nothing is left to do of the log (empty or DONE).
    pub fn is_finished(self) -> bool {
        matches!(self.state(), LogState::Empty | LogState::Done)
    }

    /// The state.
    pub fn state(self) -> LogState {
        match self.0 >> 48 {
            0 => LogState::Empty,
            1 => LogState::Init,
            2 => LogState::Abort,
            3 => LogState::Doing,
            4 => LogState::Done,
            5 => LogState::Locking,
            _ => LogState::Committed,
        }
    }

    /// The commit lease end in lease ticks (DOING only).
    pub fn lease_tick(self) -> u64 {
        self.0 & LEASE_TICK_MAX
    }
}

impl std::fmt::Debug for LogHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.state())?;
        if self.state() == LogState::Doing {
            write!(f, "(lease tick {})", self.lease_tick())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_word_encoding_is_bit_exact() {
        let l = LockWord::locked(0x1234, 0xABCD_EF01_2345);
        assert_eq!(l.raw(), (1 << 63) | (0x1234 << 48) | 0xABCD_EF01_2345);
        assert!(l.is_locked());
        assert_eq!((l.owner(), l.lease_tick()), (0x1234, 0xABCD_EF01_2345));
        assert_eq!(LockWord::from_raw(l.raw()), l);
        let max = LockWord::locked(OWNER_MAX, LEASE_TICK_MAX);
        assert_eq!(max.raw(), u64::MAX);
        assert_eq!((max.owner(), max.lease_tick()), (OWNER_MAX, LEASE_TICK_MAX));
        // A lease of today: 2026-01-01 is 731 days of 86,400,000 ms of 256
        // ticks after the epoch.
        let today = 731 * 86_400_000 * crate::lease::TICKS_PER_MS;
        assert_eq!(today, 16_168_550_400_000);
        let l = LockWord::locked(7, today);
        assert_eq!(l.raw(), (1 << 63) | (7 << 48) | today);
        assert_eq!(l.lease_tick(), today);

        let u = LockWord::unlocked(VERSION_MAX);
        assert!(!u.is_locked());
        assert_eq!(u.version(), VERSION_MAX);
        assert_eq!(LockWord::unlocked(0).raw(), 0);
    }

    #[test]
    fn expiry_is_at_the_lease_end() {
        let l = LockWord::locked(1, 1000);
        assert!(!l.is_expired(999));
        assert!(l.is_expired(1000));
        assert!(!LockWord::unlocked(5).is_expired(u64::MAX));
    }

    #[test]
    fn version_floor_beats_any_plausible_version() {
        // 2026-01-01 in ticks.
        let stolen = LockWord::locked(3, 16_168_550_400_000);
        assert_eq!(LockWord::version_floor(stolen), 16_168_550_400_000 << 15);
        assert!(LockWord::version_floor(stolen) <= VERSION_MAX);
        // The largest lease still gives a 63-bit version.
        let last = LockWord::locked(OWNER_MAX, LEASE_TICK_MAX);
        assert_eq!(LockWord::version_floor(last), VERSION_MAX - u64::from(OWNER_MAX));
    }

    #[test]
    fn a_promotion_floor_is_above_every_floor_of_an_earlier_lease() {
        let now = 16_168_550_400_000;
        let floor = LockWord::promotion_floor(now);
        assert_eq!(floor, (now + PROMOTION_LEAD_TICKS) << OWNER_BITS);
        let late_lease = LockWord::locked(OWNER_MAX, now + PROMOTION_LEAD_TICKS - 1);
        assert!(LockWord::version_floor(late_lease) + (1 << OWNER_BITS) <= floor);
        assert!(LockWord::promotion_floor(crate::lease::LEASE_TICK_MAX) <= VERSION_MAX);
    }

    #[test]
    fn data_ptr_encoding_is_bit_exact() {
        let p = DataPtr::new(0xFFFF, 0x0000_1234_5678_9ABC);
        assert_eq!(p.raw(), 0xFFFF_1234_5678_9ABC);
        assert_eq!((p.ptr_version(), p.offset()), (0xFFFF, 0x1234_5678_9ABC));
        let q = p.successor(64);
        assert_eq!((q.ptr_version(), q.offset()), (0, 64), "ptr_version wraps");
    }

    #[test]
    fn log_header_encoding_is_bit_exact() {
        let h = LogHeader::new(LogState::Doing, 77);
        assert_eq!(h.raw(), (3 << 48) | 77);
        assert_eq!(LogHeader::from_raw(h.raw()), Some(h));
        assert_eq!(h.state(), LogState::Doing);
        assert_eq!(h.lease_tick(), 77);
        let h = LogHeader::new(LogState::Doing, LEASE_TICK_MAX);
        assert_eq!(h.raw(), (3 << 48) | LEASE_TICK_MAX);
        assert_eq!(h.lease_tick(), LEASE_TICK_MAX);
        for (s, code) in [
            (LogState::Empty, 0),
            (LogState::Init, 1),
            (LogState::Abort, 2),
            (LogState::Done, 4),
            (LogState::Locking, 5),
            (LogState::Committed, 6),
        ] {
            let h = LogHeader::new(s, 0x1234);
            assert_eq!(h.raw(), (code << 48) | 0x1234);
            assert_eq!(LogHeader::from_raw(h.raw()).map(LogHeader::state), Some(s));
            assert_eq!(s.is_dtx(), code >= 5);
        }
        assert_eq!(LogHeader::from_raw(7 << 48), None);
        assert_eq!(LogHeader::from_raw(9 << 48), None);
        assert_eq!(LogHeader::new(LogState::Locking, 0).stage(), 1);
        assert_eq!(LogHeader::new(LogState::Committed, 0).stage(), 2);
    }
}
