// SPDX-License-Identifier: GPL-2.0

//! The life of one registration (one `ibv_reg_mr` served by us), as a pure
//! state machine.  The kernel side (rust/peer_mr.rs) keeps a [`State`]
//! under the registration's lock, asks it what to do for each event, and
//! performs the returned [`Action`] *after* dropping the lock: no NVIDIA
//! driver call and no call into the RDMA core is ever made with our lock
//! held, so the driver's lock (held around the free callback) and ours are
//! never taken in both orders.
//!
//! ```text
//!  acquire pins ──► Pinned ──get_pages──► Lent ──dma_map──► Mapping ──ok──► Mapped
//!                     │                    ▲  ▲               │ failed        │
//!                     │                    │  └───────────────┘               │ dma_unmap
//!                     │                    └──────────── Unmapping ◄──────────┤ (persistent)
//!                     │ release without get_pages                 │           │
//!                     │                                           │           │ dma_unmap
//!                     │                           Fenced ◄────────┼───────────┘ (revocable)
//!                     ▼                             │             ▼
//!                 Unpinning ◄──── put_pages ────────┴── put_pages (from Lent)
//!                     │                         │ called from another process
//!                     ▼                         ▼ (its put would find no pin)
//!                 Unpinned                  Orphaned  (pin and callback stay armed)
//!
//!  A revocable pin is never DMA-unmapped through the driver: the core's
//!  `dma_unmap` only records that the HCA is fenced (`Fenced`), and the put
//!  releases the pin with its mappings (the driver frees every mapping of a
//!  page table with it).  Its table may have been freed already by another
//!  user of the API in the same process (a late put of a table whose address
//!  the driver gave to this pin): an unmap would read freed memory, a put
//!  finds no pin and returns 0.  A persistent pin is unmapped, then put.
//!
//!  free callback (cudaFree, invalidate mode), from any state holding the pin:
//!    Mapped                      ──► Invalidating ──(core fenced the DMA)──► Revoked
//!    Pinned, Lent, Mapping,
//!    Fenced, Unpinning, Orphaned ──► Revoked   (no DMA can be active: no key yet,
//!                                               or the core already fenced or
//!                                               destroyed it)
//!  The callback never waits for a driver call in flight (a pin, unpin or
//!  map needs the driver's lock, which the driver holds around the
//!  callback; only persistent pins, which have no callback, are unmapped).
//!  In Invalidating and Revoked the driver owns (and frees) the page table and
//!  the mapping: every later step skips the driver and only tidies our side.
//! ```

/// Where a registration is.  See the diagram in the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// `acquire` pinned the range; the core has not asked for the pages.
    Pinned,
    /// `get_pages` handed the pin to the core; not DMA-mapped.
    Lent,
    /// `dma_map` is in the driver.
    Mapping,
    /// DMA-mapped for the HCA: DMA may be in flight.
    Mapped,
    /// `dma_unmap` is in the driver.
    Unmapping,
    /// A revocable pin the core unmapped: the HCA is fenced, and the DMA
    /// mapping is left to the put (or the free callback), which releases it
    /// with the pin.
    Fenced,
    /// The pin is being released in the driver.
    Unpinning,
    /// We released the pin: nothing is held.
    Unpinned,
    /// The core is done, but the pin could not be released: the release was
    /// asked for by another process than the one that pinned (the driver
    /// looks revocable pins up per process).  The pin and its free callback
    /// stay armed until the owner frees the memory or exits.
    Orphaned,
    /// The free callback is having the core fence DMA.
    Invalidating,
    /// The driver revoked the memory (cudaFree): DMA is fenced and the driver
    /// frees the page table and mapping; nothing is held by us.
    Revoked,
}

/// What the caller must do after a transition, outside the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing to do in the driver.
    Nothing,
    /// Call the driver (map, unmap or unpin, as the event says).
    CallDriver,
    /// Unmap first (the core skipped `dma_unmap`), then ask again.
    UnmapFirst,
    /// Ask the core to invalidate (fence DMA), then report `fence_done`.
    Fence,
}

