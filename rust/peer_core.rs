// SPDX-License-Identifier: GPL-2.0

//! The RDMA core's peer-memory interface (ib_uverbs on MOFED/DOCA-OFED and
//! NVIDIA kernels, ib_core on old MOFED), found by name at load time:
//! registering our client table ([`ClientRegistration`]), asking the core
//! to fence DMA on a registration ([`Invalidator`]).  Other peer-memory
//! clients are not looked for: which one a host loads is the packaging's
//! business (Conflicts, modprobe.d) and `peermem-probe doctor` reports them.

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use kernel::prelude::*;

use crate::bindings::{glue, invalidate_peer_memory, peer_memory_client, peer_memory_client_ex};

/// The resolved register/unregister pair.
///
/// # Invariants
///
/// The function pointers are the exported functions of those names, which
/// the module loader resolved (weakly, by name) when this module was loaded;
/// it holds a reference on the exporting module until we are unloaded.
pub(crate) struct PeerCore {
    register:
        unsafe extern "C" fn(*const peer_memory_client, *mut invalidate_peer_memory) -> *mut c_void,
    unregister: unsafe extern "C" fn(*mut c_void),
}

impl PeerCore {
    /// The interface, or `None` if no loaded module exports it (this RDMA
    /// stack has none, or its module was not loaded before us).
    pub(crate) fn find() -> Option<Self> {
        let mut api = glue::peermem_core_api::default();
        // The glue stores the resolved addresses of its two weak references,
        // typed as in peer-mem-abi.h, or null.
        // SAFETY: `api` is a valid, writable struct for the call.
        unsafe { glue::peermem_core_api_get(&mut api) };
        Some(PeerCore {
            register: api.register_client?,
            unregister: api.unregister_client?,
        })
    }
}

/// Our client table, registered with the core.
///
/// # Invariants
///
/// `handle` is the core's handle for `table`, which lives in a box at a
/// fixed address until the value is dropped; dropping unregisters first.
pub(crate) struct ClientRegistration {
    core: PeerCore,
    handle: NonNull<c_void>,
    invalidate: Option<Invalidator>,
    _table: KBox<peer_memory_client_ex>,
}

// SAFETY: the handle and table are used only through the core's API, which
// may be called from any thread.
unsafe impl Send for ClientRegistration {}
// SAFETY: no interior mutability on our side.
unsafe impl Sync for ClientRegistration {}

impl ClientRegistration {
    /// Registers `table`.  With `invalidation`, asks the core for its
    /// invalidate function (an invalidation-capable client); the table must
    /// then be an extended one.
    pub(crate) fn register(
        core: PeerCore,
        table: KBox<peer_memory_client_ex>,
        invalidation: bool,
    ) -> core::result::Result<Self, Refused> {
        let mut invalidate: invalidate_peer_memory = None;
        let slot = if invalidation {
            &mut invalidate as *mut invalidate_peer_memory
        } else {
            ptr::null_mut()
        };
        // SAFETY: `table` is complete, boxed (fixed address) and kept until we
        // unregister; `slot` is null or a valid out pointer.
        let handle = unsafe { (core.register)(&table.client, slot) };
        let handle = NonNull::new(handle).ok_or(Refused::Null)?;
        let invalidate = match (invalidation, invalidate) {
            (true, Some(f)) => Some(Invalidator { f, handle }),
            (true, None) => {
                // SAFETY: `handle` was just returned by register.
                unsafe { (core.unregister)(handle.as_ptr()) };
                return Err(Refused::NoInvalidation);
            }
            (false, _) => None,
        };
        Ok(ClientRegistration {
            core,
            handle,
            invalidate,
            _table: table,
        })
    }

    /// The core's invalidate entry point, for an invalidation client.
    pub(crate) fn invalidator(&self) -> Option<Invalidator> {
        self.invalidate
    }

    /// Unregisters: returns once the core released every registration of
    /// ours and can no longer call the client.
    pub(crate) fn unregister(self) -> Unregistered {
        drop(self);
        Unregistered(())
    }
}

/// Why the core did not register the client.
pub(crate) enum Refused {
    /// Its register returned NULL, which carries no reason.  The real
    /// cores return NULL when a mandatory entry point is missing (never in
    /// our table), when allocating their client record fails, and, on
    /// cores that create `/sys/kernel/mm/memory_peers`, when a client of
    /// the name is registered (peer-memory-core.md).
    Null,
    /// An invalidation client, but the core gave no invalidate function.
    NoInvalidation,
}

/// Proof that the client is unregistered: the core calls it no more.
pub(crate) struct Unregistered(());

impl Drop for ClientRegistration {
    fn drop(&mut self) {
        // SAFETY: `handle` is our registration (type invariant), released
        // once; the core returns only when no registration of ours is left.
        unsafe { (self.core.unregister)(self.handle.as_ptr()) };
    }
}

/// The core's invalidate function with our registration handle.
///
/// # Invariants
///
/// `f` and `handle` come from one successful registration, which outlives
/// every registration (MR) that can be invalidated.
#[derive(Clone, Copy)]
pub(crate) struct Invalidator {
    f: unsafe extern "C" fn(*mut c_void, u64) -> kernel::ffi::c_int,
    handle: NonNull<c_void>,
}

// SAFETY: the core's invalidate may be called from any thread.
unsafe impl Send for Invalidator {}
// SAFETY: plain data.
unsafe impl Sync for Invalidator {}

impl Invalidator {
    /// Asks the core to stop all DMA to the registration `core_context`; on
    /// return no DMA is active.  May re-enter our dma_unmap/put_pages (cores
    /// that ignore `PEER_MEM_INVALIDATE_UNMAPS`).
    pub(crate) fn invalidate(&self, core_context: u64) -> Result {
        // Any `core_context` is accepted: the core looks it up and answers an
        // unknown or stale one with 0 (peer-memory-core.md, "Invalidation").
        // SAFETY: by the type invariant `f` and `handle` are valid.
        kernel::error::to_result(unsafe { (self.f)(self.handle.as_ptr(), core_context) })
    }
}
