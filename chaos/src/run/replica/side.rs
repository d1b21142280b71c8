//! A mixed-rf cluster's side indexes (`cluster.side_replicas`, issue 46):
//! made and loaded before the faults; at the end read back in full, or, a
//! single copy whose node died, found lost and removed by its operator
//! action (`ctl region drop ID --confirm`). A lost one must hold back no
//! other index: the checked one's phases and check run as without it.

use std::sync::Arc;
use std::time::Instant;

use cluster::load::Handle;
use cluster::{Cluster, ClusterOptions, Members};
use control_plane::state::{Command, IndexKind, IndexVariant};
use serde::Serialize;

use super::faults::{await_whole, Status};
use super::{index_bytes, CREATE_ATTEMPTS_MAX, CREATE_RETRY_PAUSE, PHASE_TIMEOUT};
use crate::experiment::SIDE_KEYS;
use crate::run::RunError;

/// One side index, as made.
pub(super) struct Side {
    /// Its name: `side-<i>-rf<replicas>`.
    name: String,
    /// Replicas it was made with.
    replicas: u8,
    /// Its region.
    pub(super) region: fabric::RegionId,
    /// The session that made it, which reads it back.
    cluster: Arc<Cluster>,
    kind: IndexKind,
}

/// What became of one side index.
#[derive(Clone, Debug, Serialize)]
pub struct SideCheck {
    /// Its name.
    pub index: String,
    /// Replicas it was made with.
    pub replicas: u8,
    /// Its region.
    pub region: fabric::RegionId,
    /// Why its region was lost, as `ctl region lost` says; `None`: it was
    /// not.
    pub lost: Option<String>,
    /// A lost one: its operator action removed it (the region and index
    /// gone, its nodes' space given back).
    pub dropped: bool,
    /// Keys read back with the value loaded.
    pub read_back: u64,
    /// The first key read back wrong (absent or another value).
    pub first_wrong: Option<String>,
}

impl SideCheck {
    /// Read back in full, or, a single copy, lost and dropped. A region of
    /// more replicas is never lost to the faults a schedule may hold (they
    /// leave a live replica).
    pub fn is_ok(&self) -> bool {
        match self.lost {
            Some(_) => self.replicas == 1 && self.dropped,
            None => self.read_back == SIDE_KEYS && self.first_wrong.is_none(),
        }
    }

    /// What became of it, in a line.
    pub fn describe(&self) -> String {
        let what = format!(
            "{} ({} replica(s), region {})",
            self.index, self.replicas, self.region
        );
        match (&self.lost, &self.first_wrong) {
            (Some(why), _) => format!(
                "{what}: lost ({why}); `ctl region drop {} --confirm` {}",
                self.region,
                if self.dropped {
                    "removed it"
                } else {
                    "did NOT remove it"
                }
            ),
            (None, None) => format!("{what}: {} of {SIDE_KEYS} keys read back", self.read_back),
            (None, Some(wrong)) => format!(
                "{what}: {} of {SIDE_KEYS} keys read back; first wrong: {wrong}",
                self.read_back
            ),
        }
    }
}

/// The keys are `1..=SIDE_KEYS` (0 is reserved). The value side key `key` is loaded with: every key its own, never 0.
fn value_of(key: u64, replicas: u8) -> u64 {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(replicas)) | 1
}

/// Makes and loads one index per entry of `replicas`, each through a
/// session of its own asking for that many replicas.
pub(super) async fn make(
    endpoints: &[String],
    token: &str,
    replicas: &[u8],
    kind: IndexKind,
    variant: IndexVariant,
) -> Result<Vec<Side>, RunError> {
    let mut sides = Vec::with_capacity(replicas.len());
    for (i, &rf) in replicas.iter().enumerate() {
        let name = format!("side-{i}-rf{rf}");
        let cluster = Arc::new(
            Cluster::connect_with(
                endpoints,
                token,
                ClusterOptions {
                    name: format!("chaos-{name}"),
                    replicas: rf,
                    index_bytes: index_bytes(SIDE_KEYS),
                    hash_keys: SIDE_KEYS,
                    owner_ids: 2,
                    variant,
                    ..ClusterOptions::default()
                },
            )
            .await
            .map_err(RunError::index("a side index's session cannot join the cluster"))?,
        );
        let mut opened = Handle::open(&cluster, &name, kind).await;
        for _ in 1..CREATE_ATTEMPTS_MAX {
            if opened.is_ok() {
                break;
            }
            tokio::time::sleep(CREATE_RETRY_PAUSE).await;
            opened = Handle::open(&cluster, &name, kind).await;
        }
        let mut handle = opened.map_err(RunError::index("cannot create a side index"))?;
        for key in 1..=SIDE_KEYS {
            handle
                .put(key, value_of(key, rf))
                .await
                .map_err(RunError::index("cannot load a side index"))?;
        }
        let region = Status::read(&cluster).await?.region_of(&name)?.id;
        sides.push(Side {
            name,
            replicas: rf,
            region,
            cluster,
            kind,
        });
    }
    Ok(sides)
}

/// Each side index after the faults: a lost one dropped as its operator
/// action says (by `operator`, with the operator's token), the others
/// (once settled) read back key by key.
pub(super) async fn check(sides: &[Side], operator: &Members) -> Result<Vec<SideCheck>, RunError> {
    let mut checks = Vec::with_capacity(sides.len());
    for side in sides {
        let mut c = SideCheck {
            index: side.name.clone(),
            replicas: side.replicas,
            region: side.region,
            lost: None,
            dropped: false,
            read_back: 0,
            first_wrong: None,
        };
        let lost = Status::read(&side.cluster)
            .await?
            .region(side.region)?
            .lost
            .clone();
        if let Some(why) = lost {
            c.lost = Some(why);
            c.dropped = drop_lost(side, operator).await?;
            checks.push(c);
            continue;
        }
        await_whole(&side.cluster, side.region).await?;
        let mut handle = Handle::open(&side.cluster, &side.name, side.kind)
            .await
            .map_err(RunError::index("cannot open a side index to read it back"))?;
        for key in 1..=SIDE_KEYS {
            let want = value_of(key, side.replicas);
            match handle.get(key).await {
                Ok(Some(v)) if v == want => c.read_back += 1,
                Ok(got) if c.first_wrong.is_none() => {
                    c.first_wrong = Some(format!("key {key}: {got:?}, loaded {want}"));
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(RunError::Process(format!(
                        "cannot read side index {} back: {e}",
                        side.name
                    )))
                }
            }
        }
        checks.push(c);
    }
    Ok(checks)
}

/// `ctl region drop ID --confirm` on a lost side region: whether the
/// region and its index are gone afterwards.
async fn drop_lost(side: &Side, operator: &Members) -> Result<bool, RunError> {
    operator
        .command(
            &format!("dropping lost region {}", side.region),
            &Command::DropRegion { region: side.region },
        )
        .await
        .map_err(|e| RunError::Control(format!("cannot drop lost region {}: {e}", side.region)))?;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let status = Status::read(&side.cluster).await?;
        if status.region(side.region).is_err() && status.region_of(&side.name).is_err() {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
