// SPDX-License-Identifier: GPL-2.0

//! DMA mappings of pins for a peer PCI device ([`DmaMapping`]), and what
//! the map and unmap calls take and give back.

use core::ptr::NonNull;

use crate::bindings::{nvidia_p2p_dma_mapping, nvidia_p2p_page_table, pci_dev};

/// The page table of a pin, for `dma_map_pages` (see [`NvidiaP2p::dma_map`]),
/// and whether it is revocable.
///
/// # Invariants
///
/// `ptr` is the table of a pin kept in a [`Pins`] when this was made (by
/// [`Pins::map_args`]); `revocable` says whether that pin is revocable, and
/// `data` is its callback `data` (0 for a persistent pin).
///
/// [`Pins`]: super::Pins
/// [`Pins::map_args`]: super::Pins::map_args
/// [`NvidiaP2p::dma_map`]: super::NvidiaP2p::dma_map
pub(crate) struct MapArgs {
    pub(super) ptr: NonNull<nvidia_p2p_page_table>,
    pub(super) revocable: bool,
    pub(super) data: usize,
}

/// What `dma_unmap_pages` needs: the mapping and its page table.
///
/// # Invariants
///
/// `mapping` is a mapping of `table`, taken out of a [`Pins`] by
/// [`Pins::take_unmap`], which keeps the free callback from completing (so
/// both valid) until given the [`Unmapped`] of this unmap.
///
/// [`Pins`]: super::Pins
/// [`Pins::take_unmap`]: super::Pins::take_unmap
pub(crate) struct UnmapArgs {
    pub(super) table: NonNull<nvidia_p2p_page_table>,
    pub(super) mapping: DmaMapping,
}

// SAFETY: addresses passed back to the driver, not tied to a thread.
unsafe impl Send for UnmapArgs {}

/// Where the return of an unmap taken by [`Pins::take_unmap`] is reported:
/// the registration that owns that [`Pins`].
pub(crate) trait UnmapSink {
    /// The unmap returned: give `returned` to the [`Pins`]
    /// ([`Pins::unmap_done`]) and wake a free callback waiting for it.
    fn unmap_returned(&self, returned: UnmapReturned);
}

/// The report of [`Unmapped`] to its [`UnmapSink`]: made only when an
/// `Unmapped` is dropped.  `table` names the pin (its address).
pub(crate) struct UnmapReturned {
    pub(super) table: usize,
}

/// That the `dma_unmap_pages` of an [`UnmapArgs`] taken by
/// [`Pins::take_unmap`] returned: made only by [`NvidiaP2p::dma_unmap`].
///
/// # Invariants
///
/// `table` names the pin whose unmap returned, and `sink` is the
/// registration whose [`Pins`] took that unmap out.  However the value
/// ends -- [`Unmapped::report`] or any other drop, an early return or an
/// unwinding path included -- `Drop` reports it to `sink` exactly once,
/// which ends the unmap in flight and lets a free callback waiting for it
/// (under the driver's lock) proceed.  Only `mem::forget` could lose it,
/// and nothing forgets it.
///
/// [`NvidiaP2p::dma_unmap`]: super::NvidiaP2p::dma_unmap
#[must_use = "report it (Unmapped::report) once the unmap's result is read"]
pub(crate) struct Unmapped<'a> {
    pub(super) table: usize,
    pub(super) sink: &'a dyn UnmapSink,
}

impl Unmapped<'_> {
    /// Reports the return to the registration (what dropping does).
    pub(crate) fn report(self) {
        drop(self);
    }
}

impl Drop for Unmapped<'_> {
    fn drop(&mut self) {
        self.sink
            .unmap_returned(UnmapReturned { table: self.table });
    }
}

/// A PCI device the HCA's DMA goes through.
///
/// # Invariants
///
/// Points to a live `struct pci_dev` (the RDMA core's DMA device, alive
/// while the registration that uses it exists).
#[derive(Clone, Copy)]
pub(crate) struct PciDev(pub(super) NonNull<pci_dev>);

// SAFETY: only an address, passed to the driver.
unsafe impl Send for PciDev {}

impl PciDev {
    /// # Safety
    ///
    /// `pdev` must be a live PCI device for as long as the value is used.
    pub(crate) unsafe fn new(pdev: NonNull<pci_dev>) -> Self {
        PciDev(pdev)
    }
}

/// A DMA mapping of a page table for one peer device.
///
/// # Invariants
///
/// `ptr` is a mapping returned by `nvidia_p2p_dma_map_pages` for `peer`, not
/// yet released; dereferenced only while kept in a [`Pins`].
pub(crate) struct DmaMapping {
    pub(super) ptr: NonNull<nvidia_p2p_dma_mapping>,
    pub(super) peer: PciDev,
}

// SAFETY: a DMA mapping is driver memory not tied to a thread.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    /// The driver freed the memory and with it this mapping.
    pub(crate) fn forget(self) {}
}
