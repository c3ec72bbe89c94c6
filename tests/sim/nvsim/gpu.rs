// SPDX-License-Identifier: GPL-2.0

//! The simulated GPU: allocations in per-process VA spaces, pins (page
//! tables), cudaFree with its free callbacks, and the contract checks of
//! the pin calls.  The bookkeeping is under the simulator's state lock
//! (`lock::StateGuard`); get_pages/put_pages and cudaFree also hold the API
//! lock (`lock::ApiGuard`), which the free callbacks run under.  Pins and
//! their release are in `pin.rs`, DMA mappings in `mapping.rs`, released
//! objects in `retired.rs`, queries and knobs in `query.rs`.

use kernel::prelude::*;

use crate::abi::{DmaMapping, PageTable};
use crate::lock::{ApiGuard, FreeCallback, StateGuard};
use crate::memory::{Layout, Memory, GPU_PAGE};
use crate::retired::Retired;
use crate::slots::Slots;
use crate::sys;
use crate::violation::{self, Kind};

/// Where the simulator places allocations: far from anything a process maps.
const VA_BASE: u64 = 0x0000_3000_0000_0000;
const VA_END: u64 = 0x0000_6000_0000_0000;
/// Gap between two allocations (so an off-by-one range is in no allocation).
const VA_GAP: u64 = 2 << 20;
/// The largest single allocation backed by real pages, and a sparse one.
const MAX_ALLOC: u64 = 4 << 30;
const MAX_SPARSE_ALLOC: u64 = 256 << 30;
/// Fault injection sites, as in `struct nvsim_fault`.
pub(crate) const FAULT_SITES: usize = crate::bindings::NVSIM_FAULT_SITES as usize;

/// One cudaMalloc.
pub(crate) struct Alloc {
    pub(crate) va: u64,
    pub(crate) len: u64,
    pub(crate) owner: u32,
    pub(crate) ctx: u64,
    pub(crate) layout: Layout,
    pub(crate) mem: Memory,
    /// The VA is still allocated (false after cudaFree while persistent pins
    /// keep the memory).
    pub(crate) va_live: bool,
    pub(crate) pins: u32,
    pub(crate) persistent: u32,
    /// Other processes on the P2P object's client list (REGISTER_PID, as
    /// an MPS server adds its clients): they may pin and put this memory
    /// until their own RM client is destroyed (`remove_client_pid`).
    pub(crate) clients: KVec<u32>,
}

impl Alloc {
    pub(crate) fn contains(&self, va: u64) -> bool {
        va >= self.va && va - self.va < self.len
    }

    /// Whether process `tgid` reaches this memory through its P2P object:
    /// the owner, or a process on the object's client list.
    pub(crate) fn reachable_by(&self, tgid: u32) -> bool {
        tgid == self.owner || self.clients.contains(&tgid)
    }
}

/// A live pin: a page table the client holds.
pub(crate) struct PinRec {
    /// Unique over the module's life: a slot index and a table address can
    /// both be reused once a pin is freed (an unlocked dma_map step must not
    /// mistake a new pin for the one it started on).
    pub(crate) serial: u64,
    /// The retire sequence number taken when the pin was made: a call that
    /// started before it cannot have been handed this pin's table.
    pub(crate) created: u64,
    pub(crate) table: PageTable,
    pub(crate) alloc: usize,
    pub(crate) va: u64,
    pub(crate) persistent: bool,
    pub(crate) force_bar1: bool,
    pub(crate) callback: Option<FreeCallback>,
    pub(crate) data: usize,
    pub(crate) called: bool,
    /// The table's first GPU page in its allocation, and the page count.
    pub(crate) first: usize,
    pub(crate) npages: usize,
    /// The contiguous bus-address runs `(start, end)` of the pinned pages.
    pub(crate) runs: KVVec<(u64, u64)>,
    /// Made by the bench's same-process neighbour (sim_neighbour.ko marks
    /// its get_pages): a dma_map of another caller that meets this pin is
    /// the neighbour's harm (`map_newer_neighbour_pin`), not the caller's.
    pub(crate) neighbour: bool,
}

/// A live DMA mapping the client holds.
pub(crate) struct MapRec {
    pub(crate) mapping: DmaMapping,
    pub(crate) pin: usize,
    pub(crate) peer: usize,
    /// A dma_unmap_pages of it is in flight (between its start and end).
    pub(crate) unmapping: bool,
    /// A dma_unmap_pages of it failed (injected): the put of its table
    /// frees it, as the driver does, and is no `put_before_unmap`.
    pub(crate) unmap_failed: bool,
    /// Made for a caller whose own table was freed during its
    /// dma_map_pages and whose address this pin got since: the driver
    /// mapped or linked it into this pin (mapping.rs).  This pin's owner
    /// never made it: its put frees it, as the driver does, and is no
    /// `put_before_unmap`.
    pub(crate) raced: bool,
}

