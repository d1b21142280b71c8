//! RACE hashing against `std::collections::HashMap` as the model, single
//! and multi-threaded, with subtables small enough that inserts split them
//! at every depth while other clients read and update; round trips and
//! verbs per operation; bulk load; the checker.

use std::collections::{BTreeMap, HashMap};

use fabric::{Client, LocalTransport, RegionSpec};
use index::hash::{HashConfig, HashTable};
use index::{IndexError, Variant};
use rand::{Rng, SeedableRng};
use txn::{Heap, HeapConfig, TxConfig};

const REGION: u16 = 1;
const CREATOR: u16 = 1;
const VARIANTS: [Variant; 3] = [Variant::Optimal, Variant::Rtx, Variant::Dtx];
/// Two groups (42 slots) per subtable: a few dozen keys split one.
const TINY: HashConfig = HashConfig {
    groups: 2,
    dir_depth: 10,
};

async fn table(variant: Variant, config: HashConfig) -> HashTable {
    let (t, map) = LocalTransport::cluster(
        1,
        &[RegionSpec {
            id: REGION,
            size: 64 << 20,
        }],
    )
    .unwrap();
    let mut fabric = Client::new(map, t.into());
    let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
        .await
        .unwrap();
    HashTable::create(fabric, heap, variant, CREATOR, config)
        .await
        .unwrap()
}

async fn attach(t: &mut HashTable, owner: u16) -> HashTable {
    let fabric = t.fabric().fork();
    HashTable::attach(fabric, t.heap(), owner, TxConfig::default(), t.info())
        .await
        .unwrap()
}

async fn assert_sound(t: &mut HashTable, model: &BTreeMap<u64, u64>, at: &str) {
    let report = t.check().await.unwrap();
    assert!(report.is_ok(), "{at}: {:?}", report.violations);
    assert_eq!(&t.entries().await.unwrap(), model, "{at}: contents");
    assert_eq!(report.keys, model.len() as u64, "{at}");
}

#[tokio::test]
async fn random_operations_match_a_hashmap() {
    for variant in VARIANTS {
        let mut t = table(variant, TINY).await;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut model: HashMap<u64, u64> = HashMap::new();
        for i in 0..6_000 {
            let key = rng.gen_range(0..1_500u64);
            let value: u64 = rng.gen();
            let at = format!("{variant} op {i} key {key}");
            match rng.gen_range(0..10) {
                0..=3 => {
                    let want = !model.contains_key(&key);
                    if want {
                        model.insert(key, value);
                    }
                    assert_eq!(t.insert(key, value).await.unwrap(), want, "{at}: insert");
                }
                4..=5 => {
                    let want = model.contains_key(&key);
                    if want {
                        model.insert(key, value);
                    }
                    assert_eq!(t.update(key, value).await.unwrap(), want, "{at}: update");
                }
                6 => {
                    model.insert(key, value);
                    t.upsert(key, value).await.unwrap();
                }
                7 => assert_eq!(
                    t.delete(key).await.unwrap(),
                    model.remove(&key).is_some(),
                    "{at}: delete"
                ),
                _ => assert_eq!(t.get(key).await.unwrap(), model.get(&key).copied(), "{at}: get"),
            }
        }
        assert!(
            t.stats().splits > 10,
            "{variant}: the tiny subtables split ({:?})",
            t.stats()
        );
        let model: BTreeMap<u64, u64> = model.into_iter().collect();
        assert_sound(&mut t, &model, &variant.to_string()).await;
        // A client attached after all that sees the same table.
        let mut late = attach(&mut t, 9).await;
        for (&k, &v) in model.iter().take(200) {
            assert_eq!(late.get(k).await.unwrap(), Some(v));
        }
    }
}

