//! From a failed step, its errno (or CUDA / completion status) and the
//! system state to the likely cause and what to do about it.

use crate::sysinfo::{DriverFlavour, SysState};
use crate::verbs::{errno_text, wc_status_name};
use serde::Serialize;

/// The verbs step a diagnosis is about (defined with the verbs it names).
pub use crate::verbs::Step;

/// Cause and remedy, both one readable sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnosis {
    pub cause: String,
    pub remedy: String,
}

fn d(cause: impl Into<String>, remedy: impl Into<String>) -> Diagnosis {
    Diagnosis {
        cause: cause.into(),
        remedy: remedy.into(),
    }
}

/// What the diagnosis may look at besides the errno.
pub struct Context<'a> {
    pub sys: &'a SysState,
    /// Bytes being registered.
    pub size: u64,
    /// BAR1 size of the GPU involved, when known.
    pub bar1: Option<u64>,
}

/// How to get a peer-memory client on this host: nvidia-peermem first
/// where the driver installed it; peermem_rs only on a kernel that can run
/// Rust modules.
pub fn load_client(sys: &SysState) -> String {
    let rust_ok = sys.config_rust.as_ref().map(|(on, _)| *on) != Some(false);
    let check =
        "then check that /sys/module/nvidia_peermem (or /sys/kernel/mm/memory_peers/) exists";
    if sys.is_installed("nvidia_peermem") {
        format!(
            "load NVIDIA's client, installed with the driver: `modprobe nvidia-peermem`; {check}"
        )
    } else if rust_ok && sys.is_installed("peermem_rs") {
        format!("load a peer-memory client: `modprobe peermem_rs`; {check}")
    } else if rust_ok {
        format!("load a peer-memory client: `modprobe nvidia-peermem` (ships with the NVIDIA driver) or `modprobe peermem_rs`; {check}")
    } else {
        format!("load NVIDIA's client: `modprobe nvidia-peermem` (ships with the NVIDIA driver; this kernel has no CONFIG_RUST, so peermem_rs cannot run here); {check}")
    }
}

/// The kernel has no peer-memory interface.
pub fn no_peer_interface(sys: &SysState) -> Diagnosis {
    d(
        format!(
            "kernel {} has no peer-memory interface (no ib_register_peer_memory_client: mainline and Ubuntu >= 6.8 kernels)",
            sys.kernel
        ),
        "nothing to fix for dma-buf, which needs no client; peer memory needs DOCA-OFED/MLNX_OFED (its ib_uverbs has the interface) or one of NVIDIA's kernels",
    )
}

/// The RDMA device refuses dma-buf MRs (ibv_reg_dmabuf_mr probe).
pub fn no_dmabuf_mr(sys: &SysState, dev: &str) -> Diagnosis {
    let driver = sys
        .rdma
        .iter()
        .find(|r| r.name == dev)
        .and_then(|r| r.driver.clone())
        .map(|d| format!(" (driver {d})"))
        .unwrap_or_default();
    d(
        format!("RDMA device {dev}{driver} does not support dma-buf memory regions (ibv_reg_dmabuf_mr: EOPNOTSUPP)"),
        "dma-buf MRs need Linux >= 5.12, a NIC driver that implements them (mlx5, irdma, efa, bnxt_re, ...) and rdma-core >= 34; otherwise use peer memory",
    )
}

/// The device has no usable port.
pub fn port_down(sys: &SysState, dev: &str) -> Diagnosis {
    let netdev = sys
        .rdma
        .iter()
        .find(|r| r.name == dev)
        .and_then(|r| r.ports.iter().find_map(|p| p.netdev.clone()));
    let remedy = match netdev {
        Some(n) => format!(
            "bring the link up: `ip link set {n} up` and give {n} an IP address (RoCE needs one for its GID); `rdma link show` must show {dev} ACTIVE"
        ),
        None => format!(
            "bring the link up (cable, switch port, subnet manager for InfiniBand); `rdma link show` must show {dev} ACTIVE"
        ),
    };
    d(
        format!("{dev} has no ACTIVE port with a usable address"),
        remedy,
    )
}

/// A GPU without GPUDirect RDMA (GeForce and some workstation parts).
pub fn no_gdr_on_gpu() -> Diagnosis {
    d(
        "this GPU does not support GPUDirect RDMA (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 0, as on GeForce parts)",
        "use a data-center or professional GPU for GPUDirect RDMA; NCCL falls back to staging through host memory here",
    )
}

/// cuMemCreate memory cannot be registered on this GPU/driver.
pub fn no_gdr_with_vmm() -> Diagnosis {
    d(
        "the driver does not support GPUDirect RDMA on cuMemCreate memory (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 0)",
        "update the NVIDIA driver; meanwhile NCCL_CUMEM_ENABLE=0 makes NCCL allocate with cuMemAlloc",
    )
}

