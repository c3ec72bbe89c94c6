// SPDX-License-Identifier: GPL-2.0

//! The simulated driver's two locks and the state they protect.
//!
//! - The global API lock (the "RM API lock"): a real kernel mutex (lockdep
//!   sees it, named `nvidia_p2p_sim_api_lock`), held across get_pages,
//!   put_pages, the middle of dma_map_pages and every free callback, as the
//!   real driver holds its lock.  `dma_unmap_pages` does not take it, and
//!   `dma_map_pages` runs its prologue (reading the table and the
//!   allocation's bookkeeping) before taking it and its epilogue (linking
//!   the mapping) after dropping it: exactly the windows in which a
//!   concurrent cudaFree frees what those calls use.
//! - The bookkeeping lock (`nvidia_p2p_sim_state_lock`): the simulator's
//!   own leaf lock around `GpuState`, held only for short updates, never
//!   while calling a client.
//!
//! Two things a plain mutex would turn into hangs are reported instead:
//! - a call from inside a free callback on the same task (the real driver
//!   would deadlock on itself) is refused with -EDEADLK;
//! - a call from another task that waits more than `callback_timeout_ms`
//!   while a free callback runs (the callback waits for that task) gives up
//!   with -EDEADLK.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::prelude::*;

use crate::gpu::GpuState;
use crate::sys::{self, api_mutex, errno, state_mutex};
use crate::violation::{self, Call, Kind};

/// The locks and the state.
///
/// # Invariants
///
/// `state` is only accessed through a [`StateGuard`], which exists only
/// while the C mutex `nvidia_p2p_sim_state_lock` is held; an [`ApiGuard`]
/// exists only while `nvidia_p2p_sim_api_lock` is held.
pub(crate) struct Api {
    state: UnsafeCell<GpuState>,
    /// The task running a free callback (0: none).
    callback_task: AtomicUsize,
    /// When that callback started (jiffies).
    callback_since: AtomicU64,
    /// Bumped each time a page table or mapping is retired; a call that
    /// read a smaller value before waiting for a lock raced with it.
    retire_seq: AtomicU64,
    /// Tasks waiting for the API lock in an API call (0: a free slot).
    waiting: [AtomicUsize; API_WAITERS],
}

/// How many waiting tasks `Api::waiting` records (more are not seen by
/// `callback_waits_for`).
const API_WAITERS: usize = 64;

/// A task's entry in `Api::waiting` while it waits for the API lock.
struct WaitMark<'a> {
    api: &'a Api,
    slot: Option<usize>,
}

impl Drop for WaitMark<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            self.api.waiting[i].store(0, Ordering::Release);
        }
    }
}

// SAFETY: `state` is only reached under its mutex (type invariant); the
// other fields are atomics.
unsafe impl Sync for Api {}

/// The one simulated GPU.
pub(crate) static API: Api = Api {
    state: UnsafeCell::new(GpuState::new()),
    callback_task: AtomicUsize::new(0),
    callback_since: AtomicU64::new(0),
    retire_seq: AtomicU64::new(0),
    waiting: [const { AtomicUsize::new(0) }; API_WAITERS],
};

impl Api {
    /// Refuses (with a counted violation) a call of API function `call`
    /// from inside a free callback: the real driver would deadlock.
    pub(crate) fn not_in_callback(&self, call: Call) -> Result {
        if self.callback_task.load(Ordering::Acquire) == sys::current_task() {
            violation::report(
                call.in_callback_kind(),
                format_args!(
                    "nvidia_p2p_{} called from inside a free callback",
                    call.name()
                ),
            );
            return Err(sys::err(errno::EDEADLK));
        }
        Ok(())
    }

