// SPDX-License-Identifier: GPL-2.0

//! Every entry point of nvidia_p2p_sim.ko in one place: the exported NVIDIA
//! P2P API (glue.c exports these symbols GPL-only), the helpers for
//! peer_core_sim and for the persistent-API companion module, and the
//! character device's operations.  Arguments are checked here; errors become
//! errno values only here.

use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use kernel::error::from_result;
use kernel::prelude::*;

use crate::access;
use crate::bindings::{
    nvidia_p2p_dma_mapping, nvidia_p2p_free_callback_t, nvidia_p2p_page_table, nvsim_alloc,
    nvsim_cost, nvsim_delay, nvsim_fault, nvsim_free, nvsim_hook, nvsim_memcpy, nvsim_share,
    pci_dev, sim_range, NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING,
};
use crate::gpu::PinArgs;
use crate::hooks::{self, Site};
use crate::latency::{self, Op};
use crate::lock::{FreeCallback, API};
use crate::mapping::Linked;
use crate::memory::GPU_PAGE;
use crate::sys;
use crate::violation::{self, Call, Kind};

/// Reports a `BadArgs` violation and returns -EINVAL.
fn bad_args(call: Call, what: &str) -> Error {
    violation::report(
        Kind::BadArgs,
        format_args!("nvidia_p2p_{}: {}", call.name(), what),
    );
    EINVAL
}

/// VA and length must be non-zero multiples of 64 KiB.
fn check_range(call: Call, va: u64, len: u64) -> Result {
    if va % GPU_PAGE != 0 || len % GPU_PAGE != 0 || len == 0 {
        violation::report(
            Kind::Misaligned,
            format_args!(
                "nvidia_p2p_{}: VA {:#x} length {:#x} not 64 KiB aligned",
                call.name(),
                va,
                len
            ),
        );
        return Err(EINVAL);
    }
    if va.checked_add(len).is_none() {
        return Err(bad_args(call, "VA + length overflows"));
    }
    Ok(())
}

/// The peer device of a mapping call: non-NULL and a PCI device.
fn check_peer(call: Call, peer: *mut pci_dev) -> Result<NonNull<pci_dev>> {
    let peer = NonNull::new(peer).ok_or_else(|| bad_args(call, "peer is NULL"))?;
    if !sys::is_pci(peer) {
        violation::report(
            Kind::NonPciPeer,
            format_args!(
                "nvidia_p2p_{}: the peer is not a PCI device (to_pci_dev of another device?)",
                call.name()
            ),
        );
        return Err(EINVAL);
    }
    Ok(peer)
}

/// Pins GPU memory of the calling process; the free callback runs if the
/// memory is freed while pinned.
///
/// # Safety
///
/// `page_table` is NULL or valid for writing a pointer; `free_callback` may
/// be called with `data` until the pin is released or the callback ran.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_get_pages(
    p2p_token: u64,
    va_space: u32,
    virtual_address: u64,
    length: u64,
    page_table: *mut *mut nvidia_p2p_page_table,
    free_callback: nvidia_p2p_free_callback_t,
    data: *mut c_void,
) -> c_int {
    let call = Call::GetPages;
    let _timed = call.timed();
    from_result(|| {
        check_range(call, virtual_address, length)?;
        if p2p_token != 0 || va_space != 0 {
            return Err(bad_args(call, "p2p_token and va_space must be 0"));
        }
        let out = NonNull::new(page_table).ok_or_else(|| bad_args(call, "page_table is NULL"))?;
        let Some(cb) = free_callback else {
            violation::report(
                Kind::NullCallback,
                format_args!("nvidia_p2p_get_pages without a free callback"),
            );
            return Err(EINVAL);
        };
        // SAFETY: the caller's contract: `cb` may be called with `data`
        // while the pin lives.
        let callback = unsafe { FreeCallback::new(cb) };
        let args = PinArgs {
            va: virtual_address,
            len: length,
            persistent: false,
            force_bar1: false,
            callback: None,
            data: 0,
        };
        let pages = length / GPU_PAGE;
        // As the driver: pin in one API-lock hold, register the callback
        // in a second; a cudaFree in between tears the pin down with no
        // callback, and the get fails.
        let api = API.lock_for(call)?;
        let table = api.state().pin(args)?;
        latency::charge(Op::Pin, pages);
        let pin = api.state().pin_serial(table as usize);
        drop(api);
        if let Some((_, owner, va)) = pin {
            hooks::fire(Site::GetPages, owner, va);
        }
        let api = API.lock_for(call)?;
        let serial = pin.map_or(0, |(serial, _, _)| serial);
        api.state()
            .register_callback(serial, callback, data as usize)?;
        drop(api);
        // As the driver: nothing holds the pin between registering its
        // callback and returning it (nv-p2p.c `nv_p2p_get_pages`): a free
        // then calls the callback before the caller has the table, which
        // is freed when it gets it.
        if let Some((_, owner, va)) = pin {
            hooks::fire(Site::GetPagesReturn, owner, va);
        }
        // SAFETY: `out` is non-NULL and valid for writing (caller's contract).
        unsafe { out.as_ptr().write(table) };
        Ok(0)
    })
}

