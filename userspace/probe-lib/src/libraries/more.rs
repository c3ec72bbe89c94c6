//! The decisions of the frameworks that do not ask the system the way
//! NCCL, UCX and NVSHMEM do (PyTorch's Gloo goes by module name, Mooncake
//! by a setting), and of GPU-initiated networking (NCCL GIN, UCX GDA, DOCA
//! GPUNetIO). The rules, with file and version, are in
//! docs/facts/libraries.md; the failures users report are rows 15, 16 and
//! 18 of docs/facts/field-notes.md.

use super::{peer_found, Decision, DmaBuf, Env, Route};
use crate::rdma::RdmaDev;
use crate::sysinfo::SysState;

/// One GPU and RDMA device, with what the common rules already found.
pub(super) struct Pair<'a> {
    pub sys: &'a SysState,
    pub env: &'a Env,
    pub det: &'a [crate::nccl::Detection],
    pub nic: &'a RdmaDev,
    pub gpu: &'a str,
    pub dmabuf: &'a DmaBuf,
}

impl Pair<'_> {
    fn decision(
        &self,
        library: &'static str,
        route: Route,
        why: String,
        rule: &'static str,
    ) -> Decision {
        Decision {
            library,
            gpu: self.gpu.to_string(),
            rdma_device: self.nic.name.clone(),
            route,
            why,
            rule,
            remedy: None,
        }
    }

    fn mlx5(&self) -> bool {
        self.nic
            .driver
            .as_deref()
            .is_some_and(|d| d.starts_with("mlx5"))
    }

    /// A peer-memory client can serve `ibv_reg_mr` on GPU memory here (any
    /// module name: the core asks every registered client).
    fn client_serves(&self) -> bool {
        self.sys.peer_interface != Some(false) && self.sys.has_peer_client()
    }

    /// The loaded client modules that a test of the module name
    /// `nvidia_peermem` (and, for gloo, `nv_peer_mem`) misses: peermem-rs
    /// built under its own name.
    fn unnamed_client(&self) -> Option<&'static str> {
        self.sys.module("peermem_rs").map(|_| "peermem_rs")
    }
}

/// What the DKMS package's name gives the tests of a module name.
const RENAME: &str = "load peermem-rs under the module name nvidia_peermem: the DKMS package installs it so; a build from source takes `make PEERMEM_NAME=nvidia_peermem`";

pub const RULE_GLOO: &str = "gloo (pytorch/gloo): gloo/transport/ibverbs/device.cc hasNvPeerMem() looks for a loaded module named nv_peer_mem or nvidia_peermem in /proc/modules (kernelModules(), gloo/common/linux.cc); Device::hasGPUDirect() returns it. PyTorch: torch/csrc/distributed/c10d/ProcessGroupGlooCuda.cpp runs CUDA allreduce on device memory only when hasGPUDirect(), else through pinned host copies; GlooDeviceFactory.cpp builds the ibverbs device for GLOO_DEVICE_TRANSPORT=IBVERBS";
pub const RULE_MOONCAKE: &str = "Mooncake (kvcache-ai/Mooncake): mooncake-transfer-engine/src/transport/rdma_transport/rdma_context.cpp registerMemoryRegionInternal(): ibv_reg_mr on GPU memory with WITH_NVIDIA_PEERMEM, else cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr; older releases take it as a CMake option (mooncake-common/common.cmake, default ON), newer ones read the environment (mooncake-common/src/environ.cpp, default true); neither probes for a client";
pub const RULE_GIN_GDAKI: &str = "NCCL 2.30.6 GIN, GDAKI backend: src/transport/net_ib/gin.cc ncclGinIbGdakiInitOnce() (mlx5 NICs only), ncclGinIbGdrSupport(gdaki): ncclIbPeerMemSupport() (src/transport/net_ib/gdr.cc: /sys/module/nvidia_peermem/version only, no memory_peers file) or ncclIbDmaBufSupport(); at connect CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED";
pub const RULE_GIN_PROXY: &str = "NCCL 2.30.6 GIN, proxy backend: src/transport/net_ib/gin.cc ncclGinIbGdrSupport(proxy): ncclIbGdrSupport() (the peer-memory files of NCCL >= 2.23.4) or ncclIbDmaBufSupport()";
pub const RULE_GDA: &str = "UCX GDA (openucx/ucx): src/uct/ib/mlx5/gdaki/gdaki.c, mlx5 DEVX only; the GPU-resident QP and CQ (cuMemAlloc) are registered with mlx5dv_devx_umem_reg_ex: with a dma-buf fd when uct_gdaki_is_dmabuf_supported() (the IB MD takes dma-buf, CUDA exports it and a trial DEVX UMEM takes one), else by address";
pub const RULE_GPUNETIO: &str = "DOCA GPUNetIO: doca_gpu_dmabuf_fd() then doca_mmap_set_dmabuf_memrange(); when the export fails, doca_mmap_set_memrange() by address, the nvidia-peermem path (DOCA's samples; the copy NCCL carries in src/transport/net_ib/gdaki/doca-gpunetio/src/doca_gpunetio.cpp); ConnectX/BlueField only; DOCA's setup guide also has GDRCopy's gdrdrv loaded for the CPU's access to GPU memory";

