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
