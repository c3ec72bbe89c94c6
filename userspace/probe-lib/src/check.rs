//! `check`: for each RDMA device (and GPU), register memory, connect a
//! fresh loopback RC pair per path, RDMA-WRITE, flush and verify every
//! byte; one verdict per mechanism (peer memory, dma-buf, host memory)
//! and the overall answer.

mod gpu;

use crate::cuda::{self, Allocation, CudaState, Gpu};
use crate::loopback::{Loopback, PortChoice, SetupError};
use crate::memory::{Buffer, HostBuf};
use crate::remedy::{self, Context as RCtx, Diagnosis, Step};
use crate::report::{Status, SCHEMA_VERSION};
use crate::root::SysRoot;
use crate::sysinfo::SysState;
use crate::verbs;
use crate::verdict::{self, Mechanism, MechanismVerdict, Overall, RowView};
use serde::Serialize;
use std::time::Duration;

/// Which registration paths to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    All,
    PeerMem,
    DmaBuf,
}

#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub size: usize,
    pub host_only: bool,
    pub devices: Vec<String>,
    pub gpus: Vec<i32>,
    pub only: Only,
    /// Test cuMemAlloc and/or cuMemCreate memory.
    pub allocations: Vec<Allocation>,
    pub timeout: Duration,
    pub seed: u64,
    /// Test hook: run one extra host->host write with a wrong rkey first,
    /// to show a failed path is reported (decoded completion status) and
    /// does not poison the next one.
    pub inject_bad_rkey: bool,
}

/// One path's outcome: a JSON row and a table row.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub rdma_device: Option<String>,
    pub gpu: Option<i32>,
    pub mechanism: Mechanism,
    /// How the GPU memory was allocated (None: host memory, or no GPU).
    pub allocation: Option<Allocation>,
    /// "host->gpu", ...; None for a row standing for every path of a
    /// mechanism that could not run.
    pub path: Option<String>,
    pub status: Status,
    pub bytes: u64,
    pub verified_bytes: u64,
    pub micros: Option<u64>,
    pub failed_step: Option<String>,
    pub error: Option<String>,
    pub errno: Option<i32>,
    /// Completion status name and provider code of a failed transfer.
    pub wc_status: Option<String>,
    pub vendor_err: Option<u32>,
    /// dma-buf rows: "pcie" when the PCIe mapping flag was accepted.
    pub dma_buf_mapping: Option<&'static str>,
    pub cause: Option<String>,
    pub remedy: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CudaSummary {
    pub available: bool,
    pub driver_version: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    pub name: String,
    pub port: Option<PortChoice>,
    /// ibv_reg_dmabuf_mr probed as NCCL does (fd -1): None when the
    /// device could not be opened.
    pub dma_buf_mr_supported: Option<bool>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub version: &'static str,
    pub status: Status,
    pub exit_code: i32,
    pub verdict: Overall,
    pub mechanisms: Vec<MechanismVerdict>,
    pub host_only: bool,
    pub size: u64,
    pub cuda: CudaSummary,
    pub gpus: Vec<Gpu>,
    pub rdma_devices: Vec<DeviceSummary>,
    pub results: Vec<PathResult>,
}

pub const PATHS_GPU: [&str; 3] = ["host->gpu", "gpu->host", "gpu->gpu"];

impl PathResult {
    pub fn new(dev: Option<&str>, gpu: Option<i32>, mech: Mechanism, bytes: usize) -> PathResult {
        PathResult {
            rdma_device: dev.map(str::to_string),
            gpu,
            mechanism: mech,
            allocation: None,
            path: None,
            status: Status::Pass,
            bytes: bytes as u64,
            verified_bytes: 0,
            micros: None,
            failed_step: None,
            error: None,
            errno: None,
            wc_status: None,
            vendor_err: None,
            dma_buf_mapping: None,
            cause: None,
            remedy: None,
        }
    }
    pub fn path(mut self, p: &str) -> PathResult {
        self.path = Some(p.to_string());
        self
    }
    pub fn alloc(mut self, a: Option<Allocation>) -> PathResult {
        self.allocation = a;
        self
    }
    pub fn fail(
        mut self,
        status: Status,
        step: &str,
        error: String,
        errno: Option<i32>,
        d: Diagnosis,
    ) -> PathResult {
        self.status = status;
        self.failed_step = Some(step.to_string());
        self.error = Some(error);
        self.errno = errno;
        self.cause = Some(d.cause);
        self.remedy = Some(d.remedy);
        self
    }
    /// A mechanism that does not exist here: not a failure.
    pub fn not_available(mut self, d: Diagnosis) -> PathResult {
        self.status = Status::NotAvailable;
        self.cause = Some(d.cause);
        self.remedy = Some(d.remedy);
        self
    }
}

