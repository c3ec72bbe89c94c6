use super::*;
use crate::fixture;
use crate::root::SysRoot;
use crate::sysinfo::KernelConfig;

/// The decisions for the first GPU and RDMA device `nic` of `tree`, with
/// the kernel configuration replaced by `config` (None: none found).
fn decisions(tree: &str, nic: usize, config: Option<&str>, env: &Env) -> Vec<Decision> {
    let root = fixture(tree);
    let mut sys = SysState::gather(&root);
    sys.kconfig = config.map(|c| KernelConfig::new("test-config", c));
    decide_on(&root, &sys, nic, env)
}

fn decide_on(root: &SysRoot, sys: &SysState, nic: usize, env: &Env) -> Vec<Decision> {
    let det = crate::nccl::detection(root);
    let g = &sys.gpus[0];
    let n = &sys.rdma[nic];
    let t = n.pci.as_ref().map(|p| crate::pci::topology(root, g, p));
    let path = crate::nccl::predict(&g.bdf, &n.name, t.as_ref());
    decide(sys, &det, env, n, &g.bdf, &path)
}

fn route<'a>(d: &'a [Decision], lib: &str) -> (&'a Route, &'a str) {
    let x = d
        .iter()
        .find(|x| x.library.starts_with(lib))
        .unwrap_or_else(|| panic!("no {lib}: {d:#?}"));
    (&x.route, x.why.as_str())
}

const ODP: &str = "CONFIG_INFINIBAND_ON_DEMAND_PAGING=y\n";

#[test]
fn open_driver_mlx5_and_odp_take_dma_buf_first() {
    // switch: open modules 595, mlx5 under the GPU's switch, nv_mem client.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    assert_eq!(route(&d, "NCCL").0, &Route::DmaBuf, "{d:#?}");
    assert_eq!(route(&d, "UCX").0, &Route::DmaBuf);
    assert_eq!(route(&d, "NVSHMEM").0, &Route::DmaBuf);
    assert_eq!(route(&d, "libfabric").0, &Route::DmaBuf);
    // Plain ibv_reg_mr users only ever use the peer-memory client.
    assert_eq!(route(&d, "ibv_reg_mr").0, &Route::PeerMemory);
    assert!(d.iter().all(|x| !x.rule.is_empty()));
    assert!(route(&d, "NCCL").1.contains("dma-buf works"));
    assert!(RULE_NCCL.contains("2.30.6") && RULE_NCCL.contains("src/transport/net_ib/gdr.cc"));
}

#[test]
fn switches_that_turn_dma_buf_off_fall_back_to_peer_memory() {
    let env = Env {
        nccl_dmabuf_enable: Some("0".into()),
        fi_hmem_cuda_use_dmabuf: Some("0".into()),
        nvshmem_ib_disable_dmabuf: Some("1".into()),
        ucx_ib_gpu_direct_rdma: Some("n".into()),
        ..Env::default()
    };
    let d = decisions("switch", 0, Some(ODP), &env);
    let (r, why) = route(&d, "NCCL");
    assert_eq!(r, &Route::PeerMemory);
    assert!(why.starts_with("NCCL_DMABUF_ENABLE=0;"), "{why}");
    assert!(
        why.contains("/sys/kernel/mm/memory_peers/nv_mem/version"),
        "{why}"
    );
    assert_eq!(route(&d, "libfabric").0, &Route::PeerMemory);
    assert_eq!(route(&d, "NVSHMEM").0, &Route::PeerMemory);
    assert_eq!(route(&d, "UCX"), (&Route::None, "UCX_IB_GPU_DIRECT_RDMA=n"));
}

