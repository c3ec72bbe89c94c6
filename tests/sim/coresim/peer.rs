// SPDX-License-Identifier: GPL-2.0

//! A registered client's `struct peer_memory_client` and the calls into its
//! callbacks.  This is the crate's FFI boundary towards clients: the client
//! structure is read once at registration (including the `_ex` extension,
//! read only as the facts allow) and its callbacks are called from here.

use core::ffi::c_void;
use core::ptr;
use kernel::prelude::*;

use crate::bindings::{
    peer_memory_client, peer_memory_client_ex, IB_PEER_MEMORY_NAME_MAX, IB_PEER_MEMORY_VER_MAX,
    PEER_MEM_EX_FLAGS_MIN_SIZE,
};
use crate::sys::{DmaDevice, SgTable};

/// What registration read from a client's structure.
pub(crate) struct Parsed {
    /// The callbacks.
    pub(crate) ops: ClientOps,
    /// `name`, NUL-terminated within its 64 bytes.
    pub(crate) name: [u8; IB_PEER_MEMORY_NAME_MAX as usize],
    /// `version` (16 bytes; may lack a NUL for an `_ex` client).
    pub(crate) version: [u8; IB_PEER_MEMORY_VER_MAX as usize],
    /// `ex_size` of an `_ex` client (0: not one).
    pub(crate) ex_size: usize,
    /// `flags` of an `_ex` client with `ex_size >= 148` (else 0).
    pub(crate) flags: u32,
}

/// Reads a client's structure as the real core does.
///
/// # Safety
///
/// `client` points to a readable `struct peer_memory_client`, followed by
/// the `_ex` fields if `version[15] != 0`; its callbacks follow the
/// peer-memory contract and stay callable until the client unregisters.
pub(crate) unsafe fn parse(client: *const peer_memory_client) -> Result<Parsed, &'static str> {
    if client.is_null() {
        return Err("client is NULL");
    }
    // SAFETY: readable per the caller's contract.
    let c: peer_memory_client = unsafe { ptr::read(client) };
    let (name, version) = (c.name, c.version);
    match name.iter().position(|&b| b == 0) {
        None => return Err("name is not NUL-terminated within 64 bytes"),
        Some(0) => return Err("name is empty"),
        Some(_) if name.contains(&b'/') => return Err("name contains '/'"),
        Some(_) => {}
    }
    let (mut ex_size, mut flags) = (0, 0);
    if version[IB_PEER_MEMORY_VER_MAX as usize - 1] != 0 {
        let ex = client.cast::<peer_memory_client_ex>();
        // SAFETY: an `_ex` client (version[15] != 0) provides the extension.
        ex_size = unsafe { ptr::read(ptr::addr_of!((*ex).ex_size)) };
        if ex_size >= PEER_MEM_EX_FLAGS_MIN_SIZE as usize {
            // SAFETY: `ex_size` says `flags` is there.
            flags = unsafe { ptr::read(ptr::addr_of!((*ex).flags)) };
        }
    }
    let missing = [
        (c.acquire.is_none(), "acquire"),
        (c.get_pages.is_none(), "get_pages"),
        (c.dma_map.is_none(), "dma_map"),
        (c.dma_unmap.is_none(), "dma_unmap"),
        (c.put_pages.is_none(), "put_pages"),
        (c.get_page_size.is_none(), "get_page_size"),
        (c.release.is_none(), "release"),
    ];
    if let Some((_, which)) = missing.iter().find(|(m, _)| *m) {
        return Err(which);
    }
    // INVARIANT: every callback is non-NULL; the rest is the caller's contract.
    let ops = ClientOps { c };
    Ok(Parsed {
        ops,
        name,
        version,
        ex_size,
        flags,
    })
}

/// A client's callbacks.
///
/// # Invariants
///
/// Copied from a registered client: every callback is non-NULL, follows the
/// peer-memory contract and stays callable until the client unregisters,
/// which waits for every registration (and so every call made through this
/// value) to finish.
pub(crate) struct ClientOps {
    c: peer_memory_client,
}

