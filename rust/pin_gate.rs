// SPDX-License-Identifier: GPL-2.0

//! The pin/put gate of revocable pins (the rule and why it is needed are in
//! rust/logic/gate.rs; DMA maps pass it like puts): its state under a mutex, and a condition variable
//! the waiting side sleeps on.  Neither side holds the gate's lock while it
//! is in the driver, and the free callback never passes the gate, so the
//! gate adds no lock the driver's callback could wait for.

use core::marker::PhantomData;

use kernel::prelude::*;
use kernel::sync::{CondVar, Mutex};
use kernel::{new_condvar, new_mutex};

use crate::logic::gate::{Gate, Side};
use crate::stats::STATS;

/// Revocable pins, and the puts and DMA maps naming revocable pins' tables,
/// of one client: never in the driver at the same time.
#[pin_data]
pub(crate) struct PinGate {
    #[pin]
    state: Mutex<Gate>,
    /// Signalled whenever a pin or put leaves the driver.
    #[pin]
    left: CondVar,
}

/// Proof that the caller is on the table side of a [`PinGate`]: no
/// revocable pin of that client is in the driver until it returns, so the
/// driver cannot hand out, for a pin of ours, the address of a table it
/// frees meanwhile.
///
/// # Invariants
///
/// Exists only while a [`PinGate::use_table`] call is on the table side:
/// made there and only lent to its `call`.
pub(crate) struct TableSide<'a>(PhantomData<&'a PinGate>);

/// Proof that the caller is on the pin side of a [`PinGate`]: no call
/// naming a revocable pin's table of that client is in the driver until it
/// returns.
///
/// # Invariants
///
/// Exists only while a [`PinGate::pin`] call is on the pin side: made there
/// and only lent to its `pin`.
pub(crate) struct PinSide<'a>(PhantomData<&'a PinGate>);

impl PinGate {
    /// An open gate.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(PinGate {
            state <- new_mutex!(Gate::new(), "peermem_rs::PinGate::state"),
            left <- new_condvar!("peermem_rs::PinGate::left"),
        })
    }

    /// Runs `pin` (a revocable pin call into the driver) once no call naming
    /// a revocable pin's table is in flight, keeping new ones out until it
    /// returned.  `pin` gets the proof of that, [`PinSide`].
    pub(crate) fn pin<T>(&self, pin: impl FnOnce(&PinSide<'_>) -> T) -> T {
        self.pass(Side::Pin, || pin(&PinSide(PhantomData)))
    }

    /// Runs `call` (a put or DMA map naming a revocable pin's table) while
    /// no pin is in flight, keeping pins out until it returned.  `call` gets
    /// the proof of that, [`TableSide`].
    pub(crate) fn use_table<T>(&self, call: impl FnOnce(&TableSide<'_>) -> T) -> T {
        self.pass(Side::Table, || call(&TableSide(PhantomData)))
    }

    /// Runs `call` on `side` of the gate: waits until that side may enter,
    /// calls without the gate's lock held, then leaves.
    fn pass<T>(&self, side: Side, call: impl FnOnce() -> T) -> T {
        let mut g = self.state.lock();
        let mut waited = false;
        while !g.enter(side, waited) {
            if !waited {
                STATS.gate_waited();
            }
            waited = true;
            self.left.wait(&mut g);
        }
        drop(g);
        let r = call();
        self.state.lock().leave(side);
        self.left.notify_all();
        r
    }
}
