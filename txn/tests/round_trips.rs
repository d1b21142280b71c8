//! Round trips and verbs per transaction, asserted exactly from the fabric
//! counters (`docs/txn.md`, "Cost of a commit", quotes these numbers).
//!
//! Objects are 1 KiB, like the Sherman leaves of the paper's Table 2.
//! Execution (the reads) and commit are counted separately; expected numbers
//! follow commit.rs's RT1..RT4:
//!
//! - execution: per object, READ meta (16 B), then READ data (1 KiB): 2 round trips;
//! - RT1: WRITE new data (every replica), WRITE the log (every replica,
//!   logged only: 24 B header + 32 B per entry), CAS every lock (primary);
//! - RT2: READ the meta of objects read and not written (none here);
//! - RT3: CAS log INIT -> DOING (every replica; logged only);
//! - RT4: CAS the data pointers (backups in a round trip of their own when
//!   replicated), CAS the lock releases (primary), CAS log DOING -> DONE
//!   (every replica; logged only).

mod common;

use common::Cluster;
use fabric::Stats;
use txn::{TxConfig, TxObj};

/// A 1 KiB object.
type Node = [u64; 128];
const NODE_BYTES: u64 = 1024;
/// Log bytes: header, checksum and count words, then four words per entry.
fn log_bytes(n: u64) -> u64 {
    24 + 32 * n
}

/// What a commit (or an execution) cost, as the fabric counted it.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    round_trips: u64,
    reads: u64,
    bytes_read: u64,
    writes: u64,
    bytes_written: u64,
    cas: u64,
}

impl From<Stats> for Cost {
    fn from(s: Stats) -> Cost {
        assert_eq!((s.faa, s.flushes, s.verb_errors), (0, 0, 0), "{s:?}");
        Cost {
            round_trips: s.round_trips,
            reads: s.reads,
            bytes_read: s.bytes_read,
            writes: s.writes,
            bytes_written: s.bytes_written,
            cas: s.cas,
        }
    }
}

/// Runs a read-modify-write of `n` fresh 1 KiB objects (after one warm-up
/// commit of the same objects, so that allocation costs no verbs) and
/// returns the cost of its execution and of its commit.
async fn read_modify_write(replicas: u16, n: usize, opt1: bool) -> (Cost, Cost) {
    let cluster = Cluster::new(replicas).await;
    let mut c = cluster.client_with(
        1,
        TxConfig {
            opt1,
            ..TxConfig::default()
        },
    );
    let mut objs: Vec<TxObj<Node>> = Vec::new();
    for i in 0..n {
        objs.push(c.create(&[i as u64; 128]).await.unwrap());
    }
    let bump = async |c: &mut txn::TxClient, objs: &[TxObj<Node>]| {
        let mut tx = c.begin();
        let s0 = tx.client().fabric().stats();
        for &o in objs {
            let mut v = tx.read(o).await.unwrap();
            v[0] += 1;
            tx.write(o, &v).await.unwrap();
        }
        let s1 = tx.client().fabric().stats();
        tx.commit().await.unwrap();
        let s2 = c.fabric().stats();
        (Cost::from(s1 - s0), Cost::from(s2 - s1))
    };
    bump(&mut c, &objs).await;
    let costs = bump(&mut c, &objs).await;
    for (i, &o) in objs.iter().enumerate() {
        let v = c.run(async |tx| tx.read(o).await).await.unwrap();
        assert_eq!(v[0], i as u64 + 2, "both commits landed");
    }
    costs
}

fn execution(n: u64) -> Cost {
    Cost {
        round_trips: 2 * n,
        reads: 2 * n,
        bytes_read: (16 + NODE_BYTES) * n,
        writes: 0,
        bytes_written: 0,
        cas: 0,
    }
}

#[tokio::test]
async fn one_object_without_replication_is_two_round_trips_and_three_cas() {
    let (exec, commit) = read_modify_write(1, 1, true).await;
    assert_eq!(exec, execution(1));
    // RT1: WRITE data + CAS lock. RT4: CAS pointer + CAS release. No log.
    let expected = Cost {
        round_trips: 2,
        reads: 0,
        bytes_read: 0,
        writes: 1,
        bytes_written: NODE_BYTES,
        cas: 3,
    };
    assert_eq!(commit, expected);
}

#[tokio::test]
async fn one_object_with_a_backup_adds_the_backup_pointer_round_trip() {
    let (exec, commit) = read_modify_write(2, 1, true).await;
    assert_eq!(exec, execution(1));
    // RT1: WRITE data on both replicas + CAS lock. RT4a: CAS the backup's
    // pointer. RT4b: CAS the primary's pointer + CAS release.
    let expected = Cost {
        round_trips: 3,
        reads: 0,
        bytes_read: 0,
        writes: 2,
        bytes_written: 2 * NODE_BYTES,
        cas: 4,
    };
    assert_eq!(commit, expected);
}

