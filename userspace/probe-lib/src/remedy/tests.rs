use super::*;
use crate::fixture;

fn state(name: &str) -> SysState {
    SysState::gather(&fixture(name))
}

fn ctx(sys: &SysState, size: u64, bar1: Option<u64>) -> Context<'_> {
    Context { sys, size, bar1 }
}

#[test]
fn efault_on_gpu_memory_without_a_client_says_load_one() {
    let s = state("root-ports");
    assert!(!s.has_peer_client());
    let d = diagnose(Step::RegGpu, libc::EFAULT, &ctx(&s, 1 << 20, None));
    assert!(d.cause.contains("no peer-memory client"), "{d:?}");
    assert!(d.remedy.contains("modprobe peermem_rs"), "{d:?}");
}

#[test]
fn efault_with_a_client_loaded_names_it() {
    let s = state("switch");
    let d = diagnose(Step::RegGpu, libc::EFAULT, &ctx(&s, 1 << 20, None));
    assert!(d.cause.contains("nv_mem"), "{d:?}");
    assert!(d.cause.contains("peermem_rs"), "{d:?}");
    assert!(d.remedy.contains("dmesg"), "{d:?}");
}

#[test]
fn efault_on_a_kernel_without_the_interface_points_to_dmabuf() {
    let mut s = state("root-ports");
    s.peer_interface = Some(false);
    let d = diagnose(Step::RegGpu, libc::EFAULT, &ctx(&s, 1 << 20, None));
    assert!(d.cause.contains("no peer-memory interface"), "{d:?}");
    assert!(d.remedy.contains("dma-buf"), "{d:?}");
}

#[test]
fn dmabuf_unsupported() {
    let s = state("switch");
    for e in [libc::EOPNOTSUPP, libc::ENOSYS, 524] {
        let d = diagnose(Step::RegDmabuf, e, &ctx(&s, 1 << 20, None));
        assert!(d.cause.contains("no dma-buf MR support"), "{e}: {d:?}");
    }
}

#[test]
fn large_registrations_blame_bar1() {
    let s = state("switch");
    let c = ctx(&s, 512 << 20, Some(256 << 20));
    for (step, e) in [
        (Step::RegGpu, libc::ENOMEM),
        (Step::RegGpu, libc::EINVAL),
        (Step::RegDmabuf, libc::ENOMEM),
    ] {
        let d = diagnose(step, e, &c);
        assert!(d.cause.contains("BAR1"), "{e}: {d:?}");
        assert!(d.cause.contains("256 MiB"), "{e}: {d:?}");
    }
    // A big BAR1 and a small buffer: not a BAR1 problem.
    let d = diagnose(
        Step::RegGpu,
        libc::ENOMEM,
        &ctx(&s, 1 << 20, Some(32 << 30)),
    );
    assert!(!d.cause.contains("BAR1"), "{d:?}");
}

#[test]
fn enomem_with_a_small_memlock_limit() {
    let s = state("unprivileged");
    assert_eq!(s.memlock.unwrap().soft, Some(65536));
    let d = diagnose(Step::RegHost, libc::ENOMEM, &ctx(&s, 1 << 20, None));
    assert!(d.cause.contains("RLIMIT_MEMLOCK"), "{d:?}");
    assert!(d.remedy.contains("ulimit -l"), "{d:?}");
}

#[test]
fn einval_from_a_stub_client() {
    let s = state("switch");
    let d = diagnose(
        Step::RegGpu,
        libc::EINVAL,
        &ctx(&s, 1 << 20, Some(32 << 30)),
    );
    assert!(d.cause.contains("rejected"), "{d:?}");
}

#[test]
fn cuda_codes() {
    let s = state("switch-acs");
    let d = diagnose_cuda(801, "dma-buf export", &s);
    assert!(d.cause.contains("proprietary"), "{d:?}");
    assert!(d.remedy.contains("open"), "{d:?}");
    assert!(diagnose_cuda(100, "cuInit", &s).cause.contains("no GPU"));
    assert!(diagnose_cuda(2, "cuMemAlloc", &s).remedy.contains("--size"));
}

#[test]
fn completion_statuses() {
    assert!(diagnose_wc(12, false).cause.contains("retry"));
    assert!(diagnose_wc(10, true).remedy.contains("doctor"));
    assert!(diagnose_wc(10, false).cause.contains("protection"));
    assert!(diagnose_mismatch(true).remedy.contains("ACS"));
}

