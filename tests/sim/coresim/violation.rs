// SPDX-License-Identifier: GPL-2.0

//! The contract checks' outcome: the violation kinds a peer-memory client
//! can commit against the core (counted, logged and WARNed as
//! `common/violation.rs` does), and the core's event counters.

#[macro_use]
#[path = "../common/violation.rs"]
mod common;
pub(crate) use common::{ViolationKind, Violations};

use crate::counters::Counters;

violation_kinds! {
    /// A contract violation a peer-memory client can commit against the core.
    pub(crate) enum Kind {
        /// The SG list does not cover exactly the page-size-aligned range.
        SgCoverage => c"sg_coverage",
        /// The SG list's DMA addresses are not the range's GPU pages, in order.
        SgAddress => c"sg_address",
        /// `*nmap` does not match the SG table (0, > orig_nents, != nents).
        NmapMismatch => c"nmap_mismatch",
        /// The first or last SG entry is not longer than the core's trim.
        SgTrim => c"sg_trim",
        /// `get_page_size` is not a power of two >= PAGE_SIZE.
        BadPageSize => c"bad_page_size",
        /// `dma_map` failed but left the SG table filled.
        DmaMapDirty => c"dma_map_dirty",
        /// `dma_unmap` returned non-zero.
        UnmapError => c"unmap_error",
        /// `invalidate` with a core_context id the core never gave or released.
        InvalidateUnknownId => c"invalidate_unknown_id",
        /// `invalidate`/`unregister` with a handle that is no registered client.
        BadHandle => c"bad_handle",
        /// The HCA still maps memory that is no longer live pinned GPU memory:
        /// the client's free callback returned without invalidating.
        DmaAfterFree => c"dma_after_free",
        /// The HCA still maps a registration whose SG addresses its IOMMU
        /// has nothing mapped at (addresses no DMA mapping gave, or a
        /// mapping torn down under it): its DMA faults.
        DmaUnmapped => c"dma_unmapped",
        /// A callback returned a value outside its contract.
        BadReturn => c"bad_return",
        /// `ib_register_peer_memory_client` with a malformed client.
        BadClient => c"bad_client",
        /// Page-shift regime: an SG entry not aligned to / a multiple of the
        /// client's page size.
        SgUnaligned => c"sg_unaligned",
        /// `invalidate` from inside a GPU free callback would wait for a
        /// registration's mapping lock whose holder waits for the GPU driver's
        /// lock that callback holds: a deadlock on the real core.
        InvalidateDeadlock => c"invalidate_deadlock",
    }
}

counted_events! {
    /// An event the core counts (not a violation).
    pub(crate) enum Event in EVENTS, EVENT_COUNTS {
        /// A registration completed (MAPPED).
        RegOk => "regs",
        /// A registration failed.
        RegFailed => "regs_failed",
        /// No client claimed a range.
        NotClaimed => "regs_unclaimed",
        /// A registration was deregistered.
        Dereg => "deregs",
        /// A registration was invalidated (fenced).
        Invalidated => "invalidations",
        /// `invalidate` for an already invalidated registration.
        InvalidateRepeat => "invalidate_repeats",
        /// `invalidate` for a registration being torn down (ignored).
        InvalidateLate => "invalidate_late",
        /// An invalidation waited for an in-flight get_pages/dma_map.
        InvalidateWaited => "invalidate_waited",
        /// A step hook ran a free.
        HookFree => "hook_frees",
        /// A step hook's free neither finished nor blocked in time.
        HookTimeout => "hook_timeouts",
        /// `invalidate` with an id given earlier and since released (returns 0).
        InvalidateStale => "invalidate_stale",
        /// A registration deregistered by a kernel worker (disassociate).
        Disassociated => "disassociated",
        /// `notifier_ne`: a deregistration ran without the mapping lock and
        /// then unlocked it unheld (the real core's lockdep "bad unlock
        /// balance"; the core's bug, not the client's).
        UnlockUnheld => "unlock_unheld",
        /// A registration still mapped for the HCA over memory whose pin
        /// the bench's same-process neighbour released (sim_neighbour.ko):
        /// its harm, not the client's `dma_after_free`.
        DmaAfterNeighbourPut => "dma_after_neighbour_put",
        /// A step of HCA DMA whose bus addresses went through the HCA's
        /// IOMMU (a translating domain: the client's addresses are IOVAs).
        IommuDma => "hca_iommu_dma",
        /// HCA DMA to a bus address the IOMMU has nothing mapped at: the
        /// DMA faulted, nothing moved.
        IommuFault => "hca_iommu_faults",
    }
}

/// Zeroes every counter and re-arms the WARNs.
pub(crate) fn reset() {
    VIOLATIONS.reset();
    EVENT_COUNTS.reset();
}
