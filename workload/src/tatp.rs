//! TATP (the Telecom Application Transaction Processing benchmark, as FORD
//! and Motor run it): subscribers with access rows, special facilities and
//! call forwardings; seven transaction types, 80 % of them read-only.
//!
//! | type                 | share | reads                                      | writes |
//! |----------------------|------:|--------------------------------------------|--------|
//! | GetSubscriberData    | 35 %  | Subscriber(s)                              | none   |
//! | GetNewDestination    | 10 %  | SpecialFacility(s, t), CallForwarding(s, t, ≤ start) | none |
//! | GetAccessData        | 35 %  | AccessInfo(s, t)                           | none   |
//! | UpdateSubscriberData |  2 %  | Subscriber(s), SpecialFacility(s, t)       | both   |
//! | UpdateLocation       | 14 %  | SecondarySubscriber(nbr), Subscriber(s)    | Subscriber |
//! | InsertCallForwarding |  2 %  | SecondarySubscriber(nbr), SpecialFacility(s, t), CallForwarding(s, t, start) | CallForwarding |
//! | DeleteCallForwarding |  2 %  | SecondarySubscriber(nbr), CallForwarding(s, t, start) | CallForwarding |
//!
//! **Subscribers** are chosen by TATP's non-uniform rule as FORD codes it:
//! `((r1 % n) | (r2 & A)) % n` with two uniform draws and `A` = 65,535 up
//! to 1M subscribers, 1,048,575 up to 10M and 2,097,151 above (the
//! specification's `A`).
//!
//! **Population** ([`TatpSpec::rows`]) follows the specification: 1–4
//! AccessInfo rows of distinct types per subscriber, 1–4 SpecialFacility
//! rows (85 % active), 0–3 CallForwarding rows per facility at distinct
//! start times of {0, 8, 16}, each ending 1–8 hours later. Types and start
//! times here are slot numbers: `ai_type`/`sf_type` 0..4 (TATP's 1..=4),
//! `start` 0..3 (TATP's start time / 8).
//!
//! Streams and populations are functions of `(spec, stream)` and
//! `(spec, subscriber)` alone.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::perm::splitmix64;

/// AccessInfo types (and slots) per subscriber.
pub const AI_TYPES: usize = 4;
/// SpecialFacility types (and slots) per subscriber.
pub const SF_TYPES: usize = 4;
/// CallForwarding start times (and slots) per facility: 0, 8 and 16 h.
pub const START_TIMES: usize = 3;
/// Hours between two start times.
pub const START_STEP_HOURS: u8 = 8;
/// Fewest subscribers a run takes.
pub const SUBSCRIBERS_MIN: u64 = 1;
/// Percent of special facilities that are active (TATP: 85 %).
pub const ACTIVE_PERCENT: u32 = 85;

/// Salts separating the transaction streams from the population.
const STREAM_SALT: u64 = 0x5441_5450_5354_524d;
const ROWS_SALT: u64 = 0x5441_5450_524f_5753;

/// The seven transaction types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum TatpKind {
    /// Reads a subscriber row.
    GetSubscriberData,
    /// Reads an active facility and its call forwardings in a time window.
    GetNewDestination,
    /// Reads one access row.
    GetAccessData,
    /// Writes a subscriber's `bit_1` and a facility's `data_a`.
    UpdateSubscriberData,
    /// Writes a subscriber's `vlr_location`, found by its number.
    UpdateLocation,
    /// Adds a call forwarding (fails if the slot is taken or the facility
    /// does not exist).
    InsertCallForwarding,
    /// Removes a call forwarding (fails if there is none).
    DeleteCallForwarding,
}

impl TatpKind {
    /// Every type, in the order of [`TatpKind::index`].
    pub const ALL: [TatpKind; 7] = [
        TatpKind::GetSubscriberData,
        TatpKind::GetNewDestination,
        TatpKind::GetAccessData,
        TatpKind::UpdateSubscriberData,
        TatpKind::UpdateLocation,
        TatpKind::InsertCallForwarding,
        TatpKind::DeleteCallForwarding,
    ];

    /// Percent of transactions of this type (TATP's mix).
    pub fn percent(self) -> u32 {
        match self {
            TatpKind::GetSubscriberData | TatpKind::GetAccessData => 35,
            TatpKind::GetNewDestination => 10,
            TatpKind::UpdateLocation => 14,
            TatpKind::UpdateSubscriberData
            | TatpKind::InsertCallForwarding
            | TatpKind::DeleteCallForwarding => 2,
        }
    }

