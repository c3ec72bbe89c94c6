// SPDX-License-Identifier: GPL-2.0

//! The peer-memory client itself: [`Client`] (module-wide) and
//! [`PeerMr`] (one per MR).  No `unsafe` here: the raw interfaces are
//! wrapped in rust/client.rs, rust/nvidia/, rust/peer_core.rs and
//! rust/sg.rs.
//!
//! One pin per registration: `acquire` decides ownership by pinning and
//! keeps that pin for `get_pages`.  Locking: each registration has one
//! mutex, held only to read or change its [`State`] and what it owns
//! ([`Pins`], its SG table), never across a call into the NVIDIA driver or
//! the RDMA core.  The driver holds its own lock around the free callback,
//! which takes ours; since we never take the driver's lock (by calling it)
//! while holding ours, the two are never taken in both orders.  The free
//! callback never waits for a driver call in flight.  The state machine and
//! its diagram are in rust/logic/state.rs.

use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, Mutex};
use kernel::workqueue::{impl_has_work, Work, WorkItem};

use crate::client::{Active, ClientTable, PeerMemoryClient};
use crate::glue::{self, pr_err_ratelimited, pr_warn_ratelimited, ModuleRef};
use crate::logic::fence::CallTicket;
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::logic::state::{Action, Refusal, State};
use crate::nvidia::{is_enotsupp, NvidiaP2p, PinId, Pins, Registry, Revocable};
use crate::peer_core::Invalidator;
use crate::pin_fence::PinFence;
use crate::sg::{DmaDevice, OwnedSgTable, SgTable};
use crate::stats::{ErrorKind, STATS};

mod acquire;
mod unpin;

/// How GPU memory is pinned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Persistent pins: no free callback; the memory outlives cudaFree until
    /// the MR is deregistered.
    Persistent,
    /// Revocable pins: cudaFree revokes the MR (its DMA is fenced first).
    Invalidate,
}

impl Mode {
    /// The name used by the `mode` parameter and the stats.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Persistent => "persistent",
            Mode::Invalidate => "invalidate",
        }
    }
}

/// The module-wide client: the NVIDIA API, the mode, (invalidate mode) the
/// core's invalidate entry point, known before the client serves any
/// registration (rust/driver.rs), the fence that finds the pins a late
/// put or map of ours may have reached (rust/logic/fence.rs), and the
/// registry of the revocable pins that may call back
/// (rust/nvidia/registry.rs).
#[pin_data]
pub(crate) struct Client {
    nvidia: NvidiaP2p,
    mode: Mode,
    name: &'static str,
    invalidator: Option<Invalidator>,
    #[pin]
    fence: PinFence,
    #[pin]
    registry: Registry<PeerMr>,
}

impl Client {
    /// A new client.
    pub(crate) fn new(
        nvidia: NvidiaP2p,
        mode: Mode,
        name: &'static str,
        invalidator: Option<Invalidator>,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Client {
                nvidia,
                mode,
                name,
                invalidator,
                fence <- PinFence::new(),
                registry <- Registry::new(),
            }),
            GFP_KERNEL,
        )
    }
}

/// What a registration owns, under its lock.
struct Inner {
    state: State,
    /// The driver's page table and DMA mapping.
    pins: Pins,
    /// Our SG table, lent to the core from `dma_map` until we free it (in
    /// `dma_unmap`, else in `release`).
    sg: Option<OwnedSgTable>,
    core_context: Option<u64>,
    /// An error from pinning, reported by `get_pages` (see `acquire`).
    pin_error: Option<Error>,
    /// A put or map of the revocable pin in the driver: what the free
    /// callback marks late in the client's fence.
    call: Option<CallTicket>,
}

/// One MR served by us.
///
/// # Invariants
///
/// `inner.pins` holds the pin exactly while `inner.state.holds_pin()`
/// (outside of the short windows where a step took it out to call the
/// driver).  In invalidate mode the client's registry holds the
/// registration under `id` while its pin may call back.
#[pin_data]
pub(crate) struct PeerMr {
    client: Arc<Client>,
    addr: u64,
    size: u64,
    range: GpuRange,
    id: PinId,
    #[pin]
    inner: Mutex<Inner>,
    /// Lets go of the registry's reference after the free callback.
    #[pin]
    let_go: Work<PeerMr>,
    _module: ModuleRef,
}

impl_has_work! {
    impl HasWork<Self> for PeerMr { self.let_go }
}

impl PeerMr {
    fn fail(kind: ErrorKind, e: Error) -> Error {
        STATS.error(kind);
        e
    }

