use super::*;
use crate::fixture;
use crate::pci::{Acs, PciDev, PortType};

fn dev(root: &SysRoot, bdf: &str) -> PciDev {
    PciDev::load(root, bdf).unwrap_or_else(|| panic!("{bdf} in fixture"))
}

fn find<'a>(r: &'a DoctorReport, name: &str) -> &'a Item {
    r.items
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no item {name}: {:#?}", r.items))
}

#[test]
fn gpu_and_nic_under_one_switch() {
    let root = fixture("switch");
    let t = pci::topology(
        &root,
        &dev(&root, "0000:03:00.0"),
        &dev(&root, "0000:04:00.0"),
    );
    assert_eq!(t.verdict, PathVerdict::SameSwitch);
    assert_eq!(t.nvsmi, "PIX");
    let b: Vec<&str> = t.bridges.iter().map(|b| b.bdf.as_str()).collect();
    assert_eq!(b, ["0000:02:08.0", "0000:02:10.0"]);
    assert!(t
        .bridges
        .iter()
        .all(|b| b.port_type == PortType::SwitchDownstream));
    assert!(t.acs_redirecting.is_empty());
    assert!(!t.acs_unknown);
    assert_eq!(
        t.bridges[0].acs,
        Acs::Present {
            control: 0,
            redirect: false
        }
    );
}

#[test]
fn acs_redirect_on_the_switch_ports_is_flagged() {
    let root = fixture("switch-acs");
    let t = pci::topology(
        &root,
        &dev(&root, "0000:03:00.0"),
        &dev(&root, "0000:04:00.0"),
    );
    assert_eq!(t.verdict, PathVerdict::SameSwitch);
    assert_eq!(t.acs_redirecting, ["0000:02:08.0", "0000:02:10.0"]);
    let r = run(&root);
    let it = find(&r, "GPU 0000:03:00.0 <-> mlx5_0");
    assert_eq!(it.status, Status::Warn);
    assert!(it
        .detail
        .as_deref()
        .unwrap()
        .contains("ACS redirect on 0000:02:08.0"));
    assert!(it
        .remedy
        .as_deref()
        .unwrap()
        .contains("setpci -s 0000:02:08.0"));
}

#[test]
fn different_root_ports_cross_the_host_bridge() {
    let root = fixture("root-ports");
    let t = pci::topology(
        &root,
        &dev(&root, "0000:01:00.0"),
        &dev(&root, "0000:02:00.0"),
    );
    assert_eq!(t.verdict, PathVerdict::AcrossHostBridge);
    assert_eq!(t.nvsmi, "PHB");
    // Both root ports are on the path; the NIC's has ACS redirect on.
    let b: Vec<&str> = t.bridges.iter().map(|b| b.bdf.as_str()).collect();
    assert_eq!(b, ["0000:00:01.0", "0000:00:03.0"]);
    assert_eq!(t.acs_redirecting, ["0000:00:03.0"]);
    assert!(t.bridges.iter().all(|b| b.port_type == PortType::RootPort));
}

#[test]
fn sockets_host_bridges_and_software_devices() {
    let root = fixture("sockets");
    let gpu = dev(&root, "0000:01:00.0");
    let far = pci::topology(&root, &gpu, &dev(&root, "0000:81:00.0"));
    assert_eq!(far.verdict, PathVerdict::AcrossSockets);
    assert_eq!(far.nvsmi, "SYS");
    let near = pci::topology(&root, &gpu, &dev(&root, "0000:41:00.0"));
    assert_eq!(near.verdict, PathVerdict::AcrossHostBridge);
    assert_eq!(near.nvsmi, "NODE");
    let r = run(&root);
    assert_eq!(find(&r, "GPU 0000:01:00.0 <-> mlx5_0").status, Status::Warn);
    assert_eq!(
        find(&r, "GPU 0000:01:00.0 <-> rxe0").value,
        "not a PCI path"
    );
    let rxe = r.pairs.iter().find(|p| p.rdma_device == "rxe0").unwrap();
    assert!(rxe.nic.is_none() && rxe.topology.is_none());
    // nv_peer_mem is loaded and this core keeps no memory_peers sysfs: its
    // registration cannot be seen, which is no failure.
    let c = find(&r, "peer-memory clients");
    assert_eq!(c.status, Status::Info);
    assert!(c.value.contains("nv_peer_mem"));
    // NCCL: SYS to the far NIC, NODE to the near one, nothing for rxe0.
    let far = find(&r, "GPU 0000:01:00.0 x mlx5_0");
    assert_eq!(
        (far.status, far.value.as_str()),
        (Status::Warn, "SYS: no GPUDirect RDMA by default")
    );
    assert!(far
        .remedy
        .as_deref()
        .unwrap()
        .contains("NCCL_NET_GDR_LEVEL=SYS"));
    let near = find(&r, "GPU 0000:01:00.0 x mlx5_1");
    assert!(near
        .remedy
        .as_deref()
        .unwrap()
        .contains("NCCL_NET_GDR_LEVEL=PHB"));
    assert_eq!(find(&r, "GPU 0000:01:00.0 x rxe0").status, Status::Info);
}

