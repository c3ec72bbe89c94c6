// SPDX-License-Identifier: GPL-2.0

//! The page tables our revocable pins hold, by address ([`HeldTables`]):
//! how the module learns that another user of the P2P API in the same
//! process released a pin of ours.
//!
//! The driver tells no client that its pin went: another in-kernel user of
//! `nvidia_p2p_*` in the same process (GDRCopy's gdrdrv, nvidia-fs) whose
//! late put names a table the driver freed releases whatever pin of that
//! process has the address since, and the owner of that pin hears nothing
//! (README, "What no client can close").  One trace is left: the freed
//! table's address is free again, and the driver may hand it to the next
//! pin, ours included.  When a pin of ours gets the address of a table an
//! older pin of ours still holds, that older pin was released under us.
//! Its put would then release the newer pin, and its `dma_map_pages` would
//! map the newer pin's memory: both are refused from then on, and the
//! older registration's callback reference is given back (the put that
//! released its pin deleted its callback).
//!
//! Why an address proves it: two live allocations never share one, and
//! the driver frees a revocable pin's table in two places only, the put
//! (p2p.c `RmP2PPutPages` deletes the pin's mapping info with its free
//! callback, then nv-p2p.c `nv_p2p_put_pages` frees the table) and after
//! the free callback returned (nv-p2p.c `nv_p2p_mem_info_free_callback`).
//! A record is dropped by our own put on the table side of the pin gate
//! (no pin of ours can be made meanwhile) and by our free callback before
//! it returns, so a record that meets a newer pin at its address was left
//! by neither: another user's put released the pin.
//!
//! It cannot see a pin released under us whose address no pin of ours
//! takes again; such a registration's put finds no pin (or the
//! neighbour's newer one: its harm) as before.

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::logic::held::{self, Record};
use crate::pin_gate::{PinSide, TableSide};

use super::{CallbackRan, Disarmed, MapArgs, NvidiaP2p, PageTable, Unpin, Unpinned};

/// The tables of the client's live revocable pins.
///
/// # Invariants
///
/// A record is made only on the pin side of the pin gate, right after its
/// pin call, and dropped only by [`NvidiaP2p::unpin_held`] (our put, on the
/// table side), [`HeldTables::forget_revoked`] (our free callback, before it
/// returns) or [`HeldTables::forget_unadopted`] (a pin whose callback ran
/// before it was adopted, perhaps before it was recorded).  `released` is set only when a
/// newer pin of ours got the record's address while the record was kept.
#[pin_data]
pub(crate) struct HeldTables {
    #[pin]
    list: Mutex<KVec<Record>>,
}

/// Whether a revocable pin's table may be put.
enum Held {
    /// Ours as far as the module can tell.
    Ours(PageTable),
    /// Released under us by another user's put: the table is gone, and the
    /// pin's callback with it.
    ReleasedUnderUs(Disarmed),
}

impl HeldTables {
    /// No table held.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(HeldTables {
            list <- new_mutex!(KVec::new(), "peermem_rs::HeldTables::list"),
        })
    }

    /// Records `table`, a revocable pin the caller just made on the pin
    /// side of the gate.  An older record at its address was released
    /// under us.  Without memory for the record, the pin is trusted as
    /// before this check existed (its put and maps go to the driver).
    pub(crate) fn record(&self, table: &PageTable, _pin: &PinSide<'_>) {
        let addr = table.ptr.as_ptr() as usize;
        let mut list = self.list.lock();
        held::mark_reused(&mut list, addr);
        let _ = list.push(Record::new(addr, table.data), GFP_KERNEL);
    }

    /// Whether the pin whose table `args` names was released under us (a
    /// map of its table would map another pin of ours).
    pub(crate) fn map_refused(&self, args: &MapArgs, _side: &TableSide<'_>) -> bool {
        args.revocable && held::find_released(&self.list.lock(), args.data).is_some()
    }

    /// Before the put of `table` (on the table side of the gate): the table,
    /// or the proof that its pin was released under us (its record is
    /// dropped then; the table is not used again).
    fn check_put(&self, table: PageTable) -> Held {
        let data = table.data;
        let mut list = self.list.lock();
        let Some(i) = held::find_released(&list, data) else {
            return Held::Ours(table);
        };
        let _ = list.remove(i);
        drop(list);
        table.forget();
        // The record was kept from the pin until now, and a newer pin of
        // ours was given its table's address meanwhile (type invariants):
        // the driver had freed this pin's table.  It frees a revocable
        // pin's table after the free callback returned, which is excluded
        // (our callback drops the record before it returns), or in a put
        // whose lookup found the pin and deleted its mapping info with the
        // callback first (p2p.c `RmP2PPutPages` ->
        // `thirdpartyp2pDelMappingInfoByKey`, then nv-p2p.c
        // `nv_p2p_put_pages`); our own puts drop the record on the table
        // side of the gate, before any newer pin of ours could be made.
        // SAFETY: by the above, another user's put deleted the callback:
        // the driver will not call back with `data` any more.
        Held::ReleasedUnderUs(unsafe { Disarmed::new(data) })
    }

    /// Drops the record of the pin whose free callback is running: the
    /// driver frees its table once the callback returned.
    pub(crate) fn forget_revoked(&self, ran: &CallbackRan) {
        self.drop_record(ran.data);
    }

    /// Drops the record of `table`, whose free callback ran before the pin
    /// was adopted: the callback may have come between the pin call's
    /// return and the record, and then found nothing to drop.
    pub(crate) fn forget_unadopted(&self, table: &PageTable) {
        self.drop_record(table.data);
    }

    fn drop_record(&self, data: usize) {
        let mut list = self.list.lock();
        if let Some(i) = held::find(&list, data) {
            let _ = list.remove(i);
        }
    }

    /// The number of records (debugfs stats: `held_tables`).
    pub(crate) fn count(&self) -> usize {
        self.list.lock().len()
    }
}

impl NvidiaP2p {
    /// [`NvidiaP2p::unpin`] of a revocable pin recorded in `held`, on the
    /// table side of the gate: not made when the pin was released under us
    /// ([`Unpinned::ReleasedUnderUs`]); the record is dropped with the put.
    pub(crate) fn unpin_held(
        &self,
        table: PageTable,
        held: &HeldTables,
        _side: &TableSide<'_>,
    ) -> core::result::Result<Unpinned, Unpin> {
        let table = match held.check_put(table) {
            Held::Ours(table) => table,
            Held::ReleasedUnderUs(proof) => return Ok(Unpinned::ReleasedUnderUs(proof)),
        };
        let data = table.data;
        let unpinned = self.unpin(table);
        // Still ours only when the put was refused before the driver.
        if !matches!(unpinned, Err(Unpin::Foreign(_))) {
            held.drop_record(data);
        }
        unpinned
    }
}