/// A boolean as Mooncake's environment parser reads one: None when unset
/// or not one of its words (it then keeps its default, true).
fn mooncake_bool(v: &Option<String>) -> Option<bool> {
    let s = v.as_deref()?.trim().to_ascii_lowercase();
    match s.as_str() {
        "1" | "true" | "on" | "yes" | "enable" | "enabled" => Some(true),
        "" | "0" | "false" | "off" | "no" | "disable" | "disabled" => Some(false),
        _ => None,
    }
}

/// PyTorch's Gloo and Mooncake.
pub(super) fn frameworks(p: &Pair) -> Vec<Decision> {
    vec![gloo(p), mooncake(p)]
}

fn gloo(p: &Pair) -> Decision {
    let lib = "PyTorch Gloo (ibverbs)";
    let mk = |route, why: String| p.decision(lib, route, why, RULE_GLOO);
    if p.nic.pci.is_none() {
        return mk(Route::None, "the NIC is a software device".into());
    }
    let transport = p.env.gloo_device_transport.as_deref().map(str::trim);
    if let Some(t) = transport.filter(|t| !t.eq_ignore_ascii_case("IBVERBS")) {
        return mk(
            Route::None,
            format!("GLOO_DEVICE_TRANSPORT={t}: gloo's ibverbs transport is not used"),
        );
    }
    let under = if transport.is_some() {
        String::new()
    } else {
        "with GLOO_DEVICE_TRANSPORT=IBVERBS (unset here: PyTorch's Gloo then uses TCP, through host memory) and a PyTorch built with gloo's ibverbs transport: ".to_string()
    };
    let named = ["nv_peer_mem", "nvidia_peermem"]
        .into_iter()
        .find(|m| p.sys.module(m).is_some());
    if let Some(m) = named {
        return mk(
            Route::PeerMemory,
            format!("{under}gloo finds module {m} in /proc/modules and reduces CUDA tensors in GPU memory (ibv_reg_mr on device pointers)"),
        );
    }
    if let (Some(ours), true) = (p.unnamed_client(), p.client_serves()) {
        let mut d = mk(
            Route::None,
            format!("{under}{ours} is loaded under its own module name, which gloo does not look for: gloo reports no GPUDirect and PyTorch copies CUDA tensors through pinned host memory, although ibv_reg_mr on GPU memory would work here"),
        );
        d.remedy = Some(RENAME.into());
        return d;
    }
    mk(
        Route::None,
        format!("{under}no module named nv_peer_mem or nvidia_peermem is loaded: gloo copies CUDA tensors through pinned host memory (it has no dma-buf path)"),
    )
}

fn mooncake(p: &Pair) -> Decision {
    let lib = "Mooncake transfer engine";
    let mk = |route, why: String| p.decision(lib, route, why, RULE_MOONCAKE);
    if p.nic.pci.is_none() {
        return mk(Route::None, "the NIC is a software device".into());
    }
    let build = "; a release that reads WITH_NVIDIA_PEERMEM only at build time (the CMake option) decides by how it was built, which doctor cannot see";
    if mooncake_bool(&p.env.with_nvidia_peermem) == Some(false) {
        return match p.dmabuf {
            DmaBuf::Yes => mk(
                Route::DmaBuf,
                format!("WITH_NVIDIA_PEERMEM=0: dma-buf, which works here{build}"),
            ),
            DmaBuf::Unknown(w) => mk(
                Route::Unknown,
                format!("WITH_NVIDIA_PEERMEM=0: dma-buf, without asking first whether it works ({w}){build}"),
            ),
            DmaBuf::No(w) => {
                let mut d = mk(
                    Route::DmaBuf,
                    format!("WITH_NVIDIA_PEERMEM=0: dma-buf, without asking first, but {w}: its registrations of GPU memory will fail{build}"),
                );
                d.remedy = Some("unset WITH_NVIDIA_PEERMEM and load a peer-memory client, or make dma-buf work (the dma-buf rows above)".into());
                d
            }
        };
    }
    let default = "WITH_NVIDIA_PEERMEM unset or true here (the default): ibv_reg_mr on GPU memory, without looking for a client first";
    if p.client_serves() {
        return mk(
            Route::PeerMemory,
            format!(
                "{default}; a peer-memory client is loaded ({}){build}",
                p.sys.peer_modules().join(", ")
            ),
        );
    }
    let cause = if p.sys.peer_interface == Some(false) {
        "this kernel has no peer-memory interface"
    } else {
        "no peer-memory client is loaded"
    };
    let mut d = mk(
        Route::PeerMemory,
        format!("{default}, but {cause}: its registrations of GPU memory will fail (ERR_CONTEXT){build}"),
    );
    d.remedy = Some(match p.dmabuf {
        DmaBuf::No(w) => format!("load a peer-memory client (dma-buf is no way out here: {w})"),
        _ => "WITH_NVIDIA_PEERMEM=0 in the job's environment for dma-buf (or a build with -DWITH_NVIDIA_PEERMEM=OFF), or load a peer-memory client".into(),
    });
    d
}

