// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers of the module's C glue (rust/glue.c): version, module
//! parameters, this module's reference count, the clock and debugfs.

use core::ffi::CStr;
use core::ptr::NonNull;

use kernel::prelude::*;

use crate::bindings::glue;

/// A C string owned by the C side for the module's lifetime, as `&str`.
fn static_str(ptr: *const kernel::ffi::c_char) -> &'static str {
    if ptr.is_null() {
        return "";
    }
    // SAFETY: the glue returns NUL-terminated strings that live as long as
    // the module (literals, or read-only 0444 module parameters).
    let s = unsafe { CStr::from_ptr(ptr.cast()) };
    s.to_str().unwrap_or("(not UTF-8)")
}

/// The module version (the repository's VERSION file).
pub(crate) fn version() -> &'static str {
    // SAFETY: no preconditions; returns a string literal.
    static_str(unsafe { glue::peermem_version() })
}

/// The `peer_client_name` module parameter.
pub(crate) fn param_client_name() -> &'static str {
    // SAFETY: no preconditions; returns the parameter's string.
    static_str(unsafe { glue::peermem_param_client_name() })
}

/// The `mode` module parameter.
pub(crate) fn param_mode() -> &'static str {
    // SAFETY: no preconditions; returns the parameter's string.
    static_str(unsafe { glue::peermem_param_mode() })
}

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

/// Sleeps `ms` milliseconds (process context only: every caller is a
/// core callback that may sleep).
pub(crate) fn msleep(ms: u32) {
    // SAFETY: msleep may sleep; our callers run in process context.
    unsafe { glue::peermem_msleep(ms) }
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

    /// Creates the directory and the stats file.
    pub(crate) fn create() -> Result<Self> {
        // SAFETY: no preconditions; called once, at module load.
        kernel::error::to_result(unsafe { glue::peermem_debugfs_create() })?;
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
