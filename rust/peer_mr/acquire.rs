// SPDX-License-Identifier: GPL-2.0

//! Making a registration: `acquire` pins and claims, and redoes a revocable
//! pin that a late put or map of ours may have reached (rust/logic/fence.rs).

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::workqueue::new_work;

use crate::glue::{self, pr_err_ratelimited, pr_warn_ratelimited, ModuleRef};
use crate::logic::range::{GpuRange, RangeError};
use crate::logic::state::State;
use crate::nvidia::{Adopt, PageTable, Pins, Reach};
use crate::stats::{ErrorKind, STATS};

use super::{Client, Inner, Mode, PeerMr};

/// Attempts of `acquire` at most (each but the first follows a pin that a
/// late call of ours may have reached).
const ATTEMPTS: usize = 16;

/// How one attempt of `acquire` ended.
enum Attempt {
    /// The answer to the core.
    Done(Option<Arc<PeerMr>>),
    /// The pin was put again: pin anew.
    Redo,
}

impl PeerMr {
    /// Pins and claims `[addr, addr + size)` if it is GPU memory of the
    /// calling process.  A revocable pin that a late put or map of ours may
    /// have reached is put and made anew (rust/logic/fence.rs); should that
    /// happen again and again, the registration fails with `EAGAIN`.
    pub(super) fn acquire(client: Arc<Client>, addr: u64, size: u64) -> Result<Option<Arc<Self>>> {
        let range = match GpuRange::covering(addr, size) {
            Ok(r) => r,
            Err(RangeError::Empty | RangeError::Overflow) => {
                STATS.declined();
                return Ok(None);
            }
        };
        for attempt in 1..=ATTEMPTS {
            let last = attempt == ATTEMPTS;
            if let Attempt::Done(reg) = Self::try_acquire(client.clone(), addr, size, range, last)?
            {
                return Ok(reg);
            }
        }
        // The last attempt answers `Done`: not reached.
        Ok(None)
    }

    /// One attempt of `acquire`; `last`: a pin to be redone fails the
    /// registration instead (claimed, `EAGAIN` from `get_pages`).
    fn try_acquire(
        client: Arc<Client>,
        addr: u64,
        size: u64,
        range: GpuRange,
        last: bool,
    ) -> Result<Attempt> {
        let module = ModuleRef::get()?;
        let id = client.registry.new_id();
        // Borrowed by a suspect pin while the registration is handed on.
        let fence_of = client.clone();
        let reg = Arc::pin_init(
            pin_init!(PeerMr {
                client,
                addr,
                size,
                range,
                id,
                inner <- Pins::new_locked(|pins| Inner {
                    // Pinned from before the pin call: a free callback that
                    // arrives before we look at the result revokes it.
                    state: State::Pinned,
                    pins,
                    sg: None,
                    core_context: None,
                    pin_error: None,
                    call: None,
                }),
                let_go <- new_work!("peermem_rs::PeerMr::let_go"),
                _module: module,
            }),
            GFP_KERNEL,
        )?;
        let t0 = glue::now_ns();
        let (pinned, suspect) = match reg.client.mode {
            Mode::Invalidate => {
                // Registered from before the pin call, so a callback
                // arriving at any time finds it.
                let client = &reg.client;
                let armed = client.registry.arm(id, reg.clone())?;
                let (pinned, suspect) = fence_of.fence.pin(
                    || client.nvidia.pin_revocable(&range, armed),
                    |r| r.as_ref().ok().map(PageTable::addr),
                );
                let pinned = pinned.map_err(|(e, maybe_armed)| {
                    if !maybe_armed {
                        drop(client.registry.take(id));
                    }
                    e
                });
                (pinned, suspect)
            }
            Mode::Persistent => (reg.client.nvidia.pin_persistent(&range), None),
        };
        let pin_ns = glue::now_ns().saturating_sub(t0);
        let table = match pinned {
            Ok(table) => {
                STATS.pinned(range.len(), pin_ns);
                table
            }
            // Not GPU memory (or not this process's): not ours.
            Err(e) if e == EINVAL => {
                STATS.declined();
                return Ok(Attempt::Done(None));
            }
            // GPU memory the driver would not pin: claim it so that the
            // error reaches the caller from get_pages (an acquire error
            // would only read "not mine").
            Err(e) => {
                STATS.error(ErrorKind::Pin);
                let e = reg.driver_error(e);
                return Ok(Attempt::Done(Some(reg.claim_failed(e))));
            }
        };
        let adopted = reg.inner.lock().pins.adopt(table, &range);
        match adopted {
            Ok(()) => match suspect {
                None => {
                    STATS.claimed();
                    Ok(Attempt::Done(Some(reg)))
                }
                Some(suspect) => {
                    // A late call of ours may have released it or linked
                    // a mapping into it: never used, put (unless revoked
                    // meanwhile), made anew.
                    suspect.settle(|| reg.release_unused());
                    if last {
                        pr_warn_ratelimited!(
                            "a GPU memory pin met a late driver call of ours {} times in a row: \
                             the registration fails with EAGAIN\n",
                            ATTEMPTS
                        );
                        return Ok(Attempt::Done(Some(reg.claim_failed(EAGAIN))));
                    }
                    Ok(Attempt::Redo)
                }
            },
            Err(Adopt::Freed(table)) => {
                // cudaFree raced with the pin: the driver owns the table,
                // and the callback took the registry's reference.
                table.forget();
                if let Some(s) = suspect {
                    s.revoked();
                }
                STATS.error(ErrorKind::Revoked);
                Ok(Attempt::Done(None))
            }
            Err(Adopt::Unsupported(table, why)) => {
                pr_err_ratelimited!(
                    "refusing a pin of {} bytes: {}\n",
                    size,
                    format_args!("{why}")
                );
                STATS.error(ErrorKind::Unsupported);
                let dispose = || {
                    if reg.inner.lock().state.unusable() {
                        reg.finish_unpin(table);
                    } else {
                        // Revoked meanwhile: the table is the driver's.
                        table.forget();
                    }
                };
                match suspect {
                    Some(s) => s.settle(dispose),
                    None => dispose(),
                }
                Ok(Attempt::Done(None))
            }
        }
    }

    /// Claims a registration whose pin failed with `e`, so that `e` reaches
    /// the caller of `ibv_reg_mr` from `get_pages`.
    fn claim_failed(self: Arc<Self>, e: Error) -> Arc<Self> {
        let mut inner = self.inner.lock();
        inner.pin_error = Some(e);
        inner.state.pin_failed();
        drop(inner);
        STATS.claimed();
        self
    }

    /// Releases the pin of a registration never handed to the core (its
    /// settled suspect), unless its callback ran meanwhile.  Its put runs
    /// in a live process (`acquire`): no probe.
    fn release_unused(&self) {
        let mut inner = self.inner.lock();
        if !inner.state.unusable() {
            return;
        }
        let table = inner.pins.take_table();
        drop(inner);
        match table {
            Some(table) => self.put_revocable(table, Reach::Live),
            None => {
                let _ = self.inner.lock().state.unpin_end();
            }
        }
    }
}
