//! The bytes of each rtx object an index is made of: what a checker that
//! compares replicas object by object compares.

use std::collections::HashMap;

use fabric::GlobalAddr;

/// Bytes of data of an index's objects, by meta address: a B+tree's
/// nodes ([`crate::btree::BTree::objects`]), a hash table's directory and
/// subtables ([`crate::hash::HashTable::objects`]). Any other meta is none
/// of the index's: one an aborted transaction created (its meta may have
/// reached some replicas only, and its block may since have been reused).
#[derive(Clone, Debug, Default)]
pub struct ObjectSizes(HashMap<GlobalAddr, u32>);

impl ObjectSizes {
    /// The sizes of `objects`.
    pub fn new(objects: HashMap<GlobalAddr, u32>) -> Self {
        ObjectSizes(objects)
    }

    /// Bytes of data of the object at `meta`; `None`: not an object of the
    /// index, its data is not compared.
    pub fn of(&self, meta: GlobalAddr) -> Option<u32> {
        self.0.get(&meta).copied()
    }
}
