// SPDX-License-Identifier: GPL-2.0

//! The driver objects of one registration ([`Pins`]): what keeps them
//! valid while we use them, and the checks of their layout.

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::bindings::NVIDIA_P2P_PAGE_SIZE_64KB;
use crate::logic::coalesce::{coalesce, Coalesce};
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::logic::version;

use super::{DmaMapping, MapArgs, PageTable, UnmapArgs};

/// Why a page table or mapping from the driver is refused.
pub(crate) enum Unsupported {
    /// A page-table version we do not know.
    PageTableVersion(u32),
    /// A page size other than 64 KiB (the enum value).
    PageSize(u32),
    /// Not one entry per GPU page of the range.
    Entries(u32),
    /// A DMA-mapping version we do not know.
    MappingVersion(u32),
}

impl core::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Unsupported::PageTableVersion(v) => write!(
                f,
                "page table version {v:#010x} is not supported (known: {:#010x}, {:#010x}); \
                 a newer peermem_rs is needed for this driver",
                version::PAGE_TABLE_V1,
                version::PAGE_TABLE_V2
            ),
            Unsupported::PageSize(p) => write!(f, "GPU page size type {p} is not 64 KiB"),
            Unsupported::Entries(n) => write!(f, "{n} entries do not match the range"),
            Unsupported::MappingVersion(v) => {
                write!(f, "DMA mapping version {v:#010x} is not supported")
            }
        }
    }
}

/// Why [`Pins::adopt`] did not keep a table.
pub(crate) enum Adopt {
    /// The free callback already ran: the table is the driver's.
    Freed(PageTable),
    /// We cannot use it: unpin it.
    Unsupported(PageTable, Unsupported),
}

/// The driver objects of one registration.
///
/// # Invariants
///
/// It lives in the lock its owner's free callback takes (made only by
/// [`Pins::new_locked`], in that lock's initializer), and the callback
/// forgets the objects through [`Pins::revoke`] before it returns: so
/// whatever is kept here is valid (the driver frees it only after that
/// callback returned, or at the put of the pin, which [`Pins::take_table`]
/// takes out with every mapping kept).  After `revoke`, nothing is kept any
/// more.  The one exception no client can close: another user of the API
/// in the same process whose late put releases this pin (README, "What no
/// client can close"); so a kept mapping is read only in `dma_map`, right
/// after the driver made it, and a revocable pin's mapping is never passed
/// to the driver again.  `entries` is the checked number of pages of
/// `table`.
pub(crate) struct Pins {
    table: Option<PageTable>,
    entries: u32,
    mapping: Option<DmaMapping>,
    revoked: bool,
}

impl Pins {
    /// The lock of a registration: its content is `make(pins)`, `pins`
    /// holding no pin yet.  The only way to make a `Pins`, so that it lives
    /// under the lock the free callback takes; `make` is a plain function,
    /// it has nowhere else to keep it.
    pub(crate) fn new_locked<I: Send>(make: fn(Pins) -> I) -> impl PinInit<Mutex<I>> {
        // INVARIANT: the new `Pins` goes straight into the lock.
        new_mutex!(
            make(Pins {
                table: None,
                entries: 0,
                mapping: None,
                revoked: false,
            }),
            "peermem_rs::PeerMr::inner"
        )
    }