/// One client's share: keys `k % clients == id`; inserts (which split),
/// updates, deletes and reads, each checked against its own model.
async fn disjoint_client(
    mut t: HashTable,
    id: u64,
    clients: u64,
    ops: usize,
) -> (BTreeMap<u64, u64>, HashTable) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99 ^ id << 20);
    let mut model = BTreeMap::new();
    let variant = t.variant();
    for i in 0..ops {
        let key = rng.gen_range(0..800u64) * clients + id;
        let value: u64 = rng.gen();
        let at = format!("{variant} client {id} op {i} key {key}");
        match rng.gen_range(0..10) {
            0..=4 => {
                let want = !model.contains_key(&key);
                if want {
                    model.insert(key, value);
                }
                assert_eq!(t.insert(key, value).await.unwrap(), want, "{at}: insert");
            }
            5..=6 => {
                let want = model.contains_key(&key);
                if want {
                    model.insert(key, value);
                }
                assert_eq!(t.update(key, value).await.unwrap(), want, "{at}: update");
            }
            7 => assert_eq!(
                t.delete(key).await.unwrap(),
                model.remove(&key).is_some(),
                "{at}: delete"
            ),
            _ => assert_eq!(t.get(key).await.unwrap(), model.get(&key).copied(), "{at}: get"),
        }
    }
    (model, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_split_while_others_read_and_update() {
    const CLIENTS: u64 = 4;
    for variant in VARIANTS {
        let mut t = table(variant, TINY).await;
        let mut tasks = Vec::new();
        for id in 0..CLIENTS {
            let c = attach(&mut t, CREATOR + 1 + id as u16).await;
            tasks.push(tokio::spawn(disjoint_client(c, id, CLIENTS, 2_500)));
        }
        let mut model = BTreeMap::new();
        let mut splits = 0;
        for task in tasks {
            let (m, c) = task.await.unwrap();
            splits += c.stats().splits;
            model.extend(m);
        }
        assert!(
            splits > 10,
            "{variant}: splits happened under concurrency ({splits})"
        );
        assert_sound(&mut t, &model, &format!("{variant} concurrent")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_always_find_keys_that_splits_move() {
    // One writer inserts fresh keys (splitting subtables over and over);
    // readers keep reading keys inserted before they started, which the
    // splits move between subtables: none may ever read as absent.
    for variant in VARIANTS {
        let mut t = table(variant, TINY).await;
        for k in 1..=300u64 {
            assert!(t.insert(k, k * 10).await.unwrap());
        }
        let mut writer = attach(&mut t, 2).await;
        let w = tokio::spawn(async move {
            for k in 1_000..4_000u64 {
                assert!(writer.insert(k, k).await.unwrap());
            }
            writer
        });
        let mut readers = Vec::new();
        for r in 0..3u16 {
            let mut c = attach(&mut t, 3 + r).await;
            readers.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(r));
                for _ in 0..4_000 {
                    let k = rng.gen_range(1..=300u64);
                    assert_eq!(
                        c.get(k).await.unwrap(),
                        Some(k * 10),
                        "{variant} reader {r} key {k}"
                    );
                    if rng.gen_bool(0.2) {
                        // Updates that rewrite the same value race the splits too.
                        assert!(c.update(k, k * 10).await.unwrap(), "{variant} update {k}");
                    }
                }
            }));
        }
        for r in readers {
            r.await.unwrap();
        }
        w.await.unwrap();
        let model: BTreeMap<u64, u64> = (1..=300u64)
            .map(|k| (k, k * 10))
            .chain((1_000..4_000).map(|k| (k, k)))
            .collect();
        assert_sound(&mut t, &model, &format!("{variant} readers")).await;
    }
}

#[tokio::test]
async fn round_trips_and_verbs_per_operation() {
    for variant in VARIANTS {
        let mut t = table(variant, HashConfig::default()).await;
        assert!(t.insert(5, 50).await.unwrap());
        // The guard read before the buckets: rtx's meta, dtx's pointer
        // record (lock, version, pointer).
        let guard_bytes = match variant {
            Variant::Optimal => None,
            Variant::Rtx => Some(16),
            Variant::Dtx => Some(24),
        };
        let before = t.fabric().stats();
        assert_eq!(t.get(5).await.unwrap(), Some(50));
        let d = t.fabric().stats() - before;
        // RT1: the two combined buckets (rtx: and the subtable's meta, the
        // lease check; dtx: its record); RT2: the KV block.
        assert_eq!(d.round_trips, 2, "{variant} get");
        assert_eq!(
            d.reads,
            3 + u64::from(guard_bytes.is_some()),
            "{variant} get READs"
        );
        assert_eq!(
            d.bytes_read,
            256 + 24 + guard_bytes.unwrap_or(0),
            "{variant} get bytes"
        );

        let before = t.fabric().stats();
        assert!(t.update(5, 51).await.unwrap());
        let d = t.fabric().stats() - before;
        // RT1 also WRITEs the new KV block; RT3 CASes the slot and re-reads
        // the headers (optimal) or the guard (rtx, dtx).
        assert_eq!(d.round_trips, 3, "{variant} update");
        assert_eq!(d.cas, 1, "{variant} update CAS");
        assert_eq!(d.writes, 1, "{variant} update WRITE");
        assert_eq!(d.bytes_written, 24, "{variant} update bytes written");

        let before = t.fabric().stats();
        assert!(t.insert(6, 60).await.unwrap());
        let d = t.fabric().stats() - before;
        // No fingerprint match, so no RT2: RT1 and the CAS with its re-read.
        assert!(
            d.round_trips <= 3,
            "{variant} insert: {} round trips",
            d.round_trips
        );
        assert_eq!(d.cas, 1, "{variant} insert CAS");
    }
}

