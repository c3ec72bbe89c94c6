//! doctor's GPU rows (model, platform, BAR1, NVIDIA driver flavour) and
//! the kernel and limit rows.

use super::{item, libs, GpuInfo, Item};
use crate::report::{human_bytes, Status};
use crate::root::SysRoot;
use crate::sysinfo::{DriverFlavour, SysState};

/// The model line of /proc/driver/nvidia/gpus/<bdf>/information.
fn gpu_model(root: &SysRoot, bdf: &str) -> Option<String> {
    let text = root.read(&format!("/proc/driver/nvidia/gpus/{bdf}/information"))?;
    let line = text.lines().find(|l| l.starts_with("Model:"))?;
    Some(line["Model:".len()..].trim().to_string())
}

pub(super) fn gpus(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) -> Vec<GpuInfo> {
    let mut out = Vec::new();
    for g in &sys.gpus {
        let model = gpu_model(root, &g.bdf);
        let geforce = model.as_deref().is_some_and(|m| m.contains("GeForce"));
        let platform = crate::platform::classify(sys.tegra, model.as_deref(), None, None);
        items.extend(
            model
                .as_deref()
                .and_then(|m| libs::platform_item(&g.bdf, m)),
        );
        if let Some(m) = &model {
            let it = if geforce {
                item("gpu", format!("GPU {}", g.bdf), Status::Warn, m.clone())
                    .detail("GeForce GPUs do not support GPUDirect RDMA (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 0): registrations of their memory fail; NCCL stages through host memory")
                    .remedy("use a data-center or professional GPU for GPUDirect RDMA")
            } else {
                item("gpu", format!("GPU {}", g.bdf), Status::Info, m.clone())
            };
            items.push(it);
        }
        out.push(GpuInfo {
            pci: g.bdf.clone(),
            model,
            numa_node: g.numa_node,
            bar1_bytes: g.bar1_bytes(root),
            geforce,
            platform,
        });
        let name = format!("GPU {} BAR1", g.bdf);
        let it = match g.bar1_bytes(root) {
            Some(b) if b < (1 << 30) => item("gpu", name, Status::Warn, human_bytes(b))
                .detail("GPU memory registrations share this window: ibv_reg_mr above a few hundred MB will fail")
                .remedy("enable Resizable BAR / large BAR1 in the BIOS, or register smaller buffers"),
            Some(b) => item("gpu", name, Status::Pass, human_bytes(b)),
            None => item("gpu", name, Status::Info, "unknown"),
        };
        items.push(it);
    }
    let it = match &sys.nvidia {
        Some(n) if n.flavour == DriverFlavour::Open => item(
            "gpu",
            "NVIDIA driver",
            Status::Pass,
            format!("open kernel modules {}", n.version),
        ),
        Some(n) => item(
            "gpu",
            "NVIDIA driver",
            Status::Warn,
            format!("proprietary {}", n.version),
        )
        .detail(
            "the proprietary kernel module cannot export dma-buf: only the peer-memory path works",
        )
        .remedy("install the open kernel modules (nvidia-open) for dma-buf"),
        None if sys.gpus.is_empty() => item("gpu", "NVIDIA driver", Status::Info, "not loaded"),
        None => item("gpu", "NVIDIA driver", Status::Fail, "not loaded")
            .remedy("install and load the NVIDIA driver"),
    };
    items.push(it);
    items.extend(
        root.read("/proc/driver/nvidia/params")
            .and_then(|p| topo_check_override(&p)),
    );
    out
}

/// The row for `NVreg_GrdmaPciTopoCheckOverride` as the loaded driver took
/// it (`/proc/driver/nvidia/params`, a "GrdmaPciTopoCheckOverride: N"
/// line; the option is described in the open driver's
/// `kernel-open/nvidia/nv-reg.h`): on coherent systems (Grace) with BAR1
/// on, the driver's dma-buf and nv-p2p paths accept a third-party device
/// only on the PCIe topology they support, and 1 turns that check off.
/// None when the driver has no such parameter.
fn topo_check_override(params: &str) -> Option<Item> {
    let v = params.lines().find_map(|l| {
        l.strip_prefix("GrdmaPciTopoCheckOverride:")
            .map(|v| v.trim().to_string())
    })?;
    let name = "GrdmaPciTopoCheckOverride";
    Some(if v == "0" {
        item(
            "gpu",
            name,
            Status::Info,
            "0 (the driver checks the topology)",
        )
    } else {
        item("gpu", name, Status::Warn, format!("{v} (the topology check is overridden)"))
            .detail(
                "NVreg_GrdmaPciTopoCheckOverride is set: the driver no longer checks that the RDMA \
                 device sits on the PCIe topology its dma-buf and nv-p2p paths support on a coherent \
                 (Grace) system, so registrations succeed where the data path may be unsupported \
                 or slow",
            )
            .remedy(
                "keep it only where the platform's vendor asks for it; otherwise remove \
                 NVreg_GrdmaPciTopoCheckOverride from the nvidia module's options and reload the driver",
            )
    })
}

pub(super) fn kernel(sys: &SysState, items: &mut Vec<Item>) {
    items.push(match &sys.config_rust {
        Some((true, f)) => item("kernel", "CONFIG_RUST", Status::Pass, "y").detail(f.clone()),
        Some((false, f)) => item("kernel", "CONFIG_RUST", Status::Info, "not set").detail(format!(
            "{f}: peermem_rs cannot load on this kernel; nvidia-peermem and dma-buf are unaffected"
        )),
        None => item(
            "kernel",
            "CONFIG_RUST",
            Status::Info,
            "unknown (no kernel config found)",
        ),
    });
    let lim = |v: Option<u64>| v.map(human_bytes).unwrap_or_else(|| "unlimited".into());
    items.push(match sys.memlock {
        None => item("limits", "RLIMIT_MEMLOCK", Status::Info, "unknown"),
        Some(m) if m.cap_ipc_lock => item("limits", "RLIMIT_MEMLOCK", Status::Pass, format!("{} (not enforced: CAP_IPC_LOCK)", lim(m.soft))),
        Some(m) if m.soft.is_none() => item("limits", "RLIMIT_MEMLOCK", Status::Pass, "unlimited"),
        Some(m) => item("limits", "RLIMIT_MEMLOCK", Status::Warn, format!("{} (hard {})", lim(m.soft), lim(m.hard)))
            .detail("host-memory registrations beyond this fail with ENOMEM for this user")
            .remedy("`ulimit -l unlimited`, or memlock in /etc/security/limits.conf (LimitMEMLOCK=infinity for services)"),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_check_override_is_read_from_the_driver_params() {
        let p = "ModifyDeviceFiles: 1\nGrdmaPciTopoCheckOverride: 1\nEnableResizableBar: 0\n";
        let it = topo_check_override(p).expect("a row");
        assert_eq!(it.status, Status::Warn, "{it:?}");
        assert!(it.value.starts_with("1 "), "{it:?}");
        let it = topo_check_override("GrdmaPciTopoCheckOverride: 0\n").expect("a row");
        assert_eq!(it.status, Status::Info, "{it:?}");
        // A driver without it, or another parameter that ends the same way.
        assert!(topo_check_override("ModifyDeviceFiles: 1\n").is_none());
        assert!(topo_check_override("MyGrdmaPciTopoCheckOverride: 1\n").is_none());
    }
}
