// SPDX-License-Identifier: GPL-2.0

//! The ABI objects the simulator hands to clients: page tables
//! (`struct nvidia_p2p_page_table` with its page array and GPU UUID) and DMA
//! mappings (`struct nvidia_p2p_dma_mapping` with its address array), each
//! in memory of its own so KASAN sees a client's out-of-bounds read (a v1
//! table is allocated with the 32-byte v1 size: reading `flags` is caught).
//! On release everything is poisoned; the arrays are freed, the two headers
//! go to the object cache (glue.c), which hands their address to the next
//! object of their kind at once, as kmalloc does, and keeps them
//! KASAN-poisoned until then: a client's stale read is a KASAN report on the
//! debug kernel, and a stale pointer may name a new object (`retired.rs`
//! judges its use).  This module
//! writes the raw memory: it is the crate's FFI boundary for the ABI
//! structures.

use core::mem::size_of;
use core::ptr::NonNull;
use kernel::prelude::*;

use crate::bindings::{
    nvidia_p2p_dma_mapping, nvidia_p2p_page, nvidia_p2p_page_table, pci_dev,
    NVIDIA_P2P_DMA_MAPPING_VERSION, NVIDIA_P2P_PAGE_SIZE_64KB, NVIDIA_P2P_PAGE_TABLE_V1_SIZE,
};
use crate::memory::GPU_PAGE;
use crate::sys::{BarMapping, ObjKind, RawBuf};
use crate::violation::Event;

/// The byte released objects are filled with.
const POISON: u8 = 0x6b;

/// The simulated GPU's UUID ("GPU-5eed0000-...").
const GPU_UUID: [u8; 16] = *b"\x5e\xed\0\0peermem-sim\0";

/// A page table handed to a client.
///
/// # Invariants
///
/// `table` holds an initialised `nvidia_p2p_page_table` (32 bytes for a
/// major-1 version, 40 otherwise) whose `pages` points into `ptrs`, each of
/// whose `entries` pointers points into `pages`; `gpu_uuid` points to
/// `uuid` (16 bytes) -- until `retire` is called.
pub(crate) struct PageTable {
    table: RawBuf,
    ptrs: RawBuf,
    pages: RawBuf,
    uuid: RawBuf,
}

impl PageTable {
    /// Builds a table of `version` for `n` GPU pages, page `i` at physical
    /// address `phys(i)`.
    pub(crate) fn new(version: u32, n: usize, phys: impl Fn(usize) -> Option<u64>) -> Result<Self> {
        let size = if version >> 16 == 1 {
            NVIDIA_P2P_PAGE_TABLE_V1_SIZE as usize
        } else {
            size_of::<nvidia_p2p_page_table>()
        };
        let table = RawBuf::object(ObjKind::PageTable, size)?;
        let ptrs = RawBuf::new(
            n.checked_mul(size_of::<*mut nvidia_p2p_page>())
                .ok_or(EINVAL)?,
        )?;
        let pages = RawBuf::new(n.checked_mul(size_of::<nvidia_p2p_page>()).ok_or(EINVAL)?)?;
        let uuid = RawBuf::new(GPU_UUID.len())?;
        let page_base = pages.as_ptr().cast::<nvidia_p2p_page>();
        let ptr_base = ptrs.as_ptr().cast::<*mut nvidia_p2p_page>();
        for i in 0..n {
            let pa = phys(i).ok_or(EINVAL)?;
            // SAFETY: `pages` and `ptrs` hold `n` elements each, suitably
            // aligned (kmalloc alignment); `i < n`.
            unsafe {
                let page = page_base.add(i);
                (*page).physical_address = pa;
                ptr_base.add(i).write(page);
            }
        }
        // SAFETY: `uuid` holds 16 bytes.
        unsafe { core::ptr::copy_nonoverlapping(GPU_UUID.as_ptr(), uuid.as_ptr(), GPU_UUID.len()) };
        let t = table.as_ptr().cast::<nvidia_p2p_page_table>();
        // SAFETY: `table` holds at least the 32 bytes up to `gpu_uuid`; `flags`
        // (offset 32) is written only in a 40-byte table, 0 from kzalloc.
        unsafe {
            core::ptr::addr_of_mut!((*t).version).write(version);
            core::ptr::addr_of_mut!((*t).page_size).write(NVIDIA_P2P_PAGE_SIZE_64KB);
            core::ptr::addr_of_mut!((*t).pages).write(ptr_base);
            core::ptr::addr_of_mut!((*t).entries).write(n as u32);
            core::ptr::addr_of_mut!((*t).gpu_uuid).write(uuid.as_ptr());
        }
        Ok(Self {
            table,
            ptrs,
            pages,
            uuid,
        })
    }

    /// The address given to the client.
    pub(crate) fn ptr(&self) -> *mut nvidia_p2p_page_table {
        self.table.as_ptr().cast()
    }