/// The CUDA state in a few words, for the trace.
fn cuda_word(s: &CudaState) -> String {
    match s {
        CudaState::Missing => "libcuda.so not found".into(),
        CudaState::Broken(e) => format!("unusable: {e}"),
        CudaState::Ready {
            driver_version: v,
            gpus,
        } => format!("driver {}, {} GPU(s)", driver_version(*v), gpus.len()),
    }
}

fn driver_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Why a mechanism cannot run, known before any GPU memory is touched.
pub(crate) struct Availability {
    pub peer: Option<Diagnosis>,
    pub dmabuf: Option<Diagnosis>,
}

/// The mechanisms' availability on device `dev` from the system facts and
/// the NIC's dma-buf MR probe.
pub(crate) fn availability(sys: &SysState, dev: &str, dmabuf_mr: Option<bool>) -> Availability {
    let peer = if sys.peer_interface == Some(false) {
        Some(remedy::no_peer_interface(sys))
    } else {
        None
    };
    let dmabuf = match dmabuf_mr {
        Some(false) => Some(remedy::no_dmabuf_mr(sys, dev)),
        _ => None,
    };
    Availability { peer, dmabuf }
}

/// Runs `check` on the live system.
pub fn run(opts: &CheckOptions) -> CheckReport {
    let root = SysRoot::live();
    let sys = SysState::gather(&root);
    let mut report = CheckReport {
        schema_version: SCHEMA_VERSION,
        command: "check",
        version: env!("CARGO_PKG_VERSION"),
        status: Status::Pass,
        exit_code: 0,
        verdict: verdict::overall(&[], opts.host_only),
        mechanisms: Vec::new(),
        host_only: opts.host_only,
        size: opts.size as u64,
        cuda: CudaSummary {
            available: false,
            driver_version: None,
            error: None,
        },
        gpus: Vec::new(),
        rdma_devices: Vec::new(),
        results: Vec::new(),
    };
    crate::trace!(
        "check: kernel {}, {} GPU(s) and {} RDMA device(s) in sysfs",
        sys.kernel,
        sys.gpus.len(),
        sys.rdma.len()
    );
    // CUDA first: its absence is reported on every GPU path.
    let mut cuda_err: Option<(String, Diagnosis)> = None;
    if !opts.host_only {
        let cu = cuda::state();
        crate::trace!("check: CUDA: {}", cuda_word(cu));
        match cu {
            CudaState::Missing => {
                report.cuda.error = Some("libcuda.so not found".into());
                cuda_err = Some(("libcuda.so not found".into(), remedy::no_libcuda()));
            }
            CudaState::Broken(e) => {
                report.cuda.error = Some(e.to_string());
                cuda_err = Some((e.to_string(), remedy::diagnose_cuda(e.code, e.call, &sys)));
            }
            CudaState::Ready {
                driver_version: v,
                gpus,
            } => {
                report.cuda.available = true;
                report.cuda.driver_version = Some(driver_version(*v));
                report.gpus = gpus
                    .iter()
                    .filter(|g| opts.gpus.is_empty() || opts.gpus.contains(&g.ordinal))
                    .cloned()
                    .collect();
                if report.gpus.is_empty() {
                    let msg = if gpus.is_empty() {
                        "CUDA reports no GPU"
                    } else {
                        "no GPU matches --gpu"
                    };
                    cuda_err = Some((
                        msg.into(),
                        remedy::diagnose_cuda(100, "cuDeviceGetCount", &sys),
                    ));
                }
            }
        }
    }
    let listed = verbs::device_names();
    crate::trace!("check: libibverbs lists {listed:?}");
    let (devices, no_device) = match listed {
        Err(e) => {
            let d = remedy::no_libibverbs(&e);
            (Vec::new(), Some((None, "load libibverbs", e, d)))
        }
        Ok(names) if names.is_empty() => (
            Vec::new(),
            Some((
                None,
                "ibv_get_device_list",
                "no RDMA devices".to_string(),
                remedy::no_rdma_device(&sys),
            )),
        ),
        Ok(names) => {
            let picked: Vec<String> = names
                .iter()
                .filter(|n| opts.devices.is_empty() || opts.devices.contains(n))
                .cloned()
                .collect();
            let none = picked.is_empty().then(|| {
                (
                    Some(opts.devices.join(",")),
                    "ibv_get_device_list",
                    format!("no such RDMA device (there are: {})", names.join(", ")),
                    remedy::no_rdma_device(&sys),
                )
            });
            (picked, none)
        }
    };
    if let Some((dev, step, err, d)) = no_device {
        untested_without_device(opts, dev.as_deref(), step, &err, &d, &mut report);
    }
    let gpus = report.gpus.clone();
    for dev in &devices {
        check_device(
            &root,
            &sys,
            opts,
            dev,
            &gpus,
            cuda_err.as_ref(),
            &mut report,
        );
    }
    finish(&mut report);
    report
}

