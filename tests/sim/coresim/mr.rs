// SPDX-License-Identifier: GPL-2.0

//! Memory registration as the RDMA core drives a peer-memory client
//! (docs/facts/peer-memory-core.md): acquire under the global peer mutex,
//! get_pages -> dma_map -> get_page_size with the mapping lock held (older
//! cores: get_page_size before dma_map), the SG checks and trims
//! (`sgcheck`), error unwinding, deregistration, invalidation with and
//! without `PEER_MEM_INVALIDATE_UNMAPS`, and the HCA's DMA check.

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::bindings::{
    sim_range, PCSIM_ACCESS_LOCAL_WRITE, PCSIM_ACCESS_REMOTE_WRITE, PCSIM_ATTR_NUM_ALLOC_MRS,
    PCSIM_ATTR_NUM_DEALLOC_MRS, PCSIM_ATTR_NUM_DEREG_BYTES, PCSIM_ATTR_NUM_DEREG_PAGES,
    PCSIM_ATTR_NUM_FREE_CALLBACKS, PCSIM_ATTR_NUM_REG_BYTES, PCSIM_ATTR_NUM_REG_PAGES,
    PCSIM_STEP_AFTER_ACQUIRE, PCSIM_STEP_AFTER_DMA_MAP, PCSIM_STEP_AFTER_GET_PAGES,
    PCSIM_STEP_IN_DEREG,
};
use crate::client::{self, Client};
use crate::hca;
use crate::hooks::{self, Hook};
use crate::reg::{DeregTimes, NewReg, Reg, State, Times};
use crate::sgcheck::{
    align_down, align_up, check_and_trim, restore_trim, MAX_PAGE_SIZE, PAGE_SIZE,
};
use crate::sys::{self, errno, DmaDevice, NvSim};
use crate::tables::TABLES;
use crate::violation::{self, Event, Kind};

/// The GPU page size (address checks walk the list in these steps).
const GPU_PAGE: u64 = 1 << 16;

/// An `ibv_reg_mr` request.
pub(crate) struct Request {
    pub(crate) va: u64,
    pub(crate) len: u64,
    pub(crate) access: u32,
    pub(crate) hook: Hook,
    /// A QP/CQ buffer (invalidation clients are not asked), not an MR.
    pub(crate) qp_buffer: bool,
}

/// The error a client callback's return value stands for.
fn callback_error(client: &Client, what: &str, rc: i32) -> Error {
    if rc > 0 {
        violation::report(
            Kind::BadReturn,
            format_args!("'{}' {} returned {}", client.name(), what, rc),
        );
        return EINVAL;
    }
    sys::err(-rc)
}

