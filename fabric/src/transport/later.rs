//! What a transport reached after it was made: memory nodes that joined
//! the map later (a spare given a new replica, a node that came back).

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
