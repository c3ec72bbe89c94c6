// SPDX-License-Identifier: GPL-2.0

//! The free callback's reference to a registration ([`CallbackRef`]) and the
//! proofs that decide when it may be given back.  A revocable pin hands the
//! driver a `data` pointer that owns one reference; giving it back while the
//! driver may still call back with it would free memory the callback uses.
//! So it is given back only with a [`Disarmed`] proof, which only the parent
//! module makes (a failed pin call, a pin released by its owner) or a
//! finished callback ([`Revoked::finish`]); dropped without one, it leaks.

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::prelude::*;
use kernel::sync::Arc;

use super::FreeCallback;

/// Proof that the driver will not call a pin's free callback any more: the
/// pin call failed, the pin was released by its owner, or the callback ran.
pub(crate) struct Disarmed(());

impl Disarmed {
    /// Only the parent module knows when the driver is done with a pin.
    pub(super) fn new() -> Self {
        Disarmed(())
    }
}

/// Proof that the free callback is running (made only by its trampoline).
pub(crate) struct CallbackRan(());

impl CallbackRan {
    /// # Safety
    ///
    /// Only the driver's free callback may make one, once per call.
    pub(crate) unsafe fn new() -> Self {
        CallbackRan(())
    }
}

/// A revoked registration's callback reference: given back when the free
/// callback is done with the registration.
pub(crate) struct Revoked<R> {
    callback: Option<CallbackRef<R>>,
    _ran: CallbackRan,
}

impl<R> Revoked<R> {
    /// Made by `Pins::revoke`, which forgets the driver's objects first.
    pub(super) fn new(callback: Option<CallbackRef<R>>, ran: CallbackRan) -> Self {
        Revoked {
            callback,
            _ran: ran,
        }
    }
}

impl<R> Revoked<R> {
    /// The callback is done: give its reference back.
    pub(crate) fn finish(self) {
        if let Some(cb) = self.callback {
            cb.release(Disarmed(()));
        }
    }
}

/// The free callback's reference to a registration: the `data` pointer
/// given to the driver with a revocable pin.
///
/// # Invariants
///
/// `ptr` came from `Arc::into_raw` and owns that reference.  It is given
/// back only with a [`Disarmed`] proof; dropped without one, it is leaked
/// (a pin may still call back with it).
pub(crate) struct CallbackRef<R> {
    ptr: NonNull<R>,
}

// SAFETY: it is an `Arc<R>` in raw form, and `R: Send + Sync`.
unsafe impl<R: Send + Sync> Send for CallbackRef<R> {}

impl<R> CallbackRef<R> {
    /// Turns a reference into the driver's `data` pointer.
    pub(crate) fn new(reg: Arc<R>) -> Self {
        // SAFETY: `Arc::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Arc::into_raw(reg).cast_mut()) };
        CallbackRef { ptr }
    }

    /// The callback `f` with this reference as its `data`, for a pin.
    pub(crate) fn arm(&self, f: FreeCallback) -> Armed {
        Armed {
            f,
            data: self.ptr.as_ptr().cast(),
        }
    }

    /// Gives the reference back: the driver will not call back with it.
    pub(crate) fn release(self, _proof: Disarmed) {
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

/// A free callback and its `data`, for [`NvidiaP2p::pin_revocable`].
pub(crate) struct Armed {
    pub(super) f: FreeCallback,
    pub(super) data: *mut c_void,
}
