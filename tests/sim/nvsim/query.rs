// SPDX-License-Identifier: GPL-2.0

//! Queries and knobs of the simulated GPU: is a DMA range live GPU memory,
//! the DMA address of a VA, fault injection, the pin delay, the stats.

use core::fmt::Write;
use kernel::prelude::*;

use crate::bindings::sim_range;
use crate::gpu::{Fault, FAULT_SITES};
use crate::lock::StateGuard;
use crate::memory::GPU_PAGE;
use crate::sys;
use crate::text::Text;
use crate::violation::{self, CALLS, EVENTS};

/// The fault injection sites' names, as in `struct nvsim_fault`.
const SITE_NAMES: [&str; FAULT_SITES] = [
    "get_pages",
    "dma_map_pages",
    "get_pages_persistent",
    "put_pages",
    "put_pages_persistent",
    "dma_unmap_pages",
];

impl StateGuard<'_> {
    /// Ok if every range lies in live, pinned, DMA-mapped GPU memory;
    /// ESTALE if the others lie in pins the bench's same-process neighbour
    /// released (its harm, not the client's).
    pub(crate) fn dma_live(&self, ranges: &[sim_range]) -> Result {
        // The runs of every mapped pin, sorted and merged.
        let mut runs: KVVec<(u64, u64)> = KVVec::new();
        let mut seen: KVVec<usize> = KVVec::new();
        for (_, m) in self.maps.iter() {
            if seen.iter().any(|&p| p == m.pin) {
                continue;
            }
            seen.push(m.pin, GFP_KERNEL)?;
            if let Some(p) = self.pins.get(m.pin) {
                runs.extend_from_slice(&p.runs, GFP_KERNEL)?;
            }
        }
        heap_sort(&mut runs);
        let mut merged: KVVec<(u64, u64)> = KVVec::new();
        for &(s, e) in runs.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e), GFP_KERNEL)?,
            }
        }
        let mut neighbours = false;
        for r in ranges {
            let end = r.addr.checked_add(r.len).ok_or(EFAULT)?;
            // The last run starting at or below the range's start.
            let i = match merged.binary_search_by(|&(s, _)| s.cmp(&r.addr)) {
                Ok(i) => Some(i),
                Err(0) => None,
                Err(i) => Some(i - 1),
            };
            if i.and_then(|i| merged.get(i))
                .is_some_and(|&(_, e)| end <= e)
            {
                continue;
            }
            // Not live: of a pin the neighbour's late put released?
            if self
                .neighbour_runs
                .iter()
                .any(|(_, &(s, e))| s <= r.addr && end <= e)
            {
                neighbours = true;
                continue;
            }
            return Err(EFAULT);
        }
        if neighbours {
            return Err(sys::err(sys::errno::ESTALE));
        }
        Ok(())
    }

    /// The DMA address of byte `va` of GPU memory process `tgid` reaches
    /// (its own, or shared with it by REGISTER_PID).
    pub(crate) fn translate(&self, tgid: u32, va: u64) -> Result<u64> {
        let idx = self
            .allocs
            .find(|a| a.va_live && a.reachable_by(tgid) && a.contains(va))
            .ok_or(ENOENT)?;
        let a = self.allocs.get(idx).ok_or(ENOENT)?;
        let off = va - a.va;
        let page = a.mem.page((off / GPU_PAGE) as usize).ok_or(ENOENT)?;
        Ok(page + off % GPU_PAGE)
    }

    /// Arms fault injection at `site`.
    pub(crate) fn set_fault(&mut self, site: u32, count: u32, err: i32) -> Result {
        let f = self.faults.get_mut(site as usize).ok_or(EINVAL)?;
        if !(1..4096).contains(&err) {
            return Err(EINVAL);
        }
        *f = Fault { count, err };
        Ok(())
    }

    /// Sets the pin delay per GPU page.
    pub(crate) fn set_delay(&mut self, us_per_page: u32) {
        self.delay_us = us_per_page;
    }

    /// Zeroes the counters kept under the lock.
    pub(crate) fn reset_counters(&mut self) {
        self.free_callbacks = 0;
        self.raced = 0;
        self.injected = 0;
        for (e, _) in EVENTS {
            e.reset();
        }
    }

    /// The "key=value" report of `simctl gpu stats`.
    pub(crate) fn stats(&self, t: &mut Text) -> core::fmt::Result {
        writeln!(t, "pt_version={:#010x}", sys::param::pt_version())?;
        writeln!(t, "stale_grace_ms={}", sys::param::stale_grace_ms())?;
        writeln!(
            t,
            "callback_timeout_ms={}",
            sys::param::callback_timeout_ms()
        )?;
        for (call, name) in CALLS {
            writeln!(t, "calls.{}={}", name, call.calls())?;
        }
        for (call, name) in CALLS {
            writeln!(t, "ns.{}={}", name, call.ns())?;
        }
        writeln!(
            t,
            "driver_ns={}",
            CALLS.iter().map(|(c, _)| c.ns()).sum::<u64>()
        )?;
        violation::VIOLATIONS.write_stats(t)?;
        writeln!(t, "free_callbacks={}", self.free_callbacks)?;
        writeln!(t, "raced_calls={}", self.raced)?;
        writeln!(t, "orphan_mappings={}", self.orphan_maps.count())?;
        writeln!(t, "faults_injected={}", self.injected)?;
        for (name, f) in SITE_NAMES.iter().zip(self.faults.iter()) {
            writeln!(t, "fault.{}={}:{}", name, f.count, f.err)?;
        }
        writeln!(t, "delay_us_per_page={}", self.delay_us)?;
        writeln!(
            t,
            "persistent_supported={}",
            u8::from(sys::param::persistent_supported())
        )?;
        for (e, name) in EVENTS {
            writeln!(t, "{}={}", name, e.get())?;
        }
        self.hooks.describe(t)?;
        let (pins, persistent, maps) = self.outstanding();
        writeln!(
            t,
            "allocations={}",
            self.allocs.iter().filter(|(_, a)| a.va_live).count()
        )?;
        writeln!(t, "pins={pins}")?;
        writeln!(t, "persistent_pins={persistent}")?;
        writeln!(t, "mappings={maps}")?;
        writeln!(t, "quarantine={}", self.retired.count())?;
        for (i, a) in self.allocs.iter() {
            let maps = self
                .maps
                .iter()
                .filter(|(_, m)| self.pins.get(m.pin).is_some_and(|p| p.alloc == i))
                .count();
            writeln!(
                t,
                "alloc va={:#x} len={:#x} owner={} layout={} runs={} pins={} persistent_pins={} mappings={} freed={}",
                a.va, a.len, a.owner, a.layout, a.mem.runs(), a.pins, a.persistent, maps, u8::from(!a.va_live)
            )?;
        }
        Ok(())
    }
}

/// Sorts `v` ascending (heapsort: no allocation, and none of the core sort
/// routines, which objtool cannot follow in a module).
pub(crate) fn heap_sort<T: Ord + Copy>(v: &mut [T]) {
    fn sift<T: Ord + Copy>(v: &mut [T], mut root: usize, end: usize) {
        loop {
            let mut child = 2 * root + 1;
            if child >= end {
                return;
            }
            if child + 1 < end && v[child] < v[child + 1] {
                child += 1;
            }
            if v[root] >= v[child] {
                return;
            }
            v.swap(root, child);
            root = child;
        }
    }
    let n = v.len();
    for i in (0..n / 2).rev() {
        sift(v, i, n);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift(v, 0, end);
    }
}