/// Why an event is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The GPU memory was freed (cudaFree) under the registration: the
    /// state is `Invalidating` or `Revoked`.
    Freed,
    /// The core called us out of order (a contract violation by the core).
    OutOfOrder,
}

impl State {
    /// Whether the registration still holds the pin (and so the page table).
    pub fn holds_pin(self) -> bool {
        matches!(
            self,
            State::Pinned
                | State::Lent
                | State::Mapping
                | State::Mapped
                | State::Unmapping
                | State::Fenced
                | State::Unpinning
                | State::Orphaned
        )
    }

    fn revoked(self) -> bool {
        matches!(self, State::Invalidating | State::Revoked)
    }

    /// `get_pages`: the core takes the pages pinned by `acquire`.
    pub fn get_pages(&mut self) -> Result<(), Refusal> {
        match *self {
            State::Pinned => {
                *self = State::Lent;
                Ok(())
            }
            s if s.revoked() => Err(Refusal::Freed),
            _ => Err(Refusal::OutOfOrder),
        }
    }

    /// `dma_map` is about to call the driver.
    pub fn map_begin(&mut self) -> Result<(), Refusal> {
        match *self {
            State::Lent => {
                *self = State::Mapping;
                Ok(())
            }
            s if s.revoked() => Err(Refusal::Freed),
            _ => Err(Refusal::OutOfOrder),
        }
    }

    /// The driver's map call returned (`mapped`: it succeeded).  `Ok(true)`:
    /// keep the mapping; `Ok(false)`: the map failed, nothing to keep;
    /// `Err(Freed)`: the memory was freed meanwhile and the driver owns
    /// whatever it mapped: the caller must not touch it.
    pub fn map_end(&mut self, mapped: bool) -> Result<bool, Refusal> {
        match *self {
            State::Mapping => {
                *self = if mapped { State::Mapped } else { State::Lent };
                Ok(mapped)
            }
            _ => Err(Refusal::Freed),
        }
    }

    /// `dma_unmap` (or the undo of a `dma_map` that failed after mapping):
    /// `CallDriver` to unmap, `Nothing` when the driver already owns the
    /// mapping (revoked), nothing was mapped, or the pin is `revocable`:
    /// its mapping goes with the pin at the put (`Fenced`).
    pub fn unmap_begin(&mut self, revocable: bool) -> Result<Action, Refusal> {
        match *self {
            State::Mapped if revocable => {
                *self = State::Fenced;
                Ok(Action::Nothing)
            }
            State::Mapped => {
                *self = State::Unmapping;
                Ok(Action::CallDriver)
            }
            s if s.revoked() => Ok(Action::Nothing),
            State::Lent | State::Fenced => Ok(Action::Nothing),
            _ => Err(Refusal::OutOfOrder),
        }
    }

    /// The driver's unmap call returned.
    pub fn unmap_end(&mut self) {
        if *self == State::Unmapping {
            *self = State::Lent;
        }
    }

    /// `put_pages`, or `release` of a pin the core never took or never gave
    /// back: what to do with the pin.  `foreign`: the caller is not the
    /// process that pinned, so the driver's put would find nothing (only
    /// ever true for revocable pins).  A `revocable` pin still mapped (the
    /// core skipped `dma_unmap`) is put with its mapping; a persistent one
    /// is unmapped first.
    pub fn unpin_begin(&mut self, foreign: bool, revocable: bool) -> Action {
        match *self {
            State::Mapped if !revocable => Action::UnmapFirst,
            State::Pinned | State::Lent | State::Fenced | State::Mapped if foreign => {
                *self = State::Orphaned;
                Action::Nothing
            }
            State::Pinned | State::Lent | State::Fenced | State::Mapped => {
                *self = State::Unpinning;
                Action::CallDriver
            }
            _ => Action::Nothing,
        }
    }

    /// The pin call failed: nothing is held.
    pub fn pin_failed(&mut self) {
        if *self == State::Pinned {
            *self = State::Unpinned;
        }
    }

