// SPDX-License-Identifier: GPL-2.0

//! The NVIDIA P2P API (nvidia.ko), found by name at load time: pinning GPU
//! memory ([`PageTable`]) and DMA-mapping it for a peer PCI device
//! ([`DmaMapping`]).
//!
//! Ownership: a `PageTable` is one pin.  It ends in exactly one of two ways:
//! [`NvidiaP2p::unpin`] (we release it), or [`PageTable::revoke`] after the
//! driver's free callback (the driver releases it).  The same holds for a
//! `DmaMapping` with [`NvidiaP2p::dma_unmap`] / [`DmaMapping::revoke`].

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use kernel::prelude::*;

use crate::bindings::{
    nvidia_p2p_dma_map_pages_t, nvidia_p2p_dma_mapping, nvidia_p2p_dma_unmap_pages_t,
    nvidia_p2p_get_pages_persistent_t, nvidia_p2p_get_pages_t, nvidia_p2p_page_table,
    nvidia_p2p_put_pages_persistent_t, nvidia_p2p_put_pages_t, pci_dev, NVIDIA_P2P_FLAGS_DEFAULT,
    NVIDIA_P2P_PAGE_SIZE_64KB,
};
use crate::glue::Symbol;
use crate::logic::range::GpuRange;
use crate::logic::version;

/// The callback the driver runs when pinned memory is freed under a pin.
pub(crate) type FreeCallback = unsafe extern "C" fn(data: *mut c_void);

/// Why the NVIDIA driver cannot be used.
pub(crate) enum Missing {
    /// A required entry point is not exported (nvidia.ko not loaded).
    Symbol(&'static core::ffi::CStr),
}

/// The resolved entry points.
///
/// # Invariants
///
/// Each function pointer is the address of the exported symbol of the same
/// name, kept valid by the matching [`Symbol`] held in `_refs`.
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
    _refs: KVec<Symbol>,
}

struct Persistent {
    get: unsafe extern "C" fn(u64, u64, *mut *mut nvidia_p2p_page_table, u32) -> kernel::ffi::c_int,
    put: unsafe extern "C" fn(u64, *mut nvidia_p2p_page_table, u32) -> kernel::ffi::c_int,
}

/// Resolves `name` and turns its address into a function pointer of type
/// `Option<F>` (the generated `..._t` typedefs are `Option<fn>`).
macro_rules! resolve {
    ($refs:ident, $name:literal, $ty:ty) => {{
        match Symbol::get($name) {
            Some(sym) => {
                // SAFETY: `$name` has the C type `$ty` (nv-p2p-abi.h); a function
                // address and `Option<fn>` have the same representation.
                let f: $ty = unsafe { core::mem::transmute::<*mut c_void, $ty>(sym.addr()) };
                $refs.push(sym, GFP_KERNEL)?;
                f
            }
            None => None,
        }
    }};
}

impl NvidiaP2p {
    /// Looks up the API.  `Ok(Err(..))` names the first required entry point
    /// that no loaded module exports; the persistent pair is optional.
    pub(crate) fn find() -> Result<core::result::Result<Self, Missing>> {
        let mut refs = KVec::new();
        let get_pages = resolve!(refs, c"nvidia_p2p_get_pages", nvidia_p2p_get_pages_t);
        let put_pages = resolve!(refs, c"nvidia_p2p_put_pages", nvidia_p2p_put_pages_t);
        let dma_map_pages = resolve!(
            refs,
            c"nvidia_p2p_dma_map_pages",
            nvidia_p2p_dma_map_pages_t
        );
        let dma_unmap_pages = resolve!(
            refs,
            c"nvidia_p2p_dma_unmap_pages",
            nvidia_p2p_dma_unmap_pages_t
        );
        let get_persistent = resolve!(
            refs,
            c"nvidia_p2p_get_pages_persistent",
            nvidia_p2p_get_pages_persistent_t
        );
        let put_persistent = resolve!(
            refs,
            c"nvidia_p2p_put_pages_persistent",
            nvidia_p2p_put_pages_persistent_t
        );
        let (Some(get_pages), Some(put_pages), Some(dma_map_pages), Some(dma_unmap_pages)) =
            (get_pages, put_pages, dma_map_pages, dma_unmap_pages)
        else {
            let missing = [
                (get_pages.is_none(), c"nvidia_p2p_get_pages"),
                (put_pages.is_none(), c"nvidia_p2p_put_pages"),
                (dma_map_pages.is_none(), c"nvidia_p2p_dma_map_pages"),
                (dma_unmap_pages.is_none(), c"nvidia_p2p_dma_unmap_pages"),
            ]
            .into_iter()
            .find(|(m, _)| *m)
            .map_or(c"nvidia_p2p_get_pages", |(_, n)| n);
            return Ok(Err(Missing::Symbol(missing)));
        };
        let persistent = match (get_persistent, put_persistent) {
            (Some(get), Some(put)) => Some(Persistent { get, put }),
            _ => None,
        };
        Ok(Ok(NvidiaP2p {
            get_pages,
            put_pages,
            persistent,
            dma_map_pages,
            dma_unmap_pages,
            _refs: refs,
        }))
    }