    /// Releases the table: everything is poisoned and freed (a client that
    /// kept a pointer into it reads freed memory: KASAN reports it).
    pub(crate) fn retire(mut self) {
        self.table.fill(POISON);
        self.ptrs.fill(POISON);
        self.pages.fill(POISON);
        self.uuid.fill(POISON);
    }
}

/// The real driver's reads of a page table in `nvidia_p2p_dma_map_pages`'
/// prologue (its page size and entry count), done through `table` even
/// when a cudaFree freed that table meanwhile: the driver's own use after
/// free, which KASAN reports on a KASAN kernel.
///
/// # Safety
///
/// `table` is the address of a page-table header this simulator handed
/// out, live or held in the object cache (its memory stays allocated).
#[inline(never)]
pub(crate) unsafe fn driver_reads_table(table: usize) -> (u32, u32) {
    let t = table as *const nvidia_p2p_page_table;
    // SAFETY: the caller's contract: `t` points to memory that stays
    // allocated (a live header, or one held in the object cache).
    unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!((*t).page_size)),
            core::ptr::read_volatile(core::ptr::addr_of!((*t).entries)),
        )
    }
}

/// The real driver's first read of a DMA mapping in
/// `nvidia_p2p_dma_unmap_pages` (its entry count), done also on a mapping
/// the driver freed (after its free callback, or with its pin at another
/// client's late put): a KASAN report on a KASAN kernel.
///
/// # Safety
///
/// `mapping` is the address of a mapping header this simulator handed
/// out, live or held in the object cache (its memory stays allocated).
#[inline(never)]
pub(crate) unsafe fn driver_reads_mapping(mapping: usize) -> u32 {
    let m = mapping as *const nvidia_p2p_dma_mapping;
    // SAFETY: the caller's contract: `m` points to memory that stays
    // allocated.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*m).entries)) }
}

/// A DMA mapping handed to a client.
///
/// # Invariants
///
/// `mapping` holds an initialised `nvidia_p2p_dma_mapping` whose
/// `dma_addresses` points into `addrs` -- until `retire` is called.  Each
/// address lies in one of `bars`, which stay mapped for the peer while the
/// mapping lives (released after the header is poisoned).
pub(crate) struct DmaMapping {
    mapping: RawBuf,
    addrs: RawBuf,
    bars: KVVec<BarMapping>,
}

impl DmaMapping {
    /// Maps `n` GPU pages, page `i` at bus address `phys(i)`, for `peer`:
    /// each run of contiguous pages is DMA-mapped as one range, as the
    /// real driver maps BAR pages (behind an IOMMU the peer gets IOVAs).
    pub(crate) fn new(
        n: usize,
        phys: impl Fn(usize) -> Option<u64>,
        peer: NonNull<pci_dev>,
    ) -> Result<Self> {
        let mapping = RawBuf::object(ObjKind::Mapping, size_of::<nvidia_p2p_dma_mapping>())?;
        let addrs = RawBuf::new(n.checked_mul(size_of::<u64>()).ok_or(EINVAL)?)?;
        let a = addrs.as_ptr().cast::<u64>();
        let mut bars = KVVec::new();
        let mut i = 0;
        let mut remapped = false;
        while i < n {
            let start = phys(i).ok_or(EINVAL)?;
            let mut pages = 1;
            while i + pages < n && phys(i + pages) == Some(start + pages as u64 * GPU_PAGE) {
                pages += 1;
            }
            let bar = BarMapping::new(peer, start, pages as u64 * GPU_PAGE)?;
            remapped |= bar.dma() != start;
            for k in 0..pages {
                // SAFETY: `addrs` holds `n` u64s (kmalloc alignment);
                // `i + k < n`.
                unsafe { a.add(i + k).write(bar.dma() + k as u64 * GPU_PAGE) };
            }
            bars.push(bar, GFP_KERNEL)?;
            i += pages;
        }
        if remapped {
            Event::DmaRemapped.count();
        }
        let m = mapping.as_ptr().cast::<nvidia_p2p_dma_mapping>();
        // SAFETY: `mapping` holds a whole `nvidia_p2p_dma_mapping`.
        unsafe {
            core::ptr::addr_of_mut!((*m).version).write(NVIDIA_P2P_DMA_MAPPING_VERSION);
            core::ptr::addr_of_mut!((*m).page_size_type).write(NVIDIA_P2P_PAGE_SIZE_64KB);
            core::ptr::addr_of_mut!((*m).entries).write(n as u32);
            core::ptr::addr_of_mut!((*m).dma_addresses).write(a);
            core::ptr::addr_of_mut!((*m).pci_dev).write(peer.as_ptr());
        }
        Ok(Self {
            mapping,
            addrs,
            bars,
        })
    }

    /// The address given to the client.
    pub(crate) fn ptr(&self) -> *mut nvidia_p2p_dma_mapping {
        self.mapping.as_ptr().cast()
    }

    /// Releases the mapping, as `PageTable::retire`; its DMA ranges are
    /// unmapped for the peer.
    pub(crate) fn retire(mut self) {
        self.mapping.fill(POISON);
        self.addrs.fill(POISON);
        self.bars.clear();
    }
}
