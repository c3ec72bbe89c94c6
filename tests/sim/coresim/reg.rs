// SPDX-License-Identifier: GPL-2.0

//! One memory registration (an MR backed by peer memory): its state, the
//! SG table the client fills, the HCA's view of it, and its mapping lock.
//!
//! The mapping lock is a "busy" flag waited on with a condition variable,
//! not a mutex held across the client's callbacks: with a real mutex lockdep
//! would see mapping lock -> GPU lock (get_pages/dma_map) and GPU lock ->
//! mapping lock (invalidate from the GPU's free callback) for every correct
//! client, since both orders are inherent to the interface.  A real deadlock
//! through it shows up instead as the GPU simulator's reported
//! `callback_deadlock`.

use kernel::prelude::*;
use kernel::sync::{Arc, CondVar, Mutex};
use kernel::{new_condvar, new_mutex};

use crate::bindings::pcsim_sge;
use crate::client::Client;
use crate::hooks::Hook;
use crate::sys::{self, DmaDevice, MemlockCharge, NvSim, SgEnt, SgTable};

/// Where a registration is in its life.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// acquire .. dma_map and the SG checks (mapping lock held).
    Registering,
    /// The HCA may DMA.
    Mapped,
    /// Fenced by the client's invalidate (`PEER_MEM_INVALIDATE_UNMAPS`): no
    /// DMA; deregistration calls only release.
    Invalidated,
    /// Fenced by the client's invalidate without the flag: dma_unmap and
    /// put_pages ran inside it; deregistration calls only release.
    Unmapped,
    /// Registration failed and was unwound.
    Failed,
    /// Deregistered.
    Deregistered,
}

impl State {
    /// The name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::Registering => "registering",
            State::Mapped => "mapped",
            State::Invalidated => "invalidated",
            State::Unmapped => "unmapped",
            State::Failed => "failed",
            State::Deregistered => "deregistered",
        }
    }
}

/// The first and last SG entries as the client wrote them, restored before
/// dma_unmap.
#[derive(Clone, Copy)]
pub(crate) struct Trim {
    /// Index of the last entry (nmap - 1).
    pub(crate) last_idx: u32,
    /// Entry 0 before trimming.
    pub(crate) first: SgEnt,
    /// The last entry before trimming.
    pub(crate) last: SgEnt,
}

/// The mutable part of a registration.
pub(crate) struct RegInner {
    /// The mapping lock is held.
    pub(crate) busy: bool,
    /// Invalidations waiting for the mapping lock.
    pub(crate) waiters: u32,
    /// The task holding the mapping lock (while `busy`).
    pub(crate) holder: usize,
    pub(crate) state: State,
    /// The core_context id (`client::NO_ID`, U32_MAX: not an invalidation
    /// client, or released; 0 is a valid id).
    pub(crate) id: u32,
    /// get_pages succeeded and put_pages was not called yet.
    pub(crate) pinned: bool,
    /// dma_map succeeded and dma_unmap was not called yet.
    pub(crate) mapped: bool,
    pub(crate) nmap: u32,
    pub(crate) page_size: u64,
    pub(crate) trim: Option<Trim>,
    /// The SG list as the HCA uses it (after the trim), and the VA its
    /// first entry starts at.
    pub(crate) hca: KVVec<pcsim_sge>,
    pub(crate) hca_start: u64,
    /// A `dma_after_free` was reported for it already.
    pub(crate) dead_reported: bool,
    /// Where its registration's time went.
    pub(crate) times: Times,
}

/// Where a registration's time went in the core (ns; see `pcsim_times`).
#[derive(Clone, Copy, Default)]
pub(crate) struct Times {
    pub(crate) acquire_wait_ns: u64,
    pub(crate) acquire_ns: u64,
    pub(crate) get_pages_ns: u64,
    pub(crate) dma_map_ns: u64,
    pub(crate) total_ns: u64,
}

/// Where a deregistration's time went in the core (ns; see `pcsim_dereg`).
#[derive(Clone, Copy, Default)]
pub(crate) struct DeregTimes {
    pub(crate) dma_unmap_ns: u64,
    pub(crate) put_pages_ns: u64,
    pub(crate) release_ns: u64,
    pub(crate) total_ns: u64,
}