    /// The position in [`TatpKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            TatpKind::GetSubscriberData => "GetSubscriberData",
            TatpKind::GetNewDestination => "GetNewDestination",
            TatpKind::GetAccessData => "GetAccessData",
            TatpKind::UpdateSubscriberData => "UpdateSubscriberData",
            TatpKind::UpdateLocation => "UpdateLocation",
            TatpKind::InsertCallForwarding => "InsertCallForwarding",
            TatpKind::DeleteCallForwarding => "DeleteCallForwarding",
        }
    }

    /// Whether it never writes.
    pub fn read_only(self) -> bool {
        matches!(
            self,
            TatpKind::GetSubscriberData | TatpKind::GetNewDestination | TatpKind::GetAccessData
        )
    }
}

/// One TATP transaction and its parameters (types and start times as slot
/// numbers; see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TatpTxn {
    /// See [`TatpKind::GetSubscriberData`].
    GetSubscriberData {
        /// Subscriber id.
        s_id: u64,
    },
    /// See [`TatpKind::GetNewDestination`]: forwardings of facility
    /// `sf_type` starting at or before `start` and ending after `end_hour`.
    GetNewDestination {
        /// Subscriber id.
        s_id: u64,
        /// Facility slot, 0..[`SF_TYPES`].
        sf_type: u8,
        /// Start-time slot, 0..[`START_TIMES`].
        start: u8,
        /// Hour, 1..=24.
        end_hour: u8,
    },
    /// See [`TatpKind::GetAccessData`].
    GetAccessData {
        /// Subscriber id.
        s_id: u64,
        /// Access slot, 0..[`AI_TYPES`].
        ai_type: u8,
    },
    /// See [`TatpKind::UpdateSubscriberData`].
    UpdateSubscriberData {
        /// Subscriber id.
        s_id: u64,
        /// The new `bit_1`.
        bit_1: bool,
        /// Facility slot, 0..[`SF_TYPES`].
        sf_type: u8,
        /// The new `data_a`.
        data_a: u8,
    },
    /// See [`TatpKind::UpdateLocation`].
    UpdateLocation {
        /// Subscriber number (looked up in SecondarySubscriber).
        sub_nbr: u64,
        /// The new `vlr_location`.
        vlr_location: u32,
    },
    /// See [`TatpKind::InsertCallForwarding`].
    InsertCallForwarding {
        /// Subscriber number (looked up in SecondarySubscriber).
        sub_nbr: u64,
        /// Facility slot, 0..[`SF_TYPES`].
        sf_type: u8,
        /// Start-time slot, 0..[`START_TIMES`].
        start: u8,
        /// Hour, 1..=24.
        end_hour: u8,
        /// The forwarding number.
        numberx: u64,
    },
    /// See [`TatpKind::DeleteCallForwarding`].
    DeleteCallForwarding {
        /// Subscriber number (looked up in SecondarySubscriber).
        sub_nbr: u64,
        /// Facility slot, 0..[`SF_TYPES`].
        sf_type: u8,
        /// Start-time slot, 0..[`START_TIMES`].
        start: u8,
    },
}

impl TatpTxn {
    /// Its type.
    pub fn kind(&self) -> TatpKind {
        match self {
            TatpTxn::GetSubscriberData { .. } => TatpKind::GetSubscriberData,
            TatpTxn::GetNewDestination { .. } => TatpKind::GetNewDestination,
            TatpTxn::GetAccessData { .. } => TatpKind::GetAccessData,
            TatpTxn::UpdateSubscriberData { .. } => TatpKind::UpdateSubscriberData,
            TatpTxn::UpdateLocation { .. } => TatpKind::UpdateLocation,
            TatpTxn::InsertCallForwarding { .. } => TatpKind::InsertCallForwarding,
            TatpTxn::DeleteCallForwarding { .. } => TatpKind::DeleteCallForwarding,
        }
    }
}

/// A subscriber's number: TATP's `sub_nbr` is the id as a 15-digit string;
/// here the id itself, offset so that it is never 0 (a record of zeros
/// does not pass for a valid SecondarySubscriber row).
pub fn sub_nbr(s_id: u64) -> u64 {
    s_id + 1
}

