//! `doctor`: reads the system and gives a verdict per item. It touches a
//! device only to register one page of host dma-buf on each RDMA device
//! (`dmabuf_mr`) and to read the GPUs' CUDA attributes (`cuda`: `cuInit`,
//! no context), and only on the live host.

mod cuda;
mod dkms;
mod dmabuf_mr;
mod gpu;
mod libs;
mod rdma;
mod stub;
#[cfg(test)]
mod testtree;

use crate::nccl::{Detection, NcclPath};
use crate::pci::{self, PathVerdict, Topology};
use crate::rdma::{DevFile, RdmaPort};
use crate::report::{exit_code, overall, Status, SCHEMA_VERSION};
use crate::root::SysRoot;
use crate::sysinfo::{
    self, ClientModule, ClientOrigin, PeerClient, RdmaStack, SysState, MODULES_OF_INTEREST,
    PEER_CLIENT_MODULES,
};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub area: &'static str,
    pub name: String,
    pub status: Status,
    pub value: String,
    pub detail: Option<String>,
    pub remedy: Option<String>,
}

/// The PCIe relation of one GPU and one RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct PairTopology {
    pub gpu: String,
    pub rdma_device: String,
    pub nic: Option<String>,
    pub topology: Option<Topology>,
}

/// The ports of one RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct DevicePorts {
    pub rdma_device: String,
    pub pci: Option<String>,
    pub driver: Option<String>,
    pub numa_node: Option<i64>,
    pub ports: Vec<RdmaPort>,
}

/// One GPU as the PCI bus and the NVIDIA driver show it.
#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub pci: String,
    /// From /proc/driver/nvidia/gpus/<bdf>/information.
    pub model: Option<String>,
    pub numa_node: Option<i64>,
    pub bar1_bytes: Option<u64>,
    /// GeForce parts have no GPUDirect RDMA.
    pub geforce: bool,
    /// Discrete, Tegra, integrated (unified memory) or C2C-coherent.
    pub platform: crate::platform::Kind,
}

/// The overall answer, like `check`'s `verdict`: one line and the items
/// behind it.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorVerdict {
    pub status: Status,
    pub exit_code: i32,
    pub summary: String,
    /// `area/name` of every FAIL item.
    pub failed: Vec<String>,
    /// `area/name` of every WARN item.
    pub warnings: Vec<String>,
    /// `area/name` of every UNTESTED item.
    pub untested: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub version: &'static str,
    pub status: Status,
    pub exit_code: i32,
    pub verdict: DoctorVerdict,
    pub kernel: String,
    /// Loaded peer-memory client modules and who built them.
    pub peer_clients: Vec<ClientModule>,
    /// MLNX_OFED/DOCA-OFED version (null: unknown, e.g. the kernel's own stack).
    pub rdma_stack: RdmaStack,
    pub items: Vec<Item>,
    pub gpus: Vec<GpuInfo>,
    pub pairs: Vec<PairTopology>,
    pub rdma_devices: Vec<DevicePorts>,
    pub device_files: Vec<DevFile>,
    pub nccl: Vec<NcclPath>,
    pub detection: Vec<Detection>,
    /// Per GPU, RDMA device and library: the path it takes and the rule
    /// (file and version of the library's source) that decides it.
    pub libraries: Vec<crate::libraries::Decision>,
}

pub(crate) fn item(
    area: &'static str,
    name: impl Into<String>,
    status: Status,
    value: impl Into<String>,
) -> Item {
    Item {
        area,
        name: name.into(),
        status,
        value: value.into(),
        detail: None,
        remedy: None,
    }
}

impl Item {
    pub(crate) fn detail(mut self, d: impl Into<String>) -> Item {
        self.detail = Some(d.into());
        self
    }
    pub(crate) fn remedy(mut self, r: impl Into<String>) -> Item {
        self.remedy = Some(r.into());
        self
    }
}

