// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers over the kernel services the simulated core uses: its two
//! global mutexes, module parameters, RLIMIT_MEMLOCK, the HCA's DMA
//! device, SG tables, the memory_peers sysfs directories and the helpers
//! of nvidia_p2p_sim (looked up at run time); and, from `common/sys.rs`,
//! what both simulators use alike (the current task, time, reports, user
//! copies, the work queue, run-time symbol lookup).  This is the crate's
//! FFI boundary for kernel services; the clients' callbacks are called
//! from `peer.rs`.

use core::cell::UnsafeCell;
use core::ffi::{c_void, CStr};
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use kernel::prelude::*;

use crate::bindings as b;

#[path = "../common/sys.rs"]
mod common;
pub(crate) use common::*;

/// Nanoseconds elapsed since `ktime_ns()` value `t0`.
pub(crate) fn ns_since(t0: u64) -> u64 {
    ktime_ns().saturating_sub(t0)
}

/// Sleeps while `param()` ms have not passed, reading the parameter again
/// every 10 ms: lowering it (to 0) releases a held call at once, so a case
/// can hold one open for as long as it needs instead of guessing a time.
pub(crate) fn hold(param: fn() -> u32) {
    let mut slept = 0u32;
    loop {
        let left = param().saturating_sub(slept);
        if left == 0 {
            return;
        }
        let step = left.min(10);
        msleep(step);
        slept = slept.saturating_add(step);
    }
}

/// `honour_unmaps`: whether the core honours `PEER_MEM_INVALIDATE_UNMAPS`.
pub(crate) fn param_honour_unmaps() -> bool {
    // SAFETY: reads a module parameter; no preconditions.
    unsafe { b::pcsim_glue_param_honour_unmaps() }
}

/// Whether new registrations get a non-PCI `dma_device` (`hca_nonpci`).
pub(crate) fn param_nonpci() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_nonpci() }
}

/// `sg_page_shift`: the older cores' SG regime (no trims, page-aligned
/// entries) instead of the trim.
pub(crate) fn param_page_shift() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_page_shift() }
}

/// `legacy_map`: get_page_size is asked before dma_map, and dma_map's nmap
/// is an int of the core's own (older cores), instead of after dma_map with
/// nmap aliasing `sg_head->nents`.
pub(crate) fn param_legacy_map() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_legacy_map() }
}

/// `notifier_ne`: OFED <= 24.10's notifier end test; a client without
/// invalidation is deregistered without the mapping lock.
pub(crate) fn param_notifier_ne() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_notifier_ne() }
}

/// `refuse_duplicate_names` (or `memory_peers`): a second client of the
/// same name is refused.
pub(crate) fn param_refuse_dups() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_refuse_dups() }
}

/// `fail_mkey`: whether the HW driver's MR creation is to fail for this
/// registration (takes one of the injected failures).
pub(crate) fn take_fail_mkey() -> bool {
    // SAFETY: updates a module parameter atomically; no preconditions.
    unsafe { b::pcsim_glue_take_fail_mkey() }
}

/// `fail_register`: whether this `ib_register_peer_memory_client` is to
/// fail as the core's allocation failing (takes one injected failure).
pub(crate) fn take_fail_register() -> bool {
    // SAFETY: updates a module parameter atomically; no preconditions.
    unsafe { b::pcsim_glue_take_fail_register() }
}

/// `memory_peers`: whether the core has the memory_peers sysfs directory.
pub(crate) fn param_memory_peers() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_memory_peers() }
}

/// `memlock`: charge registrations to RLIMIT_MEMLOCK.
pub(crate) fn param_memlock() -> bool {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_memlock() }
}

/// A charge of pages to a process's RLIMIT_MEMLOCK (`mm->pinned_vm`).
///
/// # Invariants
///
/// `mm` came from `pcsim_glue_memlock_charge(npages)` and is uncharged
/// once, on drop.
pub(crate) struct MemlockCharge {
    mm: NonNull<c_void>,
    npages: u64,
}

