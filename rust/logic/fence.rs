// SPDX-License-Identifier: GPL-2.0

//! Which revocable pins of ours a late driver call of ours may have reached,
//! so that they are redone before anything uses them ([`Fence`]).
//!
//! The hazard: the NVIDIA driver finds a revocable pin by its page table's
//! address alone, and frees the table of a pin whose memory was freed
//! (cudaFree) right after our free callback returned; kmalloc hands that
//! address to the next table allocated, at once.  A `put_pages` or
//! `dma_map_pages` of ours that was already on its way into the driver when
//! the callback ran (the callback must not wait for it: the call needs the
//! lock the driver holds around the callback) arrives late, carrying the
//! freed address.  If a pin of ours was given that address meanwhile, the
//! late put releases it, or the late map links a mapping into it.
//!
//! Nothing makes a pin wait for a put or a map.  Instead:
//! - each put or map naming a revocable pin's table is recorded while it is
//!   in the driver ([`Fence::call_begin`]); the free callback that finds
//!   its pin's call in flight marks it late ([`Fence::mark_late`]), with
//!   the table's address;
//! - a pin that returns with the address of a late call that was in the
//!   driver while the pin was, or that is kept for such a pin, is a suspect
//!   ([`Fence::pin_end`]): it may have been released, or have a mapping
//!   linked into it.  It is never handed on.  Once every late call at its
//!   address has returned, with no other pin of ours in the driver and none
//!   let in, it is put ([`Fence::settle_enter`]: the put releases it if the
//!   late call did not, and finds nothing if it did) and the registration
//!   pins anew.  Suspects at one address settle newest first: only the
//!   newest can still hold it.
//! - a pin made while a late call is in flight gets a freed address only
//!   after that call's callback returned, and the callback marks the call
//!   before it returns, so the mark is there when the pin returns.  A pin
//!   that returned clean had an address no late call of ours names: the
//!   driver had given it no other table, and it gives no freed table's
//!   address to two pins.
//!
//! Only a probe's pin (an exiting process asking whether it still reaches
//! its memory) keeps every other driver call of ours out while it pins and
//! puts ([`Fence::exclusive_enter`]): its verdict must not be a late call's
//! doing.  Persistent pins have no callback and never pass the fence.
//!
//! Fixed tables, no allocation: a pin or call finding its table full waits
//! (its `*_begin` answers `None`), the callback never does.

/// Pins of ours in the driver or waiting to settle, at most.
pub const PIN_SLOTS: usize = 16;
/// Puts and maps of ours in the driver, or late and still remembered, at
/// most.
pub const CALL_SLOTS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PinSlot {
    Free,
    /// In the driver since `start`.
    InFlight {
        start: u64,
    },
    /// Returned at `end` with the address `table` of a late call: to be put
    /// and redone.
    Suspect {
        start: u64,
        end: u64,
        table: usize,
    },
}

