// SPDX-License-Identifier: GPL-2.0

//! The NVIDIA P2P API (nvidia.ko): pinning GPU memory ([`PageTable`]),
//! DMA-mapping it for a peer PCI device ([`DmaMapping`]), and the rules that
//! keep the driver's objects valid while we use them ([`Pins`]; the free
//! callback's reference is in rust/nvidia/callback.rs).
//!
//! Ownership: a `PageTable` is one pin.  It ends in exactly one of two ways:
//! [`NvidiaP2p::unpin`] (we release it), or the driver's free callback
//! (cudaFree; the driver releases it after the callback returned).  The same
//! holds for a `DmaMapping` with [`NvidiaP2p::dma_unmap`].  While a
//! registration keeps them in its [`Pins`], they are valid; the free
//! callback can only complete through [`Pins::revoke`], which forgets them.

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::bindings::{
    glue, nvidia_p2p_dma_mapping, nvidia_p2p_page_table, pci_dev, NVIDIA_P2P_FLAGS_DEFAULT,
    NVIDIA_P2P_PAGE_SIZE_64KB,
};
use crate::logic::coalesce::{coalesce, Coalesce};
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::logic::version;
use crate::pin_gate::TableSide;

mod callback;
pub(crate) use callback::{Armed, CallbackRan, CallbackRef, Disarmed, Revocable, Revoked};