/// A completion that matched no posted work request.
pub fn stray_completion() -> Diagnosis {
    d(
        "the completion queue returned a work request this test never posted (or one twice)",
        "report a bug with `--verbose` output; check dmesg for device errors",
    )
}

fn memlock_small(ctx: &Context) -> bool {
    match ctx.sys.memlock {
        Some(m) if !m.cap_ipc_lock => m.soft.is_some_and(|s| s < ctx.size.saturating_mul(2)),
        _ => false,
    }
}

fn bar1_small(ctx: &Context) -> bool {
    ctx.bar1.is_some_and(|b| ctx.size > b / 2 || b <= 256 << 20)
}

fn bar1_text(ctx: &Context) -> String {
    match ctx.bar1 {
        Some(b) => format!("BAR1 is {}", crate::report::human_bytes(b)),
        None => "BAR1 size unknown".into(),
    }
}

/// Diagnoses a failed verbs call.
pub fn diagnose(step: Step, errno: i32, ctx: &Context) -> Diagnosis {
    use Step::*;
    match (step, errno) {
        // GPU registrations are not charged to RLIMIT_MEMLOCK by the peer
        // and dma-buf paths: BAR1 first.
        (RegGpu | RegDmabuf, libc::ENOMEM | libc::ENOSPC) if bar1_small(ctx) => d(
            format!("GPU BAR1 space exhausted ({})", bar1_text(ctx)),
            "register smaller buffers, free other registrations, or enable a larger BAR1 (Resizable BAR in the BIOS; data-center GPUs expose all memory)",
        ),
        (RegHost | RegGpu | RegDmabuf | CreateQp, libc::ENOMEM) if memlock_small(ctx) => d(
            "RLIMIT_MEMLOCK is too small for this registration",
            "raise the locked-memory limit: `ulimit -l unlimited` or memlock in /etc/security/limits.conf (systemd: LimitMEMLOCK=infinity)",
        ),
        (RegGpu, libc::EFAULT) if ctx.sys.peer_interface == Some(false) => d(
            "this kernel has no peer-memory interface (mainline and Ubuntu >= 6.8 kernels): nothing can pin GPU memory for ibv_reg_mr",
            "use the dma-buf path (ibv_reg_dmabuf_mr with the open NVIDIA kernel modules), or DOCA-OFED/MLNX_OFED or one of NVIDIA's kernels, which have the peer-memory interface",
        ),
        (RegGpu, libc::EFAULT) if !ctx.sys.has_peer_client() => d(
            "no peer-memory client is loaded, so the kernel could not pin the GPU address",
            load_client(ctx.sys),
        ),
        (RegGpu, libc::EFAULT) => d(
            format!(
                "a peer-memory client is loaded ({}) but did not claim this GPU address",
                client_names(ctx.sys)
            ),
            "check dmesg for the client's messages; make sure the client and nvidia.ko come from the same driver install and the buffer is cuMemAlloc memory (not managed memory)",
        ),
        (RegGpu | RegDmabuf, libc::EINVAL) if bar1_small(ctx) => d(
            format!("registration larger than the GPU can map ({})", bar1_text(ctx)),
            "register smaller buffers or enable a larger BAR1 (Resizable BAR)",
        ),
        (RegGpu, libc::EINVAL) => d(
            "the peer-memory client rejected the request (a client built without the peer-memory symbols returns EINVAL; so does a misaligned GPU range)",
            if ctx.sys.config_rust.as_ref().map(|(on, _)| *on) == Some(false) {
                "check dmesg; rebuild the client (nvidia-peermem: reinstall the NVIDIA driver after OFED) against the running kernel/OFED"
            } else {
                "check dmesg; rebuild the client against the running kernel/OFED (nvidia-peermem: reinstall the NVIDIA driver after OFED), or use peermem_rs which binds at run time"
            },
        ),
        (RegGpu, libc::ENOMEM) => d(
            "the GPU driver could not pin or map the pages",
            "retry with a smaller size; check dmesg for NVRM messages",
        ),
        (RegDmabuf, libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT | 524) => d(
            "the RDMA driver or kernel has no dma-buf MR support",
            "use Linux >= 5.12 with a driver that implements dma-buf MRs (mlx5, irdma, efa, bnxt_re) and rdma-core >= 34; or use the peer-memory path",
        ),
        (RegDmabuf, libc::EINVAL) => d(
            "the kernel rejected the dma-buf region (offset/length not page aligned, or the exporter refused the attach)",
            "check dmesg; make sure the GPU buffer is 64 KiB aligned and the NVIDIA open kernel modules are loaded",
        ),
        (RegDmabuf, libc::EBADF) => d(
            "the dma-buf file descriptor is not valid",
            "the export failed silently; update the NVIDIA driver",
        ),
        (RegHost, libc::EFAULT) => d(
            "the kernel could not pin the host buffer",
            "report a bug: host memory from this tool should always pin",
        ),
        (_, libc::ENOMEM) => d(
            "the kernel or device ran out of resources",
            "raise RLIMIT_MEMLOCK (`ulimit -l unlimited`) and close other RDMA users",
        ),
        (_, libc::EPERM | libc::EACCES) => d(
            "permission denied by the RDMA device",
            "run as a user with read/write access to /dev/infiniband/uverbs* and rdma_cm (`peermem-probe doctor` shows their modes), or as root",
        ),
        (OpenDevice, _) => d(
            "the RDMA device could not be opened",
            "check that ib_uverbs is loaded and /dev/infiniband/uverbs* exist (`peermem-probe doctor`)",
        ),
        (ConnectQp, libc::EINVAL) => d(
            "the device refused the QP attributes (wrong GID index, MTU or port)",
            "check `ibv_devinfo -v` for an active port and a valid GID; for RoCE the netdev must have an IP address",
        ),
        (_, e) => d(
            format!("the call failed with {}", errno_text(e)),
            "check dmesg and `ibv_devinfo -v` for the device state",
        ),
    }
}

