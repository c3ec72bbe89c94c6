// SPDX-License-Identifier: GPL-2.0

//! The peer-memory client itself: [`Client`] (module-wide) and
//! [`Registration`] (one per MR).  No `unsafe` here: the raw interfaces are
//! wrapped in rust/client.rs, rust/nvidia.rs, rust/peer_core.rs and
//! rust/sg.rs.
//!
//! One pin per registration: `acquire` decides ownership by pinning and
//! keeps that pin for `get_pages`.  Locking: each registration has one
//! mutex, held only to read or change its [`State`] and the driver objects
//! it owns, never across a call into the NVIDIA driver or the RDMA core.
//! The driver holds its own lock around the free callback, which takes ours;
//! since we never take the driver's lock (by calling it) while holding ours,
//! the two are never taken in both orders.  The state machine and its
//! diagram are in rust/logic/state.rs.

use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, Mutex, SpinLock};
use kernel::{new_mutex, new_spinlock};

use crate::client::{CallbackRef, PeerMemoryClient};
use crate::glue::{self, ModuleRef, SeqWriter};
use crate::logic::coalesce::coalesce;
use crate::logic::range::{GpuRange, RangeError, GPU_PAGE_SIZE};
use crate::logic::state::{Action, Refusal, State};
use crate::nvidia::{DmaMapping, NvidiaP2p, PageTable, PciDev, PinInfo, Unsupported};
use crate::peer_core::Invalidator;
use crate::sg::{DmaDevice, SgTable};
use crate::stats::{ErrorKind, STATS};

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

/// The module-wide client: the NVIDIA API, the mode, and the core's
/// invalidate entry point (known once registration with the core returned).
#[pin_data]
pub(crate) struct Client {
    nvidia: NvidiaP2p,
    mode: Mode,
    name: &'static str,
    #[pin]
    invalidator: SpinLock<Option<Invalidator>>,
}

impl Client {
    /// A new client.
    pub(crate) fn new(nvidia: NvidiaP2p, mode: Mode, name: &'static str) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Client {
                nvidia,
                mode,
                name,
                invalidator <- new_spinlock!(None, "peermem_rs::Client::invalidator"),
            }),
            GFP_KERNEL,
        )
    }

    /// Records the core's invalidate entry point (invalidate mode).
    pub(crate) fn set_invalidator(&self, inv: Option<Invalidator>) {
        *self.invalidator.lock() = inv;
    }
}

/// What a registration owns, under its lock.
struct Inner {
    state: State,
    /// The pin, while `state.holds_pin()`.
    pin: Option<PageTable>,
    info: Option<PinInfo>,
    /// The DMA mapping, while mapped.
    mapping: Option<DmaMapping>,
    peer: Option<PciDev>,
    /// Our entries in the core's SG table are allocated.
    sg_allocated: bool,
    core_context: Option<u64>,
    /// The free callback's reference, while the callback may still run.
    callback: Option<CallbackRef<Registration>>,
    /// An error from pinning, reported by `get_pages` (see `acquire`).
    pin_error: Option<Error>,
}

/// One MR served by us.
///
/// # Invariants
///
/// `inner.pin` is `Some` exactly while `inner.state.holds_pin()` (outside of
/// the short windows where a step took it out to call the driver), and
/// `inner.callback` is `Some` while a free callback may still arrive.
#[pin_data]
pub(crate) struct Registration {
    client: Arc<Client>,
    addr: u64,
    size: u64,
    range: GpuRange,
    #[pin]
    inner: Mutex<Inner>,
    _module: ModuleRef,
}

impl Registration {
    fn fail(kind: ErrorKind, e: Error) -> Error {
        STATS.error(kind);
        e
    }

