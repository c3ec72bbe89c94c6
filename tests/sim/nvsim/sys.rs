// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers over the kernel services the simulated GPU uses: pages,
//! raw kernel memory for the ABI objects, its locks, time, module
//! parameters, the peer's bus; and, from `common/sys.rs`, what both
//! simulators use alike (the current task, time, reports, user copies, the
//! work queue, run-time symbol lookup).  This is the crate's FFI boundary
//! for kernel services: every call into C other than the exported API
//! lives here.

use core::ptr::NonNull;
use kernel::prelude::*;

use crate::bindings as b;

#[path = "../common/sys.rs"]
mod common;
pub(crate) use common::*;

/// Whether the current task is in a get_pages or put of the bench's
/// same-process neighbour (sim_neighbour.ko marks them).
pub(crate) fn current_is_neighbour() -> bool {
    // SAFETY: no preconditions.
    unsafe { b::nvsim_glue_current_is_neighbour() }
}

/// Whether the current task is a kernel thread (a worker, not a process).
pub(crate) fn current_is_kthread() -> bool {
    // SAFETY: no preconditions.
    unsafe { b::nvsim_glue_current_is_kthread() }
}

/// Sleeps `us` microseconds.
pub(crate) fn usleep(us: u64) {
    // SAFETY: may sleep; every caller runs in process context.
    unsafe { b::nvsim_glue_usleep(us) }
}

/// Sleeps exactly `us` microseconds (an hrtimer, no slack).
pub(crate) fn sleep_us(us: u64) {
    // SAFETY: may sleep; every caller runs in process context.
    unsafe { b::nvsim_glue_sleep_us(us) }
}

/// A busy-wait loop's pause.
pub(crate) fn cpu_relax() {
    // SAFETY: no preconditions.
    unsafe { b::nvsim_glue_cpu_relax() }
}

/// A preemption point (process context, may sleep).
pub(crate) fn cond_resched() {
    // SAFETY: may sleep; every caller runs in process context.
    unsafe { b::nvsim_glue_cond_resched() }
}

/// A random number.
pub(crate) fn random_u32() -> u32 {
    // SAFETY: no preconditions.
    unsafe { b::get_random_u32() }
}

/// The module parameters (see glue.c), read afresh at each use.
pub(crate) mod param {
    use super::b;

    /// `pt_version`: the page-table version handed out.
    pub(crate) fn pt_version() -> u32 {
        // SAFETY: reads an integer module parameter.
        unsafe { b::nvsim_glue_pt_version() }
    }

    /// `driver_reads`: see glue.c.
    pub(crate) fn driver_reads() -> bool {
        // SAFETY: reads a module parameter; no preconditions.
        unsafe { b::nvsim_glue_driver_reads() }
    }

    /// Whether process `tgid` is on every pin's client list
    /// (`client_pids`, see glue.c).
    pub(crate) fn is_client_pid(tgid: u32) -> bool {
        // SAFETY: reads a module parameter; no preconditions.
        unsafe { b::nvsim_glue_is_client_pid(tgid) }
    }

    /// `map_window_ms`: see glue.c.
    pub(crate) fn map_window_ms() -> u64 {
        // SAFETY: reads a module parameter; no preconditions.
        u64::from(unsafe { b::nvsim_glue_map_window_ms() })
    }

    /// `reuse_freed`: see glue.c.
    pub(crate) fn reuse_freed() -> bool {
        // SAFETY: reads a module parameter; no preconditions.
        unsafe { b::nvsim_glue_reuse_freed() }
    }

    /// `persistent_supported`: see glue.c.
    pub(crate) fn persistent_supported() -> bool {
        // SAFETY: reads a module parameter.
        unsafe { b::nvsim_glue_persistent_supported() }
    }

    /// `stale_grace_ms`: see glue.c.
    pub(crate) fn stale_grace_ms() -> u64 {
        // SAFETY: reads an integer module parameter.
        u64::from(unsafe { b::nvsim_glue_stale_grace_ms() })
    }

    /// `callback_timeout_ms`: see glue.c.
    pub(crate) fn callback_timeout_ms() -> u64 {
        // SAFETY: reads an integer module parameter.
        u64::from(unsafe { b::nvsim_glue_callback_timeout_ms() })
    }