// SAFETY: the mm is held (mmgrab) and may be uncharged from any task.
unsafe impl Send for MemlockCharge {}
// SAFETY: never accessed through a shared reference.
unsafe impl Sync for MemlockCharge {}

impl MemlockCharge {
    /// Charges `npages` to the calling process (ENOMEM past its limit
    /// without CAP_IPC_LOCK).
    pub(crate) fn new(npages: u64) -> Result<Self> {
        let mut e = 0;
        // SAFETY: `e` is a writable int; process context.
        let mm = unsafe { b::pcsim_glue_memlock_charge(npages, &mut e) };
        match NonNull::new(mm) {
            Some(mm) => Ok(Self { mm, npages }),
            None => Err(Error::from_errno(if e < 0 { e } else { -12 })),
        }
    }
}

impl Drop for MemlockCharge {
    fn drop(&mut self) {
        // SAFETY: charged by `new`, uncharged once here (invariant).
        unsafe { b::pcsim_glue_memlock_uncharge(self.mm.as_ptr(), self.npages) }
    }
}

/// `register_hold_ms`.
pub(crate) fn param_register_hold_ms() -> u32 {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_register_hold_ms() }
}

/// `unregister_hold_ms`.
pub(crate) fn param_unregister_hold_ms() -> u32 {
    // SAFETY: reads a module parameter.
    unsafe { b::pcsim_glue_param_unregister_hold_ms() }
}

/// `variant`: the core variant's name.
pub(crate) fn param_variant() -> &'static str {
    // SAFETY: the parameter is a NUL-terminated string (or NULL) that
    // lives, unchanged (0444), as long as the module.
    let p = unsafe { b::pcsim_glue_param_variant() };
    if p.is_null() {
        return "";
    }
    // SAFETY: non-NULL, NUL-terminated, lives as long as the module.
    unsafe { CStr::from_ptr(p.cast()) }.to_str().unwrap_or("?")
}

/// A mutex defined in glue.c (so lockdep names it) guarding `T`.
///
/// # Invariants
///
/// `data` is only accessed through a [`GlueGuard`], which exists only while
/// the glue mutex `which` is held.
pub(crate) struct GlueMutex<T> {
    which: u32,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is only reached with the mutex held (type invariant).
unsafe impl<T: Send> Sync for GlueMutex<T> {}

impl<T> GlueMutex<T> {
    /// Wraps `data` with glue mutex `which` (`PCSIM_LOCK_*`).
    pub(crate) const fn new(which: u32, data: T) -> Self {
        Self {
            which,
            data: UnsafeCell::new(data),
        }
    }

    /// Blocks until the mutex is held.
    pub(crate) fn lock(&self) -> GlueGuard<'_, T> {
        // SAFETY: may sleep; callers run in process context.
        unsafe { b::pcsim_glue_lock(self.which) };
        // INVARIANT: the mutex is held.
        GlueGuard { m: self }
    }
}

/// Proof that a [`GlueMutex`] is held.
pub(crate) struct GlueGuard<'a, T> {
    m: &'a GlueMutex<T>,
}

impl<T> Deref for GlueGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the mutex is held while the guard exists.
        unsafe { &*self.m.data.get() }
    }
}

impl<T> DerefMut for GlueGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the reference unique.
        unsafe { &mut *self.m.data.get() }
    }
}

impl<T> Drop for GlueGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this task holds the mutex.
        unsafe { b::pcsim_glue_unlock(self.m.which) }
    }
}

/// The HCA: a PCI device of the machine, held for the module's lifetime.
///
/// # Invariants
///
/// `pdev` is NULL or a referenced PCI device, put once on drop.
pub(crate) struct Hca {
    pdev: *mut b::pci_dev,
}

// SAFETY: a referenced PCI device may be used and put from any task.
unsafe impl Send for Hca {}
// SAFETY: only read after construction.
unsafe impl Sync for Hca {}

impl Hca {
    /// Looks the HCA up (`hca_bdf`, else the first PCI device).
    pub(crate) fn get() -> Self {
        // SAFETY: no preconditions; returns a referenced device or NULL.
        let pdev = unsafe { b::pcsim_glue_hca_get() };
        Self { pdev }
    }

