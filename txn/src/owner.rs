//! Owner ids: one per client thread or coroutine, unique in the cluster.
//!
//! The control plane will hand each client a block of ids with its lease;
//! until then [`LocalOwnerIds`] hands out ids from a block in this process.

use std::sync::Mutex;

use crate::word::{OwnerId, OWNER_MAX};

/// Why no owner id could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("all {0} owner ids of this client are in use")]
pub struct OwnerIdsExhausted(pub usize);

/// Hands out owner ids and takes them back.
pub trait OwnerIdAllocator: Send + Sync {
    /// A free id, now owned by the caller.
    fn allocate(&self) -> Result<OwnerId, OwnerIdsExhausted>;
    /// Returns an id whose last transaction is finished (its log is DONE).
    fn release(&self, id: OwnerId);
}

/// Ids from a contiguous block, handed out lowest first.
#[derive(Debug)]
pub struct LocalOwnerIds {
    free: Mutex<Vec<OwnerId>>,
    size: usize,
}

impl LocalOwnerIds {
    /// The block `first ..= last`. Id 0 is never handed out (a zeroed lock
    /// word must not name a live owner).
    pub fn new(first: OwnerId, last: OwnerId) -> Self {
        let first = first.max(1);
        let last = last.min(OWNER_MAX);
        let free: Vec<OwnerId> = (first..=last).rev().collect();
        let size = free.len();
        LocalOwnerIds {
            free: Mutex::new(free),
            size,
        }
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<OwnerId>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl OwnerIdAllocator for LocalOwnerIds {
    fn allocate(&self) -> Result<OwnerId, OwnerIdsExhausted> {
        self.free().pop().ok_or(OwnerIdsExhausted(self.size))
    }

    fn release(&self, id: OwnerId) {
        let mut free = self.free();
        debug_assert!(!free.contains(&id), "owner id {id} released twice");
        free.push(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_reused_after_release() {
        let ids = LocalOwnerIds::new(0, 3);
        let a = ids.allocate().unwrap();
        let b = ids.allocate().unwrap();
        let c = ids.allocate().unwrap();
        assert_eq!((a, b, c), (1, 2, 3));
        assert_eq!(ids.allocate(), Err(OwnerIdsExhausted(3)));
        ids.release(b);
        assert_eq!(ids.allocate(), Ok(2));
    }
}
