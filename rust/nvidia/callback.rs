// SPDX-License-Identifier: GPL-2.0

//! The driver's free callback: its trampoline, the trait of what it revokes
//! ([`Revocable`]), the callback's reference to that ([`CallbackRef`]) and
//! the proofs that decide when the reference may be given back.  A
//! revocable pin hands the driver a `data` pointer that owns one reference;
//! giving it back while the driver may still call back with it would free
//! memory the callback uses.  So it is given back only with a [`Disarmed`]
//! proof naming that pin's `data`, which only the parent module makes (a
//! failed pin call, a pin released by its owner) or a finished callback
//! ([`Revoked::finish`]); dropped without one, it leaks.

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::prelude::*;
use kernel::sync::Arc;

use super::FreeCallback;

/// What a revocable pin's free callback revokes (the per-MR type).
pub(crate) trait Revocable: Send + Sync + Sized + 'static {
    /// The driver revoked the memory (cudaFree).  Completes only through
    /// `Pins::revoke`, whose [`Revoked`] carries the callback's reference,
    /// given back once the callback is done.
    fn revoke(&self, ran: CallbackRan) -> Revoked<Self>;
}

/// Proof that the driver will not call a pin's free callback any more: the
/// pin call failed, the pin was released by its owner, or the callback ran.
///
/// # Invariants
///
/// `data` is the callback `data` (address) of the pin it is about.
pub(crate) struct Disarmed {
    data: usize,
}

impl Disarmed {
    /// The proof for the pin armed with `data`.
    ///
    /// # Safety
    ///
    /// The driver will not call the free callback of the pin armed with
    /// `data` any more: releasing the callback's reference on this proof
    /// may free what `data` points to.
    pub(super) unsafe fn new(data: usize) -> Self {
        Disarmed { data }
    }
}

/// Proof that the free callback is running for the pin armed with `data`.
///
/// # Invariants
///
/// Made only by the trampoline, once per call, with the call's `data`.
pub(crate) struct CallbackRan {
    data: usize,
}

/// A revoked registration's callback reference: given back when the free
/// callback is done with the registration.
pub(crate) struct Revoked<R> {
    callback: Option<CallbackRef<R>>,
    ran: CallbackRan,
}

impl<R> Revoked<R> {
    /// Made by `Pins::revoke`, which forgets the driver's objects first.
    pub(super) fn new(callback: Option<CallbackRef<R>>, ran: CallbackRan) -> Self {
        Revoked { callback, ran }
    }

    /// The callback is done: give its reference back.
    pub(crate) fn finish(self) {
        if let Some(cb) = self.callback {
            // `ran` proves this is the pin's free callback, which the driver
            // calls at most once per pin (nv-p2p.c tears the pin down with it).
            // SAFETY: that callback is done once `finish` runs: no more calls.
            cb.release(unsafe { Disarmed::new(self.ran.data) });
        }
    }
}

/// The free callback's reference to a registration: the `data` pointer
/// given to the driver with a revocable pin.
///
/// # Invariants
///
/// `ptr` came from `Arc::into_raw` and owns that reference.  It is given
/// back only with a [`Disarmed`] proof for `ptr`; dropped without one, it
/// is leaked (a pin may still call back with it).
pub(crate) struct CallbackRef<R> {
    ptr: NonNull<R>,
}

// SAFETY: it is an `Arc<R>` in raw form, and `R: Send + Sync`.
unsafe impl<R: Send + Sync> Send for CallbackRef<R> {}

impl<R: Revocable> CallbackRef<R> {
    /// Turns a reference into the driver's `data` pointer, armed with the
    /// free callback of `R`: the reference, and the [`Armed`] callback for
    /// the one pin call it is made for.
    pub(crate) fn arm(reg: Arc<R>) -> (Self, Armed) {
        // SAFETY: `Arc::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Arc::into_raw(reg).cast_mut()) };
        let armed = Armed {
            f: free_callback::<R>,
            data: ptr.as_ptr().cast(),
        };
        (CallbackRef { ptr }, armed)
    }
}

impl<R> CallbackRef<R> {
    /// Gives the reference back: the driver will not call back with it.  A
    /// proof for another pin gives nothing back (the reference leaks).
    pub(crate) fn release(self, proof: Disarmed) {
        if proof.data != self.ptr.as_ptr() as usize {
            // `Drop` warns and leaks.
            return;
        }
        let ptr = self.ptr;
        core::mem::forget(self);
        // SAFETY: by the type invariant `ptr` owns an `Arc` reference, taken
        // back once (`self` is forgotten).
        drop(unsafe { Arc::from_raw(ptr.as_ptr()) });
    }
}

impl<R> Drop for CallbackRef<R> {
    fn drop(&mut self) {
        pr_warn!("a free-callback reference was dropped while its pin may be armed: leaked\n");
    }
}

/// A free callback and its `data`, for one [`NvidiaP2p::pin_revocable`]
/// (made only by [`CallbackRef::arm`], consumed by the pin call).
///
/// # Invariants
///
/// `data` is the pointer of a [`CallbackRef<R>`], `f` the trampoline of `R`.
///
/// [`NvidiaP2p::pin_revocable`]: super::NvidiaP2p::pin_revocable
pub(crate) struct Armed {
    pub(super) f: FreeCallback,
    pub(super) data: *mut c_void,
}

/// The NVIDIA driver's free callback of `R`'s pins (cudaFree of pinned
/// memory).
///
/// # Safety
///
/// Only the driver calls it, as the free callback given to
/// `nvidia_p2p_get_pages` with the `data` made by [`CallbackRef::arm`] for
/// `R`: at most once per pin, never after the pin was released.
unsafe extern "C" fn free_callback<R: Revocable>(data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // The driver calls back only for a pin still armed, with its `data` (the
    // function's safety section); a `Disarmed` for an armed pin is made only
    // by the `Revoked` below.
    // SAFETY: `data` is a `CallbackRef<R>`, keeping `R` alive until then.
    let reg = unsafe { &*data.cast::<R>() };
    let ran = CallbackRan {
        data: data as usize,
    };
    let revoked = reg.revoke(ran);
    // The reference is given back last, after every use of `reg`, from
    // the module's work queue: it may be the last reference on the module,
    // and module unload waits for that queue, so no code of ours runs
    // after it is gone (here, the driver would return into our code).
    crate::glue::defer(move || revoked.finish());
}
