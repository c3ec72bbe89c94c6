// SPDX-License-Identifier: GPL-2.0

//! The simulated GPU: allocations in per-process VA spaces, pins (page
//! tables), cudaFree with its free callbacks, and the contract checks of
//! the pin calls.  The bookkeeping is under the simulator's state lock
//! (`lock::StateGuard`); get_pages/put_pages and cudaFree also hold the API
//! lock (`lock::ApiGuard`), which the free callbacks run under.  DMA
//! mappings are in `mapping.rs`, released objects in `retired.rs`, queries
//! and knobs in `query.rs`.

use kernel::prelude::*;

use crate::abi::{DmaMapping, PageTable};
use crate::bindings::nvidia_p2p_page_table;
use crate::lock::{ApiGuard, FreeCallback, StateGuard};
use crate::memory::{Layout, Memory, GPU_PAGE};
use crate::retired::{Found, Released, Retired};
use crate::slots::Slots;
use crate::sys;
use crate::violation::{self, Call, Event, Kind};

/// The next pin's `PinRec::serial`.
static PIN_SERIAL: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);

/// Where the simulator places allocations: far from anything a process maps.
const VA_BASE: u64 = 0x0000_3000_0000_0000;
const VA_END: u64 = 0x0000_6000_0000_0000;
/// Gap between two allocations (so an off-by-one range is in no allocation).
const VA_GAP: u64 = 2 << 20;
/// The largest single allocation backed by real pages, and a sparse one.
const MAX_ALLOC: u64 = 1 << 30;
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
}

