//! The state machine's commands: placement, membership, clients
//! (`catalog`: indexes; `recovery`: dead nodes, eviction, joins, revival).

use super::*;

mod catalog;
mod identity;
mod recovery;

fn req(at_ms: u64, command: Command) -> Request {
    Request {
        at_ms,
        // As an entry from before the cluster clock: judged by `at_ms`.
        clock_ms: 0,
        actor: "test".into(),
        nonce: at_ms.wrapping_mul(0x2545_F491_4F6C_DD1D),
        command,
    }
}

/// A state with `n` active nodes of `capacity` bytes each.
fn cluster(n: u16, capacity: u64) -> ControlState {
    let mut s = ControlState::default();
    for i in 0..n {
        let cmd = Command::RegisterMemNode {
            endpoint: format!("10.0.0.{i}:7000"),
            capacity_bytes: capacity,
            image: None,
        };
        let Ok(Outcome::MemNode(m)) = s.apply(&req(1, cmd)) else {
            panic!("register failed")
        };
        assert_eq!(m.state, MemNodeState::Joining);
        s.apply(&req(2, Command::ActivateMemNode { id: m.id })).unwrap();
    }
    s
}

fn region(s: &mut ControlState, size_bytes: u64, replicas: u8) -> Region {
    match s.apply(&req(3, Command::CreateRegion { size_bytes, replicas })) {
        Ok(Outcome::Region(r)) => r,
        other => panic!("create region: {other:?}"),
    }
}

/// A region whose nodes are all allocated and in the clients' map.
fn ready_region(s: &mut ControlState, replicas: u8) -> Region {
    let r = region(s, 4096, replicas);
    for x in &r.replicas {
        s.apply(&req(
            3,
            Command::ReplicaReady {
                region: r.id,
                node: x.node,
            },
        ))
        .unwrap();
    }
    s.regions[&r.id].clone()
}

