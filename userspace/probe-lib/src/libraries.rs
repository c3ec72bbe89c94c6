//! Which path each library will take for one GPU and one RDMA device:
//! dma-buf, peer memory (`ibv_reg_mr` on GPU memory, through a peer-memory
//! client) or none (data staged through host memory), and the rule in the
//! library's source that decides it. The rules are the libraries' own,
//! read from their sources (docs/facts/libraries.md has them with file and
//! version); the facts come from sysfs, the kernel configuration and the
//! environment of this process.

use crate::nccl::{Detection, NcclPath, PathType};
use crate::rdma::RdmaDev;
use crate::sysinfo::{kernel_version, DriverFlavour, SysState};
use serde::Serialize;

/// The path a library takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    DmaBuf,
    PeerMemory,
    /// No GPUDirect RDMA: the library stages through host memory, or, where
    /// it has no such fallback (plain verbs users, GPU-initiated
    /// networking), it fails; the decision's `why` says which.
    None,
    /// The facts are not enough to say (e.g. no kernel configuration).
    Unknown,
}

impl Route {
    pub fn label(self) -> &'static str {
        match self {
            Route::DmaBuf => "dma-buf",
            Route::PeerMemory => "peer memory",
            Route::None => "none (no GPUDirect RDMA)",
            Route::Unknown => "unknown",
        }
    }
}

/// One library's decision for one GPU and RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub library: &'static str,
    pub gpu: String,
    pub rdma_device: String,
    pub route: Route,
    /// Why, in this host's terms.
    pub why: String,
    /// The rule and where it is written (file and version).
    pub rule: &'static str,
    /// What to do when the library will fail here, or will miss a path
    /// that works (doctor makes the row a warning); None otherwise.
    #[serde(skip)]
    pub remedy: Option<String>,
}

/// Whether dma-buf can work for a pair, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmaBuf {
    Yes,
    No(String),
    Unknown(String),
}

/// The environment variables the libraries read (this process's).
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub nccl_dmabuf_enable: Option<String>,
    pub nccl_net_gdr_level: Option<String>,
    pub ucx_ib_gpu_direct_rdma: Option<String>,
    pub nvshmem_ib_disable_dmabuf: Option<String>,
    pub fi_hmem_cuda_use_dmabuf: Option<String>,
    /// PyTorch's Gloo transport (`IBVERBS` selects gloo's verbs transport).
    pub gloo_device_transport: Option<String>,
    /// Mooncake's choice between `ibv_reg_mr` and dma-buf (releases that
    /// read it at run time).
    pub with_nvidia_peermem: Option<String>,
}

impl Env {
    pub fn from_process() -> Env {
        let v = |k: &str| std::env::var(k).ok();
        Env {
            nccl_dmabuf_enable: v("NCCL_DMABUF_ENABLE"),
            nccl_net_gdr_level: v("NCCL_NET_GDR_LEVEL"),
            ucx_ib_gpu_direct_rdma: v("UCX_IB_GPU_DIRECT_RDMA"),
            nvshmem_ib_disable_dmabuf: v("NVSHMEM_IB_DISABLE_DMABUF"),
            fi_hmem_cuda_use_dmabuf: v("FI_HMEM_CUDA_USE_DMABUF"),
            gloo_device_transport: v("GLOO_DEVICE_TRANSPORT"),
            with_nvidia_peermem: v("WITH_NVIDIA_PEERMEM"),
        }
    }
}

/// A boolean setting as the libraries parse them: 0/n/no/false is off.
fn off(v: &Option<String>) -> bool {
    v.as_deref()
        .map(|s| s.trim().to_ascii_lowercase())
        .is_some_and(|s| matches!(s.as_str(), "0" | "n" | "no" | "false" | "off"))
}

fn on(v: &Option<String>) -> bool {
    v.as_deref()
        .map(|s| s.trim().to_ascii_lowercase())
        .is_some_and(|s| matches!(s.as_str(), "1" | "y" | "yes" | "true" | "on"))
}

