// SPDX-License-Identifier: GPL-2.0

//! The contract checks' outcome: the violation kinds a client can commit
//! against the NVIDIA P2P API (counted, logged and WARNed as
//! `common/violation.rs` does), the per-function call counters and times and the
//! driver's event counters.

#[macro_use]
#[path = "../common/violation.rs"]
mod common;
pub(crate) use common::{ViolationKind, Violations};

use crate::counters::Counters;
use crate::sys;

violation_kinds! {
    /// A contract violation a client can commit against the NVIDIA P2P API.
    pub(crate) enum Kind {
        /// VA or length not a multiple of 64 KiB (or length 0).
        Misaligned => c"misaligned",
        /// The VA belongs to another process's GPU memory (or a kernel thread
        /// called for a process's VA).
        ForeignVa => c"foreign_va",
        /// `nvidia_p2p_get_pages` without a free callback.
        NullCallback => c"null_callback",
        /// `put_pages` called from inside a free callback (the real driver
        /// deadlocks on its own lock).
        PutInCallback => c"put_in_callback",
        /// Any other locked API function called from inside a free callback.
        ApiInCallback => c"api_in_callback",
        /// A page table or mapping used after its free callback returned.
        UseAfterFreeCallback => c"use_after_free_callback",
        /// A page table or mapping used after the client released it.
        UseAfterPut => c"use_after_put",
        /// A page table or mapping released twice.
        DoublePut => c"double_put",
        /// A pointer the simulator never handed out.
        UnknownObject => c"unknown_object",
        /// `put_pages` while DMA mappings of the table are still live.
        PutBeforeUnmap => c"put_before_unmap",
        /// `dma_map_pages`/`dma_unmap_pages` with a peer that is not a PCI device.
        NonPciPeer => c"non_pci_peer",
        /// `dma_unmap_pages` with a different peer than the mapping's.
        WrongPeer => c"wrong_peer",
        /// Invalid arguments: NULL out-pointers, non-zero token or VA space,
        /// persistent flags, a VA that does not match the table.
        BadArgs => c"bad_args",
        /// A call waited `callback_timeout_ms` for the API lock held across a
        /// free callback: the callback waits for that call (a deadlock).
        CallbackDeadlock => c"callback_deadlock",
        /// Pins still outstanding when the driver is unloaded.
        PinsAtUnload => c"pins_at_unload",
        /// A free callback returned while a `dma_unmap_pages` of the pin's
        /// mapping was still in flight: the driver frees what the unmap uses.
        UnmapInFlightAtFree => c"unmap_in_flight_at_free",
        /// A `put_pages` of a table the driver freed after its free callback,
        /// whose address a newer pin of the same process now has: the driver
        /// finds pins by the table pointer alone and releases that other pin.
        /// Reported when the pin was DMA-mapped by its owner (its DMA may be
        /// live), or, for a pin not mapped yet, when its owner maps it
        /// afterwards (it never learnt).
        PutReleasedOtherPin => c"put_released_other_pin",
        /// A pin whose owner's DMA map comes while it holds a mapping the
        /// driver linked into it for a late dma_map_pages of a freed table
        /// (`map_newer_pin`): its owner never learnt, and goes on with it.
        MapNewerPinKept => c"map_newer_pin_kept",
    }
}

/// An API function, for the call counters.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Call {
    /// `nvidia_p2p_get_pages`.
    GetPages,
    /// `nvidia_p2p_put_pages`.
    PutPages,
    /// `nvidia_p2p_get_pages_persistent`.
    GetPagesPersistent,
    /// `nvidia_p2p_put_pages_persistent`.
    PutPagesPersistent,
    /// `nvidia_p2p_free_page_table`.
    FreePageTable,
    /// `nvidia_p2p_dma_map_pages`.
    DmaMapPages,
    /// `nvidia_p2p_dma_unmap_pages`.
    DmaUnmapPages,
    /// `nvidia_p2p_free_dma_mapping`.
    FreeDmaMapping,
}

/// Every function with its name, in counter order.
pub(crate) const CALLS: [(Call, &str); 8] = [
    (Call::GetPages, "get_pages"),
    (Call::PutPages, "put_pages"),
    (Call::GetPagesPersistent, "get_pages_persistent"),
    (Call::PutPagesPersistent, "put_pages_persistent"),
    (Call::FreePageTable, "free_page_table"),
    (Call::DmaMapPages, "dma_map_pages"),
    (Call::DmaUnmapPages, "dma_unmap_pages"),
    (Call::FreeDmaMapping, "free_dma_mapping"),
];