/// Registers `[va, va + len)` in the caller's process, as ibv_reg_mr on
/// memory that pin_user_pages refused.
pub(crate) fn register(req: &Request, dev: DmaDevice) -> Result<Arc<Reg>> {
    let (va, len) = (req.va, req.len);
    if len == 0
        || va
            .checked_add(len)
            .is_none_or(|end| end > u64::MAX - MAX_PAGE_SIZE)
    {
        return Err(EINVAL);
    }
    let t0 = sys::ktime_ns();
    let mut times = Times::default();
    let owner = sys::current_tgid();
    // ib_umem_get charges RLIMIT_MEMLOCK before it tries the peer path.
    let pages = (align_up(va + len, PAGE_SIZE) - align_down(va, PAGE_SIZE)) / PAGE_SIZE;
    let memlock = if sys::param_memlock() {
        Some(sys::MemlockCharge::new(pages)?)
    } else {
        None
    };
    let Some((client, ctx)) = client::acquire(va, len, req.qp_buffer, &mut times) else {
        Event::NotClaimed.count();
        return Err(EFAULT);
    };
    hooks::run(&req.hook, PCSIM_STEP_AFTER_ACQUIRE, None, owner, va);
    let n = NewReg {
        client: client.clone(),
        ctx,
        va,
        len,
        owner,
        writable: req.access & (PCSIM_ACCESS_LOCAL_WRITE | PCSIM_ACCESS_REMOTE_WRITE) != 0,
        dev,
        dereg_hook: req.hook,
        memlock,
    };
    let reg = match Reg::new(n) {
        Ok(r) => r,
        Err(e) => {
            client.ops.release(ctx);
            client.put_user();
            return Err(e);
        }
    };
    if client.invalidation {
        match client.alloc_id(reg.clone()) {
            Ok(id) => reg.with(|i| i.id = id),
            Err(e) => {
                fail(&reg);
                return Err(e);
            }
        }
    }
    reg.with(|i| i.times = times);
    match map(&reg, req) {
        Ok(()) => {
            reg.with(|i| i.times.total_ns = sys::ns_since(t0));
            client.stat_add(PCSIM_ATTR_NUM_ALLOC_MRS, 1);
            // The real counter counts SG entries, not pages.
            client.stat_add(PCSIM_ATTR_NUM_REG_PAGES, u64::from(reg.with(|i| i.nmap)));
            client.stat_add(PCSIM_ATTR_NUM_REG_BYTES, len);
            Event::RegOk.count();
            reg.unlock_mapping();
            post_checks(&reg);
            if sys::take_fail_mkey() {
                // The HW driver failed to create the MR after ib_umem_get
                // returned it MAPPED: it releases the umem, which unwinds
                // as a deregistration (dma_unmap, put_pages, release).
                pr_info!(
                    "injected mkey creation failure: '{}' [{:#x}, +{:#x}) released\n",
                    format_args!("{}", client.name()),
                    va,
                    len
                );
                deregister(reg);
                return Err(ENOMEM);
            }
            Ok(reg)
        }
        Err(e) => {
            fail(&reg);
            Err(e)
        }
    }
}

/// get_pages, dma_map, get_page_size and the SG checks (mapping lock held).
fn map(reg: &Arc<Reg>, req: &Request) -> Result {
    let c = &reg.client;
    let id = reg.with(|i| i.id);
    let t0 = sys::ktime_ns();
    let rc = c
        .ops
        .get_pages(reg.va, reg.len, !reg.writable, reg.ctx, u64::from(id));
    reg.with(|i| i.times.get_pages_ns = sys::ns_since(t0));
    if rc != 0 {
        return Err(callback_error(c, "get_pages", rc));
    }
    reg.with(|i| i.pinned = true);
    hooks::run(
        &req.hook,
        PCSIM_STEP_AFTER_GET_PAGES,
        Some(reg),
        reg.owner,
        reg.va,
    );
    // Older cores ask the page size first and give dma_map an nmap int of
    // their own; current ones ask after dma_map, whose nmap is
    // `&sg_head->nents` itself.
    let legacy = sys::param_legacy_map();
    let early_ps = if legacy {
        Some(c.ops.get_page_size(reg.ctx))
    } else {
        None
    };
    let t0 = sys::ktime_ns();
    let (rc, nmap) = c.ops.dma_map(&reg.sgt, reg.ctx, reg.dev, !legacy);
    reg.with(|i| i.times.dma_map_ns = sys::ns_since(t0));
    if rc != 0 {
        if !reg.sgt.is_empty() {
            violation::report(
                Kind::DmaMapDirty,
                format_args!(
                    "'{}' dma_map failed ({}) but left the SG table filled",
                    c.name(),
                    rc
                ),
            );
        }
        return Err(callback_error(c, "dma_map", rc));
    }
    reg.with(|i| i.mapped = true);
    let ps = early_ps.unwrap_or_else(|| c.ops.get_page_size(reg.ctx));
    if !ps.is_power_of_two() || !(PAGE_SIZE..=MAX_PAGE_SIZE).contains(&ps) {
        violation::report(
            Kind::BadPageSize,
            format_args!("'{}' get_page_size returned {:#x}", c.name(), ps),
        );
        return Err(EINVAL);
    }
    check_and_trim(reg, nmap, ps)?;
    hooks::run(
        &req.hook,
        PCSIM_STEP_AFTER_DMA_MAP,
        Some(reg),
        reg.owner,
        reg.va,
    );
    reg.with(|i| i.state = State::Mapped);
    Ok(())
}