pub fn run(root: &SysRoot) -> DoctorReport {
    crate::trace!(
        "doctor: reading the system under {}",
        root.path("/").display()
    );
    let sys = SysState::gather(root);
    crate::trace!(
        "doctor: kernel {}, {} modules loaded, {} GPU(s), {} RDMA device(s)",
        sys.kernel,
        sys.modules.len(),
        sys.gpus.len(),
        sys.rdma.len()
    );
    let mut items = Vec::new();
    crate::trace!("doctor: modules and peer-memory clients");
    let peer_clients = modules(root, &sys, &mut items);
    items.extend(stub::item_for(root, &sys));
    crate::trace!("doctor: RDMA stack version");
    let rdma_stack = sysinfo::rdma_stack(root);
    items.push(stack_item(&rdma_stack));
    peers(&sys, &mut items);
    crate::trace!("doctor: RDMA ports");
    rdma::ports(&sys, &mut items);
    crate::trace!("doctor: /dev/infiniband");
    let device_files = rdma::dev_files(root, &sys, &mut items);
    crate::trace!("doctor: PCIe paths and ACS");
    let pairs = pcie(root, &sys, &mut items);
    crate::trace!("doctor: library detection and NCCL's GDR decision");
    let detection = crate::nccl::detection(root);
    let nccl = rdma::nccl_items(&sys, &pairs, &detection, &mut items);
    crate::trace!("doctor: each library's path, dma-buf prerequisites");
    let libraries = libs::decisions(&sys, &detection, &nccl, &mut items);
    libs::dmabuf_items(&sys, &mut items);
    dmabuf_mr::items(root, &sys, &mut items);
    crate::trace!("doctor: IOMMU, GPUs, kernel, limits");
    iommu(root, &sys, &mut items);
    let gpus = gpu::gpus(root, &sys, &mut items);
    crate::trace!("doctor: CUDA attributes, VMM memory");
    cuda::items(root, &sys, &mut items);
    gpu::kernel(&sys, &mut items);
    items.extend(dkms::item_for(root, &sys));
    let code = exit_code(items.iter().map(|i| i.status));
    let verdict = verdict(&items, code);
    crate::trace!("doctor: {}", verdict.summary);
    DoctorReport {
        schema_version: SCHEMA_VERSION,
        command: "doctor",
        version: env!("CARGO_PKG_VERSION"),
        status: overall(code),
        exit_code: code,
        verdict,
        kernel: sys.kernel.clone(),
        peer_clients,
        rdma_stack,
        items,
        gpus,
        pairs,
        rdma_devices: sys
            .rdma
            .iter()
            .map(|d| DevicePorts {
                rdma_device: d.name.clone(),
                pci: d.pci.as_ref().map(|p| p.bdf.clone()),
                driver: d.driver.clone(),
                numa_node: d.pci.as_ref().and_then(|p| p.numa_node),
                ports: d.ports.clone(),
            })
            .collect(),
        device_files,
        nccl,
        detection,
        libraries,
    }
}

/// `area/name` of the items with status `st`.
fn names(items: &[Item], st: Status) -> Vec<String> {
    items
        .iter()
        .filter(|i| i.status == st)
        .map(|i| format!("{}/{}", i.area, i.name))
        .collect()
}

/// The one-line answer and the items behind it.
pub fn verdict(items: &[Item], code: i32) -> DoctorVerdict {
    let failed = names(items, Status::Fail);
    let warnings = names(items, Status::Warn);
    let untested = names(items, Status::Untested);
    let list = |v: &[String]| v.join(", ");
    let summary = if !failed.is_empty() {
        format!(
            "{} problem(s) to fix: {}{}",
            failed.len(),
            list(&failed),
            if warnings.is_empty() {
                String::new()
            } else {
                format!("; {} warning(s)", warnings.len())
            }
        )
    } else if !untested.is_empty() {
        format!("could not assess: {}", list(&untested))
    } else if !warnings.is_empty() {
        format!(
            "nothing broken; {} warning(s): {}",
            warnings.len(),
            list(&warnings)
        )
    } else {
        "nothing to fix".to_string()
    };
    DoctorVerdict {
        status: overall(code),
        exit_code: code,
        summary,
        failed,
        warnings,
        untested,
    }
}

/// The module row's value for a loaded peer-memory client: who built it.
fn client_value(c: &ClientModule) -> String {
    let mut v = c.origin.label().to_string();
    if let Some(ver) = &c.version {
        v.push_str(&format!(" {ver}"));
    }
    if let Some(m) = &c.mode {
        v.push_str(&format!(", mode={m}"));
    }
    v
}