/// The subscriber a [`sub_nbr`] names.
pub fn s_id_of(sub_nbr: u64) -> Option<u64> {
    sub_nbr.checked_sub(1)
}

/// TATP's `A` for `subscribers` subscribers.
pub fn nurand_a(subscribers: u64) -> u64 {
    match subscribers {
        0..=1_000_000 => 65_535,
        1_000_001..=10_000_000 => 1_048_575,
        _ => 2_097_151,
    }
}

/// The Subscriber row's loaded fields (beyond `s_id` and `sub_nbr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubscriberRow {
    /// `bit_1`..`bit_10` in bits 0..10.
    pub bits: u16,
    /// `hex_1`..`hex_10`, one nibble each.
    pub hex: [u8; 10],
    /// `byte2_1`..`byte2_10`.
    pub byte2: [u8; 10],
    /// `msc_location`.
    pub msc_location: u32,
    /// `vlr_location`.
    pub vlr_location: u32,
}

/// An AccessInfo row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessRow {
    /// `data1`.
    pub data1: u8,
    /// `data2`.
    pub data2: u8,
    /// `data3`: 3 upper-case letters.
    pub data3: [u8; 3],
    /// `data4`: 5 upper-case letters.
    pub data4: [u8; 5],
}

/// A SpecialFacility row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FacilityRow {
    /// `is_active`.
    pub is_active: bool,
    /// `error_cntrl`.
    pub error_cntrl: u8,
    /// `data_a`.
    pub data_a: u8,
    /// `data_b`: 5 upper-case letters.
    pub data_b: [u8; 5],
}

/// A CallForwarding row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardingRow {
    /// `end_time`, an hour after the slot's start time (1..=24).
    pub end_hour: u8,
    /// `numberx`: a 15-digit number.
    pub numberx: u64,
}

/// Every row of one subscriber as loaded: slots that hold no row are `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriberRows {
    /// The Subscriber row.
    pub subscriber: SubscriberRow,
    /// AccessInfo by type slot.
    pub access: [Option<AccessRow>; AI_TYPES],
    /// SpecialFacility by type slot.
    pub facilities: [Option<FacilityRow>; SF_TYPES],
    /// CallForwarding by facility slot and start slot (only under a
    /// facility that exists).
    pub forwardings: [[Option<ForwardingRow>; START_TIMES]; SF_TYPES],
}

/// Largest 15-digit number, plus one.
const NUMBERX_END: u64 = 1_000_000_000_000_000;

fn letters<const N: usize>(rng: &mut SmallRng) -> [u8; N] {
    std::array::from_fn(|_| rng.gen_range(b'A'..=b'Z'))
}

/// What a TATP run is, deterministically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TatpSpec {
    /// Subscribers (at least [`SUBSCRIBERS_MIN`]).
    pub subscribers: u64,
    /// Seed of the population and every stream.
    pub seed: u64,
}

impl TatpSpec {
    /// The rows subscriber `s_id` is loaded with.
    pub fn rows(&self, s_id: u64) -> SubscriberRows {
        let mut rng = SmallRng::seed_from_u64(splitmix64(self.seed ^ ROWS_SALT ^ splitmix64(s_id)));
        let subscriber = SubscriberRow {
            bits: rng.gen_range(0..1 << 10),
            hex: std::array::from_fn(|_| rng.gen_range(0..16)),
            byte2: std::array::from_fn(|_| rng.gen()),
            msc_location: rng.gen(),
            vlr_location: rng.gen(),
        };
        let mut access = [None; AI_TYPES];
        let mut types: [usize; AI_TYPES] = std::array::from_fn(|i| i);
        types.shuffle(&mut rng);
        for &t in &types[..rng.gen_range(1..=AI_TYPES)] {
            access[t] = Some(AccessRow {
                data1: rng.gen(),
                data2: rng.gen(),
                data3: letters(&mut rng),
                data4: letters(&mut rng),
            });
        }
        let mut facilities = [None; SF_TYPES];
        let mut forwardings = [[None; START_TIMES]; SF_TYPES];
        let mut types: [usize; SF_TYPES] = std::array::from_fn(|i| i);
        types.shuffle(&mut rng);
        for &t in &types[..rng.gen_range(1..=SF_TYPES)] {
            facilities[t] = Some(FacilityRow {
                is_active: rng.gen_range(0..100) < ACTIVE_PERCENT,
                error_cntrl: rng.gen(),
                data_a: rng.gen(),
                data_b: letters(&mut rng),
            });
            let mut starts: [usize; START_TIMES] = std::array::from_fn(|i| i);
            starts.shuffle(&mut rng);
            for &s in &starts[..rng.gen_range(0..=START_TIMES)] {
                forwardings[t][s] = Some(ForwardingRow {
                    end_hour: s as u8 * START_STEP_HOURS + rng.gen_range(1..=8),
                    numberx: rng.gen_range(0..NUMBERX_END),
                });
            }
        }
        SubscriberRows {
            subscriber,
            access,
            facilities,
            forwardings,
        }
    }

