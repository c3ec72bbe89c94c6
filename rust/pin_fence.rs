// SPDX-License-Identifier: GPL-2.0

//! The fence of late driver calls (the rule and why it is needed are in
//! rust/logic/fence.rs): its state under a mutex, and a condition variable
//! that suspects, probes and newcomers to a full table sleep on.  Nothing
//! holds the fence's lock while in the driver, and the free callback only
//! marks (it never waits), so the fence adds no lock the driver's callback
//! could wait for.

use core::marker::PhantomData;

use kernel::prelude::*;
use kernel::sync::{CondVar, Mutex};
use kernel::{new_condvar, new_mutex};

use crate::logic::fence::{CallTicket, Fence, PinTicket, Verdict};
use crate::stats::STATS;

/// The revocable pins, puts and DMA maps of one client, and the late ones
/// among its puts and maps.
#[pin_data]
pub(crate) struct PinFence {
    #[pin]
    state: Mutex<Fence>,
    /// Signalled whenever a pin, call, settle or probe ends.
    #[pin]
    changed: CondVar,
}

/// Proof that a put or map naming a revocable pin's table is recorded in
/// the fence while it is in the driver: its pin's free callback can mark
/// it late ([`PinFence::mark_late`] with [`InFence::ticket`]).
///
/// # Invariants
///
/// Exists only while a [`PinFence::table_call`] call has the ticket: made
/// there and only lent to its `call`.
pub(crate) struct InFence<'a> {
    ticket: CallTicket,
    _fence: PhantomData<&'a PinFence>,
}

impl InFence<'_> {
    /// What the pin's free callback names to [`PinFence::mark_late`].
    pub(crate) fn ticket(&self) -> CallTicket {
        self.ticket
    }
}

/// A pin that a late call of ours may have reached: it must not be used,
/// only put by [`Suspect::settle`] (or forgotten by [`Suspect::revoked`] if
/// its callback ran).
#[must_use]
pub(crate) struct Suspect<'a> {
    fence: &'a PinFence,
    ticket: Option<PinTicket>,
}

impl PinFence {
    /// Nothing in flight.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(PinFence {
            state <- new_mutex!(Fence::new(), "peermem_rs::PinFence::state"),
            changed <- new_condvar!("peermem_rs::PinFence::changed"),
        })
    }

    /// Waits until `enter` says yes (under the lock), counting one wait.
    fn wait_for<T>(&self, mut enter: impl FnMut(&mut Fence, bool) -> Option<T>) -> T {
        let mut g = self.state.lock();
        let mut waited = false;
        loop {
            if let Some(t) = enter(&mut g, waited) {
                return t;
            }
            if !waited {
                STATS.fence_waited();
            }
            waited = true;
            self.changed.wait(&mut g);
        }
    }

    fn end(&self, f: impl FnOnce(&mut Fence)) {
        f(&mut self.state.lock());
        self.changed.notify_all();
    }

    /// Runs `pin` (a revocable pin call into the driver); `table` tells the
    /// address of the table it got, if any.  A pin waits only while a
    /// suspect is put or is about to be, or a probe runs or waits.  Returns the pin's result, and a
    /// [`Suspect`] if a late call of ours may have reached it.
    pub(crate) fn pin<T>(
        &self,
        pin: impl FnOnce() -> T,
        table: impl FnOnce(&T) -> Option<usize>,
    ) -> (T, Option<Suspect<'_>>) {
        let ticket = self.wait_for(|f, _| f.pin_begin());
        let r = pin();
        let addr = table(&r);
        let verdict = self.state.lock().pin_end(ticket, addr);
        self.changed.notify_all();
        match verdict {
            Verdict::Clean => (r, None),
            Verdict::Suspect(t) => (
                r,
                Some(Suspect {
                    fence: self,
                    ticket: Some(t),
                }),
            ),
        }
    }

    /// Runs `call` (a put or DMA map naming revocable table `table`)
    /// recorded in the fence; `call` gets the proof of that, [`InFence`],
    /// whose ticket it leaves where the pin's free callback finds it.
    pub(crate) fn table_call<T>(&self, table: usize, call: impl FnOnce(&InFence<'_>) -> T) -> T {
        let ticket = self.wait_for(|f, _| f.call_begin(table));
        let r = call(&InFence {
            ticket,
            _fence: PhantomData,
        });
        self.end(|f| f.call_end(ticket));
        r
    }

    /// The free callback of a pin whose put or map `ticket` may be in the
    /// driver: that call is late.  Never waits beyond the lock, which
    /// nothing holds across a driver call.
    pub(crate) fn mark_late(&self, ticket: CallTicket) {
        self.state.lock().mark_late(ticket);
    }

    /// Runs `probe` (a probe's pin and put) with nothing else of ours in the
    /// driver.
    pub(crate) fn exclusive<T>(&self, probe: impl FnOnce() -> T) -> T {
        self.wait_for(|f, waited| f.exclusive_enter(waited).then_some(()));
        let r = probe();
        self.end(Fence::exclusive_done);
        r
    }
}

impl Suspect<'_> {
    /// Waits for its turn (every late call at its address returned, no other
    /// pin of ours in the driver, none let in), then runs `put`, which
    /// releases the pin if the late call did not (and finds nothing if it
    /// did).
    pub(crate) fn settle(mut self, put: impl FnOnce()) {
        let Some(t) = self.ticket.take() else { return };
        let fence = self.fence;
        fence.wait_for(|f, _| f.settle_enter(&t).then_some(()));
        STATS.pin_redone();
        put();
        fence.end(|f| f.settle_done(t));
    }

    /// Its free callback ran: the driver tore the pin down, nothing to put.
    pub(crate) fn revoked(mut self) {
        if let Some(t) = self.ticket.take() {
            self.fence.end(|f| f.forget_suspect(t));
        }
    }
}

impl Drop for Suspect<'_> {
    fn drop(&mut self) {
        // Settled or revoked: nothing left.  (Never reached otherwise; the
        // slot is freed rather than left to stop every later pin.)
        if let Some(t) = self.ticket.take() {
            self.fence.end(|f| f.forget_suspect(t));
        }
    }
}
