// SPDX-License-Identifier: GPL-2.0

//! The bytes of GPU memory, reached two ways that share nothing but the
//! pages: the CUDA driver's copies by VA (cuMemcpyHtoD/DtoH: through the
//! allocation's own page list, no pin, no mapping), and a peer's DMA to a
//! bus address through the BAR (only pinned, DMA-mapped memory answers, as
//! only BAR1-mapped memory does on the real GPU).  A data check writes one
//! way and reads the other: a wrong address in a scatterlist shows as wrong
//! bytes, not as a consistent round trip.

use kernel::prelude::*;

use crate::bindings::{nvsim_memcpy, NVSIM_MEMCPY_DTOH, NVSIM_MEMCPY_HTOD};
use crate::lock::{StateGuard, API};
use crate::memory::GPU_PAGE;
use crate::sys;

/// The most bytes one step of a copy moves with the bookkeeping lock held.
const STEP: usize = GPU_PAGE as usize;

impl StateGuard<'_> {
    /// The CPU's access to process `tgid`'s GPU memory at `va` (its own or
    /// shared with it), within one allocation.
    fn access_va(&self, tgid: u32, va: u64, buf: &mut [u8], write: bool) -> Result {
        let a = self
            .allocs
            .iter()
            .map(|(_, a)| a)
            .find(|a| a.va_live && a.reachable_by(tgid) && a.contains(va))
            .ok_or(EFAULT)?;
        let off = va - a.va;
        if a.len - off < buf.len() as u64 {
            return Err(EFAULT);
        }
        a.mem.access(off, buf, write)
    }

    /// A peer's DMA at bus address `bus`: every GPU page it touches must be
    /// pinned by a pin with a live DMA mapping, else EFAULT and nothing
    /// moved.
    pub(crate) fn bar_access(&self, bus: u64, buf: &mut [u8], write: bool) -> Result {
        let end = bus.checked_add(buf.len() as u64).ok_or(EFAULT)?;
        // Check every page first: a fault moves nothing.
        let mut at = bus;
        while at < end {
            self.bar_page(at)?;
            at = (at & !(GPU_PAGE - 1)).saturating_add(GPU_PAGE);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = bus + done as u64;
            let (alloc, page) = self.bar_page(at)?;
            let a = self.allocs.get(alloc).ok_or(EFAULT)?;
            let in_page = at % GPU_PAGE;
            let n = ((GPU_PAGE - in_page) as usize).min(buf.len() - done);
            a.mem.access(
                page as u64 * GPU_PAGE + in_page,
                &mut buf[done..done + n],
                write,
            )?;
            done += n;
        }
        Ok(())
    }

    /// The allocation and page that bus address `bus` hits, if a pin with a
    /// live mapping holds that page.
    fn bar_page(&self, bus: u64) -> Result<(usize, usize)> {
        for (idx, a) in self.allocs.iter() {
            let Some(page) = a.mem.page_at(bus) else {
                continue;
            };
            let pinned = self.pins.iter().any(|(p, pin)| {
                pin.alloc == idx
                    && (pin.first..pin.first + pin.npages).contains(&page)
                    && self.maps.iter().any(|(_, m)| m.pin == p)
            });
            return if pinned { Ok((idx, page)) } else { Err(EFAULT) };
        }
        // No GPU page there (a sparse allocation's synthetic addresses
        // included): the access faults.
        Err(EFAULT)
    }
}

/// `NVSIM_IOC_MEMCPY` for the calling process, one GPU page at a time,
/// through a bounce buffer (no user copy with the lock held).  The user
/// address only ever goes to the user copies, which refuse what is not the
/// caller's (a wrapped one included).
pub(crate) fn memcpy(arg: &nvsim_memcpy) -> Result {
    let tgid = sys::current_tgid();
    let to_gpu = match arg.dir {
        NVSIM_MEMCPY_HTOD => true,
        NVSIM_MEMCPY_DTOH => false,
        _ => return Err(EINVAL),
    };
    if arg.reserved != 0 || arg.va.checked_add(arg.len).is_none() {
        return Err(EINVAL);
    }
    let mut bounce = KVec::from_elem(0u8, STEP, GFP_KERNEL)?;
    let mut done = 0u64;
    while done < arg.len {
        let va = arg.va + done;
        let n = ((GPU_PAGE - va % GPU_PAGE).min(arg.len - done)) as usize;
        let part = &mut bounce[..n];
        if to_gpu {
            sys::copy_from_user(part, arg.buf.wrapping_add(done))?;
            API.state().access_va(tgid, va, part, true)?;
        } else {
            API.state().access_va(tgid, va, part, false)?;
            sys::copy_to_user(arg.buf.wrapping_add(done), part)?;
        }
        done += n as u64;
    }
    Ok(())
}