/// The cost of a logged commit of `n` objects on `r` replicas.
fn logged(n: u64, r: u64) -> Cost {
    Cost {
        // RT1, RT3, RT4 (+ RT4a for the backups' pointers).
        round_trips: if r == 1 { 3 } else { 4 },
        reads: 0,
        bytes_read: 0,
        writes: r * (n + 1),
        bytes_written: r * (NODE_BYTES * n + log_bytes(n)),
        // n locks, r log INIT->DOING, r * n pointers, n releases, r log DOING->DONE.
        cas: n + r + r * n + n + r,
    }
}

#[tokio::test]
async fn logged_commits_without_replication() {
    for n in [2u64, 3, 8] {
        let (exec, commit) = read_modify_write(1, n as usize, true).await;
        assert_eq!(exec, execution(n), "n = {n}");
        assert_eq!(commit, logged(n, 1), "n = {n}");
        assert_eq!(commit.cas, 3 * n + 2, "n = {n}");
        assert_eq!(commit.round_trips, 3, "n = {n}");
    }
}

#[tokio::test]
async fn logged_commits_with_a_backup() {
    for n in [2u64, 3, 8] {
        let (exec, commit) = read_modify_write(2, n as usize, true).await;
        assert_eq!(exec, execution(n), "n = {n}");
        assert_eq!(commit, logged(n, 2), "n = {n}");
        assert_eq!(commit.cas, 4 * n + 4, "n = {n}");
        assert_eq!(commit.round_trips, 4, "n = {n}");
    }
}

#[tokio::test]
async fn one_object_with_opt1_off_is_logged() {
    for r in [1u16, 2] {
        let (exec, commit) = read_modify_write(r, 1, false).await;
        assert_eq!(exec, execution(1));
        assert_eq!(commit, logged(1, u64::from(r)), "replicas = {r}");
    }
}

#[tokio::test]
async fn read_only_commit_validates_in_one_round_trip() {
    for r in [1u16, 2] {
        for k in [1u64, 3] {
            let cluster = Cluster::new(r).await;
            let mut c = cluster.client(1);
            let mut objs: Vec<TxObj<Node>> = Vec::new();
            for i in 0..k {
                objs.push(c.create(&[i; 128]).await.unwrap());
            }
            let mut tx = c.begin();
            let s0 = tx.client().fabric().stats();
            for &o in &objs {
                tx.read(o).await.unwrap();
            }
            // A second read of the same object is served from the read set.
            tx.read(objs[0]).await.unwrap();
            let s1 = tx.client().fabric().stats();
            tx.commit().await.unwrap();
            let s2 = c.fabric().stats();
            assert_eq!(Cost::from(s1 - s0), execution(k), "replicas = {r}, k = {k}");
            let validate = Cost {
                round_trips: 1,
                reads: k,
                bytes_read: 16 * k,
                writes: 0,
                bytes_written: 0,
                cas: 0,
            };
            assert_eq!(Cost::from(s2 - s1), validate, "replicas = {r}, k = {k}");
        }
    }
}

#[tokio::test]
async fn objects_read_but_not_written_are_validated_in_rt2() {
    // A transfer-like commit: read 3, write 1 (Opt1). RT1, RT2 (validate the
    // 2 objects only read: READ 16 B each), RT4.
    let cluster = Cluster::new(1).await;
    let mut c = cluster.client(1);
    let mut objs: Vec<TxObj<Node>> = Vec::new();
    for i in 0..3 {
        objs.push(c.create(&[i; 128]).await.unwrap());
    }
    let mut tx = c.begin();
    for &o in &objs {
        tx.read(o).await.unwrap();
    }
    tx.write(objs[0], &[9; 128]).await.unwrap();
    let s1 = tx.client().fabric().stats();
    tx.commit().await.unwrap();
    let s2 = c.fabric().stats();
    let expected = Cost {
        round_trips: 3,
        reads: 2,
        bytes_read: 32,
        writes: 1,
        bytes_written: NODE_BYTES,
        cas: 3,
    };
    assert_eq!(Cost::from(s2 - s1), expected);
}

#[tokio::test]
async fn blind_write_reads_only_the_meta() {
    // Writing an object not read costs one round trip (READ meta, 16 B) for
    // the version and pointer the commit replaces; the data is not read.
    let cluster = Cluster::new(1).await;
    let mut c = cluster.client(1);
    let o: TxObj<Node> = c.create(&[0; 128]).await.unwrap();
    let mut tx = c.begin();
    let s0 = tx.client().fabric().stats();
    tx.write(o, &[1; 128]).await.unwrap();
    let s1 = tx.client().fabric().stats();
    tx.commit().await.unwrap();
    let expected = Cost {
        round_trips: 1,
        reads: 1,
        bytes_read: 16,
        writes: 0,
        bytes_written: 0,
        cas: 0,
    };
    assert_eq!(Cost::from(s1 - s0), expected);
}