    /// Whether the driver has the persistent API (driver 535 and later).
    pub(crate) fn has_persistent(&self) -> bool {
        self.persistent.is_some()
    }

    /// Pins `range` of the calling process's GPU address space.  With
    /// `callback = Some((f, data))` the pin is revocable: the driver calls
    /// `f(data)` if the memory is freed while pinned.  Without, the
    /// persistent API is used.
    pub(crate) fn pin(
        &self,
        range: &GpuRange,
        callback: Option<(FreeCallback, *mut c_void)>,
    ) -> Result<PageTable> {
        let mut table: *mut nvidia_p2p_page_table = ptr::null_mut();
        let rc = match (callback, &self.persistent) {
            // SAFETY: `range` is aligned and non-empty (GpuRange), `table` an out
            // pointer; `data` outlives the pin or the callback (caller's contract).
            (Some((f, data)), _) => unsafe {
                (self.get_pages)(0, 0, range.start(), range.len(), &mut table, Some(f), data)
            },
            // SAFETY: as above, with the persistent API (flags must be 0).
            (None, Some(p)) => unsafe {
                (p.get)(
                    range.start(),
                    range.len(),
                    &mut table,
                    NVIDIA_P2P_FLAGS_DEFAULT,
                )
            },
            (None, None) => return Err(crate::compat::eopnotsupp()),
        };
        kernel::error::to_result(rc)?;
        let ptr = NonNull::new(table).ok_or(EIO)?;
        // INVARIANT: the driver returned a pinned page table for `range`.
        Ok(PageTable {
            ptr,
            va: range.start(),
            persistent: callback.is_none(),
        })
    }

    /// Releases a pin (put_pages).  The free callback does not run after
    /// this returns.  A put that races with the driver's own teardown is
    /// answered 0 by the driver.
    pub(crate) fn unpin(&self, table: PageTable) -> Result {
        let rc = match (&self.persistent, table.persistent) {
            // SAFETY: `table` is a pin we own (type invariant), released once
            // here by value; the flags of the persistent put must be 0.
            (Some(p), true) => unsafe { (p.put)(table.va, table.ptr.as_ptr(), 0) },
            // SAFETY: as above, for a revocable pin.
            _ => unsafe { (self.put_pages)(0, 0, table.va, table.ptr.as_ptr()) },
        };
        kernel::error::to_result(rc)
    }

    /// DMA-maps a pinned page table for the peer PCI device `peer`.
    pub(crate) fn dma_map(&self, peer: PciDev, table: &PageTableRef) -> Result<DmaMapping> {
        let mut mapping: *mut nvidia_p2p_dma_mapping = ptr::null_mut();
        // SAFETY: `peer` is a PCI device (PciDev); `table` is our pin (a racing
        // revocation is detected by the driver); `mapping` is an out pointer.
        let rc = unsafe { (self.dma_map_pages)(peer.0.as_ptr(), table.0.as_ptr(), &mut mapping) };
        kernel::error::to_result(rc)?;
        let ptr = NonNull::new(mapping).ok_or(EIO)?;
        // INVARIANT: the driver returned a mapping of `table` for `peer`.
        Ok(DmaMapping { ptr, peer })
    }

    /// Releases a DMA mapping of `table`.
    pub(crate) fn dma_unmap(&self, table: &PageTableRef, mapping: DmaMapping) -> Result {
        // SAFETY: `mapping` is a mapping of `table` for `mapping.peer` that
        // we own (type invariant), released once here by value.
        let rc = unsafe {
            (self.dma_unmap_pages)(
                mapping.peer.0.as_ptr(),
                table.0.as_ptr(),
                mapping.ptr.as_ptr(),
            )
        };
        kernel::error::to_result(rc)
    }
}

/// What a pinned page table says about itself, checked against what we can
/// handle.
pub(crate) struct PinInfo {
    /// Number of GPU pages.
    pub(crate) entries: u32,
}

/// Why a page table or mapping from the driver is refused.
pub(crate) enum Unsupported {
    /// A page-table version we do not know.
    PageTableVersion(u32),
    /// A page size other than 64 KiB (the enum value).
    PageSize(u32),
    /// Not one entry per GPU page of the range.
    Entries(u32),
    /// A DMA-mapping version we do not know.
    MappingVersion(u32),
}

