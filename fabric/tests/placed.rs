//! A memory node whose regions the control plane places while it serves:
//! regions appended to a live image, found by clients that attached before.

use std::time::{Duration, Instant};

use fabric::{
    Backing, Batch, Client, ClusterMap, FabricError, GlobalAddr, Mandate, MemoryNode, NodeInfo, RegionInfo,
    ReplicaLoc, ShmTransport, VerbError,
};

fn map(epoch: u64, path: &str, regions: &[(u16, u64, u32)]) -> ClusterMap {
    let nodes = vec![NodeInfo {
        id: 4,
        endpoint: path.to_owned(),
    }];
    let regions = regions
        .iter()
        .map(|&(id, size, key)| RegionInfo {
            id,
            size,
            replicas: vec![ReplicaLoc { node: 4, key }],
        })
        .collect();
    ClusterMap::new(epoch, nodes, regions).unwrap()
}

#[tokio::test]
async fn a_region_placed_after_a_client_attached_is_served_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mn4");
    let (node, reopened) = MemoryNode::placed(4, 1 << 20, &Backing::Shm(path.clone())).unwrap();
    assert!(!reopened);
    assert!(node.descriptor().regions.is_empty());
    let shown = path.display().to_string();

    // Attached before the region exists, as a client that connected early.
    let transport = ShmTransport::attach_map(&map(1, &shown, &[])).unwrap();
    assert!(node.add_region(1, 64 << 10, 77).unwrap());
    assert!(
        !node.add_region(1, 64 << 10, 77).unwrap(),
        "the same placement twice is one"
    );
    let mandate = Mandate::new(
        map(2, &shown, &[(1, 64 << 10, 77)]),
        Instant::now() + Duration::from_secs(60),
    );
    let mut client = Client::under(mandate.clone(), transport.into());
    let mut batch = Batch::new();
    batch.write(GlobalAddr::new(1, 64), &[5u8; 16]);
    let r = batch.read(GlobalAddr::new(1, 64), 16);
    client.execute(&mut batch).await.unwrap();
    assert_eq!(batch.read_result(r).unwrap(), &[5u8; 16]);

    // A wrong key is still refused; so is a region the node never took.
    let mut bad = Batch::new();
    let h = bad.read(GlobalAddr::new(1, 0), 8);
    mandate.install(map(3, &shown, &[(1, 64 << 10, 78)])).unwrap();
    client.execute(&mut bad).await.unwrap();
    assert_eq!(bad.read_result(h).unwrap_err(), VerbError::BadKey);

    // Once the lease is not certain, nothing is issued.
    mandate.revoke();
    let before = client.stats().round_trips;
    let err = client.execute(&mut batch).await.unwrap_err();
    assert!(matches!(err, FabricError::LeaseUncertain), "{err}");
    assert_eq!(client.stats().round_trips, before);
}

#[test]
fn placements_that_cannot_be_held_are_refused_and_change_nothing() {
    let (node, _) = MemoryNode::placed(4, 128 << 10, &Backing::Anonymous).unwrap();
    assert!(node.add_region(1, 64 << 10, 1).unwrap());
    let conflict = node.add_region(1, 32 << 10, 1).unwrap_err().to_string();
    assert!(conflict.contains("another key"), "{conflict}");
    let full = node.add_region(2, 96 << 10, 1).unwrap_err().to_string();
    assert!(full.contains("free"), "{full}");
    assert!(node.add_region(3, 7, 1).is_err(), "sizes are whole words");
    assert_eq!(node.descriptor().regions.len(), 1);
    assert!(MemoryNode::placed(4, 0, &Backing::Anonymous).is_err());
}

#[test]
fn a_persistent_placed_node_comes_back_with_its_regions_and_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mn4.img");
    {
        let (node, reopened) = MemoryNode::placed(4, 1 << 20, &Backing::Persist(path.clone())).unwrap();
        assert!(!reopened);
        node.add_region(9, 8192, 3).unwrap();
        node.advance_epoch(6);
        node.sync().unwrap();
    }
    let (node, reopened) = MemoryNode::placed(4, 1 << 20, &Backing::Persist(path.clone())).unwrap();
    assert!(reopened);
    assert_eq!(node.epoch(), 6);
    let d = node.descriptor();
    assert_eq!(
        (d.regions[0].id, d.regions[0].size, d.regions[0].key),
        (9, 8192, 3)
    );
    let other = MemoryNode::placed(5, 1 << 20, &Backing::Persist(path)).unwrap_err();
    assert!(other.to_string().contains("belongs to memory node 4"), "{other}");
}