/// Releases a pin of `nvidia_p2p_get_pages`; from a process other than the
/// pinning one (or a kernel thread) it finds no pin and returns 0.
///
/// # Safety
///
/// None beyond the C prototype: `page_table` is only compared, never read.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_put_pages(
    p2p_token: u64,
    va_space: u32,
    virtual_address: u64,
    page_table: *mut nvidia_p2p_page_table,
) -> c_int {
    let call = Call::PutPages;
    let _timed = call.timed();
    let seq = API.retire_seq();
    from_result(|| {
        if p2p_token != 0 || va_space != 0 {
            return Err(bad_args(call, "p2p_token and va_space must be 0"));
        }
        if page_table.is_null() {
            return Err(bad_args(call, "page_table is NULL"));
        }
        // On its way to the API lock (a cudaFree may run first).  The
        // state lock is dropped before the hook takes it again.
        let pin = API.state().pin_owner(page_table as usize);
        if let Some((owner, va)) = pin {
            hooks::fire(Site::Put, owner, va);
        }
        let api = API.lock_for(call)?;
        let pages = api.state().table_pages(page_table as usize);
        api.state()
            .unpin(call, virtual_address, page_table as usize, false, seq)?;
        latency::charge(Op::Unpin, pages);
        drop(api);
        Ok(0)
    })
}

/// Pins GPU memory with no free callback (re-exported under the real name
/// by nvidia_p2p_sim_persistent.ko).
///
/// # Safety
///
/// `page_table` is NULL or valid for writing a pointer.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_get_pages_persistent(
    virtual_address: u64,
    length: u64,
    page_table: *mut *mut nvidia_p2p_page_table,
    flags: u32,
) -> c_int {
    let call = Call::GetPagesPersistent;
    let _timed = call.timed();
    from_result(|| {
        check_range(call, virtual_address, length)?;
        if flags & !NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING != 0 {
            return Err(bad_args(call, "unknown flags"));
        }
        let out = NonNull::new(page_table).ok_or_else(|| bad_args(call, "page_table is NULL"))?;
        if !sys::param::persistent_supported() {
            return Err(sys::err(sys::errno::ENOTSUPP));
        }
        let args = PinArgs {
            va: virtual_address,
            len: length,
            persistent: true,
            force_bar1: flags & NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING != 0,
            callback: None,
            data: 0,
        };
        let pages = length / GPU_PAGE;
        let api = API.lock_for(call)?;
        let table = api.state().pin(args)?;
        latency::charge(Op::Pin, pages);
        drop(api);
        // SAFETY: `out` is non-NULL and valid for writing (caller's contract).
        unsafe { out.as_ptr().write(table) };
        Ok(0)
    })
}

/// Releases a persistent pin.
///
/// # Safety
///
/// None beyond the C prototype: `page_table` is only compared, never read.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_put_pages_persistent(
    virtual_address: u64,
    page_table: *mut nvidia_p2p_page_table,
    flags: u32,
) -> c_int {
    let call = Call::PutPagesPersistent;
    let _timed = call.timed();
    let seq = API.retire_seq();
    from_result(|| {
        if flags != 0 {
            return Err(bad_args(call, "flags must be 0"));
        }
        if page_table.is_null() {
            return Err(bad_args(call, "page_table is NULL"));
        }
        let api = API.lock_for(call)?;
        let pages = api.state().table_pages(page_table as usize);
        api.state()
            .unpin(call, virtual_address, page_table as usize, true, seq)?;
        latency::charge(Op::Unpin, pages);
        drop(api);
        Ok(0)
    })
}

/// A no-op in current drivers, kept for callers.
///
/// # Safety
///
/// None: the argument is not used.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_free_page_table(_page_table: *mut nvidia_p2p_page_table) -> c_int {
    Call::FreePageTable.count();
    0
}

