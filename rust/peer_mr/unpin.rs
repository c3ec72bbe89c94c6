// SPDX-License-Identifier: GPL-2.0

//! Releasing a registration's pin: the put from `put_pages` or `release`,
//! through the pin gate for a revocable pin, and what a failed put leaves.

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use kernel::prelude::*;
use kernel::time::{delay::fsleep, Delta};

use crate::glue::pr_warn_ratelimited;
use crate::logic::state::{Action, State};
use crate::nvidia::{Disarmed, PageTable, Unconfirmed, Unpin, Unpinned};
use crate::pin_gate::TableSide;
use crate::stats::{ErrorKind, STATS};

use super::{Mode, PeerMr};

/// Whether the first tombstone was reported (once per load).
static TOMBSTONE_SAID: AtomicBool = AtomicBool::new(false);

/// Whether the first pin released under us was reported (once per load).
static RELEASED_SAID: AtomicBool = AtomicBool::new(false);

impl PeerMr {
    /// Releases the pin (put_pages, or release of a pin never given back).
    pub(super) fn unpin(&self) {
        let table = loop {
            let mut inner = self.inner.lock();
            let foreign = inner.pins.foreign();
            let was = inner.state;
            let revocable = self.client.mode == Mode::Invalidate;
            match inner.state.unpin_begin(foreign, revocable) {
                Action::UnmapFirst => {
                    // The core skipped dma_unmap (it releases a mapped pin).
                    drop(inner);
                    self.unmap();
                }
                Action::CallDriver => match inner.pins.take_table() {
                    Some(t) => break t,
                    None => {
                        let _ = inner.state.unpin_end();
                        return;
                    }
                },
                _ => {
                    if inner.state == State::Orphaned && was != State::Orphaned {
                        pr_warn_ratelimited!(
                            "GPU memory registered by process {} was deregistered from \
                             another process: it stays pinned until that process frees \
                             it or exits\n",
                            inner.pins.owner().unwrap_or(0)
                        );
                        STATS.orphaned();
                    }
                    return;
                }
            }
        };
        self.finish_unpin(table);
    }

    /// Calls the driver to release `table` (state `Unpinning`), then settles
    /// the callback's reference.  A revocable put passes the client's gate:
    /// while it is in the driver no pin of ours can be given the table's
    /// address should the free callback free it meanwhile.  An exiting
    /// process first learns whether it still reaches the memory
    /// (rust/nvidia/probe.rs): what its put's 0 will prove.
    pub(super) fn finish_unpin(&self, table: PageTable) {
        let mut reach = None;
        let unpinned = match self.client.mode {
            Mode::Persistent => Some(self.unpin_persistent(table)),
            Mode::Invalidate => {
                let nvidia = &self.client.nvidia;
                reach = Some(nvidia.reach_before_put(self.range.start(), &self.client.gate));
                self.client
                    .gate
                    .use_table(|side| self.unpin_unless_revoked(table, side))
            }
        };
        let Some(unpinned) = unpinned else {
            // The callback ran while the put waited: it took its reference.
            STATS.stale_put_skipped();
            return;
        };
        match unpinned {
            Ok(Unpinned::Persistent) => {
                if self.inner.lock().state.unpin_end() {
                    STATS.unpinned(self.range.len());
                }
            }
            // Another user's put had released the pin (rust/nvidia/held.rs):
            // none was made, and its callback is gone with it.
            Ok(Unpinned::ReleasedUnderUs(proof)) => {
                STATS.released_under_us();
                self.said_released_under_us();
                self.settle_put(Ok(proof));
            }
            Ok(Unpinned::Answered(answered)) => {
                // The driver answered 0: released, or not found for this
                // process (its RM client is gone: the pin stays armed).
                // Only a revocable put is answered, so `reach` is set.
                let confirmed = match reach {
                    Some(reach) => self.client.nvidia.confirm_put(answered, reach),
                    None => Err(Unconfirmed),
                };
                self.settle_put(confirmed);
            }
            Err(Unpin::Foreign(table)) => {
                // The owner changed under us (cannot happen: checked under
                // the lock): keep the pin armed.
                let mut inner = self.inner.lock();
                inner.pins.restore(table);
                if inner.state == State::Unpinning {
                    inner.state.unpin_failed(true);
                    STATS.orphaned();
                }
            }
            Err(Unpin::Failed(e, _)) => {
                STATS.error(ErrorKind::Unpin);
                let armed = self.client.mode == Mode::Invalidate;
                let mut inner = self.inner.lock();
                if inner.state != State::Unpinning {
                    // Revoked meanwhile: the callback settles everything.
                    return;
                }
                inner.state.unpin_failed(armed);
                drop(inner);
                if armed {
                    // Whether the pin is still armed is unknown: keep the
                    // callback's reference (and the registration) until
                    // the owner's cudaFree or exit.
                    STATS.orphaned();
                    pr_warn_ratelimited!(
                        "the NVIDIA driver failed to unpin ({:?}): the pin is kept until \
                         its free callback (cudaFree or process exit)\n",
                        e
                    );
                } else {
                    // No callback will come: nothing keeps the module.
                    pr_warn_ratelimited!(
                        "the NVIDIA driver failed to release a persistent pin ({:?}): \
                         the GPU memory may stay pinned until the driver unloads\n",
                        e
                    );
                }
            }
        }
    }

