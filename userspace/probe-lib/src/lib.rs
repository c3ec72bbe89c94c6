//! peermem-probe's engine: proves GPUDirect RDMA works on a host, or says
//! exactly why not. The binary crate only parses arguments and prints.
//!
//! # Layers
//!
//! The modules form layers, listed bottom to top. A module uses modules of
//! its own layer or of layers below, never above, and no modules use each
//! other in a circle. The low layers return typed errors and facts; only
//! the diagnosis layer turns them into causes and remedies.
//! `tests/layers.rs` reads this list and checks the sources against it.
//!
//! 1. `trace`, `root`, `report`, `bdf`, `platform`: common ground
//!    (tracing, the filesystem root, report types and exit codes, PCI
//!    address text, a GPU's platform kind from its evidence).
//! 2. `verbs`, `cm`, `cuda`, `udmabuf`: FFI to the dlopen'd libibverbs,
//!    librdmacm and libcuda, and the kernel's udmabuf device; failures are
//!    plain values (errno, completion status, CUresult, the step that
//!    failed).
//! 3. `pci`, `rdma`, `sysinfo`, `nccl`, `libraries`: facts read from
//!    sysfs, procfs and /boot, and what each library decides from them.
//! 4. `memory`, `stream`, `loopback`: host and GPU buffers, RDMA transfers
//!    over connected QPs.
//! 5. `remedy`, `verdict`: diagnosis, from the facts and errors below to
//!    causes, remedies and verdicts.
//! 6. `check`, `bench`, `pair`, `doctor`: one report per command.

pub mod bdf;
pub mod bench;
pub mod check;
pub mod cm;
pub mod cuda;
pub mod doctor;
pub mod libraries;
pub mod loopback;
pub mod memory;
pub mod nccl;
pub mod pair;
pub mod pci;
pub mod platform;
pub mod rdma;
pub mod remedy;
pub mod report;
pub mod root;
pub mod stream;
pub mod sysinfo;
pub mod trace;
pub mod udmabuf;
pub mod verbs;
pub mod verdict;

/// The fixture trees under tests/fixtures, for unit tests.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> root::SysRoot {
    root::SysRoot::at(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}