/// No RDMA device to test on: the host row and, unless `--host-only`, one
/// row per GPU mechanism, all "not tested" with the cause, so the GPU rows
/// are shown rather than left out.
fn untested_without_device(
    opts: &CheckOptions,
    dev: Option<&str>,
    step: &str,
    err: &str,
    d: &Diagnosis,
    report: &mut CheckReport,
) {
    let mut mechs = vec![Mechanism::Host];
    if !opts.host_only {
        mechs.extend(requested(opts.only));
    }
    for m in mechs {
        let err = match m {
            Mechanism::Host => err.to_string(),
            _ => format!("not run: no RDMA device to register GPU memory with ({err})"),
        };
        let row = PathResult::new(dev, None, m, opts.size).fail(
            Status::Untested,
            step,
            err,
            None,
            d.clone(),
        );
        report.results.push(row);
    }
}

/// The GPU mechanisms `--only` asks for.
fn requested(only: Only) -> Vec<Mechanism> {
    match only {
        Only::All => vec![Mechanism::PeerMemory, Mechanism::DmaBuf],
        Only::PeerMem => vec![Mechanism::PeerMemory],
        Only::DmaBuf => vec![Mechanism::DmaBuf],
    }
}

/// Computes the mechanism verdicts, the overall answer and exit code.
pub fn finish(report: &mut CheckReport) {
    let rows: Vec<RowView> = report
        .results
        .iter()
        .map(|r| RowView {
            mechanism: r.mechanism,
            rdma_device: r.rdma_device.as_deref(),
            status: r.status,
            cause: r.cause.as_deref(),
            remedy: r.remedy.as_deref(),
        })
        .collect();
    report.mechanisms = verdict::per_mechanism(&rows);
    report.verdict = verdict::overall(&report.mechanisms, report.host_only);
    report.exit_code = report.verdict.exit_code;
    report.status = crate::report::overall(report.exit_code);
}

