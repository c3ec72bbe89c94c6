// SPDX-License-Identifier: GPL-2.0

//! What a revocable put that returned 0 proves ([`PutAnswered`]), and the
//! probe that confirms it where it can be doubted.
//!
//! RM answers a non-persistent put with 0 both when it released the pin and
//! when it found no such pin among the calling process's P2P objects
//! (nv-p2p.c `nv_p2p_put_pages` turns `NV_ERR_OBJECT_NOT_FOUND` into
//! success).  A process leaves those objects' client lists when its RM
//! client is destroyed (rmapi/client.c `rmclientDestruct` ->
//! third_party_p2p.c `CliUnregisterFromThirdPartyP2P`), while the pins it
//! made on memory another client owns (an MPS server's, shared with it by
//! REGISTER_PID) stay armed: their callbacks come at the owner's free.
//!
//! At process exit the nvidia descriptors may be released before the verbs
//! one, so a put from an exiting process is vouched for by a probe made just
//! *before* it, by the same thread: a one-page pin of the same memory,
//! put again at once ([`NvidiaP2p::reach_before_put`]).
//!
//! - The probe pin is made: the process reached the memory through a P2P
//!   object a moment before the put, and in an exiting process no other
//!   thread is left to destroy its RM client in between, so the put's
//!   lookup finds the pin (and deletes its callback).  A cudaFree in
//!   between calls the still armed pin's callback first, under RM's API
//!   lock, and the put is then skipped.
//! - The probe is refused with `-EINVAL` (RM's `NV_ERR_OBJECT_NOT_FOUND`,
//!   nv-p2p.c `nvidia_p2p_map_status`): either the RM client is gone (the
//!   put will answer 0 without finding the pin, which stays armed: its
//!   reference is parked) or the memory was freed before the probe; the
//!   free then called the pin's callback, under the API lock the probe's
//!   pin call also takes, so the registration was revoked and no put comes.
//!
//! A put from a live process is trusted: only the process itself destroys
//! its RM client while it lives (README: what no client can close).
//!
//! A probe made *after* the put could not tell those apart from a put that
//! released the pin followed by a cudaFree from another process (the MPS
//! server, a process the nvidia descriptor was passed to): that parked a
//! reference no callback ever takes, and with it the module.
//!
//! A probe that fails does not prove the memory unreachable: besides
//! `-EINVAL` the driver may fail for want of memory or with an RM error
//! (`-ENOMEM`, `-EIO`, `-EBUSY`).  Taking those for "unreachable" would park
//! a tombstone whose callback never comes.  So an `-EINVAL` is asked once
//! more at once, and any other failure is retried after 10 ms and 100 ms;
//! only then is the pin taken for unreachable, with a line.

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::time::{delay::fsleep, Delta};

use crate::glue::{self, pr_warn_ratelimited};
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::pin_gate::PinGate;

use super::{CallbackRan, CallbackRef, Disarmed, NvidiaP2p, Revocable, Revocation, Tombstone};

/// The driver answered a revocable pin's put with 0: the pin was released,
/// or the driver did not find it for the calling process (then it stays
/// armed).
///
/// # Invariants
///
/// `data` is the callback `data` of the pin that was put.
pub(crate) struct PutAnswered {
    pub(super) data: usize,
}

/// Why a put could not be confirmed: the reference must stay parked.
pub(crate) struct Unconfirmed;

/// Whether the process about to put a revocable pin reaches the pin's
/// memory, learnt just before the put by the thread that makes it.
///
/// # Invariants
///
/// Made only by [`NvidiaP2p::reach_before_put`].
pub(crate) struct Reach(Seen);

enum Seen {
    /// A live process: its puts are trusted (module docs).
    Live,
    /// An exiting process whose probe pin was made.
    Reached,
    /// An exiting process whose probe pin was refused.
    Unreached,
}

/// What a probe's pin revokes: nothing (its reference is parked from the
/// start, where the callback finds it).
struct Probe;

impl Revocable for Probe {
    fn revoke(&self, ran: CallbackRan, tomb: &Tombstone<Self>) -> Revocation<Self> {
        tomb.revoke_parked(ran)
            .unwrap_or_else(|ran| Revocation::new(None, ran))
    }
}

impl NvidiaP2p {
    /// Before the put of a revocable pin of `va` (its first GPU page) by
    /// the calling thread: an exiting process probes whether it still
    /// reaches the memory (module docs).
    pub(crate) fn reach_before_put(&self, va: u64, gate: &PinGate) -> Reach {
        Reach(if !glue::current_exiting() {
            Seen::Live
        } else if self.reaches(va, gate) {
            Seen::Reached
        } else {
            Seen::Unreached
        })
    }

