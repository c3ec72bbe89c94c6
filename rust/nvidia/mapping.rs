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
/// [`Pins::map_args`]); `revocable` says whether that pin is revocable.
///
/// [`Pins`]: super::Pins
/// [`Pins::map_args`]: super::Pins::map_args
/// [`NvidiaP2p::dma_map`]: super::NvidiaP2p::dma_map
pub(crate) struct MapArgs {
    pub(super) ptr: NonNull<nvidia_p2p_page_table>,
    pub(super) revocable: bool,
}

impl MapArgs {
    /// The table's address (see [`super::PageTable::addr`]).
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr().addr()
    }
}

/// What `dma_unmap_pages` needs: a persistent pin's mapping and its page
/// table (a revocable pin's mapping goes with its put: rust/logic/state.rs).
///
/// # Invariants
///
/// `mapping` is a mapping of `table`, a persistent pin, taken out of a
/// [`Pins`] by [`Pins::take_unmap`]: both stay valid until our put, which
/// the caller makes only after the unmap returned.
///
/// [`Pins`]: super::Pins
/// [`Pins::take_unmap`]: super::Pins::take_unmap
pub(crate) struct UnmapArgs {
    pub(super) table: NonNull<nvidia_p2p_page_table>,
    pub(super) mapping: DmaMapping,
}

// SAFETY: addresses passed back to the driver, not tied to a thread.
unsafe impl Send for UnmapArgs {}

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
