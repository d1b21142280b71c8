//! The cluster map: which memory nodes exist and which of them hold which
//! replica of each region. Clients route every verb through it.
//!
//! Invariants (checked by [`ClusterMap::new`]): node ids are unique; every
//! region has between 1 and [`REPLICAS_MAX`] replicas on distinct, known
//! nodes; the first replica is the primary.

use serde::{Deserialize, Serialize};

use crate::addr::{AccessKey, Epoch, NodeId, RegionId, Replica};
use crate::error::FabricError;
use crate::memnode::NodeDescriptor;

/// Most replicas one region may have (primary plus up to 7 backups): the
/// `Backup(i)` index is a byte, and commit paths write every replica, so more
/// would only multiply their cost.
pub const REPLICAS_MAX: usize = 8;

/// A memory node as clients see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its id.
    pub id: NodeId,
    /// Where a transport reaches it: `host:port` for tcp, an image path for
    /// shm, anything for local.
    pub endpoint: String,
}

/// One replica of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLoc {
    /// The node that holds it.
    pub node: NodeId,
    /// The access key verbs must present there.
    pub key: AccessKey,
}

/// A region and its replicas, primary first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    /// Region id.
    pub id: RegionId,
    /// Size in bytes (identical on every replica).
    pub size: u64,
    /// Primary first, then backups.
    pub replicas: Vec<ReplicaLoc>,
}

#[derive(Serialize, Deserialize)]
struct MapRepr {
    epoch: Epoch,
    nodes: Vec<NodeInfo>,
    regions: Vec<RegionInfo>,
}

/// Why a map is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cluster map: {0}")]
pub struct MapError(pub String);

/// A validated cluster map with an index for routing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MapRepr", into = "MapRepr")]
pub struct ClusterMap {
    epoch: Epoch,
    nodes: Vec<NodeInfo>,
    regions: Vec<RegionInfo>,
    /// `by_region[id]` = index into `regions` + 1, or 0 when absent.
    by_region: Vec<u16>,
}

impl ClusterMap {
    /// Validates and indexes a map.
    pub fn new(epoch: Epoch, nodes: Vec<NodeInfo>, regions: Vec<RegionInfo>) -> Result<Self, MapError> {
        for (i, n) in nodes.iter().enumerate() {
            if nodes[..i].iter().any(|o| o.id == n.id) {
                return Err(MapError(format!("node {} listed twice", n.id)));
            }
        }
        let mut by_region = Vec::new();
        for (i, r) in regions.iter().enumerate() {
            if r.replicas.is_empty() || r.replicas.len() > REPLICAS_MAX {
                return Err(MapError(format!(
                    "region {} has {} replicas; 1 to {REPLICAS_MAX} allowed",
                    r.id,
                    r.replicas.len()
                )));
            }
            for (j, rep) in r.replicas.iter().enumerate() {
                if !nodes.iter().any(|n| n.id == rep.node) {
                    return Err(MapError(format!(
                        "region {} names unknown node {}",
                        r.id, rep.node
                    )));
                }
                if r.replicas[..j].iter().any(|o| o.node == rep.node) {
                    return Err(MapError(format!(
                        "region {} has two replicas on node {}",
                        r.id, rep.node
                    )));
                }
            }
            let slot = usize::from(r.id);
            if by_region.len() <= slot {
                by_region.resize(slot + 1, 0);
            }
            if by_region[slot] != 0 {
                return Err(MapError(format!("region {} listed twice", r.id)));
            }
            by_region[slot] = u16::try_from(i + 1).map_err(|_| MapError("too many regions".into()))?;
        }
        Ok(ClusterMap {
            epoch,
            nodes,
            regions,
            by_region,
        })
    }

    /// Builds a map from nodes that describe themselves (a hello over tcp, an
    /// attached shm image). A region held by several nodes is replicated on
    /// them in the order given: the first node that holds it is its primary.
    pub fn from_descriptors(epoch: Epoch, nodes: &[(NodeDescriptor, String)]) -> Result<Self, MapError> {
        let mut regions: Vec<RegionInfo> = Vec::new();
        for (d, _) in nodes {
            for r in &d.regions {
                let loc = ReplicaLoc {
                    node: d.node,
                    key: r.key,
                };
                match regions.iter_mut().find(|x| x.id == r.id) {
                    Some(existing) if existing.size != r.size => {
                        return Err(MapError(format!(
                            "region {} is {} bytes on one node and {} on node {}",
                            r.id, existing.size, r.size, d.node
                        )))
                    }
                    Some(existing) => existing.replicas.push(loc),
                    None => regions.push(RegionInfo {
                        id: r.id,
                        size: r.size,
                        replicas: vec![loc],
                    }),
                }
            }
        }
        let infos = nodes
            .iter()
            .map(|(d, endpoint)| NodeInfo {
                id: d.node,
                endpoint: endpoint.clone(),
            })
            .collect();
        ClusterMap::new(epoch, infos, regions)
    }

