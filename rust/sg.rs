// SPDX-License-Identifier: GPL-2.0

//! Scatter-gather tables.  The RDMA core hands `dma_map` an empty
//! `struct sg_table` ([`SgTable`]); we build our own table
//! ([`OwnedSgTable`], kept by value in the registration), fill it with the
//! coalesced DMA segments and lend the core a copy of its header.  The core
//! may adjust the entries in place (its first/last trims, restored before it
//! is done) but never frees them: depending on the core, a registration
//! ends with `dma_unmap`, or, after an invalidation with
//! `PEER_MEM_INVALIDATE_UNMAPS`, with `release` alone, the core having only
//! cleared its copy.  We free our table exactly once, when the registration
//! drops it.  Also the DMA device the core maps for.

use core::ptr::NonNull;

use kernel::prelude::*;

use crate::bindings::{device, glue, sg_table};
use crate::logic::coalesce::Segment;
use crate::nvidia::PciDev;
use crate::stats::STATS;

/// The core's `struct sg_table` of one registration, as `dma_map` gets it.
///
/// # Invariants
///
/// `ptr` is the core's table for the registration being served, valid for
/// the duration of the callback that received it.
pub(crate) struct SgTable {
    ptr: NonNull<sg_table>,
}

impl SgTable {
    /// # Safety
    ///
    /// `ptr` must be the core's table, valid while the value is used.
    pub(crate) unsafe fn new(ptr: NonNull<sg_table>) -> Self {
        SgTable { ptr }
    }
}

/// An SG table we allocated and own.
///
/// # Invariants
///
/// `table` was set up by `sg_alloc_table` with at least one entry and is
/// freed exactly once, when the value is dropped.
pub(crate) struct OwnedSgTable {
    table: sg_table,
}

impl OwnedSgTable {
    /// A table with one entry per item of `segments`, filled with them.  The
    /// segments are walked twice (count, then fill), so the caller's source
    /// must not change in between (it is read under the registration lock).
    pub(crate) fn new(segments: impl Iterator<Item = Segment> + Clone) -> Result<(Self, u32)> {
        let n = u32::try_from(segments.clone().count()).map_err(|_| EINVAL)?;
        if n == 0 {
            return Err(EINVAL);
        }
        let mut table = sg_table::default();
        // sg_alloc_table chains page-sized chunks (no high-order allocation)
        // and leaves nothing allocated on failure.
        // SAFETY: `table` is a zeroed, kernel-sized table (checked in bindings.rs).
        kernel::error::to_result(unsafe { glue::peermem_sg_alloc(&mut table, n) })?;
        // INVARIANT: set up just above, with `n > 0` entries.
        let mut owned = OwnedSgTable { table };
        STATS.sg_table_allocated();
        // SAFETY: the table has `n` entries.
        let mut sg = unsafe { glue::peermem_sg_first(&mut owned.table) };
        for seg in segments {
            if sg.is_null() {
                break;
            }
            // SAFETY: `sg` is one of the table's `n` entries (`segments`
            // yields `n` items, the walk stops at the last entry).
            unsafe {
                glue::peermem_sg_set_dma(sg, seg.addr, seg.len);
                sg = glue::peermem_sg_next(sg);
            }
        }
        Ok((owned, n))
    }

    /// Lends the core a copy of the header (first entry, counts): the core
    /// sees our entries; we keep ownership.
    pub(crate) fn lend(&self, core: &mut SgTable) {
        // SAFETY: `core.ptr` is the core's table, valid during the callback
        // (SgTable invariant); `self.table` is a set-up table.
        unsafe { glue::peermem_sg_lend(core.ptr.as_ptr(), &self.table) };
    }
}

impl Drop for OwnedSgTable {
    fn drop(&mut self) {
        // SAFETY: set up by sg_alloc_table and freed only here (type
        // invariant).
        unsafe { glue::peermem_sg_free(&mut self.table) };
        STATS.sg_table_freed();
    }
}

/// The device the RDMA core maps for (`ib_device->dma_device`).
///
/// # Invariants
///
/// `ptr` is a live `struct device` for the duration of the callback.
pub(crate) struct DmaDevice {
    ptr: NonNull<device>,
}

impl DmaDevice {
    /// # Safety
    ///
    /// `ptr` must be a live device while the value is used.
    pub(crate) unsafe fn new(ptr: NonNull<device>) -> Self {
        DmaDevice { ptr }
    }

    /// The PCI device, or `None` if the DMA device is not a PCI device.
    pub(crate) fn pci(&self) -> Option<PciDev> {
        // SAFETY: the device is live (type invariant).
        let pdev = unsafe { glue::peermem_dev_to_pci(self.ptr.as_ptr()) };
        // SAFETY: a non-null result is the PCI device containing our live
        // device, alive as long as it is (the HCA outlives its MRs).
        NonNull::new(pdev).map(|p| unsafe { PciDev::new(p) })
    }

    /// The largest DMA segment the device takes.
    pub(crate) fn max_segment(&self) -> u64 {
        // SAFETY: the device is live (type invariant).
        unsafe { glue::peermem_dma_max_seg_size(self.ptr.as_ptr()) }
    }
}
