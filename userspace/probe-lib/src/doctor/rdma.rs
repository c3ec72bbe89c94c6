//! doctor's RDMA items: ports (state, physical state, link layer, GIDs and
//! their netdevs, subnet manager), device files, rdma_ucm; and NCCL's
//! view: path type per GPU x NIC and each library's client detection.

use super::{item, Item};
use crate::nccl::{self, Detection, NcclPath};
use crate::rdma::{self, DevFile};
use crate::report::Status;
use crate::root::SysRoot;
use crate::sysinfo::SysState;

pub(super) fn ports(sys: &SysState, items: &mut Vec<Item>) {
    for d in &sys.rdma {
        if d.ports.is_empty() {
            items.push(item(
                "rdma",
                format!("{} ports", d.name),
                Status::Info,
                "none in sysfs",
            ));
        }
        for p in &d.ports {
            let name = format!("{} port {}", d.name, p.port);
            let st = p.state.as_deref().unwrap_or("unknown");
            let ph = p.phys_state.as_deref().unwrap_or("unknown");
            let ll = p.link_layer.as_deref().unwrap_or("unknown link layer");
            let mut value = format!("{st}, {ph}, {ll}");
            if let Some(r) = &p.rate {
                value.push_str(&format!(", {r}"));
            }
            let gids: Vec<String> = p
                .gids
                .iter()
                .map(|g| {
                    let mut s = format!("GID {} {}", g.index, g.gid);
                    if let Some(t) = &g.gid_type {
                        s.push_str(&format!(" {t}"));
                    }
                    if let Some(n) = &g.netdev {
                        s.push_str(&format!(" on {n}"));
                    }
                    if let Some(ip) = &g.ipv4 {
                        s.push_str(&format!(" ({ip})"));
                    }
                    s
                })
                .collect();
            let detail = if gids.is_empty() {
                "no GID".to_string()
            } else {
                gids.join("; ")
            };
            let it = if !p.is_active() {
                let fix = match &p.netdev {
                    Some(n) if !p.is_infiniband() => format!("`ip link set {n} up` (and check the cable / switch port); `rdma link show` must show ACTIVE"),
                    _ if p.is_infiniband() && ph == "LinkUp" => "the link is up but no subnet manager configured the port: start opensm (or enable the switch's SM)".to_string(),
                    _ => "check the cable and switch port; `rdma link show` must show ACTIVE".to_string(),
                };
                item("rdma", name, Status::Fail, value)
                    .detail(format!("port not ACTIVE: nothing can be sent; {detail}"))
                    .remedy(fix)
            } else if p.is_infiniband() && p.sm_lid == Some(0) {
                item("rdma", name, Status::Fail, value)
                    .detail("no subnet manager (SM LID 0)")
                    .remedy("start a subnet manager (opensm) on the fabric")
            } else if !p.is_infiniband()
                && !p
                    .gids
                    .iter()
                    .any(|g| g.gid_type.as_deref() == Some("RoCE v2") && g.ipv4.is_some())
            {
                let n = p
                    .netdev
                    .clone()
                    .unwrap_or_else(|| "the port's netdev".into());
                item("rdma", name, Status::Warn, value)
                    .detail(format!("no RoCE v2 GID with an IPv4 address; {detail}"))
                    .remedy(format!("give {n} an IP address (`ip addr add ... dev {n}`): RoCE v2 and rdma_cm route by it"))
            } else {
                let mut it = item("rdma", name, Status::Pass, value).detail(detail);
                if p.is_infiniband() {
                    it.detail = Some(format!(
                        "LID {}, SM LID {}; {}",
                        p.lid
                            .map(|l| l.to_string())
                            .unwrap_or_else(|| "unknown".into()),
                        p.sm_lid
                            .map(|l| l.to_string())
                            .unwrap_or_else(|| "unknown".into()),
                        it.detail.unwrap_or_default()
                    ));
                }
                it
            };
            items.push(it);
        }
    }
}