    /// A driver error as the caller of `ibv_reg_mr` should see it: the
    /// kernel-internal `ENOTSUPP` becomes `EOPNOTSUPP`.
    fn driver_error(&self, e: Error) -> Error {
        if !is_enotsupp(e) {
            return e;
        }
        if self.client.mode == Mode::Persistent {
            pr_warn_ratelimited!(
                "the NVIDIA driver does not support persistent pins on this GPU \
                 (MIG, confidential computing or vGPU): load with mode=invalidate\n"
            );
        } else {
            pr_warn_ratelimited!(
                "the NVIDIA driver does not support GPUDirect RDMA mappings of this memory\n"
            );
        }
        crate::compat::eopnotsupp()
    }

    fn get_pages(&self, addr: u64, size: u64, core_context: u64) -> Result {
        if addr != self.addr || size != self.size {
            return Err(Self::fail(ErrorKind::OutOfOrder, EINVAL));
        }
        let mut inner = self.inner.lock();
        if let Some(e) = inner.pin_error {
            return Err(e);
        }
        match inner.state.get_pages() {
            Ok(()) => {
                inner.core_context = Some(core_context);
                Ok(())
            }
            Err(Refusal::Freed) => Err(Self::fail(ErrorKind::Revoked, EFAULT)),
            Err(Refusal::OutOfOrder) => Err(Self::fail(ErrorKind::OutOfOrder, EINVAL)),
        }
    }

    fn dma_map(&self, mut sg: SgTable, dev: DmaDevice) -> Result<u32> {
        let Some(peer) = dev.pci() else {
            pr_err_ratelimited!("the RDMA device's DMA device is not a PCI device\n");
            return Err(Self::fail(ErrorKind::NotPci, crate::compat::eopnotsupp()));
        };
        let table = {
            let mut inner = self.inner.lock();
            match inner.state.map_begin() {
                Ok(()) => {}
                Err(Refusal::Freed) => return Err(Self::fail(ErrorKind::Revoked, EFAULT)),
                Err(Refusal::OutOfOrder) => return Err(Self::fail(ErrorKind::OutOfOrder, EINVAL)),
            }
            match inner.pins.map_args() {
                Some(t) => t,
                None => {
                    let _ = inner.state.map_end(false);
                    return Err(Self::fail(ErrorKind::OutOfOrder, EINVAL));
                }
            }
        };
        // A revocable pin's table may be freed by its callback during the
        // call: the call is recorded in the fence, so that the callback
        // marks it late and a pin of ours given the table's address
        // meanwhile (the driver would link the mapping into it) is redone.
        let mapped = match self.client.mode {
            Mode::Invalidate => self.client.fence.table_call(table.addr(), |call| {
                let mut inner = self.inner.lock();
                // The callback may have run while the map waited at the
                // fence: then the table is freed, and is not passed on.
                if inner.state != State::Mapping {
                    return None;
                }
                inner.call = Some(call.ticket());
                drop(inner);
                let mapped = self.client.nvidia.dma_map(peer, table, Some(call));
                self.inner.lock().call = None;
                Some(mapped)
            }),
            Mode::Persistent => Some(self.client.nvidia.dma_map(peer, table, None)),
        };
        let Some(mapped) = mapped else {
            return Err(Self::fail(ErrorKind::Revoked, EFAULT));
        };
        let mut inner = self.inner.lock();
        match (inner.state.map_end(mapped.is_ok()), mapped) {
            (Ok(true), Ok(m)) => {
                inner.pins.adopt_mapping(m);
            }
            // cudaFree came during the call: the memory is gone (EFAULT, as
            // for every step after a free), whatever the driver answered;
            // what it mapped, if anything, is the driver's to free.
            (Err(Refusal::Freed), mapped) => {
                if let Ok(m) = mapped {
                    m.forget();
                }
                return Err(Self::fail(ErrorKind::Revoked, EFAULT));
            }
            (_, Err(e)) => return Err(Self::fail(ErrorKind::DmaMap, self.driver_error(e))),
            (_, Ok(m)) => {
                // Not reached (`map_end` keeps a successful map unless
                // revoked); the mapping is left to the driver.
                m.forget();
                return Err(Self::fail(ErrorKind::OutOfOrder, EINVAL));
            }
        }
        // Our SG list, coalesced straight from the driver's address array
        // (no per-page copy), read under our lock: the free callback cannot
        // complete, and so the driver cannot free the mapping, meanwhile.
        let built = match inner.pins.segments(dev.max_segment()) {
            Ok(segments) => {
                OwnedSgTable::new(segments).map_err(|e| Self::fail(ErrorKind::NoMemory, e))
            }
            Err(why) => {
                pr_err_ratelimited!("refusing a DMA mapping: {}\n", format_args!("{why}"));
                Err(Self::fail(ErrorKind::Unsupported, EINVAL))
            }
        };
        match built {
            Ok((table, n)) => {
                table.lend(&mut sg);
                inner.sg = Some(table);
                drop(inner);
                STATS.coalesced(self.range.pages(), u64::from(n));
                Ok(n)
            }
            Err(e) => {
                drop(inner);
                // The core does not call dma_unmap after a failed dma_map,
                // and the table it gave us stays untouched.
                self.unmap();
                Err(e)
            }
        }
    }

