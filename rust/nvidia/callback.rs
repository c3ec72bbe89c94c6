// SPDX-License-Identifier: GPL-2.0

//! The driver's free callback: its trampoline, the trait of what it revokes
//! ([`Revocable`]), the small [`Tombstone`] a pin's `data` points to, the
//! callback's reference to it ([`CallbackRef`]) and the proofs that decide
//! when the reference may be given back.  A revocable pin hands the driver
//! a `data` pointer that owns one reference on its tombstone; giving it back
//! while the driver may still call back with it would free memory the
//! callback uses.  So it is given back only with a [`Disarmed`] proof naming
//! that pin's `data`, which only the parent module makes (a failed pin call,
//! a put the module confirmed, see rust/nvidia/probe.rs) or a finished
//! callback ([`Revocation::finish`]); dropped without one, it leaks.  A put
//! the driver answered with 0 but the module could not confirm (RM answers
//! 0 also for "not found among this process's P2P objects") leaves the
//! reference *parked* in the tombstone ([`CallbackRef::park`]): the
//! registration is freed, the tombstone (and its module reference, so
//! rmmod is refused) stays until the callback comes.

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, Mutex};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

use super::FreeCallback;
use crate::glue::{pr_warn_ratelimited, ModuleRef};
use crate::stats::STATS;

/// What a revocable pin's free callback revokes (the per-MR type).
pub(crate) trait Revocable: Send + Sync + Sized + 'static {
    /// The driver revoked the memory (cudaFree).  Completes only through
    /// `Pins::revoke` (or [`Tombstone::revoke_parked`]), whose [`Revocation`]
    /// carries the callback's reference, given back once the callback is
    /// done.  `tomb` is the pin's tombstone.
    fn revoke(&self, ran: CallbackRan, tomb: &Tombstone<Self>) -> Revocation<Self>;
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
    pub(super) data: usize,
}

/// A revoked registration's callback reference: given back when the free
/// callback is done with the registration.
pub(crate) struct Revocation<R> {
    callback: Option<CallbackRef<R>>,
    ran: CallbackRan,
}

impl<R> Revocation<R> {
    /// Made by `Pins::revoke`, which forgets the driver's objects first, or
    /// by the tombstone for a parked reference.
    pub(super) fn new(callback: Option<CallbackRef<R>>, ran: CallbackRan) -> Self {
        Revocation { callback, ran }
    }

    /// The callback is done: give its reference back.
    pub(crate) fn finish(self) {
        if let Some(cb) = self.callback {
            // `ran` proves the driver called the free callback of the pin
            // armed with `ran.data`.  It calls it from
            // `nv_p2p_mem_info_free_callback` (nv-p2p.c), which frees the
            // pin's page table and the `nv_p2p_mem_info` holding the
            // callback and `data` right after it returns: no later call
            // can find them.  `finish` runs after that call returned
            // (the tombstone's `WorkItem::run`, queued by that call).
            // SAFETY: by the above, no more calls with `ran.data`.
            cb.release(unsafe { Disarmed::new(self.ran.data) });
        }
    }
}

/// What a revocable pin's `data` points to: small, and kept until the
/// driver can no longer call back with it.
///
/// # Invariants
///
/// `reg` is the registration the callback revokes until the pin's fate is
/// settled (then `None`); `parked` is the driver's reference on this
/// tombstone after a put the module could not confirm, kept until the free
/// callback takes it, and `counted` whether it is in the tombstone count
/// (a registration's, not a probe's); `finishing` is the finished callback's revocation,
/// from its queueing on `finish` until that work runs.  `finish` is
/// queued at most once (by the one free callback of the pin).  The module
/// reference keeps the trampoline's code loaded while the tombstone lives.
#[pin_data]
pub(crate) struct Tombstone<R> {
    #[pin]
    state: Mutex<TombState<R>>,
    #[pin]
    finish: Work<Tombstone<R>>,
    _module: ModuleRef,
}

impl_has_work! {
    impl{R} HasWork<Self> for Tombstone<R> { self.finish }
}

