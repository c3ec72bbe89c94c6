// SPDX-License-Identifier: GPL-2.0

//! Registered peer-memory clients: `ib_register_peer_memory_client` /
//! `ib_unregister_peer_memory_client`, the global peer mutex held around
//! `acquire` (clients asked in registration order), the per-client table of
//! small-integer `core_context` ids of invalidation clients, and the
//! counters behind `/sys/kernel/mm/memory_peers/<name>/`.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{Arc, CondVar, Mutex};
use kernel::{new_condvar, new_mutex};

use crate::bindings::{
    peer_memory_client, IB_PEER_MEMORY_NAME_MAX, IB_PEER_MEMORY_VER_MAX,
    PCSIM_ATTR_NUM_FREE_CALLBACKS, PCSIM_LOCK_PEERS, PEER_MEM_INVALIDATE_UNMAPS,
};
use crate::peer::{self, ClientOps};
use crate::reg::Reg;
use crate::reg::Times;
use crate::slots::Slots;
use crate::sys::{self, GlueMutex, SysfsDir};
use crate::tables::TABLES;
use crate::text::CName;
use crate::violation::{self, Kind};

/// The counters of a client, indexed by `PCSIM_ATTR_*` (0, the version, is
/// unused).
const NSTATS: usize = PCSIM_ATTR_NUM_FREE_CALLBACKS as usize + 1;

/// The registered clients in registration order (by sequence number).
pub(crate) struct Peers {
    clients: Slots<(u64, Arc<Client>)>,
    next_seq: u64,
}

/// The global peer mutex and the clients it protects.
pub(crate) static PEERS: GlueMutex<Peers> = GlueMutex::new(
    PCSIM_LOCK_PEERS,
    Peers {
        clients: Slots::new(),
        next_seq: 1,
    },
);

impl Peers {
    /// Module exit: frees the table's storage (no client can still be
    /// registered: each holds a reference on this module).
    pub(crate) fn clear(&mut self) {
        drop(self.clients.take_all());
    }
}

/// The `core_context` of every registration of a client registered without
/// an invalidate slot (`PEER_NO_INVALIDATION_ID`): no id is allocated.
pub(crate) const NO_ID: u32 = u32::MAX;

struct ClientState {
    /// Registrations served (acquired and not yet released).
    users: u32,
    unregistering: bool,
    next_id: u32,
    /// The highest id given so far (None: none yet), and whether the ids
    /// wrapped around.
    issued_max: Option<u32>,
    wrapped: bool,
    ids: Slots<(u32, Arc<Reg>)>,
    sysfs: Option<SysfsDir>,
}

/// One registered client.
#[pin_data]
pub(crate) struct Client {
    /// Its callbacks.
    pub(crate) ops: ClientOps,
    name: [u8; IB_PEER_MEMORY_NAME_MAX as usize],
    version: [u8; IB_PEER_MEMORY_VER_MAX as usize],
    ex_size: usize,
    flags: u32,
    /// Registered with an invalidate_callback slot.
    pub(crate) invalidation: bool,
    stats: [AtomicU64; NSTATS],
    #[pin]
    state: Mutex<ClientState>,
    #[pin]
    idle: CondVar,
}

impl Client {
    /// `PEER_MEM_INVALIDATE_UNMAPS`: the core must not call dma_unmap and
    /// put_pages from inside invalidate (unless `honour_unmaps=0` makes the
    /// core one that ignores the flag).
    pub(crate) fn unmaps(&self) -> bool {
        self.flags & PEER_MEM_INVALIDATE_UNMAPS != 0 && crate::sys::param_honour_unmaps()
    }

