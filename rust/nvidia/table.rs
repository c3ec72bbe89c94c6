// SPDX-License-Identifier: GPL-2.0

//! One pin of GPU memory ([`PageTable`]).

use core::ptr::NonNull;

use kernel::prelude::*;

use crate::bindings::nvidia_p2p_page_table;
use crate::logic::range::GpuRange;

use super::api::current_process;

/// One pin of GPU memory: a page table handed out by the driver.
///
/// # Invariants
///
/// `ptr` is a page table returned by `nvidia_p2p_get_pages(_persistent)` for
/// the range starting at `va`, not yet released; `owner` is the pinning
/// process for a revocable pin, `None` for a persistent one.  It is
/// dereferenced only while kept in a [`Pins`] (see there).
///
/// [`Pins`]: super::Pins
pub(crate) struct PageTable {
    pub(super) ptr: NonNull<nvidia_p2p_page_table>,
    pub(super) va: u64,
    pub(super) owner: Option<u64>,
}

// SAFETY: a page table is driver memory not tied to a thread.
unsafe impl Send for PageTable {}

impl PageTable {
    pub(super) fn new(
        table: *mut nvidia_p2p_page_table,
        range: &GpuRange,
        owner: Option<u64>,
    ) -> Result<Self> {
        let ptr = NonNull::new(table).ok_or(EIO)?;
        // INVARIANT: the driver returned a pinned page table for `range`.
        Ok(PageTable {
            ptr,
            va: range.start(),
            owner,
        })
    }

    /// Whether only another process than the caller could release it (see
    /// [`NvidiaP2p::unpin`]).
    ///
    /// [`NvidiaP2p::unpin`]: super::NvidiaP2p::unpin
    pub(crate) fn foreign(&self) -> bool {
        self.owner.is_some_and(|o| o == 0 || o != current_process())
    }

    /// The table's address: what the driver finds a revocable pin by, and
    /// so what a late call of ours names (rust/logic/fence.rs).  Only
    /// compared.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr().addr()
    }

    /// The driver freed the memory (free callback): the page table is the
    /// driver's now and must not be touched again.
    pub(crate) fn forget(self) {}
}