impl MapRec {
    /// Whether the pin's owner answers for it when putting the pin.
    pub(crate) fn owners(&self) -> bool {
        !self.unmap_failed && !self.raced
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Fault {
    pub(crate) count: u32,
    pub(crate) err: i32,
}

/// Everything the API lock protects.
pub(crate) struct GpuState {
    pub(crate) allocs: Slots<Alloc>,
    pub(crate) pins: Slots<PinRec>,
    pub(crate) maps: Slots<MapRec>,
    pub(crate) retired: Slots<Retired>,
    pub(crate) next_va: u64,
    pub(crate) faults: [Fault; FAULT_SITES],
    pub(crate) delay_us: u32,
    pub(crate) free_callbacks: u64,
    pub(crate) raced: u64,
    pub(crate) injected: u64,
    pub(crate) hooks: crate::hooks::Armed,
    /// Mappings a dma_map_pages handed out after a cudaFree tore its pin
    /// down during the epilogue: the driver linked them into freed
    /// bookkeeping and nobody frees them (the driver's leak, kept here so
    /// the memory stays valid for a client that reads it, freed at unload).
    pub(crate) orphan_maps: Slots<DmaMapping>,
    /// The bus-address runs of pins the bench's same-process neighbour
    /// released by a late put (pin.rs): a client's registration still
    /// mapping them is the neighbour's harm (`dma_live` answers ESTALE).
    pub(crate) neighbour_runs: Slots<(u64, u64)>,
    /// The memory of freed allocations those runs lie in, kept until unload
    /// (`release_memory_if_unused`).
    pub(crate) neighbour_memory: Slots<Memory>,
}

impl GpuState {
    /// The state of a GPU with no memory allocated.
    pub(crate) const fn new() -> Self {
        Self {
            allocs: Slots::new(),
            pins: Slots::new(),
            maps: Slots::new(),
            retired: Slots::new(),
            next_va: VA_BASE,
            faults: [Fault { count: 0, err: 0 }; FAULT_SITES],
            delay_us: 0,
            free_callbacks: 0,
            raced: 0,
            injected: 0,
            hooks: crate::hooks::Armed::new(),
            orphan_maps: Slots::new(),
            neighbour_runs: Slots::new(),
            neighbour_memory: Slots::new(),
        }
    }

    pub(crate) fn take_fault(&mut self, site: u32) -> Result {
        let f = &mut self.faults[site as usize % FAULT_SITES];
        if f.count == 0 {
            return Ok(());
        }
        f.count -= 1;
        self.injected += 1;
        Err(sys::err(f.err))
    }

    /// Frees the memory of an allocation nobody can reach any more.  Memory
    /// that pins the neighbour's late puts released lie in stays out of the
    /// kernel's hands until unload (`neighbour_memory`): a registration
    /// still mapping it is the neighbour's harm whenever the core checks it
    /// (before or after this free), and no later allocation can get its
    /// pages and be taken for the neighbour's.  The pages are reachable by
    /// no DMA either way (`bar_access` answers only live pinned memory).
    pub(crate) fn release_memory_if_unused(&mut self, idx: usize) {
        if !self
            .allocs
            .get(idx)
            .is_some_and(|a| !a.va_live && a.pins == 0 && a.persistent == 0)
        {
            return;
        }
        let Some(a) = self.allocs.remove(idx) else {
            return;
        };
        let released = self
            .neighbour_runs
            .find(|&(start, _)| a.mem.page_at(start).is_some())
            .is_some();
        if released {
            if let Err(mem) = self.neighbour_memory.insert_or_return(a.mem) {
                // No room to keep it: forget its runs, so that a later
                // allocation on its pages is not taken for the neighbour's
                // (a registration still mapping them is then reported as
                // the client's dma_after_free: harsher).
                while let Some(i) = self
                    .neighbour_runs
                    .find(|&(start, _)| mem.page_at(start).is_some())
                {
                    self.neighbour_runs.remove(i);
                }
            }
        }
    }

    /// Live pins (both kinds) and mappings.
    pub(crate) fn outstanding(&self) -> (usize, usize, usize) {
        let persistent = self.pins.iter().filter(|(_, p)| p.persistent).count();
        (
            self.pins.count() - persistent,
            persistent,
            self.maps.count(),
        )
    }
}

/// Arguments of a pin request.
pub(crate) struct PinArgs {
    pub(crate) va: u64,
    pub(crate) len: u64,
    pub(crate) persistent: bool,
    pub(crate) force_bar1: bool,
    pub(crate) callback: Option<FreeCallback>,
    pub(crate) data: usize,
}

impl StateGuard<'_> {
    /// cudaMalloc for process `owner` through control file `ctx`.
    pub(crate) fn alloc(
        &mut self,
        owner: u32,
        ctx: u64,
        len: u64,
        layout: Layout,
        want: u64,
    ) -> Result<u64> {
        let max = match layout {
            Layout::Sparse(_) => MAX_SPARSE_ALLOC,
            _ => MAX_ALLOC,
        };
        if len == 0 || len % GPU_PAGE != 0 || len > max {
            return Err(EINVAL);
        }
        let va = if want != 0 {
            let end = want.checked_add(len).ok_or(EINVAL)?;
            if want % GPU_PAGE != 0 || end > VA_END {
                return Err(EINVAL);
            }
            if self
                .allocs
                .find(|a| a.va_live && a.va < end && want < a.va + a.len)
                .is_some()
            {
                return Err(EEXIST);
            }
            want
        } else {
            let va = self.next_va;
            let end = va.checked_add(len).ok_or(ENOMEM)?;
            if end > VA_END {
                return Err(ENOMEM);
            }
            self.next_va = (end + VA_GAP).next_multiple_of(VA_GAP);
            va
        };
        let mem = Memory::new((len / GPU_PAGE) as usize, layout)?;
        let a = Alloc {
            va,
            len,
            owner,
            ctx,
            layout,
            mem,
            va_live: true,
            pins: 0,
            persistent: 0,
            clients: KVec::new(),
        };
        self.allocs.insert(a)?;
        Ok(va)
    }

    /// REGISTER_PID: process `pid` joins the client list of the live
    /// allocation holding `va` (`third_party_p2p_ctrl.c`).
    pub(crate) fn share(&mut self, va: u64, pid: u32) -> Result {
        if pid == 0 {
            return Err(EINVAL);
        }
        let idx = self
            .allocs
            .find(|a| a.va_live && a.contains(va))
            .ok_or(EINVAL)?;
        let a = self.allocs.get_mut(idx).ok_or(EINVAL)?;
        if !a.reachable_by(pid) {
            a.clients.push(pid, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// The RM client of process `pid` was destroyed (its control file was
    /// closed): `pid` leaves every allocation's client list, as
    /// `CliUnregisterFromThirdPartyP2P` does, while the pins it made stay
    /// armed with their callbacks.  Returns how many lists it left.
    pub(crate) fn remove_client_pid(&mut self, pid: u32) -> usize {
        let mut n = 0;
        for (_, a) in self.allocs.iter_mut() {
            let before = a.clients.len();
            a.clients.retain(|p| *p != pid);
            n += before - a.clients.len();
        }
        n
    }

    /// Module unload: reports pins still held, then frees everything.
    pub(crate) fn shutdown(&mut self) {
        let (pins, persistent, maps) = self.outstanding();
        if pins + persistent > 0 {
            violation::report(
                Kind::PinsAtUnload,
                format_args!(
                    "{} pin(s) ({} persistent) and {} mapping(s) still held at unload",
                    pins + persistent,
                    persistent,
                    maps
                ),
            );
        }
        let orphans = self.orphan_maps.count();
        if orphans > 0 {
            pr_info!(
                "{} mapping(s) handed out during a cudaFree's teardown (the driver's leak) freed at unload\n",
                orphans
            );
        }
        drop(self.orphan_maps.take_all());
        drop(self.neighbour_runs.take_all());
        drop(self.neighbour_memory.take_all());
        drop(self.maps.take_all());
        drop(self.pins.take_all());
        drop(self.retired.take_all());
        drop(self.allocs.take_all());
    }
}

impl ApiGuard<'_> {
    /// cudaFree of the allocation holding `va` in process `owner`'s VA space.
    pub(crate) fn free_va(&mut self, owner: u32, va: u64) -> Result {
        let idx = self
            .state()
            .allocs
            .find(|a| a.va_live && a.owner == owner && a.contains(va))
            .ok_or(EINVAL)?;
        self.free_alloc(idx);
        Ok(())
    }

    /// Frees every allocation made through control file `ctx` (its close).
    pub(crate) fn free_ctx(&mut self, ctx: u64) -> usize {
        let mut n = 0;
        loop {
            let idx = self.state().allocs.find(|a| a.va_live && a.ctx == ctx);
            let Some(idx) = idx else { break };
            self.free_alloc(idx);
            n += 1;
        }
        n
    }

    /// The teardown the real driver does on cudaFree: every non-persistent
    /// pin's free callback, synchronously, with the API lock held (the
    /// bookkeeping lock is not held across the callback: dma_unmap_pages
    /// needs no API lock and may run meanwhile); after each callback
    /// returned, the driver frees that pin's mappings and page table.
    fn free_alloc(&mut self, idx: usize) {
        if let Some(a) = self.state().allocs.get_mut(idx) {
            a.va_live = false;
        }
        loop {
            let next = {
                let mut s = self.state();
                let p = s
                    .pins
                    .find(|p| p.alloc == idx && !p.persistent && !p.called);
                match p {
                    Some(p) => {
                        s.free_callbacks += 1;
                        s.pins.get_mut(p).map(|pin| {
                            pin.called = true;
                            (p, pin.callback, pin.data)
                        })
                    }
                    None => None,
                }
            };
            let Some((p, callback, data)) = next else {
                break;
            };
            if let Some(cb) = callback {
                self.run_free_callback(cb, data);
            }
            self.state().teardown_pin(p);
        }
        self.end_free_callbacks();
        self.state().release_memory_if_unused(idx);
    }
}
