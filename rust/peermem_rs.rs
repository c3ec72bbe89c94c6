// SPDX-License-Identifier: GPL-2.0

//! peermem_rs: a GPUDirect RDMA peer-memory client written in Rust.
//!
//! It registers with the RDMA core's peer-memory interface, pins GPU memory
//! through the NVIDIA driver's P2P API and hands DMA-mapped scatterlists to
//! the RDMA core, so that `ibv_reg_mr` works on `cudaMalloc`'d memory.
//! The crate root holds only the module list and the `module!` declaration.

mod bindings;
mod client;
mod compat;
mod driver;
mod glue;
mod logic;
mod nvidia;
mod peer_core;
mod peer_mr;
mod pin_fence;
mod sg;
mod stats;

use driver::PeermemRs;

// The module's name is chosen at build time (Kbuild's PEERMEM_NAME):
// `nvidia_peermem` is the identity NCCL, UCX and NVSHMEM detect.
#[cfg(not(peermem_nvidia_identity))]
kernel::prelude::module! {
    type: PeermemRs,
    name: "peermem_rs",
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)",
    license: "GPL",
}

#[cfg(peermem_nvidia_identity)]
kernel::prelude::module! {
    type: PeermemRs,
    name: "nvidia_peermem",
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (peermem-rs, Rust)",
    license: "GPL",
}