#[test]
fn unprivileged_readers_get_unknown_acs() {
    let root = fixture("unprivileged");
    let t = pci::topology(
        &root,
        &dev(&root, "0000:03:00.0"),
        &dev(&root, "0000:04:00.0"),
    );
    assert_eq!(t.verdict, PathVerdict::SameSwitch);
    assert!(t.acs_unknown);
    assert!(t.acs_redirecting.is_empty());
    let r = run(&root);
    let it = find(&r, "GPU 0000:03:00.0 <-> mlx5_0");
    assert!(
        it.detail.as_deref().unwrap().contains("run as root"),
        "{it:?}"
    );
    assert_eq!(find(&r, "RLIMIT_MEMLOCK").status, Status::Warn);
}

#[test]
fn a_healthy_stack_passes() {
    let r = run(&fixture("switch"));
    assert_eq!(find(&r, "peer-memory clients").status, Status::Pass);
    assert_eq!(
        find(&r, "NVIDIA driver").value,
        "open kernel modules 595.45.04"
    );
    assert_eq!(find(&r, "CONFIG_RUST").status, Status::Pass);
    assert_eq!(find(&r, "GPU 0000:03:00.0 BAR1").value, "32 GiB");
    let io = find(&r, "IOMMU");
    assert_eq!(io.status, Status::Pass);
    assert!(
        io.detail
            .as_deref()
            .unwrap()
            .contains("0000:03:00.0 identity"),
        "{io:?}"
    );
    let nv = find(&r, "nv_mem");
    assert!(nv.detail.as_deref().unwrap().contains("alloc_mrs=3"));
    assert_eq!(
        r.items.iter().filter(|i| i.status == Status::Fail).count(),
        0,
        "{:#?}",
        r.items
    );
}

#[test]
fn conflicts_and_weak_settings_are_reported() {
    let r = run(&fixture("switch-acs"));
    let c = find(&r, "peer-memory clients");
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.value, "peermem_rs + nvidia_peermem");
    assert!(c
        .remedy
        .as_deref()
        .unwrap()
        .contains("rmmod nvidia_peermem"));
    assert_eq!(find(&r, "NVIDIA driver").status, Status::Warn);
    // No CONFIG_RUST only matters for peermem_rs: a fact, not a warning.
    assert_eq!(find(&r, "CONFIG_RUST").status, Status::Info);
    assert_eq!(find(&r, "IOMMU").status, Status::Warn);
    assert_eq!(r.exit_code, 1);
    assert_eq!(r.status, Status::Fail);
}