    /// `lat_pin_call_us`: the latency model's fixed cost of a pin call.
    pub(crate) fn lat_pin_call_us() -> u32 {
        // SAFETY: reads an integer module parameter.
        unsafe { b::nvsim_glue_lat_pin_call_us() }
    }

    /// `lat_pin_page_ns`: the latency model's cost of pinning a page.
    pub(crate) fn lat_pin_page_ns() -> u32 {
        // SAFETY: reads an integer module parameter.
        unsafe { b::nvsim_glue_lat_pin_page_ns() }
    }

    /// `lat_unpin_page_ns`: the latency model's cost of unpinning a page.
    pub(crate) fn lat_unpin_page_ns() -> u32 {
        // SAFETY: reads an integer module parameter.
        unsafe { b::nvsim_glue_lat_unpin_page_ns() }
    }

    /// `lat_map_page_ns`: the latency model's cost of mapping a page.
    pub(crate) fn lat_map_page_ns() -> u32 {
        // SAFETY: reads an integer module parameter.
        unsafe { b::nvsim_glue_lat_map_page_ns() }
    }

    /// `lat_unmap_page_ns`: the latency model's cost of unmapping a page.
    pub(crate) fn lat_unmap_page_ns() -> u32 {
        // SAFETY: reads an integer module parameter.
        unsafe { b::nvsim_glue_lat_unmap_page_ns() }
    }

    /// `lat_spin`: busy-wait the latency model's costs instead of sleeping.
    pub(crate) fn lat_spin() -> bool {
        // SAFETY: reads a module parameter.
        unsafe { b::nvsim_glue_lat_spin() }
    }
}

/// Whether `peer` (non-NULL, as passed by a client) is a PCI device.
pub(crate) fn is_pci(peer: NonNull<b::pci_dev>) -> bool {
    // SAFETY: only `&peer->dev` is read, which is a real `struct device`
    // even when a client applied `to_pci_dev` to a non-PCI device.
    unsafe { b::nvsim_glue_is_pci(peer.as_ptr()) }
}

/// The simulator's bookkeeping lock (a C mutex, a leaf).  Only `lock::Api`
/// uses these.
pub(crate) mod state_mutex {
    use super::b;

    /// Blocks until the lock is held.
    pub(crate) fn lock() {
        // SAFETY: may sleep; callers run in process context.
        unsafe { b::nvsim_glue_state_lock() }
    }

    /// Releases the lock.
    ///
    /// # Safety
    ///
    /// The current task holds the lock.
    pub(crate) unsafe fn unlock() {
        // SAFETY: the caller holds the lock.
        unsafe { b::nvsim_glue_state_unlock() }
    }
}

/// The driver's global API lock (a C mutex, so lockdep tracks it).  Only
/// `lock::Api` uses these.
pub(crate) mod api_mutex {
    use super::b;

    /// Blocks until the lock is held.
    pub(crate) fn lock() {
        // SAFETY: may sleep; callers run in process context.
        unsafe { b::nvsim_glue_api_lock() }
    }

    /// Takes the lock if it is free.
    pub(crate) fn try_lock() -> bool {
        // SAFETY: no preconditions.
        unsafe { b::nvsim_glue_api_trylock() }
    }

    /// Releases the lock.
    ///
    /// # Safety
    ///
    /// The current task holds the lock.
    pub(crate) unsafe fn unlock() {
        // SAFETY: the caller holds the lock.
        unsafe { b::nvsim_glue_api_unlock() }
    }
}

/// A block of `2^order` physically contiguous pages, zeroed.
///
/// # Invariants
///
/// `page` came from `alloc_pages(order)` and is freed exactly once, on drop.
pub(crate) struct PageBlock {
    page: NonNull<b::page>,
    order: u32,
}

// SAFETY: a block of pages may be freed from any task.
unsafe impl Send for PageBlock {}

impl PageBlock {
    /// Allocates `2^order` pages (order > 4 fails quietly when memory is
    /// fragmented).
    pub(crate) fn new(order: u32) -> Result<Self> {
        // SAFETY: no preconditions; may sleep (GFP_KERNEL).
        let page = unsafe { b::nvsim_glue_alloc_block(order) };
        let page = NonNull::new(page).ok_or(ENOMEM)?;
        Ok(Self { page, order })
    }