#[test]
fn without_odp_mlx5_takes_peer_memory_and_nvshmem_is_warned() {
    let d = decisions(
        "switch",
        0,
        Some("# CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set\n"),
        &Env::default(),
    );
    let (r, why) = route(&d, "NCCL");
    assert_eq!(r, &Route::PeerMemory);
    assert!(
        why.contains("CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set"),
        "{why}"
    );
    // NVSHMEM asks the GPU only: dma-buf, and its registrations will fail.
    let (r, why) = route(&d, "NVSHMEM");
    assert_eq!(r, &Route::DmaBuf);
    assert!(
        why.contains("will fail") && why.contains("NVSHMEM_IB_DISABLE_DMABUF=1"),
        "{why}"
    );
    // No kernel configuration at all: NCCL's choice cannot be known.
    let d = decisions("switch", 0, None, &Env::default());
    let (r, why) = route(&d, "NCCL");
    assert_eq!(r, &Route::Unknown);
    assert!(why.contains("else peer memory"), "{why}");
}

#[test]
fn proprietary_driver_and_old_kernels_have_no_dma_buf() {
    // switch-acs: proprietary 535; two clients loaded, but no file any
    // library probes exists: NCCL stages through host memory although
    // plain ibv_reg_mr would work.
    let d = decisions("switch-acs", 0, Some(ODP), &Env::default());
    let (r, why) = route(&d, "NCCL");
    assert_eq!(r, &Route::None);
    assert!(
        why.contains("proprietary NVIDIA kernel module 535"),
        "{why}"
    );
    assert!(
        why.contains("no peer-memory client is seen by its probe"),
        "{why}"
    );
    assert_eq!(route(&d, "NVSHMEM").0, &Route::None);
    assert_eq!(route(&d, "ibv_reg_mr").0, &Route::PeerMemory);
    let root = fixture("switch");
    let mut sys = SysState::gather(&root);
    sys.kconfig = Some(KernelConfig::new("c", ODP));
    sys.kernel = "5.10.0-30-amd64".into();
    let d = decide_on(&root, &sys, 0, &Env::default());
    let (r, why) = route(&d, "NCCL");
    assert_eq!(r, &Route::PeerMemory);
    assert!(why.contains("older than 5.12"), "{why}");
}

#[test]
fn a_dma_buf_only_kernel_leaves_plain_verbs_without_a_path() {
    // Upstream kernel: no peer-memory interface, open modules, no client.
    let d = decisions("dmabuf-only", 0, Some(ODP), &Env::default());
    assert_eq!(route(&d, "NCCL").0, &Route::DmaBuf, "{d:#?}");
    let (r, why) = route(&d, "ibv_reg_mr");
    assert_eq!(r, &Route::None);
    assert!(why.contains("no peer-memory interface"), "{why}");
    // dma-buf off: NCCL has nothing left and stages through host memory.
    let env = Env {
        nccl_dmabuf_enable: Some("0".into()),
        ..Env::default()
    };
    let d = decisions("dmabuf-only", 0, Some(ODP), &env);
    assert_eq!(route(&d, "NCCL").0, &Route::None);
}

#[test]
fn nccl_gdr_level_bounds_both_mechanisms() {
    // sockets: mlx5_1 is on the GPU's NUMA node across host bridges (NODE),
    // rxe0 is a software device.
    let root = fixture("sockets");
    let mut sys = SysState::gather(&root);
    sys.kconfig = Some(KernelConfig::new("c", ODP));
    let far = sys.rdma.iter().position(|r| r.name == "mlx5_0").unwrap();
    let d = decide_on(&root, &sys, far, &Env::default());
    let (r, why) = route(&d, "NCCL");
    assert_eq!(r, &Route::None, "{why}");
    assert!(why.contains("NCCL_NET_GDR_LEVEL=PXB (default)"), "{why}");
    let env = Env {
        nccl_net_gdr_level: Some("SYS".into()),
        ..Env::default()
    };
    let d = decide_on(&root, &sys, far, &env);
    assert_ne!(route(&d, "NCCL").0, &Route::None, "{d:#?}");
    let env = Env {
        nccl_net_gdr_level: Some("7".into()),
        ..Env::default()
    };
    assert_eq!(
        route(&decide_on(&root, &sys, far, &env), "NCCL").0,
        &Route::Unknown
    );
    let soft = sys.rdma.iter().position(|r| r.name == "rxe0").unwrap();
    let d = decide_on(&root, &sys, soft, &Env::default());
    assert_eq!(route(&d, "NCCL").0, &Route::None);
    assert_eq!(route(&d, "ibv_reg_mr").0, &Route::None);
    assert!(matches!(dmabuf_ready(&sys, &sys.rdma[soft]), DmaBuf::No(w) if w.contains("software")));
}

