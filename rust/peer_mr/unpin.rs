// SPDX-License-Identifier: GPL-2.0

//! Releasing a registration's pin: the put from `put_pages` or `release`,
//! recorded in the fence for a revocable pin, and what a failed put leaves.

use kernel::time::{delay::fsleep, Delta};

use crate::glue::pr_warn_ratelimited;
use crate::logic::state::{Action, State};
use crate::nvidia::{PageTable, Reach, Unpin};
use crate::stats::{ErrorKind, STATS};

use super::{Mode, PeerMr};

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

    /// Calls the driver to release `table` (state `Unpinning`).  An exiting
    /// process first learns whether it still reaches the memory
    /// (rust/nvidia/probe.rs): what its put's 0 proves.
    pub(super) fn finish_unpin(&self, table: PageTable) {
        let client = &self.client;
        match client.mode {
            Mode::Persistent => {
                let unpinned = self.unpin_persistent(table);
                self.unpin_done(unpinned, true);
            }
            Mode::Invalidate => {
                let reach = client
                    .nvidia
                    .reach_before_put(self.range.start(), &client.fence);
                self.put_revocable(table, reach);
            }
        }
    }

    /// The put of a revocable pin, recorded in the client's fence while it
    /// is in the driver: should the free callback run meanwhile, it marks
    /// the put late, and a pin of ours given the table's address is redone
    /// (rust/logic/fence.rs).
    pub(super) fn put_revocable(&self, table: PageTable, reach: Reach) {
        let client = &self.client;
        let put = client.fence.table_call(table.addr(), |call| {
            let mut inner = self.inner.lock();
            // The callback ran while the put waited: the driver freed the
            // table, and its address may be another pin's.
            if inner.state != State::Unpinning {
                table.forget();
                return None;
            }
            inner.call = Some(call.ticket());
            drop(inner);
            let put = client.nvidia.unpin(table);
            self.inner.lock().call = None;
            Some(put)
        });
        let Some(put) = put else {
            STATS.stale_put_skipped();
            return;
        };
        self.unpin_done(put, reach.proves_release());
    }

    /// After the driver's put: `released`, whether its 0 proves a release.
    fn unpin_done(&self, unpinned: core::result::Result<(), Unpin>, released: bool) {
        let client = &self.client;
        let mut inner = self.inner.lock();
        if inner.state != State::Unpinning {
            // Revoked meanwhile: the callback settled everything.
            return;
        }
        match unpinned {
            Ok(()) if released => {
                let _ = inner.state.unpin_end();
                drop(inner);
                STATS.unpinned(self.range.len());
                // It will not call back: the registry lets it go.
                drop(client.registry.take(self.id));
            }
            Ok(()) => {
                // Answered 0 for an exiting process that no longer reaches
                // the memory: the pin may be armed, and stays registered
                // (with its module reference) until its callback.
                inner.state.unpin_failed(true);
                drop(inner);
                STATS.orphaned();
                kernel::pr_warn_once!(
                    "a pin was put by a process that no longer reaches its memory (its RM \
                     client is gone, e.g. an MPS client process that exited): kept \
                     registered until the owner frees the memory (said once; debugfs \
                     stats: orphaned_pins)\n"
                );
            }
            Err(Unpin::Foreign(table)) => {
                // The owner changed under us (cannot happen: checked under
                // the lock): keep the pin armed.
                inner.pins.restore(table);
                inner.state.unpin_failed(true);
                STATS.orphaned();
            }
            Err(Unpin::Failed(e, _)) => {
                STATS.error(ErrorKind::Unpin);
                let armed = client.mode == Mode::Invalidate;
                inner.state.unpin_failed(armed);
                drop(inner);
                if armed {
                    // Whether the pin is still armed is unknown: it stays
                    // registered until the owner's cudaFree or exit.
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

    /// The put of a persistent pin, tried again twice after a failure
    /// (the driver's failures are transient: -ENOMEM, a busy state): no
    /// callback will ever release it otherwise.
    fn unpin_persistent(&self, table: PageTable) -> core::result::Result<(), Unpin> {
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
}
