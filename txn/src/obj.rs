//! Handles on transactional objects (TXObjs).
//!
//! A TXObj is a 16-byte meta `[lock word][data pointer]` in DM; the data
//! lives in a separate block that every commit replaces (copy-on-write), so
//! that installing a new version is one idempotent CAS on the pointer.

use std::marker::PhantomData;

use bytemuck::Pod;
use fabric::GlobalAddr;

/// Bytes of a TXObj meta: the lock word and the data pointer.
pub const META_BYTES: u64 = 16;
/// Offset of the data pointer inside the meta.
pub const DPTR_OFFSET: u64 = 8;

/// An untyped TXObj: its meta address and the size of its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawObj {
    /// Address of the meta (16-byte aligned).
    pub meta: GlobalAddr,
    /// Bytes of data.
    pub len: u32,
}

impl RawObj {
    /// The lock word's address.
    pub fn lock_addr(self) -> GlobalAddr {
        self.meta
    }

    /// The data pointer's address.
    pub fn dptr_addr(self) -> GlobalAddr {
        self.meta.add(DPTR_OFFSET)
    }
}

/// A typed TXObj handle: plain data that fits in DM as bytes. Copy it
/// freely; store `meta().raw()` in DM to refer to it.
pub struct TxObj<T> {
    raw: RawObj,
    _data: PhantomData<fn() -> T>,
}

impl<T: Pod> TxObj<T> {
    /// The handle of the TXObj whose meta is at `meta`.
    pub fn at(meta: GlobalAddr) -> Self {
        TxObj {
            raw: RawObj {
                meta,
                len: std::mem::size_of::<T>() as u32,
            },
            _data: PhantomData,
        }
    }

    /// The meta address.
    pub fn meta(self) -> GlobalAddr {
        self.raw.meta
    }

    /// The untyped handle.
    pub fn raw(self) -> RawObj {
        self.raw
    }
}

impl<T> Clone for TxObj<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TxObj<T> {}

impl<T> PartialEq for TxObj<T> {
    fn eq(&self, o: &Self) -> bool {
        self.raw == o.raw
    }
}

impl<T> Eq for TxObj<T> {}

impl<T> std::fmt::Debug for TxObj<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TxObj({:?}, {} B)", self.raw.meta, self.raw.len)
    }
}
