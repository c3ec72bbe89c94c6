// SPDX-License-Identifier: GPL-2.0

//! DMA mappings as the real driver makes and releases them, with its
//! windows:
//! - `nvidia_p2p_dma_map_pages` reads the page table and the allocation's
//!   bookkeeping *before* taking the API lock (prologue), maps under it, and
//!   links the new mapping into the bookkeeping at the table's address
//!   *after* dropping it (epilogue).  Neither window is the client's fault
//!   (it cannot close them); each is counted (`map_raced_free`), and the
//!   outcome is the real driver's:
//!   - a cudaFree in the prologue frees the table it is about to read: it
//!     reads freed memory (`driver_reads`) and maps what it read, the freed
//!     memory's addresses (the real one may hit its `BUG_ON` first, on a
//!     poisoned page size), then links as after a free in the epilogue;
//!   - if a newer pin got the freed table's address before the reads, the
//!     driver reads *that* pin's table: it maps that pin's memory for the
//!     caller and links the mapping into it (`map_newer_pin`);
//!   - a cudaFree in the epilogue: while the pin's teardown is pending the
//!     mapping is linked into it and the teardown frees it; once the
//!     bookkeeping is freed, the link is a write into freed memory
//!     (`driver_reads`) and the mapping is never freed (`orphan_mappings`);
//!     if a newer pin has the address by then, the mapping is linked into
//!     that pin (`map_newer_pin`).
//!   The caller gets the mapping in every case.
//! - `nvidia_p2p_dma_unmap_pages` takes no API lock (only the allocation's
//!   mapping-list lock): it may run while a free callback runs.  If the
//!   callback returns while the unmap is still in flight, the driver frees
//!   the bookkeeping the unmap uses: `unmap_in_flight_at_free` (pin.rs).

use core::ptr::NonNull;
use kernel::prelude::*;

use crate::abi::DmaMapping;
use crate::bindings::{nvidia_p2p_dma_mapping, pci_dev};
use crate::gpu::MapRec;
use crate::lock::StateGuard;
use crate::retired::{Found, Released, Retired};
use crate::sys::{self, errno};
use crate::violation::{self, Call, Event, Kind};

/// What dma_map's prologue read: the pin and where a free hook frees.
pub(crate) struct Prologue {
    pin: usize,
    serial: u64,
    /// The page table's address, as the caller passed it.
    pub(crate) table: usize,
    /// The allocation's owner and VA (the free hooks free it).
    pub(crate) owner: u32,
    pub(crate) va: u64,
    /// The pin is not the one the caller was given: a newer pin took the
    /// freed table's address during the call.
    raced: bool,
    /// Counted once per call each: a newer pin of any caller but the
    /// bench's neighbour met (`map_newer_pin`), a newer pin of the
    /// neighbour met (`map_newer_neighbour_pin`).
    met_other: bool,
    met_neighbour: bool,
    /// A cudaFree freed what the call was using (`map_raced_free`, counted
    /// once per call, whichever step saw it first).
    freed: bool,
    /// The mapping being made: the driver copies the table's page
    /// addresses before its lock, maps them under it.
    mapping: DmaMapping,
}

impl Prologue {
    /// Notes that a cudaFree freed what this call was using: the driver's
    /// hazard, counted once per call.
    fn raced_free(&mut self) {
        if !self.freed {
            self.freed = true;
            Event::MapRacedFree.count();
        }
    }
}

/// Where dma_map's epilogue linked the mapping it hands out.
pub(crate) enum Linked {
    /// Into a live pin's bookkeeping.
    Into(*mut nvidia_p2p_dma_mapping),
    /// Into the freed bookkeeping of the caller's table (the driver's
    /// write into freed memory is the caller's to make: entry.rs).
    IntoFreed(*mut nvidia_p2p_dma_mapping),
}

/// A dma_unmap in flight.
pub(crate) struct Unmapping {
    map: usize,
    mapping: usize,
    /// The allocation's owner and VA (the free hooks free it).
    pub(crate) owner: u32,
    pub(crate) va: u64,
}