struct TombState<R> {
    reg: Option<Arc<R>>,
    parked: Option<CallbackRef<R>>,
    counted: bool,
    finishing: Option<Revocation<R>>,
}

impl<R> TombState<R> {
    /// Takes the parked reference (a callback or the probe that parked it),
    /// leaving the tombstone count as it found it before the parking.
    fn take_parked(&mut self) -> Option<CallbackRef<R>> {
        let cb = self.parked.take()?;
        if core::mem::take(&mut self.counted) {
            STATS.tombstone_fired();
        }
        Some(cb)
    }
}

impl<R: Revocable> Tombstone<R> {
    /// The free callback arrived: a parked reference is the callback's to
    /// give back (nothing of the registration is left); otherwise the
    /// registration revokes.
    fn fire(&self, ran: CallbackRan) -> Revocation<R> {
        let mut s = self.state.lock();
        if let Some(cb) = s.take_parked() {
            drop(s);
            return Revocation::new(Some(cb), ran);
        }
        let reg = s.reg.clone();
        drop(s);
        match reg {
            Some(reg) => reg.revoke(ran, self),
            // Neither: a callback for a pin whose reference was given back
            // (a driver bug); `finish` gives nothing back.
            None => {
                crate::glue::warn_spurious_callback();
                Revocation::new(None, ran)
            }
        }
    }
}

impl<R> Tombstone<R> {
    /// For a registration's free callback that found no reference in the
    /// registration: the one parked here by a put that was not confirmed,
    /// as a finished revocation (the callback raced with the parking), or
    /// `ran` back if none is parked.
    pub(crate) fn revoke_parked(&self, ran: CallbackRan) -> Result<Revocation<R>, CallbackRan> {
        match self.state.lock().take_parked() {
            Some(cb) => Ok(Revocation::new(Some(cb), ran)),
            None => Err(ran),
        }
    }

    /// Whether a reference is parked here (no callback took it yet).
    pub(super) fn parked(&self) -> bool {
        self.state.lock().parked.is_some()
    }

    /// Takes the parked reference back.
    pub(super) fn take_parked(&self) -> Option<CallbackRef<R>> {
        self.state.lock().take_parked()
    }
}

/// The free callback's reference to a pin's tombstone: the `data` pointer
/// given to the driver with a revocable pin.
///
/// # Invariants
///
/// `ptr` came from `Arc::into_raw` of a [`Tombstone<R>`] and owns that
/// reference.  It is given back only with a [`Disarmed`] proof for `ptr`;
/// dropped without one, it is leaked (a pin may still call back with it).
pub(crate) struct CallbackRef<R> {
    ptr: NonNull<Tombstone<R>>,
}

// SAFETY: it is an `Arc<Tombstone<R>>` in raw form, and `R: Send + Sync`.
unsafe impl<R: Send + Sync> Send for CallbackRef<R> {}

