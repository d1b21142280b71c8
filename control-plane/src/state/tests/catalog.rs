//! Indexes: placed, allocated, formatted; a creation an expired client left.

use super::*;

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