/// A process makes one transport and a fresh client under its mandate for
/// each task (the recovery coordinator, one per pass): a node that joined
/// the map while no client of the process ran a batch is reached by the
/// next client's first batch, not refused to every client for good.
#[tokio::test]
async fn a_fresh_client_reaches_a_node_that_joined_after_its_transport_was_made() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("mn4");
    let later = dir.path().join("mn5");
    let (_n4, _) = MemoryNode::placed(4, 1 << 20, &Backing::Shm(first.clone())).unwrap();
    let (n5, _) = MemoryNode::placed(5, 1 << 20, &Backing::Shm(later.clone())).unwrap();
    assert!(n5.add_region(1, 64 << 10, 77).unwrap());
    let node = |id: u16, path: &std::path::Path| NodeInfo {
        id,
        endpoint: path.display().to_string(),
    };
    let before = ClusterMap::new(1, vec![node(4, &first)], Vec::new()).unwrap();
    let transport: fabric::AnyTransport = ShmTransport::attach_map(&before).unwrap().into();
    let region = RegionInfo {
        id: 1,
        size: 64 << 10,
        replicas: vec![ReplicaLoc { node: 5, key: 77 }],
    };
    let after = ClusterMap::new(2, vec![node(4, &first), node(5, &later)], vec![region]).unwrap();
    // The map moved on before this client existed: it starts at its epoch.
    let mandate = Mandate::new(after, Instant::now() + Duration::from_secs(60));
    let mut client = Client::under(mandate, transport);
    let mut batch = Batch::new();
    batch.write(GlobalAddr::new(1, 8), &[9u8; 8]);
    let r = batch.read(GlobalAddr::new(1, 8), 8);
    client.execute(&mut batch).await.unwrap();
    assert_eq!(batch.read_result(r).unwrap(), &[9u8; 8]);
}

/// Image identity (design.md §1b): a persistent image keeps its id and its
/// replicas' generations across restarts; a new image, even at the same
/// path, has another id; a retired region refuses every verb with the key
/// it was served under.
#[tokio::test]
async fn an_image_keeps_its_id_and_generations_and_a_retired_region_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mn4.img");
    assert_eq!(
        MemoryNode::image_in(&path).unwrap(),
        None,
        "no file: no image yet"
    );
    let chosen = fabric::ImageId::random();
    let first = {
        let (node, _) =
            MemoryNode::placed_as(4, 1 << 20, &Backing::Persist(path.clone()), Some(chosen)).unwrap();
        assert_eq!(
            node.image_id(),
            chosen,
            "a new image takes the id it was registered with"
        );
        node.add_region(9, 8192, 3).unwrap();
        assert_eq!(node.replica_generation(9), Some(0), "allocated, not proven");
        assert!(node.set_replica_generation(9, 7).unwrap());
        assert!(
            !node.set_replica_generation(8, 7).unwrap(),
            "a region it does not hold"
        );
        node.sync().unwrap();
        node.image_id()
    };
    assert_eq!(MemoryNode::image_in(&path).unwrap(), Some(first));
    let (node, reopened) =
        MemoryNode::placed_as(4, 1 << 20, &Backing::Persist(path.clone()), Some(first)).unwrap();
    assert!(reopened);
    assert_eq!((node.image_id(), node.replica_generation(9)), (first, Some(7)));
    let other = fabric::ImageId::random();
    let changed =
        MemoryNode::placed_as(4, 1 << 20, &Backing::Persist(path.clone()), Some(other)).unwrap_err();
    assert!(
        changed.to_string().contains("changed since it was read"),
        "{changed}"
    );
    drop(node);

    // The same path wiped: another image.
    std::fs::remove_file(&path).unwrap();
    let (wiped, reopened) = MemoryNode::placed(4, 1 << 20, &Backing::Persist(path.clone())).unwrap();
    assert!(!reopened);
    assert_ne!(wiped.image_id(), first);
    drop(wiped);

    // Retired: verbs with the key it was served under are refused.
    let shm = dir.path().join("mn4.shm");
    let (node, _) = MemoryNode::placed(4, 1 << 20, &Backing::Shm(shm.clone())).unwrap();
    assert!(node.add_region(1, 64 << 10, 77).unwrap());
    assert!(node.set_replica_generation(1, 3).unwrap());
    let shown = shm.display().to_string();
    let transport = ShmTransport::attach_map(&map(1, &shown, &[(1, 64 << 10, 77)])).unwrap();
    let mandate = Mandate::new(
        map(1, &shown, &[(1, 64 << 10, 77)]),
        Instant::now() + Duration::from_secs(60),
    );
    let mut client = Client::under(mandate, transport.into());
    let mut batch = Batch::new();
    let h = batch.read(GlobalAddr::new(1, 0), 8);
    client.execute(&mut batch).await.unwrap();
    assert!(batch.read_result(h).is_ok());
    assert!(node.retire_region(1).unwrap());
    assert!(!node.retire_region(2).unwrap());
    assert_eq!(node.replica_generation(1), Some(0));
    // A process that maps the image checks keys itself (shm): one that
    // attaches now reads the new key. (One attached before keeps its copy
    // until the epoch the retirement's report brings fences it.)
    let transport = ShmTransport::attach_map(&map(1, &shown, &[(1, 64 << 10, 77)])).unwrap();
    let mandate = Mandate::new(
        map(1, &shown, &[(1, 64 << 10, 77)]),
        Instant::now() + Duration::from_secs(60),
    );
    let mut client = Client::under(mandate, transport.into());
    let mut batch = Batch::new();
    let h = batch.read(GlobalAddr::new(1, 0), 8);
    client.execute(&mut batch).await.unwrap();
    assert_eq!(batch.read_result(h).unwrap_err(), VerbError::BadKey);
    // Placed here again under a new key, it is served again (to be refilled).
    assert!(node.add_region(1, 64 << 10, 78).unwrap());
}