/// A registration.
#[pin_data]
pub(crate) struct Reg {
    /// The client serving it.
    pub(crate) client: Arc<Client>,
    /// The client_context its acquire returned.
    pub(crate) ctx: usize,
    pub(crate) va: u64,
    pub(crate) len: u64,
    /// The registering process.
    pub(crate) owner: u32,
    pub(crate) writable: bool,
    /// The dma_device passed to the client.
    pub(crate) dev: DmaDevice,
    /// The core's SG table.
    pub(crate) sgt: SgTable,
    /// The hook to run at deregistration.
    pub(crate) dereg_hook: Hook,
    /// The RLIMIT_MEMLOCK charge (released with the registration).
    _memlock: Option<MemlockCharge>,
    #[pin]
    inner: Mutex<RegInner>,
    #[pin]
    cv: CondVar,
}

/// What a new registration starts from.
pub(crate) struct NewReg {
    pub(crate) client: Arc<Client>,
    pub(crate) ctx: usize,
    pub(crate) va: u64,
    pub(crate) len: u64,
    pub(crate) owner: u32,
    pub(crate) writable: bool,
    pub(crate) dev: DmaDevice,
    pub(crate) dereg_hook: Hook,
    pub(crate) memlock: Option<MemlockCharge>,
}

impl Reg {
    /// A registration in state `Registering` with its mapping lock held by
    /// the caller.
    pub(crate) fn new(n: NewReg) -> Result<Arc<Self>> {
        let sgt = SgTable::new()?;
        let inner = RegInner {
            busy: true,
            waiters: 0,
            holder: sys::current_task(),
            state: State::Registering,
            id: crate::client::NO_ID,
            pinned: false,
            mapped: false,
            nmap: 0,
            page_size: 0,
            trim: None,
            hca: KVVec::new(),
            hca_start: 0,
            dead_reported: false,
            times: Times::default(),
        };
        Arc::pin_init(
            pin_init!(Reg {
                client: n.client,
                ctx: n.ctx,
                va: n.va,
                len: n.len,
                owner: n.owner,
                writable: n.writable,
                dev: n.dev,
                sgt,
                dereg_hook: n.dereg_hook,
                _memlock: n.memlock,
                inner <- new_mutex!(inner),
                cv <- new_condvar!(),
            }),
            GFP_KERNEL,
        )
    }

    /// Runs `f` on the mutable state (never calls out while locked).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut RegInner) -> R) -> R {
        let mut g = self.inner.lock();
        f(&mut g)
    }

    /// Takes the mapping lock, waiting while it is held; `invalidation`
    /// counts the wait in `waiters`.  Returns whether it had to wait.
    pub(crate) fn lock_mapping(&self, invalidation: bool) -> bool {
        let mut g = self.inner.lock();
        let waited = g.busy;
        if invalidation {
            g.waiters += 1;
        }
        while g.busy {
            self.cv.wait(&mut g);
        }
        if invalidation {
            g.waiters -= 1;
        }
        g.busy = true;
        g.holder = sys::current_task();
        waited
    }

    /// The mapping lock for `invalidate`, which may come from inside a GPU
    /// free callback: if the lock's holder waits for the GPU driver's lock
    /// that this callback holds, the wait would never end (on the real
    /// core, whose mapping lock is a mutex, a hang): `Err` at once, the
    /// lock not taken.  Otherwise as [`Reg::lock_mapping`].
    pub(crate) fn lock_mapping_invalidate(&self, nv: Option<&NvSim>) -> Result<bool, usize> {
        let mut g = self.inner.lock();
        let waited = g.busy;
        g.waiters += 1;
        while g.busy {
            let holder = g.holder;
            if nv.is_some_and(|nv| nv.callback_waits_for(holder)) {
                g.waiters -= 1;
                return Err(holder);
            }
            // Poll: the holder may go to wait for the GPU lock later.
            drop(g);
            sys::msleep(2);
            g = self.inner.lock();
        }
        g.waiters -= 1;
        g.busy = true;
        g.holder = sys::current_task();
        Ok(waited)
    }

    /// Releases the mapping lock.
    pub(crate) fn unlock_mapping(&self) {
        let mut g = self.inner.lock();
        g.busy = false;
        self.cv.notify_all();
    }
}
