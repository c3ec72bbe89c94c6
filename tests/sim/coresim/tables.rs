// SPDX-License-Identifier: GPL-2.0

//! The core's lookup tables, under one leaf mutex (never held while calling
//! out): client handles (for `invalidate`, which must not take the peer
//! mutex: it runs inside the GPU driver's free callback), the registrations
//! of every open control file, and the HCA.

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::bindings::PCSIM_LOCK_TABLES;
use crate::client::{handle_of, Client};
use crate::reg::Reg;
use crate::slots::Slots;
use crate::sys::{DmaDevice, GlueMutex, Hca, NvSim};

/// A registration made through a control file.
pub(crate) struct RegEntry {
    /// The control file.
    pub(crate) file: u64,
    /// Its handle in that file.
    pub(crate) handle: u32,
    /// The registration.
    pub(crate) reg: Arc<Reg>,
    /// The soft RDMA device's MRs: the GPU their DMA goes to, looked up
    /// once at registration (not per packet).
    pub(crate) nv: Option<Arc<NvSim>>,
}

/// What the table mutex protects.
pub(crate) struct Tables {
    clients: Slots<Arc<Client>>,
    regs: Slots<RegEntry>,
    hca: Option<Hca>,
}

/// The tables.
pub(crate) static TABLES: GlueMutex<Tables> = GlueMutex::new(
    PCSIM_LOCK_TABLES,
    Tables {
        clients: Slots::new(),
        regs: Slots::new(),
        hca: None,
    },
);

impl Tables {
    /// Module exit: frees the tables' storage (nothing is registered: no
    /// client or control file can outlive the module).
    pub(crate) fn clear(&mut self) {
        drop(self.clients.take_all());
        drop(self.regs.take_all());
    }

    /// Sets (or clears) the HCA.
    pub(crate) fn set_hca(&mut self, hca: Option<Hca>) -> Option<Hca> {
        core::mem::replace(&mut self.hca, hca)
    }

    /// The DMA device for a new registration.
    pub(crate) fn dma_device(&self) -> Result<DmaDevice> {
        self.hca.as_ref().map(Hca::dma_device).ok_or(ENODEV)
    }

    /// Records a registered client's handle.
    pub(crate) fn add_client(&mut self, c: Arc<Client>) -> Result {
        self.clients.insert(c).map(|_| ())
    }

    /// Forgets a client's handle.
    pub(crate) fn remove_client(&mut self, c: &Arc<Client>) {
        if let Some(i) = self.clients.find(|x| Arc::ptr_eq(x, c)) {
            self.clients.remove(i);
        }
    }

    /// The client whose handle is `handle`.
    pub(crate) fn client(&self, handle: usize) -> Option<Arc<Client>> {
        let i = self.clients.find(|c| handle_of(c) == handle)?;
        self.clients.get(i).cloned()
    }

    /// Records a registration of control file `file`.
    pub(crate) fn add_reg(&mut self, e: RegEntry) -> Result {
        self.regs.insert(e).map(|_| ())
    }

    /// Takes registration `handle` of `file` out of the table.
    pub(crate) fn take_reg(&mut self, file: u64, handle: u32) -> Option<Arc<Reg>> {
        let i = self.regs.find(|e| e.file == file && e.handle == handle)?;
        self.regs.remove(i).map(|e| e.reg)
    }

    /// Takes any registration of `file` out of the table.
    pub(crate) fn take_any_reg(&mut self, file: u64) -> Option<Arc<Reg>> {
        let i = self.regs.find(|e| e.file == file)?;
        self.regs.remove(i).map(|e| e.reg)
    }

    /// Takes registration `handle` of `file` out of the table, whole (its
    /// GPU is released by the caller, outside the lock).
    pub(crate) fn take_entry(&mut self, file: u64, handle: u32) -> Option<RegEntry> {
        let i = self.regs.find(|e| e.file == file && e.handle == handle)?;
        self.regs.remove(i)
    }

    /// Registration `handle` of `file` with its GPU (a device MR's).
    pub(crate) fn reg_nv(&self, file: u64, handle: u32) -> Option<(Arc<Reg>, Arc<NvSim>)> {
        let i = self.regs.find(|e| e.file == file && e.handle == handle)?;
        let e = self.regs.get(i)?;
        Some((e.reg.clone(), e.nv.clone()?))
    }

    /// Registration `handle` of `file`.
    pub(crate) fn reg(&self, file: u64, handle: u32) -> Option<Arc<Reg>> {
        let i = self.regs.find(|e| e.file == file && e.handle == handle)?;
        self.regs.get(i).map(|e| e.reg.clone())
    }

    /// Every registration with its file and handle.
    pub(crate) fn all_regs(&self) -> KVec<(u64, u32, Arc<Reg>)> {
        let mut v = KVec::new();
        for (_, e) in self.regs.iter() {
            // A sweep or report missing an entry on allocation failure is
            // acceptable.
            let _ = v.push((e.file, e.handle, e.reg.clone()), GFP_KERNEL);
        }
        v
    }
}
