// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers of the module's C glue (rust/glue.c): version, module
//! parameters, this module's reference count, the clock and the work
//! queue.

use core::ptr;

use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full, Release};
use kernel::sync::Arc;
use kernel::workqueue::{HasWork, Queue, WorkItem};

use crate::bindings::glue;

/// A C string owned by the C side for the module's lifetime, as `&str`.
///
/// # Safety
///
/// `ptr` is null or points to a NUL-terminated string that is neither
/// changed nor freed while the module is loaded.
unsafe fn static_str(ptr: *const kernel::ffi::c_char) -> &'static str {
    if ptr.is_null() {
        return "";
    }
    // SAFETY: by this function's contract, `ptr` is a NUL-terminated string
    // that lives as long as the module.
    let s = unsafe { CStr::from_char_ptr(ptr) };
    s.to_str().unwrap_or("(not UTF-8)")
}

/// This module's name (`KBUILD_MODNAME`: peermem_rs, nvidia_peermem).
pub(crate) fn module_name() -> &'static CStr {
    // SAFETY: peermem_module_name has no preconditions and returns a
    // string literal (NUL-terminated, never freed).
    unsafe { CStr::from_char_ptr(glue::peermem_module_name()) }
}

/// The module version (the repository's VERSION file).
pub(crate) fn version() -> &'static str {
    // SAFETY: peermem_version has no preconditions and returns a string
    // literal.
    unsafe { static_str(glue::peermem_version()) }
}

/// How the providers' entry points were bound at build time (also the
/// `binding` field of modinfo): CRC-checked against their Module.symvers,
/// or weak, by name only (the fallback).
pub(crate) fn binding() -> &'static str {
    // SAFETY: peermem_binding has no preconditions and returns a string
    // literal.
    unsafe { static_str(glue::peermem_binding()) }
}

/// The loaded providers this build calls without symbol versions (weak
/// references the loader resolved), when the kernel checks symbol versions
/// and `allow_unversioned` is off: the load is to be refused (rust/glue.c
/// says why).
pub(crate) fn unversioned_refused() -> Option<&'static str> {
    // SAFETY: peermem_unversioned_refused has no preconditions and returns
    // NULL or a string literal.
    let s = unsafe { static_str(glue::peermem_unversioned_refused()) };
    (!s.is_empty()).then_some(s)
}

/// The `peer_client_name` module parameter.
pub(crate) fn param_client_name() -> &'static str {
    // SAFETY: peermem_param_client_name has no preconditions; it returns the
    // parameter, a read-only (0444) charp that lives as long as the module.
    unsafe { static_str(glue::peermem_param_client_name()) }
}

/// Whether the core lists a client named `peer_client_name` in
/// `/sys/kernel/mm/memory_peers/` (only cores that create that directory
/// do, and they refuse a second client of a name).
pub(crate) fn core_lists_client_name() -> bool {
    // SAFETY: no preconditions: looks up sysfs nodes by name, taking and
    // dropping a reference on each one found.
    unsafe { glue::peermem_core_lists_client_name() }
}

/// The `mode` module parameter.
pub(crate) fn param_mode() -> &'static str {
    // SAFETY: peermem_param_mode has no preconditions; it returns the
    // parameter, a read-only (0444) charp that lives as long as the module.
    unsafe { static_str(glue::peermem_param_mode()) }
}

/// Whether the calling task is exiting (its files are being released).
pub(crate) fn current_exiting() -> bool {
    // SAFETY: reads `current`'s flags; no preconditions.
    unsafe { glue::peermem_current_exiting() }
}

/// Whether a log line that a user can trigger (by registering,
/// deregistering or freeing memory) may be printed now: one kernel rate
/// limit, shared by all such lines (10 per 5 s, then a count of the
/// suppressed ones).  Use [`pr_warn_ratelimited!`] / [`pr_err_ratelimited!`].
pub(crate) fn user_log_allowed() -> bool {
    // SAFETY: __ratelimit on the glue's static state; no preconditions.
    unsafe { glue::peermem_user_log_allowed() }
}

/// `pr_warn!`, rate-limited ([`user_log_allowed`]): for lines a user can
/// trigger.  The kernel crate has no ratelimited print.
macro_rules! pr_warn_ratelimited {
    ($($arg:tt)*) => {
        if $crate::glue::user_log_allowed() {
            ::kernel::pr_warn!($($arg)*);
        }
    };
}
pub(crate) use pr_warn_ratelimited;