/// Maps a pinned table's pages for DMA by `peer`.
///
/// # Safety
///
/// `peer` is NULL or points into a `struct device` at its `dev` member;
/// `dma_mapping` is NULL or valid for writing a pointer.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_dma_map_pages(
    peer: *mut pci_dev,
    page_table: *mut nvidia_p2p_page_table,
    dma_mapping: *mut *mut nvidia_p2p_dma_mapping,
) -> c_int {
    let call = Call::DmaMapPages;
    let _timed = call.timed();
    let seq = API.retire_seq();
    from_result(|| {
        let peer = check_peer(call, peer)?;
        if page_table.is_null() {
            return Err(bad_args(call, "page_table is NULL"));
        }
        let out = NonNull::new(dma_mapping).ok_or_else(|| bad_args(call, "dma_mapping is NULL"))?;
        API.not_in_callback(call)?;
        // Prologue, without the API lock: the table and its bookkeeping.
        // Like the driver, it reads the table it is given, also one freed
        // after its callback (whether in the documented window or not).
        let freed = API.state().table_freed_by_callback(page_table as usize);
        if freed {
            prologue_raced(page_table as usize);
        }
        let mut pro = API.state().map_prologue(page_table as usize, seq, peer)?;
        hooks::fire(Site::MapPrologue, pro.owner, pro.va);
        let api = API.lock_for(call)?;
        let freed = api.state().map_locked(&mut pro, peer)?;
        latency::charge(Op::Map, api.state().table_pages(page_table as usize));
        drop(api);
        if freed {
            prologue_raced(pro.table);
        }
        // Epilogue, without the API lock: link the mapping.
        hooks::fire(Site::MapEpilogue, pro.owner, pro.va);
        let table = pro.table;
        let mapping = match API.state().map_epilogue(pro, peer)? {
            Linked::Into(m) => m,
            Linked::IntoFreed(m) => {
                epilogue_raced(table);
                m
            }
        };
        // SAFETY: `out` is non-NULL and valid for writing (caller's contract).
        unsafe { out.as_ptr().write(mapping) };
        Ok(0)
    })
}

/// A cudaFree freed the page table during dma_map_pages' prologue: the
/// real driver goes on reading it (`driver_reads`, default on), and maps
/// the freed memory's addresses it read.
fn prologue_raced(table: usize) {
    // With reuse_freed=0 the header was freed for real (KFENCE may have
    // unmapped it): the read would oops the test machine, not report.
    if !sys::param::driver_reads() || !sys::param::reuse_freed() {
        pr_info!("nvidia_p2p_dma_map_pages: the page table was freed by a cudaFree (prologue)\n");
        return;
    }
    // `table` was a live page table of this simulator when the prologue
    // found it; freed since, its header is held in the object cache.
    // SAFETY: that header is still allocated (reuse_freed): the read
    // cannot fault (driver_reads_table's contract).
    let (page_size, entries) = unsafe { crate::abi::driver_reads_table(table) };
    pr_info!(
        "nvidia_p2p_dma_map_pages: the page table was freed by a cudaFree (prologue); the \
         driver read page size type {:#x}, {} entries from it (the real driver can hit its \
         BUG_ON on the page size here; past it, it maps what it read)\n",
        page_size,
        entries
    );
}

/// A cudaFree freed the allocation's bookkeeping during dma_map_pages'
/// epilogue: the real driver links the new mapping into it, a write into
/// freed memory (`driver_reads`, default on).
fn epilogue_raced(table: usize) {
    if !sys::param::driver_reads() || !sys::param::reuse_freed() {
        return;
    }
    if sys::driver_links_freed(table) {
        pr_info!(
            "nvidia_p2p_dma_map_pages: the driver linked the mapping into the freed bookkeeping \
             (a write into freed memory)\n"
        );
    } else {
        pr_info!("nvidia_p2p_dma_map_pages: the freed table's memory was reused meanwhile\n");
    }
}

/// Releases a DMA mapping.  Takes no API lock (only the allocation's
/// mapping-list lock): it may run while a free callback runs, and from
/// inside one.  Like the driver, it reads the mapping it is given first: a
/// mapping freed after its callback is a KASAN report here.
///
/// # Safety
///
/// `peer` is NULL or points into a `struct device` at its `dev` member; the
/// other pointers are only compared.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_dma_unmap_pages(
    peer: *mut pci_dev,
    page_table: *mut nvidia_p2p_page_table,
    dma_mapping: *mut nvidia_p2p_dma_mapping,
) -> c_int {
    let call = Call::DmaUnmapPages;
    let _timed = call.timed();
    let seq = API.retire_seq();
    from_result(|| {
        let peer = check_peer(call, peer)?;
        if page_table.is_null() || dma_mapping.is_null() {
            return Err(bad_args(call, "page_table or dma_mapping is NULL"));
        }
        // No API lock, so also from inside a free callback it works, as in
        // the real driver (nv-p2p.c takes only the mapping list's lock).
        // Like the driver, read what it is given first: a mapping freed
        // after its callback is a use after free (the client's, reported
        // below); one freed with its pin by another client's late put is
        // one too, whoever is to blame (nv-p2p.c
        // `nvidia_p2p_dma_unmap_pages` takes the list lock inside the
        // table's bookkeeping, which that put freed).
        let freed = API.state().mapping_freed_by_driver(dma_mapping as usize);
        if freed && sys::param::driver_reads() && sys::param::reuse_freed() {
            // The simulator handed this mapping out and the driver freed it
            // on its side (or never: an epilogue's orphan).
            // SAFETY: its header is in the object cache (reuse_freed) or
            // live, so still allocated (driver_reads_mapping's contract).
            let _ = unsafe { crate::abi::driver_reads_mapping(dma_mapping as usize) };
        }
        let pages = API.state().mapping_pages(dma_mapping as usize);
        let u = API
            .state()
            .unmap_begin(peer, page_table as usize, dma_mapping as usize, seq)?;
        latency::charge(Op::Unmap, pages);
        if let Some(u) = u {
            hooks::fire(Site::Unmap, u.owner, u.va);
            API.state().unmap_end(u);
        }
        Ok(0)
    })
}