    /// The generator of stream `stream` (one per client).
    pub fn generator(&self, stream: u64) -> TatpGen {
        let subscribers = self.subscribers.max(SUBSCRIBERS_MIN);
        TatpGen {
            subscribers,
            a: nurand_a(subscribers),
            rng: SmallRng::seed_from_u64(splitmix64(
                self.seed ^ STREAM_SALT ^ splitmix64(stream.wrapping_add(1)),
            )),
        }
    }
}

/// An endless, seeded stream of TATP transactions.
#[derive(Clone, Debug)]
pub struct TatpGen {
    subscribers: u64,
    a: u64,
    rng: SmallRng,
}

impl TatpGen {
    /// A subscriber by TATP's non-uniform rule.
    pub fn subscriber(&mut self) -> u64 {
        let r1: u64 = self.rng.gen();
        let r2: u64 = self.rng.gen();
        ((r1 % self.subscribers) | (r2 & self.a)) % self.subscribers
    }

    fn sf_type(&mut self) -> u8 {
        self.rng.gen_range(0..SF_TYPES as u8)
    }

    fn start(&mut self) -> u8 {
        self.rng.gen_range(0..START_TIMES as u8)
    }

    fn hour(&mut self) -> u8 {
        self.rng.gen_range(1..=24)
    }

    /// The next transaction.
    pub fn next_txn(&mut self) -> TatpTxn {
        let mut roll = self.rng.gen_range(0..100u32);
        let mut kind = TatpKind::DeleteCallForwarding;
        for k in TatpKind::ALL {
            if roll < k.percent() {
                kind = k;
                break;
            }
            roll -= k.percent();
        }
        let s_id = self.subscriber();
        match kind {
            TatpKind::GetSubscriberData => TatpTxn::GetSubscriberData { s_id },
            TatpKind::GetNewDestination => TatpTxn::GetNewDestination {
                s_id,
                sf_type: self.sf_type(),
                start: self.start(),
                end_hour: self.hour(),
            },
            TatpKind::GetAccessData => TatpTxn::GetAccessData {
                s_id,
                ai_type: self.rng.gen_range(0..AI_TYPES as u8),
            },
            TatpKind::UpdateSubscriberData => TatpTxn::UpdateSubscriberData {
                s_id,
                bit_1: self.rng.gen(),
                sf_type: self.sf_type(),
                data_a: self.rng.gen(),
            },
            TatpKind::UpdateLocation => TatpTxn::UpdateLocation {
                sub_nbr: sub_nbr(s_id),
                vlr_location: self.rng.gen(),
            },
            TatpKind::InsertCallForwarding => TatpTxn::InsertCallForwarding {
                sub_nbr: sub_nbr(s_id),
                sf_type: self.sf_type(),
                start: self.start(),
                end_hour: self.hour(),
                numberx: self.rng.gen_range(0..NUMBERX_END),
            },
            TatpKind::DeleteCallForwarding => TatpTxn::DeleteCallForwarding {
                sub_nbr: sub_nbr(s_id),
                sf_type: self.sf_type(),
                start: self.start(),
            },
        }
    }
}