    /// Takes the API lock for API function `call`, refusing with -EDEADLK
    /// (and a counted violation) where the real driver would deadlock.
    pub(crate) fn lock_for(&self, call: Call) -> Result<ApiGuard<'_>> {
        self.not_in_callback(call)?;
        let _waiting = self.mark_waiting();
        loop {
            if self.callback_task.load(Ordering::Acquire) == 0 {
                api_mutex::lock();
                break;
            }
            if api_mutex::try_lock() {
                break;
            }
            let since = self.callback_since.load(Ordering::Relaxed);
            if sys::msecs_since(since) > sys::param::callback_timeout_ms() {
                violation::report(
                    Kind::CallbackDeadlock,
                    format_args!(
                        "nvidia_p2p_{} waited {} ms for the API lock held across a free callback",
                        call.name(),
                        sys::msecs_since(since)
                    ),
                );
                return Err(sys::err(errno::EDEADLK));
            }
            sys::msleep(1);
        }
        // INVARIANT: the mutex is held.
        Ok(ApiGuard { api: self })
    }

    /// Records the calling task as waiting for the API lock until the
    /// mark is dropped.
    fn mark_waiting(&self) -> WaitMark<'_> {
        let me = sys::current_task();
        let slot = self.waiting.iter().position(|w| {
            w.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        WaitMark { api: self, slot }
    }

    /// Whether the calling task runs a free callback (so holds the API
    /// lock) and `task` waits for that lock in an API call: a wait of the
    /// callback for `task` would never end.
    pub(crate) fn callback_waits_for(&self, task: usize) -> bool {
        task != 0
            && self.callback_task.load(Ordering::Acquire) == sys::current_task()
            && self
                .waiting
                .iter()
                .any(|w| w.load(Ordering::Acquire) == task)
    }

    /// Takes the API lock for the simulator's own work (cudaFree); never
    /// refused.
    pub(crate) fn lock(&self) -> ApiGuard<'_> {
        api_mutex::lock();
        // INVARIANT: the mutex is held.
        ApiGuard { api: self }
    }

    /// Takes the bookkeeping lock (a leaf: call nothing outside the
    /// simulator while holding it).
    pub(crate) fn state(&self) -> StateGuard<'_> {
        state_mutex::lock();
        // INVARIANT: the mutex is held.
        StateGuard { api: self }
    }

    /// The retire sequence number now (read when a call starts).
    pub(crate) fn retire_seq(&self) -> u64 {
        self.retire_seq.load(Ordering::Acquire)
    }

    /// Takes the next retire sequence number.
    pub(crate) fn next_retire_seq(&self) -> u64 {
        self.retire_seq.fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// Proof that the API lock is held.
pub(crate) struct ApiGuard<'a> {
    api: &'a Api,
}

impl<'a> ApiGuard<'a> {
    /// The bookkeeping lock, taken under the API lock.
    pub(crate) fn state(&self) -> StateGuard<'a> {
        self.api.state()
    }

    /// Runs a client's free callback with the API lock held (and the
    /// bookkeeping lock not held), marking the current task as "inside a
    /// free callback" meanwhile.  The mark stays until `end_free_callbacks`,
    /// so a task waiting for the lock between two callbacks of one teardown
    /// keeps polling.
    pub(crate) fn run_free_callback(&mut self, callback: FreeCallback, data: usize) {
        self.api
            .callback_since
            .store(sys::jiffies(), Ordering::Relaxed);
        self.api
            .callback_task
            .store(sys::current_task(), Ordering::Release);
        callback.call(data);
    }

    /// Ends a teardown's run of free callbacks.
    pub(crate) fn end_free_callbacks(&mut self) {
        self.api.callback_task.store(0, Ordering::Release);
    }
}

impl Drop for ApiGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this task holds the mutex.
        unsafe { api_mutex::unlock() }
    }
}

/// Proof that the bookkeeping lock is held; gives access to the state.
pub(crate) struct StateGuard<'a> {
    api: &'a Api,
}

impl StateGuard<'_> {
    /// Takes the next retire sequence number.
    pub(crate) fn next_retire_seq(&mut self) -> u64 {
        self.api.next_retire_seq()
    }
}

impl Deref for StateGuard<'_> {
    type Target = GpuState;

    fn deref(&self) -> &GpuState {
        // SAFETY: the mutex is held while the guard exists (type invariant),
        // so no other reference to the state exists.
        unsafe { &*self.api.state.get() }
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut GpuState {
        // SAFETY: as in `deref`; `&mut self` makes this reference unique.
        unsafe { &mut *self.api.state.get() }
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this task holds the mutex.
        unsafe { state_mutex::unlock() }
    }
}

/// A client's free callback with the contract of `nvidia_p2p_get_pages`.
///
/// # Invariants
///
/// `f` is the callback a client passed to `nvidia_p2p_get_pages`, which the
/// driver may call once with the client's `data` while the pin is live.
#[derive(Clone, Copy)]
pub(crate) struct FreeCallback {
    f: unsafe extern "C" fn(*mut core::ffi::c_void),
}

impl FreeCallback {
    /// Wraps a callback passed to `nvidia_p2p_get_pages`.
    ///
    /// # Safety
    ///
    /// `f` must be callable with the `data` of the same call for as long as
    /// the pin it came with is live.
    pub(crate) unsafe fn new(f: unsafe extern "C" fn(*mut core::ffi::c_void)) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { f }
    }

    fn call(self, data: usize) {
        // SAFETY: the pin is live and `data` is the one registered with the
        // callback (type invariant; the caller passes the pin's data).
        unsafe { (self.f)(data as *mut core::ffi::c_void) }
    }
}