    /// Keeps `table`, just pinned for `range`, after checking its layout.
    pub(crate) fn adopt(
        &mut self,
        table: PageTable,
        range: &GpuRange,
    ) -> core::result::Result<(), Adopt> {
        if self.revoked {
            return Err(Adopt::Freed(table));
        }
        // These fields exist in v1 and v2 alike (`flags`, v2 only, is not read).
        // SAFETY: not revoked, so the driver has not freed the table (type
        // invariant: the caller holds the lock the free callback takes).
        let (v, page_size, entries) = unsafe {
            let t = table.ptr.as_ptr();
            ((*t).version, (*t).page_size, (*t).entries)
        };
        let why = if version::page_table_layout(v).is_none() {
            Some(Unsupported::PageTableVersion(v))
        } else if page_size != NVIDIA_P2P_PAGE_SIZE_64KB {
            Some(Unsupported::PageSize(page_size))
        } else if u64::from(entries) != range.pages() {
            Some(Unsupported::Entries(entries))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Adopt::Unsupported(table, why));
        }
        self.table = Some(table);
        self.entries = entries;
        Ok(())
    }

    /// Whether only another process than the caller could release the pin.
    pub(crate) fn foreign(&self) -> bool {
        self.table.as_ref().is_some_and(PageTable::foreign)
    }

    /// The process that pinned, for a revocable pin.
    pub(crate) fn owner(&self) -> Option<u64> {
        self.table.as_ref().and_then(|t| t.owner)
    }

    /// The page table, for `dma_map_pages`.
    pub(crate) fn map_args(&self) -> Option<MapArgs> {
        self.table.as_ref().map(|t| MapArgs {
            ptr: t.ptr,
            revocable: t.owner.is_some(),
        })
    }

    /// Keeps a new mapping (unless the callback ran meanwhile: then it is
    /// the driver's and is forgotten; `false`).
    pub(crate) fn adopt_mapping(&mut self, mapping: DmaMapping) -> bool {
        if self.revoked || self.table.is_none() {
            mapping.forget();
            return false;
        }
        self.mapping = Some(mapping);
        true
    }

    /// The mapping's bus addresses coalesced into segments of at most
    /// `max_segment` bytes, read straight from the driver's array (valid
    /// while `self` is borrowed: type invariant).
    pub(crate) fn segments(
        &self,
        max_segment: u64,
    ) -> core::result::Result<Coalesce<'_>, Unsupported> {
        let Some(m) = &self.mapping else {
            return Err(Unsupported::Entries(0));
        };
        // SAFETY: a kept mapping is valid (type invariant).
        let (v, entries, addrs) = unsafe {
            let m = m.ptr.as_ptr();
            ((*m).version, (*m).entries, (*m).dma_addresses)
        };
        if !version::dma_mapping_ok(v) {
            return Err(Unsupported::MappingVersion(v));
        }
        if entries != self.entries || addrs.is_null() {
            return Err(Unsupported::Entries(entries));
        }
        // SAFETY: the driver's mapping has `entries` addresses at `addrs`,
        // valid as long as the mapping, which `&self` keeps (type invariant).
        let addrs = unsafe { core::slice::from_raw_parts(addrs, entries as usize) };
        Ok(coalesce(addrs, GPU_PAGE_SIZE, max_segment))
    }

    /// Takes a persistent pin's mapping out for `dma_unmap_pages`.
    pub(crate) fn take_unmap(&mut self) -> Option<UnmapArgs> {
        let table = self.table.as_ref()?.ptr;
        let mapping = self.mapping.take()?;
        Some(UnmapArgs { table, mapping })
    }

    /// Takes the pin out to release it.  A mapping still kept (a revocable
    /// pin's: never unmapped through the driver) goes with it: the put
    /// frees every mapping of the table with it (nv-p2p.c
    /// `nv_p2p_put_pages` -> `nv_p2p_free_page_table`), and a put that
    /// finds no pin leaves them to the driver's own teardown.
    pub(crate) fn take_table(&mut self) -> Option<PageTable> {
        if let Some(m) = self.mapping.take() {
            m.forget();
        }
        self.table.take()
    }

    /// Puts back a pin that could not be released (see [`Unpin::Foreign`]),
    /// unless the callback ran meanwhile.
    pub(crate) fn restore(&mut self, table: PageTable) {
        if self.revoked {
            table.forget();
        } else {
            self.table = Some(table);
        }
    }

    /// The free callback: forgets the driver's objects (it frees them once
    /// the callback returns).
    pub(crate) fn revoke(&mut self) {
        self.revoked = true;
        if let Some(t) = self.table.take() {
            t.forget();
        }
        if let Some(m) = self.mapping.take() {
            m.forget();
        }
    }
}