impl PinSlot {
    fn start(self) -> Option<u64> {
        match self {
            PinSlot::Free => None,
            PinSlot::InFlight { start } | PinSlot::Suspect { start, .. } => Some(start),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CallSlot {
    used: bool,
    gen: u32,
    table: usize,
    late: bool,
    /// When it returned (kept only if late).
    end: Option<u64>,
}

const FREE_CALL: CallSlot = CallSlot {
    used: false,
    gen: 0,
    table: 0,
    late: false,
    end: None,
};

/// A pin of ours in the driver (from [`Fence::pin_begin`]).
#[derive(Debug, PartialEq, Eq)]
pub struct PinTicket(usize);

/// A put or map of ours in the driver (from [`Fence::call_begin`]): what
/// the free callback of its pin names to [`Fence::mark_late`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTicket {
    slot: usize,
    gen: u32,
}

/// What a pin that returned is.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No late call of ours can name its table: use it.
    Clean,
    /// A late call of ours may have reached it: do not use it; settle it
    /// ([`Fence::settle_enter`]), then pin anew.
    Suspect(PinTicket),
}

/// The fence's state, kept under one lock by its owner.
///
/// # Invariants
///
/// A late call's slot is kept until it returned and no pin that was in the
/// driver before it returned is in flight or unsettled; `seq` grows by one
/// at every begin and end.
#[derive(Debug)]
pub struct Fence {
    seq: u64,
    pins: [PinSlot; PIN_SLOTS],
    calls: [CallSlot; CALL_SLOTS],
    /// A suspect is being settled, or a probe runs: no pin enters.
    hold_pins: bool,
    /// A probe runs: no put or map enters either.
    hold_calls: bool,
    /// A suspect is being put (its put enters even before a waiting probe).
    settling: bool,
    /// Probes waiting to enter: pins, and puts and maps other than a
    /// settle's, wait behind them.
    probes_waiting: u32,
}

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

impl Fence {
    /// Nothing in flight.
    pub const fn new() -> Self {
        Fence {
            seq: 0,
            pins: [PinSlot::Free; PIN_SLOTS],
            calls: [FREE_CALL; CALL_SLOTS],
            hold_pins: false,
            hold_calls: false,
            settling: false,
            probes_waiting: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A pin asks to enter the driver: its ticket, or `None` (wait for a
    /// settle, a probe or a free slot, and ask again).
    pub fn pin_begin(&mut self) -> Option<PinTicket> {
        // A suspect that only waits for pins in flight goes first: a
        // stream of pins cannot starve it.
        if self.hold_pins || self.probes_waiting > 0 || self.suspect_ready() {
            return None;
        }
        let i = self.pins.iter().position(|p| *p == PinSlot::Free)?;
        let start = self.tick();
        self.pins[i] = PinSlot::InFlight { start };
        Some(PinTicket(i))
    }

    /// A pin returned from the driver with table address `table` (`None`:
    /// it failed).  A suspect keeps its slot until [`Fence::settle_done`].
    pub fn pin_end(&mut self, t: PinTicket, table: Option<usize>) -> Verdict {
        let end = self.tick();
        let start = self.pins[t.0].start().unwrap_or(0);
        let suspect =
            table.filter(|&a| self.calls.iter().any(|c| c.used && c.late && c.table == a));
        match suspect {
            Some(table) => {
                self.pins[t.0] = PinSlot::Suspect { start, end, table };
                Verdict::Suspect(t)
            }
            None => {
                self.pins[t.0] = PinSlot::Free;
                self.collect();
                Verdict::Clean
            }
        }
    }

    /// Whether a suspect's late calls have all returned (its settle waits
    /// only for pins in flight).
    fn suspect_ready(&self) -> bool {
        self.pins.iter().any(|p| match *p {
            PinSlot::Suspect { table, .. } => !self
                .calls
                .iter()
                .any(|c| c.used && c.late && c.table == table && c.end.is_none()),
            _ => false,
        })
    }

    /// A suspect asks to be settled: `true` when it may put its pin now
    /// (and must call [`Fence::settle_done`] after), with no pin of ours
    /// in the driver or let in meanwhile; `false`: wait and ask again.
    /// Its turn comes once every late call at its address returned, no pin
    /// of ours is in the driver, and no suspect at that address returned
    /// after it.
    pub fn settle_enter(&mut self, t: &PinTicket) -> bool {
        let PinSlot::Suspect { end, table, .. } = self.pins[t.0] else {
            return false;
        };
        let calls_out = self
            .calls
            .iter()
            .any(|c| c.used && c.late && c.table == table && c.end.is_none());
        let pins_out = self
            .pins
            .iter()
            .any(|p| matches!(p, PinSlot::InFlight { .. }));
        let newer = self.pins.iter().any(
            |p| matches!(*p, PinSlot::Suspect { end: e, table: a, .. } if a == table && e > end),
        );
        if self.hold_pins || calls_out || pins_out || newer {
            return false;
        }
        self.hold_pins = true;
        self.settling = true;
        true
    }

    /// The suspect was put (or its callback ran): pins may enter again.
    pub fn settle_done(&mut self, t: PinTicket) {
        self.pins[t.0] = PinSlot::Free;
        self.hold_pins = false;
        self.settling = false;
        self.tick();
        self.collect();
    }

    /// A suspect whose free callback ran meanwhile: the driver tore its pin
    /// down, there is nothing to put.
    pub fn forget_suspect(&mut self, t: PinTicket) {
        self.pins[t.0] = PinSlot::Free;
        self.tick();
        self.collect();
    }

    /// A put or map naming revocable table `table` asks to enter the
    /// driver: its ticket, or `None` (wait for a probe or a free slot, and
    /// ask again).
    pub fn call_begin(&mut self, table: usize) -> Option<CallTicket> {
        if self.hold_calls || (self.probes_waiting > 0 && !self.settling) {
            return None;
        }
        let i = self.calls.iter().position(|c| !c.used)?;
        self.tick();
        let gen = self.calls[i].gen.wrapping_add(1);
        self.calls[i] = CallSlot {
            used: true,
            gen,
            table,
            late: false,
            end: None,
        };
        Some(CallTicket { slot: i, gen })
    }

    /// The call returned from the driver.
    pub fn call_end(&mut self, c: CallTicket) {
        let end = self.tick();
        let slot = &mut self.calls[c.slot];
        if !slot.used || slot.gen != c.gen {
            return;
        }
        if slot.late {
            slot.end = Some(end);
        } else {
            slot.used = false;
        }
        self.collect();
    }

    /// The free callback of the pin whose call `c` is: if the call has not
    /// returned, it is late (its table is freed once the callback returns).
    /// Never waits.
    pub fn mark_late(&mut self, c: CallTicket) {
        let slot = &mut self.calls[c.slot];
        if slot.used && slot.gen == c.gen && slot.end.is_none() {
            slot.late = true;
        }
    }

    /// A probe asks to pin and put alone (`waited`: it asked before and
    /// waited): `true` when nothing of ours is in the driver or unsettled
    /// (it must call [`Fence::exclusive_done`] after); `false`: wait and
    /// ask again.  While it waits, pins and calls (but a settle's put) wait
    /// behind it, so that a stream of them cannot starve it.
    pub fn exclusive_enter(&mut self, waited: bool) -> bool {
        let busy = self.hold_pins
            || self.pins.iter().any(|p| *p != PinSlot::Free)
            || self.calls.iter().any(|c| c.used && c.end.is_none());
        if busy {
            if !waited {
                self.probes_waiting += 1;
            }
            return false;
        }
        if waited {
            self.probes_waiting = self.probes_waiting.saturating_sub(1);
        }
        self.hold_pins = true;
        self.hold_calls = true;
        true
    }

    /// The probe is done.
    pub fn exclusive_done(&mut self) {
        self.hold_pins = false;
        self.hold_calls = false;
        self.tick();
    }

    /// Late calls in the driver or remembered for a pin.
    #[cfg(test)]
    fn late_calls(&self) -> usize {
        self.calls.iter().filter(|c| c.used && c.late).count()
    }

    /// Forgets the late calls no pin can still have met: returned before
    /// every pin now in flight or unsettled began.
    fn collect(&mut self) {
        let oldest = self.pins.iter().filter_map(|p| p.start()).min();
        for c in self.calls.iter_mut() {
            if let (true, Some(end)) = (c.used, c.end) {
                if oldest.is_none_or(|s| end < s) {
                    c.used = false;
                    c.late = false;
                    c.end = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: usize = 0x1000;
    const U: usize = 0x2000;

    #[test]
    fn pins_and_calls_run_side_by_side() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let pin = f.pin_begin().expect("a pin does not wait for a put");
        assert_eq!(f.pin_end(pin, Some(U)), Verdict::Clean);
        f.call_end(put);
        let pin = f.pin_begin().unwrap();
        // The put returned before it was late: nothing is remembered.
        assert_eq!(f.pin_end(pin, Some(T)), Verdict::Clean);
        assert_eq!(f.late_calls(), 0);
    }

    #[test]
    fn a_pin_at_a_late_calls_address_is_a_suspect() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let pin = f.pin_begin().unwrap();
        f.mark_late(put);
        // Another address: the late put cannot name it.
        let other = f.pin_begin().unwrap();
        assert_eq!(f.pin_end(other, Some(U)), Verdict::Clean);
        let Verdict::Suspect(s) = f.pin_end(pin, Some(T)) else {
            panic!("not a suspect")
        };
        // Not before the late put returned.
        assert!(!f.settle_enter(&s));
        f.call_end(put);
        assert!(f.settle_enter(&s));
        // No pin enters while it is put.
        assert!(f.pin_begin().is_none());
        f.settle_done(s);
        // Forgotten once no pin can have met it.
        assert_eq!(f.late_calls(), 0);
        let pin = f.pin_begin().unwrap();
        assert_eq!(f.pin_end(pin, Some(T)), Verdict::Clean);
    }

    #[test]
    fn a_pin_after_the_late_call_returned_is_a_suspect_while_an_earlier_one_is_unsettled() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let first = f.pin_begin().unwrap();
        f.mark_late(put);
        f.call_end(put);
        // The first pin is still in the driver: the late put's address
        // may have been given to it and freed again by that put.
        let second = f.pin_begin().unwrap();
        let Verdict::Suspect(s2) = f.pin_end(second, Some(T)) else {
            panic!("the second pin is not a suspect")
        };
        let Verdict::Suspect(s1) = f.pin_end(first, Some(T)) else {
            panic!("the first pin is not a suspect")
        };
        // Newest first: the first returned later, so it settles first.
        assert!(!f.settle_enter(&s2));
        assert!(f.settle_enter(&s1));
        assert!(!f.settle_enter(&s2));
        f.settle_done(s1);
        assert!(f.settle_enter(&s2));
        f.settle_done(s2);
        assert_eq!(f.late_calls(), 0);
    }

    #[test]
    fn a_settle_waits_for_pins_in_flight() {
        let mut f = Fence::new();
        let map = f.call_begin(T).unwrap();
        let pin = f.pin_begin().unwrap();
        f.mark_late(map);
        let Verdict::Suspect(s) = f.pin_end(pin, Some(T)) else {
            panic!("not a suspect")
        };
        let other = f.pin_begin().unwrap();
        f.call_end(map);
        assert!(!f.settle_enter(&s));
        // The suspect now waits only for that pin: new ones wait for it.
        assert!(f.pin_begin().is_none());
        assert_eq!(f.pin_end(other, Some(U)), Verdict::Clean);
        assert!(f.settle_enter(&s));
        f.settle_done(s);
        assert!(f.pin_begin().is_some());
    }

    #[test]
    fn a_mark_after_the_call_returned_is_ignored() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        f.call_end(put);
        f.mark_late(put);
        // The slot's next user is not mistaken for it either.
        let map = f.call_begin(U).unwrap();
        f.mark_late(put);
        let pin = f.pin_begin().unwrap();
        assert_eq!(f.pin_end(pin, Some(U)), Verdict::Clean);
        f.call_end(map);
        assert_eq!(f.late_calls(), 0);
    }

    #[test]
    fn a_revoked_suspect_leaves_a_running_settle_alone() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let (a, b) = (f.pin_begin().unwrap(), f.pin_begin().unwrap());
        f.mark_late(put);
        let Verdict::Suspect(sa) = f.pin_end(a, Some(T)) else {
            panic!("not a suspect")
        };
        f.call_end(put);
        let Verdict::Suspect(sb) = f.pin_end(b, Some(T)) else {
            panic!("not a suspect")
        };
        assert!(f.settle_enter(&sb));
        f.forget_suspect(sa);
        assert!(f.pin_begin().is_none(), "the settle still holds pins back");
        f.settle_done(sb);
        assert_eq!(f.late_calls(), 0);
    }

    #[test]
    fn a_failed_pin_is_clean() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let pin = f.pin_begin().unwrap();
        f.mark_late(put);
        assert_eq!(f.pin_end(pin, None), Verdict::Clean);
        f.call_end(put);
        assert_eq!(f.late_calls(), 0);
    }

    #[test]
    fn a_probe_runs_alone() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let pin = f.pin_begin().unwrap();
        assert!(!f.exclusive_enter(false));
        // Newcomers wait behind the waiting probe.
        assert!(f.pin_begin().is_none());
        assert!(f.call_begin(U).is_none());
        f.call_end(put);
        assert!(!f.exclusive_enter(true));
        assert_eq!(f.pin_end(pin, Some(U)), Verdict::Clean);
        assert!(f.exclusive_enter(true));
        assert!(f.pin_begin().is_none());
        assert!(f.call_begin(T).is_none());
        f.exclusive_done();
        assert!(f.call_begin(T).is_some());
        assert!(f.pin_begin().is_some());
    }