impl StateGuard<'_> {
    fn unknown(&self, call: Call, what: &str, ptr: usize) -> Error {
        violation::report(
            Kind::UnknownObject,
            format_args!(
                "nvidia_p2p_{}: {} {:#x} was never handed out",
                call.name(),
                what,
                ptr
            ),
        );
        EINVAL
    }

    /// dma_map_pages, the unlocked prologue: the page table and its pin.
    pub(crate) fn map_prologue(
        &mut self,
        table: usize,
        entry_seq: u64,
        peer: NonNull<pci_dev>,
    ) -> Result<Prologue> {
        match self.find_table(table) {
            Found::Live(p) => {
                let pin = self.pins.get(p).ok_or(EINVAL)?;
                // Made after the call started: the table the caller was
                // given was freed after its callback, and this newer pin
                // has its address.
                let raced = pin.created > entry_seq;
                // A pin a late put released here before its owner mapped it,
                // and not put by that owner since: this map may be that
                // owner's, reaching the newer pin (harsher: reported).
                if !raced && self.unmapped_victim_pending(table, pin.created) {
                    violation::report(
                        Kind::PutReleasedOtherPin,
                        format_args!(
                            "nvidia_p2p_dma_map_pages of page table {:#x}: a late put released \
                             the pin there before its owner mapped it, its owner never put it, \
                             and a newer pin has the address now: the owner's map reaches that pin",
                            table
                        ),
                    );
                }
                let mut pro = self.prologue_of(p, table, peer)?;
                if raced {
                    self.map_newer_pin(&mut pro, p, "the prologue");
                }
                Ok(pro)
            }
            Found::Retired(q) => self
                .stale(Call::DmaMapPages, q, entry_seq, false, "page table")
                .and(Err(EINVAL)),
            Found::Unknown => Err(self.unknown(Call::DmaMapPages, "page table", table)),
        }
    }

    fn prologue_of(&self, p: usize, table: usize, peer: NonNull<pci_dev>) -> Result<Prologue> {
        let pin = self.pins.get(p).ok_or(EINVAL)?;
        let a = self.allocs.get(pin.alloc).ok_or(EINVAL)?;
        Ok(Prologue {
            pin: p,
            serial: pin.serial,
            table,
            owner: a.owner,
            va: a.va,
            raced: false,
            met_other: false,
            met_neighbour: false,
            freed: false,
            mapping: self.copy_pages(p, peer)?,
        })
    }

    /// The driver's copy of pin `p`'s page addresses into a new mapping.
    fn copy_pages(&self, p: usize, peer: NonNull<pci_dev>) -> Result<DmaMapping> {
        let pin = self.pins.get(p).ok_or(EINVAL)?;
        let a = self.allocs.get(pin.alloc).ok_or(EINVAL)?;
        let first = pin.first;
        DmaMapping::new(pin.npages, |i| a.mem.page(first + i), peer)
    }

    /// The caller's table was freed during its dma_map_pages and pin `p`
    /// has its address now: the driver, which knows the table by its
    /// address alone, goes on with `p` -- the documented window, the
    /// driver's hazard, counted, not the client's violation.  A pin the
    /// bench's same-process neighbour made is outside every gate of the
    /// caller's: meeting it is counted as the neighbour's harm.
    fn map_newer_pin(&mut self, pro: &mut Prologue, p: usize, when: &str) {
        pro.raced_free();
        let (serial, va, neighbour) = self
            .pins
            .get(p)
            .map_or((0, 0, false), |q| (q.serial, q.va, q.neighbour));
        let met = if neighbour {
            &mut pro.met_neighbour
        } else {
            &mut pro.met_other
        };
        if !*met {
            *met = true;
            if neighbour {
                Event::MapNewerNeighbourPin.count();
            } else {
                Event::MapNewerPin.count();
            }
        }
        pr_info!(
            "nvidia_p2p_dma_map_pages: the page table was freed during the call and a newer pin (VA {:#x}{}) has its address: {} goes on with that pin, for this caller\n",
            va,
            if neighbour { ", the same-process neighbour's" } else { "" },
            when
        );
        pro.pin = p;
        pro.serial = serial;
        pro.raced = true;
    }

    /// Whether the pin the prologue found is still live: the same pin (by
    /// serial: its slot and its table's address may have been reused by a
    /// newer pin since a cudaFree freed it).
    fn still_live(&self, pro: &Prologue) -> bool {
        self.pins
            .get(pro.pin)
            .is_some_and(|p| p.serial == pro.serial && p.table.ptr() as usize == pro.table)
    }

    /// The live pin at the prologue's table address, once the prologue's
    /// own pin is gone (not `still_live`): a newer pin got the address.
    fn newer_pin_at(&self, pro: &Prologue) -> Option<usize> {
        match self.find_table(pro.table) {
            Found::Live(q) => Some(q),
            _ => None,
        }
    }

    /// dma_map_pages, under the API lock: maps the copied addresses.
    /// `Ok(true)`: a cudaFree freed the table during the prologue and no
    /// pin has its address: the driver read the freed table (entry.rs
    /// makes those reads) and maps what it read -- the freed memory's
    /// addresses, which the caller gets.
    pub(crate) fn map_locked(
        &mut self,
        pro: &mut Prologue,
        peer: NonNull<pci_dev>,
    ) -> Result<bool> {
        if !self.still_live(pro) {
            match self.newer_pin_at(pro) {
                // The driver's reads (after the free) find that pin's table.
                Some(q) => {
                    pro.mapping = self.copy_pages(q, peer)?;
                    self.map_newer_pin(pro, q, "the map");
                }
                None => {
                    // Not the client's doing.
                    pro.raced_free();
                    return Ok(true);
                }
            }
        }
        if self.pins.get(pro.pin).ok_or(EINVAL)?.force_bar1 {
            return Err(sys::err(errno::ENOTSUPP));
        }
        self.take_fault(crate::bindings::NVSIM_FAULT_DMA_MAP)?;
        Ok(false)
    }

    /// dma_map_pages, the unlocked epilogue: links the mapping into the
    /// bookkeeping at the table's address, whatever lives there now, and
    /// hands it out (the module docs: the three outcomes of a cudaFree).
    pub(crate) fn map_epilogue(
        &mut self,
        mut pro: Prologue,
        peer: NonNull<pci_dev>,
    ) -> Result<Linked> {
        let ptr = pro.mapping.ptr();
        if self.still_live(&pro) {
            if self.pins.get(pro.pin).is_some_and(|p| p.called) {
                // The pin's teardown is pending (its callback runs): it
                // will free this mapping with the pin's others.
                pro.raced_free();
                pr_info!(
                    "nvidia_p2p_dma_map_pages: the allocation is being freed (epilogue): the \
                     mapping is handed out, and freed with the pin when its callback returns\n"
                );
            }
        } else if let Some(q) = self.newer_pin_at(&pro) {
            self.map_newer_pin(&mut pro, q, "the link");
        } else {
            // The bookkeeping is freed: the link writes into freed memory
            // and nobody will ever free the mapping.  The caller gets it
            // too; any later use of it with its (freed) table is a use
            // after the callback.
            pro.raced_free();
            pr_info!(
                "nvidia_p2p_dma_map_pages: the allocation was freed during the call (epilogue): \
                 the mapping is linked into the freed bookkeeping, handed out and never freed\n"
            );
            let seq = self.next_retire_seq();
            self.quarantine(Retired::new(ptr as usize, false, Released::ByCallback, seq));
            // (On allocation failure it is freed instead.)
            let _ = self.orphan_maps.insert(pro.mapping);
            return Ok(Linked::IntoFreed(ptr));
        }
        // The owner's own map of a pin that holds a mapping linked into it
        // for another caller's late map: the owner never learnt (a client
        // that did puts that pin, and its mappings with it, and pins anew).
        if !pro.raced && self.maps.iter().any(|(_, m)| m.pin == pro.pin && m.raced) {
            let va = self.pins.get(pro.pin).map_or(0, |p| p.va);
            violation::report(
                Kind::MapNewerPinKept,
                format_args!(
                    "nvidia_p2p_dma_map_pages of the pin of VA {:#x}, which holds a mapping the \
                     driver linked into it for a late dma_map_pages of a freed page table at \
                     its address (map_newer_pin): its owner goes on with it",
                    va
                ),
            );
        }
        let rec = MapRec {
            mapping: pro.mapping,
            pin: pro.pin,
            peer: peer.as_ptr() as usize,
            unmapping: false,
            unmap_failed: false,
            raced: pro.raced,
        };
        // On failure the mapping is dropped (freed) with `rec`.
        self.maps.insert(rec)?;
        Ok(Linked::Into(ptr))
    }

    /// Whether a lookup found an object the driver released after its free
    /// callback (or, for a mapping, handed out in a torn-down epilogue).
    fn released_by_callback(&self, found: Found) -> bool {
        match found {
            Found::Retired(q) => self
                .retired
                .get(q)
                .is_some_and(|r| r.how() == Released::ByCallback),
            _ => false,
        }
    }

    /// Whether `table` is no live page table but one the driver released
    /// after its free callback.
    pub(crate) fn table_freed_by_callback(&self, table: usize) -> bool {
        self.released_by_callback(self.find_table(table))
    }

    /// Whether `mapping` is no live mapping but one the driver released on
    /// its own side: after its free callback (or handed out in a torn-down
    /// epilogue), or with its pin when another client's late put found that
    /// pin by its table's address (`nv_p2p_free_page_table` frees every
    /// mapping of the table).
    pub(crate) fn mapping_freed_by_driver(&self, mapping: usize) -> bool {
        match self.find_mapping(mapping) {
            Found::Retired(q) => self
                .retired
                .get(q)
                .is_some_and(|r| matches!(r.how(), Released::ByCallback | Released::ByStalePut)),
            _ => false,
        }
    }

    /// dma_unmap_pages, start: checks, and marks the mapping in flight.
    /// `None`: a released mapping, judged (and answered) already.
    pub(crate) fn unmap_begin(
        &mut self,
        peer: NonNull<pci_dev>,
        table: usize,
        mapping: usize,
        entry_seq: u64,
    ) -> Result<Option<Unmapping>> {
        let call = Call::DmaUnmapPages;
        match self.find_mapping(mapping) {
            Found::Live(m) => {
                let rec = self.maps.get(m).ok_or(EINVAL)?;
                let pin = self.pins.get(rec.pin);
                let owner_table = pin.map_or(0, |p| p.table.ptr() as usize);
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
                if rec.unmapping {
                    violation::report(
                        Kind::DoublePut,
                        format_args!(
                            "nvidia_p2p_dma_unmap_pages: mapping {:#x} is being unmapped already",
                            mapping
                        ),
                    );
                    return Err(EINVAL);
                }
                let alloc = pin.map_or(usize::MAX, |p| p.alloc);
                let (owner, va) = self.allocs.get(alloc).map_or((0, 0), |a| (a.owner, a.va));
                // The driver's unmap can fail: the mapping stays, and the
                // put of its table frees it (nv_p2p_free_page_table).
                if let Err(e) = self.take_fault(crate::bindings::NVSIM_FAULT_UNMAP) {
                    if let Some(rec) = self.maps.get_mut(m) {
                        rec.unmap_failed = true;
                    }
                    return Err(e);
                }
                if let Some(rec) = self.maps.get_mut(m) {
                    rec.unmapping = true;
                }
                Ok(Some(Unmapping {
                    map: m,
                    mapping,
                    owner,
                    va,
                }))
            }
            Found::Retired(q) => self
                .stale(call, q, entry_seq, true, "DMA mapping")
                .map(|()| None),
            Found::Unknown => Err(self.unknown(call, "mapping", mapping)),
        }
    }

    /// dma_unmap_pages, end: releases the mapping (unless the teardown of a
    /// cudaFree freed it meanwhile, reported there).
    pub(crate) fn unmap_end(&mut self, u: Unmapping) {
        let same = self
            .maps
            .get(u.map)
            .is_some_and(|m| m.unmapping && m.mapping.ptr() as usize == u.mapping);
        if same {
            self.retire_map(u.map, Released::ByClient);
        } else {
            self.raced += 1;
        }
    }
}
