// SPDX-License-Identifier: GPL-2.0

//! The kernel services both simulators use alike, over the shared C glue
//! (common/sim_glue.c, `sim_glue_*`): errno values, the current task, time,
//! warn-once reports, user copies, the work queue (raw, and [`Job`]s),
//! module init/exit and run-time symbol lookup.  Each simulator's `sys` module includes this one
//! and re-exports it next to its own component's services; with them it is
//! the crate's FFI boundary for kernel services.

use core::ffi::{c_void, CStr};
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::bindings as b;

/// `errno` values the kernel crate has no constant for (asm-generic).
#[allow(dead_code)] // each simulator returns some of them
pub(crate) mod errno {
    /// Resource deadlock would occur (avoided: a wait that would hang).
    pub(crate) const EDEADLK: i32 = 35;
    /// Stale file handle: a registration was invalidated (fenced).
    pub(crate) const ESTALE: i32 = 116;
    /// Operation not supported (kernel-internal, what the driver returns).
    pub(crate) const ENOTSUPP: i32 = 524;
}

/// The error for a positive `errno`, or EINVAL for a value out of range.
pub(crate) fn err(errno: i32) -> Error {
    if (1..4096).contains(&errno) {
        Error::from_errno(-errno)
    } else {
        EINVAL
    }
}

/// An identifier of the current task (its address: compared, never
/// dereferenced), never 0.
pub(crate) fn current_task() -> usize {
    // SAFETY: no preconditions; returns `current` as an integer.
    unsafe { b::sim_glue_current() as usize }
}

/// The thread-group id (process id) of the current task.
pub(crate) fn current_tgid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { b::sim_glue_current_tgid() }
}

/// The 64-bit jiffies counter.
pub(crate) fn jiffies() -> u64 {
    // SAFETY: no preconditions.
    unsafe { b::sim_glue_jiffies() }
}

/// Milliseconds elapsed since jiffies value `since`.
pub(crate) fn msecs_since(since: u64) -> u64 {
    // SAFETY: no preconditions.
    unsafe { b::sim_glue_msecs_since(since) }
}

/// The monotonic clock, in nanoseconds.
pub(crate) fn ktime_ns() -> u64 {
    // SAFETY: no preconditions.
    unsafe { b::sim_glue_ktime_ns() }
}

/// Sleeps `ms` milliseconds.
pub(crate) fn msleep(ms: u32) {
    // SAFETY: may sleep; every caller runs in process context.
    unsafe { b::msleep(ms) }
}

/// `WARN` once for violation `kind` (until re-armed).
pub(crate) fn warn_once(kind: u32, name: &CStr) {
    // SAFETY: `name` is a NUL-terminated string valid for the call.
    unsafe { b::sim_glue_warn(kind, name.as_ptr().cast()) }
}

/// Re-arms every violation's `WARN_ONCE`.
pub(crate) fn rearm_warnings() {
    // SAFETY: no preconditions.
    unsafe { b::sim_glue_rearm_warnings() }
}

/// Copies `src` to user address `dst` of the current process.
pub(crate) fn copy_to_user(dst: u64, src: &[u8]) -> Result {
    // SAFETY: `src` is valid for reading `src.len()` bytes; the user address
    // is checked by `copy_to_user`.
    let r = unsafe { b::sim_glue_copy_to_user(dst, src.as_ptr().cast(), src.len()) };
    if r == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}

/// Fills `dst` from user address `src` of the current process.
pub(crate) fn copy_from_user(dst: &mut [u8], src: u64) -> Result {
    // SAFETY: `dst` is valid for writing `dst.len()` bytes; the user address
    // is checked by `copy_from_user`.
    let r = unsafe { b::sim_glue_copy_from_user(dst.as_mut_ptr().cast(), src, dst.len()) };
    if r == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}

