// SPDX-License-Identifier: GPL-2.0

//! The client's revocable pins by id ([`Registry`]), and the driver's free
//! callback.
//!
//! A revocable pin gives the driver an id ([`PinId`]) as its free
//! callback's `data`, never a pointer.  The callback looks the id up under
//! the registry's lock and does nothing for an id it does not find, as the
//! RDMA core does with the ids it hands its own clients (DOCA-OFED
//! `peer_mem.c`, `ib_invalidate_peer_memory`).  Ids come from a counter and
//! are never given twice, so a callback can only ever reach the entry of
//! its own pin.
//!
//! The map is the kernel crate's red-black tree under a mutex: O(log n) in
//! the live pins, its node allocated before the lock is taken.  (The
//! crate's XArray, in 7.2 and 7.3 alike, makes objtool warn on the Debian
//! kernels: its drop, instantiated for our type, gets a symbol name too long
//! for the `__pfx_` prefix symbol.)
//!
//! An entry holds its registration, and with it a module reference, from
//! before the pin call until the callback took it out or the pin's release
//! was proven: while a pin may call back, `rmmod` is refused.  A wrong
//! "released" verdict can at worst miss a fence (the callback finds
//! nothing); it never touches freed memory.

use core::ffi::c_void;
use core::ptr;

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rbtree::{RBTree, RBTreeNode};
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::{Arc, Mutex};
use kernel::workqueue::{HasWork, WorkItem};

use super::FreeCallback;
use crate::glue;

/// The id of a revocable pin: its free callback's `data`, an integer the
/// callback never dereferences.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct PinId(usize);

impl PinId {
    /// The callback `data` the driver is given.
    pub(super) fn data(self) -> *mut c_void {
        ptr::without_provenance_mut(self.0)
    }
}

/// What a revocable pin's free callback revokes (the per-MR type).  The
/// callback lets go of the registry's reference from the module's work
/// queue ([`WorkItem`]): it may be the last module reference.
pub(crate) trait Revocable:
    WorkItem<Pointer = Arc<Self>> + HasWork<Self> + Send + Sync + Sized + 'static
{
    /// The free callback of the pin armed with `id`: takes its registration
    /// out of the registry and revokes it; `None` for an id no registration
    /// has (nothing to do).
    fn revoke(id: PinId) -> Option<Arc<Self>>;
}

/// A free callback and its `data`, for one revocable pin call (made by
/// [`Registry::arm`] or [`Armed::probe`]).
pub(crate) struct Armed {
    pub(super) f: FreeCallback,
    pub(super) id: PinId,
}

impl Armed {
    /// For a probe's pin, which revokes nothing: its callback does nothing.
    pub(crate) fn probe() -> Self {
        Armed {
            f: probe_callback,
            id: PinId(0),
        }
    }
}

/// The revocable pins of a client that may still call back, by id.
///
/// # Invariants
///
/// `next` is above every id ever given out (0 is never given).  An entry
/// is stored by [`Registry::arm`] before its pin call and taken out only by
/// [`Registry::take`].
#[pin_data]
pub(crate) struct Registry<R: Revocable> {
    #[pin]
    pins: Mutex<RBTree<usize, Arc<R>>>,
    next: Atomic<usize>,
}

impl<R: Revocable> Registry<R> {
    /// No pin.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Registry {
            pins <- new_mutex!(RBTree::new(), "peermem_rs::Registry::pins"),
            next: Atomic::new(1),
        })
    }

    /// The id of a registration about to be made.
    pub(crate) fn new_id(&self) -> PinId {
        PinId(self.next.fetch_add(1, Relaxed))
    }

    /// Stores `reg` under `id` (from [`Registry::new_id`]) before its pin
    /// call, so that a callback at any time finds it: the callback to give
    /// the driver for that one pin call.
    pub(crate) fn arm(&self, id: PinId, reg: Arc<R>) -> Result<Armed> {
        let node = RBTreeNode::new(id.0, reg, GFP_KERNEL)?;
        let old = self.pins.lock().insert(node);
        // An id is given once: nothing was there.
        drop(old);
        Ok(Armed {
            f: free_callback::<R>,
            id,
        })
    }

    /// Takes `id`'s registration out: its callback ran, or it will not run
    /// (the pin call failed, or the pin was released).
    pub(crate) fn take(&self, id: PinId) -> Option<Arc<R>> {
        let reg = self.pins.lock().remove(&id.0);
        reg
    }
}

/// The NVIDIA driver's free callback of `R`'s pins (cudaFree of pinned
/// memory).  `data` is a [`PinId`]: only compared, never dereferenced.
extern "C" fn free_callback<R: Revocable>(data: *mut c_void) {
    let Some(reg) = R::revoke(PinId(data.addr())) else {
        return;
    };
    // The registry's reference is let go last, from the module's work
    // queue: it may be the last module reference, and module unload waits
    // for that queue, so no code of ours runs after the module is gone.
    // The work item is embedded in the registration: queueing it
    // allocates nothing.  It is queued at most once (the entry was taken
    // out above, once).  `defer` needs a live `DeferQueue` until the work
    // returned: the module owns it until its exit, which runs only once no
    // module reference is left.
    // SAFETY: the queue outlives the work: `reg` holds a module reference
    // until the work drops it (above).
    if let Err(reg) = unsafe { glue::defer(reg) } {
        // Queued already: not reached.  Leaked rather than dropped here.
        glue::warn_spurious_callback();
        core::mem::forget(reg);
    }
}

/// A probe pin's free callback: nothing to revoke.
extern "C" fn probe_callback(_data: *mut c_void) {}