#[tokio::test]
async fn bulk_load_then_operate_then_check() {
    for variant in VARIANTS {
        let mut t = table(
            variant,
            HashConfig {
                groups: 8,
                dir_depth: 8,
            },
        )
        .await;
        let entries: Vec<(u64, u64)> = (0..5_000u64).map(|k| (k * 7 + 1, k)).collect();
        let mut last = 0;
        let report = t.bulk_load(&entries, |n| last = n).await.unwrap();
        assert_eq!(last, 5_000);
        assert_eq!(report.keys, 5_000);
        assert!(report.subtables >= 16 && report.load_factor < 0.8, "{report:?}");
        let mut model: BTreeMap<u64, u64> = entries.iter().copied().collect();
        for k in 0..500u64 {
            assert!(t.update(k * 7 + 1, 1).await.unwrap());
            model.insert(k * 7 + 1, 1);
            assert!(t.insert(k * 7 + 2, 2).await.unwrap());
            model.insert(k * 7 + 2, 2);
        }
        assert_sound(&mut t, &model, &format!("{variant} loaded")).await;
        assert!(matches!(
            t.bulk_load(&entries, |_| {}).await,
            Err(IndexError::Layout(_))
        ));
    }
}

#[tokio::test]
async fn a_table_at_its_directory_depth_reports_full() {
    for variant in VARIANTS {
        let mut t = table(
            variant,
            HashConfig {
                groups: 1,
                dir_depth: 1,
            },
        )
        .await;
        let mut inserted = 0u64;
        let err = loop {
            match t.insert(inserted + 1, 0).await {
                Ok(true) => inserted += 1,
                Ok(false) => unreachable!("keys are distinct"),
                Err(e) => break e,
            }
            assert!(
                inserted < 100,
                "{variant}: two subtables of 21 slots hold at most 42 keys"
            );
        };
        assert!(matches!(err, IndexError::Full(_)), "{variant}: {err}");
        assert!(inserted >= 2, "{variant}: {inserted}");
        let report = t.check().await.unwrap();
        assert!(report.is_ok(), "{:?}", report.violations);
        assert_eq!(report.keys, inserted);
    }
}

#[tokio::test]
async fn bad_shapes_are_refused() {
    let (tr, map) = LocalTransport::cluster(
        1,
        &[RegionSpec {
            id: REGION,
            size: 8 << 20,
        }],
    )
    .unwrap();
    let mut fabric = Client::new(map, tr.into());
    let heap = Heap::format(&mut fabric, REGION, HeapConfig::default())
        .await
        .unwrap();
    for config in [
        HashConfig {
            groups: 0,
            dir_depth: 4,
        },
        HashConfig {
            groups: 4,
            dir_depth: 17,
        },
    ] {
        let r = HashTable::create(fabric.fork(), heap, Variant::Rtx, CREATOR, config).await;
        assert!(matches!(r, Err(IndexError::Layout(_))), "{config:?}");
    }
    let r = HashTable::open(fabric.fork(), heap, CREATOR, TxConfig::default()).await;
    assert!(
        matches!(r, Err(IndexError::Layout(_))),
        "an empty heap holds no table"
    );
}

#[tokio::test]
async fn grow_splits_every_subtable_once() {
    for variant in VARIANTS {
        let mut t = table(
            variant,
            HashConfig {
                groups: 4,
                dir_depth: 8,
            },
        )
        .await;
        let model: BTreeMap<u64, u64> = (1..=400u64).map(|k| (k, k + 1)).collect();
        for (&k, &v) in &model {
            assert!(t.insert(k, v).await.unwrap());
        }
        let before = t.check().await.unwrap().subtables;
        let splits = t.grow().await.unwrap();
        assert_eq!(splits, before, "{variant}");
        assert_eq!(t.check().await.unwrap().subtables, 2 * before, "{variant}");
        assert_sound(&mut t, &model, &format!("{variant} grown")).await;
    }
}

