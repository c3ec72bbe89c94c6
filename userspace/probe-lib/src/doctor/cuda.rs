//! doctor's CUDA rows: the device attributes that say which GPU memory
//! either path can register (docs/facts/field-notes.md, row 17), and
//! memory from allocators that do not mark it for GPUDirect RDMA, PyTorch's
//! `expandable_segments` among them, which no peer-memory client can
//! register (row 19).
//!
//! The attributes come from libcuda (`cuInit` and `cuDeviceGetAttribute`:
//! no context, no allocation), and only on the live host: a saved tree
//! has no driver to ask.

use super::{item, Item};
use crate::cuda::{CudaState, Gpu};
use crate::libraries::{dmabuf_ready, DmaBuf};
use crate::report::Status;
use crate::root::SysRoot;
use crate::sysinfo::{DriverFlavour, SysState};

/// The rows, for a host with an NVIDIA GPU on the PCI bus.
pub(super) fn items(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) {
    if sys.gpus.is_empty() {
        return;
    }
    let state = if root.is_live() {
        Ok(crate::cuda::state())
    } else {
        Err("doctor reads a saved tree, not this host's driver")
    };
    items.extend(attributes(sys, state));
    items.push(vmm(sys, alloc_conf_from_process().as_ref()));
}

/// Yes, no, or unknown (a driver older than the attribute).
fn word(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    }
}

/// One row per GPU CUDA sees; one "unknown" row, with why, when CUDA could
/// not be asked.
fn attributes(sys: &SysState, state: Result<&CudaState, &str>) -> Vec<Item> {
    let unknown = |why: String| {
        vec![item("cuda", "GPUDirect attributes", Status::Info, format!("unknown ({why})"))
            .detail("CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED (116), ..._GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED (110) and ..._DMA_BUF_SUPPORTED (124) come from libcuda on the host itself: `peermem-probe check` prints them on its GPU line")]
    };
    let gpus = match state {
        Err(why) => return unknown(why.to_string()),
        Ok(CudaState::Missing) => return unknown("no libcuda.so on this host".into()),
        Ok(CudaState::Broken(e)) => return unknown(format!("libcuda: {e}")),
        Ok(CudaState::Ready { gpus, .. }) if gpus.is_empty() => {
            return unknown("CUDA sees no GPU (CUDA_VISIBLE_DEVICES, permissions)".into())
        }
        Ok(CudaState::Ready { gpus, .. }) => gpus,
    };
    let open = sys
        .nvidia
        .as_ref()
        .is_some_and(|n| n.flavour == DriverFlavour::Open);
    gpus.iter().map(|g| attribute_row(g, open)).collect()
}

fn attribute_row(g: &Gpu, open_driver: bool) -> Item {
    let name = format!("GPU {} attributes", g.pci_bus_id);
    let value = format!(
        "GPUDirect RDMA {} (116), with VMM {} (110), dma-buf {} (124)",
        word(g.gpu_direct_rdma_supported),
        word(g.gpu_direct_rdma_with_vmm),
        word(Some(g.dma_buf_supported))
    );
    let it = |st, detail: &str| item("cuda", name.clone(), st, value.clone()).detail(detail);
    if g.gpu_direct_rdma_supported == Some(false) {
        return it(Status::Warn, "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED is 0: no third-party device may pin or map this GPU's memory, by either path (GeForce, integrated GPUs)")
            .remedy("a data-center or professional GPU for GPUDirect RDMA; register cudaHostAlloc memory as host memory meanwhile");
    }
    if g.gpu_direct_rdma_with_vmm == Some(false) {
        return it(Status::Warn, "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0: cuMemCreate cannot mark memory gpuDirectRDMACapable, so VMM memory (NCCL's default buffers since 2.19, PyTorch's expandable_segments) is out of reach of every peer-memory client")
            .remedy("NCCL_CUMEM_ENABLE=0 for NCCL's buffers; a newer driver; or dma-buf, which exports such memory");
    }
    if !g.dma_buf_supported && open_driver {
        return it(Status::Warn, "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 although the open kernel modules are loaded: no library will export this GPU's memory as a dma-buf (NCCL, UCX and NVSHMEM check this attribute), only the peer-memory path is left")
            .remedy("a CUDA driver of 11.7 or newer; check that the loaded nvidia.ko is the open flavour `nvidia-smi -q` reports");
    }
    let dmabuf = if g.dma_buf_supported {
        "the driver exports dma-buf"
    } else {
        "no dma-buf export (the proprietary kernel module: the NVIDIA driver row says so)"
    };
    it(
        Status::Info,
        &format!("the GPU takes GPUDirect RDMA, also on cuMemCreate memory marked gpuDirectRDMACapable; {dmabuf}"),
    )
}

/// PyTorch's allocator settings as this process sees them: the variable
/// and whether `expandable_segments` is on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AllocConf {
    var: &'static str,
    expandable: bool,
}

