//! What NCCL (and UCX, NVSHMEM) will decide on this host: the GPU-to-NIC
//! path type against NCCL's GPUDirect RDMA level, and whether each
//! library, by version, detects a peer-memory client from the files it
//! probes (facts: docs/facts/peer-memory-core.md, "Detection").

use crate::pci::{PathVerdict, Topology};
use crate::root::SysRoot;
use serde::Serialize;

/// Path types, nearest first (nvidia-smi topo names; NCCL has no NODE and
/// counts it as PHB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum PathType {
    PIX,
    PXB,
    PHB,
    NODE,
    SYS,
}

impl PathType {
    pub fn from_topology(t: &Topology) -> Option<PathType> {
        if t.verdict == PathVerdict::NotPci {
            return None;
        }
        Some(match t.nvsmi {
            "PIX" => PathType::PIX,
            "PXB" => PathType::PXB,
            "PHB" => PathType::PHB,
            "NODE" => PathType::NODE,
            _ => PathType::SYS,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            PathType::PIX => "PIX",
            PathType::PXB => "PXB",
            PathType::PHB => "PHB",
            PathType::NODE => "NODE",
            PathType::SYS => "SYS",
        }
    }
    /// The NCCL_NET_GDR_LEVEL value that admits this path.
    pub fn nccl_level(self) -> &'static str {
        match self {
            PathType::PIX => "PIX",
            PathType::PXB => "PXB",
            PathType::PHB | PathType::NODE => "PHB",
            PathType::SYS => "SYS",
        }
    }
}

/// NCCL's default NCCL_NET_GDR_LEVEL.
pub const NCCL_DEFAULT_GDR_LEVEL: PathType = PathType::PXB;

/// NCCL's GPUDirect RDMA decision for one GPU and one NIC.
#[derive(Debug, Clone, Serialize)]
pub struct NcclPath {
    pub gpu: String,
    pub rdma_device: String,
    /// None: the NIC is not a PCI device (soft-RoCE): no GPUDirect at all.
    pub path_type: Option<PathType>,
    /// NCCL with default settings uses GPUDirect RDMA on this pair (given a
    /// working mechanism).
    pub gdr_by_default: bool,
    /// The NCCL_NET_GDR_LEVEL that would change the decision: the level
    /// that enables it (when off by default) or one that disables it.
    pub gdr_level_to_enable: Option<&'static str>,
    pub gdr_level_to_disable: Option<&'static str>,
}

pub fn predict(gpu: &str, nic: &str, t: Option<&Topology>) -> NcclPath {
    let pt = t.and_then(PathType::from_topology);
    let on = pt.is_some_and(|p| p <= NCCL_DEFAULT_GDR_LEVEL);
    NcclPath {
        gpu: gpu.to_string(),
        rdma_device: nic.to_string(),
        path_type: pt,
        gdr_by_default: on,
        gdr_level_to_enable: pt.filter(|_| !on).map(|p| p.nccl_level()),
        gdr_level_to_disable: pt.filter(|_| on).map(|p| match p {
            PathType::PIX => "LOC",
            _ => "PIX",
        }),
    }
}

/// One library version range and whether it detects a client here.
#[derive(Debug, Clone, Serialize)]
pub struct Detection {
    pub library: &'static str,
    pub versions: &'static str,
    /// The files it tests for existence (any one suffices).
    pub probes: Vec<&'static str>,
    /// The first probe that exists here.
    pub found: Option<&'static str>,
}

const NV_MEM: &str = "/sys/kernel/mm/memory_peers/nv_mem/version";
const NV_MEM_NC: &str = "/sys/kernel/mm/memory_peers/nv_mem_nc/version";
const MOD_PEERMEM: &str = "/sys/module/nvidia_peermem/version";
const MOD_NV_PEER_MEM: &str = "/sys/module/nv_peer_mem/version";

/// The libraries' probes, by version.
pub fn probes() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    vec![
        ("NCCL", ">= 2.23.4", vec![NV_MEM, NV_MEM_NC, MOD_PEERMEM]),
        ("NCCL", "<= 2.22", vec![NV_MEM, NV_MEM_NC]),
        ("UCX", ">= 1.18", vec![NV_MEM, MOD_PEERMEM, MOD_NV_PEER_MEM]),
        ("UCX, UCC, GASNet, nvidia-fs", "UCX <= 1.17", vec![NV_MEM]),
        (
            "NVSHMEM",
            "all",
            vec![
                "/sys/kernel/mm/memory_peers/nv_mem",
                "/sys/kernel/mm/memory_peers/nvidia-peermem",
                MOD_PEERMEM,
            ],
        ),
    ]
}

pub fn detection(root: &SysRoot) -> Vec<Detection> {
    probes()
        .into_iter()
        .map(|(library, versions, probes)| Detection {
            library,
            versions,
            found: probes.iter().copied().find(|p| root.exists(p)),
            probes,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    fn names(d: &[Detection]) -> Vec<(String, bool)> {
        d.iter()
            .map(|x| (format!("{} {}", x.library, x.versions), x.found.is_some()))
            .collect()
    }

    #[test]
    fn default_level_admits_pix_and_pxb_only() {
        let t = |nvsmi: &'static str, verdict| Topology {
            verdict,
            nvsmi,
            bridges: vec![],
            acs_redirecting: vec![],
            acs_unknown: false,
            detail: String::new(),
        };
        let p = predict("g", "n", Some(&t("PIX", PathVerdict::SameSwitch)));
        assert!(p.gdr_by_default);
        assert_eq!(p.gdr_level_to_disable, Some("LOC"));
        let p = predict("g", "n", Some(&t("PXB", PathVerdict::SameSwitch)));
        assert!(p.gdr_by_default);
        assert_eq!(p.gdr_level_to_disable, Some("PIX"));
        let p = predict("g", "n", Some(&t("PHB", PathVerdict::AcrossHostBridge)));
        assert!(!p.gdr_by_default);
        assert_eq!(p.gdr_level_to_enable, Some("PHB"));
        let p = predict("g", "n", Some(&t("NODE", PathVerdict::AcrossHostBridge)));
        assert_eq!(
            (p.path_type, p.gdr_level_to_enable),
            (Some(PathType::NODE), Some("PHB"))
        );
        let p = predict("g", "n", Some(&t("SYS", PathVerdict::AcrossSockets)));
        assert_eq!(p.gdr_level_to_enable, Some("SYS"));
        let p = predict("g", "rxe0", None);
        assert!(!p.gdr_by_default && p.path_type.is_none() && p.gdr_level_to_enable.is_none());
    }

    #[test]
    fn nvidia_peermem_without_memory_peers_is_seen_only_by_new_versions() {
        // DOCA-OFED's newest cores: no memory_peers sysfs, only the module.
        let d = detection(&fixture("peermem-loaded"));
        assert_eq!(
            names(&d),
            [
                ("NCCL >= 2.23.4".to_string(), true),
                ("NCCL <= 2.22".to_string(), false),
                ("UCX >= 1.18".to_string(), true),
                ("UCX, UCC, GASNet, nvidia-fs UCX <= 1.17".to_string(), false),
                ("NVSHMEM all".to_string(), true),
            ]
        );
        assert_eq!(d[0].found, Some(MOD_PEERMEM));
    }

    #[test]
    fn memory_peers_nv_mem_is_seen_by_all() {
        let d = detection(&fixture("switch"));
        assert!(d.iter().all(|x| x.found.is_some()), "{d:?}");
        let d = detection(&fixture("dmabuf-only"));
        assert!(d.iter().all(|x| x.found.is_none()), "{d:?}");
    }
}
