//! Doctor's library rows (the path each library takes per GPU and RDMA
//! device, with the rule it follows) and what the dma-buf path needs.

use super::{item, Item};
use crate::libraries::{self, Decision, Env};
use crate::nccl::{Detection, NcclPath};
use crate::platform::{self, Kind};
use crate::report::Status;
use crate::sysinfo::{kernel_version, SysState};

/// One row per GPU, RDMA device and library; returns the decisions.
pub(super) fn decisions(
    sys: &SysState,
    det: &[Detection],
    nccl: &[NcclPath],
    items: &mut Vec<Item>,
) -> Vec<Decision> {
    let env = Env::from_process();
    let mut out = Vec::new();
    for p in nccl {
        let Some(nic) = sys.rdma.iter().find(|r| r.name == p.rdma_device) else {
            continue;
        };
        for d in libraries::decide(sys, det, &env, nic, &p.gpu, p) {
            // A library that will fail, or that misses a path that works
            // here, comes with a remedy: worth a warning.
            let it = item(
                "libraries",
                format!("{} GPU {} x {}", d.library, d.gpu, d.rdma_device),
                Status::Info,
                d.route.label(),
            )
            .detail(format!("{} [rule: {}]", d.why, d.rule));
            items.push(match &d.remedy {
                Some(r) => {
                    let mut it = it.remedy(r.clone());
                    it.status = Status::Warn;
                    it
                }
                None => it,
            });
            out.push(d);
        }
    }
    out
}

/// What the dma-buf path needs, and platform facts: kernel >= 5.12 with an
/// RDMA core, CONFIG_INFINIBAND_ON_DEMAND_PAGING for mlx5, no Tegra.
pub(super) fn dmabuf_items(sys: &SysState, items: &mut Vec<Item>) {
    let ib = "CONFIG_INFINIBAND";
    // An RDMA device means a core is loaded (MLNX_OFED/DOCA-OFED bring
    // their own on a kernel built without one).
    let no_core = sys
        .kconfig
        .as_ref()
        .filter(|c| !c.enabled(ib) && sys.rdma.is_empty());
    let k = match (kernel_version(&sys.kernel), no_core) {
        (Some(_), Some(c)) => item("dma-buf", "kernel >= 5.12", Status::Fail, sys.kernel.clone())
            .detail(format!(
                "from {}: {ib} is not set and no RDMA device is present: this kernel has no RDMA core, so neither dma-buf MRs nor a peer-memory client can work",
                c.source
            ))
            .remedy("a kernel built with CONFIG_INFINIBAND (distribution kernels have it, as a module), or MLNX_OFED/DOCA-OFED, which bring their own RDMA core"),
        (Some(v), None) if v >= (5, 12) => item("dma-buf", "kernel >= 5.12", Status::Pass, sys.kernel.clone()),
        (Some(_), None) => item("dma-buf", "kernel >= 5.12", Status::Info, sys.kernel.clone())
            .detail("ib_uverbs takes dma-buf MRs from 5.12 on: only the peer-memory path exists on this kernel"),
        (None, _) => item("dma-buf", "kernel >= 5.12", Status::Info, "unknown"),
    };
    items.push(k);
    let mlx5 = sys
        .rdma
        .iter()
        .any(|r| r.driver.as_deref().is_some_and(|d| d.starts_with("mlx5")));
    let odp = "CONFIG_INFINIBAND_ON_DEMAND_PAGING";
    items.push(match &sys.kconfig {
        Some(c) if c.enabled(odp) => item("dma-buf", odp, Status::Pass, c.get(odp).unwrap_or("y"))
            .detail(format!("from {}; mlx5 also needs UMR to load the MR's pages: the `dma-buf MR on <device>` rows try a real registration", c.source)),
        Some(c) if mlx5 => item("dma-buf", odp, Status::Warn, "not set")
            .detail(format!("from {}: mlx5 refuses dma-buf MRs (EOPNOTSUPP) without on-demand paging, so only the peer-memory path works with this NIC", c.source))
            .remedy("a kernel built with CONFIG_INFINIBAND_ON_DEMAND_PAGING=y (distribution kernels have it), or a peer-memory client"),
        Some(c) => item("dma-buf", odp, Status::Info, "not set").detail(format!("from {}", c.source)),
        None => item("dma-buf", odp, Status::Info, "unknown (no kernel configuration: no /boot/config-*, no /proc/config.gz)"),
    });
    if sys.tegra {
        let k = Kind::Tegra;
        items.push(
            item("platform", "Tegra", Status::Warn, k.label())
                .detail(format!("device tree nvidia,tegra*: {}", k.meaning()))
                .remedy("register the (shared) memory as host memory; GPUDirect RDMA needs a discrete or C2C-coherent GPU"),
        );
    }
}

/// The platform row of a GPU whose model name marks an integrated or a
/// C2C-coherent part (none for a discrete GPU: the common case).
pub(super) fn platform_item(bdf: &str, model: &str) -> Option<Item> {
    let k = platform::from_model(model)?;
    let it = item("platform", format!("GPU {bdf}"), Status::Info, k.label())
        .detail(format!("model {model}: {}", k.meaning()));
    Some(if k.has_gpudirect_rdma() {
        it
    } else {
        let mut it = it.remedy("allocate communication buffers with cudaHostAlloc and register them with ibv_reg_mr (host memory)");
        it.status = Status::Warn;
        it
    })
}