static CALL_COUNTS: Counters<{ CALLS.len() }> = Counters::new();
/// Nanoseconds spent inside each function (entry to return, the latency
/// model's sleeps and the API lock's waits included): what a client's call
/// costs in the driver, so that `simctl bench` can tell the client's own
/// share of a registration.
static CALL_NS: Counters<{ CALLS.len() }> = Counters::new();

/// A call in progress: its time is added to the function's total when it
/// is dropped (at the function's return).
#[must_use]
pub(crate) struct Timed(Call, u64);

impl Drop for Timed {
    fn drop(&mut self) {
        CALL_NS.add_n(self.0 as usize, sys::ktime_ns().saturating_sub(self.1));
    }
}

impl Call {
    /// Counts one call.
    pub(crate) fn count(self) {
        CALL_COUNTS.add(self as usize);
    }

    /// Counts one call and times it until the returned value is dropped.
    pub(crate) fn timed(self) -> Timed {
        self.count();
        Timed(self, sys::ktime_ns())
    }

    /// The calls counted so far.
    pub(crate) fn calls(self) -> u64 {
        CALL_COUNTS.get(self as usize)
    }

    /// The nanoseconds spent in timed calls so far.
    pub(crate) fn ns(self) -> u64 {
        CALL_NS.get(self as usize)
    }

    /// The violation a call of this function from inside a free callback is.
    pub(crate) fn in_callback_kind(self) -> Kind {
        match self {
            Call::PutPages | Call::PutPagesPersistent => Kind::PutInCallback,
            _ => Kind::ApiInCallback,
        }
    }

    /// The function's name.
    pub(crate) fn name(self) -> &'static str {
        CALLS[self as usize].1
    }
}

counted_events! {
    /// An event the driver counts (not a violation).
    pub(crate) enum Event in EVENTS, EVENT_COUNTS {
        /// A non-persistent put_pages from a process other than the pinning
        /// one (or a kernel thread): ignored, the pin stays armed.
        ForeignPut => "foreign_puts",
        /// A cudaFree freed what a dma_map_pages in its unlocked prologue or
        /// epilogue was using (the driver's own hazard, not the client's).
        MapRacedFree => "map_raced_free",
        /// ... and a newer pin got the freed table's address meanwhile: the
        /// driver mapped that pin for the caller, or linked the caller's
        /// mapping into it (counted with `MapRacedFree` too).
        MapNewerPin => "map_newer_pin",
        /// ... the newer pin being one the bench's same-process neighbour
        /// (sim_neighbour.ko) made: outside the caller's gate, the
        /// neighbour's harm (counted instead of `MapNewerPin`).
        MapNewerNeighbourPin => "map_newer_neighbour_pin",
        /// A free hook ran.
        HookFree => "hook_frees",
        /// A process's RM client was destroyed while it was on a P2P object's
        /// client list: it left the list(s), its pins stayed armed.
        ClientPidRemoved => "client_pids_removed",
        /// The bench's same-process neighbour (sim_neighbour.ko), putting
        /// a table freed after its callback, released a newer pin at that
        /// address (`put_released_other_pin` of any other caller).
        NeighbourReleasedPin => "neighbour_released_pins",
        /// A late put of any other caller released a newer pin that the
        /// bench's same-process neighbour made at that address (outside
        /// the putter's gate): counted instead of `put_released_other_pin`.
        PutReleasedNeighbourPin => "put_released_neighbour_pin",
        /// A late put released a newer pin of another caller that its owner
        /// had not DMA-mapped: a violation (`put_released_other_pin`) only
        /// if the owner maps it afterwards; an owner that learnt of it puts
        /// it (the put finds nothing) and pins anew.
        LatePutReleasedUnmappedPin => "late_put_released_unmapped_pins",
        /// A DMA mapping whose addresses the DMA API remapped (an IOMMU in
        /// front of the peer: IOVAs, not the BAR's bus addresses).
        DmaRemapped => "dma_remapped",
    }
}

/// Zeroes every violation and call counter and re-arms the WARNs.
pub(crate) fn reset() {
    VIOLATIONS.reset();
    CALL_COUNTS.reset();
    CALL_NS.reset();
}
