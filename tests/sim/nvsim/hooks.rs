// SPDX-License-Identifier: GPL-2.0

//! Free hooks inside the driver's own calls: in dma_map_pages' unlocked
//! prologue or epilogue, or in dma_unmap_pages with the mapping in flight,
//! the driver starts a cudaFree of the allocation concerned on its work
//! queue (a racing application thread) and waits until that free finished
//! or `wait_ms` passed -- a client's free callback may legitimately wait
//! for the unmap in flight, so the hook never waits for ever.

use kernel::prelude::*;

use crate::bindings::{
    nvsim_hook, NVSIM_HOOK_GET_PAGES, NVSIM_HOOK_GET_PAGES_RETURN, NVSIM_HOOK_MAP_EPILOGUE,
    NVSIM_HOOK_MAP_PROLOGUE, NVSIM_HOOK_PUT, NVSIM_HOOK_SITES, NVSIM_HOOK_UNMAP,
};
use crate::lock::API;
use crate::sys;
use crate::violation::Event;

#[path = "../common/hooks.rs"]
mod common;
use common::FreeJob;

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
    /// get_pages after registering the free callback, before it returns:
    /// the callback runs before the caller has the table, and the get is
    /// held for the hook's whole wait (the driver holds nothing there: a
    /// thread preempted on its way out), while the process's other threads
    /// run and allocate what the callback freed.
    GetPagesReturn = NVSIM_HOOK_GET_PAGES_RETURN as isize,
}

impl Site {
    fn name(self) -> &'static str {
        match self {
            Site::MapPrologue => "map_prologue",
            Site::MapEpilogue => "map_epilogue",
            Site::Unmap => "unmap",
            Site::Put => "put",
            Site::GetPages => "get_pages",
            Site::GetPagesReturn => "get_pages_return",
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
            Site::GetPagesReturn,
        ] {
            writeln!(t, "hook.{}={}", site.name(), self.count[site as usize])?;
        }
        Ok(())
    }
}

/// A hook's free, on the driver's work queue: cudaFree(`va`) in process
/// `owner`.
fn free_va(owner: u32, va: u64) -> Result {
    let r = API.lock().free_va(owner, va);
    sys::notify_core_freed();
    r
}

/// Runs the hook of `site` if armed: cudaFree of `va` in process `owner`
/// from a worker, then waits for it (at most the hook's wait).
pub(crate) fn fire(site: Site, owner: u32, va: u64) {
    let Some(wait_ms) = API.state().hooks.take(site) else {
        return;
    };
    Event::HookFree.count();
    let Ok(job) = FreeJob::new(owner, va, free_va) else {
        pr_err!("hook {}: out of memory\n", site.name());
        return;
    };
    if let Err(e) = job.start() {
        pr_err!("hook {}: cannot start the free: {:?}\n", site.name(), e);
        return;
    }
    let t0 = sys::jiffies();
    let finished = loop {
        if job.finished() {
            break true;
        }
        if sys::msecs_since(t0) > u64::from(wait_ms) {
            break false;
        }
        sys::msleep(2);
    };
    if matches!(
        site,
        Site::Put | Site::MapPrologue | Site::MapEpilogue | Site::GetPagesReturn
    ) {
        // Held until the whole wait passed: other threads of the process
        // pin meanwhile (the table the free released is free to reuse, and
        // the driver knows the call's table by its address alone; after
        // get_pages_return, what the client's callback freed is too).
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
        job.result()
    );
}