    /// The name, for reports.
    pub(crate) fn name(&self) -> CName<'_> {
        CName(&self.name)
    }

    /// The raw name bytes (NUL-terminated).
    pub(crate) fn name_bytes(&self) -> &[u8; IB_PEER_MEMORY_NAME_MAX as usize] {
        &self.name
    }

    /// The version bytes (up to the first NUL, at most 16).
    pub(crate) fn version(&self) -> &[u8] {
        let end = self
            .version
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.version.len());
        &self.version[..end]
    }

    /// Counter `attr` (`PCSIM_ATTR_*`).
    pub(crate) fn stat(&self, attr: u32) -> u64 {
        self.stats
            .get(attr as usize)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// Adds `v` to counter `attr`.
    pub(crate) fn stat_add(&self, attr: u32, v: u64) {
        if let Some(s) = self.stats.get(attr as usize) {
            s.fetch_add(v, Ordering::Relaxed);
        }
    }

    /// Takes a use (a registration being served); fails while unregistering.
    fn get_user(&self) -> bool {
        let mut s = self.state.lock();
        if s.unregistering {
            return false;
        }
        s.users += 1;
        true
    }

    /// Drops a use taken by `acquire`.
    pub(crate) fn put_user(&self) {
        let mut s = self.state.lock();
        s.users -= 1;
        if s.users == 0 {
            self.idle.notify_all();
        }
    }

    /// Gives `reg` a small-integer id: cyclic over `[0, U32_MAX - 1]`,
    /// starting at 0 (the first registration after the client registered
    /// gets 0: a valid id, not "none").
    pub(crate) fn alloc_id(&self, reg: Arc<Reg>) -> Result<u32> {
        let mut s = self.state.lock();
        let mut id = s.next_id;
        while id == NO_ID || s.ids.find(|(i, _)| *i == id).is_some() {
            id = if id >= NO_ID - 1 { 0 } else { id + 1 };
        }
        s.next_id = if id >= NO_ID - 1 { 0 } else { id + 1 };
        s.ids.insert((id, reg))?;
        match s.issued_max {
            Some(m) if id <= m => s.wrapped = true,
            _ => s.issued_max = Some(id),
        }
        Ok(id)
    }

    /// Whether the core ever gave id `core_context` (it may be released).
    pub(crate) fn was_issued(&self, core_context: u64) -> bool {
        let s = self.state.lock();
        core_context < u64::from(NO_ID)
            && (s.wrapped || s.issued_max.is_some_and(|m| core_context <= u64::from(m)))
    }

    /// Releases id `id`.
    pub(crate) fn free_id(&self, id: u32) {
        if id == NO_ID {
            return;
        }
        let mut s = self.state.lock();
        if let Some(i) = s.ids.find(|(i, _)| *i == id) {
            // Dropped after the lock is released (the Reg may be the last).
            let entry = s.ids.remove(i);
            drop(s);
            drop(entry);
        }
    }

    /// The registration with id `core_context`.
    pub(crate) fn lookup_id(&self, core_context: u64) -> Option<Arc<Reg>> {
        let id = u32::try_from(core_context).ok()?;
        let s = self.state.lock();
        let i = s.ids.find(|(i, _)| *i == id)?;
        s.ids.get(i).map(|(_, r)| r.clone())
    }

    /// Registrations currently served.
    pub(crate) fn users(&self) -> u32 {
        self.state.lock().users
    }

    /// The report line of `simctl core stats`.
    pub(crate) fn describe(&self, t: &mut crate::text::Text) -> core::fmt::Result {
        use core::fmt::Write;
        write!(
            t,
            "client name={} version={} ex_size={} flags={:#x} invalidation={} users={}",
            self.name(),
            CName(self.version()),
            self.ex_size,
            self.flags,
            u8::from(self.invalidation),
            self.users()
        )?;
        const NAMES: [&str; NSTATS] = [
            "",
            "num_alloc_mrs",
            "num_dealloc_mrs",
            "num_reg_pages",
            "num_dereg_pages",
            "num_reg_bytes",
            "num_dereg_bytes",
            "num_free_callbacks",
        ];
        for (i, name) in NAMES.iter().enumerate().skip(1) {
            write!(t, " {}={}", name, self.stat(i as u32))?;
        }
        writeln!(t)
    }
}

/// `ib_register_peer_memory_client`: the new client's handle, or an error
/// message (the caller returns NULL).  `before_publish` runs once the
/// client is accepted, before acquire can reach it: the real core writes
/// `*invalidate_callback` there.
///
/// A second client of a name already registered is accepted (DOCA-OFED
/// 25.10 checks no name: both are asked, in registration order) unless
/// `refuse_duplicate_names` or `memory_peers` is set (a core with the sysfs
/// directory fails the second one's kobject_add).
///
/// # Safety
///
/// `client` follows the contract of [`peer::parse`].
pub(crate) unsafe fn register(
    client: *const peer_memory_client,
    invalidation: bool,
    before_publish: impl FnOnce(),
) -> Result<Arc<Client>, &'static str> {
    // SAFETY: forwarded contract.
    let parsed = match unsafe { peer::parse(client) } {
        Ok(p) => p,
        Err(why) => {
            violation::report(
                Kind::BadClient,
                format_args!("ib_register_peer_memory_client: {}", why),
            );
            return Err(why);
        }
    };
    // The real core allocates its client record next (kzalloc), NULL on
    // failure, with no message.
    if sys::take_fail_register() {
        return Err("injected allocation failure (fail_register)");
    }
    let mut peers = PEERS.lock();
    let dup = peers.clients.find(|(_, c)| c.name == parsed.name).is_some();
    if dup && sys::param_refuse_dups() {
        pr_err!(
            "ib_register_peer_memory_client: a client named '{}' is already registered (its memory_peers kobject would collide)\n",
            format_args!("{}", CName(&parsed.name))
        );
        return Err("duplicate name");
    }
    if dup {
        pr_info!(
            "ib_register_peer_memory_client: a second client named '{}' (accepted: asked after the first)\n",
            format_args!("{}", CName(&parsed.name))
        );
    }
    let c = Arc::pin_init(
        pin_init!(Client {
            ops: parsed.ops,
            name: parsed.name,
            version: parsed.version,
            ex_size: parsed.ex_size,
            flags: parsed.flags,
            invalidation,
            stats: [const { AtomicU64::new(0) }; NSTATS],
            state <- new_mutex!(ClientState { users: 0, unregistering: false, next_id: 0, issued_max: None, wrapped: false, ids: Slots::new(), sysfs: None }),
            idle <- new_condvar!(),
        }),
        GFP_KERNEL,
    )
    .map_err(|_| "out of memory")?;
    if crate::sys::param_memory_peers() {
        let name = core::ffi::CStr::from_bytes_until_nul(&c.name).map_err(|_| "bad name")?;
        // SAFETY: the directory is removed in `unregister` before the client
        // is dropped, so `c` outlives every read of its counters.
        let dir = unsafe { SysfsDir::new(name, core::ptr::from_ref::<Client>(&c).cast()) }
            .map_err(|_| "cannot create its memory_peers directory")?;
        c.state.lock().sysfs = Some(dir);
    }
    before_publish();
    TABLES
        .lock()
        .add_client(c.clone())
        .map_err(|_| "out of memory")?;
    let seq = peers.next_seq;
    peers.next_seq += 1;
    if peers.clients.insert((seq, c.clone())).is_err() {
        TABLES.lock().remove_client(&c);
        return Err("out of memory");
    }
    pr_info!(
        "peer memory client '{}' version '{}' registered (invalidation={}, flags={:#x})\n",
        format_args!("{}", c.name()),
        format_args!("{}", CName(c.version())),
        u8::from(invalidation),
        c.flags
    );
    Ok(c)
}