/// dma_unmap and put_pages as far as they are due.
fn teardown(reg: &Reg) -> DeregTimes {
    let mut t = DeregTimes::default();
    let (mapped, pinned) = reg.with(|i| (i.mapped, i.pinned));
    let c = &reg.client;
    if mapped {
        restore_trim(reg);
        let t0 = sys::ktime_ns();
        let rc = c.ops.dma_unmap(&reg.sgt, reg.ctx, reg.dev);
        t.dma_unmap_ns = sys::ns_since(t0);
        if rc != 0 {
            violation::report(
                Kind::UnmapError,
                format_args!("'{}' dma_unmap returned {}", c.name(), rc),
            );
        }
        reg.with(|i| i.mapped = false);
    }
    if pinned {
        let t0 = sys::ktime_ns();
        c.ops.put_pages(&reg.sgt, reg.ctx);
        t.put_pages_ns = sys::ns_since(t0);
        reg.with(|i| i.pinned = false);
    }
    t
}

/// The end of a registration: id freed, release, the client's use dropped.
/// Returns the time the client's release took (ns).
fn finish(reg: &Reg) -> u64 {
    let id = reg.with(|i| core::mem::replace(&mut i.id, client::NO_ID));
    reg.client.free_id(id);
    let t0 = sys::ktime_ns();
    reg.client.ops.release(reg.ctx);
    let release_ns = sys::ns_since(t0);
    reg.client.put_user();
    release_ns
}

/// Error unwinding with the mapping lock held: (dma_unmap ->) put_pages ->
/// id freed -> release.
fn fail(reg: &Reg) {
    teardown(reg);
    reg.with(|i| i.state = State::Failed);
    reg.unlock_mapping();
    finish(reg);
    Event::RegFailed.count();
}

/// `ibv_dereg_mr`: dma_unmap -> put_pages -> release; under the mapping
/// lock without `PEER_MEM_INVALIDATE_UNMAPS`, after dropping it with.
pub(crate) fn deregister(reg: Arc<Reg>) -> DeregTimes {
    let t0 = sys::ktime_ns();
    // OFED <= 24.10 (`notifier_ne`): the notifier's end test is inverted
    // for a client without invalidation: no mapping lock around its
    // teardown, and an unlock of the unheld lock after it.
    let unlocked = sys::param_notifier_ne() && !reg.client.invalidation;
    if !unlocked {
        reg.lock_mapping(false);
    }
    hooks::run(
        &reg.dereg_hook,
        PCSIM_STEP_IN_DEREG,
        Some(&reg),
        reg.owner,
        reg.va,
    );
    let fenced = reg.with(|i| {
        let fenced = matches!(i.state, State::Invalidated | State::Unmapped);
        i.state = State::Deregistered;
        fenced
    });
    let mut t = if unlocked {
        let t = teardown(&reg);
        Event::UnlockUnheld.count();
        pr_info!(
            "{}",
            format_args!(
                "deregistration of a '{}' registration without the mapping lock, then an \
                 unlock of it unheld: the real core's lockdep reports a bad unlock balance here\n",
                reg.client.name()
            )
        );
        t
    } else if reg.client.unmaps() {
        reg.unlock_mapping();
        teardown(&reg)
    } else {
        let t = teardown(&reg);
        reg.unlock_mapping();
        t
    };
    let c = &reg.client;
    // An invalidated MR was counted deallocated at its invalidation.
    if !fenced {
        c.stat_add(PCSIM_ATTR_NUM_DEALLOC_MRS, 1);
    }
    // Current cores never count num_dereg_pages; the older ones' stand-in
    // (`legacy_map`) does, in SG entries as num_reg_pages.
    if sys::param_legacy_map() {
        c.stat_add(PCSIM_ATTR_NUM_DEREG_PAGES, u64::from(reg.with(|i| i.nmap)));
    }
    c.stat_add(PCSIM_ATTR_NUM_DEREG_BYTES, reg.len);
    t.release_ns = finish(&reg);
    Event::Dereg.count();
    t.total_ns = sys::ns_since(t0);
    t
}