    /// Pins and claims `[addr, addr + size)` if it is GPU memory of the
    /// calling process.
    fn acquire(client: Arc<Client>, addr: u64, size: u64) -> Result<Option<Arc<Self>>> {
        let range = match GpuRange::covering(addr, size) {
            Ok(r) => r,
            Err(RangeError::Empty | RangeError::Overflow) => {
                STATS.declined();
                return Ok(None);
            }
        };
        let mode = client.mode;
        let module = ModuleRef::get()?;
        let reg = Arc::pin_init(
            pin_init!(Registration {
                client,
                addr,
                size,
                range,
                inner <- new_mutex!(Inner {
                    // Pinned from before the pin call: a free callback that
                    // arrives before we look at the result revokes it.
                    state: State::Pinned,
                    pin: None,
                    info: None,
                    mapping: None,
                    peer: None,
                    sg_allocated: false,
                    core_context: None,
                    callback: None,
                    pin_error: None,
                }, "peermem_rs::Registration::inner"),
                _module: module,
            }),
            GFP_KERNEL,
        )?;
        // The free callback's reference lives in the registration from
        // before the pin call, so a callback arriving at any time owns it.
        let data = match mode {
            Mode::Invalidate => {
                let cb = CallbackRef::new(reg.clone());
                let data = cb.data();
                reg.inner.lock().callback = Some(cb);
                Some((CallbackRef::<Self>::callback::<Client>(), data))
            }
            Mode::Persistent => None,
        };
        let t0 = glue::now_ns();
        let pinned = reg.client.nvidia.pin(&range, data);
        let pin_ns = glue::now_ns().saturating_sub(t0);
        let pin = match pinned {
            Ok(pin) => pin,
            // Not GPU memory (or not this process's): not ours.
            Err(e) if e == EINVAL => {
                STATS.declined();
                drop(reg.inner.lock().callback.take());
                return Ok(None);
            }
            // GPU memory the driver would not pin: claim it so that the
            // error reaches the caller from get_pages (an acquire error
            // would only read "not mine").
            Err(e) => {
                STATS.error(ErrorKind::Pin);
                let callback = {
                    let mut inner = reg.inner.lock();
                    inner.pin_error = Some(e);
                    inner.state = State::Unpinned;
                    inner.callback.take()
                };
                drop(callback);
                return Ok(Some(reg));
            }
        };
        let mut inner = reg.inner.lock();
        if inner.state == State::Revoked {
            // cudaFree raced with the pin: the driver owns the table, and
            // the callback took its reference.
            drop(inner);
            pin.revoke();
            STATS.error(ErrorKind::Revoked);
            return Ok(None);
        }
        match pin.check(&range) {
            Ok(info) => {
                inner.pin = Some(pin);
                inner.info = Some(info);
                drop(inner);
                STATS.pinned(range.len(), pin_ns);
                Ok(Some(reg))
            }
            Err(why) => {
                drop(inner);
                pr_err!(
                    "refusing a pin of {} bytes: {}\n",
                    size,
                    format_args!("{why}")
                );
                STATS.error(ErrorKind::Unsupported);
                // The callback cannot run once unpin returns: take its
                // reference back.
                if reg.client.nvidia.unpin(pin).is_err() {
                    STATS.error(ErrorKind::Unpin);
                }
                let callback = reg.inner.lock().callback.take();
                drop(callback);
                Ok(None)
            }
        }
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
            Err(Refusal::Revoked) => Err(Self::fail(ErrorKind::Revoked, EFAULT)),
            Err(Refusal::OutOfOrder) => Err(Self::fail(ErrorKind::OutOfOrder, EINVAL)),
        }
    }

    fn dma_map(&self, mut sg: SgTable, dev: DmaDevice) -> Result<u32> {
        let Some(peer) = dev.pci() else {
            pr_err!("the RDMA device's DMA device is not a PCI device\n");
            return Err(Self::fail(ErrorKind::NotPci, crate::compat::eopnotsupp()));
        };
        let pages = self.range.pages() as usize;
        let mut addrs = KVec::with_capacity(pages, GFP_KERNEL)?;
        let table = {
            let mut inner = self.inner.lock();
            match inner.state.map_begin() {
                Ok(()) => {}
                Err(Refusal::Revoked) => return Err(Self::fail(ErrorKind::Revoked, EFAULT)),
                Err(Refusal::OutOfOrder) => return Err(Self::fail(ErrorKind::OutOfOrder, EINVAL)),
            }
            match &inner.pin {
                Some(pin) => pin.handle(),
                None => return Err(Self::fail(ErrorKind::OutOfOrder, EINVAL)),
            }
        };
        let mapped = self.client.nvidia.dma_map(peer, &table);
        let mut inner = self.inner.lock();
        let mapping = match (inner.state.map_end(mapped.is_ok()), mapped) {
            (Ok(true), Ok(m)) => m,
            (_, Err(e)) => return Err(Self::fail(ErrorKind::DmaMap, e)),
            (_, Ok(m)) => {
                // cudaFree came during the call: the driver frees `m`.
                m.revoke();
                return Err(Self::fail(ErrorKind::Revoked, EFAULT));
            }
        };
        let read = match &inner.info {
            Some(info) => mapping.addresses(info, &mut addrs),
            None => Err(Unsupported::Entries(0)),
        };
        inner.mapping = Some(mapping);
        inner.peer = Some(peer);
        drop(inner);
        let result = read
            .map_err(|why| {
                pr_err!("refusing a DMA mapping: {}\n", format_args!("{why}"));
                Self::fail(ErrorKind::Unsupported, EINVAL)
            })
            .and_then(|()| {
                let segments = coalesce(&addrs, GPU_PAGE_SIZE, dev.max_segment());
                let n = segments.clone().count();
                sg.fill(segments, n)
                    .map_err(|e| Self::fail(ErrorKind::NoMemory, e))?;
                Ok(n)
            });
        match result {
            Ok(n) => {
                self.inner.lock().sg_allocated = true;
                STATS.coalesced(pages as u64, n as u64);
                Ok(n as u32)
            }
            Err(e) => {
                // Undo the mapping: the core does not call dma_unmap after a
                // failed dma_map.
                self.unmap(None);
                Err(e)
            }
        }
    }

    /// Releases the DMA mapping (unless the driver revoked it) and our SG
    /// entries.
    fn unmap(&self, sg: Option<SgTable>) {
        let mut inner = self.inner.lock();
        let free_sg = core::mem::replace(&mut inner.sg_allocated, false);
        let call = match inner.state.unmap_begin() {
            Ok(Action::CallDriver) => inner
                .mapping
                .take()
                .zip(inner.pin.as_ref().map(|p| p.handle())),
            Ok(_) => None,
            Err(_) => {
                STATS.error(ErrorKind::OutOfOrder);
                None
            }
        };
        drop(inner);
        if let (true, Some(mut sg)) = (free_sg, sg) {
            sg.free();
        }
        if let Some((mapping, table)) = call {
            if self.client.nvidia.dma_unmap(&table, mapping).is_err() {
                STATS.error(ErrorKind::DmaUnmap);
            }
            self.inner.lock().state.unmap_end();
        }
    }

    /// Releases the pin (put_pages, or release of a pin never given back).
    fn unpin(&self) {
        let mut inner = self.inner.lock();
        let action = inner.state.unpin_begin();
        let (pin, mapping) = match action {
            Action::CallDriver => (inner.pin.take(), None),
            Action::UnmapThenUnpin => (inner.pin.take(), inner.mapping.take()),
            _ => (None, None),
        };
        drop(inner);
        let Some(pin) = pin else { return };
        if let Some(mapping) = mapping {
            if self
                .client
                .nvidia
                .dma_unmap(&pin.handle(), mapping)
                .is_err()
            {
                STATS.error(ErrorKind::DmaUnmap);
            }
        }
        if self.client.nvidia.unpin(pin).is_err() {
            STATS.error(ErrorKind::Unpin);
        }
        let mut inner = self.inner.lock();
        let callback = if inner.state.unpin_end() {
            STATS.unpinned(self.range.len());
            // The callback can no longer run: its reference is ours.
            inner.callback.take()
        } else {
            None
        };
        drop(inner);
        drop(callback);
    }

    /// The driver's free callback: fence DMA if the HCA may be using the
    /// memory, give the page table and mapping up, and hand back the
    /// callback's reference.
    fn revoke(&self) -> Option<CallbackRef<Registration>> {
        let mut inner = self.inner.lock();
        let action = match inner.state.free_callback() {
            Ok(a) => a,
            Err(_) => {
                STATS.error(ErrorKind::OutOfOrder);
                return None;
            }
        };
        let held = inner.pin.take().map(|p| p.revoke()).is_some();
        if let Some(m) = inner.mapping.take() {
            m.revoke();
        }
        let callback = inner.callback.take();
        let core_context = inner.core_context;
        drop(inner);
        if held {
            STATS.unpinned(self.range.len());
        }
        if action == Action::Fence {
            let inv = *self.client.invalidator.lock();
            match (inv, core_context) {
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
        callback
    }
}

impl PeerMemoryClient for Client {
    type Registration = Registration;

    fn acquire(
        this: ArcBorrow<'_, Self>,
        addr: u64,
        size: u64,
    ) -> Result<Option<Arc<Registration>>> {
        Registration::acquire(this.into(), addr, size)
    }

    fn get_pages(reg: &Registration, addr: u64, size: u64, core_context: u64) -> Result {
        reg.get_pages(addr, size, core_context)
    }

    fn dma_map(reg: &Registration, sg: SgTable, dev: DmaDevice) -> Result<u32> {
        reg.dma_map(sg, dev)
    }

    fn dma_unmap(reg: &Registration, sg: SgTable) {
        reg.unmap(Some(sg));
    }

    fn put_pages(reg: &Registration) {
        reg.unpin();
    }

    fn page_size(_reg: &Registration) -> u64 {
        GPU_PAGE_SIZE
    }

    fn release(reg: Arc<Registration>) {
        reg.unpin();
        STATS.released();
    }

    fn revoke(reg: &Registration) -> Option<CallbackRef<Registration>> {
        reg.revoke()
    }

    fn show_stats(this: ArcBorrow<'_, Self>, w: &mut SeqWriter) {
        let _ = STATS.render(w, this.mode.name(), this.name);
    }
}