pub(super) fn dev_files(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) -> Vec<DevFile> {
    let files = rdma::dev_files(root);
    let ucm = sys.module("rdma_ucm").is_some() || sys.is_builtin("rdma_ucm");
    let has_cm = files.iter().any(|f| f.path.ends_with("/rdma_cm"));
    items.push(match (ucm, has_cm) {
        (_, true) => item("devices", "rdma_cm", Status::Pass, "/dev/infiniband/rdma_cm present"),
        (true, false) => item("devices", "rdma_cm", Status::Warn, "loaded, but no /dev/infiniband/rdma_cm")
            .remedy("check udev rules for /dev/infiniband (rdma-core's 90-rdma-ucm rules)"),
        (false, false) if sys.rdma.is_empty() => item("devices", "rdma_cm", Status::Info, "not loaded"),
        (false, false) => item("devices", "rdma_cm", Status::Warn, "not loaded")
            .detail("without it the RDMA CM (`peermem-probe pair`, NCCL's rdma_cm users, UCX) cannot connect")
            .remedy("`modprobe rdma_ucm`"),
    });
    if files.iter().all(|f| !f.path.contains("uverbs")) && !sys.rdma.is_empty() {
        items.push(
            item(
                "devices",
                "/dev/infiniband/uverbs*",
                Status::Fail,
                "missing",
            )
            .remedy("`modprobe ib_uverbs`; check udev created /dev/infiniband"),
        );
    }
    for f in &files {
        let mode = f.mode.as_deref().unwrap_or("unknown");
        let v = format!("mode {mode}, uid {}, gid {}", opt(f.uid), opt(f.gid));
        items.push(if f.read_write {
            item("devices", f.path.clone(), Status::Pass, v)
        } else {
            item("devices", f.path.clone(), Status::Fail, v)
                .detail("this user cannot open it read/write: every verbs call fails with EACCES")
                .remedy("add the user to the device's group (often `rdma`), or run as root")
        });
    }
    files
}

fn opt(v: Option<u32>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "unknown".into())
}

pub(super) fn nccl_items(
    sys: &SysState,
    pairs: &[super::PairTopology],
    det: &[Detection],
    items: &mut Vec<Item>,
) -> Vec<NcclPath> {
    let mut out = Vec::new();
    for p in pairs {
        let n = nccl::predict(&p.gpu, &p.rdma_device, p.topology.as_ref());
        let name = format!("GPU {} x {}", p.gpu, p.rdma_device);
        let it = match (n.path_type, n.gdr_by_default) {
            (None, _) => item("nccl", name, Status::Info, "no GPUDirect RDMA (software RDMA device)"),
            (Some(t), true) => item("nccl", name, Status::Pass, format!("{}: GPUDirect RDMA by default", t.name()))
                .detail(format!("path {} <= NCCL_NET_GDR_LEVEL default PXB; NCCL_NET_GDR_LEVEL={} would turn it off", t.name(), n.gdr_level_to_disable.unwrap_or("LOC"))),
            (Some(t), false) => item("nccl", name, Status::Warn, format!("{}: no GPUDirect RDMA by default", t.name()))
                .detail(format!("path {} is farther than NCCL_NET_GDR_LEVEL default PXB: NCCL stages through host memory", t.name()))
                .remedy(format!("NCCL_NET_GDR_LEVEL={} enables it on this pair; measure with `peermem-probe bench` first (reads across the root complex can be slow)", n.gdr_level_to_enable.unwrap_or("SYS"))),
        };
        items.push(it);
        out.push(n);
    }
    let client = !sys.peer_modules().is_empty() || !sys.peers.is_empty();
    for d in det {
        let name = format!("{} {}", d.library, d.versions);
        let it = match d.found {
            Some(f) => item("detection", name, Status::Pass, "detects the peer-memory client").detail(format!("found {f}")),
            None if client => item("detection", name, Status::Warn, "does not detect the loaded client")
                .detail(format!("probes {}: none exists", d.probes.join(", ")))
                .remedy("a newer library version probes /sys/module/nvidia_peermem; only nvidia-peermem (or a client under /sys/kernel/mm/memory_peers/nv_mem) is seen by all; dma-buf needs no detection"),
            None => item("detection", name, Status::Info, "no peer-memory client to detect")
                .detail(format!("probes {}", d.probes.join(", "))),
        };
        items.push(it);
    }
    out
}