fn decision<'a>(d: &'a [Decision], lib: &str) -> &'a Decision {
    d.iter()
        .find(|x| x.library.starts_with(lib))
        .unwrap_or_else(|| panic!("no {lib}: {d:#?}"))
}

const NO_ODP: &str = "# CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set\n";

#[test]
fn gloo_goes_by_module_name_and_misses_peermem_rs_under_its_own() {
    // switch: peermem_rs loaded under its own name, a working client.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    let g = decision(&d, "PyTorch Gloo");
    assert_eq!(g.route, Route::None, "{g:#?}");
    assert!(
        g.why
            .contains("peermem_rs is loaded under its own module name"),
        "{g:#?}"
    );
    assert!(
        g.why
            .starts_with("with GLOO_DEVICE_TRANSPORT=IBVERBS (unset here"),
        "{g:#?}"
    );
    assert!(g
        .remedy
        .as_deref()
        .unwrap()
        .contains("PEERMEM_NAME=nvidia_peermem"));
    // nvidia_peermem loaded (NVIDIA's or ours under the DKMS name): found.
    let env = Env {
        gloo_device_transport: Some("ibverbs".into()),
        ..Env::default()
    };
    let d = decisions("peermem-loaded", 0, Some(ODP), &env);
    let g = decision(&d, "PyTorch Gloo");
    assert_eq!(g.route, Route::PeerMemory, "{g:#?}");
    assert!(
        g.why.starts_with("gloo finds module nvidia_peermem"),
        "{g:#?}"
    );
    assert!(g.remedy.is_none());
    // Another transport: gloo's verbs are not in play, nothing to fix.
    let env = Env {
        gloo_device_transport: Some("TCP".into()),
        ..Env::default()
    };
    let g = decisions("switch", 0, Some(ODP), &env);
    let g = decision(&g, "PyTorch Gloo");
    assert_eq!((g.route, g.remedy.is_none()), (Route::None, true), "{g:#?}");
    // No client at all (upstream kernel): host staging, nothing to rename.
    let d = decisions("dmabuf-only", 0, Some(ODP), &Env::default());
    let g = decision(&d, "PyTorch Gloo");
    assert_eq!((g.route, g.remedy.is_none()), (Route::None, true), "{g:#?}");
}

#[test]
fn mooncake_takes_the_path_it_was_told_and_fails_without_it() {
    // Default (peer memory) with a client loaded: fine.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    let m = decision(&d, "Mooncake");
    assert_eq!(
        (m.route, m.remedy.is_none()),
        (Route::PeerMemory, true),
        "{m:#?}"
    );
    assert!(m.why.contains("build time"), "{m:#?}");
    // Default on a kernel without the peer-memory interface: every
    // registration fails; dma-buf works there, so the setting is the way.
    let d = decisions("dmabuf-only", 0, Some(ODP), &Env::default());
    let m = decision(&d, "Mooncake");
    assert_eq!(m.route, Route::PeerMemory, "{m:#?}");
    assert!(m.why.contains("will fail"), "{m:#?}");
    assert!(m
        .remedy
        .as_deref()
        .unwrap()
        .starts_with("WITH_NVIDIA_PEERMEM=0"));
    // Told dma-buf where mlx5 has no on-demand paging: it will fail too.
    let env = Env {
        with_nvidia_peermem: Some("false".into()),
        ..Env::default()
    };
    let d = decisions("switch", 0, Some(NO_ODP), &env);
    let m = decision(&d, "Mooncake");
    assert_eq!(m.route, Route::DmaBuf, "{m:#?}");
    assert!(m
        .remedy
        .as_deref()
        .unwrap()
        .contains("unset WITH_NVIDIA_PEERMEM"));
    let d = decisions("switch", 0, Some(ODP), &env);
    let m = decision(&d, "Mooncake");
    assert_eq!(
        (m.route, m.remedy.is_none()),
        (Route::DmaBuf, true),
        "{m:#?}"
    );
}

