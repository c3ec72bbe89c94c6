// SPDX-License-Identifier: GPL-2.0

//! peermem_rs: a GPUDirect RDMA peer-memory client written in Rust.
//!
//! The crate root holds only the module list and the `module!` declaration;
//! each concept lives in its own file.

use kernel::prelude::*;

mod bindings;
mod compat;
mod ffi;

module! {
    type: PeermemRs,
    name: "peermem_rs",
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)",
    license: "GPL",
}

struct PeermemRs;

impl kernel::Module for PeermemRs {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("peermem_rs {} loaded (kernel {})\n", ffi::version(), compat::KERNEL_SERIES);
        Ok(PeermemRs)
    }
}

impl Drop for PeermemRs {
    fn drop(&mut self) {
        pr_info!("peermem_rs unloaded\n");
    }
}