fn stack_item(s: &RdmaStack) -> Item {
    match (&s.version, &s.source) {
        (Some(v), Some(src)) => item("modules", "MLNX_OFED/DOCA-OFED", Status::Info, v.clone())
            .detail(format!("from {src}")),
        _ => item("modules", "MLNX_OFED/DOCA-OFED", Status::Info, "unknown")
            .detail("no OFED version found (no ofed_info, no version file of mlx5_core, mlx_compat, ib_core or ib_uverbs): the kernel's own RDMA stack, or OFED modules not loaded"),
    }
}

/// The module rows; returns the loaded peer-memory clients, identified.
fn modules(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) -> Vec<ClientModule> {
    let mut found = Vec::new();
    for m in MODULES_OF_INTEREST {
        let who = (sys.module(m).is_some() && PEER_CLIENT_MODULES.contains(&m))
            .then(|| sysinfo::client_identity(root, m));
        let loaded = match &who {
            Some(c) => format!("loaded ({})", client_value(c)),
            None => "loaded".to_string(),
        };
        let it = match sys.module(m) {
            Some(lm) if lm.used_by.is_empty() => item("modules", m, Status::Info, loaded),
            Some(lm) => item(
                "modules",
                m,
                Status::Info,
                format!("{loaded}, used by {}", lm.used_by.join(",")),
            ),
            None if sys.is_builtin(m) => item("modules", m, Status::Info, "built into the kernel"),
            None if m == "nvidia" && !sys.gpus.is_empty() => {
                item("modules", m, Status::Fail, "not loaded")
                    .detail("an NVIDIA GPU is on the PCI bus but nvidia.ko is not loaded")
                    .remedy("install and load the NVIDIA driver (`modprobe nvidia`)")
            }
            None if m == "ib_uverbs" && !sys.rdma.is_empty() => {
                item("modules", m, Status::Warn, "not loaded")
                    .detail("RDMA devices exist but user-space verbs are unavailable")
                    .remedy("`modprobe ib_uverbs`")
            }
            None => item("modules", m, Status::Info, "not loaded"),
        };
        let it = match &who {
            Some(c) if c.origin == ClientOrigin::Unknown => {
                it.detail(format!("cannot tell who built it: {}", c.evidence))
            }
            Some(c) if c.mode.as_deref() == Some("invalidate") => it.detail(format!(
                "identified by {}; in mode=invalidate the RDMA core never offers it what is registered without invalidation support: QP/CQ/SRQ buffers and devx umems in GPU memory (GPU-initiated networking: NCCL GIN, UCX GDA, DOCA GPUNetIO) fail, or go to another client; mode=persistent (driver 535 and later) serves them",
                c.evidence
            )),
            Some(c) => it.detail(format!("identified by {}", c.evidence)),
            None => it,
        };
        items.push(it);
        found.extend(who);
    }
    let clients = sys.peer_modules();
    let it = if clients.len() > 1 {
        item("modules", "peer-memory clients", Status::Fail, clients.join(" + "))
            .detail("more than one GPU peer-memory client is loaded: the RDMA core asks its clients in registration order, whatever their names, so the one registered later serves no GPU memory (a core with /sys/kernel/mm/memory_peers refuses a second client of one name); peermem-rs does not refuse to load beside another client: its package conflicts with nv_peer_mem's and blacklists it, and this row is the check")
            .remedy(format!("keep one: `rmmod {}`", clients[1..].join(" ")))
    } else if let Some(c) = clients.first() {
        if sys.peers.is_empty() && sys.memory_peers_dir {
            item("modules", "peer-memory clients", Status::Fail, format!("{c} loaded, nothing registered"))
                .detail("the module is loaded but /sys/kernel/mm/memory_peers/ (which this core keeps) lists no client: it loaded as a stub or its registration failed")
                .remedy("check dmesg for the module's messages; rebuild it for the running kernel/OFED (nvidia-peermem: reinstall the NVIDIA driver after OFED)")
        } else if sys.peers.is_empty() {
            item("modules", "peer-memory clients", Status::Info, format!("{c} loaded"))
                .detail("this peer-memory core keeps no /sys/kernel/mm/memory_peers: registration is only visible by using it (`peermem-probe check`)")
        } else {
            item(
                "modules",
                "peer-memory clients",
                Status::Pass,
                c.to_string(),
            )
        }
    } else if sys.peer_interface == Some(false) {
        item(
            "modules",
            "peer-memory clients",
            Status::Info,
            "none (kernel has no peer-memory interface)",
        )
        .detail("GPUDirect RDMA goes through dma-buf on this kernel")
    } else if sys.gpus.is_empty() {
        item("modules", "peer-memory clients", Status::Info, "none")
    } else {
        item("modules", "peer-memory clients", Status::Warn, "none")
            .detail(
                "ibv_reg_mr on GPU memory will fail with EFAULT; only the dma-buf path can work",
            )
            .remedy(crate::remedy::load_client(sys))
    };
    items.push(it);
    found
}

