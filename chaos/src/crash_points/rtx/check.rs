//! What an rTX run must leave, read from DM directly.

use fabric::le_word;
use fabric::{Client, GlobalAddr};
use txn::log::{Log, LOG_SLOT_BYTES};
use txn::word::LogState;
use txn::{DataPtr, LockWord, OwnerId, TxClient};

use super::run::{read_all, Cell, Record, World, OLD, OWNER_SLOTS, REGION};

fn inspector(w: &World) -> Client {
    Client::new(w.map.clone(), w.base.clone())
}

/// Every object's lock word (primary) and data pointer and cell on every
/// replica.
async fn objects(w: &World) -> Result<Vec<(LockWord, Vec<DataPtr>, Vec<Cell>)>, String> {
    let mut fabric = inspector(w);
    let mut out = Vec::with_capacity(w.objs.len());
    for o in &w.objs {
        let metas = read_all(&mut fabric, o.meta(), 16).await?;
        let lock = LockWord::from_raw(le_word(&metas[0], 0));
        let ptrs: Vec<DataPtr> = metas.iter().map(|m| DataPtr::from_raw(le_word(m, 8))).collect();
        let mut cells = Vec::with_capacity(ptrs.len());
        for (r, p) in ptrs.iter().enumerate() {
            let at = GlobalAddr::new(REGION, p.offset());
            let bytes = read_all(&mut fabric, at, std::mem::size_of::<Cell>() as u32).await?;
            cells.push(bytemuck::pod_read_unaligned(&bytes[r]));
        }
        out.push((lock, ptrs, cells));
    }
    Ok(out)
}

/// True if the transaction that wrote `later` read `earlier`, directly or
/// through other recorded transactions.
fn descends(records: &[Record], later: u64, earlier: u64) -> bool {
    let mut at = later;
    for _ in 0..=records.len() {
        if at == earlier {
            return true;
        }
        match records
            .iter()
            .find(|r| r.generation == at)
            .and_then(|r| r.seen.as_deref())
        {
            Some([first, ..]) => at = *first,
            _ => return false,
        }
    }
    false
}

/// When `who`'s commit of `generation` is acknowledged, every replica of
/// every object already holds it, or a transaction that committed on top
/// of it: a primary lost right then must not lose it (everyone else is
/// stopped, so nothing moves while this reads).
pub(super) async fn acknowledged_everywhere(
    w: &World,
    records: &[Record],
    generation: u64,
    who: &str,
) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for (i, (_, _, cells)) in objects(w).await?.into_iter().enumerate() {
        for (r, c) in cells.iter().enumerate() {
            if !descends(records, c.generation, generation) || !c.is_sound(i) {
                found.push(format!(
                    "{who}'s commit of generation {generation} was acknowledged while replica {r} of object {i} held {c:?}"
                ));
            }
        }
    }
    Ok(found)
}

/// The logs on the primary that are DOING: committed, being installed.
async fn doing_logs(w: &World) -> Result<Vec<(OwnerId, Log)>, String> {
    let mut fabric = inspector(w);
    let mut logs = Vec::new();
    for owner in 0..OWNER_SLOTS {
        let slot = w.heap.log_slot(owner).map_err(|e| e.to_string())?;
        let bytes = read_all(&mut fabric, slot, LOG_SLOT_BYTES as u32).await?;
        if let Some(log) = Log::decode(&bytes[0]) {
            if log.header.state() == LogState::Doing {
                logs.push((owner, log));
            }
        }
    }
    Ok(logs)
}

/// No block `client` would reuse next is named as replaced by a log that is
/// DOING (an INIT log is only ever aborted): a stalled taker of that log
/// still holds CASes from it, and a
/// block that comes back under the same object at the same 16-bit pointer
/// version would let one succeed (issue 19, item 3).
pub(super) async fn free_blocks_unnamed(
    w: &World,
    client: &TxClient,
    who: &str,
) -> Result<Vec<String>, String> {
    let free = client.free_blocks();
    let mut found = Vec::new();
    for (owner, log) in doing_logs(w).await? {
        for e in &log.entries {
            if free.contains(&e.old.offset()) {
                found.push(format!(
                    "{who} holds block {} ready for reuse while owner {owner}'s log, {:?}, names it",
                    e.old.offset(),
                    log.header
                ));
            }
        }
    }
    Ok(found)
}

/// The committed transactions form one serial history: from the final
/// generation back, each read the one before, down to the objects' first;
/// every acknowledged transaction is in it, and only transactions that may
/// have committed are.
pub(super) fn history(records: &[Record], last: u64) -> Vec<String> {
    let mut found = Vec::new();
    let mut chain = Vec::new();
    let mut at = last;
    while at != OLD {
        let Some(r) = records.iter().find(|r| r.generation == at) else {
            found.push(format!("generation {at} is in DM, but no transaction wrote it"));
            break;
        };
        if chain.contains(&at) {
            found.push(format!("generation {at} read itself back: {chain:?}"));
            break;
        }
        chain.push(at);
        match r.seen.as_deref() {
            Some([first, ..]) => at = *first,
            _ => {
                found.push(format!(
                    "the {} committed generation {at} without reading",
                    r.party
                ));
                break;
            }
        }
    }
    for r in records.iter().filter(|r| r.acknowledged) {
        if !chain.contains(&r.generation) {
            found.push(format!(
                "the {}'s acknowledged commit of generation {} is lost (history {chain:?} from {last})",
                r.party, r.generation
            ));
        }
    }
    found
}

/// At the end, after recovery and a checker: no lock held, every log
/// finished, every object's data sound on the primary, and the replicas
/// the same word for word wherever they must agree
/// ([`txn::Heap::compare_replicas`]: data pointers, data, log slots, the
/// chunk owner table, the header; a chunk may be recorded on some replicas
/// only if its taker was `interrupted` in the middle of taking it).
pub(super) async fn replicas_agree(w: &World, interrupted: &[OwnerId]) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for (i, (lock, _, cells)) in objects(w).await?.into_iter().enumerate() {
        if lock.is_locked() {
            found.push(format!("object {i} is still locked: {lock:?}"));
        }
        if !cells[0].is_sound(i) {
            found.push(format!("object {i} holds unsound data {:?}", cells[0]));
        }
    }
    let mut fabric = inspector(w);
    for owner in 0..OWNER_SLOTS {
        let slot = w.heap.log_slot(owner).map_err(|e| e.to_string())?;
        let bytes = read_all(&mut fabric, slot, LOG_SLOT_BYTES as u32).await?;
        if let Some(log) = Log::decode(&bytes[0]) {
            if !matches!(log.header.state(), LogState::Done | LogState::Empty) {
                found.push(format!("owner {owner}'s log is left {:?}", log.header));
            }
        }
    }
    let cell = std::mem::size_of::<Cell>() as u32;
    let report = w
        .heap
        .compare_replicas(&mut fabric, &|_| Some(cell), &|o| interrupted.contains(&o))
        .await
        .map_err(|e| e.to_string())?;
    found.extend(report.listed.iter().map(|d| format!("replicas differ: {d}")));
    if report.differences > report.listed.len() as u64 {
        found.push(format!(
            "... {} more replica differences",
            report.differences - report.listed.len() as u64
        ));
    }
    Ok(found)
}