fn client_names(sys: &SysState) -> String {
    let mut names: Vec<String> = sys.peers.iter().map(|p| p.name.clone()).collect();
    for m in sys.peer_modules() {
        names.push(m.to_string());
    }
    names.join(", ")
}

/// A transfer that got no completion at all within the timeout.
pub fn diagnose_timeout(gpu_involved: bool) -> Diagnosis {
    d(
        "timeout: the device neither completed nor failed the work request in time",
        if gpu_involved {
            "check dmesg for NVRM/Xid and IOMMU faults and the device state (`rdma resource show qp`); on a slow or emulated device raise --timeout"
        } else {
            "check dmesg and the device state (`rdma resource show qp`); on a slow or emulated device raise --timeout"
        },
    )
}

/// Diagnoses a completion with an error status (`ibv_wc_status`).
pub fn diagnose_wc(status: u32, gpu_involved: bool) -> Diagnosis {
    match status {
        12 => d(
            "transport retry counter exceeded: the packets never reached the peer",
            "check that the port is ACTIVE, the GID index is right and, for RoCE, that the netdev is up with an address and the MTU matches",
        ),
        13 => d(
            "RNR retry exceeded: the peer had no receive posted",
            "the peer stopped early; rerun both sides",
        ),
        4 | 8 | 10 | 11 if gpu_involved => d(
            "the NIC could not DMA to/from the GPU memory (protection or access error)",
            "check dmesg for IOMMU (DMAR/AMD-Vi) faults; run `peermem-probe doctor` for ACS and IOMMU on the PCIe path (iommu=pt, ACS off between GPU and NIC)",
        ),
        4 | 8 | 10 | 11 => d(
            "protection or access error on a memory region",
            "report a bug: the keys and access flags of this tool should match",
        ),
        5 => d(
            "the work request was flushed: the QP had already failed",
            "look at the first error of the run",
        ),
        _ => d(
            format!("the completion failed with {}", wc_status_name(status)),
            "check dmesg and the device counters (`rdma statistic`)",
        ),
    }
}

/// When every byte arrived but some differ.
pub fn diagnose_mismatch(gpu_involved: bool) -> Diagnosis {
    if gpu_involved {
        d(
            "the RDMA write completed but the GPU memory does not hold the data: P2P writes were lost or landed elsewhere",
            "run `peermem-probe doctor`: ACS redirect or IOMMU translation between GPU and NIC, or a CPU root complex without P2P forwarding, are the usual causes",
        )
    } else {
        d(
            "the RDMA write completed but the destination differs",
            "check dmesg for device errors; the RDMA device corrupts data",
        )
    }
}