    /// After a revocable put that returned (or was found unneeded): ends
    /// `Unpinning` and gives the callback's reference back on `confirmed`'s
    /// proof, or parks it in the tombstone.
    fn settle_put(&self, confirmed: core::result::Result<Disarmed, Unconfirmed>) {
        let mut inner = self.inner.lock();
        // `unpin_end`: the callback did not take its reference.
        if !inner.state.unpin_end() {
            return;
        }
        STATS.unpinned(self.range.len());
        let Some(cb) = inner.callback.take() else {
            return;
        };
        match confirmed {
            // It never will.
            Ok(proof) => {
                drop(inner);
                cb.release(proof);
            }
            // It may still come: the tombstone waits for it (parked
            // under our lock, which a callback racing with this
            // takes before it looks for a parked reference).
            Err(_) => {
                cb.park();
                drop(inner);
                if !TOMBSTONE_SAID.swap(true, Relaxed) {
                    pr_warn!(
                        "a pin was put by a process that no longer reaches its memory \
                         (its RM client is gone, e.g. an MPS client process that exited): \
                         kept as a tombstone until the owner frees the memory \
                         (said once; debugfs stats: tombstones)\n"
                    );
                }
            }
        }
    }

    /// The put of a persistent pin, tried again twice after a failure
    /// (the driver's failures are transient: -ENOMEM, a busy state): no
    /// callback will ever release it otherwise.
    fn unpin_persistent(&self, table: PageTable) -> core::result::Result<Unpinned, Unpin> {
        let mut result = self.client.nvidia.unpin(table);
        for delay_ms in [10, 100] {
            match result {
                Err(Unpin::Failed(_, Some(table))) => {
                    STATS.error(ErrorKind::Unpin);
                    // Every caller is a core callback that may sleep.
                    fsleep(Delta::from_millis(delay_ms));
                    result = self.client.nvidia.unpin(table);
                }
                other => return other,
            }
        }
        result
    }

    /// The put of a revocable pin, unless its free callback ran since the
    /// caller took the table out (`None`): the driver has freed the table
    /// then, and its address may be another pin's.  Not made either when
    /// another user's put released the pin (rust/nvidia/held.rs).
    fn unpin_unless_revoked(
        &self,
        table: PageTable,
        side: &TableSide<'_>,
    ) -> Option<core::result::Result<Unpinned, Unpin>> {
        if self.inner.lock().state != State::Unpinning {
            table.forget();
            return None;
        }
        let client = &self.client;
        Some(client.nvidia.unpin_held(table, &client.held, side))
    }

    /// Says once that a pin of ours was released by another user of the
    /// P2P API in this process (rust/nvidia/held.rs).
    pub(super) fn said_released_under_us(&self) {
        if !RELEASED_SAID.swap(true, Relaxed) {
            pr_warn!(
                "GPU memory pinned for an MR of {} bytes was released by another user of the \
                 NVIDIA P2P API in the same process (GDRCopy's gdrdrv, nvidia-fs): the MR is \
                 no longer mapped or put through the driver, and until it is deregistered \
                 a cudaFree of that memory does not fence the HCA; mode=persistent avoids \
                 this (said once; debugfs stats: pins_released_under_us)\n",
                self.size
            );
        }
    }
}