/// A no-op in current drivers, kept for callers.
///
/// # Safety
///
/// None: the argument is not used.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_free_dma_mapping(
    _dma_mapping: *mut nvidia_p2p_dma_mapping,
) -> c_int {
    Call::FreeDmaMapping.count();
    0
}

/// cudaFree of `va` in process `tgid`'s VA space (peer_core_sim's hooks).
///
/// # Safety
///
/// None: plain values.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_free_va(tgid: u32, va: u64) -> c_int {
    from_result(|| {
        let r = API.lock().free_va(tgid, va);
        sys::notify_core_freed();
        r.map(|()| 0)
    })
}

/// Whether the caller runs a free callback while task `task` waits for
/// the API lock (peer_core_sim: an invalidation about to wait for a
/// mapping lock that `task` holds would deadlock).
///
/// # Safety
///
/// None: plain values.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_callback_waits_for(task: usize) -> bool {
    API.callback_waits_for(task)
}

/// 0 if all `count` ranges are live, pinned, DMA-mapped GPU memory.
///
/// # Safety
///
/// `ranges` points to `count` readable `struct sim_range` (or `count` is 0).
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_dma_live(ranges: *const sim_range, count: u32) -> c_int {
    from_result(|| {
        let ranges = if count == 0 || ranges.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller's contract.
            unsafe { core::slice::from_raw_parts(ranges, count as usize) }
        };
        API.state().dma_live(ranges)?;
        Ok(0)
    })
}

/// The DMA address of byte `va` of process `tgid`'s GPU memory.
///
/// # Safety
///
/// `dma_address` is valid for writing a u64.
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_translate(tgid: u32, va: u64, dma_address: *mut u64) -> c_int {
    from_result(|| {
        let out = NonNull::new(dma_address).ok_or(EINVAL)?;
        let addr = API.state().translate(tgid, va)?;
        // SAFETY: the caller's contract.
        unsafe { out.as_ptr().write(addr) };
        Ok(0)
    })
}

/// A peer's DMA through the BAR: `len` bytes at bus address `bus`.
///
/// # Safety
///
/// `buf` is valid for reading and writing `len` bytes (or `len` is 0).
#[no_mangle]
unsafe extern "C" fn nvidia_p2p_sim_bar_access(
    bus: u64,
    buf: *mut u8,
    len: u32,
    write: bool,
) -> c_int {
    from_result(|| {
        let buf = if len == 0 || buf.is_null() {
            &mut [][..]
        } else {
            // SAFETY: the caller's contract.
            unsafe { core::slice::from_raw_parts_mut(buf, len as usize) }
        };
        API.state().bar_access(bus, buf, write)?;
        Ok(0)
    })
}

// --- the character device (common/sim_glue.c's file_operations) ----------

#[path = "../common/entry.rs"]
mod common;
use common::with_ctx;
pub(crate) use common::SimFile;

/// `NVSIM_IOC_ALLOC`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_alloc(context: *mut c_void, arg: *mut nvsim_alloc) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.alloc(a)) }
}

/// `NVSIM_IOC_FREE`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_free(context: *mut c_void, arg: *mut nvsim_free) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.free(a)) }
}

/// `NVSIM_IOC_FAULT`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_fault(context: *mut c_void, arg: *mut nvsim_fault) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.fault(a)) }
}

/// `NVSIM_IOC_DELAY`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_delay(context: *mut c_void, arg: *mut nvsim_delay) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.delay(a)) }
}

/// `NVSIM_IOC_SHARE`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_share(context: *mut c_void, arg: *mut nvsim_share) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.share(a)) }
}

/// `NVSIM_IOC_MEMCPY`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_memcpy(context: *mut c_void, arg: *mut nvsim_memcpy) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |_, a| access::memcpy(a)) }
}

/// `NVSIM_IOC_HOOK`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_hook(context: *mut c_void, arg: *mut nvsim_hook) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |_, a| API.state().hooks.set(a)) }
}

/// `NVSIM_IOC_COST`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn nvsim_rs_ioctl_cost(context: *mut c_void, arg: *mut nvsim_cost) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |_, a| latency::ideal(a)) }
}
