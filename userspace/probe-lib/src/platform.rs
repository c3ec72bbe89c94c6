//! What kind of platform a GPU sits on, as far as GPUDirect RDMA is
//! concerned: a discrete PCIe GPU (the case peer memory and dma-buf are made
//! for), an integrated GPU sharing the CPU's memory (Tegra/Jetson, DGX
//! Spark's GB10: no GPUDirect RDMA at all), or a GPU coherent with the CPU
//! over NVLink-C2C (Grace Hopper, Grace Blackwell: GPUDirect RDMA exists,
//! the NIC reaches GPU memory at its coherent system address).
//! docs/facts/libraries.md ("Platforms") gives the sources.
//!
//! Without a GPU process the evidence is the device tree (Tegra) and the
//! model name the NVIDIA driver shows; with libcuda open, the device
//! attributes decide.

use serde::Serialize;

/// The platform kind of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A PCIe GPU with its own memory behind a BAR.
    Discrete,
    /// Tegra / Jetson SoC GPU (device tree `nvidia,tegra*`).
    Tegra,
    /// Any other integrated GPU on unified memory (DGX Spark's GB10).
    Integrated,
    /// GPU memory coherent with the CPU (NVLink-C2C: GH200, GB200, GB300).
    Coherent,
}

impl Kind {
    /// Whether a peer-memory client (or dma-buf) can give a NIC GPU memory
    /// (the discrete-GPU GPUDirect RDMA this tool checks).
    pub fn has_gpudirect_rdma(self) -> bool {
        matches!(self, Kind::Discrete | Kind::Coherent)
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Discrete => "discrete PCIe GPU",
            Kind::Tegra => "Tegra integrated GPU",
            Kind::Integrated => "integrated GPU, unified memory",
            Kind::Coherent => "CPU-coherent GPU (NVLink-C2C)",
        }
    }

    /// One sentence on what it means for GPUDirect RDMA.
    pub fn meaning(self) -> &'static str {
        match self {
            Kind::Discrete => "GPU memory is reached through the GPU's PCIe BAR1",
            Kind::Tegra => "the GPU shares the CPU's memory and has no PCIe BAR for a NIC to reach: the peer-memory path (nvidia-peermem, peermem-rs) and GPU dma-buf do not apply; Tegra's own nvidia_p2p API works on cudaHostAlloc memory, which a NIC registers as host memory",
            Kind::Integrated => "on unified memory, memory from cudaMalloc is not coherently reachable by PCIe devices: NVIDIA documents no GPUDirect RDMA here (neither nvidia-peermem nor dma-buf)",
            Kind::Coherent => "GPU memory sits in the system address space, coherent with the CPU: GPUDirect RDMA exists (peer memory and dma-buf); the NIC reaches it at its C2C address unless a PCIe (BAR1) mapping is asked for",
        }
    }
}

/// The kind implied by the driver's model name, when the name alone says
/// it: `NVIDIA GB10` is DGX Spark's integrated GPU; GH200, GB200 and GB300
/// are Grace superchips with NVLink-C2C.
pub fn from_model(model: &str) -> Option<Kind> {
    let words: Vec<&str> = model.split_whitespace().collect();
    if words.contains(&"GB10") {
        return Some(Kind::Integrated);
    }
    ["GH200", "GB200", "GB300"]
        .iter()
        .any(|c| words.iter().any(|w| w.starts_with(c)))
        .then_some(Kind::Coherent)
}

/// The kind from what is known: the device tree's Tegra mark, the model
/// name, and (with libcuda) CU_DEVICE_ATTRIBUTE_INTEGRATED and
/// CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES.
/// The attributes win over the name; Tegra wins over both.
pub fn classify(
    tegra: bool,
    model: Option<&str>,
    integrated: Option<bool>,
    host_page_tables: Option<bool>,
) -> Kind {
    if tegra {
        return Kind::Tegra;
    }
    match (integrated, host_page_tables) {
        (Some(true), _) => Kind::Integrated,
        (Some(false), Some(true)) => Kind::Coherent,
        (Some(false), Some(false)) => Kind::Discrete,
        _ => model.and_then(from_model).unwrap_or(Kind::Discrete),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names() {
        assert_eq!(from_model("NVIDIA GB10"), Some(Kind::Integrated));
        assert_eq!(from_model("NVIDIA GH200 480GB"), Some(Kind::Coherent));
        assert_eq!(from_model("NVIDIA GB200"), Some(Kind::Coherent));
        assert_eq!(from_model("NVIDIA H100 80GB HBM3"), None);
        // Not a word match: a hypothetical GB100 is no GB10.
        assert_eq!(from_model("NVIDIA GB100"), None);
    }

    #[test]
    fn attributes_decide_before_names() {
        assert_eq!(
            classify(false, Some("NVIDIA H100"), None, None),
            Kind::Discrete
        );
        assert_eq!(
            classify(false, None, Some(true), Some(true)),
            Kind::Integrated
        );
        assert_eq!(
            classify(false, Some("NVIDIA GB10"), Some(false), Some(true)),
            Kind::Coherent
        );
        assert_eq!(
            classify(false, Some("NVIDIA GH200"), Some(false), Some(false)),
            Kind::Discrete
        );
        assert_eq!(
            classify(false, Some("NVIDIA GH200"), None, None),
            Kind::Coherent
        );
        assert_eq!(
            classify(true, Some("NVIDIA H100"), Some(false), Some(false)),
            Kind::Tegra
        );
    }

    #[test]
    fn which_kinds_have_gpudirect_rdma() {
        assert!(Kind::Discrete.has_gpudirect_rdma());
        assert!(Kind::Coherent.has_gpudirect_rdma());
        assert!(!Kind::Tegra.has_gpudirect_rdma());
        assert!(!Kind::Integrated.has_gpudirect_rdma());
    }
}
