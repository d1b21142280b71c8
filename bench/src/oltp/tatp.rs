//! TATP on records: five tables, every row one record at a row number
//! computed from the subscriber id (there is no index under them).
//!
//! | table               | row                     | bytes | layout (little endian) |
//! |---------------------|-------------------------|------:|------------------------|
//! | Subscriber          | `s`                     | 48 | s_id u64 · sub_nbr u64 · bit_1..10 u16 · hex_1..10 (a byte each) · byte2_1..10 · pad · msc_location u32 · vlr_location u32 |
//! | SecondarySubscriber | `s` (sub_nbr − 1)       | 16 | sub_nbr u64 · s_id u64 |
//! | AccessInfo          | `4s + ai_type`          | 24 | s_id u64 · valid u8 · ai_type u8 · data1 · data2 · data3 [3] · data4 [5] · pad |
//! | SpecialFacility     | `4s + sf_type`          | 24 | s_id u64 · valid u8 · sf_type u8 · is_active u8 · error_cntrl u8 · data_a u8 · data_b [5] · pad |
//! | CallForwarding      | `12s + 3 sf_type + start` | 32 | s_id u64 · valid u8 · sf_type u8 · start u8 · end_hour u8 · pad · numberx u64 · pad |
//!
//! Every slot a subscriber could have is pre-allocated; `valid` says
//! whether it holds a row. InsertCallForwarding and DeleteCallForwarding
//! set and clear it, so the table needs no index and no allocation during
//! the run. The conserved quantity is the number of valid CallForwarding
//! rows: the loaded ones plus committed inserts minus committed deletes.

use fabric::le_word;
use txn::TxError;
use workload::tatp::{
    s_id_of, sub_nbr, TatpGen, TatpKind, TatpSpec, TatpTxn, AI_TYPES, SF_TYPES, START_STEP_HOURS, START_TIMES,
};

use super::engine::OltpTx;
use super::{byte_at, row, OltpWorkload, Outcome, Tables};

/// Table numbers.
pub const SUBSCRIBER: usize = 0;
/// See [`SUBSCRIBER`].
pub const SECONDARY: usize = 1;
/// See [`SUBSCRIBER`].
pub const ACCESS: usize = 2;
/// See [`SUBSCRIBER`].
pub const FACILITY: usize = 3;
/// See [`SUBSCRIBER`].
pub const FORWARDING: usize = 4;

/// Record bytes per table.
const BYTES: [usize; 5] = [48, 16, 24, 24, 32];
/// Rows per subscriber per table.
const ROWS: [u64; 5] = [
    1,
    1,
    AI_TYPES as u64,
    SF_TYPES as u64,
    (SF_TYPES * START_TIMES) as u64,
];

/// Field offsets.
const S_ID_AT: usize = 0;
const SUB_NBR_AT: usize = 8;
const BITS_AT: usize = 16;
const HEX_AT: usize = 18;
const BYTE2_AT: usize = 28;
const MSC_AT: usize = 40;
const VLR_AT: usize = 44;
const SEC_S_ID_AT: usize = 8;
const VALID_AT: usize = 8;
const TYPE_AT: usize = 9;
const AI_DATA_AT: usize = 10;
const SF_ACTIVE_AT: usize = 10;
const SF_DATA_A_AT: usize = 12;
const CF_START_AT: usize = 10;
const CF_END_AT: usize = 11;
const CF_NUMBERX_AT: usize = 16;

/// TATP over `subscribers` subscribers.
#[derive(Clone, Copy, Debug)]
pub struct Tatp {
    /// The subscribers and the seed of the population and streams.
    pub spec: TatpSpec,
}

fn put(v: &mut [u8], at: usize, bytes: &[u8]) {
    v[at..at + bytes.len()].copy_from_slice(bytes);
}

fn slot_row(s_id: u64, table: usize, slot: u64) -> u64 {
    s_id * ROWS[table] + slot
}

fn forwarding_row(s_id: u64, sf_type: u8, start: u8) -> u64 {
    slot_row(
        s_id,
        FORWARDING,
        u64::from(sf_type) * START_TIMES as u64 + u64::from(start),
    )
}