/// `ib_unregister_peer_memory_client`: blocks until every registration the
/// client serves is gone.
pub(crate) fn unregister(handle: usize) {
    let mut peers = PEERS.lock();
    let Some(i) = peers.clients.find(|(_, c)| handle_of(c) == handle) else {
        drop(peers);
        violation::report(
            Kind::BadHandle,
            format_args!(
                "ib_unregister_peer_memory_client({:#x}): no such client",
                handle
            ),
        );
        return;
    };
    let Some((_, c)) = peers.clients.remove(i) else {
        return;
    };
    drop(peers);
    TABLES.lock().remove_client(&c);
    let mut s = c.state.lock();
    s.unregistering = true;
    while s.users > 0 {
        c.idle.wait(&mut s);
    }
    let dir = s.sysfs.take();
    drop(s);
    drop(dir);
    pr_info!(
        "peer memory client '{}' unregistered\n",
        format_args!("{}", c.name())
    );
    let hold = crate::sys::param_unregister_hold_ms();
    if hold > 0 {
        pr_info!(
            "ib_unregister_peer_memory_client: holding {} ms before returning\n",
            hold
        );
        crate::sys::hold(crate::sys::param_unregister_hold_ms);
    }
}

/// The handle given to a client: the address of its `Client`.
pub(crate) fn handle_of(c: &Arc<Client>) -> usize {
    core::ptr::from_ref::<Client>(c) as usize
}

/// Asks the clients, in registration order and under the global peer mutex,
/// whether `[addr, addr + size)` is theirs; the first to say so serves it
/// (a use is taken).  Returns it and the context its acquire produced.
/// For a QP/CQ buffer (`qp_buffer`) invalidation clients are not asked.
/// `times` gets the wait for the mutex and the time in the clients' acquire.
pub(crate) fn acquire(
    addr: u64,
    size: u64,
    qp_buffer: bool,
    times: &mut Times,
) -> Option<(Arc<Client>, usize)> {
    let t0 = sys::ktime_ns();
    let peers = PEERS.lock();
    let t1 = sys::ktime_ns();
    times.acquire_wait_ns = t1.saturating_sub(t0);
    let mut last = 0;
    loop {
        let (seq, c) = peers
            .clients
            .iter()
            .filter(|(_, (s, _))| *s > last)
            .min_by_key(|(_, (s, _))| *s)
            .map(|(_, (s, c))| (*s, c.clone()))?;
        last = seq;
        if qp_buffer && c.invalidation {
            continue;
        }
        if !c.get_user() {
            continue;
        }
        let (r, ctx) = c.ops.acquire(addr, size);
        times.acquire_ns = sys::ns_since(t1);
        if r > 0 {
            if r != 1 {
                violation::report(
                    Kind::BadReturn,
                    format_args!("'{}' acquire returned {}", c.name(), r),
                );
            }
            return Some((c, ctx));
        }
        c.put_user();
    }
}

/// Every registered client, for reports.
pub(crate) fn all() -> KVec<Arc<Client>> {
    let peers = PEERS.lock();
    let mut v = KVec::new();
    for (_, (_, c)) in peers.clients.iter() {
        // A report missing a client on allocation failure is acceptable.
        let _ = v.push(c.clone(), GFP_KERNEL);
    }
    v
}
