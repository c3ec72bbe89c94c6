// SPDX-License-Identifier: GPL-2.0

//! The SG list a client's dma_map built, as the RDMA core takes it over:
//! the checks (nmap, exact coverage of the get_page_size-aligned range,
//! entries longer than the trims), the first/last entry trim to the
//! PAGE_SIZE-aligned range (DMA address, length and DMA length; `offset`
//! untouched) restored before dma_unmap, the older cores' page-shift regime,
//! and the HCA's view of the result.

use kernel::prelude::*;

use crate::bindings::pcsim_sge;
use crate::reg::{Reg, Trim};
use crate::sys::{self, SgEnt};
use crate::violation::{self, Kind};

/// The CPU page size the core trims to.
pub(crate) const PAGE_SIZE: u64 = 4096;
/// The largest page size a client may report.
pub(crate) const MAX_PAGE_SIZE: u64 = 1 << 30;

/// The HCA's view of the client's SG entries (what it would DMA to).
fn hca_list(ents: &[SgEnt], n: u32) -> Result<KVVec<pcsim_sge>> {
    let mut hca = KVVec::with_capacity(n as usize, GFP_KERNEL)?;
    for e in ents {
        hca.push(
            pcsim_sge {
                addr: e.dma_address,
                len: u64::from(e.dma_length),
            },
            GFP_KERNEL,
        )?;
    }
    Ok(hca)
}

/// `x` rounded down to `a`, a power of two (page sizes).  Masks, not
/// division: no panic path (6.12's objtool takes one for a fall-through).
pub(crate) fn align_down(x: u64, a: u64) -> u64 {
    x & !a.wrapping_sub(1)
}

/// `x` rounded up to `a`, a power of two; saturates at the top.
pub(crate) fn align_up(x: u64, a: u64) -> u64 {
    align_down(x.saturating_add(a.wrapping_sub(1)), a)
}
/// Checks the SG list the client built (nmap, exact coverage of the
/// page-size-aligned range, entries longer than the trims), then trims the
/// first and last entries to the PAGE_SIZE-aligned range as the real core
/// does, and records the HCA's view.
pub(crate) fn check_and_trim(reg: &Reg, nmap: i32, ps: u64) -> Result {
    let name = reg.client.name();
    let (nents, orig) = reg.sgt.counts();
    let n = u32::try_from(nmap).unwrap_or(0);
    if n == 0 || n > orig || n != nents {
        violation::report(
            Kind::NmapMismatch,
            format_args!(
                "'{}' dma_map set nmap={} for a table with nents={} orig_nents={}",
                name, nmap, nents, orig
            ),
        );
        return Err(EINVAL);
    }
    let mut ents = match reg.sgt.read(n) {
        Ok(e) => e,
        // The core's own copy failed: not the client's fault.
        Err(e) if e == ENOMEM => return Err(ENOMEM),
        Err(_) => {
            violation::report(
                Kind::NmapMismatch,
                format_args!("'{}' SG list has fewer than nmap={} entries", name, n),
            );
            return Err(EINVAL);
        }
    };
    let start = align_down(reg.va, ps);
    let end = align_up(reg.va + reg.len, ps);
    let total: u64 = ents.iter().map(|e| u64::from(e.dma_length)).sum();
    if total != end - start || ents.iter().any(|e| e.dma_length == 0) {
        violation::report(
            Kind::SgCoverage,
            format_args!(
                "'{}' SG list covers {:#x} bytes in {} entries; the {:#x}-aligned range [{:#x}, {:#x}) is {:#x}",
                name, total, n, ps, start, end, end - start
            ),
        );
        return Err(EINVAL);
    }
    if sys::param_page_shift() {
        return page_shift(reg, &ents, n, ps);
    }
    let first_trim = align_down(reg.va, PAGE_SIZE) - start;
    let last_trim = end - align_up(reg.va + reg.len, PAGE_SIZE);
    let (Some(&first), Some(&last)) = (ents.first(), ents.last()) else {
        return Err(EINVAL);
    };
    let too_short = if n == 1 {
        u64::from(first.dma_length) <= first_trim + last_trim
    } else {
        u64::from(first.dma_length) <= first_trim || u64::from(last.dma_length) <= last_trim
    };
    if too_short {
        violation::report(
            Kind::SgTrim,
            format_args!(
                "'{}' first/last SG entry not longer than the trim ({:#x}/{:#x})",
                name, first_trim, last_trim
            ),
        );
        return Err(EINVAL);
    }
    // The trims are below `ps` <= 1 GiB, and each trimmed length was checked
    // to be longer than its trim.
    let (ft, lt) = (first_trim as u32, last_trim as u32);
    let last_idx = n - 1;
    // The trims move the first entry's DMA address and shorten the lengths;
    // `offset` (and the page) stay as the client wrote them.
    if let Some(e) = ents.first_mut() {
        e.dma_address += first_trim;
        e.length = e.length.saturating_sub(ft);
        e.dma_length -= ft;
    }
    if let Some(e) = ents.last_mut() {
        e.length = e.length.saturating_sub(lt);
        e.dma_length -= lt;
    }
    let hca = hca_list(&ents, n)?;
    if let Some(e) = ents.first() {
        reg.sgt.set(0, e)?;
    }
    if let Some(e) = ents.last() {
        reg.sgt.set(last_idx, e)?;
    }
    reg.with(|i| {
        i.nmap = n;
        i.page_size = ps;
        i.trim = Some(Trim {
            last_idx,
            first,
            last,
        });
        i.hca_start = align_down(reg.va, PAGE_SIZE);
        i.hca = hca;
    });
    Ok(())
}

/// The older cores' regime: the umem page shift is the client's page size,
/// nothing is trimmed, and every entry must start and end on that page size
/// (the HCA maps the whole pages, from the aligned start).
fn page_shift(reg: &Reg, ents: &[SgEnt], n: u32, ps: u64) -> Result {
    // `ps` is a power of two (checked before: bad_page_size); a mask has no
    // division (whose panic path 6.12's objtool takes for a fall-through).
    let mask = ps.wrapping_sub(1);
    if let Some((i, e)) = ents
        .iter()
        .enumerate()
        .find(|(_, e)| e.dma_address & mask != 0 || u64::from(e.dma_length) & mask != 0)
    {
        violation::report(
            Kind::SgUnaligned,
            format_args!(
                "'{}' SG entry {} [{:#x}, +{:#x}) is not aligned to the page size {:#x} (page-shift regime)",
                reg.client.name(),
                i,
                e.dma_address,
                e.dma_length,
                ps
            ),
        );
        return Err(EINVAL);
    }
    let hca = hca_list(ents, n)?;
    reg.with(|i| {
        i.nmap = n;
        i.page_size = ps;
        i.trim = None;
        i.hca_start = align_down(reg.va, ps);
        i.hca = hca;
    });
    Ok(())
}

/// Puts the first/last entries back as the client wrote them.
pub(crate) fn restore_trim(reg: &Reg) {
    let Some(t) = reg.with(|i| i.trim.take()) else {
        return;
    };
    // A client that freed or rebuilt its table meanwhile gets nothing back.
    if reg.sgt.is_empty() || reg.sgt.counts().1 <= t.last_idx {
        return;
    }
    let _ = reg.sgt.set(t.last_idx, &t.last);
    let _ = reg.sgt.set(0, &t.first);
}
