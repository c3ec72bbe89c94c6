// SPDX-License-Identifier: GPL-2.0

//! Every entry point of peer_core_sim.ko in one place: the exported
//! peer-memory API (glue.c exports these symbols), the invalidate callback
//! handed to clients, the hook for nvidia_p2p_sim, the sysfs readers, the
//! work-queue job and the character device's operations.  Errors become
//! errno values only here.

use core::ffi::{c_char, c_int, c_void};
use kernel::error::from_result;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::bindings::{
    invalidate_peer_memory, pcsim_dereg, pcsim_dma, pcsim_handle, pcsim_query, pcsim_reg,
    peer_memory_client, IB_PEER_MEMORY_VER_MAX,
};
use crate::client::{self, Client};
use crate::mr;
use crate::sys;

/// Registers a peer-memory client; NULL on failure (e.g. a duplicate name).
///
/// # Safety
///
/// `client` points to a `struct peer_memory_client` (plus the `_ex` fields
/// when `version[15] != 0`) that stays valid, with callable callbacks, until
/// `ib_unregister_peer_memory_client` returns; `invalidate_callback` is NULL
/// or valid for writing a function pointer.
#[no_mangle]
unsafe extern "C" fn ib_register_peer_memory_client(
    client: *const peer_memory_client,
    invalidate_callback: *mut invalidate_peer_memory,
) -> *mut c_void {
    let invalidation = !invalidate_callback.is_null();
    // As the real core, the invalidate entry point is written before the
    // client is published (acquire may run before this returns, the
    // invalidate pointer is set by then).
    let before_publish = || {
        if invalidation {
            // SAFETY: non-NULL and writable (caller's contract).
            unsafe { invalidate_callback.write(Some(pcsim_invalidate)) };
        }
    };
    // SAFETY: the caller's contract.
    match unsafe { client::register(client, invalidation, before_publish) } {
        Ok(c) => {
            // The client is published (acquire may be called) before this
            // returns, so before the client can know its handle.
            let hold = sys::param_register_hold_ms();
            if hold > 0 {
                pr_info!(
                    "ib_register_peer_memory_client: client published, holding {} ms before returning\n",
                    hold
                );
                sys::hold(sys::param_register_hold_ms);
            }
            client::handle_of(&c) as *mut c_void
        }
        Err(why) => {
            pr_err!("ib_register_peer_memory_client failed: {}\n", why);
            core::ptr::null_mut()
        }
    }
}

/// Unregisters a client; blocks until its registrations are gone.
///
/// # Safety
///
/// None: an unknown handle is reported, never dereferenced.
#[no_mangle]
unsafe extern "C" fn ib_unregister_peer_memory_client(reg_handle: *mut c_void) {
    client::unregister(reg_handle as usize);
}

/// The invalidate callback given to invalidation clients.
///
/// # Safety
///
/// None: the handle and id are looked up, never dereferenced.
unsafe extern "C" fn pcsim_invalidate(reg_handle: *mut c_void, core_context: u64) -> c_int {
    from_result(|| mr::invalidate(reg_handle as usize, core_context).map(|()| 0))
}

/// Called by nvidia_p2p_sim after GPU memory was freed.
///
/// # Safety
///
/// None.
#[no_mangle]
unsafe extern "C" fn peer_core_sim_gpu_freed() {
    mr::sweep();
}

/// A counter of `/sys/kernel/mm/memory_peers/<name>/`.
///
/// # Safety
///
/// `client` is the pointer given to `pcsim_glue_sysfs_add`, whose directory
/// still exists (so the client does).
#[no_mangle]
unsafe extern "C" fn pcsim_rs_client_stat(client: *const c_void, attr: u32) -> u64 {
    // SAFETY: the caller's contract.
    let c = unsafe { &*client.cast::<Client>() };
    c.stat(attr)
}

/// The `version` file: the client's version string.
///
/// # Safety
///
/// As `pcsim_rs_client_stat`; `buf` holds at least 17 bytes.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_client_version(client: *const c_void, buf: *mut c_char) {
    // SAFETY: the caller's contract.
    let c = unsafe { &*client.cast::<Client>() };
    let v = c.version();
    let n = v.len().min(IB_PEER_MEMORY_VER_MAX as usize);
    // SAFETY: `buf` holds 17 bytes; `n <= 16`.
    unsafe {
        core::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
}

// --- the character device (common/sim_glue.c's file_operations) ----------

#[path = "../common/entry.rs"]
mod common;
use common::with_ctx;
pub(crate) use common::SimFile;