#[test]
fn cm_failures() {
    let r = diagnose_cm("connecting to 198.51.100.1:18700: expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED (status 8)").unwrap();
    assert!(r.remedy.contains("--listen"), "{r:?}");
    let a = diagnose_cm("resolving 10.0.0.9:18515: expected RDMA_CM_EVENT_ADDR_RESOLVED, got RDMA_CM_EVENT_ADDR_ERROR (status -110)").unwrap();
    assert!(a.cause.contains("no RDMA device"), "{a:?}");
    assert!(diagnose_cm("no RDMA CM event within 60 s")
        .unwrap()
        .remedy
        .contains("4791"));
    assert!(diagnose_cm("something else").is_none());
}

#[test]
fn nvidia_peermem_is_named_first_where_installed_and_no_rust_advice_without_config_rust() {
    let s = state("peermem-loaded");
    assert_eq!(s.config_rust.as_ref().map(|(on, _)| *on), Some(false));
    let r = load_client(&s);
    assert!(
        r.starts_with("load NVIDIA's client, installed with the driver: `modprobe nvidia-peermem`"),
        "{r}"
    );
    assert!(!r.contains("peermem_rs"), "{r}");
    // Not installed, no CONFIG_RUST: still no Rust module.
    let mut s = state("peermem-loaded");
    s.installed.clear();
    let r = load_client(&s);
    assert!(
        r.contains("modprobe nvidia-peermem") && r.contains("cannot run here"),
        "{r}"
    );
    assert!(!r.contains("modprobe peermem_rs"), "{r}");
    let d = diagnose(Step::RegGpu, libc::EINVAL, &ctx(&s, 1 << 20, None));
    assert!(!d.remedy.contains("peermem_rs"), "{d:?}");
}

#[test]
fn remedies_name_real_devices() {
    let mut s = state("port-down");
    let d = port_down(&s, "mlx5_0");
    assert!(d.remedy.contains("ip link set ens1f0np0 up"), "{d:?}");
    s.netdevs = vec![
        ("lo".into(), "unknown".into()),
        ("enp65s0f0".into(), "up".into()),
    ];
    let d = no_rdma_device(&s);
    assert!(d.remedy.contains("netdev enp65s0f0"), "{d:?}");
    assert!(!d.remedy.contains("eth0"), "{d:?}");
    s.netdevs.clear();
    assert!(!no_rdma_device(&s).remedy.contains("rdma link add"));
}

#[test]
fn completion_statuses_are_decoded() {
    assert!(diagnose_wc(21, false).cause.contains("IBV_WC_GENERAL_ERR"));
    assert!(diagnose_timeout(true).cause.starts_with("timeout"));
}

#[test]
fn a_refused_pair_request_is_told_apart_from_no_listener() {
    let r =
        diagnose_pair("expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED (status 28)");
    assert!(r.cause.contains("--max-size"), "{r:?}");
    let n =
        diagnose_pair("expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED (status 8)");
    assert!(n.cause.contains("nothing listens"), "{n:?}");
    assert!(!diagnose_pair("something else").remedy.is_empty());
}

/// What has the peer-memory interface agrees with the README (Install) and
/// docs/facts/peer-memory-core.md: not Ubuntu's generic kernels >= 6.8;
/// DOCA-OFED/MLNX_OFED and NVIDIA's kernels do.
#[test]
fn where_the_interface_exists_matches_the_facts() {
    let sys = state("dmabuf-only");
    let d = no_peer_interface(&sys);
    assert!(d.cause.contains("Ubuntu >= 6.8"), "{}", d.cause);
    assert!(
        d.remedy.contains("DOCA-OFED") && d.remedy.contains("NVIDIA's kernels"),
        "{}",
        d.remedy
    );
    assert!(
        !d.remedy.contains("Ubuntu"),
        "Ubuntu kernels are not a remedy: {}",
        d.remedy
    );
    let d = diagnose(Step::RegGpu, libc::EFAULT, &ctx(&sys, 1 << 20, None));
    assert!(d.cause.contains("Ubuntu >= 6.8"), "{}", d.cause);
    assert!(d.remedy.contains("NVIDIA's kernels"), "{}", d.remedy);
}