/// The callback the driver runs when pinned memory is freed under a pin.
pub(crate) type FreeCallback = unsafe extern "C" fn(data: *mut c_void);

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
        PageTable::new(table, range, None, 0)
    }

    /// Pins `range` of the calling process's GPU address space, revocably:
    /// the driver calls `armed`'s callback if the memory is freed while
    /// pinned.  When the driver kept no callback, the error comes with the
    /// [`Disarmed`] that gives the callback's reference back; without one,
    /// the reference must be kept (leaked rather than freed in use).
    pub(crate) fn pin_revocable(
        &self,
        range: &GpuRange,
        armed: Armed,
    ) -> core::result::Result<PageTable, (Error, Option<Disarmed>)> {
        let mut table: *mut nvidia_p2p_page_table = ptr::null_mut();
        let data = armed.data as usize;
        // SAFETY: `range` is aligned and non-empty (GpuRange invariant),
        // `table` is an out pointer.  `armed.data` stays valid until the
        // callback ran or the pin was released: its `CallbackRef` can only
        // be given back with a `Disarmed` proof for it, which exists only
        // then.
        let rc = unsafe {
            (self.get_pages)(
                0,
                0,
                range.start(),
                range.len(),
                &mut table,
                Some(armed.f),
                armed.data,
            )
        };
        if let Err(e) = kernel::error::to_result(rc) {
            // The driver keeps no callback of a failed pin.
            return Err((e, Some(Disarmed::new(data))));
        }
        // A success without a table would be a driver bug: the pin, if any,
        // stays armed, so no proof is made and the reference is kept.
        PageTable::new(table, range, Some(current_process()), data).map_err(|e| (e, None))
    }

    /// Releases a pin (put_pages).  For a revocable pin, the driver looks the
    /// pin up among the calling process's allocations: from any other
    /// process (or a kernel thread) its put would find nothing, return 0,
    /// and leave the pin and its callback armed, so the table is given back
    /// untouched ([`Unpin::Foreign`]).  On success the callback of a
    /// revocable pin can no longer start ([`Disarmed`]); one that raced with
    /// the put already ran (the put waits for the driver's lock, which the
    /// driver holds around the callback).
    pub(crate) fn unpin(&self, table: PageTable) -> core::result::Result<Option<Disarmed>, Unpin> {
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
        if let Err(e) = kernel::error::to_result(rc) {
            // A persistent pin is released only by our put: it is still
            // ours to retry.  Whether a revocable one is still armed is
            // unknown: the table is not used again.
            let table = if table.owner.is_none() {
                Some(table)
            } else {
                table.forget();
                None
            };
            return Err(Unpin::Failed(e, table));
        }
        Ok(table.owner.map(|_| Disarmed::new(table.data)))
    }

    /// DMA-maps a pinned page table for the peer PCI device `peer`.
    ///
    /// The table of a revocable pin is mapped only on the table side of the
    /// client's pin gate (`gate`; `EINVAL` without it), so that no pin of
    /// ours can be handed its address should the driver free it during the
    /// call.
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
        gate: Option<&TableSide<'_>>,
    ) -> Result<DmaMapping> {
        if table.revocable && gate.is_none() {
            return Err(EINVAL);
        }
        let mut mapping: *mut nvidia_p2p_dma_mapping = ptr::null_mut();
        // SAFETY: `peer` is a live PCI device (PciDev invariant) and
        // `mapping` an out pointer.  `table` was a live pin when taken from
        // `Pins`; the driver keeps a persistent pin's table valid until our
        // put, and a revocable one's until its free callback returned, which
        // may happen during this call: the accepted race documented above.
        // The gate (checked) keeps that race from reaching a pin of ours.
        let rc = unsafe { (self.dma_map_pages)(peer.0.as_ptr(), table.ptr.as_ptr(), &mut mapping) };
        kernel::error::to_result(rc)?;
        let ptr = NonNull::new(mapping).ok_or(EIO)?;
        // INVARIANT: the driver returned a mapping of `table` for `peer`.
        Ok(DmaMapping { ptr, peer })
    }

    /// Releases a DMA mapping.  The returned [`Unmapped`] is the caller's
    /// report of the return to [`Pins`] ([`Pins::unmap_done`]), which until
    /// then keeps the free callback from completing.
    pub(crate) fn dma_unmap(&self, args: UnmapArgs) -> (Unmapped, Result) {
        let UnmapArgs { table, mapping } = args;
        // Both stay valid during the call: they were live in `Pins` when
        // taken, and `Pins` refuses to let the free callback complete (after
        // which the driver frees them) until `unmap_done`; the unmap takes no
        // driver lock, so that wait cannot deadlock (nvidia-p2p.md).
        // SAFETY: `mapping` is a mapping of `table` for `mapping.peer` that we
        // own (type invariant), released once here by value; both are valid.
        let rc = unsafe {
            (self.dma_unmap_pages)(
                mapping.peer.0.as_ptr(),
                table.as_ptr(),
                mapping.ptr.as_ptr(),
            )
        };
        let done = Unmapped {
            table: table.as_ptr() as usize,
        };
        (done, kernel::error::to_result(rc))
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
fn current_process() -> u64 {
    // SAFETY: reads `current`; no preconditions.
    unsafe { glue::peermem_current_process() }
}

/// One pin of GPU memory: a page table handed out by the driver.
///
/// # Invariants
///
/// `ptr` is a page table returned by `nvidia_p2p_get_pages(_persistent)` for
/// the range starting at `va`, not yet released; `owner` is the pinning
/// process for a revocable pin, `None` for a persistent one; `data` is the
/// revocable pin's callback `data` (address; 0 for a persistent pin).  It is
/// dereferenced only while kept in a [`Pins`] (see there).
pub(crate) struct PageTable {
    ptr: NonNull<nvidia_p2p_page_table>,
    va: u64,
    owner: Option<u64>,
    data: usize,
}

// SAFETY: a page table is driver memory not tied to a thread.
unsafe impl Send for PageTable {}

impl PageTable {
    fn new(
        table: *mut nvidia_p2p_page_table,
        range: &GpuRange,
        owner: Option<u64>,
        data: usize,
    ) -> Result<Self> {
        let ptr = NonNull::new(table).ok_or(EIO)?;
        // INVARIANT: the driver returned a pinned page table for `range`.
        Ok(PageTable {
            ptr,
            va: range.start(),
            owner,
            data,
        })
    }

    /// Whether only another process than the caller could release it (see
    /// [`NvidiaP2p::unpin`]).
    pub(crate) fn foreign(&self) -> bool {
        self.owner.is_some_and(|o| o == 0 || o != current_process())
    }

    /// The driver freed the memory (free callback): the page table is the
    /// driver's now and must not be touched again.
    pub(crate) fn forget(self) {}
}

/// The page table of a pin, for `dma_map_pages` (see [`NvidiaP2p::dma_map`]),
/// and whether it is revocable.
pub(crate) struct MapArgs {
    ptr: NonNull<nvidia_p2p_page_table>,
    revocable: bool,
}

/// What `dma_unmap_pages` needs: the mapping and its page table.
pub(crate) struct UnmapArgs {
    table: NonNull<nvidia_p2p_page_table>,
    mapping: DmaMapping,
}

// SAFETY: addresses passed back to the driver, not tied to a thread.
unsafe impl Send for UnmapArgs {}

/// Proof that the `dma_unmap_pages` of an [`UnmapArgs`] taken by
/// [`Pins::take_unmap`] returned: made only by [`NvidiaP2p::dma_unmap`],
/// consumed by [`Pins::unmap_done`].  `table` names the pin (its address).
#[must_use = "give it to Pins::unmap_done, or the free callback waits forever"]
pub(crate) struct Unmapped {
    table: usize,
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
/// yet released; dereferenced only while kept in a [`Pins`].
pub(crate) struct DmaMapping {
    ptr: NonNull<nvidia_p2p_dma_mapping>,
    peer: PciDev,
}

// SAFETY: a DMA mapping is driver memory not tied to a thread.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    /// The driver freed the memory and with it this mapping.
    pub(crate) fn forget(self) {}
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

/// Why [`Pins::adopt`] did not keep a table.
pub(crate) enum Adopt {
    /// The free callback already ran: the table is the driver's.
    Revoked(PageTable),
    /// We cannot use it: unpin it.
    Unsupported(PageTable, Unsupported),
}

/// The driver objects of one registration.
///
/// # Invariants
///
/// It lives in the lock its owner's free callback takes (made only by
/// [`Pins::new_locked`], in that lock's initializer), and the free
/// callback can only complete through [`Pins::revoke`] (its trampoline
/// needs the [`Revoked`] that only `revoke` makes), which refuses while an
/// unmap is in flight and forgets the objects: so whatever is kept here is
/// valid (the driver frees it only after that callback returned).  After
/// `revoke`, nothing is kept any more.  `entries` is the checked number of
/// pages of `table`.
pub(crate) struct Pins {
    table: Option<PageTable>,
    entries: u32,
    mapping: Option<DmaMapping>,
    /// The table (address) of the unmap in flight.
    unmapping: Option<usize>,
    revoked: bool,
}

impl Pins {
    /// The lock of a registration: its content is `make(pins)`, `pins`
    /// holding no pin yet.  The only way to make a `Pins`, so that it lives
    /// under the lock the free callback takes; `make` is a plain function,
    /// it has nowhere else to keep it.
    pub(crate) fn new_locked<I: Send>(make: fn(Pins) -> I) -> impl PinInit<Mutex<I>> {
        // INVARIANT: the new `Pins` goes straight into the lock.
        new_mutex!(
            make(Pins {
                table: None,
                entries: 0,
                mapping: None,
                unmapping: None,
                revoked: false,
            }),
            "peermem_rs::PeerMr::inner"
        )
    }

    /// Keeps `table`, just pinned for `range`, after checking its layout.
    pub(crate) fn adopt(
        &mut self,
        table: PageTable,
        range: &GpuRange,
    ) -> core::result::Result<(), Adopt> {
        if self.revoked {
            return Err(Adopt::Revoked(table));
        }
        // These fields exist in v1 and v2 alike (`flags`, v2 only, is not read).
        // SAFETY: not revoked, so the driver has not freed the table (type
        // invariant: the caller holds the lock the free callback takes).
        let (v, page_size, entries) = unsafe {
            let t = table.ptr.as_ptr();
            ((*t).version, (*t).page_size, (*t).entries)
        };
        let why = if version::page_table_layout(v).is_none() {
            Some(Unsupported::PageTableVersion(v))
        } else if page_size != NVIDIA_P2P_PAGE_SIZE_64KB {
            Some(Unsupported::PageSize(page_size))
        } else if u64::from(entries) != range.pages() {
            Some(Unsupported::Entries(entries))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Adopt::Unsupported(table, why));
        }
        self.table = Some(table);
        self.entries = entries;
        Ok(())
    }

    /// Whether only another process than the caller could release the pin.
    pub(crate) fn foreign(&self) -> bool {
        self.table.as_ref().is_some_and(PageTable::foreign)
    }

    /// The process that pinned, for a revocable pin.
    pub(crate) fn owner(&self) -> Option<u64> {
        self.table.as_ref().and_then(|t| t.owner)
    }

    /// The page table, for `dma_map_pages`.
    pub(crate) fn map_args(&self) -> Option<MapArgs> {
        self.table.as_ref().map(|t| MapArgs {
            ptr: t.ptr,
            revocable: t.owner.is_some(),
        })
    }

    /// Keeps a new mapping (unless the callback ran meanwhile: then it is
    /// the driver's and is forgotten; `false`).
    pub(crate) fn adopt_mapping(&mut self, mapping: DmaMapping) -> bool {
        if self.revoked || self.table.is_none() {
            mapping.forget();
            return false;
        }
        self.mapping = Some(mapping);
        true
    }

    /// The mapping's bus addresses coalesced into segments of at most
    /// `max_segment` bytes, read straight from the driver's array (valid
    /// while `self` is borrowed: type invariant).
    pub(crate) fn segments(
        &self,
        max_segment: u64,
    ) -> core::result::Result<Coalesce<'_>, Unsupported> {
        let Some(m) = &self.mapping else {
            return Err(Unsupported::Entries(0));
        };
        // SAFETY: a kept mapping is valid (type invariant).
        let (v, entries, addrs) = unsafe {
            let m = m.ptr.as_ptr();
            ((*m).version, (*m).entries, (*m).dma_addresses)
        };
        if !version::dma_mapping_ok(v) {
            return Err(Unsupported::MappingVersion(v));
        }
        if entries != self.entries || addrs.is_null() {
            return Err(Unsupported::Entries(entries));
        }
        // SAFETY: the driver's mapping has `entries` addresses at `addrs`,
        // valid as long as the mapping, which `&self` keeps (type invariant).
        let addrs = unsafe { core::slice::from_raw_parts(addrs, entries as usize) };
        Ok(coalesce(addrs, GPU_PAGE_SIZE, max_segment))
    }

    /// Takes the mapping out for `dma_unmap_pages`; until [`Pins::unmap_done`]
    /// the free callback cannot complete.
    pub(crate) fn take_unmap(&mut self) -> Option<UnmapArgs> {
        let table = self.table.as_ref()?.ptr;
        let mapping = self.mapping.take()?;
        self.unmapping = Some(table.as_ptr() as usize);
        Some(UnmapArgs { table, mapping })
    }

    /// The unmap taken by [`Pins::take_unmap`] returned (`done` is its
    /// return).  A proof for another pin's unmap changes nothing.
    pub(crate) fn unmap_done(&mut self, done: Unmapped) {
        if self.unmapping == Some(done.table) {
            self.unmapping = None;
        } else {
            pr_warn!("an unmap was reported to the wrong registration: ignored\n");
        }
    }

    /// Takes the pin out to release it.
    pub(crate) fn take_table(&mut self) -> Option<PageTable> {
        self.table.take()
    }

    /// Puts back a pin that could not be released (see [`Unpin::Foreign`]),
    /// unless the callback ran meanwhile.
    pub(crate) fn restore(&mut self, table: PageTable) {
        if self.revoked {
            table.forget();
        } else {
            self.table = Some(table);
        }
    }

    /// The free callback: forgets the driver's objects (it frees them once
    /// the callback returns) and carries the callback's reference, to be
    /// given back when the callback is done.  Refused while an unmap is in
    /// flight (the callback must wait for it: its return is the driver's
    /// signal to free what the unmap uses); the inputs are given back.
    pub(crate) fn revoke<R>(
        &mut self,
        ran: CallbackRan,
        callback: Option<CallbackRef<R>>,
    ) -> core::result::Result<Revoked<R>, (CallbackRan, Option<CallbackRef<R>>)> {
        if self.unmapping.is_some() {
            return Err((ran, callback));
        }
        self.revoked = true;
        if let Some(t) = self.table.take() {
            t.forget();
        }
        if let Some(m) = self.mapping.take() {
            m.forget();
        }
        Ok(Revoked::new(callback, ran))
    }
}