    /// The DMA device for a new registration: the PCI device's, or a
    /// non-PCI device with `hca_nonpci=1` (or if the machine has no PCI).
    pub(crate) fn dma_device(&self) -> DmaDevice {
        let dev = if param_nonpci() || self.pdev.is_null() {
            // SAFETY: the misc device is registered while the module lives.
            unsafe { b::pcsim_glue_nonpci_device() }
        } else {
            // SAFETY: `pdev` is a referenced PCI device (invariant).
            unsafe { b::pcsim_glue_pci_device(self.pdev) }
        };
        DmaDevice { dev }
    }
}

impl Drop for Hca {
    fn drop(&mut self) {
        if !self.pdev.is_null() {
            // SAFETY: referenced by `get` and put once here (invariant).
            unsafe { b::pcsim_glue_hca_put(self.pdev) }
        }
    }
}

/// A `struct device *` passed to clients as `dma_device`.
///
/// # Invariants
///
/// `dev` is a device that lives as long as the module (the HCA's or the
/// misc device's).
#[derive(Clone, Copy)]
pub(crate) struct DmaDevice {
    dev: *mut b::device,
}

// SAFETY: a device pointer valid for the module's lifetime (invariant).
unsafe impl Send for DmaDevice {}
// SAFETY: as above; never written through here.
unsafe impl Sync for DmaDevice {}

impl DmaDevice {
    /// The pointer handed to clients.
    pub(crate) fn as_ptr(self) -> *mut b::device {
        self.dev
    }

    /// Whether the device's DMA goes through a translating IOMMU domain.
    pub(crate) fn translated(self) -> bool {
        // SAFETY: the device lives (invariant); the IOMMU core's domain
        // lookup takes no lock the caller may hold.
        unsafe { b::pcsim_glue_dma_translated(self.dev) }
    }

    /// Where the device's DMA at bus address `dma` lands, as its IOMMU
    /// resolves it (or `dma` itself without one); None: the IOMMU has
    /// nothing mapped there, and the DMA faults.
    pub(crate) fn to_phys(self, dma: u64) -> Option<u64> {
        let mut phys = 0u64;
        // SAFETY: the device lives (invariant); `phys` is a writable u64.
        unsafe { b::pcsim_glue_dma_to_phys(self.dev, dma, &mut phys) }.then_some(phys)
    }

    /// The device's name, for reports.
    pub(crate) fn name(self) -> &'static str {
        // SAFETY: the device lives (invariant); `dev_name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(b::pcsim_glue_dev_name(self.dev).cast()) };
        name.to_str().unwrap_or("?")
    }
}

/// One SG entry as stored in a `struct scatterlist`.
pub(crate) type SgEnt = b::pcsim_sg_ent;

/// The `struct sg_table` the core hands to a client's dma_map.  The
/// structure is the core's; the list the client puts in it is the
/// client's: the core never frees it (a client that does not free its list
/// leaks it, and kmemleak reports that on the debug kernel).
///
/// # Invariants
///
/// `t` was allocated zeroed by `pcsim_glue_sgt_alloc` and is freed once, on
/// drop.  The core uses it only under the registration's mapping lock.
pub(crate) struct SgTable {
    t: NonNull<b::sg_table>,
}

// SAFETY: kernel memory, freed from any task; accesses are serialised by the
// registration's mapping lock.
unsafe impl Send for SgTable {}
// SAFETY: as above.
unsafe impl Sync for SgTable {}

