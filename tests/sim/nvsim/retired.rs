// SPDX-License-Identifier: GPL-2.0

//! Released page tables and mappings: freed for real, their addresses kept
//! in a bounded quarantine so a later use is recognised (an address the
//! allocator hands out again leaves the quarantine), and the judgement of
//! such a use -- the documented race with a concurrent teardown, a late
//! put_pages (benign: it returns 0), or a violation.

use kernel::prelude::*;

use crate::gpu::GpuState;
use crate::lock::StateGuard;
use crate::sys;
use crate::violation::{self, Call, Kind};

/// How many released page tables/mappings stay quarantined.
const QUARANTINE_MAX: usize = 512;

/// Who released an object.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The driver, after the free callback returned (cudaFree).
    ByCallback,
    /// The client (put_pages / dma_unmap_pages).
    ByClient,
    /// Another client's late put_pages that found this pin by its table's
    /// address (`put_released_other_pin`, reported then): its owner's later
    /// calls with it are the consequence, not violations of their own.
    ByStalePut,
}

/// The address of a released (freed) page table or mapping, kept so later
/// uses are recognised.
pub(crate) struct Retired {
    addr: usize,
    is_table: bool,
    /// A page table's VA (0 for a mapping).
    va: u64,
    how: Released,
    at: u64,
    seq: u64,
    releases: u32,
    /// A pin released by a late put before its owner mapped it
    /// (`LatePutReleasedUnmappedPin`): the owner's map of it is the
    /// violation.
    unmapped_victim: bool,
}

impl Retired {
    /// A released object that was at `addr`, released by `how` with retire
    /// sequence number `seq`.
    pub(crate) fn new(addr: usize, is_table: bool, how: Released, seq: u64) -> Self {
        Self {
            addr,
            is_table,
            va: 0,
            how,
            at: sys::jiffies(),
            seq,
            releases: 0,
            unmapped_victim: false,
        }
    }
}

impl Retired {
    /// Who released it.
    pub(crate) fn how(&self) -> Released {
        self.how
    }

    /// The same, for a page table of `va`.
    pub(crate) fn with_va(mut self, va: u64) -> Self {
        self.va = va;
        self
    }
}

/// How a call that passed a released object is judged.
pub(crate) enum Stale {
    /// The documented race with a concurrent teardown.
    Race,
    /// Used after its free callback returned.
    AfterCallback,
    /// Used after the client released it.
    AfterPut,
    /// Released a second time.
    Twice,
    /// Mapped by its owner after a late put of another caller released it
    /// (the owner never learnt).
    VictimMapped,
}

/// Where a pointer passed by a client was found.
pub(crate) enum Found {
    Live(usize),
    Retired(usize),
    Unknown,
}

impl GpuState {
    pub(crate) fn find_table(&self, ptr: usize) -> Found {
        if let Some(i) = self.pins.find(|p| p.table.ptr() as usize == ptr) {
            Found::Live(i)
        } else if let Some(i) = self.newest_retired(ptr, true) {
            Found::Retired(i)
        } else {
            Found::Unknown
        }
    }

    pub(crate) fn find_mapping(&self, ptr: usize) -> Found {
        if let Some(i) = self.maps.find(|m| m.mapping.ptr() as usize == ptr) {
            Found::Live(i)
        } else if let Some(i) = self.newest_retired(ptr, false) {
            Found::Retired(i)
        } else {
            Found::Unknown
        }
    }

    /// The most recently released table (or mapping) at `addr`: several
    /// tables of different VAs may have been released there.
    fn newest_retired(&self, addr: usize, is_table: bool) -> Option<usize> {
        self.retired
            .iter()
            .filter(|(_, r)| r.is_table == is_table && r.addr == addr)
            .max_by_key(|(_, r)| r.seq)
            .map(|(i, _)| i)
    }

    /// Marks the newest released table at `addr` as a pin a late put
    /// released before its owner mapped it.
    pub(crate) fn mark_unmapped_victim(&mut self, addr: usize) {
        if let Some(r) = self
            .newest_retired(addr, true)
            .and_then(|i| self.retired.get_mut(i))
        {
            r.unmapped_victim = true;
        }
    }

    /// Whether a pin a late put released at `addr` before its owner mapped
    /// it, released before retire sequence `before`, is still unknown to
    /// its owner (not put since): a map of a newer pin at that address may
    /// be that owner's map of its released pin.
    pub(crate) fn unmapped_victim_pending(&self, addr: usize, before: u64) -> bool {
        self.retired
            .find(|r| r.is_table && r.addr == addr && r.unmapped_victim && r.seq < before)
            .is_some()
    }

    /// A put_pages of the table of `va` at `addr`: if a late put released
    /// that pin before its owner mapped it, its owner has learnt.
    pub(crate) fn victim_put(&mut self, addr: usize, va: u64) {
        for (_, r) in self.retired.iter_mut() {
            if r.is_table && r.addr == addr && r.va == va {
                r.unmapped_victim = false;
            }
        }
    }

    /// The released page table at `addr` that a put_pages of `va` means.
    /// `None`: that table's record is gone (another table of another VA
    /// was released at the same address since, or the quarantine was
    /// full) while other records at the address remain.
    pub(crate) fn retired_table_for(&self, addr: usize, va: u64) -> Option<usize> {
        self.retired
            .find(|r| r.is_table && r.addr == addr && r.va == va)
    }

    /// Whether the driver freed a page table at `addr` after its free
    /// callback less than the grace period ago.
    pub(crate) fn freed_by_callback_lately(&self, addr: usize) -> bool {
        let grace = sys::param::stale_grace_ms();
        self.retired
            .find(|r| {
                r.is_table
                    && r.addr == addr
                    && r.how == Released::ByCallback
                    && sys::msecs_since(r.at) < grace
            })
            .is_some()
    }