/// optimal moves a splitting subtable's entries as the original resize
/// does, one verb per round trip (each key READ, each CAS in, each CAS
/// out), unless told to batch them; the verbs are the same either way, and
/// so is the result.
#[tokio::test]
async fn optimal_split_handles_one_entry_per_round_trip_unless_batched() {
    let config = HashConfig {
        groups: 4,
        dir_depth: 8,
    };
    // Few enough keys that the one subtable of depth 0 holds them all.
    let model: BTreeMap<u64, u64> = (1..=40u64).map(|k| (k, k * 3)).collect();
    let moving = model
        .keys()
        .filter(|&&k| index::hash::layout::dir_hash(k) & 1 == 1)
        .count() as u64;
    assert!(moving > 0);
    let mut cost = Vec::new();
    for per_round_trip in [1, fabric::VERBS_PER_BATCH_MAX] {
        let mut t = table(Variant::Optimal, config).await;
        for (&k, &v) in &model {
            assert!(t.insert(k, v).await.unwrap());
        }
        assert_eq!(t.check().await.unwrap().subtables, 1, "no split yet");
        t.set_split_entries_per_round_trip(per_round_trip);
        let before = t.fabric().stats();
        assert_eq!(t.grow().await.unwrap(), 1);
        cost.push(t.fabric().stats() - before);
        assert_sound(&mut t, &model, &format!("grown, {per_round_trip} per round trip")).await;
    }
    let (one, batched) = (cost[0], cost[1]);
    assert_eq!(one.cas, batched.cas, "the same CASes");
    assert_eq!(one.reads, batched.reads, "the same READs");
    // Keys, in and out: one round trip per entry each, against one per step.
    let entries = model.len() as u64;
    assert_eq!(
        one.round_trips - batched.round_trips,
        (entries - 1) + 2 * (moving - 1)
    );
}

/// rtx: the directory's lock left by a dead owner (no log) with an expired
/// lease is a violation until `repair_expired_locks` meets it; the common
/// path never reads that lock, so only a split or this sweep would.
#[tokio::test]
async fn an_expired_directory_lock_is_repaired_by_the_sweep() {
    let mut t = table(Variant::Rtx, TINY).await;
    for k in 1..=100u64 {
        assert!(t.insert(k, k).await.unwrap());
    }
    let dir = t.info().dir;
    let mut batch = fabric::Batch::new();
    batch.write(dir, &txn::LockWord::locked(9, 1).raw().to_le_bytes());
    t.fabric().execute(&mut batch).await.unwrap();
    let report = t.check().await.unwrap();
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("directory is locked")),
        "{:?}",
        report.violations
    );
    assert_eq!(report.locks_held, 1, "counted as a held lock");
    assert_eq!(t.repair_expired_locks().await.unwrap(), 1);
    assert_eq!(t.repair_expired_locks().await.unwrap(), 0);
    let model: BTreeMap<u64, u64> = (1..=100u64).map(|k| (k, k)).collect();
    assert_sound(&mut t, &model, "after the sweep").await;
    assert_eq!(
        table(Variant::Optimal, TINY)
            .await
            .repair_expired_locks()
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn the_next_holder_of_an_owner_id_writes_its_kv_blocks_where_the_last_one_stopped() {
    const HOLDER: u16 = 7;
    for variant in VARIANTS {
        let mut t = table(variant, HashConfig::default()).await;
        let heap = t.heap();
        let mut model = BTreeMap::new();
        let mut first = attach(&mut t, HOLDER).await;
        for k in 0..50 {
            assert!(first.insert(k, k * 10).await.unwrap());
            model.insert(k, k * 10);
        }
        for k in 0..20 {
            assert!(first.update(k, k * 100).await.unwrap());
            model.insert(k, k * 100);
        }
        assert_eq!(first.stats().kv_tail_bytes_adopted, 0, "{variant}");
        // The holder leaves (or dies: what it wrote is all that counts).
        drop(first);

        let sealed_of_holder = |tags: &[txn::ChunkTag]| {
            tags.iter()
                .filter(|t| t.owner() == Some(HOLDER) && t.kind() == Some(txn::ChunkKind::Sealed))
                .count()
        };
        let tags = heap.owner_table_of(t.fabric()).await.unwrap();
        assert_eq!(sealed_of_holder(&tags), 1, "{variant}");
        let taken = tags.iter().filter(|t| t.owner().is_some()).count();

        let mut heir = attach(&mut t, HOLDER).await;
        for k in 50..100 {
            assert!(heir.insert(k, k * 10).await.unwrap());
            model.insert(k, k * 10);
        }
        let adopted = heir.stats().kv_tail_bytes_adopted;
        // The holder's 70 KV blocks (no CAS was lost: one client at a time).
        assert_eq!(heap.chunk_bytes() - adopted, 70 * 24, "{variant}");
        let tags = heap.owner_table_of(t.fabric()).await.unwrap();
        let now = tags.iter().filter(|t| t.owner().is_some()).count();
        assert_eq!(now, taken, "{variant}: the heir took no chunk");
        drop(heir);
        assert_sound(&mut t, &model, &format!("{variant} after the heir")).await;
    }
}
