// SPDX-License-Identifier: GPL-2.0

//! The driver's entry points ([`NvidiaP2p`]): pin, unpin, DMA-map and
//! unmap, each called through the address the module loader resolved.

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use kernel::prelude::*;

use crate::bindings::{
    glue, nvidia_p2p_dma_mapping, nvidia_p2p_page_table, pci_dev, NVIDIA_P2P_FLAGS_DEFAULT,
};
use crate::logic::range::GpuRange;
use crate::pin_fence::InFence;

use super::{Armed, DmaMapping, FreeCallback, MapArgs, PageTable, PciDev, UnmapArgs};

/// `-ENOTSUPP` (524): the driver's "not supported here" (persistent pins on
/// MIG, confidential computing, vGPU; force-BAR1 tables at map time).  A
/// kernel-internal errno: userspace would show "Unknown error 524".
const ENOTSUPP: i32 = 524;

/// Whether a driver error is `-ENOTSUPP`.
pub(crate) fn is_enotsupp(e: Error) -> bool {
    e.to_errno() == -ENOTSUPP
}

/// Why the NVIDIA driver cannot be used.
pub(crate) enum Missing {
    /// A required entry point is exported by no loaded module.
    Symbol(&'static str),
}

/// The driver's entry points.
///
/// # Invariants
///
/// Each function pointer is the address of the exported function of that
/// name, resolved by the module loader when we were loaded (a weak
/// reference, see rust/glue.c); the loader holds a reference on the
/// exporting module until we are unloaded.
pub(crate) struct NvidiaP2p {
    get_pages: unsafe extern "C" fn(
        u64,
        u32,
        u64,
        u64,
        *mut *mut nvidia_p2p_page_table,
        Option<FreeCallback>,
        *mut c_void,
    ) -> kernel::ffi::c_int,
    put_pages:
        unsafe extern "C" fn(u64, u32, u64, *mut nvidia_p2p_page_table) -> kernel::ffi::c_int,
    persistent: Option<Persistent>,
    dma_map_pages: unsafe extern "C" fn(
        *mut pci_dev,
        *mut nvidia_p2p_page_table,
        *mut *mut nvidia_p2p_dma_mapping,
    ) -> kernel::ffi::c_int,
    dma_unmap_pages: unsafe extern "C" fn(
        *mut pci_dev,
        *mut nvidia_p2p_page_table,
        *mut nvidia_p2p_dma_mapping,
    ) -> kernel::ffi::c_int,
}

struct Persistent {
    get: unsafe extern "C" fn(u64, u64, *mut *mut nvidia_p2p_page_table, u32) -> kernel::ffi::c_int,
    put: unsafe extern "C" fn(u64, *mut nvidia_p2p_page_table, u32) -> kernel::ffi::c_int,
}

impl NvidiaP2p {
    /// The API, or the first required entry point no loaded module exports.
    /// Weak references resolve plain and GPL-only exports alike (older
    /// drivers export plainly, which `symbol_get` refuses since Linux 6.6).
    /// The persistent pair is optional (driver 535 and later).
    pub(crate) fn find() -> core::result::Result<Self, Missing> {
        let mut api = glue::peermem_nvidia_api::default();
        // SAFETY: `api` is a valid out pointer; the glue only stores the
        // loader-resolved addresses (or NULL) into it.
        unsafe { glue::peermem_nvidia_api_get(&mut api) };
        let missing = |name| Missing::Symbol(name);
        let persistent = match (api.get_pages_persistent, api.put_pages_persistent) {
            (Some(get), Some(put)) => Some(Persistent { get, put }),
            _ => None,
        };
        // INVARIANT: the addresses come from the loader's resolution.
        Ok(NvidiaP2p {
            get_pages: api.get_pages.ok_or(missing("nvidia_p2p_get_pages"))?,
            put_pages: api.put_pages.ok_or(missing("nvidia_p2p_put_pages"))?,
            dma_map_pages: api
                .dma_map_pages
                .ok_or(missing("nvidia_p2p_dma_map_pages"))?,
            dma_unmap_pages: api
                .dma_unmap_pages
                .ok_or(missing("nvidia_p2p_dma_unmap_pages"))?,
            persistent,
        })
    }

    /// Whether the driver has the persistent API (driver 535 and later).
    pub(crate) fn has_persistent(&self) -> bool {
        self.persistent.is_some()
    }

    /// Pins `range` of the calling process's GPU address space with the
    /// persistent API: no free callback, the memory outlives cudaFree until
    /// we unpin.
    pub(crate) fn pin_persistent(&self, range: &GpuRange) -> Result<PageTable> {
        let Some(p) = &self.persistent else {
            return Err(crate::compat::eopnotsupp());
        };
        let mut table: *mut nvidia_p2p_page_table = ptr::null_mut();
        // SAFETY: `range` is aligned and non-empty (GpuRange invariant),
        // `table` is an out pointer, the flags are the only ones allowed.
        let rc = unsafe {
            (p.get)(
                range.start(),
                range.len(),
                &mut table,
                NVIDIA_P2P_FLAGS_DEFAULT,
            )
        };
        kernel::error::to_result(rc)?;
        PageTable::new(table, range, None)
    }