    /// Whether a page table of `va` at `addr` was freed by the driver (after
    /// its free callback, or by another client's late put): a put_pages of
    /// it that finds a newer pin at that address releases that pin
    /// (`put_released_other_pin`).
    pub(crate) fn late_put_of(&self, addr: usize, va: u64) -> bool {
        self.retired
            .find(|r| {
                r.is_table
                    && r.addr == addr
                    && r.va == va
                    && matches!(r.how, Released::ByCallback | Released::ByStalePut)
            })
            .is_some()
    }

    /// Judges a use of released object `q` by `call`, which started at
    /// retire sequence `entry_seq`; `release` is true for put/unmap.
    fn judge(&mut self, call: Call, q: usize, entry_seq: u64, release: bool) -> Stale {
        let window = sys::param::map_window_ms();
        let Some(r) = self.retired.get_mut(q) else {
            return Stale::Twice;
        };
        let verdict = match r.how {
            Released::ByStalePut if r.unmapped_victim && matches!(call, Call::DmaMapPages) => {
                Stale::VictimMapped
            }
            // Its owner learnt of the late put and puts it (finding
            // nothing): no later map can be its owner's any more.
            Released::ByStalePut if matches!(call, Call::PutPages) => {
                r.unmapped_victim = false;
                Stale::Race
            }
            Released::ByStalePut => Stale::Race,
            Released::ByClient if release => Stale::Twice,
            Released::ByClient => Stale::AfterPut,
            Released::ByCallback if release && r.releases > 0 => Stale::Twice,
            // A put_pages of a table the driver freed after the callback,
            // whose address no pin has taken since (else `unpin` found that
            // pin): the driver finds no pin and returns 0.
            Released::ByCallback if matches!(call, Call::PutPages) => Stale::Race,
            // dma_unmap_pages of a mapping freed after its callback: the
            // driver reads freed memory, whenever it comes.
            Released::ByCallback if matches!(call, Call::DmaUnmapPages) => Stale::AfterCallback,
            // dma_map_pages of a table freed after the call started, or
            // just before it (the client last saw its pin alive, and
            // cannot hold its lock across the call: `map_window_ms`): the
            // documented window, the driver's hazard.
            Released::ByCallback if r.seq > entry_seq || sys::msecs_since(r.at) < window => {
                Stale::Race
            }
            Released::ByCallback => Stale::AfterCallback,
        };
        if release {
            r.releases += 1;
        }
        if matches!(verdict, Stale::Race) {
            self.raced += 1;
        }
        verdict
    }

    /// Keeps `r` recognisable.  An older object of the same kind (and, for
    /// page tables, the same VA) released at the same address is forgotten
    /// only now, when the object that reused the address is released too
    /// (while it lives, lookups find it first).  Tables of other VAs keep
    /// their records: a late put_pages names its table by address *and*
    /// VA, and the allocator hands table addresses out again within
    /// milliseconds (see `late_put_of`, `retired_table_for`).
    pub(crate) fn quarantine(&mut self, r: Retired) {
        while let Some(i) = self
            .retired
            .find(|x| x.addr == r.addr && x.is_table == r.is_table && x.va == r.va)
        {
            self.retired.remove(i);
        }
        if self.retired.count() >= QUARANTINE_MAX {
            let oldest = self
                .retired
                .iter()
                .min_by_key(|(_, r)| r.seq)
                .map(|(i, _)| i);
            if let Some(i) = oldest {
                self.retired.remove(i);
            }
        }
        // On allocation failure the object is freed at once instead.
        let _ = self.retired.insert(r);
    }
}

/// The kind of a stale use, by what was used and how.
fn stale_kind(s: &Stale, release: bool) -> Option<Kind> {
    match s {
        Stale::Race => None,
        Stale::AfterCallback => Some(Kind::UseAfterFreeCallback),
        Stale::AfterPut if release => Some(Kind::DoublePut),
        Stale::AfterPut => Some(Kind::UseAfterPut),
        Stale::Twice => Some(Kind::DoublePut),
        Stale::VictimMapped => Some(Kind::PutReleasedOtherPin),
    }
}

impl StateGuard<'_> {
    pub(crate) fn stale(
        &mut self,
        call: Call,
        q: usize,
        entry_seq: u64,
        release: bool,
        what: &str,
    ) -> Result {
        let verdict = self.judge(call, q, entry_seq, release);
        match stale_kind(&verdict, release) {
            None if release => Ok(()),
            None => {
                // A dma_map_pages in the documented window: the driver's
                // hazard (its reads of the freed table: entry.rs).
                if matches!(call, Call::DmaMapPages) {
                    crate::violation::Event::MapRacedFree.count();
                }
                Err(EINVAL)
            }
            Some(kind) => {
                let (addr, how, releases, va, ms) =
                    self.retired.get(q).map_or((0, "?", 0, 0, 0), |r| {
                        let how = match r.how {
                            Released::ByCallback => "the driver after the free callback",
                            Released::ByClient => "the client",
                            Released::ByStalePut if r.unmapped_victim => {
                                "another caller's late put_pages before its owner mapped it \
                                 (put_released_other_pin: the owner goes on with it)"
                            }
                            Released::ByStalePut => "another client's late put_pages",
                        };
                        (r.addr, how, r.releases, r.va, sys::msecs_since(r.at))
                    });
                violation::report(
                    kind,
                    format_args!(
                        "nvidia_p2p_{} on a released {} ({:#x}, VA {:#x}, released by {} {} ms \
                         ago, {} late release(s) since)",
                        call.name(),
                        what,
                        addr,
                        va,
                        how,
                        ms,
                        releases
                    ),
                );
                Err(EINVAL)
            }
        }
    }
}
