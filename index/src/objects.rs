//! The bytes of each rtx object an index is made of: what a checker that
//! compares replicas object by object compares.

use std::collections::HashMap;

use fabric::GlobalAddr;

/// Bytes of data of an index's objects, by meta address.
#[derive(Clone, Debug)]
pub enum ObjectSizes {
    /// Every object of a B+tree is a node.
    BTree,
    /// A hash table's directory and subtables
    /// ([`crate::hash::HashTable::objects`]); any other meta is none of the
    /// table's (an aborted split's, whose block may since have been reused).
    Hash(HashMap<GlobalAddr, u32>),
}

impl ObjectSizes {
    /// Bytes of data of the object at `meta`; `None`: not an object of the
    /// index, its data is not compared.
    pub fn of(&self, meta: GlobalAddr) -> Option<u32> {
        match self {
            ObjectSizes::BTree => Some(crate::btree::node::NODE_BYTES as u32),
            ObjectSizes::Hash(objects) => objects.get(&meta).copied(),
        }
    }
}
