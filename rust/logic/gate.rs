// SPDX-License-Identifier: GPL-2.0

//! Who may call the NVIDIA driver now: our revocable pins, or our
//! revocable puts.  Never both at once.
//!
//! Why: the driver finds a revocable pin by its page table's address alone,
//! and the table of a pin whose memory was freed (cudaFree) is freed by the
//! driver right after our free callback returned; kmalloc hands that
//! address to the next table allocated, at once.  A `put_pages` of ours
//! that was already on its way into the driver when the callback ran (the
//! callback must not wait for it: the put needs the lock the driver holds
//! around the callback) then arrives late.  If a pin of ours has been given
//! the freed table's address meanwhile, the late put releases *that* pin:
//! its registration keeps a freed table and its cudaFree fences nothing.
//!
//! The same holds for a `dma_map_pages` in flight (it reads the table
//! before the driver's lock): it would map the other pin for us, and that
//! pin's owner would later put a table with our mapping on it.  Maps pass
//! the gate like puts.
//!
//! A pin allocates its table inside the driver call, so it can only be
//! given an address freed before that call returns; a put can only go stale
//! while it is in flight.  So no pin is made while any revocable put is in
//! flight, and no put starts while a pin is being made: every table a pin
//! receives was freed before any put still able to name it had returned.
//! Waiting pins go first (a deregistration storm cannot starve
//! registrations), and each side waits only for calls that need nothing
//! from it.  Persistent pins have no callback: they never pass the gate.

/// Which side of the gate a driver call is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A revocable pin (`get_pages`).
    Pin,
    /// A call naming a revocable pin's table (`put_pages`, `dma_map_pages`).
    Table,
}

/// The gate's state, kept under one lock by its owner.
#[derive(Debug, Default)]
pub struct Gate {
    /// Revocable puts in the driver.
    puts: u32,
    /// A pin is in the driver.
    pinning: bool,
    /// Pins waiting to enter.
    pins_waiting: u32,
}

impl Gate {
    /// An open gate: nothing in flight.
    pub const fn new() -> Self {
        Gate {
            puts: 0,
            pinning: false,
            pins_waiting: 0,
        }
    }

    /// A put asks to enter; `true`: it may call the driver now (and must
    /// call [`Gate::put_done`] after), `false`: wait and ask again.
    pub fn put_enter(&mut self) -> bool {
        if self.pinning || self.pins_waiting > 0 {
            return false;
        }
        self.puts += 1;
        true
    }

    /// A put returned from the driver.
    pub fn put_done(&mut self) {
        self.puts = self.puts.saturating_sub(1);
    }

    /// A pin asks to enter; `waiting`: it has asked before and waited.
    /// `true`: it may call the driver now (and must call
    /// [`Gate::pin_done`] after), `false`: wait and ask again with
    /// `waiting` set.
    pub fn pin_enter(&mut self, waiting: bool) -> bool {
        if self.pinning || self.puts > 0 {
            if !waiting {
                self.pins_waiting += 1;
            }
            return false;
        }
        if waiting {
            self.pins_waiting = self.pins_waiting.saturating_sub(1);
        }
        self.pinning = true;
        true
    }

    /// A pin returned from the driver.
    pub fn pin_done(&mut self) {
        self.pinning = false;
    }

    /// A call on `side` asks to enter; `waited`: it asked before and
    /// waited.  `true`: it may call the driver now (and must call
    /// [`Gate::leave`] after), `false`: wait and ask again.
    pub fn enter(&mut self, side: Side, waited: bool) -> bool {
        match side {
            Side::Pin => self.pin_enter(waited),
            Side::Table => self.put_enter(),
        }
    }

    /// A call on `side` returned from the driver.
    pub fn leave(&mut self, side: Side) {
        match side {
            Side::Pin => self.pin_done(),
            Side::Table => self.put_done(),
        }
    }

    /// Revocable puts in the driver now.
    pub fn puts_in_flight(&self) -> u32 {
        self.puts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_and_puts_never_overlap() {
        let mut g = Gate::new();
        assert!(g.put_enter());
        assert!(g.put_enter());
        assert!(!g.pin_enter(false));
        g.put_done();
        assert!(!g.pin_enter(true));
        g.put_done();
        assert!(g.pin_enter(true));
        assert!(!g.put_enter());
        assert!(!g.pin_enter(false));
        g.pin_done();
        // The second pin waited: it goes before new puts.
        assert!(!g.put_enter());
        assert!(g.pin_enter(true));
        g.pin_done();
        assert!(g.put_enter());
        assert_eq!(g.puts_in_flight(), 1);
    }

    #[test]
    fn sides_dispatch() {
        let mut g = Gate::new();
        assert!(g.enter(Side::Table, false));
        assert!(!g.enter(Side::Pin, false));
        g.leave(Side::Table);
        assert!(g.enter(Side::Pin, true));
        assert!(!g.enter(Side::Table, false));
        g.leave(Side::Pin);
        assert!(g.enter(Side::Table, true));
    }

    #[test]
    fn an_open_gate_lets_either_in() {
        let mut g = Gate::new();
        assert!(g.pin_enter(false));
        g.pin_done();
        assert!(g.put_enter());
        g.put_done();
        assert_eq!(g.puts_in_flight(), 0);
        assert!(g.pin_enter(false));
    }
}