impl<R: Revocable> CallbackRef<R> {
    /// A tombstone for `reg`, and the driver's reference on it: the
    /// reference, and the [`Armed`] callback for the one pin call it is
    /// made for.  Fails while the module is being unloaded.  Everything
    /// the callback needs is allocated here, so that it cannot fail.
    pub(crate) fn arm(reg: Arc<R>) -> Result<(Self, Armed)> {
        let module = ModuleRef::get()?;
        let tomb = Arc::pin_init(
            pin_init!(Tombstone {
                state <- new_mutex!(
                    TombState {
                        reg: Some(reg),
                        parked: None,
                        counted: false,
                        finishing: None,
                    },
                    "peermem_rs::Tombstone::state"
                ),
                finish <- new_work!("peermem_rs::Tombstone::finish"),
                _module: module,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `Arc::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Arc::into_raw(tomb).cast_mut()) };
        let armed = Armed {
            f: free_callback::<R>,
            data: ptr.as_ptr().cast(),
        };
        Ok((CallbackRef { ptr }, armed))
    }
}

impl<R> CallbackRef<R> {
    /// Another reference on the tombstone (not the driver's).
    pub(super) fn tombstone(&self) -> Arc<Tombstone<R>> {
        // SAFETY: `ptr` came from `Arc::into_raw` and its reference is
        // owned by `self` (type invariant), so it lives while borrowed.
        let borrowed = unsafe { ArcBorrow::from_raw(self.ptr.as_ptr()) };
        borrowed.into()
    }

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

    /// The driver answered a put with 0 that the module could not confirm
    /// (rust/nvidia/probe.rs): the pin may still be armed.  The reference
    /// waits in the tombstone for the callback, the registration is let go
    /// (its free callback will find nothing to revoke), and the tombstone
    /// is counted.
    pub(crate) fn park(self) {
        self.park_counted(true);
    }

    /// [`CallbackRef::park`] without counting (a probe's own pin): its
    /// callback, should it come, does not count a tombstone fired either.
    pub(super) fn park_quietly(self) {
        self.park_counted(false);
    }

    fn park_counted(self, counted: bool) {
        // SAFETY: `ptr` owns a reference (type invariant): the tombstone
        // lives at least until `self` is given back.
        let tomb = unsafe { self.ptr.as_ref() };
        let mut s = tomb.state.lock();
        let reg = s.reg.take();
        s.parked = Some(self);
        s.counted = counted;
        if counted {
            STATS.tombstone_armed();
        }
        drop(s);
        drop(reg);
    }
}

impl<R> Drop for CallbackRef<R> {
    fn drop(&mut self) {
        pr_warn_ratelimited!(
            "a free-callback reference was dropped while its pin may be armed: leaked\n"
        );
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
/// `R`, and only while that pin's reference was not given back: the
/// reference is given back only with a [`Disarmed`], made when the pin call
/// failed, after a put whose lookup found the pin (RM then deletes the
/// callback, p2p.c `RmP2PPutPages`), or after this callback returned (the
/// driver then frees the pin's records, nv-p2p.c
/// `nv_p2p_mem_info_free_callback`).  A put answered 0 without such proof
/// leaves the reference parked in the tombstone.
unsafe extern "C" fn free_callback<R: Revocable>(data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // The pin is armed (the function's safety section), so its reference
    // was not given back: a `Disarmed` for it is made only when the driver
    // will not call back any more, and a put the module could not confirm
    // parks the reference in the tombstone instead.
    // SAFETY: `data` is a `CallbackRef<R>`'s tombstone, alive until then.
    let tomb = unsafe { &*data.cast::<Tombstone<R>>() };
    let ran = CallbackRan {
        data: data as usize,
    };
    let revoked = tomb.fire(ran);
    if revoked.callback.is_none() {
        // Nothing to give back (a spurious callback, warned about).
        return;
    }
    // The reference is given back last, after every use of `tomb`, from
    // the module's work queue: it may be the last reference on the module,
    // and module unload waits for that queue, so no code of ours runs
    // after it is gone (here, the driver would return into our code).  The
    // work item is embedded in the tombstone: queueing it allocates
    // nothing, and the release never runs here.
    tomb.state.lock().finishing = Some(revoked);
    // SAFETY: `data` came from `Arc::into_raw` (`CallbackRef::arm`); its
    // reference, now in `finishing`, is taken back only by the work below.
    let borrowed = unsafe { ArcBorrow::from_raw(data.cast::<Tombstone<R>>()) };
    let tomb: Arc<Tombstone<R>> = borrowed.into();
    // The queue exists while any module reference does (module exit
    // destroys it, after the last one), and the tombstone holds one until
    // the work below drops it, so the queue outlives that work.  The pin's
    // one callback queues `finish` once: `Err` only for a second callback
    // of the pin (a driver bug).
    // SAFETY: as above.
    if unsafe { crate::glue::defer(tomb) }.is_err() {
        crate::glue::warn_spurious_callback();
    }
}

/// The work of a finished free callback: gives its reference back.
impl<R: Send + Sync + 'static> WorkItem for Tombstone<R> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let revoked = this.state.lock().finishing.take();
        if let Some(revoked) = revoked {
            revoked.finish();
        }
        // `this` may be the last reference: dropping it frees the
        // tombstone (with this work item) and its module reference, and
        // nothing of either is used after.
        drop(this);
    }
}