    /// The physical address of the first page.
    pub(crate) fn phys(&self) -> u64 {
        // SAFETY: `self.page` is a valid allocated page (invariant).
        unsafe { b::nvsim_glue_block_phys(self.page.as_ptr()) }
    }

    /// The size in bytes.
    pub(crate) fn size(&self) -> u64 {
        4096u64 << self.order
    }

    /// Copies `buf.len()` bytes of the block at `offset` into `buf`.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> Result {
        self.check(offset, buf.len())?;
        // The glue's contract: a live block (invariant), the range inside it
        // (checked just above), `buf` valid for `buf.len()` bytes.
        // SAFETY: all three hold; `buf` is a writable slice of that length.
        unsafe {
            b::nvsim_glue_block_copy(
                self.page.as_ptr(),
                offset,
                buf.as_mut_ptr().cast(),
                buf.len(),
                false,
            )
        };
        Ok(())
    }

    /// Copies `buf` into the block at `offset`.
    pub(crate) fn write(&self, offset: u64, buf: &[u8]) -> Result {
        self.check(offset, buf.len())?;
        // SAFETY: as in `read`; copying to the block, the glue only reads
        // `buf`, a readable slice of that length.
        unsafe {
            b::nvsim_glue_block_copy(
                self.page.as_ptr(),
                offset,
                buf.as_ptr().cast_mut().cast(),
                buf.len(),
                true,
            )
        };
        Ok(())
    }

    /// EFAULT unless `[offset, offset + len)` lies in the block.
    fn check(&self, offset: u64, len: usize) -> Result {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(EFAULT),
        }
    }
}

impl Drop for PageBlock {
    fn drop(&mut self) {
        // SAFETY: allocated with this order and freed only here (invariant).
        unsafe { b::__free_pages(self.page.as_ptr(), self.order) }
    }
}

/// Zeroed kernel memory (kvzalloc: kmalloc, or vmalloc for big arrays)
/// holding one ABI object handed to clients.  Freed for real on drop, so a
/// client reading it afterwards is a KASAN report.
///
/// # Invariants
///
/// `ptr` points to `size` bytes from `kvzalloc` (or, with `object`, from
/// `nvsim_glue_obj_alloc`), freed exactly once, on drop.
pub(crate) struct RawBuf {
    ptr: NonNull<u8>,
    size: usize,
    /// From the object cache (`RawBuf::object`, of this kind), not kvzalloc.
    object: Option<ObjKind>,
}

/// The kinds of ABI objects the object cache keeps apart (the driver
/// allocates them in different kmalloc size classes).
#[derive(Clone, Copy)]
pub(crate) enum ObjKind {
    PageTable = b::NVSIM_OBJ_PAGE_TABLE as isize,
    Mapping = b::NVSIM_OBJ_MAPPING as isize,
}

// SAFETY: plain kernel memory; may be freed from any task.
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// Allocates `size` zeroed bytes (at least 8-byte aligned, as kmalloc).
    pub(crate) fn new(size: usize) -> Result<Self> {
        // SAFETY: no preconditions; may sleep (GFP_KERNEL).
        let p = unsafe { b::nvsim_glue_kvzalloc(size.max(1)) };
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(ENOMEM)?;
        Ok(Self {
            ptr,
            size,
            object: None,
        })
    }

    /// A page-table or mapping header of `size` zeroed bytes (at most 64)
    /// from the LIFO cache of freed objects: like the driver's kmalloc, it
    /// may be at the address of the object of its size class freed last.
    pub(crate) fn object(kind: ObjKind, size: usize) -> Result<Self> {
        // SAFETY: no preconditions; may sleep (GFP_KERNEL).
        let p = unsafe { b::nvsim_glue_obj_alloc(kind as u32, size.max(1)) };
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(ENOMEM)?;
        Ok(Self {
            ptr,
            size,
            object: Some(kind),
        })
    }

    /// The address of the memory.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Overwrites the whole buffer with `byte`.
    pub(crate) fn fill(&mut self, byte: u8) {
        // SAFETY: `ptr` is valid for `size` bytes (invariant).
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr(), byte, self.size) }
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        if let Some(kind) = self.object {
            // SAFETY: from nvsim_glue_obj_alloc with this kind and size,
            // freed only here (invariant).
            unsafe {
                b::nvsim_glue_obj_free(kind as u32, self.ptr.as_ptr().cast(), self.size.max(1))
            }
        } else {
            // SAFETY: allocated by kvzalloc and freed only here (invariant).
            unsafe { b::nvsim_glue_kvfree(self.ptr.as_ptr().cast()) }
        }
    }
}

