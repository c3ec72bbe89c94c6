// SPDX-License-Identifier: GPL-2.0

//! `/dev/nvidia_p2p_sim`: one open file is one CUDA context of the calling
//! process.  Allocations made through it are freed, with their free
//! callbacks, when it is closed -- as a process exit destroys its context.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

use crate::bindings::{nvsim_alloc, nvsim_delay, nvsim_fault, nvsim_free};
use crate::entry::SimFile;
use crate::lock::API;
use crate::memory::Layout;
use crate::sys;
use crate::text::Text;
use crate::violation;

static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

/// An open control file.
pub(crate) struct Context {
    id: u64,
}

impl SimFile for Context {
    /// A new context (at open).
    fn new() -> Self {
        Self {
            id: NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The stats: `simctl gpu stats`.
    fn stats(&self, t: &mut Text) -> core::fmt::Result {
        API.state().stats(t)
    }

    /// Zeroes the counters and re-arms the WARNs.
    fn reset(&self) -> Result {
        let mut g = API.state();
        violation::reset();
        g.reset_counters();
        Ok(())
    }
}

impl Context {
    /// cudaMalloc in the caller's VA space.
    pub(crate) fn alloc(&self, arg: &mut nvsim_alloc) -> Result {
        let layout = Layout::from_uapi(arg.layout, arg.run_pages)?;
        let va = API
            .state()
            .alloc(sys::current_tgid(), self.id, arg.len, layout, arg.va)?;
        arg.va = va;
        Ok(())
    }

    /// cudaFree in the caller's VA space.
    pub(crate) fn free(&self, arg: &nvsim_free) -> Result {
        let r = API.lock().free_va(sys::current_tgid(), arg.va);
        sys::notify_core_freed();
        r
    }

    /// Arms fault injection.
    pub(crate) fn fault(&self, arg: &nvsim_fault) -> Result {
        API.state().set_fault(arg.site, arg.count, arg.err)
    }

    /// Sets the pin delay (bounded: a day-long sleep under the API lock
    /// is no knob, it is a hang).
    pub(crate) fn delay(&self, arg: &nvsim_delay) -> Result {
        if arg.us_per_page > crate::bindings::NVSIM_MAX_DELAY_US {
            return Err(EINVAL);
        }
        API.state().set_delay(arg.us_per_page);
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let freed = API.lock().free_ctx(self.id);
        if freed > 0 {
            sys::notify_core_freed();
        }
    }
}
