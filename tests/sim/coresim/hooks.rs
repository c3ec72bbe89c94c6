// SPDX-License-Identifier: GPL-2.0

//! Step hooks: make a registration run a simulated-GPU `cudaFree` (from
//! another thread, as a racing application thread would) or a delay at a
//! chosen step, so races between cudaFree and registration are reproducible.
//! After starting a free the registering thread waits until the free
//! finished or blocked on this registration's mapping lock (an invalidation
//! waiting for the in-flight registration), at most `ms` milliseconds.

use kernel::prelude::*;

use crate::bindings::{
    pcsim_reg, PCSIM_ACTION_DELAY, PCSIM_ACTION_FREE, PCSIM_STEP_AFTER_ACQUIRE,
    PCSIM_STEP_AFTER_DMA_MAP, PCSIM_STEP_AFTER_GET_PAGES, PCSIM_STEP_IN_DEREG,
};
use crate::reg::Reg;
use crate::sys::{self, NvSim};
use crate::violation::Event;

#[path = "../common/hooks.rs"]
mod common;
use common::FreeJob;

/// The default longest wait after starting a free.
const DEFAULT_WAIT_MS: u32 = 2000;

/// A registration's hook.
#[derive(Clone, Copy, Default)]
pub(crate) struct Hook {
    step: u32,
    action: u32,
    ms: u32,
    va: u64,
}

impl Hook {
    /// The hook of a `struct pcsim_reg`.
    pub(crate) fn from_uapi(r: &pcsim_reg) -> Result<Self> {
        if r.hook_step > PCSIM_STEP_IN_DEREG
            || r.hook_action > PCSIM_ACTION_DELAY
            || r.hook_ms > crate::bindings::PCSIM_MAX_HOOK_MS
        {
            return Err(EINVAL);
        }
        Ok(Self {
            step: r.hook_step,
            action: r.hook_action,
            ms: r.hook_ms,
            va: r.hook_va,
        })
    }
}

fn step_name(step: u32) -> &'static str {
    match step {
        PCSIM_STEP_AFTER_ACQUIRE => "after_acquire",
        PCSIM_STEP_AFTER_GET_PAGES => "after_get_pages",
        PCSIM_STEP_AFTER_DMA_MAP => "after_dma_map",
        PCSIM_STEP_IN_DEREG => "in_dereg",
        _ => "none",
    }
}

/// A hook's free, on the core's work queue: cudaFree(`va`) in process
/// `owner`, through nvidia_p2p_sim (ENODEV if it is not loaded).
fn free_va(owner: u32, va: u64) -> Result {
    NvSim::get().ok_or(ENODEV)?.free_va(owner, va)
}

/// Runs `hook` if it is set for `step`.  `owner`/`va` are the
/// registration's process and VA; `reg` is set once it exists.
pub(crate) fn run(hook: &Hook, step: u32, reg: Option<&Reg>, owner: u32, va: u64) {
    if hook.step != step {
        return;
    }
    match hook.action {
        PCSIM_ACTION_DELAY => sys::msleep(hook.ms),
        PCSIM_ACTION_FREE => {
            let va = if hook.va != 0 { hook.va } else { va };
            let wait = if hook.ms != 0 {
                hook.ms
            } else {
                DEFAULT_WAIT_MS
            };
            free(step, owner, va, reg, wait);
        }
        _ => {}
    }
}

fn free(step: u32, owner: u32, va: u64, reg: Option<&Reg>, wait_ms: u32) {
    Event::HookFree.count();
    let Ok(job) = FreeJob::new(owner, va, free_va) else {
        pr_err!("hook {}: out of memory\n", step_name(step));
        return;
    };
    if let Err(e) = job.start() {
        pr_err!("hook {}: cannot start the free: {:?}\n", step_name(step), e);
        return;
    }
    let t0 = sys::jiffies();
    let outcome = loop {
        if job.finished() {
            break "finished";
        }
        if reg.is_some_and(|r| r.with(|i| i.waiters) > 0) {
            break "blocked on the mapping lock";
        }
        if sys::msecs_since(t0) > u64::from(wait_ms) {
            Event::HookTimeout.count();
            break "still running";
        }
        sys::msleep(2);
    };
    pr_info!(
        "hook {}: cudaFree({:#x}) of process {}: {} (result {})\n",
        step_name(step),
        va,
        owner,
        outcome,
        job.result()
    );
}
