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

/// Asserts one library's decision: its route, a part of its why, and a part
/// of its remedy (None: no remedy, so no warning).
fn expect(d: &[Decision], lib: &str, route: Route, why: &str, remedy: Option<&str>) {
    let x = d
        .iter()
        .find(|x| x.library.starts_with(lib))
        .unwrap_or_else(|| panic!("no {lib}: {d:#?}"));
    assert_eq!(x.route, route, "{x:#?}");
    assert!(x.why.contains(why), "{why:?} not in {x:#?}");
    match (remedy, &x.remedy) {
        (None, None) => {}
        (Some(want), Some(got)) => assert!(got.contains(want), "{want:?} not in {x:#?}"),
        _ => panic!("remedy {remedy:?} expected: {x:#?}"),
    }
}

const NO_ODP: &str = "# CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set\n";

fn env_with(f: impl FnOnce(&mut Env)) -> Env {
    let mut e = Env::default();
    f(&mut e);
    e
}

#[test]
fn gloo_goes_by_module_name_and_misses_peermem_rs_under_its_own() {
    let rename = Some("PEERMEM_NAME=nvidia_peermem");
    let ibverbs = env_with(|e| e.gloo_device_transport = Some("ibverbs".into()));
    let tcp = env_with(|e| e.gloo_device_transport = Some("TCP".into()));
    let gloo = "PyTorch Gloo";
    // switch: peermem_rs loaded under its own name, a working client.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    expect(
        &d,
        gloo,
        Route::None,
        "peermem_rs is loaded under its own module name",
        rename,
    );
    expect(
        &d,
        gloo,
        Route::None,
        "with GLOO_DEVICE_TRANSPORT=IBVERBS (unset here",
        rename,
    );
    // nvidia_peermem loaded (NVIDIA's or ours under the DKMS name): found.
    let d = decisions("peermem-loaded", 0, Some(ODP), &ibverbs);
    expect(
        &d,
        gloo,
        Route::PeerMemory,
        "gloo finds module nvidia_peermem",
        None,
    );
    // Another transport: gloo's verbs are not in play, nothing to fix.
    let d = decisions("switch", 0, Some(ODP), &tcp);
    expect(&d, gloo, Route::None, "GLOO_DEVICE_TRANSPORT=TCP", None);
    // No client at all (upstream kernel): host staging, nothing to rename.
    let d = decisions("dmabuf-only", 0, Some(ODP), &Env::default());
    expect(&d, gloo, Route::None, "no module named nv_peer_mem", None);
}

#[test]
fn mooncake_takes_the_path_it_was_told_and_fails_without_it() {
    let m = "Mooncake";
    // Default (peer memory) with a client loaded: fine, with the caveat.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    expect(&d, m, Route::PeerMemory, "build time", None);
    // Default on a kernel without the peer-memory interface: every
    // registration fails; dma-buf works there, so the setting is the way.
    let d = decisions("dmabuf-only", 0, Some(ODP), &Env::default());
    expect(
        &d,
        m,
        Route::PeerMemory,
        "will fail",
        Some("WITH_NVIDIA_PEERMEM=0 in"),
    );
    // Told dma-buf where mlx5 has no on-demand paging: it will fail too.
    let off = env_with(|e| e.with_nvidia_peermem = Some("false".into()));
    let d = decisions("switch", 0, Some(NO_ODP), &off);
    expect(
        &d,
        m,
        Route::DmaBuf,
        "will fail",
        Some("unset WITH_NVIDIA_PEERMEM"),
    );
    let d = decisions("switch", 0, Some(ODP), &off);
    expect(&d, m, Route::DmaBuf, "which works here", None);
}

#[test]
fn gin_gdaki_sees_only_nvidia_peermem_and_falls_back_to_dma_buf() {
    let (gdaki, proxy) = ("NCCL GIN (GDAKI)", "NCCL GIN (proxy)");
    // switch: nv_mem in memory_peers, module peermem_rs. GDAKI ignores both.
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    expect(&d, gdaki, Route::DmaBuf, "dma-buf works here", None);
    let d = decisions("switch", 0, Some(NO_ODP), &Env::default());
    expect(
        &d,
        gdaki,
        Route::None,
        "Unable to use GIN",
        Some("nvidia_peermem"),
    );
    expect(
        &d,
        gdaki,
        Route::None,
        "the loaded client (peermem_rs) goes unseen",
        Some("nvidia_peermem"),
    );
    // The proxy backend accepts the memory_peers file.
    expect(
        &d,
        proxy,
        Route::PeerMemory,
        "/sys/kernel/mm/memory_peers/nv_mem/version",
        None,
    );
    // A module named nvidia_peermem is what GDAKI accepts.
    let d = decisions("peermem-loaded", 0, Some(NO_ODP), &Env::default());
    expect(
        &d,
        gdaki,
        Route::PeerMemory,
        "/sys/module/nvidia_peermem/version",
        None,
    );
}

#[test]
fn gda_and_gpunetio_take_dma_buf_else_the_address_through_a_client() {
    let (gda, doca) = ("UCX GDA", "DOCA GPUNetIO");
    let d = decisions("switch", 0, Some(ODP), &Env::default());
    expect(&d, gda, Route::DmaBuf, "dma-buf works here", None);
    expect(&d, doca, Route::DmaBuf, "gdrdrv is not loaded", None);
    let d = decisions("switch", 0, Some(NO_ODP), &Env::default());
    expect(
        &d,
        gda,
        Route::PeerMemory,
        "by address, through the loaded client (peermem_rs)",
        None,
    );
    // Upstream kernel without on-demand paging: neither way exists.
    let d = decisions("dmabuf-only", 0, Some(NO_ODP), &Env::default());
    expect(&d, doca, Route::None, "cannot be registered", None);
    // A software device: none of them.
    let root = fixture("sockets");
    let mut sys = SysState::gather(&root);
    sys.kconfig = Some(KernelConfig::new("c", ODP));
    let soft = sys.rdma.iter().position(|r| r.name == "rxe0").unwrap();
    let d = decide_on(&root, &sys, soft, &Env::default());
    for lib in [
        "NCCL GIN (GDAKI)",
        "NCCL GIN (proxy)",
        gda,
        doca,
        "PyTorch Gloo",
        "Mooncake",
    ] {
        assert_eq!(route(&d, lib).0, &Route::None, "{lib}: {d:#?}");
    }
}
