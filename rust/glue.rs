// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers of the module's C glue (rust/glue.c): version, module
//! parameters, this module's reference count, the clock and debugfs.

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

use kernel::prelude::*;

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

/// The providers this build calls without symbol versions, when the kernel
/// checks symbol versions and `allow_unversioned` is off: the load is to be
/// refused (rust/glue.c says why).
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

/// Whether a [`DeferQueue`] exists (there is one work queue).
static QUEUE_EXISTS: AtomicBool = AtomicBool::new(false);

/// The module's own work queue, where [`Deferred`] work runs.
///
/// # Invariants
///
/// At most one value exists at a time, and while it exists the glue's work
/// queue exists; dropping it destroys the queue, which first waits for
/// every queued work.
pub(crate) struct DeferQueue(());

impl DeferQueue {
    /// Creates the queue; `EBUSY` while another `DeferQueue` exists (the
    /// glue has one queue).
    pub(crate) fn create() -> Result<Self> {
        if QUEUE_EXISTS.swap(true, Ordering::AcqRel) {
            return Err(EBUSY);
        }
        // SAFETY: `QUEUE_EXISTS` was false: no queue exists or is in use.
        let rc = unsafe { glue::peermem_defer_init() };
        if let Err(e) = kernel::error::to_result(rc) {
            QUEUE_EXISTS.store(false, Ordering::Release);
            return Err(e);
        }
        // INVARIANT: the queue was created, and it is the only one.
        Ok(DeferQueue(()))
    }
}

impl Drop for DeferQueue {
    fn drop(&mut self) {
        // SAFETY: the queue exists (type invariant); destroy_workqueue
        // drains it (waits until every work function returned) first.
        unsafe { glue::peermem_defer_exit() };
        QUEUE_EXISTS.store(false, Ordering::Release);
    }
}

/// A work item for the module's work queue, allocated ahead of the one use
/// that must not fail: queueing it allocates nothing.  For a last
/// reference on the module: module unload waits for the queue, so no code
/// of ours runs after it is gone.
///
/// # Invariants
///
/// `ptr` comes from `peermem_deferred_alloc` and is freed (once) by `drop`.
pub(crate) struct Deferred {
    ptr: NonNull<glue::peermem_deferred>,
}

// SAFETY: a work item may be queued from any thread, and freed from any
// thread once its work function started (the glue touches it no more).
unsafe impl Send for Deferred {}
// SAFETY: `queue_work` tests and sets the item's pending bit atomically.
unsafe impl Sync for Deferred {}

impl Deferred {
    /// A new, idle work item.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: no preconditions; returns NULL or an idle work item.
        let ptr = unsafe { glue::peermem_deferred_alloc() };
        // INVARIANT: from `peermem_deferred_alloc`.
        Ok(Deferred {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
        })
    }

    /// Runs `f(arg)` on the module's work queue.
    ///
    /// # Safety
    ///
    /// A [`DeferQueue`] exists, and lives until `f` returned.  `f(arg)` is
    /// sound to call once, on any thread.  `self` is not queued again
    /// before `f` started, and lives until `f` started (`f` may drop it).
    pub(crate) unsafe fn queue(&self, f: unsafe extern "C" fn(*mut c_void), arg: *mut c_void) {
        // SAFETY: `ptr` is an allocated work item (type invariant), not
        // pending (this function's contract); the queue exists (contract).
        unsafe { glue::peermem_deferred_queue(self.ptr.as_ptr(), Some(f), arg) }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: from `peermem_deferred_alloc` (type invariant), freed
        // once; not pending (`queue`'s contract: `f` started already).
        unsafe { glue::peermem_deferred_free(self.ptr.as_ptr()) }
    }
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

/// The debugfs directory `<module name>/` with the `stats` file (root only).
///
/// # Invariants
///
/// While the value lives, the directory exists (created by
/// `peermem_debugfs_create`).
pub(crate) struct DebugFs(());

/// Proof that the stats file is gone: nobody reads it any more.
pub(crate) struct StatsRemoved(());

impl DebugFs {
    /// Removes the directory (if it was created); returns once no reader of
    /// the stats file is left.
    pub(crate) fn remove(this: Option<Self>) -> StatsRemoved {
        drop(this);
        StatsRemoved(())
    }

    /// Creates the directory and the stats file; fails while they exist.
    pub(crate) fn create() -> Result<Self> {
        // A second call while the directory exists fails and changes
        // nothing: debugfs_create_dir returns ERR_PTR(-EEXIST) for a name
        // taken (fs/debugfs/inode.c `start_creating`), and the glue keeps
        // the directory only on success.
        // SAFETY: peermem_debugfs_create has no preconditions (above).
        kernel::error::to_result(unsafe { glue::peermem_debugfs_create() })?;
        // INVARIANT: the directory was created by this call.
        Ok(DebugFs(()))
    }
}

impl Drop for DebugFs {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the directory exists; removing it
        // waits for readers of `stats` to finish.
        unsafe { glue::peermem_debugfs_remove() };
    }
}

/// A `core::fmt::Write` sink into a seq_file (the debugfs `stats` read).
pub(crate) struct SeqWriter {
    seq: NonNull<crate::bindings::seq_file>,
}

impl SeqWriter {
    /// # Safety
    ///
    /// `seq` must be the seq_file of a `show` call in progress, and the
    /// writer must not outlive that call.
    pub(crate) unsafe fn new(seq: NonNull<crate::bindings::seq_file>) -> Self {
        SeqWriter { seq }
    }
}

impl core::fmt::Write for SeqWriter {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: by the contract of `new`, `seq` is valid; `s` is valid for
        // `s.len()` bytes.
        unsafe { glue::peermem_seq_write(self.seq.as_ptr(), s.as_ptr().cast(), s.len()) };
        Ok(())
    }
}