    #[test]
    fn a_settles_put_goes_before_a_waiting_probe() {
        let mut f = Fence::new();
        let put = f.call_begin(T).unwrap();
        let pin = f.pin_begin().unwrap();
        f.mark_late(put);
        let Verdict::Suspect(s) = f.pin_end(pin, Some(T)) else {
            panic!("not a suspect")
        };
        f.call_end(put);
        assert!(!f.exclusive_enter(false));
        assert!(f.settle_enter(&s));
        let again = f.call_begin(T).expect("the settle's put");
        f.call_end(again);
        f.settle_done(s);
        assert!(f.exclusive_enter(true));
        f.exclusive_done();
    }

    #[test]
    fn full_tables_make_the_newcomer_wait() {
        let mut f = Fence::new();
        let pins: [PinTicket; PIN_SLOTS] = core::array::from_fn(|_| f.pin_begin().unwrap());
        assert!(f.pin_begin().is_none());
        let calls: [CallTicket; CALL_SLOTS] = core::array::from_fn(|i| f.call_begin(i).unwrap());
        assert!(f.call_begin(T).is_none());
        // The callback never waits, and marks in a full table.
        f.mark_late(calls[0]);
        for c in calls {
            f.call_end(c);
        }
        // The late call is kept for the pins that were in flight with it.
        assert_eq!(f.late_calls(), 1);
        for p in pins {
            assert_eq!(f.pin_end(p, Some(0x10_0000)), Verdict::Clean);
        }
        assert_eq!(f.late_calls(), 0);
    }
}
