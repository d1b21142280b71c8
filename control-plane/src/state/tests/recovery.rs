//! What recovery asks of the state: eviction, promotion, revival, joins,
//! the restore claim.

use super::*;

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
        image: None,
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
        image: None,
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
fn a_degraded_region_with_no_room_left_is_settled_and_one_with_a_spare_is_not() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 3);
    let spare = (0..4).find(|n| !r.on(*n)).unwrap();
    assert!(crate::state::settled(&s.regions[&r.id], s.memnodes.values()));
    // A backup dies and is dropped: a spare has room, so recovery has work.
    let backup = r.replicas[2].node;
    dead(&mut s, backup);
    s.apply(&req(
        13,
        Command::EvictReplica {
            region: r.id,
            node: backup,
        },
    ))
    .unwrap();
    assert!(!crate::state::settled(&s.regions[&r.id], s.memnodes.values()));
    // The spare takes a replica, which is being made: not settled yet.
    s.apply(&req(
        13,
        Command::AddBackup {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    assert!(!crate::state::settled(&s.regions[&r.id], s.memnodes.values()));
    // The spare dies too, and nothing is left: degraded, and settled.
    dead(&mut s, spare);
    s.apply(&req(
        13,
        Command::EvictReplica {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    let x = &s.regions[&r.id];
    assert!(x.usable() && !x.whole() && x.replicas.len() == 2, "{x:?}");
    assert!(crate::state::settled(x, s.memnodes.values()));
}

#[test]
fn a_copy_is_fenced_at_a_new_epoch_only_into_an_allocated_replica_being_made() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 2);
    let spare = (0..4).find(|n| !r.on(*n)).unwrap();
    let fence = |node| Command::FenceCopy { region: r.id, node };
    // No replica is being made there, then one is but is not allocated.
    assert!(matches!(
        s.apply(&req(13, fence(spare))),
        Err(CommandError::Conflict(_))
    ));
    s.apply(&req(
        13,
        Command::AddBackup {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    assert!(matches!(
        s.apply(&req(13, fence(spare))),
        Err(CommandError::Conflict(_))
    ));
    assert!(matches!(
        s.apply(&req(13, fence(r.primary()))),
        Err(CommandError::Conflict(_))
    ));
    s.apply(&req(
        13,
        Command::ReplicaReady {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    let before = s.epoch;
    let Ok(Outcome::Region(x)) = s.apply(&req(13, fence(spare))) else {
        panic!("the fence")
    };
    // A new epoch, stamped on the region; nothing else moves.
    assert_eq!((s.epoch, x.epoch), (before + 1, before + 1));
    assert_eq!(x.replicas, s.regions[&r.id].replicas);
    assert_eq!(x.syncing.iter().map(|l| l.node).collect::<Vec<_>>(), vec![spare]);
    assert!(x.usable());
    assert_eq!(s.check(), Ok(()));
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
    // A holder that steps down (a coordinator whose member lost the lead)
    // gives the claim back; nobody else may give it back for it.
    let release =
        |s: &mut ControlState, client| s.apply(&req(7, Command::ReleaseRestore { region: r.id, client }));
    let other = register(&mut s, "new leader's recovery");
    assert!(matches!(release(&mut s, other), Err(CommandError::Conflict(_))));
    assert_eq!(s.regions[&r.id].restorer, Some(coordinator));
    assert!(matches!(claim(&mut s, other), Err(CommandError::Conflict(_))));
    let Ok(Outcome::Region(given)) = release(&mut s, coordinator) else {
        panic!("the holder gives its claim back")
    };
    assert_eq!(given.restorer, None);
    assert!(given.restoring, "still to be restored: {given:?}");
    let Ok(Outcome::Region(c3)) = claim(&mut s, other) else {
        panic!("a released claim is taken at once, the holder alive")
    };
    assert!(c3.epoch > c2.epoch && c3.restorer == Some(other));
    assert_eq!(s.check(), Ok(()));
    // Publishing ends the claim.
    let Ok(Outcome::Region(done)) = s.apply(&req(8, Command::RegionRestored { region: r.id })) else {
        panic!("published")
    };
    assert_eq!(done.restorer, None);
    assert_eq!(s.check(), Ok(()));
}

fn register_again(s: &ControlState, id: MemNodeId) -> Command {
    Command::RegisterMemNode {
        endpoint: s.memnodes[&id].endpoint.clone(),
        capacity_bytes: 1 << 20,
        image: None,
    }
}

fn nodes_of(r: &Region) -> Vec<MemNodeId> {
    r.replicas.iter().map(|x| x.node).collect()
}

/// Issue 46: every replica of a region dies. Its loss is a state, not a
/// refusal recovery retries for ever: declared once, out of the clients'
/// map, its replica list kept to show where it lived; nothing more is
/// evicted from it; dropping it frees its nodes, which register again.
#[test]
fn a_region_whose_replicas_all_died_is_lost_until_dropped_and_its_nodes_then_register_again() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 2);
    let kept = ready_region(&mut s, 2);
    let (p, b) = (r.replicas[0].node, r.replicas[1].node);
    dead(&mut s, p);
    dead(&mut s, b);
    let evict = |node| Command::EvictReplica { region: r.id, node };
    let lose = Command::DeclareRegionLost { region: r.id };
    // The eviction of the heirless primary is still refused: the loss is
    // declared, not hidden.
    assert!(matches!(
        s.apply(&req(11, evict(p))),
        Err(CommandError::Conflict(m)) if m.contains("declares it lost")
    ));
    let before = s.epoch;
    let Ok(Outcome::Region(x)) = s.apply(&req(11, lose.clone())) else {
        panic!("declare the region lost")
    };
    let why = x.lost.clone().expect("lost");
    assert!(why.contains(&format!("node {p}")), "{why}");
    assert_eq!(nodes_of(&x), vec![p, b], "the replicas stay as they were");
    assert_eq!((x.epoch, s.epoch), (before + 1, before + 1));
    assert!(!x.usable() && !x.whole());
    let map = s.map().unwrap();
    assert!(map.region(r.id).is_none(), "out of the clients' map");
    assert!(map.region(kept.id).is_some());
    assert_eq!(s.check(), Ok(()));
    // A second declaration, and any eviction from it, is refused, by the
    // dry run a member answers with as by the log, and changes nothing.
    let frozen = s.clone();
    for c in [lose.clone(), evict(p), evict(b)] {
        let dry = s.dry_run(&req(12, c.clone()));
        assert!(matches!(dry, Err(CommandError::Conflict(_))), "{c:?}: {dry:?}");
        assert_eq!(s.apply(&req(12, c.clone())), dry, "{c:?}");
    }
    assert_eq!(
        (s.epoch, &s.regions, &s.memnodes),
        (frozen.epoch, &frozen.regions, &frozen.memnodes)
    );
    // Its backup's node cannot come back while the region names it.
    assert!(matches!(
        s.apply(&req(13, register_again(&s, b))),
        Err(CommandError::Conflict(_))
    ));
    // Dropped: the nodes' bytes are free and they come back empty.
    let before = s.epoch;
    assert_eq!(
        s.apply(&req(14, Command::DropRegion { region: r.id })),
        Ok(Outcome::Removed)
    );
    assert_eq!(s.epoch, before + 1);
    assert!(!s.regions.contains_key(&r.id) && s.regions.contains_key(&kept.id));
    assert_eq!(
        (s.memnodes[&p].allocated_bytes, s.memnodes[&b].allocated_bytes),
        (0, 0)
    );
    for id in [p, b] {
        let Ok(Outcome::MemNode(n)) = s.apply(&req(15, register_again(&s, id))) else {
            panic!("node {id} registers again")
        };
        assert_eq!((n.state, n.allocated_bytes), (MemNodeState::Joining, 0));
    }
    assert!(matches!(
        s.apply(&req(16, Command::DropRegion { region: r.id })),
        Err(CommandError::UnknownRegion { .. })
    ));
    assert_eq!(s.check(), Ok(()));
}

/// A node declared dead while it was a region's only copy (its backup
/// evicted before) comes back as it was (`revive_memnode`), but a region
/// declared lost meanwhile stays lost until an operator drops it.
#[test]
fn a_lost_regions_sole_copy_that_comes_back_leaves_it_lost_until_dropped() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 2);
    let (p, b) = (r.replicas[0].node, r.replicas[1].node);
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
    s.apply(&req(11, Command::DeclareRegionLost { region: r.id }))
        .unwrap();
    let Ok(Outcome::MemNode(n)) = s.apply(&req(12, register_again(&s, p))) else {
        panic!("the sole copy's node comes back")
    };
    assert_eq!((n.state, n.allocated_bytes), (MemNodeState::Active, 4096));
    let x = &s.regions[&r.id];
    assert!(x.lost.is_some() && !x.usable() && nodes_of(x) == vec![p]);
    assert!(s.map().unwrap().region(r.id).is_none());
    assert_eq!(s.check(), Ok(()));
    s.apply(&req(13, Command::DropRegion { region: r.id })).unwrap();
    assert_eq!(s.memnodes[&p].allocated_bytes, 0);
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_region_is_declared_lost_only_when_its_dead_primary_has_no_heir() {
    let mut s = cluster(4, 1 << 20);
    let r = ready_region(&mut s, 3);
    let nodes = nodes_of(&r);
    let lose = Command::DeclareRegionLost { region: r.id };
    let refused = |s: &mut ControlState, want: &str| {
        let got = s.apply(&req(11, lose.clone()));
        assert!(
            matches!(&got, Err(CommandError::Conflict(m)) if m.contains(want)),
            "{want}: {got:?}"
        );
    };
    refused(&mut s, "not dead");
    dead(&mut s, nodes[0]);
    refused(&mut s, &format!("node {} can take over", nodes[1]));
    dead(&mut s, nodes[1]);
    refused(&mut s, &format!("node {} can take over", nodes[2]));
    assert!(matches!(
        s.apply(&req(11, Command::DeclareRegionLost { region: 99 })),
        Err(CommandError::UnknownRegion { id: 99 })
    ));
    // A replica being caught up is no heir: it was never brought level.
    let mut t = cluster(4, 1 << 20);
    let r = ready_region(&mut t, 2);
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
        t.apply(&req(12, c)).unwrap();
    }
    dead(&mut t, r.replicas[0].node);
    dead(&mut t, r.replicas[1].node);
    let Ok(Outcome::Region(x)) = t.apply(&req(13, Command::DeclareRegionLost { region: r.id })) else {
        panic!("lost: the only live replica was being caught up")
    };
    assert_eq!(x.catching_up, Some(spare));
    assert_eq!(t.check(), Ok(()));
}

/// The region of a live index is never dropped; a lost one is, with its
/// index; a plain region is, and its bytes are free again.
#[test]
fn a_region_is_dropped_with_its_index_only_once_it_is_lost() {
    let mut s = cluster(4, 1 << 20);
    let Ok(Outcome::Client(c)) = s.apply(&req(
        5,
        Command::RegisterClient {
            name: "app".into(),
            owner_ids: 1,
            lease_ms: 1000,
        },
    )) else {
        panic!("register a client")
    };
    let Ok(Outcome::Index(x)) = s.apply(&req(
        6,
        Command::CreateIndex {
            name: "solo".into(),
            kind: IndexKind::Btree,
            variant: IndexVariant::Rtx,
            size_bytes: 4096,
            replicas: 1,
            client: c.id,
        },
    )) else {
        panic!("create an index")
    };
    let drop = |region| Command::DropRegion { region };
    let got = s.apply(&req(7, drop(x.region)));
    assert!(
        matches!(&got, Err(CommandError::Conflict(m)) if m.contains("solo")),
        "{got:?}"
    );
    let node = s.regions[&x.region].primary();
    dead(&mut s, node);
    s.apply(&req(8, Command::DeclareRegionLost { region: x.region }))
        .unwrap();
    assert_eq!(s.apply(&req(9, drop(x.region))), Ok(Outcome::Removed));
    assert!(s.indexes.is_empty());
    assert_eq!(s.check(), Ok(()));
    // A plain region needs no loss to be dropped.
    let plain = ready_region(&mut s, 2);
    let holders = nodes_of(&plain);
    assert_eq!(s.apply(&req(10, drop(plain.id))), Ok(Outcome::Removed));
    for n in holders {
        assert_eq!(s.memnodes[&n].allocated_bytes, 0);
    }
    assert_eq!(s.check(), Ok(()));
}

/// What a member answers a command with before it proposes it: the same
/// as applying it, without changing anything, the audit trail included.
#[test]
fn a_dry_run_answers_as_apply_would_and_changes_nothing() {
    let mut s = cluster(3, 1 << 20);
    let r = ready_region(&mut s, 2);
    let commands = [
        Command::CreateRegion {
            size_bytes: 4096,
            replicas: 2,
        },
        Command::CreateRegion {
            size_bytes: 1 << 30,
            replicas: 1,
        },
        Command::EvictReplica {
            region: r.id,
            node: r.primary(),
        },
        Command::RegisterClient {
            name: "c".into(),
            owner_ids: 1,
            lease_ms: 1000,
        },
        Command::DrainMemNode { id: 9 },
        Command::DropRegion { region: r.id },
    ];
    for c in commands {
        let before = s.clone();
        let dry = s.dry_run(&req(20, c.clone()));
        assert_eq!(s, before, "{c:?}: a dry run changes nothing");
        let mut applied = s.clone();
        assert_eq!(applied.apply(&req(20, c.clone())), dry, "{c:?}");
    }
}