    /// Frees our SG table and releases the DMA mapping: a persistent pin's
    /// through the driver; a revocable pin's is left to its put (or its free
    /// callback), which releases it with the pin (rust/logic/state.rs).
    fn unmap(&self) {
        let mut inner = self.inner.lock();
        let sg = inner.sg.take();
        let revocable = self.client.mode == Mode::Invalidate;
        let call = match inner.state.unmap_begin(revocable) {
            Ok(Action::CallDriver) => inner.pins.take_unmap(),
            Ok(_) => None,
            Err(_) => {
                STATS.error(ErrorKind::OutOfOrder);
                None
            }
        };
        drop(inner);
        drop(sg);
        if let Some(call) = call {
            if self.client.nvidia.dma_unmap(call).is_err() {
                STATS.error(ErrorKind::DmaUnmap);
            }
        }
        self.inner.lock().state.unmap_end();
    }

    /// The driver's free callback: fence DMA if the HCA may be using the
    /// memory, give the page table and mapping up.
    fn free_callback(&self) {
        let mut inner = self.inner.lock();
        let orphan = inner.state == State::Orphaned;
        let action = inner.state.free_callback();
        inner.pins.revoke();
        let core_context = inner.core_context;
        let call = inner.call.take();
        drop(inner);
        // A put or map of this pin in the driver arrives after the driver
        // freed the table: late (rust/logic/fence.rs).
        if let Some(call) = call {
            self.client.fence.mark_late(call);
        }
        let Ok(action) = action else {
            // A free callback for a pin we released (or never had): the
            // driver broke its contract, or a put we took for a release
            // did not release (rust/nvidia/probe.rs).
            STATS.error(ErrorKind::OutOfOrder);
            glue::warn_spurious_callback();
            return;
        };
        STATS.unpinned(self.range.len());
        if orphan {
            STATS.orphan_ended();
        }
        if action == Action::Fence {
            match (self.client.invalidator, core_context) {
                (Some(inv), Some(ctx)) => {
                    if inv.invalidate(ctx).is_err() {
                        STATS.error(ErrorKind::Invalidate);
                    }
                }
                _ => STATS.error(ErrorKind::Invalidate),
            }
            self.inner.lock().state.fence_done();
        }
        STATS.invalidated();
    }
}

impl Revocable for PeerMr {
    fn revoke(id: PinId) -> Option<Arc<PeerMr>> {
        let reg = ClientTable::<Client>::with_active(|client| client.registry.take(id))??;
        reg.free_callback();
        Some(reg)
    }
}

/// The free callback's work: lets go of the registry's reference.
impl WorkItem for PeerMr {
    type Pointer = Arc<PeerMr>;

    fn run(this: Arc<PeerMr>) {
        drop(this);
    }
}

impl PeerMemoryClient for Client {
    type Mr = PeerMr;

    fn acquire(this: ArcBorrow<'_, Self>, addr: u64, size: u64) -> Result<Option<Arc<PeerMr>>> {
        PeerMr::acquire(this.into(), addr, size)
    }

    fn get_pages(reg: &PeerMr, addr: u64, size: u64, core_context: u64) -> Result {
        reg.get_pages(addr, size, core_context)
    }

    fn dma_map(reg: &PeerMr, sg: SgTable, dev: DmaDevice) -> Result<u32> {
        reg.dma_map(sg, dev)
    }

    fn dma_unmap(reg: &PeerMr) {
        reg.unmap();
    }

    fn put_pages(reg: &PeerMr) {
        reg.unpin();
    }

    fn page_size(_reg: &PeerMr) -> u64 {
        GPU_PAGE_SIZE
    }

    fn release(reg: Arc<PeerMr>) {
        reg.unpin();
        // After an invalidation with PEER_MEM_INVALIDATE_UNMAPS the core
        // only cleared its copy of our SG table: it is ours to free.
        let sg = reg.inner.lock().sg.take();
        drop(sg);
        STATS.released();
    }

    fn show_stats(
        this: ArcBorrow<'_, Self>,
        f: &mut core::fmt::Formatter<'_>,
    ) -> core::fmt::Result {
        STATS.render(f, this.mode.name(), this.name)
    }

    fn active() -> &'static Active<Self> {
        static ACTIVE: Active<Client> = Active::new();
        &ACTIVE
    }
}