pub const RULE_NCCL: &str = "NCCL 2.30.6: src/init.cc dmaBufSupported() (NCCL_DMABUF_ENABLE, CUDA >= 11.7, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED); src/transport/net_ib/gdr.cc ncclIbDmaBufSupport() (ibv_reg_dmabuf_mr fd -1 not EOPNOTSUPP/EPROTONOSUPPORT) and ncclIbGdrSupport() (peer-memory files); src/transport/net.cc: useDmaBuf = useGdr && dmaBufSupport && NCCL_PTR_DMABUF, so dma-buf first, peer memory as fallback; NCCL_NET_GDR_LEVEL bounds both";
pub const RULE_UCX: &str = "UCX (openucx/ucx master): src/uct/ib/base/ib_md.c uct_ib_md_open_common() (peer memory: /sys/kernel/mm/memory_peers/nv_mem/version, /sys/module/nvidia_peermem/version, /sys/module/nv_peer_mem/version; dma-buf: uct_ib_md_check_dmabuf, ibv_reg_dmabuf_mr fd -1; both off with UCX_IB_GPU_DIRECT_RDMA=n); src/ucp/core/ucp_mm.c ucp_memh_register_internal() hands the IB MD a dma-buf fd from cuda_copy when it can take one";
pub const RULE_NVSHMEM: &str = "NVSHMEM IBRC transport: src/modules/transport/ibrc/ibrc.cpp init (dma-buf when NVSHMEM_IB_DISABLE_DMABUF is unset and CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 1, without probing the NIC; else nvshmemt_ib_common_nv_peer_mem_available() in transport_ib_common.cpp, else the transport is skipped)";
pub const RULE_LIBFABRIC: &str = "libfabric: src/hmem_cuda.c cuda_hmem_init() (FI_HMEM_CUDA_USE_DMABUF, default true, with CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED); the provider (verbs, efa) then registers through dma-buf, else ibv_reg_mr on device memory";
pub const RULE_VERBS: &str = "perftest --use_cuda, MPI over UCX's UCT directly, plain ibv_reg_mr users: ibv_reg_mr on a device pointer, which only a peer-memory client registered with ib_uverbs/ib_core serves (docs/facts/peer-memory-core.md)";

/// Whether dma-buf MRs can work between the GPUs and `nic` on this host.
pub fn dmabuf_ready(sys: &SysState, nic: &RdmaDev) -> DmaBuf {
    if nic.pci.is_none() {
        return DmaBuf::No(format!(
            "{} is a software RDMA device (rxe/siw): no dma-buf MRs",
            nic.name
        ));
    }
    match kernel_version(&sys.kernel) {
        Some(v) if v < (5, 12) => {
            return DmaBuf::No(format!(
                "kernel {} is older than 5.12, which added dma-buf MRs to ib_uverbs",
                sys.kernel
            ))
        }
        None => return DmaBuf::Unknown(format!("kernel release '{}' unreadable", sys.kernel)),
        _ => {}
    }
    match &sys.nvidia {
        Some(n) if n.flavour != DriverFlavour::Open => {
            return DmaBuf::No(format!(
            "the proprietary NVIDIA kernel module {} cannot export dma-buf (the open modules can)",
            n.version
        ))
        }
        None => return DmaBuf::Unknown("the NVIDIA driver is not loaded".into()),
        _ => {}
    }
    let mlx5 = nic.driver.as_deref().is_some_and(|d| d.starts_with("mlx5"));
    if mlx5 {
        match &sys.kconfig {
            Some(c) if !c.enabled("CONFIG_INFINIBAND_ON_DEMAND_PAGING") => {
                return DmaBuf::No(format!(
                    "CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set ({}): mlx5 refuses dma-buf MRs without it",
                    c.source
                ))
            }
            None => {
                return DmaBuf::Unknown(
                    "no kernel configuration to check CONFIG_INFINIBAND_ON_DEMAND_PAGING".into(),
                )
            }
            _ => {}
        }
    }
    DmaBuf::Yes
}

/// The file by which `library` (its newest versions) sees a peer-memory
/// client, if any.
fn peer_found(det: &[Detection], library: &str) -> Option<&'static str> {
    det.iter()
        .find(|d| d.library == library && !d.versions.contains("<="))
        .and_then(|d| d.found)
}

