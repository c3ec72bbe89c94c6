// SPDX-License-Identifier: GPL-2.0

//! The simulated GPU: allocations in per-process VA spaces, pins (page
//! tables) and DMA mappings, cudaFree with its free callbacks, and the
//! contract checks of the pin/map calls.  All of it runs under the API lock
//! (`lock::ApiGuard`); released objects are handled in `retired.rs`, queries
//! and knobs in `query.rs`.

use core::ptr::NonNull;
use kernel::prelude::*;

use crate::abi::{DmaMapping, PageTable};
use crate::bindings::{nvidia_p2p_dma_mapping, nvidia_p2p_page_table, pci_dev};
use crate::lock::{ApiGuard, FreeCallback};
use crate::memory::{Layout, Memory, GPU_PAGE};
use crate::retired::{Found, Released, Retired};
use crate::slots::Slots;
use crate::sys::{self, errno};
use crate::violation::{self, Call, Kind};

/// Where the simulator places allocations: far from anything a process maps.
const VA_BASE: u64 = 0x0000_3000_0000_0000;
const VA_END: u64 = 0x0000_6000_0000_0000;
/// Gap between two allocations (so an off-by-one range is in no allocation).
const VA_GAP: u64 = 2 << 20;
/// The largest single allocation.
const MAX_ALLOC: u64 = 1 << 30;
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
    pub(crate) table: PageTable,
    pub(crate) alloc: usize,
    pub(crate) va: u64,
    pub(crate) persistent: bool,
    pub(crate) force_bar1: bool,
    pub(crate) callback: Option<FreeCallback>,
    pub(crate) data: usize,
    pub(crate) called: bool,
    pub(crate) dma: KVec<u64>,
}

