// SPDX-License-Identifier: GPL-2.0

//! `/dev/peer_core_sim`: what uverbs would do for a process.  Registrations
//! made through an open file get small handles; closing the file
//! deregisters everything it registered, as uverbs does at process exit.

use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::bindings::{
    pcsim_dereg, pcsim_dma, pcsim_handle, pcsim_query, pcsim_reg, pcsim_sge, pcsim_times,
    PCSIM_REG_QP_BUFFER, PCSIM_STATE_INVALIDATED, PCSIM_STATE_MAPPED, PCSIM_STATE_UNMAPPED,
};
use crate::client;
use crate::entry::SimFile;
use crate::hooks::Hook;
use crate::mr::{self, Request};
use crate::reg::{Reg, State};
use crate::sys;
use crate::tables::{RegEntry, TABLES};
use crate::text::{CName, Text};
use crate::violation::{self, EVENTS};

static NEXT_FILE: AtomicU64 = AtomicU64::new(1);

/// An open control file.
pub(crate) struct Context {
    id: u64,
    next_handle: AtomicU32,
}

/// Copies the HCA's view of `reg` to the user array `sg` of `max` entries;
/// returns the number of entries.
fn copy_sg(reg: &Reg, sg: u64, max: u32) -> Result<u32> {
    let hca = reg.with(|i| {
        let mut v = KVVec::with_capacity(i.hca.len(), GFP_KERNEL)?;
        v.extend_from_slice(&i.hca, GFP_KERNEL)?;
        Ok::<_, Error>(v)
    })?;
    let n = hca.len().min(max as usize);
    if sg != 0 && n > 0 {
        let bytes = core::mem::size_of::<pcsim_sge>() * n;
        // SAFETY: `pcsim_sge` is plain old data (two u64s, no padding); the
        // slice covers `n` initialised entries.
        let raw = unsafe { core::slice::from_raw_parts(hca.as_ptr().cast::<u8>(), bytes) };
        sys::copy_to_user(sg, raw)?;
    }
    Ok(hca.len() as u32)
}

impl SimFile for Context {
    /// A new control file.
    fn new() -> Self {
        Self {
            id: NEXT_FILE.fetch_add(1, Ordering::Relaxed),
            next_handle: AtomicU32::new(1),
        }
    }

    /// The stats: `simctl core stats`.
    fn stats(&self, t: &mut Text) -> core::fmt::Result {
        report(t)
    }

    /// Zeroes the counters and re-arms the WARNs.
    fn reset(&self) -> Result {
        violation::reset();
        Ok(())
    }
}