/// Reads `expandable_segments:True|False` from a `key:value,...` list.
fn parse_alloc_conf(var: &'static str, text: &str) -> AllocConf {
    let expandable = text.split(',').any(|kv| {
        kv.split_once(':').is_some_and(|(k, v)| {
            k.trim() == "expandable_segments" && v.trim().eq_ignore_ascii_case("true")
        })
    });
    AllocConf { var, expandable }
}

/// PyTorch reads `PYTORCH_ALLOC_CONF` and, before it, the older
/// `PYTORCH_CUDA_ALLOC_CONF`.
fn alloc_conf_from_process() -> Option<AllocConf> {
    ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .into_iter()
        .find_map(|v| std::env::var(v).ok().map(|t| parse_alloc_conf(v, &t)))
}

/// The row for memory from VMM allocators that leave it unmarked: only
/// dma-buf registers it. Whether dma-buf works decides it, per RDMA device.
fn vmm(sys: &SysState, conf: Option<&AllocConf>) -> Item {
    let name = "VMM / expandable_segments memory";
    let facts = "memory from cuMemCreate without the gpuDirectRDMACapable flag (PyTorch's expandable_segments allocator leaves it unset) cannot be pinned through NVIDIA's P2P API (CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE 0), so ibv_reg_mr on it fails whatever peer-memory client is loaded; only a dma-buf export registers it";
    let nics: Vec<_> = sys.rdma.iter().filter(|r| r.pci.is_some()).collect();
    let verdicts: Vec<(String, DmaBuf)> = nics
        .iter()
        .map(|n| (n.name.clone(), dmabuf_ready(sys, n)))
        .collect();
    let works: Vec<&str> = verdicts
        .iter()
        .filter(|(_, d)| *d == DmaBuf::Yes)
        .map(|(n, _)| n.as_str())
        .collect();
    let unknown: Vec<String> = verdicts
        .iter()
        .filter_map(|(n, d)| match d {
            DmaBuf::Unknown(w) => Some(format!("{n}: {w}")),
            _ => None,
        })
        .collect();
    let here = if nics.is_empty() {
        "no RDMA device with a PCI function here".to_string()
    } else if !works.is_empty() {
        format!("dma-buf works here with {}", works.join(", "))
    } else if !unknown.is_empty() {
        format!(
            "whether dma-buf works here is unknown ({})",
            unknown.join("; ")
        )
    } else {
        let why: Vec<String> = verdicts
            .iter()
            .filter_map(|(n, d)| match d {
                DmaBuf::No(w) => Some(format!("{n}: {w}")),
                _ => None,
            })
            .collect();
        format!("dma-buf does not work here ({})", why.join("; "))
    };
    let no_dmabuf = !nics.is_empty() && works.is_empty() && unknown.is_empty();
    match conf {
        Some(c) if c.expandable && no_dmabuf => {
            item("memory", name, Status::Warn, format!("expandable_segments:True ({})", c.var))
                .detail(format!("{facts}; {here}: tensors from this allocator cannot be registered with an RDMA device"))
                .remedy("expandable_segments:False where buffers are registered for RDMA (or allocate those buffers outside the caching allocator), or make dma-buf work (the dma-buf rows)")
        }
        Some(c) if c.expandable => item("memory", name, Status::Info, format!("expandable_segments:True ({})", c.var))
            .detail(format!("{facts}; {here}: a framework has to register these tensors through dma-buf (Mooncake with WITH_NVIDIA_PEERMEM=0, NCCL's dma-buf path)")),
        Some(c) => item("memory", name, Status::Info, format!("expandable_segments off ({})", c.var))
            .detail(format!("{facts}; {here}")),
        None => item("memory", name, Status::Info, "no PyTorch allocator setting in doctor's environment")
            .detail(format!("{facts}; {here}; doctor sees only its own environment, not the job's (PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF)")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testtree::{mk, tree};
    use super::*;
    use crate::cuda::CudaError;
    use crate::fixture;
    use crate::sysinfo::KernelConfig;

    fn gpu(gdr: Option<bool>, vmm: Option<bool>, dmabuf: bool) -> Gpu {
        Gpu {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            pci_bus_id: "0000:03:00.0".into(),
            dma_buf_supported: dmabuf,
            gpu_direct_rdma_supported: gdr,
            gpu_direct_rdma_with_vmm: vmm,
            flush_writes_options: None,
            writes_ordering: None,
            integrated: Some(false),
            host_page_tables: Some(false),
            platform: crate::platform::Kind::Discrete,
        }
    }

    fn ready(g: Gpu) -> CudaState {
        CudaState::Ready {
            driver_version: 13000,
            gpus: vec![g],
        }
    }

    /// Asserts a row's status and that `text` is in its value, detail or
    /// remedy.
    fn expect(it: &Item, status: Status, text: &str) {
        assert_eq!(it.status, status, "{it:?}");
        let all = [Some(&it.value), it.detail.as_ref(), it.remedy.as_ref()];
        assert!(
            all.iter().flatten().any(|t| t.contains(text)),
            "{text:?} not in {it:?}"
        );
    }

    #[test]
    fn each_attribute_that_is_zero_is_named_with_what_it_costs() {
        let sys = SysState::gather(&fixture("switch"));
        let row = |g| attributes(&sys, Ok(&ready(g))).remove(0);
        for (g, status, text) in [
            (
                gpu(Some(true), Some(true), true),
                Status::Info,
                "GPUDirect RDMA yes (116), with VMM yes (110), dma-buf yes (124)",
            ),
            (
                gpu(Some(false), Some(false), false),
                Status::Warn,
                "GPU_DIRECT_RDMA_SUPPORTED is 0",
            ),
            (
                gpu(Some(true), Some(false), true),
                Status::Warn,
                "NCCL_CUMEM_ENABLE=0",
            ),
            // The switch fixture runs the open modules: no export there is odd.
            (
                gpu(Some(true), Some(true), false),
                Status::Warn,
                "although the open kernel modules are loaded",
            ),
            // A driver too old to know an attribute: "?", not a verdict.
            (
                gpu(None, None, true),
                Status::Info,
                "GPUDirect RDMA ? (116), with VMM ? (110)",
            ),
        ] {
            expect(&row(g), status, text);
        }
    }

    #[test]
    fn attributes_that_cannot_be_read_are_unknown_with_why() {
        let sys = SysState::gather(&fixture("switch"));
        let one = |s: Result<&CudaState, &str>| {
            let v = attributes(&sys, s);
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].status, Status::Info, "{v:?}");
            v[0].value.clone()
        };
        assert_eq!(one(Err("a saved tree")), "unknown (a saved tree)");
        assert_eq!(
            one(Ok(&CudaState::Missing)),
            "unknown (no libcuda.so on this host)"
        );
        let broken = CudaState::Broken(CudaError {
            call: "cuInit",
            code: 100,
            name: "CUDA_ERROR_NO_DEVICE".into(),
        });
        assert!(one(Ok(&broken)).starts_with("unknown (libcuda: cuInit"));
        // doctor on a fixture tree never asks this machine's driver.
        let mut items = Vec::new();
        super::items(&fixture("switch"), &sys, &mut items);
        let it = items.iter().find(|i| i.area == "cuda").expect("a cuda row");
        assert!(it.value.contains("saved tree"), "{it:?}");
        // No GPU on the bus: no CUDA rows at all.
        let t = tree("cuda-nogpu");
        mk(&t, "proc/driver/nvidia/version", b"");
        let root = SysRoot::at(&*t);
        let mut items = Vec::new();
        super::items(&root, &SysState::gather(&root), &mut items);
        assert!(items.is_empty(), "{items:?}");
    }

    #[test]
    fn the_allocator_setting_is_read_from_its_list() {
        let c = parse_alloc_conf(
            "PYTORCH_ALLOC_CONF",
            "max_split_size_mb:128, expandable_segments:True",
        );
        assert!(c.expandable);
        assert!(!parse_alloc_conf("V", "expandable_segments:False").expandable);
        assert!(!parse_alloc_conf("V", "my_expandable_segments:True").expandable);
        assert!(!parse_alloc_conf("V", "").expandable);
    }

    #[test]
    fn expandable_segments_warn_only_where_dma_buf_cannot_register_them() {
        let conf = |var, expandable| Some(AllocConf { var, expandable });
        let on = conf("PYTORCH_ALLOC_CONF", true);
        let odp = Some("CONFIG_INFINIBAND_ON_DEMAND_PAGING=y\n");
        let no_odp = Some("# CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set\n");
        // switch: open driver, mlx5 under the GPU's switch.
        let mut sys = SysState::gather(&fixture("switch"));
        for (config, c, status, text) in [
            (
                odp,
                on.clone(),
                Status::Info,
                "dma-buf works here with mlx5_0",
            ),
            // Without on-demand paging mlx5 takes no dma-buf.
            (
                no_odp,
                on.clone(),
                Status::Warn,
                "expandable_segments:False",
            ),
            // No kernel configuration: unknown, so no verdict.
            (None, on.clone(), Status::Info, "is unknown"),
            // Off, or not in doctor's environment: information.
            (
                no_odp,
                conf("PYTORCH_CUDA_ALLOC_CONF", false),
                Status::Info,
                "expandable_segments off",
            ),
            (no_odp, None, Status::Info, "only its own environment"),
        ] {
            sys.kconfig = config.map(|t| KernelConfig::new("c", t));
            expect(&vmm(&sys, c.as_ref()), status, text);
        }
    }
}