#[test]
fn regions_are_placed_on_distinct_roomiest_active_nodes() {
    let mut s = cluster(3, 1 << 30);
    s.apply(&req(4, Command::DrainMemNode { id: 2 })).unwrap();
    let a = region(&mut s, 1 << 29, 2);
    assert_eq!(a.replicas.iter().map(|r| r.node).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!((a.epoch, s.epoch), (1, 1));
    assert_ne!(a.replicas[0].key, a.replicas[1].key);
    // Node 0 and 1 are half full; a second region of 1 GiB fits nowhere.
    let before = s.clone();
    let err = s.apply(&req(
        5,
        Command::CreateRegion {
            size_bytes: 1 << 30,
            replicas: 1,
        },
    ));
    assert_eq!(
        err,
        Err(CommandError::Placement {
            needed: 1,
            size_bytes: 1 << 30,
            available: 0
        })
    );
    assert_eq!(
        (s.epoch, &s.regions, &s.memnodes),
        (before.epoch, &before.regions, &before.memnodes)
    );
    assert_eq!(
        s.audit.back().map(|e| e.outcome.starts_with("cannot place")),
        Some(true)
    );
    // Not allocated yet: out of the clients' map, in the full one.
    let map = s.map().unwrap();
    assert_eq!((map.epoch(), map.regions().len(), map.nodes().len()), (1, 0, 3));
    assert_eq!(s.full_map().unwrap().regions().len(), 1);
    for r in &a.replicas {
        s.apply(&req(
            6,
            Command::ReplicaReady {
                region: a.id,
                node: r.node,
            },
        ))
        .unwrap();
    }
    let map = s.map().unwrap();
    assert_eq!(
        (map.epoch(), map.regions().len()),
        (3, 1),
        "each report is a routing change"
    );
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_promoted_region_leaves_the_map_until_it_is_restored() {
    let mut s = cluster(2, 1 << 30);
    let r = ready_region(&mut s, 2);
    let backup = r.replicas[1].node;
    let Ok(Outcome::Region(p)) = s.apply(&req(
        5,
        Command::PromoteBackup {
            region: r.id,
            node: backup,
            restorer: None,
        },
    )) else {
        panic!("promote")
    };
    assert!(p.restoring && p.primary() == backup);
    assert!(s.map().unwrap().regions().is_empty());
    let again = s.apply(&req(
        6,
        Command::PromoteBackup {
            region: r.id,
            node: r.replicas[0].node,
            restorer: None,
        },
    ));
    assert!(matches!(again, Err(CommandError::Conflict(_))), "{again:?}");
    // Nodes report the epoch they fence at; never beyond the map's.
    let e = s.epoch;
    s.apply(&req(6, Command::MemNodeEpoch { id: backup, epoch: e }))
        .unwrap();
    assert_eq!(s.memnodes[&backup].epoch, e);
    assert!(s
        .apply(&req(
            6,
            Command::MemNodeEpoch {
                id: backup,
                epoch: e + 1
            }
        ))
        .is_err());
    s.apply(&req(7, Command::RegionRestored { region: r.id }))
        .unwrap();
    assert_eq!((s.map().unwrap().regions().len(), s.epoch), (1, e + 1));
    assert!(s
        .apply(&req(8, Command::RegionRestored { region: r.id }))
        .is_err());
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn too_few_nodes_is_a_clear_error_and_changes_nothing() {
    let mut s = cluster(2, 1 << 20);
    let before = s.clone();
    let err = s
        .apply(&req(
            4,
            Command::CreateRegion {
                size_bytes: 4096,
                replicas: 3,
            },
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot place 3 replicas of 4096 bytes: only 2 active nodes with room"
    );
    assert_eq!((s.epoch, &s.regions), (before.epoch, &before.regions));
    for bad in [
        Command::CreateRegion {
            size_bytes: 0,
            replicas: 1,
        },
        Command::CreateRegion {
            size_bytes: 4096,
            replicas: 0,
        },
        Command::CreateRegion {
            size_bytes: 4096,
            replicas: REPLICAS_MAX as u8 + 1,
        },
    ] {
        assert!(matches!(s.apply(&req(5, bad)), Err(CommandError::Invalid(_))));
    }
}

#[test]
fn promote_add_and_remove_backups_bump_the_epoch() {
    let mut s = cluster(4, 1 << 20);
    let r = region(&mut s, 4096, 2);
    let (p, b) = (r.replicas[0].node, r.replicas[1].node);
    let promoted = s
        .apply(&req(
            4,
            Command::PromoteBackup {
                region: r.id,
                node: b,
                restorer: None,
            },
        ))
        .unwrap();
    let Outcome::Region(promoted) = promoted else {
        panic!()
    };
    assert_eq!((promoted.primary(), promoted.epoch, s.epoch), (b, 2, 2));
    assert!(matches!(
        s.apply(&req(
            5,
            Command::PromoteBackup {
                region: r.id,
                node: b,
                restorer: None
            }
        )),
        Err(CommandError::Conflict(_))
    ));
    assert!(matches!(
        s.apply(&req(
            5,
            Command::RemoveBackup {
                region: r.id,
                node: b
            }
        )),
        Err(CommandError::Conflict(_))
    ));
    let spare = (0..4).find(|n| !promoted.on(*n)).unwrap();
    let add = Command::AddBackup {
        region: r.id,
        node: spare,
    };
    assert!(
        matches!(s.apply(&req(6, add)), Err(CommandError::Conflict(_))),
        "a new replica of a region still being restored"
    );
    s.apply(&req(6, Command::RegionRestored { region: r.id }))
        .unwrap();
    s.apply(&req(
        6,
        Command::AddBackup {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    // A new replica is made beside the ones clients write, then joined.
    let x = &s.regions[&r.id];
    assert_eq!((x.replicas.len(), x.syncing.len(), s.epoch), (2, 1, 4));
    assert_eq!(s.memnodes[&spare].allocated_bytes, 4096);
    assert_eq!(s.full_map().unwrap().region(r.id).unwrap().replicas.len(), 3);
    let join = Command::JoinBackup {
        region: r.id,
        node: spare,
    };
    assert!(
        matches!(s.apply(&req(6, join.clone())), Err(CommandError::Conflict(_))),
        "joined before it is allocated"
    );
    s.apply(&req(
        6,
        Command::ReplicaReady {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    s.apply(&req(6, join)).unwrap();
    let x = &s.regions[&r.id];
    assert_eq!((x.replicas.len(), x.catching_up, s.epoch), (3, Some(spare), 6));
    assert!(!x.usable(), "out of the clients' map while caught up");
    s.apply(&req(6, Command::RegionRestored { region: r.id }))
        .unwrap();
    assert_eq!(s.regions[&r.id].catching_up, None);
    s.apply(&req(
        7,
        Command::RemoveBackup {
            region: r.id,
            node: p,
        },
    ))
    .unwrap();
    assert_eq!((s.regions[&r.id].replicas.len(), s.epoch), (2, 8));
    assert_eq!(s.memnodes[&p].allocated_bytes, 0);
    // Failed commands never bump it.
    assert!(s
        .apply(&req(
            8,
            Command::AddBackup {
                region: r.id,
                node: 99
            }
        ))
        .is_err());
    assert!(s
        .apply(&req(
            8,
            Command::PromoteBackup {
                region: 77,
                node: p,
                restorer: None
            }
        ))
        .is_err());
    assert_eq!(s.epoch, 8);
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_node_holding_replicas_cannot_be_removed() {
    let mut s = cluster(2, 1 << 20);
    let r = region(&mut s, 4096, 1);
    let holder = r.primary();
    let err = s
        .apply(&req(4, Command::RemoveMemNode { id: holder }))
        .unwrap_err();
    assert!(err.to_string().contains("holds replicas of regions 1"), "{err}");
    let other = 1 - holder;
    assert_eq!(
        s.apply(&req(5, Command::RemoveMemNode { id: other })),
        Ok(Outcome::Removed)
    );
    assert_eq!(
        s.apply(&req(6, Command::RemoveMemNode { id: other })),
        Err(CommandError::UnknownMemNode { id: other })
    );
    s.apply(&req(7, Command::DeclareMemNodeDead { id: holder }))
        .unwrap();
    assert_eq!(
        (s.epoch, s.regions[&r.id].epoch),
        (3, 3),
        "a death re-stamps the node's regions"
    );
    assert!(
        s.apply(&req(8, Command::ActivateMemNode { id: holder })).is_err(),
        "the dead stay dead"
    );
}

/// A request as a leader stamps it: its wall clock and its reading of the
/// cluster clock.
fn stamped(wall_ms: u64, clock_ms: u64, command: Command) -> Request {
    Request {
        clock_ms,
        ..req(wall_ms, command)
    }
}

#[test]
fn a_quarantine_is_judged_by_the_cluster_clock_never_by_a_wall_clock() {
    let mut s = ControlState::default();
    let Ok(Outcome::Client(c)) = s.apply(&stamped(
        1_000,
        1_000,
        Command::RegisterClient {
            name: "a".into(),
            owner_ids: 1,
            lease_ms: 10_000,
        },
    )) else {
        panic!("registered")
    };
    s.apply(&stamped(2_000, 2_000, Command::ExpireClient { id: c.id }))
        .unwrap();
    assert!(matches!(
        s.clients[&c.id].state,
        ClientState::Expired { at_ms: 2_000, .. }
    ));
    // A new leader whose wall clock runs an hour ahead: its requests carry
    // its wall time for the audit, the cluster clock for judgement.
    let ahead = 2_000 + 3_600_000;
    let forget = || Command::ForgetClient { id: c.id, by: None };
    let early = s.apply(&stamped(ahead, 5_000, forget()));
    assert!(
        matches!(&early, Err(CommandError::Conflict(m)) if m.contains("quarantined until 12000 ms")),
        "{early:?}"
    );
    assert!(s
        .apply(&stamped(
            ahead,
            5_000,
            Command::ClaimReclaim { id: c.id, by: c.id }
        ))
        .is_err());
    // The clock never goes back: a request stamped behind it is judged at it.
    assert_eq!(s.clock_ms, 5_000);
    s.apply(&stamped(
        ahead,
        4_000,
        Command::SetMaintenance { id: 0, on: true },
    ))
    .ok();
    assert_eq!(s.clock_ms, 5_000);
    assert!(s.dry_run(&stamped(ahead, 11_999, forget())).is_err());
    assert!(s.dry_run(&stamped(0, 12_000, forget())).is_ok());
    assert!(s.apply(&stamped(0, 12_000, forget())).is_ok());
    assert_eq!(
        s.audit.back().map(|e| e.at_ms),
        Some(0),
        "the audit keeps the proposer's wall time"
    );
}

/// An expired client's ids and blocks go to nobody until every memory node
/// not declared dead follows a fence at or past its expiry; the fence view
/// admits the live and the newer, and a node reports no fence the cluster
/// has not reached.
#[test]
fn an_expired_client_is_forgotten_only_once_every_live_node_fences_it() {
    let mut s = cluster(3, 1 << 30);
    let register = |name: &str| Command::RegisterClient {
        name: name.into(),
        owner_ids: 1,
        lease_ms: 1_000,
    };
    let Ok(Outcome::Client(a)) = s.apply(&req(10, register("a"))) else {
        panic!("registered")
    };
    let Ok(Outcome::Client(b)) = s.apply(&req(10, register("b"))) else {
        panic!("registered")
    };
    s.apply(&req(20, Command::ExpireClient { id: a.id })).unwrap();
    let ClientState::Expired { seq, .. } = s.clients[&a.id].state else {
        panic!("expired")
    };
    let view = s.fence_view();
    assert_eq!((view.seq, view.live.clone()), (seq, vec![b.id]));
    assert!(!view.admits(a.id) && view.admits(b.id) && view.admits(b.id + 1));
    let forget = || Command::ForgetClient { id: a.id, by: None };
    let claim = || Command::ClaimReclaim { id: a.id, by: b.id };
    // Past the quarantine, but no node follows the fence yet.
    let refused = s.dry_run(&req(5_000, forget()));
    assert!(
        matches!(&refused, Err(CommandError::Conflict(m)) if m.contains("not yet followed by memory node(s) 0, 1, 2")),
        "{refused:?}"
    );
    assert!(s.dry_run(&req(5_000, claim())).is_err());
    assert!(s
        .apply(&req(5_000, Command::MemNodeFence { id: 0, seq: seq + 1 }))
        .is_err());
    s.apply(&req(5_000, Command::MemNodeFence { id: 0, seq }))
        .unwrap();
    s.apply(&req(5_000, Command::MemNodeFence { id: 1, seq }))
        .unwrap();
    // A lower report never lowers a node's fence.
    s.apply(&req(5_000, Command::MemNodeFence { id: 1, seq: 0 }))
        .unwrap();
    assert_eq!(s.memnodes[&1].fence_seq, seq);
    assert!(
        s.dry_run(&req(5_000, forget())).is_err(),
        "node 2 is live and behind"
    );
    // A node declared dead does not hold it back: it serves nothing.
    s.apply(&req(5_000, Command::DeclareMemNodeDead { id: 2 }))
        .unwrap();
    assert!(s.dry_run(&req(5_000, claim())).is_ok());
    assert!(s.apply(&req(5_000, forget())).is_ok());
}

#[test]
fn clients_get_disjoint_owner_blocks_and_expire_exactly_once() {
    let mut s = ControlState::default();
    let register = |s: &mut ControlState, n: u16| match s.apply(&req(
        10,
        Command::RegisterClient {
            name: format!("c{n}"),
            owner_ids: n,
            lease_ms: 10,
        },
    )) {
        Ok(Outcome::Client(c)) => c,
        other => panic!("{other:?}"),
    };
    let a = register(&mut s, 8);
    let b = register(&mut s, 16);
    assert_eq!((a.owners.first, b.owners.first), (1, 9));
    let expired = s.apply(&req(20, Command::ExpireClient { id: a.id })).unwrap();
    assert!(matches!(
        expired,
        Outcome::Client(Client {
            state: ClientState::Expired { at_ms: 20, seq: 1 },
            ..
        })
    ));
    assert_eq!(s.reclaim_seq, 1, "an expiry is a reclaim event");
    assert!(matches!(
        s.apply(&req(21, Command::ExpireClient { id: a.id })),
        Err(CommandError::Conflict(_))
    ));
    // An expired client keeps its ids until forgotten (recovery rolls its logs first).
    assert_eq!(register(&mut s, 4).owners.first, 25);
    assert!(matches!(
        s.apply(&req(22, Command::ForgetClient { id: b.id, by: None })),
        Err(CommandError::Conflict(_))
    ));
    // Quarantined for a lease after the expiry (at 20, lease 10).
    let early = s.apply(&req(29, Command::ForgetClient { id: a.id, by: None }));
    assert!(
        matches!(&early, Err(CommandError::Conflict(m)) if m.contains("quarantined until 30 ms")),
        "{early:?}"
    );
    // One reclaimer at a time, after the quarantine; a plain forget waits
    // for the claim's holder.
    let c = register(&mut s, 4);
    let claim = |by| Command::ClaimReclaim { id: a.id, by };
    assert!(matches!(
        s.apply(&req(29, claim(b.id))),
        Err(CommandError::Conflict(m)) if m.contains("quarantined")
    ));
    assert!(s.apply(&req(30, claim(b.id))).is_ok());
    assert!(s.apply(&req(30, claim(b.id))).is_ok(), "its holder claims again");
    assert!(matches!(
        s.apply(&req(30, claim(c.id))),
        Err(CommandError::Conflict(m)) if m.contains("claimed by client")
    ));
    assert!(matches!(
        s.apply(&req(30, Command::ForgetClient { id: a.id, by: None })),
        Err(CommandError::Conflict(m)) if m.contains("may still be writing")
    ));
    // Its holder expires: taken over only after the holder's quarantine.
    s.apply(&req(31, Command::ExpireClient { id: b.id })).unwrap();
    assert!(s.apply(&req(40, claim(c.id))).is_err());
    assert!(s.apply(&req(41, claim(c.id))).is_ok());
    assert_eq!(
        s.apply(&req(
            41,
            Command::ForgetClient {
                id: a.id,
                by: Some(c.id)
            }
        )),
        Ok(Outcome::Removed)
    );
    assert!(s.reclaimers.is_empty(), "the claim goes with the client");
    assert_eq!(s.reclaim_seq, 3, "so is a forgetting; refusals are not");
    assert_eq!(
        register(&mut s, 8).owners.first,
        1,
        "first fit reuses the freed block"
    );
    assert_eq!(s.check(), Ok(()));
    // The owner-id space is bounded.
    let mut full = ControlState::default();
    for _ in 0..(OWNER_ID_END - 1) / OWNER_IDS_PER_CLIENT_MAX {
        register(&mut full, OWNER_IDS_PER_CLIENT_MAX);
    }
    let err = full.apply(&req(
        30,
        Command::RegisterClient {
            name: "x".into(),
            owner_ids: OWNER_IDS_PER_CLIENT_MAX,
            lease_ms: 10,
        },
    ));
    assert!(matches!(err, Err(CommandError::Full(_))), "{err:?}");
}

#[test]
fn bad_arguments_are_refused() {
    let mut s = ControlState::default();
    let long = "x".repeat(NAME_BYTES_MAX + 1);
    for bad in [
        Command::RegisterMemNode {
            endpoint: String::new(),
            capacity_bytes: 1,
            image: None,
        },
        Command::RegisterMemNode {
            endpoint: long.clone(),
            capacity_bytes: 1,
            image: None,
        },
        Command::RegisterMemNode {
            endpoint: "a\nb".into(),
            capacity_bytes: 1,
            image: None,
        },
        Command::RegisterMemNode {
            endpoint: "a:1".into(),
            capacity_bytes: 0,
            image: None,
        },
        Command::RegisterClient {
            name: long,
            owner_ids: 1,
            lease_ms: 10,
        },
        Command::RegisterClient {
            name: "c".into(),
            owner_ids: 0,
            lease_ms: 10,
        },
        Command::RegisterClient {
            name: "c".into(),
            owner_ids: OWNER_IDS_PER_CLIENT_MAX + 1,
            lease_ms: 10,
        },
        Command::RegisterClient {
            name: "c".into(),
            owner_ids: 1,
            lease_ms: 0,
        },
        Command::RegisterClient {
            name: "c".into(),
            owner_ids: 1,
            lease_ms: LEASE_MS_MAX + 1,
        },
    ] {
        assert!(
            matches!(s.apply(&req(1, bad.clone())), Err(CommandError::Invalid(_))),
            "{bad:?}"
        );
    }
    assert!(s.memnodes.is_empty() && s.clients.is_empty());
    assert_eq!(s.audit.len(), 9, "refusals are audited too");
    s.apply(&req(
        2,
        Command::RegisterMemNode {
            endpoint: "a:1".into(),
            capacity_bytes: 1,
            image: None,
        },
    ))
    .unwrap();
    assert!(matches!(
        s.apply(&req(
            3,
            Command::RegisterMemNode {
                endpoint: "a:1".into(),
                capacity_bytes: 1,
                image: None,
            }
        )),
        Err(CommandError::Conflict(_))
    ));
}

#[test]
fn apply_is_deterministic_and_the_audit_is_bounded() {
    let script: Vec<Request> = (0..(AUDIT_ENTRIES_MAX as u64 + 50))
        .map(|i| {
            req(
                i,
                match i % 5 {
                    0 => Command::RegisterMemNode {
                        endpoint: format!("n{i}"),
                        capacity_bytes: 1 << 20,
                        image: None,
                    },
                    1 => Command::ActivateMemNode {
                        id: (i / 5) as MemNodeId,
                    },
                    2 => Command::CreateRegion {
                        size_bytes: 64,
                        replicas: 1,
                    },
                    3 => Command::RegisterClient {
                        name: format!("c{i}"),
                        owner_ids: 1,
                        lease_ms: 5,
                    },
                    _ => Command::ExpireClient { id: i / 5 },
                },
            )
        })
        .collect();
    let (mut a, mut b) = (ControlState::default(), ControlState::default());
    let ra: Vec<Response> = script.iter().map(|r| a.apply(r)).collect();
    let rb: Vec<Response> = script.iter().map(|r| b.apply(r)).collect();
    assert_eq!(ra, rb);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    assert_eq!(a.audit.len(), AUDIT_ENTRIES_MAX);
    assert_eq!(a.audit.front().map(|e| e.at_ms), Some(50));
    assert_eq!(a.check(), Ok(()));
    let back: ControlState = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back, a);
}

#[test]
fn a_node_in_maintenance_takes_no_new_replica_and_a_dead_one_cannot_enter_it() {
    let mut s = cluster(2, 1 << 30);
    let Ok(Outcome::MemNode(n)) = s.apply(&req(4, Command::SetMaintenance { id: 0, on: true })) else {
        panic!("maintenance on")
    };
    assert!(n.maintenance);
    assert_eq!(n.state, MemNodeState::Active, "the state is kept");
    assert!(
        matches!(
            s.apply(&req(
                5,
                Command::CreateRegion {
                    size_bytes: 4096,
                    replicas: 2
                }
            )),
            Err(CommandError::Placement { .. })
        ),
        "one node left for two replicas"
    );
    let r = region(&mut s, 4096, 1);
    assert_eq!(r.replicas[0].node, 1);
    s.apply(&req(6, Command::SetMaintenance { id: 0, on: false }))
        .unwrap();
    assert!(!s.memnodes[&0].maintenance);
    s.apply(&req(7, Command::DeclareMemNodeDead { id: 0 })).unwrap();
    assert!(matches!(
        s.apply(&req(8, Command::SetMaintenance { id: 0, on: true })),
        Err(CommandError::Conflict(_))
    ));
    assert!(matches!(
        s.apply(&req(8, Command::SetMaintenance { id: 9, on: true })),
        Err(CommandError::UnknownMemNode { id: 9 })
    ));
}

#[test]
fn maintenance_takes_a_nodes_backups_out_of_the_write_set_and_refuses_its_primaries() {
    let mut s = cluster(3, 1 << 30);
    let r = ready_region(&mut s, 3);
    let (primary, backup) = (r.primary(), r.replicas[1].node);
    let solo = region(&mut s, 4096, 1);
    let on = |id| Command::SetMaintenance { id, on: true };
    // A primary with backups is moved first, by a planned promotion.
    let refused = s.apply(&req(5, on(primary)));
    assert!(
        matches!(&refused, Err(CommandError::Conflict(m)) if m.contains("promote")),
        "{refused:?}"
    );
    assert!(!s.memnodes[&primary].maintenance);
    // A backup's node: its replica leaves the write set at a new epoch,
    // its bytes are free, and the region serves degraded; with no other
    // node to take a replica, that is as whole as it gets.
    let (epoch, allocated) = (s.epoch, s.memnodes[&backup].allocated_bytes);
    s.apply(&req(6, on(backup))).unwrap();
    let x = &s.regions[&r.id];
    assert!(!x.on(backup) && x.usable() && x.replicas.len() == 2, "{x:?}");
    assert_eq!(x.generation_of(backup), 0);
    assert_eq!((s.epoch, x.epoch), (epoch + 1, epoch + 1));
    let held_solo = if solo.on(backup) { 4096 } else { 0 };
    assert_eq!(s.memnodes[&backup].allocated_bytes, allocated - r.size_bytes);
    assert_eq!(s.memnodes[&backup].allocated_bytes, held_solo);
    assert!(crate::state::settled(x, s.memnodes.values()));
    // A sole copy stays where it is.
    assert!(s.regions[&solo.id].on(solo.primary()));
    // Out again: it has room, so the region is no longer settled, and
    // recovery places a replica on it.
    s.apply(&req(
        7,
        Command::SetMaintenance {
            id: backup,
            on: false,
        },
    ))
    .unwrap();
    assert!(!crate::state::settled(&s.regions[&r.id], s.memnodes.values()));
    s.apply(&req(
        8,
        Command::AddBackup {
            region: r.id,
            node: backup,
        },
    ))
    .unwrap();
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_snapshot_is_restored_only_into_an_empty_cluster_and_only_when_consistent() {
    let mut saved = cluster(3, 1 << 30);
    ready_region(&mut saved, 2);
    let mut fresh = ControlState::default();
    // The new cluster's own coordinator: a client without memory.
    fresh
        .apply(&req(
            1,
            Command::RegisterClient {
                name: "recovery".into(),
                owner_ids: 8,
                lease_ms: 1000,
            },
        ))
        .unwrap();
    let restore = |state: &ControlState| Command::Restore {
        state: SavedState(Box::new(state.clone())),
    };
    // Through the log's encoding, as a member reads it back: the state's
    // maps keyed by numbers must survive the command's tagged encoding.
    let request = req(9, restore(&saved));
    let encoded = serde_json::to_vec(&request).unwrap();
    let decoded: Request = serde_json::from_slice(&encoded).unwrap();
    assert_eq!(decoded, request);
    let Ok(Outcome::Restored(summary)) = fresh.apply(&decoded) else {
        panic!("restore refused")
    };
    assert_eq!((summary.memnodes, summary.regions, summary.clients), (3, 1, 0));
    assert_eq!(
        fresh.epoch,
        saved.epoch + RESTORE_EPOCH_JUMP,
        "past any epoch the old cluster may have reached"
    );
    assert_eq!(summary.epoch, fresh.epoch);
    assert_eq!(fresh.memnodes, saved.memnodes);
    // The regions as saved, each holder to prove its replica before it
    // serves again.
    let mut proven = fresh.regions.clone();
    for r in proven.values_mut() {
        let holders: Vec<MemNodeId> = r.replicas.iter().map(|l| l.node).collect();
        assert_eq!(r.unverified, holders);
        assert!(!r.usable(), "{r:?}");
        r.unverified.clear();
    }
    assert_eq!(proven, saved.regions);
    assert!(fresh.clients.is_empty(), "the new cluster's clients are dropped");
    let last = fresh.audit.back().unwrap();
    assert_eq!(
        last.command,
        Command::Restore {
            state: SavedState::default()
        },
        "the audit keeps no copy of the state"
    );
    // Not twice, and not an inconsistent state.
    assert!(matches!(
        fresh.apply(&req(10, restore(&saved))),
        Err(CommandError::Conflict(_))
    ));
    let mut broken = saved.clone();
    broken.memnodes.remove(&0);
    let mut empty = ControlState::default();
    assert!(matches!(
        empty.apply(&req(11, restore(&broken))),
        Err(CommandError::Invalid(_))
    ));
    // Crafted: the next region id is one in use, so a new region would
    // overwrite it; a record under another's id; a claim of no client.
    let mut crafted = saved.clone();
    crafted.next_region = 1;
    assert!(matches!(
        empty.apply(&req(12, restore(&crafted))),
        Err(CommandError::Invalid(_))
    ));
    let mut crafted = saved.clone();
    let moved = crafted.memnodes.remove(&2).unwrap();
    crafted.memnodes.insert(7, moved);
    assert!(matches!(
        empty.apply(&req(13, restore(&crafted))),
        Err(CommandError::Invalid(_))
    ));
    let mut crafted = saved.clone();
    crafted.reclaimers.insert(40, 41);
    assert!(matches!(
        empty.apply(&req(14, restore(&crafted))),
        Err(CommandError::Invalid(_))
    ));
    assert!(empty.is_empty(), "a refused restore changes nothing");
}

#[test]
fn equal_states_hash_equal_and_any_change_shows() {
    let a = cluster(2, 1 << 30);
    let b = a.clone();
    assert_eq!(state_hash(&a), state_hash(&b));
    let mut c = a.clone();
    c.apply(&req(5, Command::DrainMemNode { id: 1 })).unwrap();
    assert_ne!(state_hash(&a), state_hash(&c));
    let text = serde_json::to_string(&state_hash(&a)).unwrap();
    assert_eq!(text.len(), 34, "32 hex digits in quotes: {text}");
    assert_eq!(serde_json::from_str::<StateHash>(&text).unwrap(), state_hash(&a));
}