impl core::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Unsupported::PageTableVersion(v) => write!(
                f,
                "page table version {v:#010x} is not supported (known: {:#010x}, {:#010x}); \
                 a newer peermem_rs is needed for this driver",
                version::PAGE_TABLE_V1,
                version::PAGE_TABLE_V2
            ),
            Unsupported::PageSize(p) => write!(f, "GPU page size type {p} is not 64 KiB"),
            Unsupported::Entries(n) => write!(f, "{n} entries do not match the range"),
            Unsupported::MappingVersion(v) => {
                write!(f, "DMA mapping version {v:#010x} is not supported")
            }
        }
    }
}

/// One pin of GPU memory: a page table handed out by the driver.
///
/// # Invariants
///
/// `ptr` is a page table returned by `nvidia_p2p_get_pages(_persistent)` for
/// the range starting at `va`, not yet released.  It stays valid until we
/// release it, or, for a revocable pin, until the driver's free callback
/// returns: the owner reads it only under the lock that the free callback
/// takes before it returns (rust/registration.rs).
pub(crate) struct PageTable {
    ptr: NonNull<nvidia_p2p_page_table>,
    va: u64,
    persistent: bool,
}

// SAFETY: a page table is driver memory not tied to a thread.
unsafe impl Send for PageTable {}

/// The address of a pinned page table, for driver calls made without the
/// owner's lock (the driver detects a concurrent revocation itself).
#[derive(Clone, Copy)]
pub(crate) struct PageTableRef(NonNull<nvidia_p2p_page_table>);

// SAFETY: only an address, passed back to the driver.
unsafe impl Send for PageTableRef {}

impl PageTable {
    /// The address, for driver calls.
    pub(crate) fn handle(&self) -> PageTableRef {
        PageTableRef(self.ptr)
    }

    /// Checks the layout and size of the pin against `range`.
    pub(crate) fn check(&self, range: &GpuRange) -> core::result::Result<PinInfo, Unsupported> {
        // SAFETY: `ptr` is valid under the caller's lock (type invariant); these
        // fields exist in v1 and v2 alike (`flags`, v2 only, is not read).
        let (v, page_size, entries) = unsafe {
            let t = self.ptr.as_ptr();
            ((*t).version, (*t).page_size, (*t).entries)
        };
        if version::page_table_layout(v).is_none() {
            return Err(Unsupported::PageTableVersion(v));
        }
        if page_size != NVIDIA_P2P_PAGE_SIZE_64KB {
            return Err(Unsupported::PageSize(page_size));
        }
        if u64::from(entries) != range.pages() {
            return Err(Unsupported::Entries(entries));
        }
        Ok(PinInfo { entries })
    }

    /// The driver freed the memory (free callback): the page table is the
    /// driver's now and must not be touched again.
    pub(crate) fn revoke(self) {}
}

/// A PCI device the HCA's DMA goes through.
///
/// # Invariants
///
/// Points to a live `struct pci_dev` (the RDMA core's DMA device, alive
/// while the registration that uses it exists).
#[derive(Clone, Copy)]
pub(crate) struct PciDev(NonNull<pci_dev>);

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
/// yet released; valid under the same rule as [`PageTable`].
pub(crate) struct DmaMapping {
    ptr: NonNull<nvidia_p2p_dma_mapping>,
    peer: PciDev,
}

// SAFETY: a DMA mapping is driver memory not tied to a thread.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    /// Appends the bus address of every GPU page to `out` (which the caller
    /// sized), after checking the mapping's layout against `pin`.
    pub(crate) fn addresses(
        &self,
        pin: &PinInfo,
        out: &mut KVec<u64>,
    ) -> core::result::Result<(), Unsupported> {
        // SAFETY: by the type invariant `ptr` is valid while the caller holds
        // the owner's lock.
        let (v, entries, addrs) = unsafe {
            let m = self.ptr.as_ptr();
            ((*m).version, (*m).entries, (*m).dma_addresses)
        };
        if !version::dma_mapping_ok(v) {
            return Err(Unsupported::MappingVersion(v));
        }
        if entries != pin.entries || addrs.is_null() {
            return Err(Unsupported::Entries(entries));
        }
        // SAFETY: the driver's mapping has `entries` addresses at `addrs`.
        let addrs = unsafe { core::slice::from_raw_parts(addrs, entries as usize) };
        for &a in addrs {
            out.push(a, GFP_KERNEL)
                .map_err(|_| Unsupported::Entries(entries))?;
        }
        Ok(())
    }

    /// The driver freed the memory and with it this mapping.
    pub(crate) fn revoke(self) {}
}