/// A run of GPU pages DMA-mapped for a peer device, as the real driver maps
/// BAR pages (`nvsim_glue_dma_map_bar`).
///
/// # Invariants
///
/// `peer` is a PCI device that the mapping holds a reference to, and
/// `dma` its DMA address for `len` bytes of the BAR, mapped by
/// `nvsim_glue_dma_map_bar` and unmapped exactly once, on drop.
pub(crate) struct BarMapping {
    peer: NonNull<b::pci_dev>,
    dma: u64,
    len: u64,
}

// SAFETY: a referenced PCI device and a DMA mapping of it may be released
// from any task.
unsafe impl Send for BarMapping {}

impl BarMapping {
    /// Maps `len` bytes at bus address `phys` for `peer`: EIO if the DMA
    /// API refuses (the driver's NV_ERR_OPERATING_SYSTEM).
    pub(crate) fn new(peer: NonNull<b::pci_dev>, phys: u64, len: u64) -> Result<Self> {
        if !is_pci(peer) {
            return Err(EINVAL);
        }
        let mut dma = 0u64;
        // On success the glue took its own reference to `peer`, which `drop`
        // puts.
        // SAFETY: `peer` is the pci_dev a client passed to dma_map_pages,
        // live for the call (the API's contract); `dma` is a writable u64.
        let mapped = unsafe { b::nvsim_glue_dma_map_bar(peer.as_ptr(), phys, len, &mut dma) };
        if !mapped {
            return Err(EIO);
        }
        Ok(Self { peer, dma, len })
    }

    /// The DMA address of the run's first byte.
    pub(crate) fn dma(&self) -> u64 {
        self.dma
    }
}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: mapped by `nvsim_glue_dma_map_bar` for `peer`, which it
        // referenced; unmapped (and put) only here (invariant).
        unsafe { b::nvsim_glue_dma_unmap_bar(self.peer.as_ptr(), self.dma, self.len) }
    }
}

/// Module exit, once every page table and mapping is freed: the object
/// cache gives its memory back.
pub(crate) fn drain_object_cache() {
    // SAFETY: called once at module exit after the last object was freed.
    unsafe { b::nvsim_glue_obj_cache_drain() }
}

/// The real driver's link of a new mapping into the freed bookkeeping of
/// page table `table` (dma_map_pages' epilogue after a cudaFree): a write
/// into freed memory, a KASAN report on a KASAN kernel.  Made only if
/// `table` is a freed header the object cache holds; false otherwise.
pub(crate) fn driver_links_freed(table: usize) -> bool {
    // The glue checks `table` against the object cache's headers under the
    // cache's lock, which keeps a cached one allocated and not handed out.
    // SAFETY: any value may be passed: only a cached header is written.
    unsafe { b::nvsim_glue_driver_links_freed(table as *mut c_void) }
}

/// Tells peer_core_sim (if loaded) that GPU memory was freed, so it checks
/// that the HCA no longer uses any of it.  Must not be called with the API
/// lock held (the core asks `nvidia_p2p_sim_dma_live`).
pub(crate) fn notify_core_freed() {
    let Some(sym) = Symbol::get(c"peer_core_sim_gpu_freed") else {
        return;
    };
    // SAFETY: peer_core_sim exports `void peer_core_sim_gpu_freed(void)`
    // (sim_link.h); the symbol is held until `sym` is dropped.
    let f = unsafe {
        core::mem::transmute::<*mut core::ffi::c_void, unsafe extern "C" fn()>(sym.addr())
    };
    // SAFETY: callable from process context without locks held.
    unsafe { f() };
}