    /// The map's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// All nodes.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// All regions.
    pub fn regions(&self) -> &[RegionInfo] {
        &self.regions
    }

    /// One region, if the map has it.
    pub fn region(&self, id: RegionId) -> Option<&RegionInfo> {
        let i = *self.by_region.get(usize::from(id))?;
        (i != 0).then(|| &self.regions[usize::from(i) - 1])
    }

    /// Whether any region has a replica on `node`: a node that holds none
    /// is sent no verb by a client routing by this map.
    pub fn routes_to(&self, node: NodeId) -> bool {
        self.regions
            .iter()
            .any(|r| r.replicas.iter().any(|l| l.node == node))
    }

    /// The replicas a verb aimed at `replica` of `region` goes to.
    pub fn route(&self, region: RegionId, replica: Replica) -> Result<&[ReplicaLoc], FabricError> {
        let info = self.region(region).ok_or(FabricError::UnknownRegion { region })?;
        let range = match replica {
            Replica::Primary => 0..1,
            Replica::Backup(i) => usize::from(i) + 1..usize::from(i) + 2,
            Replica::All => 0..info.replicas.len(),
        };
        info.replicas
            .get(range)
            .ok_or(FabricError::NoSuchReplica { region, replica })
    }

    /// The same map with another epoch (for tests and for nodes that bump
    /// the epoch without a control plane).
    pub fn with_epoch(&self, epoch: Epoch) -> Self {
        ClusterMap {
            epoch,
            ..self.clone()
        }
    }
}

impl TryFrom<MapRepr> for ClusterMap {
    type Error = MapError;
    fn try_from(r: MapRepr) -> Result<Self, MapError> {
        ClusterMap::new(r.epoch, r.nodes, r.regions)
    }
}

impl From<ClusterMap> for MapRepr {
    fn from(m: ClusterMap) -> Self {
        MapRepr {
            epoch: m.epoch,
            nodes: m.nodes,
            regions: m.regions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: NodeId) -> NodeInfo {
        NodeInfo {
            id,
            endpoint: format!("n{id}"),
        }
    }

    fn two_replicas() -> ClusterMap {
        let reps = vec![ReplicaLoc { node: 1, key: 11 }, ReplicaLoc { node: 2, key: 22 }];
        ClusterMap::new(
            5,
            vec![node(1), node(2)],
            vec![RegionInfo {
                id: 3,
                size: 4096,
                replicas: reps,
            }],
        )
        .unwrap()
    }

    #[test]
    fn routes_primary_backup_and_all() {
        let m = two_replicas();
        assert_eq!(m.route(3, Replica::Primary).unwrap()[0].node, 1);
        assert_eq!(m.route(3, Replica::Backup(0)).unwrap()[0].node, 2);
        assert_eq!(m.route(3, Replica::All).unwrap().len(), 2);
        assert!(matches!(
            m.route(3, Replica::Backup(1)),
            Err(FabricError::NoSuchReplica { .. })
        ));
        assert!(matches!(
            m.route(4, Replica::Primary),
            Err(FabricError::UnknownRegion { region: 4 })
        ));
        assert!(matches!(
            m.route(900, Replica::Primary),
            Err(FabricError::UnknownRegion { .. })
        ));
    }

    #[test]
    fn rejects_inconsistent_maps() {
        let r = |replicas: Vec<ReplicaLoc>| RegionInfo {
            id: 1,
            size: 8,
            replicas,
        };
        assert!(ClusterMap::new(1, vec![node(1)], vec![r(vec![])]).is_err());
        assert!(ClusterMap::new(1, vec![node(1)], vec![r(vec![ReplicaLoc { node: 9, key: 0 }])]).is_err());
        let twice = vec![ReplicaLoc { node: 1, key: 0 }, ReplicaLoc { node: 1, key: 0 }];
        assert!(ClusterMap::new(1, vec![node(1)], vec![r(twice)]).is_err());
        assert!(ClusterMap::new(1, vec![node(1), node(1)], vec![]).is_err());
    }

    #[test]
    fn serde_round_trip_revalidates() {
        let m = two_replicas();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<ClusterMap>(&json).unwrap(), m);
        let broken = json.replace("\"node\":2", "\"node\":1");
        assert!(serde_json::from_str::<ClusterMap>(&broken).is_err());
    }
}