fn peers(sys: &SysState, items: &mut Vec<Item>) {
    let iface = match sys.peer_interface {
        Some(true) => "present (ib_register_peer_memory_client exported)",
        Some(false) => "absent (mainline-style kernel: dma-buf only)",
        None => "unknown (ib_uverbs not loaded, no modules.symbols)",
    };
    items.push(item(
        "memory_peers",
        "peer-memory interface",
        Status::Info,
        iface,
    ));
    if sys.peers.is_empty() {
        items.push(item(
            "memory_peers",
            "/sys/kernel/mm/memory_peers",
            Status::Info,
            "no client registered",
        ));
    }
    // The core asks its clients in registration order, whatever their
    // names: of two registered, the later one is asked only for what the
    // first declines.  peermem-rs does not look for other clients (its
    // package keeps nv_peer_mem out); this row is where they show.
    let allocs = |p: &PeerClient| p.counters.get("num_alloc_mrs").copied();
    let serving: Vec<&str> = sys
        .peers
        .iter()
        .filter(|p| allocs(p).is_some_and(|n| n > 0))
        .map(|p| p.name.as_str())
        .collect();
    if sys.peers.len() > 1 {
        let names: Vec<&str> = sys.peers.iter().map(|p| p.name.as_str()).collect();
        items.push(
            item("memory_peers", "registered clients", Status::Warn, names.join(" + "))
                .detail("more than one peer-memory client is registered with the RDMA core: it asks them in registration order, whatever their names, so a client registered after another GPU client serves no GPU memory")
                .remedy("keep one GPU peer-memory client: unload the others (`lsmod`; `rmmod <module>`) and keep them from loading at boot (/etc/modules-load.d; peermem-rs's package conflicts with nv_peer_mem's and blacklists it)"),
        );
    }
    for p in &sys.peers {
        let counters: Vec<String> = p
            .counters
            .iter()
            .map(|(k, v)| format!("{}={v}", k.trim_start_matches("num_")))
            .collect();
        let version = format!("version {}", p.version.as_deref().unwrap_or("?"));
        let idle = sys.peers.len() > 1 && allocs(p) == Some(0) && !serving.is_empty();
        let it = if idle {
            item(
                "memory_peers",
                p.name.clone(),
                Status::Warn,
                format!("{version}, serves nothing"),
            )
            .detail(format!(
                "registered, but the core gave it no MR (alloc_mrs=0) while {} did get some: another client registered before it is asked first; {}",
                serving.join(", "),
                counters.join(" ")
            ))
            .remedy("unload the client you do not want, then reload the one you do, so that it registers first")
        } else {
            item("memory_peers", p.name.clone(), Status::Info, version).detail(counters.join(" "))
        };
        items.push(it);
    }
}