/// A live DMA mapping the client holds.
pub(crate) struct MapRec {
    pub(crate) mapping: DmaMapping,
    pub(crate) pin: usize,
    pub(crate) peer: usize,
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
        }
    }

    fn take_fault(&mut self, site: u32) -> Result {
        let f = &mut self.faults[site as usize % FAULT_SITES];
        if f.count == 0 {
            return Ok(());
        }
        f.count -= 1;
        self.injected += 1;
        Err(sys::err(f.err))
    }

    /// Frees the memory of an allocation nobody can reach any more.
    fn release_memory_if_unused(&mut self, idx: usize) {
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

impl ApiGuard<'_> {
    /// cudaMalloc for process `owner` through control file `ctx`.
    pub(crate) fn alloc(
        &mut self,
        owner: u32,
        ctx: u64,
        len: u64,
        layout: Layout,
        want: u64,
    ) -> Result<u64> {
        if len == 0 || len % GPU_PAGE != 0 || len > MAX_ALLOC {
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

    /// cudaFree of the allocation holding `va` in process `owner`'s VA space.
    pub(crate) fn free_va(&mut self, owner: u32, va: u64) -> Result {
        let idx = self
            .allocs
            .find(|a| a.va_live && a.owner == owner && a.contains(va))
            .ok_or(EINVAL)?;
        self.free_alloc(idx);
        Ok(())
    }

    /// Frees every allocation made through control file `ctx` (its close).
    pub(crate) fn free_ctx(&mut self, ctx: u64) -> usize {
        let mut n = 0;
        while let Some(idx) = self.allocs.find(|a| a.va_live && a.ctx == ctx) {
            self.free_alloc(idx);
            n += 1;
        }
        n
    }

    /// The teardown the real driver does on cudaFree: every non-persistent
    /// pin's free callback, synchronously, with the API lock held; then the
    /// page tables and mappings are released (poisoned) by the driver.
    fn free_alloc(&mut self, idx: usize) {
        if let Some(a) = self.allocs.get_mut(idx) {
            a.va_live = false;
        }
        while let Some(p) = self
            .pins
            .find(|p| p.alloc == idx && !p.persistent && !p.called)
        {
            let Some(pin) = self.pins.get_mut(p) else {
                break;
            };
            pin.called = true;
            let (callback, data) = (pin.callback, pin.data);
            self.free_callbacks += 1;
            if let Some(cb) = callback {
                self.run_free_callback(cb, data);
            }
            self.retire_pin(p, Released::ByCallback);
        }
        self.end_free_callbacks();
        self.release_memory_if_unused(idx);
    }

    fn retire_map(&mut self, m: usize, how: Released) {
        let seq = self.next_retire_seq();
        if let Some(rec) = self.maps.remove(m) {
            let addr = rec.mapping.ptr() as usize;
            let r = Retired::new(addr, false, rec.mapping.retire(), how, seq);
            self.quarantine(r);
        }
    }

    fn retire_pin(&mut self, p: usize, how: Released) {
        while let Some(m) = self.maps.find(|m| m.pin == p) {
            self.retire_map(m, how);
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
        let r = Retired::new(addr, true, rec.table.retire(), how, seq);
        self.quarantine(r);
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
        let phys = a.mem.pages().get(first..first + n).ok_or(EINVAL)?;
        let mut dma = KVec::with_capacity(n, GFP_KERNEL)?;
        dma.extend_from_slice(phys, GFP_KERNEL)?;
        let table = PageTable::new(sys::param::pt_version(), phys)?;
        if self.delay_us > 0 {
            sys::usleep(u64::from(self.delay_us) * n as u64);
        }
        let ptr = table.ptr();
        let rec = PinRec {
            table,
            alloc: idx,
            va: args.va,
            persistent: args.persistent,
            force_bar1: args.force_bar1,
            callback: args.callback,
            data: args.data,
            called: false,
            dma,
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
                if pin.va != va {
                    violation::report(
                        Kind::BadArgs,
                        format_args!(
                            "nvidia_p2p_{}: VA {:#x} is not the table's {:#x}",
                            call.name(),
                            va,
                            pin.va
                        ),
                    );
                    return Err(EINVAL);
                }
                let live_maps = self.maps.iter().filter(|(_, m)| m.pin == p).count();
                if live_maps > 0 {
                    violation::report(
                        Kind::PutBeforeUnmap,
                        format_args!(
                            "nvidia_p2p_{} with {} DMA mapping(s) of the table still live",
                            call.name(),
                            live_maps
                        ),
                    );
                }
                self.retire_pin(p, Released::ByClient);
                Ok(())
            }
            Found::Retired(q) => self.stale(call, q, entry_seq, true, "page table"),
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

    /// `nvidia_p2p_dma_map_pages` after the argument checks.
    pub(crate) fn map(
        &mut self,
        peer: NonNull<pci_dev>,
        table: usize,
        entry_seq: u64,
    ) -> Result<*mut nvidia_p2p_dma_mapping> {
        match self.find_table(table) {
            Found::Live(p) => {
                let Some(pin) = self.pins.get(p) else {
                    return Err(EINVAL);
                };
                if pin.force_bar1 {
                    return Err(sys::err(errno::ENOTSUPP));
                }
                self.take_fault(crate::bindings::NVSIM_FAULT_DMA_MAP)?;
                let Some(pin) = self.pins.get(p) else {
                    return Err(EINVAL);
                };
                let mapping = DmaMapping::new(&pin.dma, peer)?;
                let ptr = mapping.ptr();
                self.maps.insert(MapRec {
                    mapping,
                    pin: p,
                    peer: peer.as_ptr() as usize,
                })?;
                Ok(ptr)
            }
            Found::Retired(q) => self
                .stale(Call::DmaMapPages, q, entry_seq, false, "page table")
                .and(Err(EINVAL)),
            Found::Unknown => {
                violation::report(
                    Kind::UnknownObject,
                    format_args!(
                        "nvidia_p2p_dma_map_pages: page table {:#x} was never handed out",
                        table
                    ),
                );
                Err(EINVAL)
            }
        }
    }

    /// `nvidia_p2p_dma_unmap_pages` after the argument checks.
    pub(crate) fn unmap(
        &mut self,
        peer: NonNull<pci_dev>,
        table: usize,
        mapping: usize,
        entry_seq: u64,
    ) -> Result {
        match self.find_mapping(mapping) {
            Found::Live(m) => {
                let Some(rec) = self.maps.get(m) else {
                    return Err(EINVAL);
                };
                let owner_table = self.pins.get(rec.pin).map_or(0, |p| p.table.ptr() as usize);
                if owner_table != table {
                    violation::report(
                        Kind::BadArgs,
                        format_args!(
                            "nvidia_p2p_dma_unmap_pages: mapping {:#x} is not of page table {:#x}",
                            mapping, table
                        ),
                    );
                    return Err(EINVAL);
                }
                if rec.peer != peer.as_ptr() as usize {
                    violation::report(
                        Kind::WrongPeer,
                        format_args!("nvidia_p2p_dma_unmap_pages: mapping {:#x} was made for another peer device", mapping),
                    );
                    return Err(EINVAL);
                }
                self.retire_map(m, Released::ByClient);
                Ok(())
            }
            Found::Retired(q) => self.stale(Call::DmaUnmapPages, q, entry_seq, true, "DMA mapping"),
            Found::Unknown => {
                violation::report(
                    Kind::UnknownObject,
                    format_args!(
                        "nvidia_p2p_dma_unmap_pages: mapping {:#x} was never handed out",
                        mapping
                    ),
                );
                Err(EINVAL)
            }
        }
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
        drop(self.maps.take_all());
        drop(self.pins.take_all());
        drop(self.retired.take_all());
        drop(self.allocs.take_all());
    }
}
