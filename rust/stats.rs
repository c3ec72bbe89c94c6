// SPDX-License-Identifier: GPL-2.0

//! Counters, shown in debugfs (`peermem_rs/stats`, root only).  Only counts
//! and sizes: no kernel addresses.

use core::fmt::{self, Write};
use kernel::sync::atomic::{Atomic, Relaxed};

use crate::logic::histogram;

/// What went wrong, for the per-kind error counters.
#[derive(Clone, Copy)]
pub(crate) enum ErrorKind {
    /// The driver refused to pin (other than "not GPU memory").
    Pin,
    /// The driver refused to DMA-map.
    DmaMap,
    /// The driver failed a DMA unmap.
    DmaUnmap,
    /// The driver failed an unpin.
    Unpin,
    /// The core's DMA device is not a PCI device.
    NotPci,
    /// A page table or mapping we cannot read (version, page size, entries).
    Unsupported,
    /// A step on memory that cudaFree already revoked.
    Revoked,
    /// The core called us out of order.
    OutOfOrder,
    /// Out of memory.
    NoMemory,
    /// The core failed to invalidate.
    Invalidate,
}

const ERROR_KINDS: usize = 10;
const ERROR_NAMES: [&str; ERROR_KINDS] = [
    "pin",
    "dma_map",
    "dma_unmap",
    "unpin",
    "not_pci",
    "unsupported",
    "revoked",
    "out_of_order",
    "no_memory",
    "invalidate",
];

/// The module's counters.
pub(crate) struct Stats {
    registrations: Atomic<u64>,
    deregistrations: Atomic<u64>,
    pinned_bytes: Atomic<u64>,
    invalidations: Atomic<u64>,
    declined: Atomic<u64>,
    sg_before: Atomic<u64>,
    sg_after: Atomic<u64>,
    sg_tables: Atomic<u64>,
    orphaned: Atomic<u64>,
    fence_waits: Atomic<u64>,
    pins_redone: Atomic<u64>,
    stale_puts_skipped: Atomic<u64>,
    errors: [Atomic<u64>; ERROR_KINDS],
    pin_time: [Atomic<u64>; histogram::BUCKETS],
}

/// The counters of this module.
pub(crate) static STATS: Stats = Stats::new();

impl Stats {
    const fn new() -> Self {
        Stats {
            registrations: Atomic::new(0),
            deregistrations: Atomic::new(0),
            pinned_bytes: Atomic::new(0),
            invalidations: Atomic::new(0),
            declined: Atomic::new(0),
            sg_before: Atomic::new(0),
            sg_after: Atomic::new(0),
            sg_tables: Atomic::new(0),
            orphaned: Atomic::new(0),
            fence_waits: Atomic::new(0),
            pins_redone: Atomic::new(0),
            stale_puts_skipped: Atomic::new(0),
            errors: [const { Atomic::new(0) }; ERROR_KINDS],
            pin_time: [const { Atomic::new(0) }; histogram::BUCKETS],
        }
    }

    /// `acquire` said "mine" (the core will release the registration).
    pub(crate) fn claimed(&self) {
        self.registrations.add(1, Relaxed);
    }

    /// A range was pinned, in `pin_ns`.
    pub(crate) fn pinned(&self, bytes: u64, pin_ns: u64) {
        self.pinned_bytes.add(bytes, Relaxed);
        self.pin_time[histogram::bucket(pin_ns / 1000)].add(1, Relaxed);
    }

    /// A pin ended (unpinned by us or revoked by the driver).
    pub(crate) fn unpinned(&self, bytes: u64) {
        self.pinned_bytes.fetch_sub(bytes, Relaxed);
    }

    /// A registration was released by the core.
    pub(crate) fn released(&self) {
        self.deregistrations.add(1, Relaxed);
    }

    /// `acquire` said "not mine".
    pub(crate) fn declined(&self) {
        self.declined.add(1, Relaxed);
    }

