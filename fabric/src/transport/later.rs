//! What a transport reached after it was made: memory nodes that joined
//! the map later (a spare given a new replica, a node that came back).

use crate::addr::NodeId;
use crate::error::FabricError;
use crate::map::{ClusterMap, NodeInfo};

/// An append-only set of at most [`NODES_JOINED_MAX`] items, read without
/// locks: what a transport reached after it was made.
#[derive(Debug)]
pub(crate) struct Later<T> {
    slots: Box<[std::sync::OnceLock<T>]>,
    append: std::sync::Mutex<()>,
}

/// Memory nodes a transport takes on after it was made (a spare that
/// receives a new replica, a node that came back): a cluster replaces a
/// handful of nodes over a process's life; past this, a process must
/// reconnect to reach more.
pub const NODES_JOINED_MAX: usize = 64;

impl<T> Later<T> {
    /// Takes on every node of `map` that `known` does not find, made by
    /// `make`. A node `make` cannot reach is skipped with a warning (it may
    /// be dead: recovery routes around it, and the next map tries again),
    /// so one unreachable node never hides the others. Returns how many
    /// were taken on; fails only when [`NODES_JOINED_MAX`] is reached.
    pub(crate) fn learn<E: std::fmt::Display>(
        &self,
        map: &ClusterMap,
        known: impl Fn(NodeId) -> bool,
        id_of: impl Fn(&T) -> NodeId,
        make: impl Fn(&NodeInfo) -> Result<T, E>,
    ) -> Result<usize, FabricError> {
        enum Missed {
            Unreachable(String),
            Full,
        }
        let mut learned = 0;
        for n in map.nodes().iter().filter(|n| !known(n.id)) {
            let made = self.append(
                |x| id_of(x) == n.id,
                || make(n).map_err(|e| Missed::Unreachable(e.to_string())),
                || Missed::Full,
            );
            match made {
                Ok(made) => learned += usize::from(made),
                Err(Missed::Unreachable(e)) => {
                    tracing::warn!(node = n.id, endpoint = %n.endpoint, error = %e, "cannot reach a node of the map; skipped");
                }
                Err(Missed::Full) => {
                    return Err(FabricError::Protocol {
                        node: n.id,
                        reason: format!("this process reached {NODES_JOINED_MAX} nodes after it started"),
                    })
                }
            }
        }
        Ok(learned)
    }

    pub(crate) fn new() -> Self {
        Later {
            slots: (0..NODES_JOINED_MAX)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            append: std::sync::Mutex::new(()),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map_while(|s| s.get())
    }

    /// Appends what `make` returns unless `present` finds it already.
    /// `Ok(false)` when it was there.
    pub(crate) fn append<E>(
        &self,
        present: impl Fn(&T) -> bool,
        make: impl FnOnce() -> Result<T, E>,
        full: impl FnOnce() -> E,
    ) -> Result<bool, E> {
        let _one = self.append.lock().unwrap_or_else(|p| p.into_inner());
        if self.iter().any(present) {
            return Ok(false);
        }
        let Some(slot) = self.slots.iter().find(|s| s.get().is_none()) else {
            return Err(full());
        };
        let item = make()?;
        // Appends are serialised by the lock and slots filled in order.
        let _ = slot.set(item);
        Ok(true)
    }
}
