use super::*;

fn req(at_ms: u64, command: Command) -> Request {
    Request {
        at_ms,
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
        },
        Command::RegisterMemNode {
            endpoint: long.clone(),
            capacity_bytes: 1,
        },
        Command::RegisterMemNode {
            endpoint: "a\nb".into(),
            capacity_bytes: 1,
        },
        Command::RegisterMemNode {
            endpoint: "a:1".into(),
            capacity_bytes: 0,
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
        },
    ))
    .unwrap();
    assert!(matches!(
        s.apply(&req(
            3,
            Command::RegisterMemNode {
                endpoint: "a:1".into(),
                capacity_bytes: 1
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

fn client(s: &mut ControlState, name: &str) -> Client {
    let cmd = Command::RegisterClient {
        name: name.into(),
        owner_ids: 2,
        lease_ms: 10,
    };
    match s.apply(&req(5, cmd)) {
        Ok(Outcome::Client(c)) => c,
        other => panic!("{other:?}"),
    }
}

fn create_index(s: &mut ControlState, name: &str, client: ClientId) -> Response {
    s.apply(&req(
        6,
        Command::CreateIndex {
            name: name.into(),
            kind: IndexKind::Btree,
            variant: IndexVariant::Rtx,
            size_bytes: 1 << 20,
            replicas: 2,
            client,
        },
    ))
}

#[test]
fn an_index_is_placed_then_allocated_then_formatted_before_anyone_opens_it() {
    let mut s = cluster(3, 1 << 30);
    let a = client(&mut s, "a");
    let b = client(&mut s, "b");
    let epoch = s.epoch;
    let Ok(Outcome::Index(x)) = create_index(&mut s, "orders", a.id) else {
        panic!("create index")
    };
    assert_eq!(x.state, IndexState::Creating { client: a.id });
    assert_eq!(s.epoch, epoch + 1, "a new region changes routing");
    let region = s.regions[&x.region].clone();
    assert_eq!(region.pending.len(), 2);
    assert!(!region.ready());
    // A second creation of the same name is refused; so is readiness
    // before the nodes have allocated, or from another client.
    assert!(matches!(
        create_index(&mut s, "orders", b.id),
        Err(CommandError::Conflict(_))
    ));
    let early = s.apply(&req(
        7,
        Command::IndexReady {
            name: "orders".into(),
            client: a.id,
        },
    ));
    assert!(
        matches!(&early, Err(CommandError::Conflict(m)) if m.contains("not allocated")),
        "{early:?}"
    );
    for r in &region.replicas {
        s.apply(&req(
            8,
            Command::ReplicaReady {
                region: x.region,
                node: r.node,
            },
        ))
        .unwrap();
    }
    s.apply(&req(
        8,
        Command::ReplicaReady {
            region: x.region,
            node: region.replicas[0].node,
        },
    ))
    .expect("a repeated report is harmless");
    let stranger = s.memnodes.keys().copied().find(|n| !region.on(*n)).unwrap();
    assert!(s
        .apply(&req(
            8,
            Command::ReplicaReady {
                region: x.region,
                node: stranger
            }
        ))
        .is_err());
    assert!(s.regions[&x.region].ready());
    let other = s.apply(&req(
        9,
        Command::IndexReady {
            name: "orders".into(),
            client: b.id,
        },
    ));
    assert!(matches!(other, Err(CommandError::Conflict(_))), "{other:?}");
    let ready = s.apply(&req(
        9,
        Command::IndexReady {
            name: "orders".into(),
            client: a.id,
        },
    ));
    assert!(matches!(
        ready,
        Ok(Outcome::Index(IndexRecord {
            state: IndexState::Ready,
            ..
        }))
    ));
    assert!(matches!(
        s.apply(&req(
            9,
            Command::IndexReady {
                name: "nope".into(),
                client: a.id
            }
        )),
        Err(CommandError::UnknownIndex { .. })
    ));
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_creation_left_by_an_expired_client_is_claimed_and_nothing_is_placed_half() {
    let mut s = cluster(2, 1 << 30);
    let a = client(&mut s, "a");
    let b = client(&mut s, "b");
    create_index(&mut s, "orders", a.id).unwrap();
    let claim = |s: &mut ControlState, c| {
        s.apply(&req(
            20,
            Command::ClaimIndex {
                name: "orders".into(),
                client: c,
            },
        ))
    };
    assert!(matches!(claim(&mut s, b.id), Err(CommandError::Conflict(m)) if m.contains("live client")));
    s.apply(&req(15, Command::ExpireClient { id: a.id })).unwrap();
    let Ok(Outcome::Index(x)) = claim(&mut s, b.id) else {
        panic!("claim")
    };
    assert_eq!(x.state, IndexState::Creating { client: b.id });
    // An expired client cannot create; a region that cannot be placed
    // leaves no index behind.
    assert!(create_index(&mut s, "sessions", a.id).is_err());
    let too_big = s.apply(&req(
        21,
        Command::CreateIndex {
            name: "huge".into(),
            kind: IndexKind::Hash,
            variant: IndexVariant::Rtx,
            size_bytes: 1 << 40,
            replicas: 2,
            client: b.id,
        },
    ));
    assert!(
        matches!(too_big, Err(CommandError::Placement { .. })),
        "{too_big:?}"
    );
    assert!(!s.indexes.contains_key("huge"));
    assert_eq!(s.regions.len(), 1);
    assert_eq!(s.check(), Ok(()));
}

fn dead(s: &mut ControlState, id: MemNodeId) {
    s.apply(&req(10, Command::SuspectMemNode { id })).unwrap();
    s.apply(&req(10, Command::DeclareMemNodeDead { id })).unwrap();
}

#[test]
fn a_dead_primary_is_evicted_and_its_first_live_backup_promoted() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 3);
    let nodes: Vec<MemNodeId> = r.replicas.iter().map(|x| x.node).collect();
    let evict = |node| Command::EvictReplica { region: r.id, node };
    assert!(
        matches!(s.apply(&req(11, evict(nodes[0]))), Err(CommandError::Conflict(_))),
        "a live node's replica is never evicted"
    );
    // The first backup died too: the second is the heir.
    dead(&mut s, nodes[0]);
    dead(&mut s, nodes[1]);
    let before = s.epoch;
    let Ok(Outcome::Region(x)) = s.apply(&req(11, evict(nodes[0]))) else {
        panic!("evict the primary")
    };
    assert_eq!(x.primary(), nodes[2]);
    assert_eq!(
        x.replicas.iter().map(|l| l.node).collect::<Vec<_>>(),
        vec![nodes[2], nodes[1]]
    );
    assert!(x.restoring && !x.usable());
    assert_eq!((x.epoch, s.epoch), (before + 1, before + 1));
    assert_eq!(s.memnodes[&nodes[0]].allocated_bytes, 0);
    // The dead backup is dropped; evicting twice is refused.
    s.apply(&req(11, evict(nodes[1]))).unwrap();
    assert!(matches!(
        s.apply(&req(11, evict(nodes[1]))),
        Err(CommandError::Conflict(_))
    ));
    assert_eq!(s.regions[&r.id].replicas.len(), 1);
    // With no live backup left, the region's loss is refused, not hidden.
    dead(&mut s, nodes[2]);
    assert!(matches!(
        s.apply(&req(11, evict(nodes[2]))),
        Err(CommandError::Conflict(_))
    ));
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_dead_node_registers_again_as_an_empty_spare_once_evicted() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 2);
    let p = r.primary();
    let endpoint = s.memnodes[&p].endpoint.clone();
    dead(&mut s, p);
    let again = Command::RegisterMemNode {
        endpoint,
        capacity_bytes: 1 << 20,
    };
    assert!(
        matches!(s.apply(&req(12, again.clone())), Err(CommandError::Conflict(_))),
        "it still holds a replica"
    );
    s.apply(&req(
        12,
        Command::EvictReplica {
            region: r.id,
            node: p,
        },
    ))
    .unwrap();
    let Ok(Outcome::MemNode(n)) = s.apply(&req(12, again.clone())) else {
        panic!("register again")
    };
    assert_eq!((n.id, n.state, n.allocated_bytes), (p, MemNodeState::Joining, 0));
    assert!(!s.regions[&r.id].on(p));
    // Live, it is a duplicate endpoint again.
    assert!(matches!(s.apply(&req(12, again)), Err(CommandError::Conflict(_))));
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_node_declared_dead_while_it_was_the_only_copy_comes_back_with_its_replicas() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 2);
    let (p, b) = (r.replicas[0].node, r.replicas[1].node);
    let again = |s: &ControlState, id: MemNodeId| Command::RegisterMemNode {
        endpoint: s.memnodes[&id].endpoint.clone(),
        capacity_bytes: 1 << 20,
    };
    // The backup is gone; then the primary is declared dead (falsely: it
    // was only late). It cannot be evicted, so it is revived as it was.
    dead(&mut s, b);
    s.apply(&req(
        11,
        Command::EvictReplica {
            region: r.id,
            node: b,
        },
    ))
    .unwrap();
    dead(&mut s, p);
    assert!(matches!(
        s.apply(&req(
            11,
            Command::EvictReplica {
                region: r.id,
                node: p
            }
        )),
        Err(CommandError::Conflict(_))
    ));
    let allocated = s.memnodes[&p].allocated_bytes;
    let Ok(Outcome::MemNode(n)) = s.apply(&req(12, again(&s, p))) else {
        panic!("register again")
    };
    assert_eq!(
        (n.id, n.state, n.allocated_bytes),
        (p, MemNodeState::Active, allocated)
    );
    assert_eq!(s.regions[&r.id].primary(), p);
    assert_eq!(s.check(), Ok(()));
    // A dead backup, or a dead primary with a live allocated backup, is not
    // revived: recovery evicts it first.
    let r2 = ready_region(&mut s, 2);
    let b2 = r2.replicas[1].node;
    dead(&mut s, b2);
    assert!(matches!(
        s.apply(&req(13, again(&s, b2))),
        Err(CommandError::Conflict(_))
    ));
    let mut t = cluster(4, 1 << 20);
    let r3 = ready_region(&mut t, 2);
    dead(&mut t, r3.replicas[0].node);
    let c = again(&t, r3.replicas[0].node);
    assert!(matches!(t.apply(&req(13, c)), Err(CommandError::Conflict(_))));
}

#[test]
fn a_join_cut_by_the_primary_s_death_goes_back_to_being_made() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 2);
    let spare = (0..4).find(|n| !r.on(*n)).unwrap();
    for c in [
        Command::AddBackup {
            region: r.id,
            node: spare,
        },
        Command::ReplicaReady {
            region: r.id,
            node: spare,
        },
        Command::JoinBackup {
            region: r.id,
            node: spare,
        },
    ] {
        s.apply(&req(13, c)).unwrap();
    }
    dead(&mut s, r.primary());
    s.apply(&req(
        13,
        Command::EvictReplica {
            region: r.id,
            node: r.primary(),
        },
    ))
    .unwrap();
    let x = &s.regions[&r.id];
    assert_eq!(x.primary(), r.replicas[1].node);
    assert_eq!((x.replicas.len(), x.catching_up), (1, None));
    assert_eq!(x.syncing.iter().map(|l| l.node).collect::<Vec<_>>(), vec![spare]);
    assert!(x.restoring);
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn one_live_restorer_claims_a_region_at_a_time_at_a_new_epoch() {
    let mut s = cluster(2, 1 << 30);
    let r = ready_region(&mut s, 2);
    let register = |s: &mut ControlState, name: &str| match s.apply(&req(
        5,
        Command::RegisterClient {
            name: name.into(),
            owner_ids: 1,
            lease_ms: 1000,
        },
    )) {
        Ok(Outcome::Client(c)) => c.id,
        other => panic!("{other:?}"),
    };
    let (promoter, coordinator) = (register(&mut s, "ctl"), register(&mut s, "recovery"));
    let claim =
        |s: &mut ControlState, client| s.apply(&req(6, Command::ClaimRestore { region: r.id, client }));
    // Nothing to claim while the region serves.
    assert!(matches!(
        claim(&mut s, coordinator),
        Err(CommandError::Conflict(_))
    ));
    // The promoter claims with its promotion, and again (a new epoch).
    s.apply(&req(
        6,
        Command::PromoteBackup {
            region: r.id,
            node: r.replicas[1].node,
            restorer: Some(promoter),
        },
    ))
    .unwrap();
    let e = s.epoch;
    let Ok(Outcome::Region(c)) = claim(&mut s, promoter) else {
        panic!("the holder claims again")
    };
    assert!(c.epoch > e && c.restorer == Some(promoter));
    // Another client may not while the holder lives...
    assert!(matches!(
        claim(&mut s, coordinator),
        Err(CommandError::Conflict(_))
    ));
    // ...and may once it expired: the claim moves, at a newer epoch.
    s.apply(&req(7, Command::ExpireClient { id: promoter })).unwrap();
    let Ok(Outcome::Region(c2)) = claim(&mut s, coordinator) else {
        panic!("an expired holder's claim lapses")
    };
    assert!(c2.epoch > c.epoch && c2.restorer == Some(coordinator));
    assert_eq!(s.check(), Ok(()));
    // Publishing ends the claim.
    let Ok(Outcome::Region(done)) = s.apply(&req(8, Command::RegionRestored { region: r.id })) else {
        panic!("published")
    };
    assert_eq!(done.restorer, None);
    assert_eq!(s.check(), Ok(()));
}