    /// cudaFree revoked a registration.
    pub(crate) fn invalidated(&self) {
        self.invalidations.add(1, Relaxed);
    }

    /// A DMA mapping of `pages` GPU pages became `entries` SG entries.
    pub(crate) fn coalesced(&self, pages: u64, entries: u64) {
        self.sg_before.add(pages, Relaxed);
        self.sg_after.add(entries, Relaxed);
    }

    /// An SG table of ours was allocated.
    pub(crate) fn sg_table_allocated(&self) {
        self.sg_tables.add(1, Relaxed);
    }

    /// An SG table of ours was freed.
    pub(crate) fn sg_table_freed(&self) {
        self.sg_tables.fetch_sub(1, Relaxed);
    }

    /// A pin was released by another process than its owner: it stays
    /// armed until its free callback (`orphan_ended`).
    pub(crate) fn orphaned(&self) {
        self.orphaned.add(1, Relaxed);
    }

    /// The free callback of an orphaned pin ran.
    pub(crate) fn orphan_ended(&self) {
        self.orphaned.fetch_sub(1, Relaxed);
    }

    /// A revocable pin, put or map, or a probe, waited at the fence.
    pub(crate) fn fence_waited(&self) {
        self.fence_waits.add(1, Relaxed);
    }

    /// A pin a late call of ours may have reached was put and made anew.
    pub(crate) fn pin_redone(&self) {
        self.pins_redone.add(1, Relaxed);
    }

    /// A put found its pin revoked before it could call the driver: the
    /// table was the driver's, and no put was made.
    pub(crate) fn stale_put_skipped(&self) {
        self.stale_puts_skipped.add(1, Relaxed);
    }

    /// Counts an error.
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].add(1, Relaxed);
    }

    /// Registrations claimed and not yet released.
    pub(crate) fn live(&self) -> u64 {
        let reg = self.registrations.load(Relaxed);
        reg.saturating_sub(self.deregistrations.load(Relaxed))
    }

    /// Writes the counters as `name value` lines.
    pub(crate) fn render(&self, w: &mut impl Write, mode: &str, name: &str) -> fmt::Result {
        writeln!(w, "client {name}")?;
        writeln!(w, "mode {mode}")?;
        writeln!(w, "live_registrations {}", self.live())?;
        writeln!(w, "pinned_bytes {}", self.pinned_bytes.load(Relaxed))?;
        writeln!(w, "registrations {}", self.registrations.load(Relaxed))?;
        writeln!(w, "deregistrations {}", self.deregistrations.load(Relaxed))?;
        writeln!(w, "invalidations {}", self.invalidations.load(Relaxed))?;
        writeln!(w, "declined_acquires {}", self.declined.load(Relaxed))?;
        writeln!(
            w,
            "sg_entries_before_coalescing {}",
            self.sg_before.load(Relaxed)
        )?;
        writeln!(
            w,
            "sg_entries_after_coalescing {}",
            self.sg_after.load(Relaxed)
        )?;
        writeln!(w, "sg_tables {}", self.sg_tables.load(Relaxed))?;
        writeln!(w, "orphaned_pins {}", self.orphaned.load(Relaxed))?;
        writeln!(w, "fence_waits {}", self.fence_waits.load(Relaxed))?;
        writeln!(w, "pins_redone {}", self.pins_redone.load(Relaxed))?;
        writeln!(
            w,
            "stale_puts_skipped {}",
            self.stale_puts_skipped.load(Relaxed)
        )?;
        for (name, n) in ERROR_NAMES.iter().zip(&self.errors) {
            writeln!(w, "errors.{name} {}", n.load(Relaxed))?;
        }
        for (b, n) in self.pin_time.iter().enumerate() {
            let n = n.load(Relaxed);
            if n != 0 {
                writeln!(w, "pin_time_us.ge_{} {n}", histogram::bucket_floor_us(b))?;
            }
        }
        Ok(())
    }
}
