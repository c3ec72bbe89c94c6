// SPDX-License-Identifier: GPL-2.0

//! The latency model: what the driver's calls cost, so that a benchmark
//! sees registration time grow with the size and queue where the real
//! driver serializes.  Off by default (every `lat_*` parameter 0).
//!
//! Each call is charged where the real driver does its work: get_pages,
//! put_pages and the middle of dma_map_pages hold the API lock (so their
//! costs serialize every caller, as the RM lock does), dma_unmap_pages takes
//! no API lock.  The charge is a sleep (the default: other tasks run) or,
//! with `lat_spin`, a busy-wait on the CPU.

use kernel::prelude::*;

use crate::bindings::nvsim_cost;
use crate::lock::API;
use crate::sys;

/// A charged step of the driver.
#[derive(Clone, Copy)]
pub(crate) enum Op {
    /// get_pages / get_pages_persistent: fixed part + per page.
    Pin,
    /// put_pages / put_pages_persistent.
    Unpin,
    /// dma_map_pages.
    Map,
    /// dma_unmap_pages.
    Unmap,
}

/// What `op` on `pages` GPU pages costs under the current parameters (ns).
pub(crate) fn cost_ns(op: Op, pages: u64) -> u64 {
    let (fixed_us, per_page) = match op {
        Op::Pin => (sys::param::lat_pin_call_us(), sys::param::lat_pin_page_ns()),
        Op::Unpin => (0, sys::param::lat_unpin_page_ns()),
        Op::Map => (0, sys::param::lat_map_page_ns()),
        Op::Unmap => (0, sys::param::lat_unmap_page_ns()),
    };
    u64::from(fixed_us)
        .saturating_mul(1000)
        .saturating_add(u64::from(per_page).saturating_mul(pages))
}

/// Spends what `op` on `pages` pages costs; returns the time it took (ns).
/// The caller holds whatever lock the real call holds for that work.
pub(crate) fn charge(op: Op, pages: u64) -> u64 {
    let ns = cost_ns(op, pages);
    if ns == 0 {
        return 0;
    }
    let t0 = sys::ktime_ns();
    let end = t0.saturating_add(ns);
    if sys::param::lat_spin() {
        let mut spins = 0u32;
        while sys::ktime_ns() < end {
            sys::cpu_relax();
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                // Long charges (64 GiB: a fraction of a second) must not
                // starve the CPU's other tasks or trip the soft-lockup
                // detector: a preemption point, as the real driver has.
                sys::cond_resched();
            }
        }
    } else {
        sys::sleep_us(ns.div_ceil(1000));
    }
    sys::ktime_ns().saturating_sub(t0)
}

impl crate::lock::StateGuard<'_> {
    /// The GPU pages of live page table `table` (0: not live).
    pub(crate) fn table_pages(&self, table: usize) -> u64 {
        self.pins
            .iter()
            .find(|(_, p)| p.table.ptr() as usize == table)
            .map_or(0, |(_, p)| p.npages as u64)
    }

    /// The GPU pages of live DMA mapping `mapping` (0: not live).
    pub(crate) fn mapping_pages(&self, mapping: usize) -> u64 {
        self.maps
            .iter()
            .find(|(_, m)| m.mapping.ptr() as usize == mapping)
            .and_then(|(_, m)| self.pins.get(m.pin))
            .map_or(0, |p| p.npages as u64)
    }
}

/// `NVSIM_IOC_COST`: the model's own cost of one pin + one map of
/// `arg.pages` pages and their release, each step under the lock its real
/// call holds (the ideal a client's registration is compared with).
pub(crate) fn ideal(arg: &mut nvsim_cost) -> Result {
    // 256 GiB: the largest allocation the simulator makes.
    if arg.pages == 0 || arg.pages > (256 << 30) / crate::memory::GPU_PAGE {
        return Err(EINVAL);
    }
    let api = API.lock();
    arg.pin_ns = charge(Op::Pin, arg.pages);
    drop(api);
    let api = API.lock();
    arg.map_ns = charge(Op::Map, arg.pages);
    drop(api);
    arg.unmap_ns = charge(Op::Unmap, arg.pages);
    let api = API.lock();
    arg.unpin_ns = charge(Op::Unpin, arg.pages);
    drop(api);
    Ok(())
}
