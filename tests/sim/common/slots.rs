// SPDX-License-Identifier: GPL-2.0

//! `Slots<T>`: a table of optional entries in which an entry keeps its index
//! for life, so indices serve as stable ids.  The kernel crate of 6.12 has
//! no `KVec::remove`; a freed slot is simply set to `None` and reused.

use kernel::prelude::*;

/// A table of entries addressed by stable indices.
pub(crate) struct Slots<T> {
    v: KVec<Option<T>>,
}

#[allow(dead_code)]
impl<T> Slots<T> {
    /// An empty table (no allocation).
    pub(crate) const fn new() -> Self {
        Self { v: KVec::new() }
    }

    /// Stores `t` in the first free slot and returns its index.
    pub(crate) fn insert(&mut self, t: T) -> Result<usize> {
        self.insert_or_return(t).map_err(|_| ENOMEM)
    }

    /// Stores `t` in the first free slot and returns its index, or hands
    /// `t` back when there is no room for it.
    pub(crate) fn insert_or_return(&mut self, t: T) -> core::result::Result<usize, T> {
        if let Some(i) = self.v.iter().position(|e| e.is_none()) {
            if let Some(slot) = self.v.get_mut(i) {
                *slot = Some(t);
                return Ok(i);
            }
        }
        if self.v.reserve(1, GFP_KERNEL).is_err() {
            return Err(t);
        }
        match self.v.push_within_capacity(Some(t)) {
            Ok(()) => Ok(self.v.len() - 1),
            // Reserved just above: not reached, but `t` goes back if it is.
            Err(e) => e.0.map_or(Ok(0), Err),
        }
    }

    /// Takes the entry at `i` out of the table.
    pub(crate) fn remove(&mut self, i: usize) -> Option<T> {
        self.v.get_mut(i)?.take()
    }

    /// The entry at `i`.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.v.get(i)?.as_ref()
    }

    /// The entry at `i`, mutable.
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.v.get_mut(i)?.as_mut()
    }

    /// The index of the first entry for which `f` holds.
    pub(crate) fn find(&self, mut f: impl FnMut(&T) -> bool) -> Option<usize> {
        self.v.iter().position(|e| e.as_ref().is_some_and(&mut f))
    }

    /// The entries with their indices.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.v
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((i, e.as_ref()?)))
    }

    /// The entries with their indices, mutable.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> {
        self.v
            .iter_mut()
            .enumerate()
            .filter_map(|(i, e)| Some((i, e.as_mut()?)))
    }

    /// How many entries the table holds.
    pub(crate) fn count(&self) -> usize {
        self.v.iter().filter(|e| e.is_some()).count()
    }

    /// Takes every entry out of the table and frees its storage (a table
    /// in a `static` is never dropped: module exit must call this).
    pub(crate) fn take_all(&mut self) -> KVec<Option<T>> {
        core::mem::replace(&mut self.v, KVec::new())
    }
}