    /// The pin cannot be used (an unsupported page table): release it at
    /// once.  `true`: the caller must call the driver (the callback did not
    /// revoke it meanwhile).
    pub fn unusable(&mut self) -> bool {
        match *self {
            State::Pinned => {
                *self = State::Unpinning;
                true
            }
            _ => false,
        }
    }

    /// The driver's unpin call failed.  A revocable pin (`armed`) may still
    /// be armed: it is kept, with its free callback, until that callback;
    /// a persistent pin has no callback and nothing more can be done.
    pub fn unpin_failed(&mut self, armed: bool) {
        if *self == State::Unpinning {
            *self = if armed {
                State::Orphaned
            } else {
                State::Unpinned
            };
        }
    }

    /// The driver's unpin call returned.  `true`: the free callback did not
    /// run and now never will, so its reference to the registration is the
    /// caller's to drop; `false`: the callback ran and drops it itself.
    pub fn unpin_end(&mut self) -> bool {
        match *self {
            State::Unpinning => {
                *self = State::Unpinned;
                true
            }
            _ => false,
        }
    }

    /// The driver's free callback (cudaFree of pinned memory).  `Fence`: the
    /// caller must have the core invalidate, then call `fence_done`.
    /// `Err(OutOfOrder)`: a callback for a pin we do not hold (a driver bug);
    /// nothing to do.
    pub fn free_callback(&mut self) -> Result<Action, Refusal> {
        match *self {
            State::Mapped => {
                *self = State::Invalidating;
                Ok(Action::Fence)
            }
            s if s.holds_pin() => {
                *self = State::Revoked;
                Ok(Action::Nothing)
            }
            _ => Err(Refusal::OutOfOrder),
        }
    }

    /// The core returned from invalidate: no DMA is active any more.
    /// `Revoked` is terminal: no event leaves it.
    pub fn fence_done(&mut self) {
        if *self == State::Invalidating {
            *self = State::Revoked;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `revocable` argument of `unmap_begin` and `unpin_begin`.
    const PERSISTENT: bool = false;
    const REVOCABLE: bool = true;

    fn mapped() -> State {
        let mut s = State::Pinned;
        s.get_pages().unwrap();
        s.map_begin().unwrap();
        assert_eq!(s.map_end(true), Ok(true));
        assert_eq!(s, State::Mapped);
        s
    }

    #[test]
    fn normal_life() {
        let mut s = mapped();
        assert_eq!(s.unmap_begin(PERSISTENT), Ok(Action::CallDriver));
        s.unmap_end();
        assert_eq!(s, State::Lent);
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::CallDriver);
        assert!(s.unpin_end());
        assert_eq!(s, State::Unpinned);
        // release after put_pages: nothing left.
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::Nothing);
        assert!(!s.holds_pin());
    }