impl Context {
    /// ibv_reg_mr.
    pub(crate) fn reg(&self, arg: &mut pcsim_reg) -> Result {
        let dev = TABLES.lock().dma_device()?;
        let req = Request {
            va: arg.va,
            len: arg.len,
            access: arg.access,
            hook: Hook::from_uapi(arg)?,
            qp_buffer: arg.flags & PCSIM_REG_QP_BUFFER != 0,
        };
        if arg.flags & !PCSIM_REG_QP_BUFFER != 0 {
            return Err(EINVAL);
        }
        let reg = mr::register(&req, dev)?;
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = TABLES.lock().add_reg(RegEntry {
            file: self.id,
            handle,
            reg: reg.clone(),
            nv: None,
        }) {
            mr::deregister(reg);
            return Err(e);
        }
        arg.handle = handle;
        arg.core_context = reg.with(|i| i.id);
        arg.page_size = reg.with(|i| i.page_size);
        for (d, s) in arg.client.iter_mut().zip(reg.client.name_bytes().iter()) {
            *d = *s;
        }
        let t = reg.with(|i| i.times);
        arg.times = pcsim_times {
            acquire_wait_ns: t.acquire_wait_ns,
            acquire_ns: t.acquire_ns,
            get_pages_ns: t.get_pages_ns,
            dma_map_ns: t.dma_map_ns,
            total_ns: t.total_ns,
        };
        match copy_sg(&reg, arg.sg, arg.sg_max) {
            Ok(n) => arg.sg_count = n,
            Err(e) => {
                // The caller never learns the handle: undo it.
                if let Some(reg) = TABLES.lock().take_reg(self.id, handle) {
                    mr::deregister(reg);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// ibv_dereg_mr.
    pub(crate) fn dereg(&self, arg: &pcsim_handle) -> Result {
        let reg = TABLES.lock().take_reg(self.id, arg.handle).ok_or(ENOENT)?;
        mr::deregister(reg);
        Ok(())
    }

    /// ibv_dereg_mr, with the core's timing of it.
    pub(crate) fn dereg_timed(&self, arg: &mut pcsim_dereg) -> Result {
        let reg = TABLES.lock().take_reg(self.id, arg.handle).ok_or(ENOENT)?;
        let t = mr::deregister(reg);
        arg.dma_unmap_ns = t.dma_unmap_ns;
        arg.put_pages_ns = t.put_pages_ns;
        arg.release_ns = t.release_ns;
        arg.total_ns = t.total_ns;
        Ok(())
    }

    /// uverbs disassociate: a kernel worker deregisters the registration
    /// (not the owning process); returns when it is done.
    pub(crate) fn disassociate(&self, arg: &pcsim_handle) -> Result {
        // Allocate first: a failure must not lose the registration.
        let reg = TABLES.lock().reg(self.id, arg.handle).ok_or(ENOENT)?;
        let done = Arc::new(AtomicBool::new(false), GFP_KERNEL)?;
        let job = KBox::new(
            crate::entry::DeregJob {
                reg,
                done: done.clone(),
            },
            GFP_KERNEL,
        )?;
        if TABLES.lock().take_reg(self.id, arg.handle).is_none() {
            // Deregistered meanwhile by another thread of the process.
            return Err(ENOENT);
        }
        crate::entry::spawn_dereg(job)?;
        while !done.load(Ordering::Acquire) {
            sys::msleep(2);
        }
        violation::Event::Disassociated.count();
        Ok(())
    }

    /// May the HCA DMA through this registration?
    pub(crate) fn dma_check(&self, arg: &pcsim_handle) -> Result {
        let reg = TABLES.lock().reg(self.id, arg.handle).ok_or(ENOENT)?;
        mr::dma_check(&reg)
    }

    /// The HCA's DMA through a registration (an RDMA WRITE or READ).
    pub(crate) fn dma(&self, arg: &pcsim_dma) -> Result {
        let reg = TABLES.lock().reg(self.id, arg.handle).ok_or(ENOENT)?;
        crate::hca::dma(&reg, arg)
    }

    /// A registration's state and current SG list.
    pub(crate) fn query(&self, arg: &mut pcsim_query) -> Result {
        let reg = TABLES.lock().reg(self.id, arg.handle).ok_or(ENOENT)?;
        arg.state = match reg.with(|i| i.state) {
            State::Mapped => PCSIM_STATE_MAPPED,
            State::Invalidated => PCSIM_STATE_INVALIDATED,
            State::Unmapped => PCSIM_STATE_UNMAPPED,
            _ => 0,
        };
        arg.sg_count = copy_sg(&reg, arg.sg, arg.sg_max)?;
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        loop {
            let reg = TABLES.lock().take_any_reg(self.id);
            let Some(reg) = reg else { break };
            mr::deregister(reg);
        }
    }
}

/// The "key=value" report of `simctl core stats`.
fn report(t: &mut Text) -> core::fmt::Result {
    let dev = TABLES.lock().dma_device();
    match dev {
        Ok(d) => {
            writeln!(t, "hca={}", d.name())?;
            writeln!(t, "hca_iommu={}", u8::from(d.translated()))?;
        }
        Err(_) => writeln!(t, "hca=none")?,
    }
    writeln!(t, "hca_nonpci={}", u8::from(sys::param_nonpci()))?;
    writeln!(t, "variant={}", sys::param_variant())?;
    writeln!(t, "honour_unmaps={}", u8::from(sys::param_honour_unmaps()))?;
    writeln!(t, "memory_peers={}", u8::from(sys::param_memory_peers()))?;
    writeln!(
        t,
        "sg_regime={}",
        if sys::param_page_shift() {
            "page_shift"
        } else {
            "trim"
        }
    )?;
    violation::VIOLATIONS.write_stats(t)?;
    for (e, name) in EVENTS {
        writeln!(t, "{}={}", name, e.get())?;
    }
    let clients = client::all();
    writeln!(t, "clients={}", clients.len())?;
    for c in clients.iter() {
        c.describe(t)?;
    }
    let regs = TABLES.lock().all_regs();
    writeln!(t, "registrations={}", regs.len())?;
    for (file, handle, reg) in regs.iter() {
        let (state, id, nmap, ps) = reg.with(|i| (i.state, i.id, i.nmap, i.page_size));
        writeln!(
            t,
            "reg file={} handle={} client={} va={:#x} len={:#x} owner={} state={} core_context={} nmap={} page_size={:#x}",
            file,
            handle,
            CName(reg.client.name_bytes()),
            reg.va,
            reg.len,
            reg.owner,
            state.name(),
            id,
            nmap,
            ps
        )?;
    }
    Ok(())
}
