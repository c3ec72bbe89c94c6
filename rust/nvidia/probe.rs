// SPDX-License-Identifier: GPL-2.0

//! What a revocable put that returned 0 proves ([`Reach`]), learnt by a
//! probe where it can be doubted.  It decides only when the module
//! reference of the pin's registry entry is given back (when `rmmod`
//! becomes possible): the free callback looks its id up and finds nothing
//! once the entry is gone, so a wrong verdict touches no freed memory.
//!
//! RM answers a non-persistent put with 0 both when it released the pin and
//! when it found no such pin among the calling process's P2P objects
//! (nv-p2p.c `nv_p2p_put_pages` turns `NV_ERR_OBJECT_NOT_FOUND` into
//! success).  A process leaves those objects' client lists when its RM
//! client is destroyed (rmapi/client.c `rmclientDestruct` ->
//! third_party_p2p.c `CliUnregisterFromThirdPartyP2P`), while the pins it
//! made on memory another client owns (an MPS server's) stay armed.
//!
//! At process exit the nvidia descriptors may be released before the verbs
//! one, so the put of an exiting process is preceded by a probe, by the
//! same thread: a one-page pin of the same memory, put again at once.  Made:
//! the process reaches the memory, and the put finds its pin.  Refused with
//! `-EINVAL` (RM's "not found", asked twice): the pin stays registered until
//! its callback.  Any other failure is retried after 10 and 100 ms, since
//! a pin kept registered for nothing would hold the module until reboot.
//! The put of a live process is taken for a release (module docs: the
//! residual of a process that destroyed its RM client first).

use kernel::prelude::*;
use kernel::time::{delay::fsleep, Delta};

use crate::glue::{self, pr_warn_ratelimited, ModuleRef};
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::pin_fence::PinFence;

use super::{Armed, NvidiaP2p};

/// Whether the process about to put a revocable pin reaches the pin's
/// memory, learnt just before the put by the thread that makes it.
pub(crate) enum Reach {
    /// A live process: its put is taken for a release.
    Live,
    /// An exiting process whose probe pin was made.
    Reached,
    /// An exiting process whose probe pin was refused.
    Unreached,
}

impl Reach {
    /// Whether a put answered 0 after this released the pin.
    pub(crate) fn proves_release(&self) -> bool {
        !matches!(self, Reach::Unreached)
    }
}

impl NvidiaP2p {
    /// Before the put of a revocable pin of `va` (its first GPU page) by
    /// the calling thread: an exiting process probes whether it still
    /// reaches the memory (module docs).
    pub(crate) fn reach_before_put(&self, va: u64, fence: &PinFence) -> Reach {
        if !glue::current_exiting() {
            Reach::Live
        } else if self.reaches(va, fence) {
            Reach::Reached
        } else {
            Reach::Unreached
        }
    }

    /// Whether the calling process reaches `va` through a P2P object,
    /// retrying a failure that does not say "unreachable" (module docs).
    fn reaches(&self, va: u64, fence: &PinFence) -> bool {
        let Ok(range) = GpuRange::covering(va, GPU_PAGE_SIZE) else {
            return false;
        };
        const BACKOFF_MS: [i64; 2] = [10, 100];
        let mut last = EINVAL;
        for try_no in 0..=BACKOFF_MS.len() {
            match self.probe_once(&range, fence) {
                Ok(()) => return true,
                // Asked twice: RM found no P2P object of this process there.
                Err(e) if e == EINVAL && last == EINVAL && try_no > 0 => return false,
                Err(e) => {
                    last = e;
                    if let (true, Some(&ms)) = (e != EINVAL, BACKOFF_MS.get(try_no)) {
                        fsleep(Delta::from_millis(ms));
                    }
                }
            }
        }
        pr_warn_ratelimited!(
            "could not tell whether an exiting process still reaches the pin it puts at {:#x} (probe failed: {:?}); the pin stays registered until the owner frees the memory\n",
            va,
            last
        );
        false
    }

    /// One probe: pins the GPU page `range` and puts it again, alone in the
    /// fence (no other pin, put or map of ours is in the driver meanwhile:
    /// no late call of ours can reach the probe's pin, and its put can
    /// reach no pin of ours).  `Ok` when the pin was made.  A probe pin whose
    /// release is unknown keeps a module reference for good: its callback
    /// (which does nothing) may still come.
    fn probe_once(&self, range: &GpuRange, fence: &PinFence) -> Result {
        let module = ModuleRef::get()?;
        let made = fence.exclusive(|| {
            let table = self.pin_revocable(range, Armed::probe())?;
            Ok(self.unpin(table).is_ok())
        });
        match made {
            Ok(true) | Err((_, false)) => {}
            Ok(false) | Err((_, true)) => {
                kernel::pr_warn_once!(
                    "a probe pin could not be put: the module stays loaded until reboot\n"
                );
                core::mem::forget(module);
            }
        }
        made.map(|_| ()).map_err(|(e, _)| e)
    }
}