/// NCCL GIN (both backends), UCX GDA and DOCA GPUNetIO.
pub(super) fn gpu_initiated(p: &Pair) -> Vec<Decision> {
    vec![
        gin(p, true),
        gin(p, false),
        by_dmabuf_or_address(p, "UCX GDA", RULE_GDA),
        by_dmabuf_or_address(p, "DOCA GPUNetIO", RULE_GPUNETIO),
    ]
}

/// NCCL GIN accepts a pair through a peer-memory test first, dma-buf
/// second; GDAKI's test is the module name `nvidia_peermem` alone.
fn gin(p: &Pair, gdaki: bool) -> Decision {
    let (lib, rule) = if gdaki {
        ("NCCL GIN (GDAKI)", RULE_GIN_GDAKI)
    } else {
        ("NCCL GIN (proxy)", RULE_GIN_PROXY)
    };
    let mk = |route, why: String| p.decision(lib, route, why, rule);
    if p.nic.pci.is_none() {
        return mk(Route::None, "the NIC is a software device".into());
    }
    if gdaki && !p.mlx5() {
        return mk(
            Route::None,
            "GDAKI drives mlx5 NICs only: NCCL takes the proxy backend for this one".into(),
        );
    }
    let seen = if gdaki {
        p.sys
            .module("nvidia_peermem")
            .map(|_| "/sys/module/nvidia_peermem/version")
    } else {
        peer_found(p.det, "NCCL")
    };
    if let Some(f) = seen {
        return mk(Route::PeerMemory, format!("peer memory accepted ({f})"));
    }
    let test = if gdaki {
        "no module named nvidia_peermem is loaded (GDAKI ignores the memory_peers files)"
    } else {
        "none of NCCL's peer-memory files exists"
    };
    match p.dmabuf {
        DmaBuf::Yes => mk(Route::DmaBuf, format!("{test}; dma-buf works here")),
        DmaBuf::Unknown(w) => mk(Route::Unknown, format!("{test}; dma-buf: {w}")),
        DmaBuf::No(w) => {
            let mut d = mk(
                Route::None,
                format!("{test} and no dma-buf ({w}): GIN is unavailable on this NIC, NCCL logs \"Unable to use GIN: Peermem is not supported, nor DMA-BUF\""),
            );
            if p.client_serves() {
                d.why.push_str(&format!(
                    "; the loaded client ({}) goes unseen",
                    p.sys.peer_modules().join(", ")
                ));
                d.remedy = Some(RENAME.into());
            }
            d
        }
    }
}

/// UCX GDA and DOCA GPUNetIO: dma-buf when the export and the NIC take it,
/// else the buffer's address, which only a peer-memory client resolves.
fn by_dmabuf_or_address(p: &Pair, lib: &'static str, rule: &'static str) -> Decision {
    let mk = |route, why: String| p.decision(lib, route, why, rule);
    if p.nic.pci.is_none() || !p.mlx5() {
        return mk(
            Route::None,
            "NVIDIA's ConnectX/BlueField (mlx5) NICs only".into(),
        );
    }
    let gdr = if lib == "DOCA GPUNetIO" {
        match p.sys.module("gdrdrv") {
            Some(_) => "; GDRCopy's gdrdrv is loaded",
            None => "; GDRCopy's gdrdrv is not loaded (DOCA's setup guide has it for the CPU's access to GPU memory)",
        }
    } else {
        ""
    };
    let by_address = |not: &str| {
        if p.client_serves() {
            mk(
                Route::PeerMemory,
                format!(
                    "{not}: by address, through the loaded client ({}){gdr}",
                    p.sys.peer_modules().join(", ")
                ),
            )
        } else {
            mk(
                Route::None,
                format!("{not}, and no peer-memory client serves the address: its GPU memory cannot be registered{gdr}"),
            )
        }
    };
    match p.dmabuf {
        DmaBuf::Yes => mk(Route::DmaBuf, format!("dma-buf works here{gdr}")),
        DmaBuf::Unknown(w) if p.client_serves() => mk(
            Route::Unknown,
            format!("dma-buf if it works ({w}), else by address through the loaded client{gdr}"),
        ),
        DmaBuf::Unknown(w) => mk(Route::Unknown, format!("dma-buf if it works ({w}){gdr}")),
        DmaBuf::No(w) => by_address(&format!("no dma-buf ({w})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mooncake_reads_its_words_and_keeps_its_default_otherwise() {
        let b = |s: &str| mooncake_bool(&Some(s.to_string()));
        assert_eq!(b("0"), Some(false));
        assert_eq!(b(" Off "), Some(false));
        assert_eq!(b(""), Some(false));
        assert_eq!(b("enabled"), Some(true));
        assert_eq!(b("maybe"), None);
        assert_eq!(mooncake_bool(&None), None);
    }
}
