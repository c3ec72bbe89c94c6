// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table the RDMA core hands to `dma_map`: we allocate
//! its entries and fill them with coalesced DMA segments; `dma_unmap` frees
//! them.  Also the DMA device the core maps for.

use core::ptr::NonNull;

use kernel::prelude::*;

use crate::bindings::{device, glue, sg_table};
use crate::logic::coalesce::Segment;
use crate::nvidia::PciDev;

/// The core's `struct sg_table` of one registration.
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

    /// Allocates `n` entries and fills them with `segments` (which yields
    /// `n` items).  On failure the table is left as it was.
    pub(crate) fn fill(&mut self, segments: impl Iterator<Item = Segment>, n: usize) -> Result {
        let n = u32::try_from(n).map_err(|_| EINVAL)?;
        if n == 0 {
            return Err(EINVAL);
        }
        // SAFETY: the table is valid (type invariant) and has no entries
        // yet (the core hands it to dma_map empty).
        kernel::error::to_result(unsafe { glue::peermem_sg_alloc(self.ptr.as_ptr(), n) })?;
        // SAFETY: the table now has `n` entries.
        let mut sg = unsafe { glue::peermem_sg_first(self.ptr.as_ptr()) };
        for seg in segments {
            if sg.is_null() {
                break;
            }
            // SAFETY: `sg` is an entry of the table just allocated.
            unsafe {
                glue::peermem_sg_set_dma(sg, seg.addr, seg.len);
                sg = glue::peermem_sg_next(sg);
            }
        }
        Ok(())
    }

    /// Frees the entries allocated by [`fill`](Self::fill).
    pub(crate) fn free(&mut self) {
        // SAFETY: the table is valid and its entries were allocated by
        // `fill` (the caller tracks that); sg_free_table resets it.
        unsafe { glue::peermem_sg_free(self.ptr.as_ptr()) };
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
