// SPDX-License-Identifier: GPL-2.0

//! The bench's soft RDMA device (tests/rxe-peer): its MRs on memory that
//! get_user_pages refused come here, as mlx5's do to a DOCA-OFED core's
//! peer-memory path, and its data moves through the HCA's DMA engine
//! (`hca`).  They live in the tables under file 0, which no control file
//! has (`control` numbers files from 1), with handles of their own.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::hooks::Hook;
use crate::mr::{self, Request};
use crate::sys::NvSim;
use crate::tables::{RegEntry, TABLES};

/// The tables' file of the device's MRs.
const DEVICE_FILE: u64 = 0;

static NEXT_HANDLE: AtomicU32 = AtomicU32::new(1);

/// An MR of `[va, va + len)` in the calling process; ENOENT if no client
/// claims the range.
pub(crate) fn mr_get(va: u64, len: u64, access: u32) -> Result<u32> {
    let dev = TABLES.lock().dma_device()?;
    let nv = Arc::new(NvSim::get().ok_or(ENODEV)?, GFP_KERNEL)?;
    let req = Request {
        va,
        len,
        access,
        hook: Hook::default(),
        qp_buffer: false,
    };
    let reg = mr::register(&req, dev)?;
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = TABLES.lock().add_reg(RegEntry {
        file: DEVICE_FILE,
        handle,
        reg: reg.clone(),
        nv: Some(nv),
    }) {
        mr::deregister(reg);
        return Err(e);
    }
    Ok(handle)
}

/// The device's DMA through MR `handle`.
pub(crate) fn mr_dma(handle: u32, va: u64, buf: &mut [u8], write: bool) -> Result {
    let (reg, nv) = TABLES.lock().reg_nv(DEVICE_FILE, handle).ok_or(ENOENT)?;
    crate::hca::dma_kernel(&nv, &reg, va, buf, write)
}

/// Deregisters MR `handle`.
pub(crate) fn mr_put(handle: u32) {
    let entry = TABLES.lock().take_entry(DEVICE_FILE, handle);
    match entry {
        Some(e) => {
            mr::deregister(e.reg);
        }
        None => pr_warn!("soft RDMA device: put of unknown MR handle {}\n", handle),
    }
}