/// `PCSIM_IOC_REG`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_reg(context: *mut c_void, arg: *mut pcsim_reg) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.reg(a)) }
}

/// `PCSIM_IOC_DEREG`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_dereg(context: *mut c_void, arg: *mut pcsim_handle) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.dereg(a)) }
}

/// `PCSIM_IOC_DEREG_TIMED`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_dereg_timed(
    context: *mut c_void,
    arg: *mut pcsim_dereg,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.dereg_timed(a)) }
}

/// `PCSIM_IOC_DMA_CHECK`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_dma_check(
    context: *mut c_void,
    arg: *mut pcsim_handle,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.dma_check(a)) }
}

/// `PCSIM_IOC_DMA`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_dma(context: *mut c_void, arg: *mut pcsim_dma) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.dma(a)) }
}

/// `PCSIM_IOC_QUERY`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_query(context: *mut c_void, arg: *mut pcsim_query) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.query(a)) }
}

/// `PCSIM_IOC_DISASSOCIATE`.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_ioctl_disassociate(
    context: *mut c_void,
    arg: *mut pcsim_handle,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_ctx(context, arg, |c, a| c.disassociate(a)) }
}

/// The work-queue function of a disassociate: deregisters in a kworker.
///
/// # Safety
///
/// `arg` came from `KBox::into_raw` in `spawn_dereg` and is used once.
unsafe extern "C" fn pcsim_dereg_job(arg: *mut c_void) {
    // SAFETY: the caller's contract.
    let job = unsafe { KBox::from_raw(arg.cast::<DeregJob>()) };
    let DeregJob { reg, done } = KBox::into_inner(job);
    mr::deregister(reg);
    done.store(true, core::sync::atomic::Ordering::Release);
}

/// A deregistration for the work queue.
pub(crate) struct DeregJob {
    pub(crate) reg: Arc<crate::reg::Reg>,
    pub(crate) done: Arc<core::sync::atomic::AtomicBool>,
}

/// Starts `job` on the core's work queue; if it cannot be queued, the
/// registration is deregistered here instead (never lost) and the error
/// returned.
pub(crate) fn spawn_dereg(job: KBox<DeregJob>) -> Result {
    let raw = KBox::into_raw(job).cast::<c_void>();
    // SAFETY: `raw` is a `KBox<DeregJob>` from `into_raw`, used once: what
    // `pcsim_dereg_job` needs.
    unsafe { sys::run_async(pcsim_dereg_job, raw) }.inspect_err(|_| {
        // SAFETY: not queued, so this is the only use of `raw`.
        let job = unsafe { KBox::from_raw(raw.cast::<DeregJob>()) };
        let DeregJob { reg, .. } = KBox::into_inner(job);
        mr::deregister(reg);
    })
}

// --- the soft RDMA device's table (glue.c: peer_core_sim_hca) -------------

/// `peer_core_sim_hca.mr_get`: an MR of the calling process.
///
/// # Safety
///
/// `handle` is valid for writing a u32.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_hca_mr_get(
    va: u64,
    len: u64,
    access: u32,
    handle: *mut u32,
) -> c_int {
    from_result(|| {
        let out = core::ptr::NonNull::new(handle).ok_or(EINVAL)?;
        let h = crate::device::mr_get(va, len, access)?;
        // SAFETY: the caller's contract.
        unsafe { out.as_ptr().write(h) };
        Ok(0)
    })
}

/// `peer_core_sim_hca.mr_dma`: the device's DMA through MR `handle`.
///
/// # Safety
///
/// `buf` is valid for reading and writing `len` bytes (or `len` is 0), and
/// nothing else accesses it during the call.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_hca_mr_dma(
    handle: u32,
    va: u64,
    buf: *mut u8,
    len: u64,
    write: bool,
) -> c_int {
    from_result(|| {
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        let buf = if len == 0 || buf.is_null() {
            &mut [][..]
        } else {
            // SAFETY: the caller's contract.
            unsafe { core::slice::from_raw_parts_mut(buf, len) }
        };
        crate::device::mr_dma(handle, va, buf, write).map(|()| 0)
    })
}

/// `peer_core_sim_hca.mr_put`: deregisters MR `handle`.
///
/// # Safety
///
/// None: the handle is looked up; an unknown one is reported.
#[no_mangle]
unsafe extern "C" fn pcsim_rs_hca_mr_put(handle: u32) {
    crate::device::mr_put(handle);
}