    /// The proof that the pin put with `answered`, by the thread that
    /// learnt `reach` just before, will not call back, when the module can
    /// give it.
    pub(crate) fn confirm_put(
        &self,
        answered: PutAnswered,
        reach: Reach,
    ) -> core::result::Result<Disarmed, Unconfirmed> {
        if let Seen::Unreached = reach.0 {
            return Err(Unconfirmed);
        }
        // A live process: its RM client is destroyed only by itself (its
        // close of the nvidia descriptors, its context teardown), and a
        // put answered 0 for a pin it made, by the process that made it,
        // is a release otherwise.  An exiting one: its probe pin was made
        // just before the put, by this thread, and nothing in between
        // destroys the RM client (module docs).  The driver's guarantee is
        // narrower than "0 means released": its put looks the pin up among
        // the calling process's P2P objects (p2p.c `RmP2PPutPages` ->
        // `RmP2PGetInfoWithoutToken`) and, when found, deletes the pin's
        // mapping info with its free callback
        // (`thirdpartyp2pDelMappingInfoByKey`) before returning; a failed
        // lookup is answered 0 as well (nv-p2p.c `nv_p2p_put_pages`).
        // SAFETY: by the above, the lookup found the pin, so the driver
        // deleted its callback and will not call back with `data` any more.
        let disarmed = unsafe { Disarmed::new(answered.data) };
        Ok(disarmed)
    }

    /// Whether the calling process reaches `va` through a P2P object:
    /// probes it ([`Self::probe_once`]), retrying a failure that does not
    /// say "unreachable" (module docs).
    fn reaches(&self, va: u64, gate: &PinGate) -> bool {
        let Ok(range) = GpuRange::covering(va, GPU_PAGE_SIZE) else {
            return false;
        };
        // Sleeps before the second and third try of a failure other than
        // EINVAL (module docs).
        const BACKOFF_MS: [i64; 2] = [10, 100];
        let mut last = EINVAL;
        for try_no in 0..=BACKOFF_MS.len() {
            match self.probe_once(&range, gate) {
                Ok(()) => return true,
                // Asked twice: RM found no P2P object of this process there.
                Err(e) if e == EINVAL && last == EINVAL && try_no > 0 => return false,
                Err(e) => {
                    last = e;
                    if e != EINVAL {
                        if let Some(&ms) = BACKOFF_MS.get(try_no) {
                            fsleep(Delta::from_millis(ms));
                        }
                    }
                }
            }
        }
        pr_warn_ratelimited!(
            "peermem_rs: could not tell whether an exiting process still reaches the pin it puts at {:#x} (probe failed: {:?}); its callback reference stays armed until the owner frees the memory\n",
            va,
            last
        );
        false
    }

    /// One probe: pins the GPU page `range` and puts it again.  `Ok` when
    /// the pin was made (the process reaches the memory), else the errno.
    fn probe_once(&self, range: &GpuRange, gate: &PinGate) -> Result {
        let probe = Arc::new(Probe, GFP_KERNEL)?;
        let (cb, armed) = CallbackRef::arm(probe)?;
        // The reference waits in the tombstone from the start: a callback
        // during the probe takes it from there.
        let tomb = cb.tombstone();
        cb.park_quietly();
        let table = match gate.pin(|_| self.pin_revocable(range, armed)) {
            Ok(table) => table,
            Err((e, proof)) => {
                // Not made.  Without a proof (a success without a table)
                // the reference stays parked.
                if let (Some(proof), Some(cb)) = (proof, tomb.take_parked()) {
                    cb.release(proof);
                }
                return Err(e);
            }
        };
        let put = gate.use_table(|_| {
            // A callback meanwhile took the reference: the driver freed the
            // table and its address may be another pin's.
            if !tomb.parked() {
                table.forget();
                return None;
            }
            Some(self.unpin(table))
        });
        if let Some(Ok(super::Unpinned::Answered(answered))) = put {
            if let Some(cb) = tomb.take_parked() {
                // The probe pin was made by this thread a moment ago, so
                // this process reached it through a P2P object, and nothing
                // between that and its put by the same thread destroys the
                // RM client (module docs): the put's lookup found it, and
                // RM deleted its mapping info with the callback
                // (p2p.c `RmP2PPutPages`).
                // SAFETY: as above, the driver will not call back with
                // `answered.data` any more.
                let disarmed = unsafe { Disarmed::new(answered.data) };
                cb.release(disarmed);
            }
        }
        // A failed put leaves the probe's reference parked (its pin may be
        // armed): it is given back by the callback.
        Ok(())
    }
}