/// Diagnoses a CUDA driver API error from its CUresult value.
pub fn diagnose_cuda(code: u32, during: &str, sys: &SysState) -> Diagnosis {
    match code {
        100 => d(
            "the CUDA driver sees no GPU",
            "check `nvidia-smi`; the GPU may be bound to another driver (vfio-pci) or hidden by CUDA_VISIBLE_DEVICES",
        ),
        35 => d(
            "libcuda is older than the kernel driver expects, or the two do not match",
            "install matching NVIDIA user-space and kernel packages (same version)",
        ),
        999 | 3 => d(
            "the CUDA driver failed to initialise",
            "check `nvidia-smi` and dmesg for NVRM errors; reload the nvidia modules",
        ),
        2 => d(
            format!("GPU out of memory during {during}"),
            "use a smaller --size or free GPU memory",
        ),
        801 if during.contains("dma-buf") => {
            let flavour = match sys.nvidia.as_ref().map(|n| n.flavour) {
                Some(DriverFlavour::Proprietary) => "the proprietary kernel module is loaded; ",
                _ => "",
            };
            d(
                format!("the GPU driver cannot export dma-buf ({flavour}dma-buf export needs the open kernel modules and Linux >= 5.12)"),
                "install the open NVIDIA kernel modules (nvidia-open), or use the peer-memory path",
            )
        }
        _ => d(
            format!("CUDA error {code} during {during}"),
            "check `nvidia-smi` and dmesg",
        ),
    }
}

/// CUDA libraries are missing.
pub fn no_libcuda() -> Diagnosis {
    d(
        "libcuda.so (the NVIDIA driver's user-space library) is not installed",
        "install the NVIDIA driver's CUDA library (e.g. libcuda1 / nvidia-driver-libs), or run `peermem-probe check --host-only`",
    )
}

/// No libibverbs.
pub fn no_libibverbs(err: &str) -> Diagnosis {
    d(
        format!("libibverbs.so.1 cannot be loaded ({err})"),
        "install rdma-core's user-space libraries (libibverbs1, librdmacm1, ibverbs-providers)",
    )
}

/// No RDMA device at all; the soft-RoCE example names a real netdev.
pub fn no_rdma_device(sys: &SysState) -> Diagnosis {
    let netdev = sys
        .netdevs
        .iter()
        .find(|(n, state)| n != "lo" && state == "up")
        .or_else(|| sys.netdevs.iter().find(|(n, _)| n != "lo"))
        .map(|(n, _)| n.clone());
    let soft = match netdev {
        Some(n) => format!("; for a software test, `rdma link add rxe0 type rxe netdev {n}`"),
        None => String::new(),
    };
    d(
        "no RDMA device is visible to libibverbs",
        format!("load the NIC's RDMA driver (e.g. `modprobe mlx5_ib`) and ib_uverbs{soft}"),
    )
}

/// Any failure of `pair` that has no more specific diagnosis.
pub fn diagnose_pair(msg: &str) -> Diagnosis {
    diagnose_cm(msg).unwrap_or_else(|| {
        if msg.contains("--max-size") {
            d(
                "the client asked for a buffer larger than this server allows",
                "use a smaller --size on the client, or a larger --max-size on the server",
            )
        } else if msg.contains("libcuda") || msg.contains("cu") && msg.contains("failed") {
            d(
                "the GPU buffer could not be set up",
                "check `nvidia-smi`; run `peermem-probe check` on this host first",
            )
        } else {
            d(
                "the test between the hosts failed at this step",
                "run `peermem-probe check` and `peermem-probe doctor` on both hosts, then rerun with --verbose",
            )
        }
    })
}

/// Diagnoses a failed RDMA CM step from its message (the event names
/// librdmacm reports, or a timeout).
pub fn diagnose_cm(msg: &str) -> Option<Diagnosis> {
    // IB CM reject reason 28: consumer-defined, i.e. the server's own
    // rdma_reject (pair's server refuses requests over its --max-size).
    if msg.contains("REJECTED (status 28)") {
        Some(d(
            "the server refused this request (pair's server refuses a --size over its --max-size)",
            "read the server's output for its reason; use a smaller --size or start the server with a larger --max-size",
        ))
    } else if msg.contains("REJECTED") {
        Some(d(
            "the peer refused the connection: nothing listens on that address and port, or the server refused the requested --size (over its --max-size)",
            "start `peermem-probe pair --listen` on the peer first, with the same --port; if it runs, its output says why it refused",
        ))
    } else if msg.contains("ADDR_ERROR")
        || msg.contains("ROUTE_ERROR")
        || msg.contains("rdma_resolve_addr")
    {
        Some(d(
            "no RDMA device serves a route to this address",
            "use an address reachable through a netdev that has an RDMA device (`rdma link show`), or pick the local side with --bind",
        ))
    } else if msg.contains("UNREACHABLE")
        || msg.contains("no RDMA CM event")
        || msg.contains("did not answer")
    {
        Some(d(
            "the peer did not answer",
            "check IP connectivity and firewalls (RoCE v2 uses UDP port 4791) and that both ports are ACTIVE; is the peer still running?",
        ))
    } else if msg.contains("rdma_bind_addr") {
        Some(d(
            "cannot listen on that address",
            "listen on an address of a netdev with an RDMA device, or on 0.0.0.0; another listener may hold the port",
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