/// The subscriber a SecondarySubscriber row names (one round trip: TATP's
/// lookup by number, here an array lookup by `sub_nbr - 1` and the read).
async fn lookup<T: OltpTx>(tx: &mut T, t: &Tables<T::Rec>, nbr: u64) -> Result<u64, TxError> {
    let s = s_id_of(nbr).ok_or_else(|| TxError::BadObject(format!("no subscriber has number {nbr}")))?;
    Ok(le_word(tx.read(row(t, SECONDARY, s)?).await?, SEC_S_ID_AT))
}

const DECLINED: Outcome = Outcome {
    declined: true,
    effect: 0,
};
const DONE: Outcome = Outcome {
    declined: false,
    effect: 0,
};

impl OltpWorkload for Tatp {
    type Txn = TatpTxn;
    type Gen = TatpGen;

    const NAME: &'static str = "tatp";
    const KINDS: &'static [&'static str] = &[
        "GetSubscriberData",
        "GetNewDestination",
        "GetAccessData",
        "UpdateSubscriberData",
        "UpdateLocation",
        "InsertCallForwarding",
        "DeleteCallForwarding",
    ];
    const TABLES: &'static [&'static str] = &[
        "Subscriber",
        "SecondarySubscriber",
        "AccessInfo",
        "SpecialFacility",
        "CallForwarding",
    ];
    const MEASURE: &'static str = "valid CallForwarding rows";

    fn units(&self) -> u64 {
        self.spec.subscribers
    }

    fn records_per_unit(&self) -> u64 {
        ROWS.iter().sum()
    }

    fn record_bytes_max(&self) -> u32 {
        BYTES[SUBSCRIBER] as u32
    }

    fn images(&self, s: u64, out: &mut Vec<(usize, Vec<u8>)>) {
        let rows = self.spec.rows(s);
        let sub = rows.subscriber;
        let mut v = vec![0u8; BYTES[SUBSCRIBER]];
        put(&mut v, S_ID_AT, &s.to_le_bytes());
        put(&mut v, SUB_NBR_AT, &sub_nbr(s).to_le_bytes());
        put(&mut v, BITS_AT, &sub.bits.to_le_bytes());
        put(&mut v, HEX_AT, &sub.hex);
        put(&mut v, BYTE2_AT, &sub.byte2);
        put(&mut v, MSC_AT, &sub.msc_location.to_le_bytes());
        put(&mut v, VLR_AT, &sub.vlr_location.to_le_bytes());
        out.push((SUBSCRIBER, v));

        let mut v = vec![0u8; BYTES[SECONDARY]];
        put(&mut v, 0, &sub_nbr(s).to_le_bytes());
        put(&mut v, SEC_S_ID_AT, &s.to_le_bytes());
        out.push((SECONDARY, v));

        for (ai_type, ai) in rows.access.iter().enumerate() {
            let mut v = vec![0u8; BYTES[ACCESS]];
            put(&mut v, S_ID_AT, &s.to_le_bytes());
            v[TYPE_AT] = ai_type as u8;
            if let Some(ai) = ai {
                v[VALID_AT] = 1;
                put(&mut v, AI_DATA_AT, &[ai.data1, ai.data2]);
                put(&mut v, AI_DATA_AT + 2, &ai.data3);
                put(&mut v, AI_DATA_AT + 5, &ai.data4);
            }
            out.push((ACCESS, v));
        }
        for (sf_type, sf) in rows.facilities.iter().enumerate() {
            let mut v = vec![0u8; BYTES[FACILITY]];
            put(&mut v, S_ID_AT, &s.to_le_bytes());
            v[TYPE_AT] = sf_type as u8;
            if let Some(sf) = sf {
                v[VALID_AT] = 1;
                v[SF_ACTIVE_AT] = u8::from(sf.is_active);
                v[SF_ACTIVE_AT + 1] = sf.error_cntrl;
                v[SF_DATA_A_AT] = sf.data_a;
                put(&mut v, SF_DATA_A_AT + 1, &sf.data_b);
            }
            out.push((FACILITY, v));
        }
        for (sf_type, starts) in rows.forwardings.iter().enumerate() {
            for (start, cf) in starts.iter().enumerate() {
                let mut v = vec![0u8; BYTES[FORWARDING]];
                put(&mut v, S_ID_AT, &s.to_le_bytes());
                v[TYPE_AT] = sf_type as u8;
                v[CF_START_AT] = start as u8;
                if let Some(cf) = cf {
                    v[VALID_AT] = 1;
                    v[CF_END_AT] = cf.end_hour;
                    put(&mut v, CF_NUMBERX_AT, &cf.numberx.to_le_bytes());
                }
                out.push((FORWARDING, v));
            }
        }
    }

    fn generator(&self, stream: u64) -> TatpGen {
        self.spec.generator(stream)
    }

    fn kind(txn: &TatpTxn) -> usize {
        txn.kind().index()
    }

    fn read_only(kind: usize) -> bool {
        TatpKind::ALL.get(kind).is_some_and(|k| k.read_only())
    }

    async fn execute<T: OltpTx>(
        &self,
        tx: &mut T,
        t: &Tables<T::Rec>,
        txn: TatpTxn,
    ) -> Result<Outcome, TxError> {
        match txn {
            TatpTxn::GetSubscriberData { s_id } => {
                tx.read(row(t, SUBSCRIBER, s_id)?).await?;
                Ok(DONE)
            }
            TatpTxn::GetNewDestination {
                s_id,
                sf_type,
                start,
                end_hour,
            } => {
                let sf = tx
                    .read(row(t, FACILITY, slot_row(s_id, FACILITY, sf_type.into()))?)
                    .await?;
                if byte_at(sf, VALID_AT) != 1 || byte_at(sf, SF_ACTIVE_AT) != 1 {
                    return Ok(DECLINED);
                }
                // Forwardings starting at or before `start`, ending after
                // `end_hour`: TATP's join, one record per start slot.
                let mut found = false;
                for st in 0..=start {
                    let cf = tx
                        .read(row(t, FORWARDING, forwarding_row(s_id, sf_type, st))?)
                        .await?;
                    found |= byte_at(cf, VALID_AT) == 1 && byte_at(cf, CF_END_AT) > end_hour;
                }
                Ok(if found { DONE } else { DECLINED })
            }
            TatpTxn::GetAccessData { s_id, ai_type } => {
                let ai = tx
                    .read(row(t, ACCESS, slot_row(s_id, ACCESS, ai_type.into()))?)
                    .await?;
                Ok(if byte_at(ai, VALID_AT) == 1 {
                    DONE
                } else {
                    DECLINED
                })
            }
            TatpTxn::UpdateSubscriberData {
                s_id,
                bit_1,
                sf_type,
                data_a,
            } => {
                let sf_rec = row(t, FACILITY, slot_row(s_id, FACILITY, sf_type.into()))?;
                if byte_at(tx.read_for_update(sf_rec).await?, VALID_AT) != 1 {
                    return Ok(DECLINED);
                }
                let sub_rec = row(t, SUBSCRIBER, s_id)?;
                let sub = tx.read_for_update(sub_rec).await?;
                let bits = u16::from_le_bytes([byte_at(sub, BITS_AT), byte_at(sub, BITS_AT + 1)]);
                let bits = (bits & !1) | u16::from(bit_1);
                tx.write_part(sub_rec, BITS_AT, &bits.to_le_bytes()).await?;
                tx.write_part(sf_rec, SF_DATA_A_AT, &[data_a]).await?;
                Ok(DONE)
            }
            TatpTxn::UpdateLocation {
                sub_nbr,
                vlr_location,
            } => {
                let s_id = lookup(tx, t, sub_nbr).await?;
                let sub_rec = row(t, SUBSCRIBER, s_id)?;
                tx.read_for_update(sub_rec).await?;
                tx.write_part(sub_rec, VLR_AT, &vlr_location.to_le_bytes())
                    .await?;
                Ok(DONE)
            }
            TatpTxn::InsertCallForwarding {
                sub_nbr,
                sf_type,
                start,
                end_hour,
                numberx,
            } => {
                let s_id = lookup(tx, t, sub_nbr).await?;
                let sf = tx
                    .read(row(t, FACILITY, slot_row(s_id, FACILITY, sf_type.into()))?)
                    .await?;
                if byte_at(sf, VALID_AT) != 1 {
                    return Ok(DECLINED);
                }
                let cf_rec = row(t, FORWARDING, forwarding_row(s_id, sf_type, start))?;
                if byte_at(tx.read_for_update(cf_rec).await?, VALID_AT) != 0 {
                    return Ok(DECLINED);
                }
                let mut fields = [0u8; 16];
                fields[0] = 1;
                fields[TYPE_AT - VALID_AT] = sf_type;
                fields[CF_START_AT - VALID_AT] = start;
                fields[CF_END_AT - VALID_AT] = end_hour;
                fields[CF_NUMBERX_AT - VALID_AT..].copy_from_slice(&numberx.to_le_bytes());
                tx.write_part(cf_rec, VALID_AT, &fields).await?;
                Ok(Outcome {
                    declined: false,
                    effect: 1,
                })
            }
            TatpTxn::DeleteCallForwarding {
                sub_nbr,
                sf_type,
                start,
            } => {
                let s_id = lookup(tx, t, sub_nbr).await?;
                let cf_rec = row(t, FORWARDING, forwarding_row(s_id, sf_type, start))?;
                if byte_at(tx.read_for_update(cf_rec).await?, VALID_AT) != 1 {
                    return Ok(DECLINED);
                }
                tx.write_part(cf_rec, VALID_AT, &[0]).await?;
                Ok(Outcome {
                    declined: false,
                    effect: -1,
                })
            }
        }
    }

    fn measure(&self, table: usize, bytes: &[u8]) -> i64 {
        i64::from(table == FORWARDING && byte_at(bytes, VALID_AT) == 1)
    }

    fn inconsistency(&self, table: usize, row: u64, bytes: &[u8]) -> Option<String> {
        let name = Self::TABLES.get(table).copied().unwrap_or("?");
        let want = BYTES.get(table).copied().unwrap_or(0);
        if bytes.len() != want {
            return Some(format!("{name} row {row}: {} bytes, not {want}", bytes.len()));
        }
        let per = ROWS[table];
        let (s, slot) = (row / per, row % per);
        let bad = |what: String| Some(format!("{name} row {row}: {what}"));
        if table == SECONDARY {
            let (nbr, s_id) = (le_word(bytes, 0), le_word(bytes, SEC_S_ID_AT));
            if nbr != sub_nbr(s) || s_id != s {
                return bad(format!("number {nbr} names subscriber {s_id}"));
            }
            return None;
        }
        let s_id = le_word(bytes, S_ID_AT);
        if s_id != s {
            return bad(format!("subscriber id {s_id}, not {s}"));
        }
        match table {
            SUBSCRIBER => {
                let nbr = le_word(bytes, SUB_NBR_AT);
                let bits = u16::from_le_bytes([byte_at(bytes, BITS_AT), byte_at(bytes, BITS_AT + 1)]);
                if nbr != sub_nbr(s) || bits >= 1 << 10 {
                    return bad(format!("number {nbr}, bits {bits:#x}"));
                }
            }
            ACCESS | FACILITY | FORWARDING => {
                let valid = byte_at(bytes, VALID_AT);
                if valid > 1 {
                    return bad(format!("valid flag {valid}"));
                }
                let (ty, start) = if table == FORWARDING {
                    (slot / START_TIMES as u64, slot % START_TIMES as u64)
                } else {
                    (slot, 0)
                };
                if u64::from(byte_at(bytes, TYPE_AT)) != ty {
                    return bad(format!("type {} in slot {ty}", byte_at(bytes, TYPE_AT)));
                }
                if table == FORWARDING {
                    if u64::from(byte_at(bytes, CF_START_AT)) != start {
                        return bad(format!("start {} in slot {start}", byte_at(bytes, CF_START_AT)));
                    }
                    let end = byte_at(bytes, CF_END_AT);
                    if valid == 1 && !(1..=3 * START_STEP_HOURS).contains(&end) {
                        return bad(format!("end hour {end}"));
                    }
                }
            }
            _ => {}
        }
        None
    }
}
