// SPDX-License-Identifier: GPL-2.0

//! Free hooks inside the driver's own calls: in dma_map_pages' unlocked
//! prologue or epilogue, or in dma_unmap_pages with the mapping in flight,
//! the driver starts a cudaFree of the allocation concerned on its work
//! queue (a racing application thread) and waits until that free finished
//! or `wait_ms` passed -- a client's free callback may legitimately wait
//! for the unmap in flight, so the hook never waits for ever.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::bindings::{
    nvsim_hook, NVSIM_HOOK_GET_PAGES, NVSIM_HOOK_MAP_EPILOGUE, NVSIM_HOOK_MAP_PROLOGUE,
    NVSIM_HOOK_PUT, NVSIM_HOOK_SITES, NVSIM_HOOK_UNMAP,
};
use crate::lock::API;
use crate::sys;
use crate::violation::Event;

/// The default longest wait for a hook's free.
const DEFAULT_WAIT_MS: u32 = 200;

/// A hook site.
#[derive(Clone, Copy)]
pub(crate) enum Site {
    MapPrologue = NVSIM_HOOK_MAP_PROLOGUE as isize,
    MapEpilogue = NVSIM_HOOK_MAP_EPILOGUE as isize,
    Unmap = NVSIM_HOOK_UNMAP as isize,
    /// put_pages on its way to the API lock: after the free, the put is
    /// held for the hook's whole wait (a put queued behind a teardown), as
    /// dma_map_pages is in its prologue and epilogue.
    Put = NVSIM_HOOK_PUT as isize,
    /// get_pages between its two API-lock holds: pinned, the free callback
    /// not registered yet.
    GetPages = NVSIM_HOOK_GET_PAGES as isize,
}

impl Site {
    fn name(self) -> &'static str {
        match self {
            Site::MapPrologue => "map_prologue",
            Site::MapEpilogue => "map_epilogue",
            Site::Unmap => "unmap",
            Site::Put => "put",
            Site::GetPages => "get_pages",
        }
    }
}

/// The armed hooks (in the GPU state, under the bookkeeping lock).
pub(crate) struct Armed {
    count: [u32; NVSIM_HOOK_SITES as usize],
    wait_ms: [u32; NVSIM_HOOK_SITES as usize],
}

impl Armed {
    /// Nothing armed.
    pub(crate) const fn new() -> Self {
        Self {
            count: [0; NVSIM_HOOK_SITES as usize],
            wait_ms: [0; NVSIM_HOOK_SITES as usize],
        }
    }

    /// Arms (or, with count 0, disarms) a site.
    pub(crate) fn set(&mut self, h: &nvsim_hook) -> Result {
        let i = h.site as usize;
        if i == 0 || i >= self.count.len() || h.wait_ms > crate::bindings::NVSIM_MAX_WAIT_MS {
            return Err(EINVAL);
        }
        self.count[i] = h.count;
        self.wait_ms[i] = h.wait_ms;
        Ok(())
    }

    /// Takes one shot of `site`: the wait if it was armed.
    fn take(&mut self, site: Site) -> Option<u32> {
        let i = site as usize;
        if self.count[i] == 0 {
            return None;
        }
        self.count[i] -= 1;
        Some(if self.wait_ms[i] == 0 {
            DEFAULT_WAIT_MS
        } else {
            self.wait_ms[i]
        })
    }

    /// The report line.
    pub(crate) fn describe(&self, t: &mut crate::text::Text) -> core::fmt::Result {
        use core::fmt::Write;
        for site in [
            Site::MapPrologue,
            Site::MapEpilogue,
            Site::Unmap,
            Site::Put,
            Site::GetPages,
        ] {
            writeln!(t, "hook.{}={}", site.name(), self.count[site as usize])?;
        }
        Ok(())
    }
}

/// A free running on the driver's work queue.
struct Job {
    owner: u32,
    va: u64,
    done: AtomicBool,
    result: AtomicI32,
}

/// The work-queue function of a hook's free.
///
/// # Safety
///
/// `arg` came from `Arc::into_raw` in `fire` and is used once.
unsafe extern "C" fn run_job(arg: *mut c_void) {
    // SAFETY: the caller's contract.
    let job = unsafe { Arc::from_raw(arg.cast_const().cast::<Job>()) };
    let r = API.lock().free_va(job.owner, job.va);
    sys::notify_core_freed();
    job.result
        .store(r.map_or_else(|e| e.to_errno(), |()| 0), Ordering::Relaxed);
    job.done.store(true, Ordering::Release);
}

/// Runs the hook of `site` if armed: cudaFree of `va` in process `owner`
/// from a worker, then waits for it (at most the hook's wait).
pub(crate) fn fire(site: Site, owner: u32, va: u64) {
    let Some(wait_ms) = API.state().hooks.take(site) else {
        return;
    };
    Event::HookFree.count();
    let Ok(job) = Arc::new(
        Job {
            owner,
            va,
            done: AtomicBool::new(false),
            result: AtomicI32::new(0),
        },
        GFP_KERNEL,
    ) else {
        pr_err!("hook {}: out of memory\n", site.name());
        return;
    };
    let raw = Arc::into_raw(job.clone()).cast_mut().cast::<c_void>();
    if let Err(e) = sys::run_async(run_job, raw) {
        // SAFETY: not queued, so this is the only use of `raw`.
        drop(unsafe { Arc::from_raw(raw.cast_const().cast::<Job>()) });
        pr_err!("hook {}: cannot start the free: {:?}\n", site.name(), e);
        return;
    }
    let t0 = sys::jiffies();
    let finished = loop {
        if job.done.load(Ordering::Acquire) {
            break true;
        }
        if sys::msecs_since(t0) > u64::from(wait_ms) {
            break false;
        }
        sys::msleep(2);
    };
    if matches!(site, Site::Put | Site::MapPrologue | Site::MapEpilogue) {
        // Held until the whole wait passed: other threads of the process
        // pin meanwhile (the table the free released is free to reuse, and
        // the driver knows the call's table by its address alone).
        while sys::msecs_since(t0) < u64::from(wait_ms) {
            sys::msleep(2);
        }
    }
    pr_info!(
        "hook {}: cudaFree({:#x}) of process {}: {} (result {})\n",
        site.name(),
        va,
        owner,
        if finished {
            "finished"
        } else {
            "still running"
        },
        job.result.load(Ordering::Relaxed)
    );
}
