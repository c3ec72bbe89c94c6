// SPDX-License-Identifier: GPL-2.0

//! The HCA's DMA engine: what an RDMA WRITE landing in a registration, or an
//! RDMA READ / a send gathering from it, does with the SG list the client
//! built.  Byte `va` of the registration is found in the HCA's view of the
//! list (after the core's trims, from `hca_start`), and moved at that bus
//! address through the GPU's BAR (nvidia_p2p_sim), never through the VA.
//! Each step holds the registration's mapping lock, so an invalidation
//! waits for the DMA in flight and none starts after it: the fence the real
//! core's invalidate gives its client.

use kernel::prelude::*;

use crate::bindings::pcsim_dma;
use crate::mr;
use crate::reg::{Reg, State};
use crate::sys::{self, errno, DmaDevice, NvSim};
use crate::violation::Event;

/// The most bytes one step moves under the mapping lock (one GPU page).
const STEP: u64 = 1 << 16;

/// Where the DMA stands in the HCA's list: entry `idx`, `off` bytes in.
#[derive(Clone, Copy)]
struct Cursor {
    idx: usize,
    off: u64,
}

/// The entry and offset of registration byte `va` in the HCA's list.
fn locate(reg: &Reg, va: u64) -> Result<Cursor> {
    reg.with(|i| {
        let mut left = va.checked_sub(i.hca_start).ok_or(EINVAL)?;
        for (idx, e) in i.hca.iter().enumerate() {
            if left < e.len {
                return Ok(Cursor { idx, off: left });
            }
            left -= e.len;
        }
        Err(EINVAL)
    })
}

/// One step at `at`: at most `max` bytes, within one SG entry; returns the
/// bytes moved.  ESTALE once the registration is fenced.
fn step(nv: &NvSim, reg: &Reg, at: &mut Cursor, buf: &mut [u8], write: bool) -> Result<usize> {
    reg.lock_mapping(false);
    let r: Result<usize> = (|| {
        let (bus, n) = reg.with(|i| {
            if i.state != State::Mapped {
                return Err(sys::err(errno::ESTALE));
            }
            let e = i.hca.get(at.idx).ok_or(EINVAL)?;
            let n = (e.len - at.off).min(buf.len() as u64) as usize;
            Ok((e.addr + at.off, n))
        })?;
        bus_access(nv, reg.dev, bus, &mut buf[..n], write)?;
        Ok(n)
    })();
    reg.unlock_mapping();
    let n = r?;
    at.off += n as u64;
    if reg.with(|i| i.hca.get(at.idx).is_some_and(|e| at.off == e.len)) {
        at.idx += 1;
        at.off = 0;
    }
    Ok(n)
}

/// The granule of the IOMMU's translations.
const IOMMU_PAGE: u64 = 1 << 12;

/// Where the device `dev`'s DMA of `len` bytes at bus address `bus` lands:
/// the physical runs, each IOMMU page translated as the hardware does it
/// (one run, `bus` itself, without an IOMMU); None if the IOMMU has nothing
/// mapped under one of its pages.
pub(crate) fn bus_to_phys(dev: DmaDevice, bus: u64, len: u64) -> Result<Option<KVVec<(u64, u64)>>> {
    let end = bus.checked_add(len).ok_or(EFAULT)?;
    let mut runs: KVVec<(u64, u64)> = KVVec::new();
    if !dev.translated() {
        runs.push((bus, len), GFP_KERNEL)?;
        return Ok(Some(runs));
    }
    let mut at = bus;
    while at < end {
        let next = ((at & !(IOMMU_PAGE - 1)) + IOMMU_PAGE).min(end);
        let Some(phys) = dev.to_phys(at) else {
            return Ok(None);
        };
        match runs.last_mut() {
            Some(r) if r.0 + r.1 == phys => r.1 += next - at,
            _ => runs.push((phys, next - at), GFP_KERNEL)?,
        }
        at = next;
    }
    Ok(Some(runs))
}

/// The HCA's DMA of `buf` at bus address `bus`, as its bus master does
/// it: through the IOMMU where it has one (an address with nothing mapped
/// faults: EFAULT, nothing moved), then through the GPU's BAR at the
/// physical address.
fn bus_access(nv: &NvSim, dev: DmaDevice, bus: u64, buf: &mut [u8], write: bool) -> Result {
    let Some(runs) = bus_to_phys(dev, bus, buf.len() as u64)? else {
        Event::IommuFault.count();
        pr_info!(
            "HCA DMA of {} bytes at bus address {:#x}: the IOMMU has nothing mapped there (fault)\n",
            buf.len(),
            bus
        );
        return Err(EFAULT);
    };
    if dev.translated() {
        Event::IommuDma.count();
    }
    let mut done = 0usize;
    for &(phys, len) in runs.iter() {
        let len = len as usize;
        nv.bar_access(phys, &mut buf[done..done + len], write)?;
        done += len;
    }
    Ok(())
}

/// Checks a DMA of `len` bytes at registration byte `va`; where the DMA
/// starts, or None for an empty one.
fn start(reg: &Reg, va: u64, len: u64, write: bool) -> Result<Option<Cursor>> {
    let off = va.checked_sub(reg.va).ok_or(EINVAL)?;
    if off > reg.len || len > reg.len - off {
        return Err(EINVAL);
    }
    if write && !reg.writable {
        return Err(EACCES);
    }
    if len == 0 {
        return Ok(None);
    }
    Ok(Some(locate(reg, va)?))
}

/// `step`, with a fault checked: memory gone under a registration still
/// mapped is the client's missing invalidation.
fn step_checked(
    nv: &NvSim,
    reg: &Reg,
    at: &mut Cursor,
    buf: &mut [u8],
    write: bool,
) -> Result<usize> {
    step(nv, reg, at, buf, write).inspect_err(|e| {
        if *e == EFAULT {
            mr::check_live(nv, reg, "HCA DMA");
        }
    })
}

/// `PCSIM_IOC_DMA` on `reg`: between the caller's buffer and the GPU.
pub(crate) fn dma(reg: &Reg, arg: &pcsim_dma) -> Result {
    let write = match arg.write {
        0 => false,
        1 => true,
        _ => return Err(EINVAL),
    };
    let nv = NvSim::get().ok_or(ENODEV)?;
    let Some(mut at) = start(reg, arg.va, arg.len, write)? else {
        return Ok(());
    };
    let mut bounce = KVec::from_elem(0u8, STEP as usize, GFP_KERNEL)?;
    let mut done = 0u64;
    while done < arg.len {
        let want = (arg.len - done).min(STEP) as usize;
        let part = &mut bounce[..want];
        if write {
            sys::copy_from_user(part, arg.buf.wrapping_add(done))?;
        }
        let n = step_checked(&nv, reg, &mut at, part, write)?;
        if !write {
            sys::copy_to_user(arg.buf.wrapping_add(done), &bounce[..n])?;
        }
        done += n as u64;
    }
    Ok(())
}

/// The soft RDMA device's DMA on `reg`: between a kernel buffer (a packet's
/// payload) and the GPU `nv`.
pub(crate) fn dma_kernel(nv: &NvSim, reg: &Reg, va: u64, buf: &mut [u8], write: bool) -> Result {
    let Some(mut at) = start(reg, va, buf.len() as u64, write)? else {
        return Ok(());
    };
    let mut done = 0usize;
    while done < buf.len() {
        let end = buf.len().min(done + STEP as usize);
        done += step_checked(nv, reg, &mut at, &mut buf[done..end], write)?;
    }
    Ok(())
}