    /// Pins `range` of the calling process's GPU address space, revocably:
    /// the driver calls `armed`'s callback with its id if the memory is
    /// freed while pinned.  On failure, whether the driver may have kept the
    /// callback (`true` only for a success without a table, a driver bug).
    pub(crate) fn pin_revocable(
        &self,
        range: &GpuRange,
        armed: Armed,
    ) -> core::result::Result<PageTable, (Error, bool)> {
        let mut table: *mut nvidia_p2p_page_table = ptr::null_mut();
        // `data` is an id the callback only compares (rust/nvidia/registry.rs):
        // it needs to stay valid for nothing.  The callback is module code,
        // kept loaded while the pin may call back (the registry entry's
        // module reference).
        // SAFETY: `range` is aligned and non-empty (GpuRange invariant),
        // `table` is an out pointer, the callback outlives the pin (above).
        let rc = unsafe {
            (self.get_pages)(
                0,
                0,
                range.start(),
                range.len(),
                &mut table,
                Some(armed.f),
                armed.id.data(),
            )
        };
        // The driver keeps no callback of a pin it failed to make
        // (nvidia_p2p_get_pages registers it only on success).
        kernel::error::to_result(rc).map_err(|e| (e, false))?;
        PageTable::new(table, range, Some(current_process())).map_err(|e| (e, true))
    }

    /// Releases a pin (put_pages).  For a revocable pin, the driver looks the
    /// pin up among the calling process's P2P objects: from any other
    /// process (or a kernel thread) its put would find nothing, return 0,
    /// and leave the pin and its callback armed, so the table is given back
    /// untouched ([`Unpin::Foreign`]).  A revocable put answered 0 proves
    /// less than a release: RM answers 0 for "released" and for "not found
    /// among this process's P2P objects" alike (nv-p2p.c
    /// `nv_p2p_put_pages`); see rust/nvidia/probe.rs.  A callback that raced
    /// with the put has run already (the put waits for the driver's lock,
    /// which the driver holds around the callback).
    pub(crate) fn unpin(&self, table: PageTable) -> core::result::Result<(), Unpin> {
        let rc = match (table.owner, &self.persistent) {
            (Some(owner), _) if owner != current_process() || owner == 0 => {
                return Err(Unpin::Foreign(table))
            }
            // SAFETY: `table` is a revocable pin we own (type invariant),
            // released once here by value, by the process that pinned it.
            (Some(_), _) => unsafe { (self.put_pages)(0, 0, table.va, table.ptr.as_ptr()) },
            // SAFETY: a persistent pin we own, released once here by value;
            // the flags of the persistent put must be 0.
            (None, Some(p)) => unsafe { (p.put)(table.va, table.ptr.as_ptr(), 0) },
            (None, None) => return Err(Unpin::Failed(EINVAL, Some(table))),
        };
        kernel::error::to_result(rc).map_err(|e| {
            // A persistent pin is released only by our put: it is still
            // ours to retry.  Whether a revocable one is still armed is
            // unknown: the table is not used again.
            if table.owner.is_none() {
                Unpin::Failed(e, Some(table))
            } else {
                table.forget();
                Unpin::Failed(e, None)
            }
        })
    }

    /// DMA-maps a pinned page table for the peer PCI device `peer`.
    ///
    /// The map of a revocable pin's table is recorded in the client's fence
    /// (`fence`; `EINVAL` without it), so that its free callback can mark
    /// it late, and a pin of ours handed the table's address should the
    /// driver free it during the call is redone (rust/logic/fence.rs).
    ///
    /// Accepted race: this is the one window the API gives a revocable pin
    /// no way to close.  The driver reads the table before it takes its
    /// lock, and a concurrent cudaFree may free it meanwhile; the free
    /// callback must not wait for this call (it needs the lock the driver
    /// holds around the callback).  Whatever this returns after such a free
    /// is the driver's; the caller checks for the callback afterwards.
    pub(crate) fn dma_map(
        &self,
        peer: PciDev,
        table: MapArgs,
        fence: Option<&InFence<'_>>,
    ) -> Result<DmaMapping> {
        if table.revocable && fence.is_none() {
            return Err(EINVAL);
        }
        let mut mapping: *mut nvidia_p2p_dma_mapping = ptr::null_mut();
        // `table` was a live pin when taken from `Pins`; the driver keeps a
        // persistent pin's table valid until our put, and a revocable one's
        // until its free callback returned, which may happen during this
        // call: the accepted race documented above.  The fence (checked)
        // keeps that race from reaching a pin of ours that is used.
        // SAFETY: `peer` is a live PCI device (PciDev invariant), `mapping`
        // an out pointer, `table` as above.
        let rc = unsafe { (self.dma_map_pages)(peer.0.as_ptr(), table.ptr.as_ptr(), &mut mapping) };
        kernel::error::to_result(rc)?;
        let ptr = NonNull::new(mapping).ok_or(EIO)?;
        // INVARIANT: the driver returned a mapping of `table` for `peer`.
        Ok(DmaMapping { ptr, peer })
    }

    /// Releases a persistent pin's DMA mapping.
    pub(crate) fn dma_unmap(&self, args: UnmapArgs) -> Result {
        let UnmapArgs { table, mapping } = args;
        // A persistent pin has no callback, and we put it only after this.
        // SAFETY: `mapping` is a mapping of `table` for `mapping.peer` that
        // we own (type invariants), released once here by value.
        let rc = unsafe {
            (self.dma_unmap_pages)(
                mapping.peer.0.as_ptr(),
                table.as_ptr(),
                mapping.ptr.as_ptr(),
            )
        };
        kernel::error::to_result(rc)
    }
}

/// Why a pin was not released.
pub(crate) enum Unpin {
    /// Asked for by another process than the one that pinned: not released;
    /// the pin and its free callback stay armed.
    Foreign(PageTable),
    /// The driver failed the put (-ENOMEM, an invalid state).  A persistent
    /// pin is given back (still pinned, ours to retry); whether a revocable
    /// one is still armed is unknown (`None`).
    Failed(Error, Option<PageTable>),
}

/// The process a call runs for, as the driver's per-process lookup sees it
/// (0 for a kernel thread, which has no GPU address space).
pub(super) fn current_process() -> u64 {
    // SAFETY: reads `current`; no preconditions.
    unsafe { glue::peermem_current_process() }
}