impl Iterator for TatpGen {
    type Item = TatpTxn;
    fn next(&mut self) -> Option<TatpTxn> {
        Some(self.next_txn())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAWS: usize = 200_000;

    #[test]
    fn the_mix_is_tatps_and_80_percent_read_only() {
        let spec = TatpSpec {
            subscribers: 10_000,
            seed: 4,
        };
        let mut counts = [0usize; 7];
        for t in spec.generator(0).take(DRAWS) {
            counts[t.kind().index()] += 1;
        }
        let mut read_only = 0.0;
        for k in TatpKind::ALL {
            let share = counts[k.index()] as f64 / DRAWS as f64 * 100.0;
            assert!(
                (share - f64::from(k.percent())).abs() < 0.5,
                "{}: {share:.2} %, want {} %",
                k.name(),
                k.percent()
            );
            if k.read_only() {
                read_only += share;
            }
        }
        assert!((read_only - 80.0).abs() < 0.5, "{read_only:.2} % read-only");
        assert_eq!(TatpKind::ALL.iter().map(|k| k.percent()).sum::<u32>(), 100);
    }

    #[test]
    fn parameters_are_in_range_and_subscribers_skewed() {
        let spec = TatpSpec {
            subscribers: 100_000,
            seed: 8,
        };
        let mut hits = vec![0u32; spec.subscribers as usize];
        for t in spec.generator(2).take(DRAWS) {
            let s = match t {
                TatpTxn::GetSubscriberData { s_id } => s_id,
                TatpTxn::GetNewDestination {
                    s_id,
                    sf_type,
                    start,
                    end_hour,
                } => {
                    assert!((sf_type as usize) < SF_TYPES && (start as usize) < START_TIMES);
                    assert!((1..=24).contains(&end_hour));
                    s_id
                }
                TatpTxn::GetAccessData { s_id, ai_type } => {
                    assert!((ai_type as usize) < AI_TYPES);
                    s_id
                }
                TatpTxn::UpdateSubscriberData { s_id, sf_type, .. } => {
                    assert!((sf_type as usize) < SF_TYPES);
                    s_id
                }
                TatpTxn::UpdateLocation { sub_nbr, .. }
                | TatpTxn::InsertCallForwarding { sub_nbr, .. }
                | TatpTxn::DeleteCallForwarding { sub_nbr, .. } => s_id_of(sub_nbr).unwrap(),
            };
            assert!(s < spec.subscribers);
            hits[s as usize] += 1;
        }
        // The OR with 16 random bits makes ids with more low bits set more
        // likely: 65,535 (all 16 bits) far more than 65,536 (none).
        assert!(
            hits[65_535] > 4 * hits[65_536].max(1),
            "{} vs {}",
            hits[65_535],
            hits[65_536]
        );
    }

    #[test]
    fn streams_and_rows_are_deterministic_per_seed() {
        let spec = TatpSpec {
            subscribers: 1_000,
            seed: 11,
        };
        let a: Vec<_> = spec.generator(0).take(1000).collect();
        assert_eq!(a, spec.generator(0).take(1000).collect::<Vec<_>>());
        assert_ne!(a, spec.generator(1).take(1000).collect::<Vec<_>>());
        assert_eq!(spec.rows(7), spec.rows(7));
        assert_ne!(spec.rows(7), TatpSpec { seed: 12, ..spec }.rows(7));
    }

    #[test]
    fn populations_follow_the_specification() {
        let spec = TatpSpec {
            subscribers: 5_000,
            seed: 2,
        };
        let (mut facilities, mut active) = (0u32, 0u32);
        for s in 0..spec.subscribers {
            let rows = spec.rows(s);
            assert!(rows.subscriber.bits < 1 << 10);
            let ai = rows.access.iter().flatten().count();
            let sf = rows.facilities.iter().flatten().count();
            assert!((1..=AI_TYPES).contains(&ai) && (1..=SF_TYPES).contains(&sf));
            for t in 0..SF_TYPES {
                for (st, cf) in rows.forwardings[t].iter().enumerate() {
                    if let Some(cf) = cf {
                        assert!(rows.facilities[t].is_some(), "a forwarding under no facility");
                        let start = st as u8 * START_STEP_HOURS;
                        assert!(cf.end_hour > start && cf.end_hour <= start + 8);
                        assert!(cf.numberx < NUMBERX_END);
                    }
                }
            }
            for f in rows.facilities.iter().flatten() {
                facilities += 1;
                active += u32::from(f.is_active);
            }
        }
        let share = f64::from(active) / f64::from(facilities) * 100.0;
        assert!((share - 85.0).abs() < 2.0, "{share:.1} % active");
    }
}