#[test]
fn gin_gdaki_sees_only_nvidia_peermem_and_falls_back_to_dma_buf() {
    // switch: nv_mem in memory_peers, module peermem_rs. GDAKI ignores both.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    assert_eq!(
        decision(&d, "NCCL GIN (GDAKI)").route,
        Route::DmaBuf,
        "{d:#?}"
    );
    let d = decisions("switch", 0, Some(NO_ODP), &Env::default());
    let g = decision(&d, "NCCL GIN (GDAKI)");
    assert_eq!(g.route, Route::None, "{g:#?}");
    assert!(g.why.contains("Unable to use GIN"), "{g:#?}");
    assert!(
        g.why.contains("the loaded client (peermem_rs) goes unseen"),
        "{g:#?}"
    );
    assert!(g.remedy.as_deref().unwrap().contains("nvidia_peermem"));
    // The proxy backend accepts the memory_peers file.
    let p = decision(&d, "NCCL GIN (proxy)");
    assert_eq!(p.route, Route::PeerMemory, "{p:#?}");
    assert!(
        p.why.contains("/sys/kernel/mm/memory_peers/nv_mem/version"),
        "{p:#?}"
    );
    // A module named nvidia_peermem is what GDAKI accepts.
    let d = decisions("peermem-loaded", 0, Some(NO_ODP), &Env::default());
    let g = decision(&d, "NCCL GIN (GDAKI)");
    assert_eq!(g.route, Route::PeerMemory, "{g:#?}");
    assert!(
        g.why.contains("/sys/module/nvidia_peermem/version"),
        "{g:#?}"
    );
}

#[test]
fn gda_and_gpunetio_take_dma_buf_else_the_address_through_a_client() {
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    for lib in ["UCX GDA", "DOCA GPUNetIO"] {
        assert_eq!(decision(&d, lib).route, Route::DmaBuf, "{d:#?}");
    }
    assert!(decision(&d, "DOCA GPUNetIO")
        .why
        .contains("gdrdrv is not loaded"));
    let d = decisions("switch", 0, Some(NO_ODP), &Env::default());
    let g = decision(&d, "UCX GDA");
    assert_eq!(g.route, Route::PeerMemory, "{g:#?}");
    assert!(
        g.why
            .contains("by address, through the loaded client (peermem_rs)"),
        "{g:#?}"
    );
    // Upstream kernel without on-demand paging: neither way exists.
    let d = decisions("dmabuf-only", 0, Some(NO_ODP), &Env::default());
    let g = decision(&d, "DOCA GPUNetIO");
    assert_eq!(g.route, Route::None, "{g:#?}");
    assert!(g.why.contains("cannot be registered"), "{g:#?}");
    // A software device: mlx5 only.
    let root = fixture("sockets");
    let mut sys = SysState::gather(&root);
    sys.kconfig = Some(KernelConfig::new("c", ODP));
    let soft = sys.rdma.iter().position(|r| r.name == "rxe0").unwrap();
    let d = decide_on(&root, &sys, soft, &Env::default());
    for lib in [
        "NCCL GIN (GDAKI)",
        "NCCL GIN (proxy)",
        "UCX GDA",
        "DOCA GPUNetIO",
        "PyTorch Gloo",
        "Mooncake",
    ] {
        assert_eq!(decision(&d, lib).route, Route::None, "{lib}: {d:#?}");
    }
}
