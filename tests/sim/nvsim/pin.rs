// SPDX-License-Identifier: GPL-2.0

//! Pins: `get_pages` (and its persistent flavour) making a page table,
//! `put_pages` finding it again by the table's address alone, and the
//! driver's release of a pin with its mappings -- by its client, after its
//! free callback, or by another client's late put.  The state they work on
//! is `gpu.rs`'s; DMA mappings are in `mapping.rs`.

use kernel::prelude::*;

use crate::abi::{DmaMapping, PageTable};
use crate::bindings::nvidia_p2p_page_table;
use crate::gpu::{PinArgs, PinRec};
use crate::lock::{FreeCallback, StateGuard};
use crate::memory::GPU_PAGE;
use crate::retired::{Found, Released, Retired};
use crate::sys;
use crate::violation::{self, Call, Event, Kind};

/// The next pin's `PinRec::serial`.
static PIN_SERIAL: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);

impl StateGuard<'_> {
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
        let (a_va, a_len, a_owner, reachable) = match self.allocs.get(idx) {
            Some(a) => (a.va, a.len, a.owner, a.reachable_by(owner)),
            None => return Err(EINVAL),
        };
        // A process on the P2P object's client list (an MPS client) pins
        // the owner's memory as its own (`thirdpartyp2pIsValidClientPid`).
        if !reachable || sys::current_is_kthread() {
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
            neighbour: sys::current_is_neighbour(),
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
                    // the P2P object's client list (MPS clients: REGISTER_PID,
                    // or every pin's with `client_pids`) are not another
                    // process -- until their RM client is destroyed, which
                    // takes them off the list and leaves their pins armed.
                    let (owner, reachable) = self.allocs.get(pin_alloc).map_or((0, false), |a| {
                        (a.owner, a.reachable_by(sys::current_tgid()))
                    });
                    let tgid = sys::current_tgid();
                    let listed = reachable || sys::param::is_client_pid(tgid);
                    if sys::current_is_kthread() || !listed {
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
                        self.victim_put(table, va);
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
                let in_unmap = self
                    .maps
                    .iter()
                    .filter(|(_, m)| m.pin == p && m.unmapping)
                    .count();
                // A revocable pin's put frees its mappings with the table
                // (nv-p2p.c `nv_p2p_put_pages` -> `nv_p2p_free_page_table`),
                // as its callback does: a put before the unmap is no
                // violation there, unless an unmap of one of them is still
                // in flight (the put frees what it uses).  A persistent
                // pin keeps the teardown order (unmap, then put).
                if live_maps > 0 && (persistent || in_unmap > 0) {
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
        let (victim_va, serial, maps, owned_maps, owner, victim_neighbour) = match self.pins.get(p)
        {
            Some(pin) => (
                pin.va,
                pin.serial,
                self.maps.iter().filter(|(_, m)| m.pin == p).count(),
                self.maps
                    .iter()
                    .filter(|(_, m)| m.pin == p && m.owners())
                    .count(),
                self.allocs.get(pin.alloc).map_or(0, |a| a.owner),
                pin.neighbour,
            ),
            None => return,
        };
        // The bench's own neighbour (sim_neighbour.ko): its harm, counted,
        // not a violation of the client under test.
        let neighbour = sys::current_is_neighbour();
        if neighbour {
            let g: &mut crate::gpu::GpuState = self;
            if let Some(pin) = g.pins.get(p) {
                for &run in pin.runs.iter() {
                    // Best effort: without room the core reports it as the
                    // client's (harsher).
                    let _ = g.neighbour_runs.insert(run);
                }
            }
        }
        // A pin its owner has not DMA-mapped yet: no DMA of its can be
        // live, and an owner that learns of the late put puts it (finding
        // nothing) and pins anew.  Only its owner's map of it afterwards is
        // the violation (retired.rs).
        let unmapped = owned_maps == 0;
        let report = |what: core::fmt::Arguments<'_>| {
            if neighbour {
                Event::NeighbourReleasedPin.count();
                pr_info!("the same-process neighbour's {}\n", what);
            } else if victim_neighbour {
                // The neighbour's pin is outside every gate of the putter:
                // what no client can close (README), counted, not blamed.
                Event::PutReleasedNeighbourPin.count();
                pr_info!("{} (a pin of the same-process neighbour)\n", what);
            } else if unmapped {
                Event::LatePutReleasedUnmappedPin.count();
                pr_info!(
                    "{} (not mapped by its owner yet: put_released_other_pin if it maps it)\n",
                    what
                );
            } else {
                violation::report(Kind::PutReleasedOtherPin, what);
            }
        };
        report(format_args!(
            "nvidia_p2p_put_pages of VA {:#x} (its page table {:#x} was freed after its free \
             callback) released the live pin of VA {:#x} (pin #{}, process {}, {} DMA \
             mapping(s)) that the driver had put at that address since: its owner keeps a \
             freed page table and its free callback will never run",
            va, table, victim_va, serial, owner, maps
        ));
        self.retire_pin(p, Released::ByStalePut);
        if unmapped && !neighbour && !victim_neighbour {
            self.mark_unmapped_victim(table);
        }
    }
}
