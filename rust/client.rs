// SPDX-License-Identifier: GPL-2.0

//! The `extern "C"` entry points of the RDMA core's peer-memory client
//! interface: the client table the core calls (the NVIDIA driver's free
//! callback is in rust/nvidia/callback.rs); and the debugfs `stats` file,
//! shown through the active client.
//! Each trampoline turns raw
//! pointers into owned or borrowed Rust values, calls the safe
//! [`PeerMemoryClient`] implementation (rust/peer_mr.rs), and turns a
//! `Result` into the C return value only here.

use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::{self, NonNull};

use kernel::debugfs::{Dir, File};
use kernel::ffi::{c_char, c_int, c_ulong};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full, Release};
use kernel::sync::{Arc, ArcBorrow};

use crate::bindings::{
    device, peer_memory_client_ex, sg_table, IB_PEER_MEMORY_NAME_MAX, IB_PEER_MEMORY_VER_MAX,
    PEER_MEM_INVALIDATE_UNMAPS,
};
use crate::peer_core::Unregistered;
use crate::sg::{DmaDevice, SgTable};

/// The callbacks of a peer-memory client (struct peer_memory_client), in
/// safe Rust.  `Self` is the module-wide client; `Mr` is the
/// per-MR context the core passes back as `client_context`.
pub(crate) trait PeerMemoryClient: Send + Sync + Sized + 'static {
    /// Per-registration state.
    type Mr: Send + Sync;

    /// Whether `[addr, addr + size)` is ours; `Some` claims it (pinned).
    fn acquire(this: ArcBorrow<'_, Self>, addr: u64, size: u64) -> Result<Option<Arc<Self::Mr>>>;
    /// The core takes the pages of a claimed range.
    fn get_pages(reg: &Self::Mr, addr: u64, size: u64, core_context: u64) -> Result;
    /// DMA-map for `dev` into `sg`; returns the number of SG entries.
    fn dma_map(reg: &Self::Mr, sg: SgTable, dev: DmaDevice) -> Result<u32>;
    /// Undo `dma_map` (the core is done with the SG table).
    fn dma_unmap(reg: &Self::Mr);
    /// The core gives the pages back.
    fn put_pages(reg: &Self::Mr);
    /// The page size of the registration's memory.
    fn page_size(reg: &Self::Mr) -> u64;
    /// The core is done with the registration.
    fn release(reg: Arc<Self::Mr>);
    /// The debugfs `stats` file's text.
    fn show_stats(this: ArcBorrow<'_, Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// The static that keeps the client of this type while it serves (one
    /// per client type: `static ACTIVE: Active<Self> = Active::new();`).
    fn active() -> &'static Active<Self>;
}

/// The client of type `T` the trampolines serve: an `Arc<T>` turned into a
/// raw pointer by [`ClientTable::activate`], taken back by
/// [`ClientTable::deactivate`].
///
/// # Invariants
///
/// A non-null pointer came from `Arc::into_raw` and owns that reference.
pub(crate) struct Active<T>(Atomic<*mut T>);

impl<T> Active<T> {
    /// No client.
    pub(crate) const fn new() -> Self {
        Active(Atomic::new(ptr::null_mut()))
    }
}

/// The stats show of the active client's type (see [`show_stats`]).
struct StatsShow {
    show: fn(&mut fmt::Formatter<'_>) -> fmt::Result,
}

/// The [`StatsShow`] of the active client's type, set while one is active.
///
/// # Invariants
///
/// A non-null pointer points to a `'static` [`StatsShow`] constant.
static STATS_SHOW: Atomic<*mut StatsShow> = Atomic::new(ptr::null_mut());

/// The function table of client `T`, to register with the core.
pub(crate) struct ClientTable<T>(PhantomData<T>);

impl<T: PeerMemoryClient> ClientTable<T> {
    const STATS_SHOW: &'static StatsShow = &StatsShow { show: Self::stats };

    /// Builds the table.  `invalidation`: an extended table (version[15] set,
    /// ex_size, `PEER_MEM_INVALIDATE_UNMAPS`) for an invalidation client.
    /// `Err(EINVAL)` if `name` is empty or too long.
    pub(crate) fn build(
        name: &str,
        version: &str,
        invalidation: bool,
    ) -> Result<KBox<peer_memory_client_ex>> {
        let name_max = IB_PEER_MEMORY_NAME_MAX as usize;
        if name.is_empty() || name.len() >= name_max || name.bytes().any(|b| !b.is_ascii_graphic())
        {
            return Err(EINVAL);
        }
        let mut t = KBox::new(peer_memory_client_ex::default(), GFP_KERNEL)?;
        let c = &mut t.client;
        for (d, s) in c.name.iter_mut().zip(name.bytes()) {
            *d = c_char::from_ne_bytes([s]);
        }
        let ver_max = IB_PEER_MEMORY_VER_MAX as usize;
        for (d, s) in c.version.iter_mut().take(ver_max - 2).zip(version.bytes()) {
            *d = c_char::from_ne_bytes([s]);
        }
        c.acquire = Some(acquire::<T>);
        c.get_pages = Some(get_pages::<T>);
        c.dma_map = Some(dma_map::<T>);
        c.dma_unmap = Some(dma_unmap::<T>);
        c.put_pages = Some(put_pages::<T>);
        c.get_page_size = Some(get_page_size::<T>);
        c.release = Some(release::<T>);
        if invalidation {
            // The core reads the extension only if version[15] is non-zero.
            c.version[ver_max - 1] = 1;
            t.ex_size = core::mem::size_of::<peer_memory_client_ex>();
            t.flags = PEER_MEM_INVALIDATE_UNMAPS;
        }
        Ok(t)
    }

    /// Makes `client` the one the trampolines (and the stats file) serve.
    pub(crate) fn activate(client: Arc<T>) {
        // INVARIANT: an `Arc::into_raw` pointer, owning its reference.
        let old = T::active().0.xchg(Arc::into_raw(client).cast_mut(), Full);
        debug_assert!(old.is_null());
        // INVARIANT: a `'static` constant.
        let show = ptr::from_ref(Self::STATS_SHOW).cast_mut();
        STATS_SHOW.store(show, Release);
    }

    /// Stops serving: the core cannot call us any more (`Unregistered`), nor
    /// can a reader of the stats (`StatsRemoved`).
    pub(crate) fn deactivate(_core: Unregistered, _stats: StatsRemoved) -> Option<Arc<T>> {
        STATS_SHOW.store(ptr::null_mut(), Release);
        let p = T::active().0.xchg(ptr::null_mut(), Full);
        // The swap cleared the slot: `p` is taken back exactly once.
        // SAFETY: a non-null `p` came from `Arc::into_raw` in `activate`
        // (`Active` invariant) and is taken back once (above).
        NonNull::new(p).map(|p| unsafe { Arc::from_raw(p.as_ptr()) })
    }

    fn active<'a>() -> Option<ArcBorrow<'a, T>> {
        let p = NonNull::new(T::active().0.load(Acquire))?;
        // `deactivate` needs proof that neither the core nor a stats reader
        // can call us any more, and it runs in module exit, which starts
        // only once no module reference is left: a free callback whose pin
        // may call back runs while its registry entry holds one.  So no
        // borrow made here outlives the client.
        // SAFETY: `p` came from `Arc::into_raw(Arc<T>)` and stays alive until
        // `deactivate`.
        Some(unsafe { ArcBorrow::from_raw(p.as_ptr()) })
    }

    /// `f` of the active client, if one is: for the NVIDIA driver's free
    /// callback (rust/nvidia/registry.rs).
    pub(crate) fn with_active<U>(f: impl FnOnce(&T) -> U) -> Option<U> {
        Self::active().map(|client| f(&client))
    }

    /// Shows the stats through the active client (debugfs).
    fn stats(f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Self::active() {
            Some(client) => T::show_stats(client, f),
            None => Ok(()),
        }
    }
}

/// Borrows the registration behind a `client_context`.
///
/// # Safety
///
/// `ctx` must be a `client_context` produced by `acquire::<T>` and not yet
/// given to `release::<T>`.
unsafe fn mr<'a, T: PeerMemoryClient>(ctx: *mut c_void) -> &'a T::Mr {
    // The core calls no other callback with a context after its `release`.
    // SAFETY: `ctx` came from `Arc::into_raw` in `acquire` (the safety
    // section), a reference kept until `release` takes it back.
    unsafe { &*ctx.cast::<T::Mr>() }
}

/// `acquire`: 1 if the range is ours (then `*client_context` is set), else 0.
///
/// # Safety
///
/// Called by the RDMA core with a valid `client_context` out pointer.
unsafe extern "C" fn acquire<T: PeerMemoryClient>(
    addr: c_ulong,
    size: usize,
    _peer_mem_private_data: *mut c_void,
    _peer_mem_name: *mut c_char,
    client_context: *mut *mut c_void,
) -> c_int {
    let Some(client) = ClientTable::<T>::active() else {
        return 0;
    };
    if client_context.is_null() {
        return 0;
    }
    match T::acquire(client, addr as u64, size as u64) {
        Ok(Some(reg)) => {
            // SAFETY: the core passes an out pointer for the context of the
            // registration it is making, checked non-null above.
            unsafe { *client_context = Arc::into_raw(reg).cast_mut().cast() };
            1
        }
        Ok(None) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `get_pages`: hands the pin taken by `acquire` to the core.
///
/// # Safety
///
/// `client_context` must come from `acquire::<T>` and not be released.
unsafe extern "C" fn get_pages<T: PeerMemoryClient>(
    addr: c_ulong,
    size: usize,
    _write: c_int,
    _force: c_int,
    _sg_head: *mut sg_table,
    client_context: *mut c_void,
    core_context: u64,
) -> c_int {
    // SAFETY: the core calls `get_pages` only with a context `acquire::<T>`
    // returned, before its `release`.
    let reg = unsafe { mr::<T>(client_context) };
    kernel::error::from_result(|| {
        T::get_pages(reg, addr as u64, size as u64, core_context)?;
        Ok(0)
    })
}

/// `dma_map`: fills `sg_head` and `*nmap`.
///
/// # Safety
///
/// `client_context` as for `get_pages`; `sg_head`, `dma_device` and `nmap`
/// valid for the call (the core's contract).
unsafe extern "C" fn dma_map<T: PeerMemoryClient>(
    sg_head: *mut sg_table,
    client_context: *mut c_void,
    dma_device: *mut device,
    _dmasync: c_int,
    nmap: *mut c_int,
) -> c_int {
    // SAFETY: the core calls `dma_map` only with a context `acquire::<T>`
    // returned, before its `release`.
    let reg = unsafe { mr::<T>(client_context) };
    kernel::error::from_result(|| {
        let (Some(sg), Some(dev)) = (NonNull::new(sg_head), NonNull::new(dma_device)) else {
            return Err(EINVAL);
        };
        if nmap.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the core passes its SG table and DMA device (checked
        // non-null), both valid until `dma_map` returns.
        let (sg, dev) = unsafe { (SgTable::new(sg), DmaDevice::new(dev)) };
        let n = T::dma_map(reg, sg, dev)?;
        // SAFETY: the core passes `nmap` as an out pointer for this call
        // (checked non-null).
        unsafe { *nmap = c_int::try_from(n).unwrap_or(c_int::MAX) };
        Ok(0)
    })
}

/// `dma_unmap`: always 0.
///
/// # Safety
///
/// As for `dma_map`.
unsafe extern "C" fn dma_unmap<T: PeerMemoryClient>(
    sg_head: *mut sg_table,
    client_context: *mut c_void,
    _dma_device: *mut device,
) -> c_int {
    // SAFETY: the core calls `dma_unmap` only with a context
    // `acquire::<T>` returned, before its `release`.
    let reg = unsafe { mr::<T>(client_context) };
    // The table is ours (the core got a copy of its header): nothing to read.
    let _ = sg_head;
    T::dma_unmap(reg);
    0
}

/// `put_pages`: the core is done with the pages.
///
/// # Safety
///
/// As for `get_pages`.
unsafe extern "C" fn put_pages<T: PeerMemoryClient>(
    _sg_head: *mut sg_table,
    client_context: *mut c_void,
) {
    // SAFETY: the core calls `put_pages` only with a context
    // `acquire::<T>` returned, before its `release`.
    T::put_pages(unsafe { mr::<T>(client_context) });
}

/// `get_page_size`.
///
/// # Safety
///
/// As for `get_pages`.
unsafe extern "C" fn get_page_size<T: PeerMemoryClient>(client_context: *mut c_void) -> c_ulong {
    // SAFETY: the core calls `get_page_size` only with a context
    // `acquire::<T>` returned, before its `release`.
    T::page_size(unsafe { mr::<T>(client_context) }) as c_ulong
}

/// `release`: the core drops its reference to the registration.
///
/// # Safety
///
/// As for `get_pages`; `client_context` is not used by the core afterwards.
unsafe extern "C" fn release<T: PeerMemoryClient>(client_context: *mut c_void) {
    if client_context.is_null() {
        return;
    }
    // SAFETY: `client_context` came from `Arc::into_raw` in `acquire`; the
    // core gives it back exactly once, here.
    T::release(unsafe { Arc::from_raw(client_context.cast::<T::Mr>()) });
}

/// The `stats` file's show: the active client's counters, nothing while
/// none is active.
fn show_stats(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match NonNull::new(STATS_SHOW.load(Acquire)) {
        // SAFETY: `show` points to a `'static` constant (`STATS_SHOW`
        // invariant).
        Some(show) => (unsafe { show.as_ref() }.show)(f),
        None => Ok(()),
    }
}

/// The debugfs directory `<module name>/` with the `stats` file (0400,
/// root only), made with the kernel crate's debugfs (`kernel::debugfs`),
/// which reads it through a seq_file.
///
/// As in C, a directory that cannot be made (debugfs absent, the name
/// taken: the kernel logs that one) leaves the module without the file,
/// and removes nothing of another's: the crate's handles then hold the
/// error and remove nothing.
pub(crate) struct DebugFs {
    /// Dropped first: removing the file waits for its readers.
    _stats: Pin<KBox<File<()>>>,
    _dir: Dir,
}

/// Proof that the stats file is gone: nobody reads it any more.
pub(crate) struct StatsRemoved(());

impl DebugFs {
    /// Makes `<debugfs>/<name>/stats`; fails only when out of memory.
    pub(crate) fn create(name: &CStr) -> Result<Self> {
        let dir = Dir::new(name);
        let stats = KBox::pin_init(
            dir.read_callback_file(c"stats", (), &show_stats),
            GFP_KERNEL,
        )?;
        Ok(DebugFs {
            _stats: stats,
            _dir: dir,
        })
    }

    /// Removes the file and the directory (if made); returns once no
    /// reader of the stats file is left.
    pub(crate) fn remove(this: Option<Self>) -> StatsRemoved {
        drop(this);
        StatsRemoved(())
    }
}
