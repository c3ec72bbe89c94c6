// SPDX-License-Identifier: GPL-2.0

//! The contract checks' outcome: the violation kinds a peer-memory client
//! can commit against the core (counted, logged and WARNed as
//! `common/violation.rs` does), and the core's event counters.

use core::ffi::CStr;
use core::fmt;

#[path = "../common/violation.rs"]
mod common;
pub(crate) use common::{ViolationKind, Violations};

use crate::counters::Counters;

/// A contract violation a peer-memory client can commit against the core.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Kind {
    /// The SG list does not cover exactly the page-size-aligned range.
    SgCoverage,
    /// The SG list's DMA addresses are not the range's GPU pages, in order.
    SgAddress,
    /// `*nmap` does not match the SG table (0, > orig_nents, != nents).
    NmapMismatch,
    /// The first or last SG entry is not longer than the core's trim.
    SgTrim,
    /// `get_page_size` is not a power of two >= PAGE_SIZE.
    BadPageSize,
    /// `dma_map` failed but left the SG table filled.
    DmaMapDirty,
    /// `dma_unmap` returned non-zero.
    UnmapError,
    /// `invalidate` with a core_context id the core never gave or released.
    InvalidateUnknownId,
    /// `invalidate`/`unregister` with a handle that is no registered client.
    BadHandle,
    /// The HCA still maps memory that is no longer live pinned GPU memory:
    /// the client's free callback returned without invalidating.
    DmaAfterFree,
    /// A callback returned a value outside its contract.
    BadReturn,
    /// `ib_register_peer_memory_client` with a malformed client.
    BadClient,
    /// Page-shift regime: an SG entry not aligned to / a multiple of the
    /// client's page size.
    SgUnaligned,
    /// `invalidate` from inside a GPU free callback would wait for a
    /// registration's mapping lock whose holder waits for the GPU driver's
    /// lock that callback holds: a deadlock on the real core.
    InvalidateDeadlock,
}

/// Every kind, in counter order.
pub(crate) const KINDS: [Kind; 14] = [
    Kind::SgCoverage,
    Kind::SgAddress,
    Kind::NmapMismatch,
    Kind::SgTrim,
    Kind::BadPageSize,
    Kind::DmaMapDirty,
    Kind::UnmapError,
    Kind::InvalidateUnknownId,
    Kind::BadHandle,
    Kind::DmaAfterFree,
    Kind::BadReturn,
    Kind::BadClient,
    Kind::SgUnaligned,
    Kind::InvalidateDeadlock,
];

impl ViolationKind for Kind {
    const ALL: &'static [Self] = &KINDS;

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static CStr {
        match self {
            Kind::SgCoverage => c"sg_coverage",
            Kind::SgAddress => c"sg_address",
            Kind::NmapMismatch => c"nmap_mismatch",
            Kind::SgTrim => c"sg_trim",
            Kind::BadPageSize => c"bad_page_size",
            Kind::DmaMapDirty => c"dma_map_dirty",
            Kind::UnmapError => c"unmap_error",
            Kind::InvalidateUnknownId => c"invalidate_unknown_id",
            Kind::BadHandle => c"bad_handle",
            Kind::DmaAfterFree => c"dma_after_free",
            Kind::BadReturn => c"bad_return",
            Kind::BadClient => c"bad_client",
            Kind::SgUnaligned => c"sg_unaligned",
            Kind::InvalidateDeadlock => c"invalidate_deadlock",
        }
    }
}

/// The violation counters.
pub(crate) static VIOLATIONS: Violations<Kind, { KINDS.len() }> = Violations::new();

/// Records one violation: counter, log line, WARN (once per kind).
pub(crate) fn report(kind: Kind, what: fmt::Arguments<'_>) {
    VIOLATIONS.report(kind, what);
}

/// An event the core counts (not a violation).
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Event {
    /// A registration completed (MAPPED).
    RegOk,
    /// A registration failed.
    RegFailed,
    /// No client claimed a range.
    NotClaimed,
    /// A registration was deregistered.
    Dereg,
    /// A registration was invalidated (fenced).
    Invalidated,
    /// `invalidate` for an already invalidated registration.
    InvalidateRepeat,
    /// `invalidate` for a registration being torn down (ignored).
    InvalidateLate,
    /// An invalidation waited for an in-flight get_pages/dma_map.
    InvalidateWaited,
    /// A step hook ran a free.
    HookFree,
    /// A step hook's free neither finished nor blocked in time.
    HookTimeout,
    /// `invalidate` with an id given earlier and since released (returns 0).
    InvalidateStale,
    /// A registration deregistered by a kernel worker (disassociate).
    Disassociated,
    /// `notifier_ne`: a deregistration ran without the mapping lock and
    /// then unlocked it unheld (the real core's lockdep "bad unlock
    /// balance"; the core's bug, not the client's).
    UnlockUnheld,
}

/// Every event with its name, in counter order.
pub(crate) const EVENTS: [(Event, &str); 13] = [
    (Event::RegOk, "regs"),
    (Event::RegFailed, "regs_failed"),
    (Event::NotClaimed, "regs_unclaimed"),
    (Event::Dereg, "deregs"),
    (Event::Invalidated, "invalidations"),
    (Event::InvalidateRepeat, "invalidate_repeats"),
    (Event::InvalidateLate, "invalidate_late"),
    (Event::InvalidateWaited, "invalidate_waited"),
    (Event::HookFree, "hook_frees"),
    (Event::HookTimeout, "hook_timeouts"),
    (Event::InvalidateStale, "invalidate_stale"),
    (Event::Disassociated, "disassociated"),
    (Event::UnlockUnheld, "unlock_unheld"),
];

static EVENT_COUNTS: Counters<{ EVENTS.len() }> = Counters::new();

impl Event {
    /// Counts one event.
    pub(crate) fn count(self) {
        EVENT_COUNTS.add(self as usize);
    }

    /// The events counted so far.
    pub(crate) fn get(self) -> u64 {
        EVENT_COUNTS.get(self as usize)
    }
}

/// Zeroes every counter and re-arms the WARNs.
pub(crate) fn reset() {
    VIOLATIONS.reset();
    EVENT_COUNTS.reset();
}
