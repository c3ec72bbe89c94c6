// SPDX-License-Identifier: GPL-2.0

//! The control file's entry points both simulators share (common/sim_glue.c
//! calls them): open and release make and drop the file's
//! `crate::control::Context`, and the two ioctls every simulator has, stats
//! and reset, run on it.  `with_ctx` runs any ioctl on the context; each
//! simulator's `entry` module includes this one and adds its own ioctls.

use core::ffi::{c_int, c_void};
use core::fmt;
use kernel::error::from_result;
use kernel::prelude::*;

use crate::bindings::sim_text;
use crate::control::Context;
use crate::sys;
use crate::text::Text;

/// What a simulator's control-file context (`crate::control::Context`)
/// provides to the shared entry points.
pub(crate) trait SimFile: Sized {
    /// The state of a newly opened file.
    fn new() -> Self;

    /// Writes the simulator's "key=value" stats.
    fn stats(&self, t: &mut Text) -> fmt::Result;

    /// Zeroes the counters and re-arms the WARNs.
    fn reset(&self) -> Result;
}

/// Opens a control file: a new context.
///
/// # Safety
///
/// `context` is valid for writing a pointer (the file's private_data).
#[no_mangle]
unsafe extern "C" fn sim_rs_open(context: *mut *mut c_void) -> c_int {
    from_result(|| {
        let ctx = KBox::new(Context::new(), GFP_KERNEL)?;
        // SAFETY: the caller's contract.
        unsafe { context.write(KBox::into_raw(ctx).cast()) };
        Ok(0)
    })
}

/// Closes a control file: drops its context (which undoes what the file
/// made: allocations, registrations).
///
/// # Safety
///
/// `context` came from `sim_rs_open` and is not used again.
#[no_mangle]
unsafe extern "C" fn sim_rs_release(context: *mut c_void) {
    // SAFETY: made by `KBox::into_raw` in `sim_rs_open` (caller's contract).
    drop(unsafe { KBox::from_raw(context.cast::<Context>()) });
}

/// Runs `f` on the file's context with the ioctl's argument.
///
/// # Safety
///
/// `context` came from `sim_rs_open` and the file is open; `arg` points to
/// the kernel copy of the ioctl argument.
pub(crate) unsafe fn with_ctx<T>(
    context: *mut c_void,
    arg: *mut T,
    f: impl FnOnce(&Context, &mut T) -> Result,
) -> c_int {
    // SAFETY: the caller's contract; the file holds the context while open.
    let (ctx, arg) = unsafe { (&*context.cast::<Context>(), &mut *arg) };
    from_result(|| f(ctx, arg).map(|()| 0))
}

/// The stats ioctl: the text is copied to the user buffer (truncated to its
/// size), its whole length returned.
///
/// # Safety
///
/// See `with_ctx`.
#[no_mangle]
unsafe extern "C" fn sim_rs_ioctl_stats(context: *mut c_void, arg: *mut sim_text) -> c_int {
    // SAFETY: forwarded contract.
    unsafe {
        with_ctx(context, arg, |c, a| {
            let mut t = Text::new();
            c.stats(&mut t).map_err(|_| ENOMEM)?;
            let bytes = t.as_bytes();
            let n = bytes.len().min(a.size as usize);
            sys::copy_to_user(a.buf, &bytes[..n])?;
            a.len = bytes.len() as u32;
            Ok(())
        })
    }
}

/// The reset ioctl.
///
/// # Safety
///
/// `context` came from `sim_rs_open` and the file is open.
#[no_mangle]
unsafe extern "C" fn sim_rs_ioctl_reset(context: *mut c_void) -> c_int {
    let mut unit = ();
    // SAFETY: forwarded contract; `unit` is a valid argument.
    unsafe { with_ctx(context, &mut unit, |c, ()| c.reset()) }
}