impl Alloc {
    pub(crate) fn contains(&self, va: u64) -> bool {
        va >= self.va && va - self.va < self.len
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

    /// Frees the memory of an allocation nobody can reach any more.
    pub(crate) fn release_memory_if_unused(&mut self, idx: usize) {
        if self
            .allocs
            .get(idx)
            .is_some_and(|a| !a.va_live && a.pins == 0 && a.persistent == 0)
        {
            self.allocs.remove(idx);
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
        };
        self.allocs.insert(a)?;
        Ok(va)
    }

    pub(crate) fn retire_map(&mut self, m: usize, how: Released) {
        if let Some(rec) = self.maps.remove(m) {
            self.retire_mapping(rec.mapping, how);
        }
    }

    /// Frees a mapping for real, keeping only its address in quarantine.
    pub(crate) fn retire_mapping(&mut self, mapping: DmaMapping, how: Released) {
        let seq = self.next_retire_seq();
        let addr = mapping.ptr() as usize;
        mapping.retire();
        self.quarantine(Retired::new(addr, false, how, seq));
    }

    /// After a pin's free callback returned, the driver frees its mappings
    /// and its table -- also under a dma_unmap_pages still in flight, which
    /// in the real driver then uses freed bookkeeping.
    pub(crate) fn teardown_pin(&mut self, p: usize) {
        let in_flight = self
            .maps
            .iter()
            .filter(|(_, m)| m.pin == p && m.unmapping)
            .count();
        if in_flight > 0 {
            let va = self.pins.get(p).map_or(0, |r| r.va);
            violation::report(
                Kind::UnmapInFlightAtFree,
                format_args!(
                    "the free callback of the pin at VA {:#x} returned while {} nvidia_p2p_dma_unmap_pages of it ran: the driver frees the mapping it is using",
                    va, in_flight
                ),
            );
        }
        self.retire_pin(p, Released::ByCallback);
    }

    fn retire_pin(&mut self, p: usize, how: Released) {
        while let Some(m) = self.maps.find(|m| m.pin == p) {
            // A raced mapping's holder lost its own pin to a free
            // callback: any later use of it is judged as such.
            let raced = self.maps.get(m).is_some_and(|r| r.raced);
            self.retire_map(m, if raced { Released::ByCallback } else { how });
        }
        let seq = self.next_retire_seq();
        let Some(rec) = self.pins.remove(p) else {
            return;
        };
        if let Some(a) = self.allocs.get_mut(rec.alloc) {
            if rec.persistent {
                a.persistent -= 1;
            } else {
                a.pins -= 1;
            }
        }
        let alloc = rec.alloc;
        let addr = rec.table.ptr() as usize;
        let va = rec.va;
        rec.table.retire();
        self.quarantine(Retired::new(addr, true, how, seq).with_va(va));
        self.release_memory_if_unused(alloc);
    }

    /// `nvidia_p2p_get_pages` / `_persistent` after the argument checks.
    pub(crate) fn pin(&mut self, args: PinArgs) -> Result<*mut nvidia_p2p_page_table> {
        let owner = sys::current_tgid();
        let idx = self
            .allocs
            .find(|a| a.va_live && a.contains(args.va))
            .ok_or(EINVAL)?;
        let (a_va, a_len, a_owner) = match self.allocs.get(idx) {
            Some(a) => (a.va, a.len, a.owner),
            None => return Err(EINVAL),
        };
        if a_owner != owner {
            // The VA is only valid in its owner's CUDA context.  A process
            // asking for another's VA gets what the real driver answers (not
            // found: EINVAL); a client calling from a kernel thread, outside
            // the registering process's context, breaks the contract.
            if sys::current_is_kthread() {
                violation::report(
                    Kind::ForeignVa,
                    format_args!(
                        "VA {:#x} of process {} asked for from a kernel thread ({})",
                        args.va, a_owner, owner
                    ),
                );
            }
            return Err(EINVAL);
        }
        if args.len > a_len - (args.va - a_va) {
            return Err(EINVAL);
        }
        let site = if args.persistent {
            crate::bindings::NVSIM_FAULT_PERSISTENT
        } else {
            crate::bindings::NVSIM_FAULT_GET_PAGES
        };
        self.take_fault(site)?;
        let first = ((args.va - a_va) / GPU_PAGE) as usize;
        let n = (args.len / GPU_PAGE) as usize;
        let a = self.allocs.get(idx).ok_or(EINVAL)?;
        let runs = a.mem.runs_of(first, n)?;
        let new_table = || PageTable::new(sys::param::pt_version(), n, |i| a.mem.page(first + i));
        let mut table = new_table()?;
        // A table the driver freed after a free callback may still be in a
        // client's hands (the documented dma_map_pages window).  A new table
        // at its address would make that stale pointer pass for the new one
        // (a mapping made for the wrong pin, a release judged as another
        // table's), so within the grace period a new table takes another
        // address.  The old memory stays freed: KASAN still sees a use of it.
        let mut rejected = KVec::new();
        while rejected.len() < 8 && self.freed_by_callback_lately(table.ptr() as usize) {
            let next = new_table()?;
            if rejected
                .push(core::mem::replace(&mut table, next), GFP_KERNEL)
                .is_err()
            {
                break;
            }
        }
        drop(rejected);
        let ptr = table.ptr();
        if self.delay_us > 0 {
            sys::usleep(u64::from(self.delay_us) * n as u64);
        }
        let rec = PinRec {
            serial: PIN_SERIAL.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
            created: self.next_retire_seq(),
            table,
            alloc: idx,
            va: args.va,
            persistent: args.persistent,
            force_bar1: args.force_bar1,
            callback: args.callback,
            data: args.data,
            called: false,
            first,
            npages: n,
            runs,
        };
        self.pins.insert(rec)?;
        if let Some(a) = self.allocs.get_mut(idx) {
            if args.persistent {
                a.persistent += 1;
            } else {
                a.pins += 1;
            }
        }
        Ok(ptr)
    }

    /// The serial, process and allocation VA of the live pin whose table
    /// is at `table`.
    pub(crate) fn pin_serial(&self, table: usize) -> Option<(u64, u32, u64)> {
        let p = self.pins.find(|p| p.table.ptr() as usize == table)?;
        let pin = self.pins.get(p)?;
        let a = self.allocs.get(pin.alloc)?;
        Some((pin.serial, a.owner, a.va))
    }

    /// get_pages' second hold: the free callback of pin `serial`, unless a
    /// cudaFree tore the pin down since the first (-EINVAL: the driver
    /// finds no pin to attach it to).
    pub(crate) fn register_callback(
        &mut self,
        serial: u64,
        callback: FreeCallback,
        data: usize,
    ) -> Result {
        let p = self
            .pins
            .find(|p| p.serial == serial && !p.called)
            .ok_or(EINVAL)?;
        let pin = self.pins.get_mut(p).ok_or(EINVAL)?;
        pin.callback = Some(callback);
        pin.data = data;
        Ok(())
    }

    /// The process and allocation VA of the live pin whose table is at
    /// `table` (for the put hook's free).
    pub(crate) fn pin_owner(&self, table: usize) -> Option<(u32, u64)> {
        let p = self.pins.find(|p| p.table.ptr() as usize == table)?;
        let a = self.allocs.get(self.pins.get(p)?.alloc)?;
        Some((a.owner, a.va))
    }

    /// Is `va` inside a live (not freed) allocation?
    fn va_live(&self, va: u64) -> bool {
        self.allocs.find(|a| a.va_live && a.contains(va)).is_some()
    }

    /// `nvidia_p2p_put_pages` / `_persistent` after the argument checks.
    pub(crate) fn unpin(
        &mut self,
        call: Call,
        va: u64,
        table: usize,
        persistent: bool,
        entry_seq: u64,
    ) -> Result {
        match self.find_table(table) {
            Found::Live(p) => {
                let Some(pin) = self.pins.get(p) else {
                    return Err(EINVAL);
                };
                let (pin_va, pin_alloc, pin_created) = (pin.va, pin.alloc, pin.created);
                if pin.persistent != persistent {
                    let kind = if pin.persistent {
                        "a persistent"
                    } else {
                        "a non-persistent"
                    };
                    violation::report(
                        Kind::BadArgs,
                        format_args!("nvidia_p2p_{} on {} page table", call.name(), kind),
                    );
                    return Err(EINVAL);
                }
                if !persistent {
                    // The real put looks the pin up among the calling
                    // process's RM clients: from another process or a
                    // kernel thread it finds nothing, returns 0, and the
                    // pin and its free callback stay armed.  Processes on
                    // the P2P object's client list (MPS clients:
                    // `client_pids`) are not another process.
                    let owner = self.allocs.get(pin_alloc).map_or(0, |a| a.owner);
                    let tgid = sys::current_tgid();
                    let listed = tgid != owner && sys::param::is_client_pid(tgid);
                    if sys::current_is_kthread() || (tgid != owner && !listed) {
                        Event::ForeignPut.count();
                        pr_info!(
                            "nvidia_p2p_put_pages of VA {:#x} (process {}) from {} {}: not this process's pin, ignored\n",
                            va,
                            owner,
                            if sys::current_is_kthread() { "kernel thread" } else { "process" },
                            sys::current_tgid()
                        );
                        return Ok(());
                    }
                    // RM finds the pin by the table pointer alone.  A put
                    // that started before this pin was made, or that names
                    // the VA of a table freed at this address after its
                    // callback, is a late put of that freed table: the
                    // driver releases this other, live pin.
                    if pin_created > entry_seq || (pin_va != va && self.late_put_of(table, va)) {
                        self.put_released_other_pin(p, va, table);
                        return Ok(());
                    }
                }
                if pin_va != va {
                    violation::report(
                        Kind::BadArgs,
                        format_args!(
                            "nvidia_p2p_{}: VA {:#x} is not the table's {:#x}",
                            call.name(),
                            va,
                            pin_va
                        ),
                    );
                    return Err(EINVAL);
                }
                // The driver's put can fail (-ENOMEM from its stack cache,
                // NV_ERR_INVALID_STATE): nothing is released then.
                self.take_fault(if persistent {
                    crate::bindings::NVSIM_FAULT_PUT_PERSISTENT
                } else {
                    crate::bindings::NVSIM_FAULT_PUT
                })?;
                let live_maps = self
                    .maps
                    .iter()
                    .filter(|(_, m)| m.pin == p && m.owners())
                    .count();
                if live_maps > 0 {
                    let in_unmap = self
                        .maps
                        .iter()
                        .filter(|(_, m)| m.pin == p && m.unmapping)
                        .count();
                    let called = self.pins.get(p).is_some_and(|pin| pin.called);
                    violation::report(
                        Kind::PutBeforeUnmap,
                        format_args!(
                            "nvidia_p2p_{} of VA {:#x} with {} DMA mapping(s) of the table still live ({} of them in dma_unmap_pages; free callback {}), from process {}",
                            call.name(),
                            va,
                            live_maps,
                            in_unmap,
                            if called { "called" } else { "not called" },
                            sys::current_tgid()
                        ),
                    );
                }
                self.retire_pin(p, Released::ByClient);
                Ok(())
            }
            Found::Retired(q) => match self.retired_table_for(table, va) {
                Some(q) => self.stale(call, q, entry_seq, true, "page table"),
                // The records at this address are other VAs' tables: this
                // put's own table was released long ago.  If its memory is
                // freed (the driver tore the pin down after the callback),
                // a late put finds no pin and returns 0 -- benign.
                None if !persistent && !self.va_live(va) => {
                    self.raced += 1;
                    Ok(())
                }
                None => self.stale(call, q, entry_seq, true, "page table"),
            },
            Found::Unknown => {
                violation::report(
                    Kind::UnknownObject,
                    format_args!(
                        "nvidia_p2p_{}: page table {:#x} was never handed out",
                        call.name(),
                        table
                    ),
                );
                Err(EINVAL)
            }
        }
    }

    /// A late put of a freed table whose address pin `p` of the same
    /// process now has: the driver releases `p` (its BAR1 mappings, its
    /// table, its free callback) as if its owner had put it.  The owner
    /// keeps a freed table, and its cudaFree will fence nothing.
    fn put_released_other_pin(&mut self, p: usize, va: u64, table: usize) {
        let (victim_va, serial, maps, owner) = match self.pins.get(p) {
            Some(pin) => (
                pin.va,
                pin.serial,
                self.maps.iter().filter(|(_, m)| m.pin == p).count(),
                self.allocs.get(pin.alloc).map_or(0, |a| a.owner),
            ),
            None => return,
        };
        violation::report(
            Kind::PutReleasedOtherPin,
            format_args!(
                "nvidia_p2p_put_pages of VA {:#x} (its page table {:#x} was freed after its free \
                 callback) released the live pin of VA {:#x} (pin #{}, process {}, {} DMA \
                 mapping(s)) that the driver had put at that address since: its owner keeps a \
                 freed page table and its free callback will never run",
                va, table, victim_va, serial, owner, maps
            ),
        );
        self.retire_pin(p, Released::ByStalePut);
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