/// The core's invalidate callback: fence the registration (no DMA after
/// return); without `PEER_MEM_INVALIDATE_UNMAPS` also dma_unmap and
/// put_pages, re-entering the client (state UNMAPPED).  Every call counts
/// in `num_free_callbacks` (a stale or unknown id too, as the real core);
/// the invalidated MR counts in `num_dealloc_mrs`.
pub(crate) fn invalidate(handle: usize, core_context: u64) -> Result {
    let Some(c) = TABLES.lock().client(handle) else {
        violation::report(
            Kind::BadHandle,
            format_args!(
                "invalidate({:#x}, {}): no such client",
                handle, core_context
            ),
        );
        return Err(EINVAL);
    };
    c.stat_add(PCSIM_ATTR_NUM_FREE_CALLBACKS, 1);
    let Some(reg) = c.lookup_id(core_context) else {
        // The real core answers 0 either way.  An id it gave earlier and
        // released since is the client's documented race with
        // deregistration; an id it never gave is a client bug.
        if c.was_issued(core_context) {
            Event::InvalidateStale.count();
        } else {
            violation::report(
                Kind::InvalidateUnknownId,
                format_args!(
                    "'{}' invalidate with core_context {} the core never gave",
                    c.name(),
                    core_context
                ),
            );
        }
        return Ok(());
    };
    let nv = NvSim::get();
    match reg.lock_mapping_invalidate(nv.as_ref()) {
        Ok(true) => Event::InvalidateWaited.count(),
        Ok(false) => {}
        Err(holder) => {
            violation::report(
                Kind::InvalidateDeadlock,
                format_args!(
                    "'{}' invalidate of core_context {} from inside a GPU free callback waits for \
                     the mapping lock held by task {:#x}, which waits for the GPU driver's lock \
                     that callback holds: the real core hangs here",
                    c.name(),
                    core_context,
                    holder
                ),
            );
            return Err(sys::err(errno::EDEADLK));
        }
    }
    drop(nv);
    match reg.with(|i| i.state) {
        State::Mapped => {
            Event::Invalidated.count();
            c.stat_add(PCSIM_ATTR_NUM_DEALLOC_MRS, 1);
            if c.unmaps() {
                reg.with(|i| i.state = State::Invalidated);
                // MAPPED -> INVALIDATED: the trims are undone and the core
                // clears its copy of the table without calling dma_unmap;
                // deregistration later calls neither dma_unmap nor
                // put_pages, only release.  The SG list and the pin are the
                // client's (and the GPU driver's) to free.
                restore_trim(&reg);
                reg.sgt.clear();
                reg.with(|i| {
                    i.mapped = false;
                    i.pinned = false;
                });
            } else {
                reg.with(|i| i.state = State::Unmapped);
                teardown(&reg);
            }
        }
        State::Invalidated | State::Unmapped => Event::InvalidateRepeat.count(),
        _ => Event::InvalidateLate.count(),
    }
    reg.unlock_mapping();
    Ok(())
}

