// SPDX-License-Identifier: GPL-2.0

//! What both simulators' hooks do alike: a cudaFree of a process's GPU
//! memory run on the simulator's work queue, as a racing application
//! thread would, while the hooked call waits for it (each simulator
//! decides how long and for what).

use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::sys;

/// A cudaFree running on the work queue.
pub(crate) struct FreeJob {
    owner: u32,
    va: u64,
    free: fn(u32, u64) -> Result,
    done: AtomicBool,
    result: AtomicI32,
}

impl FreeJob {
    /// A free of `va` in process `owner`, done by `free(owner, va)`.
    pub(crate) fn new(owner: u32, va: u64, free: fn(u32, u64) -> Result) -> Result<Arc<Self>> {
        let job = Self {
            owner,
            va,
            free,
            done: AtomicBool::new(false),
            result: AtomicI32::new(0),
        };
        Ok(Arc::new(job, GFP_KERNEL)?)
    }

    /// Queues the free.
    pub(crate) fn start(self: &Arc<Self>) -> Result {
        sys::spawn(self.clone())
    }

    /// Whether the free has returned.
    pub(crate) fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// What the free returned (0 or a negative errno; 0 until it did).
    pub(crate) fn result(&self) -> i32 {
        self.result.load(Ordering::Relaxed)
    }
}

impl sys::Job for FreeJob {
    fn run(&self) {
        let r = (self.free)(self.owner, self.va);
        self.result
            .store(r.map_or_else(|e| e.to_errno(), |()| 0), Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}