/// `pr_err!`, rate-limited ([`user_log_allowed`]): for lines a user can
/// trigger.
macro_rules! pr_err_ratelimited {
    ($($arg:tt)*) => {
        if $crate::glue::user_log_allowed() {
            ::kernel::pr_err!($($arg)*);
        }
    };
}
pub(crate) use pr_err_ratelimited;

/// Monotonic clock, nanoseconds.
pub(crate) fn now_ns() -> u64 {
    // SAFETY: ktime_get_ns has no preconditions.
    unsafe { glue::peermem_now_ns() }
}

/// The driver called the free callback of a pin we no longer hold (a
/// contract violation by the driver): one kernel warning.
pub(crate) fn warn_spurious_callback() {
    // SAFETY: WARN_ONCE has no preconditions.
    unsafe { glue::peermem_warn_spurious_callback() }
}

/// The module's work queue while a [`DeferQueue`] owns it, else null.
static QUEUE: Atomic<*mut glue::workqueue_struct> = Atomic::new(ptr::null_mut());

/// Whether a [`DeferQueue`] exists or is being created (there is one work
/// queue).
static QUEUE_CLAIMED: Atomic<bool> = Atomic::new(false);

/// The module's own work queue, where [`defer`]red work runs.
///
/// The kernel crate has no queue a module allocates and destroys (only
/// the system queues, `kernel::workqueue::system*`), so the queue itself
/// is the glue's; the work items are the crate's.
///
/// # Invariants
///
/// At most one value exists at a time.  While it exists, `QUEUE` holds the
/// queue, from `peermem_wq_alloc`; dropping it destroys the queue, which
/// first waits for every queued work.
pub(crate) struct DeferQueue(());

impl DeferQueue {
    /// Creates the queue; `EBUSY` while another `DeferQueue` exists.
    pub(crate) fn create() -> Result<Self> {
        if QUEUE_CLAIMED.xchg(true, Full) {
            return Err(EBUSY);
        }
        // SAFETY: alloc_workqueue has no preconditions; NULL or a queue.
        let wq = unsafe { glue::peermem_wq_alloc() };
        if wq.is_null() {
            QUEUE_CLAIMED.store(false, Release);
            return Err(ENOMEM);
        }
        // INVARIANT: the queue was created, and it is the only one.
        QUEUE.store(wq, Release);
        Ok(DeferQueue(()))
    }
}

impl Drop for DeferQueue {
    fn drop(&mut self) {
        let wq = QUEUE.xchg(ptr::null_mut(), Full);
        // destroy_workqueue drains the queue (waits until every work
        // function returned) before it frees it.
        // SAFETY: `wq` is the live queue (type invariant), destroyed once.
        unsafe { glue::peermem_wq_destroy(wq) };
        QUEUE_CLAIMED.store(false, Release);
    }
}

/// Queues `w` on the module's work queue: its [`WorkItem::run`] gets `w`.
/// Allocates nothing (the work item is embedded in `T`).  For a last
/// reference on the module: module unload waits for the queue, so no code
/// of ours runs after it is gone.  `Err(w)` if `w` is queued already.
///
/// # Safety
///
/// A [`DeferQueue`] exists, and lives until `w`'s work function returned.
pub(crate) unsafe fn defer<T>(w: Arc<T>) -> core::result::Result<(), Arc<T>>
where
    T: WorkItem<Pointer = Arc<T>> + HasWork<T> + Send + Sync + 'static,
{
    let wq = QUEUE.load(Acquire);
    // SAFETY: `Queue::from_raw` needs a workqueue valid for the borrow:
    // `wq` is the live `DeferQueue`'s (this function's contract).
    let queue = unsafe { Queue::from_raw(wq.cast::<kernel::bindings::workqueue_struct>()) };
    queue.enqueue(w)
}

/// A reference on this module: while one exists, `rmmod` is refused.
///
/// # Invariants
///
/// The value owns one reference taken with `try_module_get(THIS_MODULE)`.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference; fails while the module is being unloaded.
    pub(crate) fn get() -> Result<Self> {
        // SAFETY: try_module_get on our own module has no preconditions.
        if unsafe { glue::peermem_module_get() } {
            Ok(ModuleRef(()))
        } else {
            Err(ENODEV)
        }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we own one reference.
        unsafe { glue::peermem_module_put() };
    }
}