/// Runs `f(arg)` on the simulator's work queue (a kernel worker).
///
/// # Safety
///
/// `f(arg)` may be called once, from a kernel worker, at any time after
/// this returns `Ok`: `arg` meets `f`'s contract until then.  On `Err`, `f`
/// is never called.
pub(crate) unsafe fn run_async(f: unsafe extern "C" fn(*mut c_void), arg: *mut c_void) -> Result {
    // SAFETY: the glue queues one work item calling `f(arg)` (the caller's
    // contract covers that call), or returns an error and queues nothing.
    kernel::error::to_result(unsafe { b::sim_glue_run_async(Some(f), arg) })
}

/// Work for the simulator's work queue (see [`spawn`]).
pub(crate) trait Job: Send + Sync + 'static {
    /// Does the work, once, in a kernel worker.
    fn run(&self);
}

/// The work-queue function of [`spawn`].
///
/// # Safety
///
/// `arg` came from `Arc::into_raw` of an `Arc<J>` in `spawn` and is used
/// once.
unsafe extern "C" fn run_job<J: Job>(arg: *mut c_void) {
    // SAFETY: the caller's contract.
    let job = unsafe { Arc::from_raw(arg.cast_const().cast::<J>()) };
    job.run();
}

/// Runs `job.run()` on the simulator's work queue; the queue holds a
/// reference until it ran.
pub(crate) fn spawn<J: Job>(job: Arc<J>) -> Result {
    let raw = Arc::into_raw(job).cast_mut().cast::<c_void>();
    // SAFETY: `raw` is an `Arc<J>` from `into_raw`, used once: what
    // `run_job::<J>` needs.
    unsafe { run_async(run_job::<J>, raw) }.inspect_err(|_| {
        // SAFETY: not queued, so this is the only use of `raw`.
        drop(unsafe { Arc::from_raw(raw.cast_const().cast::<J>()) });
    })
}

/// The component's own set-up (glue.c), the work queue and
/// `/dev/<module>`, made by [`init`] and undone when dropped: the device
/// removed, the jobs still queued waited for, the set-up undone.
///
/// # Invariants
///
/// `sim_glue_init` succeeded, and `sim_glue_exit` has not run.
pub(crate) struct Glue(());

/// Module init: the set-up [`Glue`] stands for.  The module keeps the
/// returned value, the only one, until its exit.
pub(crate) fn init() -> Result<Glue> {
    static DONE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, core::sync::atomic::Ordering::AcqRel) {
        return Err(EBUSY);
    }
    // SAFETY: the first call in this module's life (`DONE`).
    kernel::error::to_result(unsafe { b::sim_glue_init() })?;
    // INVARIANT: the init succeeded; only `Drop` calls the exit.
    Ok(Glue(()))
}

impl Drop for Glue {
    fn drop(&mut self) {
        // SAFETY: after a successful init, once (type invariant).
        unsafe { b::sim_glue_exit() }
    }
}

/// A function of another module, looked up by name and held (the module
/// cannot go away) until dropped.
///
/// # Invariants
///
/// `addr` was returned by `__symbol_get(name)` and is put back on drop.
pub(crate) struct Symbol {
    name: &'static CStr,
    addr: NonNull<c_void>,
}

// SAFETY: a `Symbol` is the address of another module's exported function
// and a reference on that module; exported functions are callable from any
// task, and `__symbol_put` may drop the reference from any task.
unsafe impl Send for Symbol {}
// SAFETY: as above; `&Symbol` only reads the address.
unsafe impl Sync for Symbol {}

impl Symbol {
    /// Looks `name` up; `None` if no loaded module exports it.
    pub(crate) fn get(name: &'static CStr) -> Option<Self> {
        // SAFETY: `name` is a NUL-terminated string.
        let p = unsafe { b::__symbol_get(name.as_ptr().cast()) };
        Some(Self {
            name,
            addr: NonNull::new(p)?,
        })
    }

    /// The symbol's address.
    pub(crate) fn addr(&self) -> *mut c_void {
        self.addr.as_ptr()
    }
}

impl Drop for Symbol {
    fn drop(&mut self) {
        // SAFETY: the symbol was got by name and is put back once (invariant).
        unsafe { b::__symbol_put(self.name.as_ptr().cast()) }
    }
}