impl SgTable {
    /// An empty table.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: no preconditions.
        let t = NonNull::new(unsafe { b::pcsim_glue_sgt_alloc() }).ok_or(ENOMEM)?;
        Ok(Self { t })
    }

    /// The pointer handed to clients.
    pub(crate) fn as_ptr(&self) -> *mut b::sg_table {
        self.t.as_ptr()
    }

    /// Whether the table holds no list.
    pub(crate) fn is_empty(&self) -> bool {
        // SAFETY: a valid table (invariant).
        unsafe { b::pcsim_glue_sgt_empty(self.t.as_ptr()) }
    }

    /// `&sgt->nents` as the `int *` current cores pass as dma_map's nmap.
    pub(crate) fn nents_ptr(&self) -> *mut i32 {
        // SAFETY: a valid table (invariant); only an address is computed.
        unsafe { b::pcsim_glue_sgt_nents(self.t.as_ptr()) }
    }

    /// (nents, orig_nents).
    pub(crate) fn counts(&self) -> (u32, u32) {
        let (mut n, mut o) = (0, 0);
        // SAFETY: a valid table (invariant); the outputs are valid u32s.
        unsafe { b::pcsim_glue_sgt_counts(self.t.as_ptr(), &mut n, &mut o) };
        (n, o)
    }

    /// Entries `0..count`.
    /// The copy is kvmalloc'd (as the real core's and mlx5's per-entry
    /// arrays): a fragmented host must not fail the core's own bookkeeping.
    pub(crate) fn read(&self, count: u32) -> Result<KVVec<SgEnt>> {
        let mut v = KVVec::new();
        v.extend_with(count as usize, SgEnt::default(), GFP_KERNEL)?;
        // SAFETY: a valid table (invariant); `v` holds `count` entries; the
        // glue walks at most `orig_nents` entries of the client-built list.
        kernel::error::to_result(unsafe {
            b::pcsim_glue_sg_read(self.t.as_ptr(), count, v.as_mut_ptr())
        })?;
        Ok(v)
    }

    /// Clears the core's copy of the table (as the real core does after an
    /// invalidation with `PEER_MEM_INVALIDATE_UNMAPS`): the list is the
    /// client's to free.
    pub(crate) fn clear(&self) {
        // SAFETY: a valid table (invariant); only the structure is cleared.
        unsafe { b::pcsim_glue_sgt_clear(self.t.as_ptr()) }
    }

    /// Overwrites entry `idx`.
    pub(crate) fn set(&self, idx: u32, e: &SgEnt) -> Result {
        // SAFETY: a valid table (invariant); the glue walks at most
        // `orig_nents` entries of the client-built list.
        kernel::error::to_result(unsafe { b::pcsim_glue_sg_set(self.t.as_ptr(), idx, e) })
    }
}

impl Drop for SgTable {
    fn drop(&mut self) {
        // SAFETY: allocated by the glue and freed once here (invariant);
        // the glue frees the structure only, never the client's list.
        unsafe { b::pcsim_glue_sgt_free(self.t.as_ptr()) }
    }
}

/// A `/sys/kernel/mm/memory_peers/<name>/` directory.
///
/// # Invariants
///
/// `dir` came from `pcsim_glue_sysfs_add` and is removed once, on drop.
pub(crate) struct SysfsDir {
    dir: NonNull<c_void>,
}

// SAFETY: a kobject may be removed from any task.
unsafe impl Send for SysfsDir {}

impl SysfsDir {
    /// Creates the directory `name` whose files read `client`'s counters.
    ///
    /// # Safety
    ///
    /// `client` stays valid for `pcsim_rs_client_*` until the directory is
    /// dropped.
    pub(crate) unsafe fn new(name: &CStr, client: *const c_void) -> Result<Self> {
        // SAFETY: `name` is NUL-terminated; `client`'s lifetime is the
        // caller's contract.
        let dir = unsafe { b::pcsim_glue_sysfs_add(name.as_ptr().cast(), client) };
        Ok(Self {
            dir: NonNull::new(dir).ok_or(EEXIST)?,
        })
    }
}

impl Drop for SysfsDir {
    fn drop(&mut self) {
        // SAFETY: made by `new`, removed once here; waits for readers.
        unsafe { b::pcsim_glue_sysfs_del(self.dir.as_ptr()) }
    }
}

type FreeVaFn = unsafe extern "C" fn(u32, u64) -> i32;
type DmaLiveFn = unsafe extern "C" fn(*const b::sim_range, u32) -> i32;
type CallbackWaitsForFn = unsafe extern "C" fn(usize) -> bool;
type TranslateFn = unsafe extern "C" fn(u32, u64, *mut u64) -> i32;
type BarAccessFn = unsafe extern "C" fn(u64, *mut u8, u32, bool) -> i32;