fn check_device(
    root: &SysRoot,
    sys: &SysState,
    opts: &CheckOptions,
    dev: &str,
    gpus: &[Gpu],
    cuda_err: Option<&(String, Diagnosis)>,
    report: &mut CheckReport,
) {
    let size = opts.size;
    let ctx_r = RCtx {
        sys,
        size: size as u64,
        bar1: None,
    };
    let mechs: Vec<Mechanism> = if opts.host_only {
        vec![]
    } else {
        requested(opts.only)
    };
    // Nothing can run on this device: one row per mechanism says why.
    let fail_all =
        |report: &mut CheckReport, step: &str, err: String, errno: Option<i32>, d: Diagnosis| {
            for m in std::iter::once(Mechanism::Host).chain(mechs.iter().copied()) {
                let row = PathResult::new(Some(dev), None, m, size).fail(
                    Status::Fail,
                    step,
                    err.clone(),
                    errno,
                    d.clone(),
                );
                report.results.push(row);
            }
        };
    let mut summary = DeviceSummary {
        name: dev.into(),
        port: None,
        dma_buf_mr_supported: None,
        error: None,
    };
    let ctx = match verbs::Context::open(dev) {
        Ok(c) => c,
        Err(e) => {
            summary.error = Some(e.clone());
            report.rdma_devices.push(summary);
            let d = remedy::diagnose(Step::OpenDevice, libc::ENODEV, &ctx_r);
            return fail_all(report, "ibv_open_device", e, None, d);
        }
    };
    let lb = match Loopback::new(root, &ctx) {
        Ok(l) => l,
        Err(SetupError::Port(e)) => {
            summary.error = Some(e.clone());
            report.rdma_devices.push(summary);
            let d = remedy::port_down(sys, dev);
            return fail_all(report, "port", e, None, d);
        }
        Err(SetupError::Verbs(step, e)) => {
            summary.error = Some(e.to_string());
            report.rdma_devices.push(summary);
            let d = remedy::diagnose(step, e.errno, &ctx_r);
            return fail_all(report, e.call, e.to_string(), Some(e.errno), d);
        }
    };
    let dmabuf_mr = lb.pd.dmabuf_mr_supported();
    crate::trace!("{dev}: ibv_reg_dmabuf_mr(fd -1) probe: supported = {dmabuf_mr}");
    summary.port = Some(lb.port.clone());
    summary.dma_buf_mr_supported = Some(dmabuf_mr);
    report.rdma_devices.push(summary);

    // Host baseline: proves the RDMA device itself moves and lands data.
    let mut h1 = Buffer::Host(HostBuf::new(size));
    let mut h2 = Buffer::Host(HostBuf::new(size));
    let base = PathResult::new(Some(dev), None, Mechanism::Host, size).path("host->host");
    let row = match (lb.pd.reg_mr(h1.addr(), size), lb.pd.reg_mr(h2.addr(), size)) {
        (Ok(m1), Ok(m2)) => {
            if opts.inject_bad_rkey {
                let bad =
                    PathResult::new(Some(dev), None, Mechanism::Host, size).path("host->host");
                let bad = gpu::transfer_keyed(
                    &lb,
                    opts,
                    bad,
                    (&mut h1, &m1),
                    (&mut h2, &m2),
                    &ctx_r,
                    1,
                    0x5a5a,
                );
                report.results.push(bad);
            }
            gpu::transfer(&lb, opts, base, (&mut h1, &m1), (&mut h2, &m2), &ctx_r, 0)
        }
        (Err(e), _) | (_, Err(e)) => base.fail(
            Status::Fail,
            e.call,
            e.to_string(),
            Some(e.errno),
            remedy::diagnose(Step::RegHost, e.errno, &ctx_r),
        ),
    };
    report.results.push(row);
    let avail = availability(sys, dev, Some(dmabuf_mr));
    let blocked = |m: Mechanism| match m {
        Mechanism::PeerMemory => avail.peer.clone(),
        Mechanism::DmaBuf => avail.dmabuf.clone(),
        Mechanism::Host => None,
    };
    if let Some((err, d)) = cuda_err {
        for m in &mechs {
            let row = PathResult::new(Some(dev), None, *m, size);
            report.results.push(match blocked(*m) {
                Some(na) => row.not_available(na),
                None => row.fail(Status::Untested, "CUDA", err.clone(), None, d.clone()),
            });
        }
        return;
    }
    for g in gpus {
        gpu::check_gpu(sys, opts, &lb, g, &mechs, &blocked, &mut h1, report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn availability_from_the_kernel_and_the_nic_probe() {
        let s = SysState::gather(&fixture("dmabuf-only"));
        assert_eq!(s.peer_interface, Some(false));
        let a = availability(&s, "mlx5_0", Some(true));
        let peer = a.peer.expect("no interface: peer memory not available");
        assert!(
            peer.cause
                .contains("kernel 6.12.0-test has no peer-memory interface"),
            "{peer:?}"
        );
        assert!(a.dmabuf.is_none(), "the NIC takes dma-buf MRs");
        let a = availability(&s, "mlx5_0", Some(false));
        let d = a.dmabuf.expect("NIC refuses dma-buf MRs");
        assert!(
            d.cause
                .contains("mlx5_0 (driver mlx5_core) does not support dma-buf"),
            "{d:?}"
        );
        // DOCA-OFED: the interface exists, nothing is ruled out up front.
        let s = SysState::gather(&fixture("peermem-loaded"));
        assert_eq!(s.peer_interface, Some(true));
        let a = availability(&s, "mlx5_0", None);
        assert!(a.peer.is_none() && a.dmabuf.is_none());
    }
}