fn pcie(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) -> Vec<PairTopology> {
    let mut pairs = Vec::new();
    if sys.gpus.is_empty() {
        items.push(
            item(
                "pcie",
                "GPU",
                Status::Untested,
                "no NVIDIA GPU on the PCI bus",
            )
            .detail("GPUDirect RDMA needs an NVIDIA GPU; nothing to check"),
        );
    }
    if sys.rdma.is_empty() {
        items.push(
            item(
                "pcie",
                "RDMA device",
                Status::Untested,
                "none in /sys/class/infiniband",
            )
            .remedy(crate::remedy::no_rdma_device(sys).remedy),
        );
    }
    for r in &sys.rdma {
        let v = match &r.pci {
            Some(p) => format!(
                "PCI {}{}{}",
                p.bdf,
                p.numa_node
                    .map(|n| format!(", NUMA {n}"))
                    .unwrap_or_default(),
                r.driver
                    .as_ref()
                    .map(|d| format!(", driver {d}"))
                    .unwrap_or_default()
            ),
            None => "software device (no PCI function)".into(),
        };
        items.push(item("pcie", format!("RDMA {}", r.name), Status::Info, v));
    }
    for g in &sys.gpus {
        for r in &sys.rdma {
            let name = format!("GPU {} <-> {}", g.bdf, r.name);
            let Some(nic) = &r.pci else {
                items.push(
                    item("pcie", name, Status::Info, PathVerdict::NotPci.label()).detail(
                        "software RDMA device: data goes through the CPU, no GPU peer-to-peer",
                    ),
                );
                pairs.push(PairTopology {
                    gpu: g.bdf.clone(),
                    rdma_device: r.name.clone(),
                    nic: None,
                    topology: None,
                });
                continue;
            };
            let t = pci::topology(root, g, nic);
            let mut it = match t.verdict {
                PathVerdict::SameSwitch | PathVerdict::SameRootPort => item("pcie", name, Status::Pass, t.verdict.label()),
                PathVerdict::AcrossHostBridge => item("pcie", name, Status::Warn, t.verdict.label())
                    .remedy("P2P crosses the CPU root complex: it works on most CPUs but reads from GPU memory are slow; prefer a NIC under the GPU's PCIe switch"),
                PathVerdict::AcrossSockets => item("pcie", name, Status::Warn, t.verdict.label())
                    .remedy("P2P over the socket interconnect is slow or unsupported; use a NIC on the GPU's NUMA node"),
                PathVerdict::NotPci => item("pcie", name, Status::Info, t.verdict.label()),
            };
            let mut detail = format!("{} ({})", t.detail, t.nvsmi);
            if !t.acs_redirecting.is_empty() {
                detail.push_str(&format!(
                    "; ACS redirect on {}",
                    t.acs_redirecting.join(", ")
                ));
                it.status = Status::Warn;
                it.remedy = Some(format!(
                    "ACS sends P2P traffic up to the root complex/IOMMU: disable ACS on those bridges (BIOS, or `setpci -s {} ECAP_ACS+0x6.w=0000`)",
                    t.acs_redirecting[0]
                ));
            } else if t.acs_unknown {
                detail.push_str("; ACS state unreadable (run as root)");
            } else if !t.bridges.is_empty() {
                detail.push_str("; no ACS redirect on the path");
            }
            items.push(it.detail(detail));
            pairs.push(PairTopology {
                gpu: g.bdf.clone(),
                rdma_device: r.name.clone(),
                nic: Some(nic.bdf.clone()),
                topology: Some(t),
            });
        }
    }
    pairs
}

fn iommu(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) {
    let cmd = if sys.iommu.cmdline.is_empty() {
        "no iommu options".to_string()
    } else {
        sys.iommu.cmdline.join(" ")
    };
    if sys.iommu.units.is_empty() {
        items.push(item("iommu", "IOMMU", Status::Pass, "off (no IOMMU units)").detail(cmd));
        return;
    }
    let mut translated = Vec::new();
    let mut modes = Vec::new();
    let devs = sys
        .gpus
        .iter()
        .chain(sys.rdma.iter().filter_map(|r| r.pci.as_ref()));
    for d in devs {
        let t = sysinfo::iommu_group_type(root, d).unwrap_or_else(|| "no group".into());
        if t.starts_with("DMA") {
            translated.push(d.bdf.clone());
        }
        modes.push(format!("{} {t}", d.bdf));
    }
    let value = format!("on ({})", sys.iommu.units.join(","));
    let detail = if modes.is_empty() {
        cmd
    } else {
        format!("{}; {cmd}", modes.join(", "))
    };
    let it = if translated.is_empty() {
        item("iommu", "IOMMU", Status::Pass, value).detail(detail)
    } else {
        item("iommu", "IOMMU", Status::Warn, value)
            .detail(format!("DMA translation for {}; {detail}", translated.join(", ")))
            .remedy("boot with iommu=pt (passthrough) so NIC-to-GPU peer traffic is not translated or blocked")
    };
    items.push(it);
}

#[cfg(test)]
mod tests;