// SAFETY: function pointers and plain bytes; the callbacks may be called
// from any task (the peer-memory contract).
unsafe impl Send for ClientOps {}
// SAFETY: as above; never written after registration.
unsafe impl Sync for ClientOps {}

/// The value a missing callback would "return" (never: all are checked).
const MISSING: i32 = -(crate::sys::errno::ESTALE);

impl ClientOps {
    /// `acquire(addr, size, NULL, NULL, &ctx)`: (return value, ctx).
    pub(crate) fn acquire(&self, addr: u64, size: u64) -> (i32, usize) {
        let Some(f) = self.c.acquire else {
            return (MISSING, 0);
        };
        let mut ctx: *mut c_void = ptr::null_mut();
        // SAFETY: the client's contract (type invariant); the two middle
        // arguments are NULL as the real core passes them.
        let r = unsafe {
            f(
                addr as usize,
                size as usize,
                ptr::null_mut(),
                ptr::null_mut(),
                &mut ctx,
            )
        };
        (r, ctx as usize)
    }

    /// `get_pages(addr, size, 1, force, NULL, ctx, core_context)`.
    pub(crate) fn get_pages(
        &self,
        addr: u64,
        size: u64,
        force: bool,
        ctx: usize,
        core_context: u64,
    ) -> i32 {
        let Some(f) = self.c.get_pages else {
            return MISSING;
        };
        // SAFETY: the client's contract; `ctx` is what its acquire returned.
        unsafe {
            f(
                addr as usize,
                size as usize,
                1,
                i32::from(force),
                ptr::null_mut(),
                ctx as *mut c_void,
                core_context,
            )
        }
    }

    /// `dma_map(sgt, ctx, dev, 0, nmap)`: (return value, nmap).  With
    /// `alias` (current cores) `nmap` is `&sgt->nents` itself, so the
    /// client's writes to either are one value; otherwise (older cores) an
    /// int of the core's own, starting at 0.
    pub(crate) fn dma_map(
        &self,
        sgt: &SgTable,
        ctx: usize,
        dev: DmaDevice,
        alias: bool,
    ) -> (i32, i32) {
        let Some(f) = self.c.dma_map else {
            return (MISSING, 0);
        };
        let mut own = 0;
        let nmap = if alias { sgt.nents_ptr() } else { &mut own };
        // SAFETY: the client's contract; `sgt` is the core's table; `nmap`
        // is `own` or the table's `nents`, both valid for the call.
        let r = unsafe { f(sgt.as_ptr(), ctx as *mut c_void, dev.as_ptr(), 0, nmap) };
        // SAFETY: as above, after the call (the table is the core's).
        (r, unsafe { nmap.read() })
    }

    /// `dma_unmap(sgt, ctx, dev)`.
    pub(crate) fn dma_unmap(&self, sgt: &SgTable, ctx: usize, dev: DmaDevice) -> i32 {
        let Some(f) = self.c.dma_unmap else {
            return MISSING;
        };
        // SAFETY: the client's contract; called once after a successful dma_map.
        unsafe { f(sgt.as_ptr(), ctx as *mut c_void, dev.as_ptr()) }
    }

    /// `put_pages(sgt, ctx)`.
    pub(crate) fn put_pages(&self, sgt: &SgTable, ctx: usize) {
        let Some(f) = self.c.put_pages else { return };
        // SAFETY: the client's contract; called once after a successful get_pages.
        unsafe { f(sgt.as_ptr(), ctx as *mut c_void) }
    }

    /// `get_page_size(ctx)`.
    pub(crate) fn get_page_size(&self, ctx: usize) -> u64 {
        let Some(f) = self.c.get_page_size else {
            return 0;
        };
        // SAFETY: the client's contract.
        unsafe { f(ctx as *mut c_void) as u64 }
    }

    /// `release(ctx)`: the last call for this context.
    pub(crate) fn release(&self, ctx: usize) {
        let Some(f) = self.c.release else { return };
        // SAFETY: the client's contract; called once per acquired context.
        unsafe { f(ctx as *mut c_void) }
    }
}