/// A retired region's bytes are given to a region placed later when the
/// image has no other room (issue 46: a node that lost its replicas while
/// away has room for new ones), zeroed first; the retired region cannot
/// come back onto bytes another holds; and the image, its entries now
/// sharing bytes with a retired one, opens again after a restart.
#[tokio::test]
async fn a_retired_regions_bytes_go_to_a_later_region_zeroed_and_the_image_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mn4.img");
    let shown = path.display().to_string();
    const SIZE: u64 = 64 << 10;
    // Room for two regions of SIZE, no more.
    let (node, _) = MemoryNode::placed(4, 2 * SIZE, &Backing::Persist(path.clone())).unwrap();
    assert!(node.add_region(1, SIZE, 11).unwrap());
    assert!(node.add_region(2, SIZE, 22).unwrap());
    let full = node.add_region(3, SIZE, 33).unwrap_err().to_string();
    assert!(full.contains("no 65536 contiguous bytes free"), "{full}");

    // Region 1 written, then retired.
    let write_map = map(1, &shown, &[(1, SIZE, 11)]);
    let transport = ShmTransport::attach_map(&write_map).unwrap();
    let mandate = Mandate::new(write_map, Instant::now() + Duration::from_secs(60));
    let mut client = Client::under(mandate, transport.into());
    let mut batch = Batch::new();
    batch.write(GlobalAddr::new(1, 8), &[0xAB; 64]);
    client.execute(&mut batch).await.unwrap();
    assert!(node.retire_region(1).unwrap());
    assert!(node.is_retired(1));

    // Region 3 takes its bytes, zeroed.
    assert!(node.add_region(3, SIZE, 33).unwrap());
    let read_map = map(2, &shown, &[(3, SIZE, 33)]);
    let transport = ShmTransport::attach_map(&read_map).unwrap();
    let mandate = Mandate::new(read_map, Instant::now() + Duration::from_secs(60));
    let mut client = Client::under(mandate, transport.into());
    let mut batch = Batch::new();
    let h = batch.read(GlobalAddr::new(3, 8), 64);
    client.execute(&mut batch).await.unwrap();
    assert_eq!(
        batch.read_result(h).unwrap(),
        &[0u8; 64][..],
        "a reused region starts zeroed"
    );
    // Region 1 cannot come back onto bytes region 3 holds.
    let back = node.add_region(1, SIZE, 44).unwrap_err().to_string();
    assert!(back.contains("given to region 3"), "{back}");
    node.sync().unwrap();
    drop(node);

    // Restarted from the image: region 3 held, region 1 still retired.
    let (node, reopened) = MemoryNode::placed(4, 2 * SIZE, &Backing::Persist(path.clone())).unwrap();
    assert!(reopened);
    assert!(node.is_retired(1) && !node.is_retired(3));
    assert_eq!(node.replica_generation(1), Some(0));
    let ids: Vec<u16> = node.descriptor().regions.iter().map(|r| r.id).collect();
    assert_eq!(ids, [1, 2, 3]);
}
