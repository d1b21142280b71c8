//! Image identity (design.md §1b): a memory node back under its endpoint
//! with another image than its record's holds none of its replicas.

use super::*;
use fabric::ImageId;

/// A state with `n` active nodes that registered with images, and those
/// images.
fn imaged_cluster(n: u16) -> (ControlState, Vec<ImageId>) {
    let mut s = ControlState::default();
    let mut images = Vec::new();
    for i in 0..n {
        let image = ImageId::random();
        let cmd = Command::RegisterMemNode {
            endpoint: format!("10.0.0.{i}:7000"),
            capacity_bytes: 1 << 20,
            image: Some(image),
        };
        let Ok(Outcome::MemNode(m)) = s.apply(&req(1, cmd)) else {
            panic!("register failed")
        };
        assert_eq!(
            m.image,
            Some(image),
            "the record keeps the image it registered with"
        );
        s.apply(&req(2, Command::ActivateMemNode { id: m.id })).unwrap();
        images.push(image);
    }
    (s, images)
}

fn register(s: &ControlState, id: MemNodeId, image: Option<ImageId>) -> Command {
    Command::RegisterMemNode {
        endpoint: s.memnodes[&id].endpoint.clone(),
        capacity_bytes: 1 << 20,
        image,
    }
}

#[test]
fn a_live_node_back_with_another_image_is_declared_dead_and_refilled_as_a_new_node() {
    let (mut s, images) = imaged_cluster(4);
    let r = ready_region(&mut s, 3);
    let p = r.primary();
    let wiped = ImageId::random();

    // Its own image again: a restart that kept its memory, registered already.
    let same = s.apply(&req(5, register(&s, p, Some(images[usize::from(p)]))));
    assert!(matches!(same, Err(CommandError::Conflict(ref m)) if m.contains("already has endpoint")));
    // Another image: refused, saying why; the node asks for the replacement.
    let other = s.apply(&req(5, register(&s, p, Some(wiped))));
    assert!(
        matches!(other, Err(CommandError::Conflict(ref m)) if m.contains("another") || m.contains("not"))
    );
    assert_eq!(
        s.memnodes[&p].state,
        MemNodeState::Active,
        "a refusal changes nothing"
    );

    let before = s.epoch;
    let Ok(Outcome::MemNode(n)) = s.apply(&req(6, Command::ReplaceImage { id: p, image: wiped })) else {
        panic!("replace the image")
    };
    assert_eq!(
        n.state,
        MemNodeState::Dead,
        "declared dead at once, not after two leases"
    );
    assert_eq!(
        s.epoch,
        before + 1,
        "routing changed: its replicas are to be evicted"
    );
    assert_eq!(
        n.image,
        Some(images[usize::from(p)]),
        "the record keeps the old image until it is taken in"
    );

    // Until recovery evicts it, it is not taken back: not even as the copy
    // it once was.
    assert!(matches!(
        s.apply(&req(7, register(&s, p, Some(wiped)))),
        Err(CommandError::Conflict(_))
    ));
    let Ok(Outcome::Region(x)) = s.apply(&req(
        8,
        Command::EvictReplica {
            region: r.id,
            node: p,
        },
    )) else {
        panic!("evict")
    };
    assert_eq!(x.primary(), r.replicas[1].node, "its first backup took over");
    let Ok(Outcome::MemNode(n)) = s.apply(&req(9, register(&s, p, Some(wiped)))) else {
        panic!("register again")
    };
    assert_eq!(
        (n.state, n.allocated_bytes, n.image),
        (MemNodeState::Joining, 0, Some(wiped)),
        "taken in as an empty node under its new image"
    );
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn a_replacement_is_refused_where_the_record_cannot_tell_images_apart() {
    let (mut s, images) = imaged_cluster(2);
    let same = Command::ReplaceImage {
        id: 0,
        image: images[0],
    };
    assert!(matches!(s.apply(&req(5, same)), Err(CommandError::Conflict(_))));
    let unknown = Command::ReplaceImage {
        id: 9,
        image: images[0],
    };
    assert!(matches!(
        s.apply(&req(5, unknown)),
        Err(CommandError::UnknownMemNode { id: 9 })
    ));
    // A record made without an image takes the node at its word.
    let mut s = cluster(2, 1 << 20);
    let legacy = Command::ReplaceImage {
        id: 0,
        image: ImageId::random(),
    };
    assert!(matches!(s.apply(&req(5, legacy)), Err(CommandError::Conflict(_))));
    assert_eq!(s.memnodes[&0].state, MemNodeState::Active);
}

#[test]
fn a_dead_sole_copy_is_taken_back_with_its_image_never_with_another() {
    let (mut s, images) = imaged_cluster(3);
    let r = ready_region(&mut s, 1);
    let p = r.primary();
    s.apply(&req(10, Command::SuspectMemNode { id: p })).unwrap();
    s.apply(&req(10, Command::DeclareMemNodeDead { id: p })).unwrap();
    // Back with another image: what it held is gone, and it is not taken
    // back as the region's copy.
    let wiped = s.apply(&req(11, register(&s, p, Some(ImageId::random()))));
    assert!(
        matches!(wiped, Err(CommandError::Conflict(_))),
        "a new image is never revived as a sole copy: {wiped:?}"
    );
    assert_eq!(s.memnodes[&p].state, MemNodeState::Dead);
    // Back with its own image (a false suspicion): as it was.
    let Ok(Outcome::MemNode(n)) = s.apply(&req(12, register(&s, p, Some(images[usize::from(p)])))) else {
        panic!("revive")
    };
    assert_eq!(n.state, MemNodeState::Active);
    assert!(s.regions[&r.id].serves(p));
    assert_eq!(s.check(), Ok(()));
}

#[test]
fn generations_are_handed_out_at_creation_placement_join_and_promotion() {
    let (mut s, _) = imaged_cluster(4);
    let r = ready_region(&mut s, 2);
    let (p, b) = (r.replicas[0].node, r.replicas[1].node);
    assert!(r.generation_of(p) > 0 && r.generation_of(b) > 0, "created: {r:?}");
    let spare = (0..4).find(|n| !r.on(*n)).unwrap();
    let Ok(Outcome::Region(x)) = s.apply(&req(
        5,
        Command::AddBackup {
            region: r.id,
            node: spare,
        },
    )) else {
        panic!("add backup")
    };
    let placed = x.generation_of(spare);
    assert_eq!(placed, x.generation, "the newest hand-out");
    s.apply(&req(
        5,
        Command::ReplicaReady {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    let Ok(Outcome::Region(x)) = s.apply(&req(
        6,
        Command::JoinBackup {
            region: r.id,
            node: spare,
        },
    )) else {
        panic!("join")
    };
    assert!(x.generation_of(spare) > placed, "filled: handed out again");
    s.apply(&req(6, Command::RegionRestored { region: r.id }))
        .unwrap();
    let before = s.regions[&r.id].generation_of(b);
    let Ok(Outcome::Region(x)) = s.apply(&req(
        7,
        Command::PromoteBackup {
            region: r.id,
            node: b,
            restorer: None,
        },
    )) else {
        panic!("promote")
    };
    assert!(x.generation_of(b) > before, "promoted: handed out again");
    s.apply(&req(7, Command::RegionRestored { region: r.id }))
        .unwrap();
    s.apply(&req(
        8,
        Command::RemoveBackup {
            region: r.id,
            node: spare,
        },
    ))
    .unwrap();
    assert_eq!(
        s.regions[&r.id].generation_of(spare),
        0,
        "forgotten with its replica"
    );
    assert_eq!(s.check(), Ok(()));
}

/// After a restore every holder proves its replica before the region
/// serves (issue 46, path 2): none is an heir meanwhile, a dead primary
/// does not make the region lost while a live backup may still prove
/// itself, and a primary found stale waits for a backup's proof.
#[test]
fn a_restored_region_serves_once_its_holders_prove_their_replicas() {
    let (mut s, _) = imaged_cluster(4);
    let r = ready_region(&mut s, 3);
    let (p, b1, b2) = (r.replicas[0].node, r.replicas[1].node, r.replicas[2].node);
    let saved = s.clone();
    let mut t = ControlState::default();
    t.apply(&req(
        1,
        Command::Restore {
            state: SavedState(Box::new(saved)),
        },
    ))
    .unwrap();
    let x = &t.regions[&r.id];
    assert_eq!(x.unverified, [p, b1, b2]);
    assert!(!x.usable() && x.awaiting_proof());
    assert!(
        t.map().unwrap().regions().iter().all(|m| m.id != r.id),
        "out of the clients' map"
    );
    assert_eq!(t.heir(x), None, "no unproven heir");
    let prove = |node, generation| Command::ReplicaProven {
        region: r.id,
        node,
        generation,
        followed_epoch: 0,
    };
    // At another generation: not a proof.
    let g1 = x.generation_of(b1);
    assert!(matches!(
        t.apply(&req(2, prove(b1, g1 + 1))),
        Err(CommandError::Conflict(_))
    ));
    // The primary's image is stale; no backup has proven itself yet: the
    // report waits, the region is not lost.
    let stale = Command::ReplicaUnproven {
        region: r.id,
        node: p,
        found: 0,
    };
    assert!(matches!(
        t.apply(&req(3, stale.clone())),
        Err(CommandError::Conflict(_))
    ));
    assert!(t.regions[&r.id].lost.is_none());
    // The primary's node dies meanwhile: not lost while a backup may prove.
    t.apply(&req(4, Command::SuspectMemNode { id: p })).unwrap();
    t.apply(&req(4, Command::DeclareMemNodeDead { id: p })).unwrap();
    assert!(matches!(
        t.apply(&req(5, Command::DeclareRegionLost { region: r.id })),
        Err(CommandError::Conflict(_))
    ));
    assert!(matches!(
        t.apply(&req(
            5,
            Command::EvictReplica {
                region: r.id,
                node: p
            }
        )),
        Err(CommandError::Conflict(_))
    ));
    // A backup proves itself: it is the heir, the dead primary evicted.
    let before = t.epoch;
    t.apply(&req(6, prove(b1, g1))).unwrap();
    assert!(t.epoch > before);
    assert!(
        matches!(t.apply(&req(6, prove(b1, g1))), Err(CommandError::Conflict(_))),
        "once"
    );
    let Ok(Outcome::Region(y)) = t.apply(&req(
        7,
        Command::EvictReplica {
            region: r.id,
            node: p,
        },
    )) else {
        panic!("evict the dead primary")
    };
    assert_eq!(y.primary(), b1);
    assert!(!y.usable(), "restoring, and b2 still to prove itself");
    let g2 = y.generation_of(b2);
    t.apply(&req(8, prove(b2, g2))).unwrap();
    let z = &t.regions[&r.id];
    assert!(!z.awaiting_proof(), "{z:?}");
    assert_eq!(t.check(), Ok(()));
}

#[test]
fn an_unproven_replica_is_dropped_and_a_sole_unproven_copy_is_lost() {
    let (mut s, _) = imaged_cluster(4);
    let r = ready_region(&mut s, 3);
    let (p, b1) = (r.replicas[0].node, r.replicas[1].node);
    let want = r.generation_of(p);
    let proven = Command::ReplicaUnproven {
        region: r.id,
        node: p,
        found: want,
    };
    assert!(
        matches!(s.apply(&req(5, proven)), Err(CommandError::Conflict(_))),
        "a replica at the map's generation is proven"
    );
    // The primary's image holds an older generation: its first backup
    // takes over, as from a dead primary.
    let before = s.epoch;
    let stale = Command::ReplicaUnproven {
        region: r.id,
        node: p,
        found: want - 1,
    };
    let Ok(Outcome::Region(x)) = s.apply(&req(6, stale)) else {
        panic!("drop the unproven primary")
    };
    assert_eq!((x.primary(), x.restoring, s.epoch), (b1, true, before + 1));
    assert!(!x.on(p) && x.generation_of(p) == 0);
    assert_eq!(
        s.memnodes[&p].state,
        MemNodeState::Active,
        "the node itself is fine"
    );
    assert_eq!(s.memnodes[&p].allocated_bytes, 0);
    assert_eq!(s.check(), Ok(()));

    // A single copy whose image lost it: nothing to serve, the region lost.
    let one = ready_region(&mut s, 1);
    let only = one.primary();
    let Ok(Outcome::Region(x)) = s.apply(&req(
        7,
        Command::ReplicaUnproven {
            region: one.id,
            node: only,
            found: 0,
        },
    )) else {
        panic!("lose it")
    };
    assert!(x.lost.is_some() && !x.usable(), "{x:?}");
    assert!(
        s.map().unwrap().regions().iter().all(|m| m.id != one.id),
        "out of the clients' map"
    );
    assert_eq!(s.check(), Ok(()));
}