/// NCCL_NET_GDR_LEVEL by name (NCCL also takes numbers, whose meaning
/// changed between versions: those read as unknown).
fn gdr_level(v: &str) -> Option<PathType> {
    match v.trim().to_ascii_uppercase().as_str() {
        "PIX" => Some(PathType::PIX),
        "PXB" => Some(PathType::PXB),
        "PHB" => Some(PathType::PHB),
        "SYS" => Some(PathType::SYS),
        _ => None,
    }
}

/// The decisions of every library for one pair.
pub fn decide(
    sys: &SysState,
    det: &[Detection],
    env: &Env,
    nic: &RdmaDev,
    gpu: &str,
    path: &NcclPath,
) -> Vec<Decision> {
    let dmabuf = dmabuf_ready(sys, nic);
    let mk = |library, route, why: String, rule| Decision {
        library,
        gpu: gpu.to_string(),
        rdma_device: nic.name.clone(),
        route,
        why,
        rule,
        remedy: None,
    };
    let peer_word = |f: Option<&'static str>| match f {
        Some(p) => format!("a peer-memory client is seen ({p})"),
        None => "no peer-memory client is seen by its probe".to_string(),
    };
    // The common shape: dma-buf when enabled and possible, else peer memory.
    let pick = |enabled: bool, peer: Option<&'static str>, off_why: &str| -> (Route, String) {
        match (&dmabuf, enabled) {
            (DmaBuf::Yes, true) => (
                Route::DmaBuf,
                "dma-buf works here (open driver, kernel >= 5.12, NIC configured for it)".into(),
            ),
            (DmaBuf::Unknown(w), true) if peer.is_some() => (
                Route::Unknown,
                format!(
                    "dma-buf if it works ({w}), else peer memory: {}",
                    peer_word(peer)
                ),
            ),
            (DmaBuf::Unknown(w), true) => (
                Route::Unknown,
                format!("dma-buf if it works ({w}); {}", peer_word(peer)),
            ),
            (d, _) => {
                let not = match (d, enabled) {
                    (_, false) => off_why.to_string(),
                    (DmaBuf::No(w), _) => format!("no dma-buf: {w}"),
                    _ => String::new(),
                };
                match peer {
                    Some(_) => (Route::PeerMemory, format!("{not}; {}", peer_word(peer))),
                    None => (Route::None, format!("{not}; {}", peer_word(peer))),
                }
            }
        }
    };
    let mut out = Vec::new();

    // NCCL: the GDR level first (it bounds both mechanisms).
    let level = env.nccl_net_gdr_level.as_deref();
    let admitted = match (path.path_type, level.map(gdr_level)) {
        (None, _) => Some(false),
        (Some(p), Some(Some(l))) => Some(p <= l || (p == PathType::NODE && l >= PathType::PHB)),
        (Some(_), Some(None)) => None,
        (Some(_), None) => Some(path.gdr_by_default),
    };
    let (route, why) = match admitted {
        Some(false) if path.path_type.is_none() => (Route::None, "the NIC is not a PCI device: no GPUDirect RDMA".to_string()),
        Some(false) => (
            Route::None,
            format!(
                "path {} is farther than NCCL_NET_GDR_LEVEL={} admits (set NCCL_NET_GDR_LEVEL={} to allow it)",
                path.path_type.map(|p| p.name()).unwrap_or("?"),
                level.unwrap_or("PXB (default)"),
                path.gdr_level_to_enable.unwrap_or("SYS")
            ),
        ),
        None => (Route::Unknown, format!("NCCL_NET_GDR_LEVEL={} is not a level name this probe reads", level.unwrap_or(""))),
        Some(true) => pick(
            !off(&env.nccl_dmabuf_enable),
            peer_found(det, "NCCL"),
            "NCCL_DMABUF_ENABLE=0",
        ),
    };
    out.push(mk("NCCL", route, why, RULE_NCCL));

    // UCX: UCX_IB_GPU_DIRECT_RDMA=n turns both off.
    let (route, why) = if off(&env.ucx_ib_gpu_direct_rdma) {
        (Route::None, "UCX_IB_GPU_DIRECT_RDMA=n".to_string())
    } else if nic.pci.is_none() {
        (Route::None, "the NIC is a software device".to_string())
    } else {
        pick(true, peer_found(det, "UCX"), "")
    };
    out.push(mk("UCX", route, why, RULE_UCX));

    // NVSHMEM decides by the GPU alone: with a GPU that can export dma-buf
    // it registers through dma-buf even where the NIC cannot take one.
    let gpu_dmabuf = sys
        .nvidia
        .as_ref()
        .map(|n| n.flavour == DriverFlavour::Open);
    let nv_peer = peer_found(det, "NVSHMEM");
    let (route, why) = if on(&env.nvshmem_ib_disable_dmabuf) || gpu_dmabuf == Some(false) {
        let not = if on(&env.nvshmem_ib_disable_dmabuf) {
            "NVSHMEM_IB_DISABLE_DMABUF is set"
        } else {
            "the proprietary driver exports no dma-buf"
        };
        match nv_peer {
            Some(_) => (Route::PeerMemory, format!("{not}; {}", peer_word(nv_peer))),
            None => (
                Route::None,
                format!(
                    "{not}; {}: the IBRC transport is skipped",
                    peer_word(nv_peer)
                ),
            ),
        }
    } else if gpu_dmabuf.is_none() {
        (
            Route::Unknown,
            "the NVIDIA driver is not loaded".to_string(),
        )
    } else {
        match &dmabuf {
            DmaBuf::No(w) => (
                Route::DmaBuf,
                format!("the GPU exports dma-buf, so NVSHMEM takes dma-buf without asking the NIC, but {w}: its registrations will fail; set NVSHMEM_IB_DISABLE_DMABUF=1 to use peer memory"),
            ),
            _ => (Route::DmaBuf, "the GPU exports dma-buf (open driver)".to_string()),
        }
    };
    let mut d = mk("NVSHMEM", route, why, RULE_NVSHMEM);
    if route == Route::DmaBuf && matches!(dmabuf, DmaBuf::No(_)) {
        d.remedy = Some("NVSHMEM_IB_DISABLE_DMABUF=1 (and a peer-memory client), or a NIC and kernel with dma-buf MRs".into());
    }
    out.push(d);

    // libfabric probes no file: ibv_reg_mr works when a client is loaded.
    let loaded = (!sys.peers.is_empty() || !sys.peer_modules().is_empty())
        .then_some("a loaded peer-memory client");
    let (route, why) = pick(
        !off(&env.fi_hmem_cuda_use_dmabuf),
        loaded,
        "FI_HMEM_CUDA_USE_DMABUF=0",
    );
    out.push(mk("libfabric", route, why, RULE_LIBFABRIC));

    // Plain verbs: a registered client or nothing.
    let (route, why) = if nic.pci.is_none() {
        (
            Route::None,
            "the NIC is a software device: ibv_reg_mr on GPU memory fails".to_string(),
        )
    } else if sys.peer_interface == Some(false) {
        (
            Route::None,
            "this kernel has no peer-memory interface: ibv_reg_mr on GPU memory fails with EFAULT"
                .to_string(),
        )
    } else if loaded.is_some() {
        (
            Route::PeerMemory,
            format!(
                "peer-memory client loaded: {}",
                sys.peer_modules().join(", ")
            ),
        )
    } else {
        (
            Route::None,
            "no peer-memory client loaded: ibv_reg_mr on GPU memory fails with EFAULT".to_string(),
        )
    };
    out.push(mk(
        "ibv_reg_mr (perftest --use_cuda, UCX UCT, MPI)",
        route,
        why,
        RULE_VERBS,
    ));
    let pair = more::Pair {
        sys,
        env,
        det,
        nic,
        gpu,
        dmabuf: &dmabuf,
    };
    out.extend(more::frameworks(&pair));
    out.extend(more::gpu_initiated(&pair));
    out
}

mod more;
pub use more::{RULE_GDA, RULE_GIN_GDAKI, RULE_GIN_PROXY, RULE_GLOO, RULE_GPUNETIO, RULE_MOONCAKE};

#[cfg(test)]
mod tests;