/// The helpers of nvidia_p2p_sim (sim_link.h), if it is loaded.
///
/// # Invariants
///
/// Each symbol is the nvidia_p2p_sim export of the same name, with the
/// prototype in sim_link.h.
pub(crate) struct NvSim {
    free_va: Symbol,
    dma_live: Symbol,
    translate: Symbol,
    callback_waits_for: Symbol,
    bar_access: Symbol,
}

impl NvSim {
    /// The simulated GPU, or `None` if nvidia_p2p_sim is not loaded.
    pub(crate) fn get() -> Option<Self> {
        Some(Self {
            free_va: Symbol::get(c"nvidia_p2p_sim_free_va")?,
            dma_live: Symbol::get(c"nvidia_p2p_sim_dma_live")?,
            translate: Symbol::get(c"nvidia_p2p_sim_translate")?,
            callback_waits_for: Symbol::get(c"nvidia_p2p_sim_callback_waits_for")?,
            bar_access: Symbol::get(c"nvidia_p2p_sim_bar_access")?,
        })
    }

    /// cudaFree(`va`) in process `tgid`.
    pub(crate) fn free_va(&self, tgid: u32, va: u64) -> Result {
        // SAFETY: the prototype of `nvidia_p2p_sim_free_va` (invariant).
        let f = unsafe { core::mem::transmute::<*mut c_void, FreeVaFn>(self.free_va.addr()) };
        // SAFETY: plain values; callable in process context.
        kernel::error::to_result(unsafe { f(tgid, va) })
    }

    /// Ok if every range is live, pinned, DMA-mapped GPU memory.
    pub(crate) fn dma_live(&self, ranges: &[b::sim_range]) -> Result {
        // SAFETY: the prototype of `nvidia_p2p_sim_dma_live` (invariant).
        let f = unsafe { core::mem::transmute::<*mut c_void, DmaLiveFn>(self.dma_live.addr()) };
        // SAFETY: `ranges` is a readable slice of that length.
        kernel::error::to_result(unsafe { f(ranges.as_ptr(), ranges.len() as u32) })
    }

    /// Whether the caller runs a GPU free callback while `task` waits for
    /// the GPU driver's lock that the callback holds.
    pub(crate) fn callback_waits_for(&self, task: usize) -> bool {
        // SAFETY: the prototype of `nvidia_p2p_sim_callback_waits_for`
        // (invariant).
        let f = unsafe {
            core::mem::transmute::<*mut c_void, CallbackWaitsForFn>(self.callback_waits_for.addr())
        };
        // SAFETY: a plain value, compared only.
        unsafe { f(task) }
    }

    /// The HCA's DMA at bus address `bus`: reads into `buf` or (`write`)
    /// writes it; EFAULT where the address is no live pinned, mapped GPU
    /// memory (nothing moved).
    pub(crate) fn bar_access(&self, bus: u64, buf: &mut [u8], write: bool) -> Result {
        let len = u32::try_from(buf.len()).map_err(|_| EINVAL)?;
        // SAFETY: the prototype of `nvidia_p2p_sim_bar_access` (invariant).
        let f = unsafe { core::mem::transmute::<*mut c_void, BarAccessFn>(self.bar_access.addr()) };
        // SAFETY: `buf` is readable and writable for `len` bytes.
        kernel::error::to_result(unsafe { f(bus, buf.as_mut_ptr(), len, write) })
    }

    /// The DMA address of byte `va` of process `tgid`'s GPU memory.
    pub(crate) fn translate(&self, tgid: u32, va: u64) -> Result<u64> {
        // SAFETY: the prototype of `nvidia_p2p_sim_translate` (invariant).
        let f = unsafe { core::mem::transmute::<*mut c_void, TranslateFn>(self.translate.addr()) };
        let mut out = 0u64;
        // SAFETY: `out` is a writable u64.
        kernel::error::to_result(unsafe { f(tgid, va, &mut out) })?;
        Ok(out)
    }
}