    #[test]
    fn abandoned_pin_is_unpinned_by_release() {
        let mut s = State::Pinned;
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::CallDriver);
        assert!(s.unpin_end());
    }

    #[test]
    fn failed_map_goes_back_to_lent() {
        let mut s = State::Pinned;
        s.get_pages().unwrap();
        s.map_begin().unwrap();
        assert_eq!(s.map_end(false), Ok(false));
        assert_eq!(s, State::Lent);
        assert_eq!(s.unmap_begin(PERSISTENT), Ok(Action::Nothing));
    }

    #[test]
    fn free_while_mapped_fences_then_revokes() {
        let mut s = mapped();
        assert_eq!(s.free_callback(), Ok(Action::Fence));
        // The core re-enters dma_unmap/put_pages from invalidate (no
        // INVALIDATE_UNMAPS) or a dereg runs concurrently: no driver calls.
        assert_eq!(s.unmap_begin(PERSISTENT), Ok(Action::Nothing));
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::Nothing);
        s.fence_done();
        assert_eq!(s, State::Revoked);
        assert!(!s.unpin_end());
        assert_eq!(s.get_pages(), Err(Refusal::Freed));
    }

    #[test]
    fn free_before_get_pages_or_map_needs_no_fence() {
        for steps in 0..3 {
            let mut s = State::Pinned;
            if steps >= 1 {
                s.get_pages().unwrap();
            }
            if steps >= 2 {
                s.map_begin().unwrap();
            }
            assert_eq!(s.free_callback(), Ok(Action::Nothing));
            assert_eq!(s, State::Revoked);
        }
        let mut s = State::Revoked;
        assert_eq!(s.map_begin(), Err(Refusal::Freed));
    }

    #[test]
    fn free_during_map_discards_the_mapping() {
        let mut s = State::Pinned;
        s.get_pages().unwrap();
        s.map_begin().unwrap();
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        assert_eq!(s.map_end(true), Err(Refusal::Freed));
    }

    #[test]
    fn free_during_unpin_leaves_the_reference_to_the_callback() {
        let mut s = mapped();
        s.unmap_begin(PERSISTENT).unwrap();
        s.unmap_end();
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::CallDriver);
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        assert!(!s.unpin_end());
        assert_eq!(s, State::Revoked);
    }

    #[test]
    fn spurious_callbacks_and_out_of_order_calls_are_refused() {
        let mut s = State::Unpinned;
        assert_eq!(s.free_callback(), Err(Refusal::OutOfOrder));
        let mut s = State::Revoked;
        assert_eq!(s.free_callback(), Err(Refusal::OutOfOrder));
        let mut s = mapped();
        assert_eq!(s.get_pages(), Err(Refusal::OutOfOrder));
        assert_eq!(s.map_begin(), Err(Refusal::OutOfOrder));
        let mut s = State::Pinned;
        assert_eq!(s.unmap_begin(PERSISTENT), Err(Refusal::OutOfOrder));
    }

    #[test]
    fn core_skipping_dma_unmap_still_unmaps() {
        let mut s = mapped();
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::UnmapFirst);
        assert_eq!(s, State::Mapped);
        assert_eq!(s.unmap_begin(PERSISTENT), Ok(Action::CallDriver));
        s.unmap_end();
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::CallDriver);
        assert!(s.unpin_end());
    }

    #[test]
    fn foreign_put_keeps_the_pin_armed_until_the_callback() {
        for mapped_first in [false, true] {
            let mut s = if mapped_first {
                mapped()
            } else {
                State::Pinned
            };
            if mapped_first {
                assert_eq!(s.unmap_begin(REVOCABLE), Ok(Action::Nothing));
                assert_eq!(s, State::Fenced);
            }
            assert_eq!(s.unpin_begin(true, REVOCABLE), Action::Nothing);
            assert_eq!(s, State::Orphaned);
            assert!(s.holds_pin());
            // release after the foreign put: still nothing to do.
            assert_eq!(s.unpin_begin(true, REVOCABLE), Action::Nothing);
            assert_eq!(s.unpin_begin(false, REVOCABLE), Action::Nothing);
            // The owner's cudaFree: revoked, no fence (the MR is gone).
            assert_eq!(s.free_callback(), Ok(Action::Nothing));
            assert_eq!(s, State::Revoked);
        }
    }

    #[test]
    fn failed_and_unusable_pins() {
        let mut s = State::Pinned;
        s.pin_failed();
        assert_eq!(s, State::Unpinned);
        assert_eq!(s.free_callback(), Err(Refusal::OutOfOrder));
        let mut s = State::Pinned;
        assert!(s.unusable());
        assert_eq!(s, State::Unpinning);
        s.unpin_failed(true);
        assert_eq!(s, State::Orphaned);
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        let mut s = State::Pinned;
        assert!(s.unusable());
        s.unpin_failed(false);
        assert_eq!(s, State::Unpinned);
        // Revoked before the release: nothing to call.
        let mut s = State::Pinned;
        s.free_callback().unwrap();
        assert!(!s.unusable());
        assert_eq!(s, State::Revoked);
    }

    #[test]
    fn revoked_is_terminal() {
        let mut s = State::Revoked;
        s.fence_done();
        s.unmap_end();
        s.pin_failed();
        s.unpin_failed(true);
        assert!(!s.unpin_end());
        assert!(!s.unusable());
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::Nothing);
        assert_eq!(s.unmap_begin(PERSISTENT), Ok(Action::Nothing));
        assert_eq!(s, State::Revoked);
    }

    #[test]
    fn callback_never_waits_for_driver_calls_that_need_its_lock() {
        // Pin/unpin/map in flight: the callback returns at once.
        let mut s = State::Pinned;
        s.get_pages().unwrap();
        s.map_begin().unwrap();
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        let mut s = State::Lent;
        assert_eq!(s.unpin_begin(false, PERSISTENT), Action::CallDriver);
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
    }

    #[test]
    fn revocable_unmap_only_fences_and_the_put_takes_the_mapping() {
        let mut s = mapped();
        // The core's dma_unmap: no driver call, the mapping stays for the put.
        assert_eq!(s.unmap_begin(REVOCABLE), Ok(Action::Nothing));
        assert_eq!(s, State::Fenced);
        assert!(s.holds_pin());
        // A second dma_unmap changes nothing; no remap of a fenced pin.
        assert_eq!(s.unmap_begin(REVOCABLE), Ok(Action::Nothing));
        assert_eq!(s.map_begin(), Err(Refusal::OutOfOrder));
        assert_eq!(s.get_pages(), Err(Refusal::OutOfOrder));
        s.unmap_end();
        assert_eq!(s, State::Fenced);
        assert_eq!(s.unpin_begin(false, REVOCABLE), Action::CallDriver);
        assert_eq!(s, State::Unpinning);
        assert!(s.unpin_end());
        assert_eq!(s, State::Unpinned);
    }

    #[test]
    fn free_in_the_fenced_window_revokes_without_fence_or_wait() {
        let mut s = mapped();
        s.unmap_begin(REVOCABLE).unwrap();
        // The core fenced the HCA: nothing to fence, no unmap to wait for.
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        assert_eq!(s, State::Revoked);
        // The core's put and release that follow call nothing.
        assert_eq!(s.unpin_begin(false, REVOCABLE), Action::Nothing);
        assert!(!s.unpin_end());
    }

    #[test]
    fn free_during_the_put_of_a_fenced_pin_leaves_the_reference_to_the_callback() {
        let mut s = mapped();
        s.unmap_begin(REVOCABLE).unwrap();
        assert_eq!(s.unpin_begin(false, REVOCABLE), Action::CallDriver);
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        assert!(!s.unpin_end());
        assert_eq!(s, State::Revoked);
    }

    #[test]
    fn failed_put_of_a_fenced_pin_keeps_it_armed_for_the_callback() {
        let mut s = mapped();
        s.unmap_begin(REVOCABLE).unwrap();
        assert_eq!(s.unpin_begin(false, REVOCABLE), Action::CallDriver);
        s.unpin_failed(true);
        assert_eq!(s, State::Orphaned);
        assert_eq!(s.unpin_begin(false, REVOCABLE), Action::Nothing);
        assert_eq!(s.unmap_begin(REVOCABLE), Err(Refusal::OutOfOrder));
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        assert_eq!(s, State::Revoked);
    }

    #[test]
    fn revocable_pin_released_while_mapped_is_put_with_its_mapping() {
        // The core skipped dma_unmap: no unmap first for a revocable pin.
        let mut s = mapped();
        assert_eq!(s.unpin_begin(false, REVOCABLE), Action::CallDriver);
        assert_eq!(s, State::Unpinning);
        assert!(s.unpin_end());
        // From another process: kept armed, mapping and all.
        let mut s = mapped();
        assert_eq!(s.unpin_begin(true, REVOCABLE), Action::Nothing);
        assert_eq!(s, State::Orphaned);
        assert_eq!(s.free_callback(), Ok(Action::Nothing));
        // A fenced pin put from another process: the same.
        let mut s = mapped();
        s.unmap_begin(REVOCABLE).unwrap();
        assert_eq!(s.unpin_begin(true, REVOCABLE), Action::Nothing);
        assert_eq!(s, State::Orphaned);
    }
}
