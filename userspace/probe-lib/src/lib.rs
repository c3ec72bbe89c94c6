//! peermem-probe's engine: proves GPUDirect RDMA works on a host, or says
//! exactly why not. The binary crate only parses arguments and prints.

pub mod bdf;
pub mod bench;
pub mod check;
pub mod cm;
pub mod cuda;
pub mod doctor;
pub mod loopback;
pub mod memory;
pub mod nccl;
pub mod pair;
pub mod pci;
pub mod rdma;
pub mod remedy;
pub mod report;
pub mod root;
pub mod stream;
pub mod sysinfo;
pub mod trace;
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
