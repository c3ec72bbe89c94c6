// SPDX-License-Identifier: GPL-2.0

//! `/dev/nvidia_p2p_sim`: one open file is one CUDA context of the calling
//! process.  Allocations made through it are freed, with their free
//! callbacks, when it is closed -- as a process exit destroys its context.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

use crate::bindings::{nvsim_alloc, nvsim_delay, nvsim_fault, nvsim_free, nvsim_share};
use crate::entry::SimFile;
use crate::lock::API;
use crate::memory::Layout;
use crate::sys;
use crate::text::Text;
use crate::violation::{self, Event};

static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

/// An open control file: the calling process's RM client.
pub(crate) struct Context {
    id: u64,
    /// The process that opened it (RM's `ProcID` of the client).
    opener: u32,
}

impl SimFile for Context {
    /// A new context (at open).
    fn new() -> Self {
        Self {
            id: NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed),
            opener: sys::current_tgid(),
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

    /// REGISTER_PID on the allocation holding `va` (see `nvsim_share`).
    pub(crate) fn share(&self, arg: &nvsim_share) -> Result {
        API.state().share(arg.va, arg.pid)
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
        // The RM client is destroyed: its process leaves every P2P object's
        // client list first (`rmclientDestruct` calls
        // `CliUnregisterFromThirdPartyP2P` before freeing anything); the
        // pins it made on other processes' memory stay armed.
        let left = API.lock().state().remove_client_pid(self.opener);
        if left > 0 {
            Event::ClientPidRemoved.count();
            pr_info!(
                "the RM client of process {} was destroyed: it left {} P2P client list(s); its pins there stay armed\n",
                self.opener,
                left
            );
        }
        let freed = API.lock().free_ctx(self.id);
        if freed > 0 {
            sys::notify_core_freed();
        }
    }
}