/// The HCA's view as ranges.
fn ranges(reg: &Reg) -> Result<KVVec<sim_range>> {
    reg.with(|i| {
        let mut v = KVVec::with_capacity(i.hca.len(), GFP_KERNEL)?;
        for e in i.hca.iter() {
            v.push(
                sim_range {
                    addr: e.addr,
                    len: e.len,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(v)
    })
}

/// The HCA's view as the physical ranges its DMA reaches (through its
/// IOMMU where it has one); None if the IOMMU has nothing mapped under
/// part of it.
fn phys_ranges(reg: &Reg) -> Result<Option<KVVec<sim_range>>> {
    let mut v = KVVec::new();
    for e in ranges(reg)?.iter() {
        let Some(runs) = hca::bus_to_phys(reg.dev, e.addr, e.len)? else {
            return Ok(None);
        };
        for &(addr, len) in runs.iter() {
            v.push(sim_range { addr, len }, GFP_KERNEL)?;
        }
    }
    Ok(Some(v))
}

/// Reports `dma_after_free` if `reg` is still mapped but its memory is not
/// live pinned GPU memory.  Returns whether the memory is live.  Memory
/// whose pin the bench's same-process neighbour released (the GPU simulator
/// answers ESTALE) is that neighbour's harm: counted, not the client's.
pub(crate) fn check_live(nv: &NvSim, reg: &Reg, when: &str) -> bool {
    let Ok(r) = phys_ranges(reg) else { return true };
    // Reported once per registration, and only while it is mapped.
    let first_report = || {
        reg.with(|i| {
            let report = i.state == State::Mapped && !i.dead_reported;
            i.dead_reported |= report;
            report
        })
    };
    let Some(r) = r else {
        // The HCA's IOMMU has nothing mapped under the list: the HCA's DMA
        // faults (a list address no DMA mapping gave, or a mapping torn
        // down under a registration still mapped).
        if first_report() {
            violation::report(
                Kind::DmaUnmapped,
                format_args!(
                    "{}: '{}' registration [{:#x}, +{:#x}) is mapped for the HCA but its IOMMU has nothing mapped at the list's addresses",
                    when,
                    reg.client.name(),
                    reg.va,
                    reg.len
                ),
            );
        }
        return false;
    };
    let neighbour = match nv.dma_live(&r) {
        Ok(()) => return true,
        Err(e) => e == sys::err(errno::ESTALE),
    };
    let report = first_report();
    if report && neighbour {
        Event::DmaAfterNeighbourPut.count();
        pr_info!(
            "{}\n",
            format_args!(
                "{}: '{}' registration [{:#x}, +{:#x}) is mapped for the HCA but the \
                 same-process neighbour's late put released its pin (the neighbour's harm)",
                when,
                reg.client.name(),
                reg.va,
                reg.len
            )
        );
    } else if report {
        violation::report(
            Kind::DmaAfterFree,
            format_args!(
                "{}: '{}' registration [{:#x}, +{:#x}) is mapped for the HCA but its GPU memory is gone (no invalidate)",
                when,
                reg.client.name(),
                reg.va,
                reg.len
            ),
        );
    }
    false
}

/// After MAPPED: the SG addresses are the GPU pages of the range, in order,
/// and the memory is still live.
fn post_checks(reg: &Reg) {
    let Some(nv) = NvSim::get() else { return };
    let Ok(r) = ranges(reg) else { return };
    let mut v = reg.with(|i| i.hca_start);
    'entries: for e in r.iter() {
        let mut off = 0;
        while off < e.len {
            let Ok(expect) = nv.translate(reg.owner, v) else {
                break 'entries;
            };
            // The HCA reaches the address through its IOMMU, if any.
            let reached = reg.dev.to_phys(e.addr + off);
            if reached != Some(expect) {
                violation::report(
                    Kind::SgAddress,
                    format_args!(
                        "'{}' SG maps VA {:#x} to DMA {:#x} (the HCA reaches {:#x}); the GPU page is at {:#x}",
                        reg.client.name(),
                        v,
                        e.addr + off,
                        reached.unwrap_or(0),
                        expect
                    ),
                );
                break 'entries;
            }
            let step = (GPU_PAGE - v % GPU_PAGE).min(e.len - off);
            off += step;
            v += step;
        }
    }
    check_live(&nv, reg, "registration");
}

/// `dma_check`: Ok if the HCA may DMA, ESTALE if fenced, EFAULT if the
/// memory is gone (a violation unless fenced), ENOENT if torn down.
pub(crate) fn dma_check(reg: &Reg) -> Result {
    match reg.with(|i| i.state) {
        State::Mapped => {}
        State::Invalidated | State::Unmapped => return Err(sys::err(errno::ESTALE)),
        _ => return Err(ENOENT),
    }
    let Some(nv) = NvSim::get() else {
        return Ok(());
    };
    if check_live(&nv, reg, "dma_check") {
        return Ok(());
    }
    match reg.with(|i| i.state) {
        State::Invalidated | State::Unmapped => Err(sys::err(errno::ESTALE)),
        _ => Err(EFAULT),
    }
}

/// After GPU memory was freed: every mapped registration must still point
/// at live memory (its client invalidated it otherwise).
pub(crate) fn sweep() {
    let Some(nv) = NvSim::get() else { return };
    let regs = TABLES.lock().all_regs();
    for (_, _, reg) in regs.iter() {
        if reg.with(|i| i.state == State::Mapped && !i.busy) {
            check_live(&nv, reg, "after cudaFree");
        }
    }
}
