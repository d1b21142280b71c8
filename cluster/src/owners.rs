//! The owner ids of one process, lent to index handles one each: an owner
//! id is one log slot, so two handles never share one.

use std::sync::{Arc, Mutex};

/// The free owner ids of a block.
#[derive(Debug)]
pub(crate) struct OwnerPool {
    free: Mutex<Vec<u16>>,
    count: u16,
}

impl OwnerPool {
    pub(crate) fn new(first: u16, count: u16) -> OwnerPool {
        // Lowest id first.
        OwnerPool {
            free: Mutex::new((first..first + count).rev().collect()),
            count,
        }
    }

    /// Lends a free id, if any.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Owner> {
        let id = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        Some(Owner {
            id,
            pool: self.clone(),
        })
    }

    /// Ids lent out now.
    pub(crate) fn in_use(&self) -> usize {
        usize::from(self.count) - self.free.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// One lent owner id, given back on drop.
#[derive(Debug)]
pub(crate) struct Owner {
    id: u16,
    pool: Arc<OwnerPool>,
}

impl Owner {
    pub(crate) fn id(&self) -> u16 {
        self.id
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.pool
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.id);
    }
}