#[test]
fn no_gpu_no_device_means_untested() {
    let dir = std::env::temp_dir().join(format!("pmprobe-empty-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("proc")).unwrap();
    let r = run(&SysRoot::at(&dir));
    assert_eq!(find(&r, "GPU").status, Status::Untested);
    assert_eq!(find(&r, "RDMA device").status, Status::Untested);
    assert_eq!(r.exit_code, crate::report::EXIT_UNTESTED);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dmabuf_only_kernel_is_not_a_failure() {
    let r = run(&fixture("dmabuf-only"));
    let c = find(&r, "peer-memory clients");
    assert_eq!(c.status, Status::Info, "{c:?}");
    assert!(c.value.contains("no peer-memory interface"));
    assert_eq!(find(&r, "mlx5_0 port 1").status, Status::Pass);
    assert_eq!(find(&r, "rdma_cm").status, Status::Pass);
    assert!(find(&r, "NCCL >= 2.23.4")
        .value
        .contains("no peer-memory client"));
    assert_eq!(
        r.exit_code,
        0,
        "{:#?}",
        r.items
            .iter()
            .filter(|i| i.status != Status::Pass && i.status != Status::Info)
            .collect::<Vec<_>>()
    );
}

#[test]
fn nvidia_peermem_on_a_core_without_sysfs_is_seen_by_new_libraries() {
    let r = run(&fixture("peermem-loaded"));
    let c = find(&r, "peer-memory clients");
    assert_eq!(
        (c.status, c.value.as_str()),
        (Status::Info, "nvidia_peermem loaded")
    );
    assert_eq!(find(&r, "NCCL >= 2.23.4").status, Status::Pass);
    let old = find(&r, "NCCL <= 2.22");
    assert_eq!(old.status, Status::Warn);
    assert!(old
        .detail
        .as_deref()
        .unwrap()
        .contains("memory_peers/nv_mem/version"));
    assert_eq!(find(&r, "UCX >= 1.18").status, Status::Pass);
    assert_eq!(find(&r, "NVSHMEM all").status, Status::Pass);
    let ib = find(&r, "mlx5_0 port 1");
    assert_eq!(ib.status, Status::Pass);
    assert!(ib.detail.as_deref().unwrap().contains("SM LID 1"), "{ib:?}");
    assert_eq!(
        find(&r, "GPU 0000:03:00.0 x mlx5_0").value,
        "PIX: GPUDirect RDMA by default"
    );
    assert_eq!(r.exit_code, 0, "{:#?}", r.items);
}

#[test]
fn a_port_down_fails_with_the_real_netdev() {
    let r = run(&fixture("port-down"));
    let p = find(&r, "mlx5_0 port 1");
    assert_eq!(
        (p.status, p.value.as_str()),
        (
            Status::Fail,
            "DOWN, Disabled, Ethernet, 100 Gb/sec (2X HDR)"
        )
    );
    assert!(
        p.remedy
            .as_deref()
            .unwrap()
            .contains("ip link set ens1f0np0 up"),
        "{p:?}"
    );
    assert_eq!(r.exit_code, 1);
}

#[test]
fn geforce_is_flagged() {
    let r = run(&fixture("geforce"));
    let g = find(&r, "GPU 0000:01:00.0");
    assert_eq!(
        (g.status, g.value.as_str()),
        (Status::Warn, "NVIDIA GeForce RTX 4090")
    );
    assert!(g
        .detail
        .as_deref()
        .unwrap()
        .contains("GPU_DIRECT_RDMA_SUPPORTED = 0"));
    assert_eq!(find(&r, "GPU 0000:01:00.0 BAR1").status, Status::Warn);
    assert!(r.gpus[0].geforce);
}

#[test]
fn doctor_names_which_nvidia_peermem_is_loaded_and_the_ofed_version() {
    // NVIDIA's nvidia-peermem under DOCA-OFED 25.10.
    let r = run(&fixture("peermem-loaded"));
    let m = find(&r, "nvidia_peermem");
    assert!(
        m.value
            .starts_with("loaded (NVIDIA's nvidia-peermem 580.95.05)"),
        "{m:?}"
    );
    assert!(m
        .detail
        .as_deref()
        .unwrap()
        .contains("persistent_api_support"));
    assert_eq!(r.peer_clients.len(), 1);
    assert_eq!(r.peer_clients[0].origin, ClientOrigin::Nvidia);
    let o = find(&r, "MLNX_OFED/DOCA-OFED");
    assert_eq!(o.value, "25.10-1.2.8");
    assert_eq!(
        o.detail.as_deref(),
        Some("from /sys/module/mlx5_core/version")
    );
    assert_eq!(r.rdma_stack.version.as_deref(), Some("25.10-1.2.8"));
    // peermem-rs (as peermem_rs) on the kernel's own stack: no OFED version.
    let r = run(&fixture("switch"));
    let m = find(&r, "peermem_rs");
    assert!(
        m.value
            .starts_with("loaded (peermem-rs 0.1.0, mode=invalidate)"),
        "{m:?}"
    );
    assert!(
        m.detail.as_deref().unwrap().contains("QP/CQ/SRQ buffers"),
        "{m:?}"
    );
    assert_eq!(r.peer_clients[0].origin, ClientOrigin::PeermemRs);
    let o = find(&r, "MLNX_OFED/DOCA-OFED");
    assert_eq!(o.value, "unknown");
    assert!(o
        .detail
        .as_deref()
        .unwrap()
        .contains("no OFED version found"));
    assert!(r.rdma_stack.version.is_none() && r.rdma_stack.source.is_none());
}

/// A throwaway sysfs tree with one loaded module and its parameter files.
fn module_tree(tag: &str, module: &str, params: &[&str]) -> std::path::PathBuf {
    let t = std::env::temp_dir().join(format!("pmprobe-ident-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    let pdir = t.join(format!("sys/module/{module}/parameters"));
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::create_dir_all(t.join("proc")).unwrap();
    std::fs::write(
        t.join("proc/modules"),
        format!("{module} 16384 0 - Live 0x0 (OE)\n"),
    )
    .unwrap();
    for p in params {
        std::fs::write(pdir.join(p), "x\n").unwrap();
    }
    t
}

#[test]
fn ours_installed_as_nvidia_peermem_is_told_apart_by_its_parameters() {
    let cases: [(&str, &[&str], ClientOrigin); 4] = [
        (
            "ours",
            &["mode", "peer_client_name"],
            ClientOrigin::PeermemRs,
        ),
        (
            "nvidia",
            &["peerdirect_support", "persistent_api_support"],
            ClientOrigin::Nvidia,
        ),
        ("none", &[], ClientOrigin::Unknown),
        ("other", &["debug"], ClientOrigin::Unknown),
    ];
    for (tag, params, want) in cases {
        let t = module_tree(tag, "nvidia_peermem", params);
        let root = SysRoot::at(&t);
        let c = sysinfo::client_identity(&root, "nvidia_peermem");
        assert_eq!(c.origin, want, "{tag}: {c:?}");
        let r = run(&root);
        let m = find(&r, "nvidia_peermem");
        assert!(m.value.starts_with("loaded ("), "{tag}: {m:?}");
        if want == ClientOrigin::Unknown {
            assert!(
                m.detail
                    .as_deref()
                    .unwrap()
                    .starts_with("cannot tell who built it"),
                "{tag}: {m:?}"
            );
        }
        std::fs::remove_dir_all(&t).unwrap();
    }
}

#[test]
fn the_verdict_lists_what_to_fix() {
    let r = run(&fixture("switch-acs"));
    assert_eq!(r.verdict.exit_code, 1);
    assert_eq!(r.verdict.status, Status::Fail);
    assert!(
        r.verdict
            .failed
            .contains(&"modules/peer-memory clients".to_string()),
        "{:?}",
        r.verdict
    );
    assert!(
        r.verdict
            .summary
            .starts_with(&format!("{} problem(s) to fix: ", r.verdict.failed.len())),
        "{}",
        r.verdict.summary
    );
    let r = run(&fixture("peermem-loaded"));
    assert_eq!(r.verdict.exit_code, 0);
    assert!(r.verdict.failed.is_empty() && r.verdict.untested.is_empty());
    assert!(
        r.verdict.summary == "nothing to fix" || r.verdict.summary.starts_with("nothing broken; "),
        "{}",
        r.verdict.summary
    );
    let empty = verdict(&[], 3);
    assert_eq!(empty.summary, "nothing to fix");
    let u = verdict(&[item("pcie", "GPU", Status::Untested, "none")], 3);
    assert_eq!(u.summary, "could not assess: pcie/GPU");
}

#[test]
fn a_saved_tree_reads_back_as_the_original() {
    // `doctor --save DIR`: what doctor read, copied; `--sysroot DIR` must
    // give the same report (links, their targets and contents kept).
    for tree in [
        "switch",
        "switch-acs",
        "peermem-loaded",
        "dmabuf-only",
        "port-down",
        "sockets",
    ] {
        let rec = fixture(tree).recording();
        let a = run(&rec);
        let dir = std::env::temp_dir().join(format!("pmprobe-save-{tree}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let n = rec.save(&dir).expect("save");
        assert!(n > 10, "{tree}: only {n} paths saved");
        let b = run(&SysRoot::at(&dir));
        let (a, b) = (
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap(),
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(a, b, "{tree}: the saved tree reads differently");
    }
    assert!(
        fixture("switch").save(&std::env::temp_dir()).is_err(),
        "not recording"
    );
}

/// A tree with only /proc: the kernel release `osrelease` and
/// /proc/config.gz holding `config` (printf format), named `name`.
fn config_gz_tree(name: &str, osrelease: &str, config: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pmprobe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
    std::fs::write(
        dir.join("proc/sys/kernel/osrelease"),
        format!("{osrelease}\n"),
    )
    .unwrap();
    let gz = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf '{config}' | gzip -c"))
        .output()
        .unwrap();
    std::fs::write(dir.join("proc/config.gz"), gz.stdout).unwrap();
    dir
}

#[test]
fn a_kernel_without_an_rdma_core_fails_the_dma_buf_row() {
    // Issue 33: "kernel >= 5.12" passed on a kernel built without
    // CONFIG_INFINIBAND, where neither path can work.
    let dir = config_gz_tree(
        "noib",
        "6.12.1-custom",
        "CONFIG_RUST=y\\n# CONFIG_INFINIBAND is not set\\n",
    );
    let r = run(&SysRoot::at(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    let k = find(&r, "kernel >= 5.12");
    assert_eq!(k.status, Status::Fail, "{k:?}");
    let detail = k.detail.as_deref().unwrap();
    assert!(detail.contains("CONFIG_INFINIBAND is not set"), "{k:?}");
}

#[test]
fn config_gz_tegra_and_each_library_with_its_rule() {
    // No config file: /proc/config.gz is read (gzip -dc); a Tegra device
    // tree is named as a platform without PCIe GPUDirect RDMA.
    let dir = config_gz_tree(
        "cfggz",
        "6.8.12-tegra",
        "CONFIG_RUST=y\\nCONFIG_INFINIBAND=m\\nCONFIG_INFINIBAND_ON_DEMAND_PAGING=y\\n",
    );
    std::fs::create_dir_all(dir.join("proc/device-tree")).unwrap();
    std::fs::write(
        dir.join("proc/device-tree/compatible"),
        "nvidia,p3737\0nvidia,tegra234\0",
    )
    .unwrap();
    let r = run(&SysRoot::at(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    let odp = find(&r, "CONFIG_INFINIBAND_ON_DEMAND_PAGING");
    assert_eq!(
        (odp.status, odp.value.as_str()),
        (Status::Pass, "y"),
        "{odp:?}"
    );
    assert!(odp.detail.as_deref().unwrap().contains("/proc/config.gz"));
    assert_eq!(find(&r, "CONFIG_RUST").status, Status::Pass);
    assert_eq!(find(&r, "Tegra").status, Status::Warn);
    assert_eq!(find(&r, "kernel >= 5.12").status, Status::Pass);
    assert_eq!(find(&r, "peermem-rs DKMS").value, "not installed");

    // A GPU and a NIC: one decision per library, each with its rule.
    let r = run(&fixture("switch"));
    let libs: Vec<&str> = r.libraries.iter().map(|d| d.library).collect();
    assert_eq!(libs.len(), 11, "{libs:?}");
    assert!(
        r.libraries
            .iter()
            .filter(|d| !d.library.starts_with("ibv_reg_mr"))
            .all(|d| d.rule.contains("src/")),
        "{:#?}",
        r.libraries
    );
    let it = find(&r, "NCCL GPU 0000:03:00.0 x mlx5_0");
    assert!(
        it.detail.as_deref().unwrap().contains("[rule: NCCL 2.30.6"),
        "{it:?}"
    );
}

#[test]
fn unified_memory_and_coherent_gpus_are_named() {
    // The GeForce tree with the model line of DGX Spark's integrated GPU,
    // then of a Grace Hopper superchip.
    use crate::platform::Kind;
    for (model, kind, status) in [
        ("NVIDIA GB10", Kind::Integrated, Status::Warn),
        ("NVIDIA GH200 480GB", Kind::Coherent, Status::Info),
        ("NVIDIA GeForce RTX 4090", Kind::Discrete, Status::Info),
    ] {
        let dir = std::env::temp_dir().join(format!("pmprobe-platform-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let src = format!("{}/tests/fixtures/geforce", env!("CARGO_MANIFEST_DIR"));
        let ok = std::process::Command::new("cp")
            .args(["-a", &src])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success());
        let info = dir.join("proc/driver/nvidia/gpus/0000:01:00.0/information");
        let text = std::fs::read_to_string(&info).unwrap();
        let text = text.replace("NVIDIA GeForce RTX 4090", model);
        std::fs::write(&info, text).unwrap();
        let r = run(&SysRoot::at(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.gpus[0].platform, kind, "{model}");
        let row = r.items.iter().find(|i| i.area == "platform");
        match kind {
            Kind::Discrete => assert!(row.is_none(), "{row:?}"),
            _ => {
                let row = row.unwrap_or_else(|| panic!("{model}: no platform row"));
                assert_eq!(row.status, status, "{row:?}");
                assert_eq!(row.value, kind.label());
                assert!(row.detail.as_deref().unwrap().contains(model), "{row:?}");
            }
        }
    }
}

/// A tree with these clients in /sys/kernel/mm/memory_peers, each with its
/// `num_alloc_mrs`.
fn peers_tree(tag: &str, peers: &[(&str, u64)]) -> super::testtree::Tree {
    let t = super::testtree::tree(tag);
    for (name, allocs) in peers {
        let d = format!("sys/kernel/mm/memory_peers/{name}");
        super::testtree::mk(&t, &format!("{d}/version"), b"1.0\n");
        super::testtree::mk(
            &t,
            &format!("{d}/num_alloc_mrs"),
            format!("{allocs}\n").as_bytes(),
        );
    }
    t
}

#[test]
fn a_second_registered_client_that_serves_nothing_is_reported() {
    // nv_mem (nv_peer_mem, say) registered first and serves; gdr_test
    // (peermem-rs under another name) registered after it and gets nothing.
    let t = peers_tree("idle-peer", &[("nv_mem", 4), ("gdr_test", 0)]);
    let r = run(&SysRoot::at(&*t));
    let all = find(&r, "registered clients");
    assert_eq!(all.status, Status::Warn, "{all:?}");
    assert!(all.value.contains("nv_mem") && all.value.contains("gdr_test"));
    assert!(all
        .detail
        .as_deref()
        .unwrap()
        .contains("registration order"));
    let idle = find(&r, "gdr_test");
    assert_eq!(
        (idle.status, idle.value.as_str()),
        (Status::Warn, "version 1.0, serves nothing")
    );
    assert!(idle.detail.as_deref().unwrap().contains("while nv_mem did"));
    assert_eq!(find(&r, "nv_mem").status, Status::Info);
}

#[test]
fn one_registered_client_or_none_serving_yet_is_no_warning() {
    let t = peers_tree("one-peer", &[("nv_mem", 0)]);
    let r = run(&SysRoot::at(&*t));
    assert!(r.items.iter().all(|i| i.name != "registered clients"));
    assert_eq!(find(&r, "nv_mem").status, Status::Info);
    // Two registered, neither used yet: the pair is reported, neither is
    // said to serve nothing (nothing was asked for).
    let t = peers_tree("two-idle", &[("nv_mem", 0), ("gdr_test", 0)]);
    let r = run(&SysRoot::at(&*t));
    assert_eq!(find(&r, "registered clients").status, Status::Warn);
    assert_eq!(find(&r, "gdr_test").status, Status::Info);
    assert_eq!(find(&r, "nv_mem").status, Status::Info);
}
